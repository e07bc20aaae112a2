"""Minibatches of whole groups on a hierarchical model with a closed-form posterior.

``mu ~ N(0, 10²)``, ``a_j ~ N(mu, 1)`` for 40 groups of 5-59 rows, ``y_i ~ N(a_{g_i}, 2²)``
with the scales known: the posterior of ``(mu, a)`` is Gaussian, its mean and covariance
solved exactly. Each group is ~1/13 of a minibatch of 100 rows.
"""

import functools
import warnings

import numpy as np
import pymc as pm
import pytest
from helpers import mean_and_variance_errors, switch_model

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.gradients.grouped import GroupLayout
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling import groups as groups_module
from pymc_sgmcmc.sampling.whole_groups import WholeGroups

N_GROUPS, GROUP_SD, NOISE_SD, PRIOR_SD = 40, 1.0, 2.0, 10.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    sizes = rng.integers(5, 60, size=N_GROUPS)
    group = np.repeat(np.arange(N_GROUPS), sizes)
    y = rng.normal(0.0, GROUP_SD, N_GROUPS)[group] + rng.normal(0.0, NOISE_SD, group.size)
    return group, y


@pytest.fixture(scope="module")
def exact(data):
    """Mean and sds of ``(mu, a_1..a_J)`` from the joint Gaussian's precision."""
    group, y = data
    dim = N_GROUPS + 1
    precision, shift = np.zeros((dim, dim)), np.zeros(dim)
    precision[0, 0] = 1 / PRIOR_SD**2 + N_GROUPS / GROUP_SD**2
    precision[0, 1:] = precision[1:, 0] = -1 / GROUP_SD**2
    counts = np.bincount(group, minlength=N_GROUPS)
    precision[np.arange(1, dim), np.arange(1, dim)] = 1 / GROUP_SD**2 + counts / NOISE_SD**2
    shift[1:] = np.bincount(group, weights=y, minlength=N_GROUPS) / NOISE_SD**2
    covariance = np.linalg.inv(precision)
    return covariance @ shift, np.sqrt(np.diag(covariance))


def hierarchical_model(group, y):
    with pm.Model() as model:
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=100)
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        a = pm.Normal("a", mu, GROUP_SD, shape=N_GROUPS)
        pm.Normal("y", a[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
    return model


@pytest.fixture(scope="module")
def model(data):
    """Shared: a step built on it again reuses its compiled functions."""
    return hierarchical_model(*data)


def sample_and_compare(cls, model, exact):
    """Worst mean and variance errors over all 41 coordinates, in Monte Carlo errors."""
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = cls()
        idata = pm.sample(
            draws=1000, tune=1000, chains=2, cores=1, step=step, random_seed=3,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    assert step.groups is not None and step.groups.groups_per_step == 3
    posterior = idata.posterior
    draws = np.concatenate([posterior["mu"].values[..., None], posterior["a"].values], axis=-1)
    mean, sd = exact
    # The variance's error from the ESS of the squared deviations: the squares can mix
    # more slowly than the draws (1/sqrt(2 ESS) of the draws understated it 1.4x here).
    z, variance_error = mean_and_variance_errors(draws, mean, sd, np.sqrt(2) * sd**2)
    return float(z.max()), float(variance_error.max())


@pytest.mark.parametrize(
    "cls",
    [pmsg.SGHMC, pmsg.SGLD, pmsg.SGHMCEM, pmsg.SGNHT, pmsg.SGNHTEM],
    ids=lambda c: c.__name__,
)
def test_whole_groups_give_the_exact_hierarchical_posterior_with_defaults(cls, model, exact):
    # 4.5 standard errors over 41 coordinates: a false alarm has probability < 3e-4.
    worst_mean, worst_variance = sample_and_compare(cls, model, exact)
    assert worst_mean < 4.5, worst_mean
    assert worst_variance < 4.5, worst_variance


def test_svrg_draws_whole_groups_too(model, exact):
    # The anchor moves to the chain every 100 draws; the grouped estimator takes any anchor.
    worst_mean, worst_variance = sample_and_compare(
        functools.partial(pmsg.SGHMC, gradient="svrg"), model, exact
    )
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


def without_exact_moves(monkeypatch):
    """The kernel alone: the exact moves after each trajectory would mend its draws.

    Every group's locals and then the globals (``mu``) are redrawn exactly after each
    trajectory; a wrong kernel or estimator shows only without them.
    """
    monkeypatch.setattr(WholeGroups, "_update_locals", lambda self, position, *args: position)
    monkeypatch.setattr(WholeGroups, "_update_globals", lambda self, position, *args: position)


def test_the_grouped_estimator_alone_gives_the_exact_posterior(model, exact, monkeypatch):
    without_exact_moves(monkeypatch)
    worst_mean, worst_variance = sample_and_compare(pmsg.SGHMC, model, exact)
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


def test_local_gradients_scaled_as_global_ones_are_caught(model, exact, monkeypatch):
    # The wrong estimator: a drawn group's rows weighted J/K for its own intercept too.
    def as_if_global(self, groups_per_step):
        return np.full(self.dim, self.n_groups / groups_per_step)

    without_exact_moves(monkeypatch)
    monkeypatch.setattr(GroupLayout, "coordinate_weights", as_if_global)
    worst_mean, worst_variance = sample_and_compare(pmsg.SGHMC, model, exact)
    assert worst_mean > 4.5 or worst_variance > 4.5, (worst_mean, worst_variance)


def test_a_thermostat_that_reads_the_held_coordinates_is_caught(model, exact, monkeypatch):
    # SGNHT's thermostat fed the kinetic temperature of all coordinates, the held ones'
    # momenta included (zero going in, then gradient and noise): measured 25.7 standard
    # errors off in a variance with the local moves on. With the globals' exact move
    # too, the exact moves redraw every coordinate after each trajectory and the
    # kernel's error no longer shows (1.9 standard errors): the kernel alone is tested
    # (measured: 181 standard errors off in a variance, 1,000 draws a chain; the three
    # figures before with the draws' own spread of squares, 16.5 for this one).
    def plain_step(self, state, target, noise, params, moving):
        return self.step_with_info(state, target, noise, params)

    monkeypatch.setattr(Kernel, "step_holding", plain_step)
    without_exact_moves(monkeypatch)
    worst_mean, worst_variance = sample_and_compare(pmsg.SGNHT, model, exact)
    assert worst_mean > 4.5 or worst_variance > 4.5, (worst_mean, worst_variance)


def test_groups_true_explains_why_not(data, monkeypatch):
    with hierarchical_model(*data):
        assert pmsg.SGHMC(groups=False).groups is None
        with pytest.raises(ValueError, match="Nosé-Poincaré"):
            pmsg.SGNPHMC(groups=True)
    # A prior that ties the groups: no exact move per group, so the EM mass would be
    # learned from draws in which most groups' parameters do not move.
    monkeypatch.setattr(groups_module, "group_log_densities", lambda *args: None)
    with hierarchical_model(*data), pytest.raises(ValueError, match="learns its mass"):
        pmsg.SGHMCEM(groups=True)


def test_a_grouped_chain_resumes_identically_from_its_sampling_state(non_centred):
    # The grouped part's chain state (K, the moves' tuned scales, the curvature average,
    # the noise inflation) travels in PyMC's sampling_state, mid-tuning included: the
    # interweaving move's scales change at every tuning draw.
    model = non_centred
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
        step.setup_chain(np.random.default_rng(2), tune=40, draws=10)
        point = model.initial_point()
        for _ in range(12):
            point, _ = step.step(point)
        state, saved = step.sampling_state, dict(point)

        def continue_chain(point, n=8):
            draws = []
            for _ in range(n):
                point, stats = step.step(point)
                draws.append((point["z"].copy(), stats[0]["step_size"]))
            return draws

        first = continue_chain(point)
        step.sampling_state = state
        second = continue_chain(saved)
        third = continue_chain(point)  # from the end of the first: not the same
    for (z1, e1), (z2, e2) in zip(first, second, strict=True):
        np.testing.assert_array_equal(z1, z2)
        assert e1 == e2
    assert not np.array_equal(first[-1][0], third[-1][0])


def test_a_sampler_that_cannot_draw_whole_groups_warns_on_a_hierarchical_model(data):
    # SG-NPHMC's Nosé-Poincaré thermostat rescales time for every coordinate, so it draws
    # rows: a user who picked it for a hierarchical model is told before sampling, and
    # told what to use instead.
    with hierarchical_model(*data):
        with pytest.warns(RuntimeWarning, match=r"SGNPHMC: this model indexes .* pmsg.SGHMC\(\)"):
            assert pmsg.SGNPHMC(mode_kwargs={"progressbar": False}).groups is None
        with pytest.warns(RuntimeWarning, match="minibatch='trajectory'"):
            step = pmsg.SGHMC(minibatch="trajectory", mode_kwargs={"progressbar": False})
            assert step.groups is None
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            pmsg.SGNPHMC(groups=False, mode_kwargs={"progressbar": False})
    with switch_model(), warnings.catch_warnings():  # no groups: nothing to say of them
        warnings.simplefilter("error", RuntimeWarning)
        warnings.filterwarnings("ignore", "SGNPHMC: the model has pm.Minibatch data and discrete")
        pmsg.SGNPHMC(mode_kwargs={"progressbar": False})


@pytest.mark.parametrize("cls", [pmsg.SGHMC, pmsg.SGLD], ids=lambda c: c.__name__)
def test_a_grouped_step_built_afresh_with_the_same_seed_gives_identical_draws(cls, model):
    # The groups drawn, the held locals and the anchor's moves during tuning all come
    # from the chain's generator or from the data: two new steps, one seed, same draws.
    runs = []
    for _ in range(2):
        with model:
            step = cls(mode_kwargs={"progressbar": False})
            assert step.groups is not None
            idata = pm.sample(
                draws=30, tune=150, chains=2, cores=1, step=step, random_seed=11,
                progressbar=False, compute_convergence_checks=False,
            )  # fmt: skip
        runs.append(idata.posterior["a"].values)
    np.testing.assert_array_equal(runs[0], runs[1])


# -- the anchor follows the chain during tuning --------------------------------------------


def non_centred_model():
    """A non-centred normal hierarchy whose joint mode lies far outside the posterior bulk.

    ``mu ~ N(0, 5²)``, ``tau ~ HalfNormal(2)``, ``z_j ~ N(0, 1)``, ``y_i ~ N(mu + tau
    z_{g_i}, 1)`` for 20 groups of 1-14 rows: the density grows as ``tau`` does and the
    ``z`` shrink, so the joint mode sits several posterior sds from the mean.
    """
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 15, size=20)
    group = np.repeat(np.arange(20), sizes)
    y = (0.5 + 0.7 * rng.normal(size=20))[group] + rng.normal(size=group.size)
    with pm.Model() as model:
        batch_group, batch_y = pm.Minibatch(group, y, batch_size=40)
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 2.0)
        z = pm.Normal("z", 0.0, 1.0, shape=20)
        pm.Normal("y", (mu + tau * z)[batch_group], 1.0, observed=batch_y, total_size=y.size)
    return model


@pytest.fixture(scope="module")
def non_centred():
    """Shared by the two tests that build SGHMC on it, so that it compiles once."""
    return non_centred_model()


def test_the_control_variate_anchor_moves_from_the_mode_into_the_bulk_during_tuning(non_centred):
    model = non_centred
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
        idata = pm.sample(
            draws=1000, tune=1000, chains=1, step=step, random_seed=2, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip
    assert step.gradient == "control_variates"
    post = idata.posterior
    draws = np.concatenate(
        [post["mu"].values.reshape(-1, 1), np.log(post["tau"].values).reshape(-1, 1),
         post["z"].values.reshape(-1, 20)], axis=1,
    )  # fmt: skip
    mean, sd = draws.mean(axis=0), draws.std(axis=0)

    def distance(point):
        return np.abs((point - mean) / sd).max()

    assert distance(step.mode.position) > 3.0  # measured: 5.9 sd
    assert distance(step.anchor.position) < 1.0  # measured: 0.43 sd (one move)
    # An anchor the user chose stays where it is.
    with model:
        chosen = pmsg.SGHMC(anchor=step.mode, mode_kwargs={"progressbar": False})
        pm.sample(
            draws=10, tune=200, chains=1, step=chosen, random_seed=2, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip
    np.testing.assert_array_equal(chosen.anchor.position, step.mode.position)


def test_a_grouped_models_diagonal_curvature_is_exact():
    """Above 200 coordinates the Laplace curvature is diagonal: one difference per kind
    of local (no term reads two groups) and per global, not random probes; the mode is
    found by Newton steps with that whole Hessian."""
    n_groups = 300
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 10, size=n_groups)
    group = np.repeat(np.arange(n_groups), sizes)
    y = rng.normal(0.0, GROUP_SD, n_groups)[group] + rng.normal(0.0, NOISE_SD, group.size)
    with pm.Model():
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=100)
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        a = pm.Normal("a", mu, GROUP_SD, shape=n_groups)
        pm.Normal("y", a[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    precision = np.zeros((n_groups + 1, n_groups + 1))
    precision[0, 0] = 1 / PRIOR_SD**2 + n_groups / GROUP_SD**2
    precision[0, 1:] = precision[1:, 0] = -1 / GROUP_SD**2
    precision[np.arange(1, n_groups + 1), np.arange(1, n_groups + 1)] = (
        1 / GROUP_SD**2 + sizes / NOISE_SD**2
    )
    shift = np.concatenate([[0.0], np.bincount(group, weights=y) / NOISE_SD**2])
    assert step.mode.covariance.shape == (n_groups + 1,)
    # Random probes (64 a round) would be ~1 % off here, from mu's coupling to every a_j.
    np.testing.assert_allclose(step.mode.covariance, 1 / np.diag(precision), rtol=1e-6)
    # The mode by Newton steps with that Hessian, solved group by group: the exact mean.
    assert step.mode.message == "Newton steps on full-data passes converged"
    mean = np.linalg.solve(precision, shift)
    sds = np.sqrt(np.diag(np.linalg.inv(precision)))
    assert np.max(np.abs(step.mode.position - mean) / sds) < 1e-6
