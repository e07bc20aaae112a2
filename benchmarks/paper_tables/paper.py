"""The numbers published in the paper, printed beside ours."""

from __future__ import annotations

# The paper's numbers: RMSE of μ, RMSE of τ, ms per iteration (Table 1); RMSE of W₀ and
# W₁ (Table 2); ms per iteration on the synthetic, Australian and Heart sets (Table 3).
PAPER_TABLE1 = {
    "HMC": (0.0196, 0.0197, 0.417),
    "HMC-EM": (0.0115, 0.0104, 0.423),
    "SGHMC": (0.1590, 0.1646, 0.133),
    "SGHMC-EM": (0.0713, 0.2243, 0.132),
    "SGNHT": (0.0344, 0.0335, 0.148),
    "SGNHT-EM": (0.0317, 0.0289, 0.148),
}
PAPER_TABLE2 = {
    "HMC": (0.0456, 0.1290),
    "HMC-EM": (0.0145, 0.0851),
    "SGHMC": (0.2812, 0.2717),
    "SGHMC-EM": (0.2804, 0.2583),
    "SGNHT": (0.2035, 0.1921),
    "SGNHT-EM": (0.1983, 0.1729),
}
PAPER_TABLE3 = {
    "HMC": (1.435, 0.987, 0.791),
    "HMC-EM": (1.428, 0.970, 0.799),
    "SGHMC": (0.200, 0.136, 0.112),
    "SGHMC-EM": (0.203, 0.141, 0.131),
    "SGNHT": (0.302, 0.270, 0.166),
    "SGNHT-EM": (0.306, 0.251, 0.175),
}

# The Nosé–Poincaré and Riemannian rows of the same tables (Table 3: synthetic,
# Australian, Heart).
PAPER_NP_TABLE1 = {
    "SG-NPHMC": (0.0326, 0.0433, 0.514),
    "SG-NPHMC-EM": (0.0274, 0.0354, 0.498),
    "SGR-NPHMC": (0.0240, 0.0308, 3.145),
    "RHMC": (0.0111, 0.0089, 5.748),
}
PAPER_NP_TABLE2 = {
    "SG-NPHMC": (0.4945, 0.4263),
    "SG-NPHMC-EM": (0.0990, 0.4229),
    "SGR-NPHMC": (0.1901, 0.1925),
    "RHMC": (0.0091, 0.0574),
}
PAPER_NP_TABLE3 = {
    "SG-NPHMC": (0.731, 0.512, 0.403),
    "SG-NPHMC-EM": (0.803, 0.525, 0.426),
    "SGR-NPHMC": (6.720, 4.568, 3.676),
    "RHMC": (1550.0, 367.0, 209.0),
}
PAPER_TABLE4 = {
    "SGHMC": (759, 0.047),
    "SGHMC-EM": (738, 0.047),
    "SGNHT": (757, 0.045),
    "SGNHT-EM": (719, 0.045),
    "SGR-NPHMC": (723, 0.410),
    "SG-NPHMC": (714, 0.049),
    "SG-NPHMC-EM": (712, 0.049),
}
"""The paper's Table 4 on 20-Newsgroups: test perplexity and seconds per iteration."""
