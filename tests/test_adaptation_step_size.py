"""Step sizes: the schedules and the step-size adapter."""

import math

import numpy as np
import pytest

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.adaptation.schedules import ConstantStepSize, as_schedule
from pymc_sgmcmc.adaptation.step_size import StepSizeAdapter

# -- step-size schedules -------------------------------------------------------------


def test_polynomial_decay_values():
    schedule = pmsg.PolynomialDecay(a=0.01, b=1.0, gamma=0.55)
    assert schedule(0) == pytest.approx(0.01)
    assert schedule(9) == pytest.approx(0.01 * 10**-0.55)
    assert schedule(99) == pytest.approx(0.01 * 100**-0.55)
    steps = [schedule(t) for t in range(50)]
    assert all(later < earlier for earlier, later in zip(steps, steps[1:], strict=False))
    offset = pmsg.PolynomialDecay(a=2.0, b=10.0, gamma=1.0)
    assert offset(0) == pytest.approx(0.2)
    assert offset(10) == pytest.approx(0.1)
    constant = pmsg.PolynomialDecay(a=0.3, b=5.0, gamma=0.0)
    assert constant(0) == constant(1000) == pytest.approx(0.3)


def test_polynomial_decay_defaults_satisfy_the_robbins_monro_exponent_range():
    schedule = pmsg.PolynomialDecay(a=0.01)
    assert schedule.b == 1.0
    assert 0.5 < schedule.gamma <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"a": 0.0}, ValueError, "a must be positive and finite"),
        ({"a": -1e-2}, ValueError, "a must be positive and finite"),
        ({"a": math.inf}, ValueError, "a must be positive and finite"),
        ({"a": "big"}, TypeError, "a must be a real number"),
        ({"a": 1e-2, "b": 0.0}, ValueError, "b must be positive and finite"),
        ({"a": 1e-2, "b": math.nan}, ValueError, "b must be positive and finite"),
        ({"a": 1e-2, "gamma": -0.1}, ValueError, r"gamma must lie in \[0, 1\]"),
        ({"a": 1e-2, "gamma": 1.5}, ValueError, r"gamma must lie in \[0, 1\]"),
        ({"a": 1e-2, "gamma": math.nan}, ValueError, r"gamma must lie in \[0, 1\]"),
    ],
)
def test_polynomial_decay_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        pmsg.PolynomialDecay(**kwargs)


def test_constant_step_size_and_as_schedule():
    assert as_schedule(0.25)(0) == as_schedule(0.25)(10**6) == 0.25
    decay = pmsg.PolynomialDecay(a=0.1)
    assert as_schedule(decay) is decay
    with pytest.raises(TypeError, match="step_size is required"):
        as_schedule(None)
    with pytest.raises(ValueError, match="step_size must be positive and finite"):
        ConstantStepSize(-0.1)


def test_step_size_adapter_is_the_schedule_without_jitter():
    schedule = pmsg.PolynomialDecay(a=0.1, b=1.0, gamma=0.55)
    adapter = StepSizeAdapter(schedule)
    rng = np.random.default_rng(0)
    assert [adapter.current(t, rng) for t in range(5)] == [schedule(t) for t in range(5)]
    assert adapter.nominal(3) == schedule(3)
    assert isinstance(StepSizeAdapter(0.2).schedule, ConstantStepSize)


def test_step_size_jitter_is_uniform_around_the_schedule():
    adapter = StepSizeAdapter(0.2, jitter=0.3)
    rng = np.random.default_rng(1)
    values = np.array([adapter.current(0, rng) for _ in range(20_000)])
    assert values.min() >= 0.2 * 0.7 and values.max() <= 0.2 * 1.3
    assert values.mean() == pytest.approx(0.2, rel=0.01)
    assert values.std() == pytest.approx(0.2 * 0.6 / math.sqrt(12), rel=0.03)


@pytest.mark.parametrize("jitter", [-0.1, 1.0, math.nan, True, "0.1"])
def test_bad_jitter_is_refused(jitter):
    with pytest.raises(ValueError, match=r"step_jitter must lie in \[0.0, 1.0\)"):
        StepSizeAdapter(0.1, jitter=jitter)
