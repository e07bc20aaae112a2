"""The kernel's parameters: fixed ones, the Laplace start of the metric, the assembly."""

import numpy as np

from pymc_sgmcmc.adaptation.step_size import StepSizeAdapter
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass
from pymc_sgmcmc.kernels import riemannian, sghmc
from pymc_sgmcmc.metrics.euclidean import metric_from_inverse
from pymc_sgmcmc.sampling.kernel_parameters import (
    assembled_parameters,
    fixed_parameters,
    preconditioned,
)

COVARIANCE = np.array([[4.0, 1.0], [1.0, 9.0]])


def options(**overrides):
    return {
        "mass_adapter": None,
        "mass_given": False,
        "adapt_mass": False,
        "diagonal": False,
        "dtype": np.float64,
    } | overrides


def test_the_laplace_covariance_becomes_the_metric_or_starts_its_adapter():
    adapter, metric = preconditioned(sghmc.KERNEL, COVARIANCE, **options())
    assert adapter is None
    np.testing.assert_array_equal(metric.inverse, COVARIANCE)
    adapter, metric = preconditioned(sghmc.KERNEL, COVARIANCE, **options(adapt_mass=True))
    assert isinstance(adapter, WindowedMass) and metric is None
    np.testing.assert_array_equal(adapter.initial_inverse, COVARIANCE)


def test_a_grouped_step_keeps_only_the_variances():
    _, metric = preconditioned(sghmc.KERNEL, COVARIANCE, **options(diagonal=True))
    np.testing.assert_array_equal(metric.inverse, [4.0, 9.0])


def test_a_given_mass_and_a_position_dependent_metric_stay():
    assert preconditioned(sghmc.KERNEL, COVARIANCE, **options(mass_given=True)) == (None, None)
    own = object()
    assert preconditioned(riemannian.RHMC, COVARIANCE, **options(mass_adapter=own)) == (own, None)


def test_auto_noise_estimate_starts_at_zero_and_is_named():
    fixed = fixed_parameters(
        sghmc.KERNEL, {"friction": 1.0, "noise_estimate": "auto"}, mass=None,
        mass_adapter=None, layout=None, dim=2, dtype=np.float64,
    )  # fmt: skip
    assert fixed.estimated_noise == "noise_estimate"
    assert fixed.values["noise_estimate"] == 0.0 and fixed.values["friction"].dtype == np.float64
    np.testing.assert_array_equal(fixed.values["metric"].inverse, [1.0, 1.0])


def test_inflation_slows_the_metric_but_not_the_posterior_sds():
    fixed = {
        "friction": np.asarray(1.0),
        "noise_estimate": np.asarray(0.0),
        "metric": metric_from_inverse(np.array([4.0, 9.0]), np.float64),
    }
    params, sd = assembled_parameters(
        sghmc.KERNEL, fixed, mass_adapter=None, step_size_adapter=StepSizeAdapter(0.1),
        inflation=np.array([1.0, 3.0]), dtype=np.float64,
    )  # fmt: skip
    np.testing.assert_array_equal(sd, [2.0, 3.0])
    np.testing.assert_array_equal(params.metric.inverse, [4.0, 3.0])
    assert np.isnan(params.step_size)
