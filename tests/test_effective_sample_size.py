"""The vectorised bulk and mean ESS equal ArviZ's, coordinate by coordinate."""

import numpy as np
import pytest
import scipy.stats
from arviz_stats.base import array_stats

from pymc_sgmcmc.core.effective_sample_size import average_ranks, bulk_ess, mean_ess


def autoregressive(rng, n_draws, phi, dim=12):
    """AR(1) chains, ``x_t = φ x_{t−1} + ε_t``: antithetic for φ < 0, sticky near 1."""
    noise = rng.normal(size=(n_draws, dim))
    draws = np.empty_like(noise)
    draws[0] = noise[0]
    for t in range(1, n_draws):
        draws[t] = phi * draws[t - 1] + noise[t]
    return draws


@pytest.mark.parametrize("n_draws", [4, 5, 7, 8, 11, 30, 101, 500])
@pytest.mark.parametrize("phi", [-0.9, -0.3, 0.0, 0.5, 0.95, 0.999])
def test_bulk_ess_equals_arviz(n_draws, phi):
    rng = np.random.default_rng(n_draws * 100 + int(10 * phi))
    draws = autoregressive(rng, n_draws, phi)
    draws[:, 0] = 2.5  # a coordinate that never moves
    draws[1::3, 1] = draws[::3, 1][: draws[1::3, 1].size]  # repeated values (rejections)
    expected = array_stats.ess(draws[None], chain_axis=0, draw_axis=1, method="bulk")
    np.testing.assert_allclose(bulk_ess(draws), expected, rtol=1e-9)


@pytest.mark.parametrize("n_draws", [4, 5, 7, 30, 101, 500])
@pytest.mark.parametrize("phi", [-0.9, 0.0, 0.5, 0.999])
def test_mean_ess_equals_arviz(n_draws, phi):
    rng = np.random.default_rng(n_draws * 10 + int(10 * phi))
    draws = autoregressive(rng, n_draws, phi) + np.linspace(0.0, 3.0, n_draws)[:, None]
    draws[:, 0] = 2.5
    expected = array_stats.ess(draws[None], chain_axis=0, draw_axis=1, method="mean")
    np.testing.assert_allclose(mean_ess(draws), expected, rtol=1e-9)


def test_ess_of_too_few_draws_is_nan():
    assert np.isnan(bulk_ess(np.ones((3, 2)))).all()
    assert np.isnan(mean_ess(np.ones((3, 2)))).all()


def test_average_ranks_equal_scipys_with_ties():
    values = np.random.default_rng(0).integers(0, 5, size=(101, 30)).astype(float)
    expected = scipy.stats.rankdata(values, method="average", axis=0)
    np.testing.assert_array_equal(average_ranks(values), expected)
