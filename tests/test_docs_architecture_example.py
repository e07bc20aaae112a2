"""The worked example of docs/architecture.md ("How to add a sampler") runs and is right.

The page's two code blocks (a kernel file and its public class) are executed as they are
written there, and the new sampler is checked against an exact Gaussian: the page must
stay true to the code.
"""

import math
import re
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from helpers import sample

from pymc_sgmcmc.sampling.step import StochasticGradientStep

PAGE = Path(__file__).parents[1] / "docs" / "architecture.md"


def example_blocks():
    text = PAGE.read_text()
    section = text[text.index("## How to add a sampler") :]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[:2]


def test_the_worked_example_adds_a_working_sampler():
    kernel_code, class_code = example_blocks()
    module: dict = {}
    exec(compile(kernel_code, "fpsgld.py", "exec"), module)  # noqa: S102 - the page's code
    # The page's @register, recorded here rather than in the package's SAMPLERS (which
    # other tests in this process read).
    registered = []
    namespace = {
        "StochasticGradientStep": StochasticGradientStep,
        "fpsgld": type("M", (), module),
        "register": lambda cls: registered.append(cls) or cls,
    }
    exec(compile(class_code, "samplers.py", "exec"), namespace)  # noqa: S102
    fpsgld_class = namespace["FPSGLD"]
    assert registered == [fpsgld_class]
    assert fpsgld_class.kernel.name == "fpsgld"

    # theta ~ N(0, diag(1, 4)), preconditioned by M⁻¹ = diag(1, 4): every direction then
    # relaxes alike. With ε = 0.1 the chain's stationary variance is the exact one over
    # (1 − ε/2): sd × 1.026, the discretisation bias allowed below.
    sd = np.array([1.0, 2.0])
    with pm.Model() as model:
        pm.Normal("theta", 0.0, sd, shape=2)
        step = fpsgld_class(step_size=0.1, n_steps=5, mass=1.0 / sd**2)
    idata = sample(step, model, draws=2000, tune=200, chains=2, random_seed=4)
    theta = idata.posterior["theta"].values.reshape(-1, 2)
    ess = az.ess(idata)["theta"].values
    expected_sd = sd / math.sqrt(1 - 0.1 / 2)
    for k in range(2):
        # 4 Monte Carlo standard errors of the mean and of the sd (≈ sd/√(2 ESS)).
        assert abs(theta[:, k].mean()) < 4 * sd[k] / math.sqrt(ess[k])
        assert abs(theta[:, k].std() / expected_sd[k] - 1) < 4 / math.sqrt(2 * ess[k])
