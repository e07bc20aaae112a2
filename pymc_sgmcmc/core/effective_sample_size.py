"""The bulk effective sample size of every coordinate of a chain at once.

ArviZ's ``array_stats.ess(..., method="bulk")`` computes it coordinate by coordinate in a
Python loop, about 1 ms each: measured, 3.9 s of one chain's tuning on a hierarchy of 2,000
groups (three windows of the windowed mass adaptation, 4,014 coordinates), and it grows
with the groups. :func:`bulk_ess` is the same estimator (Vehtari, Gelman, Simpson,
Carpenter and Bürkner, "Rank-normalization, folding, and localization: an improved R-hat
for assessing convergence of MCMC") written over all coordinates at once: split chains,
rank-normalised, FFT autocovariances and Geyer's initial monotone sequence as running
minima of the lag pairs. It is written here, not reused, for that loop; tests check it
against ArviZ's to rounding.
"""

from __future__ import annotations

import numpy as np
import scipy.fft
import scipy.special


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS of each coordinate of one chain's ``draws``, shape ``(n_draws, D)``.

    As ArviZ computes it for one chain: the chain split in two halves (the middle draw
    dropped where ``n_draws`` is odd), ranks over both halves normal-transformed
    (Blom's offset 3/8), then :func:`split_chains_ess`. NaN where fewer than 4 draws.
    """
    draws = np.asarray(draws, dtype=float)
    if draws.shape[0] < 4:
        return np.full(draws.shape[1], np.nan)
    halves = _halves(draws)
    ranks = average_ranks(halves.reshape(-1, draws.shape[1]))
    normal = scipy.special.ndtri((ranks - 3 / 8) / (ranks.shape[0] + 1 / 4))
    return split_chains_ess(normal.reshape(halves.shape))


def mean_ess(draws: np.ndarray) -> np.ndarray:
    """ESS for the mean of each coordinate of one chain's ``draws``, shape ``(n_draws, D)``.

    ArviZ's ``method="mean"``: the chain split in two halves (the middle draw dropped
    where ``n_draws`` is odd), then :func:`split_chains_ess` on the values themselves,
    not their ranks. NaN where fewer than 4 draws. Used by the end-of-chain checks of a
    worker process, which would otherwise import ArviZ's statistics (and SciPy's
    ``stats`` with them: ~1.8 s) before it could hand back its last draw.
    """
    draws = np.asarray(draws, dtype=float)
    if draws.shape[0] < 4:
        return np.full(draws.shape[1], np.nan)
    return split_chains_ess(_halves(draws))


def _halves(draws: np.ndarray) -> np.ndarray:
    """One chain split in two, ``(2, n_draws // 2, D)``, as ArviZ splits it (odd: middle out)."""
    half = draws.shape[0] // 2
    return np.stack([draws[:half], draws[draws.shape[0] - half :]])


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks (from 1) of each column of ``values``, ties given their average rank.

    ``scipy.stats.rankdata(values, method="average", axis=0)``, about 4x faster on
    columns of a chain's draws (where a rejected proposal repeats a value, ties are
    common): one sort of each column, each run of equal values found by its ends.
    """
    columns = np.ascontiguousarray(values.T)  # each column's values contiguous
    n = columns.shape[1]
    order = np.argsort(columns, axis=1, kind="stable")
    ordered = np.take_along_axis(columns, order, axis=1)
    position = np.broadcast_to(np.arange(n), columns.shape)
    starts = np.ones(columns.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones(columns.shape, dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, position, n - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(columns.shape)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks.T


def split_chains_ess(chains: np.ndarray) -> np.ndarray:
    """ESS of each coordinate of ``chains``, shape ``(n_chains, n_draws, D)``.

    Geyer's initial positive sequence stops at the first pair of autocorrelations
    ``P_k = ρ_2k + ρ_2k+1`` that is not positive; his initial monotone sequence replaces
    each pair by the running minimum of those before it (the loop in ArviZ sets a pair
    that rises to the one before it, which is the same). ``τ = −1 + 2 Σ_{k<K} P_k + ρ_2K``
    (the last even lag where positive), at least ``1/log10(MN)``; ESS ``= MN/τ``.
    """
    n_chains, n_draws, dim = chains.shape
    total = n_chains * n_draws
    constant = np.ptp(chains.reshape(total, dim), axis=0) < np.finfo(float).resolution
    centred = chains - chains.mean(axis=1, keepdims=True)
    length = scipy.fft.next_fast_len(2 * n_draws)
    spectrum = scipy.fft.rfft(centred, n=length, axis=1)
    autocovariance = scipy.fft.irfft(spectrum * np.conjugate(spectrum), n=length, axis=1)
    autocovariance = autocovariance[:, :n_draws] / n_draws
    mean_autocovariance = autocovariance.mean(axis=0)  # (n_draws, D)
    mean_var = mean_autocovariance[0] * n_draws / (n_draws - 1.0)
    var_plus = mean_var * (n_draws - 1.0) / n_draws
    if n_chains > 1:
        var_plus = var_plus + np.var(chains.mean(axis=1), axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = 1.0 - (mean_var - mean_autocovariance) / var_plus
    rho[0] = 1.0
    # Pairs k = 0, 1, ...: ArviZ's loop computes pair k (t = 2k − 1) while t < n − 3.
    n_pairs = max(1, -(-(n_draws - 2) // 2))  # pairs 0 .. n_pairs − 1
    even = rho[0 : 2 * n_pairs : 2]
    odd = rho[1 : 2 * n_pairs : 2]
    pairs = even + odd  # (n_pairs, D)
    # K: the first pair k ≥ 1 that is not positive (the loop computes it, then stops);
    # pair 0 not positive (or no pair after it) stops before any.
    index = np.arange(n_pairs)[:, None]
    stops = (pairs <= 0) & (index >= 1)
    last = np.where(stops.any(axis=0), np.argmax(stops, axis=0), n_pairs - 1)
    last = np.where(pairs[0] > 0, last, 0)
    monotone = np.minimum.accumulate(pairs, axis=0)
    summed = np.where(index < last, monotone, 0.0).sum(axis=0)
    columns = np.arange(dim)
    last_even = even[last, columns]
    # ρ_2K as the loop leaves it: kept where the pair was ≥ 0 or the lag positive.
    kept = (pairs[last, columns] >= 0) | (last_even > 0)
    tail = np.where(last == 0, 1.0, np.where(kept, last_even, 0.0))
    tau = -1.0 + 2.0 * summed + tail
    tau = np.maximum(tau, 1.0 / np.log10(total))
    ess = total / tau
    ess = np.where(np.isnan(rho).any(axis=0), np.nan, ess)
    return np.where(constant, float(total), ess)
