"""SGRLD: the expanded mean in PyMC's simplex coordinates, its two integrators, and the
draws against exact Dirichlet–multinomial posteriors and NUTS on a mixture's weights."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers import MCSE_TOLERANCE, assert_within_mcse, sample
from pymc.distributions.transforms import SimplexTransform
from scipy import special

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.dynamics.sgrld import (
    EXACT_QUANTILE_BELOW,
    cir_transition_moments,
    expanded_mean_gamma_step,
    expanded_mean_step,
    wilson_hilferty_quantile,
)
from pymc_sgmcmc.kernels import sgrld
from pymc_sgmcmc.kernels.base import Target
from pymc_sgmcmc.manifolds.simplex import (
    SimplexLayout,
    concentration_from_precision,
    expanded_mean_drift,
    simplex_coordinates,
    simplex_point,
)
from pymc_sgmcmc.metrics import euclidean_metric
from pymc_sgmcmc.sampling.kernel_parameters import decoupled_covariance


def test_the_coordinates_are_pymcs_simplex_transform():
    rng = np.random.default_rng(0)
    coordinates = rng.normal(size=(3, 4, 5))  # 3 × 4 simplices of K = 6
    transform = SimplexTransform()
    point = simplex_point(coordinates)
    np.testing.assert_allclose(point, transform.backward(coordinates).eval(), rtol=1e-12)
    expanded = rng.gamma(3.0, size=(3, 4, 1)) * point  # any total
    np.testing.assert_allclose(
        simplex_coordinates(expanded), transform.forward(point).eval(), atol=1e-12
    )
    np.testing.assert_allclose(simplex_coordinates(expanded), coordinates, atol=1e-12)


def dirichlet_multinomial(alpha, counts):
    with pm.Model() as model:
        p = pm.Dirichlet("p", alpha)
        pm.Multinomial("n", n=int(np.sum(counts)), p=p, observed=counts)
    return model


def test_the_drift_from_pymcs_gradient_is_the_papers():
    """``θ ⊙ ∇log p + 1`` from the model's gradient in PyMC's coordinates, with ``a = Σα``,
    is Patterson and Teh's ``α − θ + n − π Σn`` for a Dirichlet–multinomial posterior."""
    alpha, counts = np.array([0.3, 1.0, 2.5, 0.1]), np.array([7, 0, 12, 1])
    model = dirichlet_multinomial(alpha, counts)
    gradient = model.compile_dlogp()
    rng = np.random.default_rng(1)
    for _ in range(5):
        coordinates, total = rng.normal(size=3), rng.gamma(4.0)
        point = simplex_point(coordinates)
        expanded = total * point
        g = gradient({"p_simplex__": coordinates})
        drift = expanded_mean_drift(point, expanded, g, alpha.sum())
        papers = alpha - expanded + counts - point * counts.sum()
        np.testing.assert_allclose(drift, papers, rtol=1e-10, atol=1e-10)


def test_the_laplace_precision_of_a_dirichlet_gives_its_concentration():
    beta = np.array([40.0, 3.0, 0.7, 12.0, 1.5])
    model = dirichlet_multinomial(beta, np.zeros(5, dtype=int))
    mode = SimplexTransform().forward(beta / beta.sum()).eval()  # β/Σβ: the mode in v
    hessian = model.compile_d2logp(negate_output=False)({"p_simplex__": mode})
    point = simplex_point(mode)[None, :]
    dense = np.linalg.inv(-hessian)
    for precision in (np.diag(np.linalg.inv(dense)), -np.diag(hessian)):
        np.testing.assert_allclose(
            concentration_from_precision(point, precision[None, :]), [beta.sum()], rtol=1e-8
        )


def exact_cir_transition(x0, level, t, rng, size):
    """Draws of ``θ_t`` for ``dθ = (b − θ)dt + √(2θ)dW``: a Poisson mixture of Gammas."""
    decay = np.exp(-t)
    n = rng.poisson(x0 * decay / (1.0 - decay), size=size)
    return (1.0 - decay) * rng.gamma(level + n)


@pytest.mark.parametrize(("x0", "level"), [(0.002, 0.1), (0.5, 0.1), (3.0, 2.0), (40.0, 35.0)])
def test_the_gamma_step_has_the_exact_transitions_mean_and_variance(x0, level):
    rng, t, size = np.random.default_rng(2), 0.1, 200_000
    exact = exact_cir_transition(x0, level, t, rng, size)
    mean, variance = cir_transition_moments(x0, level, t)
    assert abs(exact.mean() - mean) < 5 * exact.std() / np.sqrt(size)
    assert abs(exact.var() - variance) < 5 * variance * np.sqrt(2.0 / size) * 3
    # The step's draws (both tails of the quantile) have those two moments.
    x = np.full(size, x0)
    drawn = expanded_mean_gamma_step(x, level - x, rng.standard_normal(size), t)
    assert abs(drawn.mean() - mean) < 5 * np.sqrt(variance / size)
    assert abs(drawn.var() / variance - 1.0) < 0.05


def test_large_shapes_take_a_quantile_within_their_bound():
    """From :data:`EXACT_QUANTILE_BELOW` on the step skips the incomplete-Gamma inversion."""
    normal = np.linspace(-6.0, 6.0, 1201)
    inner = np.abs(normal) <= 3.0
    for shape in (EXACT_QUANTILE_BELOW, 4 * EXACT_QUANTILE_BELOW):
        exact = np.where(
            normal < 0,
            special.gammaincinv(shape, special.ndtr(normal)),
            special.gammainccinv(shape, special.ndtr(-normal)),
        )
        error = np.abs(wilson_hilferty_quantile(shape, normal) / exact - 1.0)
        assert error.max() < 3e-3 and error[inner].max() < 2.5e-4


@pytest.mark.parametrize("level", [0.1, 3.0])
def test_the_gamma_step_keeps_a_gamma_law_where_the_papers_euler_step_does_not(level):
    """``dθ = (b − θ)dt + √(2θ)dW`` leaves Gamma(b, 1) invariant: 10,000 independent
    coordinates from that law, 150 steps of ``t = 0.1`` each."""
    rng, size = np.random.default_rng(3), 10_000
    ends = {}
    for name, step in [("gamma", expanded_mean_gamma_step), ("euler", expanded_mean_step)]:
        x = rng.gamma(level, size=size)
        for _ in range(150):
            x = step(x, level - x, rng.standard_normal(size), 0.1)
        ends[name] = x
    se_mean, se_var = np.sqrt(level / size), level * np.sqrt((2.0 + 6.0 / level) / size)
    assert abs(ends["gamma"].mean() - level) < MCSE_TOLERANCE * se_mean
    assert abs(ends["gamma"].var() - level) < MCSE_TOLERANCE * se_var
    if level < 1:  # measured: the Euler step's mean 3.7 times too large at b = 0.1
        assert ends["euler"].mean() > 2.0 * level


def test_without_simplices_the_step_is_sglds():
    rng = np.random.default_rng(4)
    metric = euclidean_metric(np.array([2.0, 0.5, 1.0]), 3)
    params = sgrld.SGRLDParams(
        0.05, metric, SimplexLayout.from_blocks([(3, None)]), np.zeros(0), "gamma"
    )
    target = Target(logp=None, grad=lambda x: -x)
    position, noise = rng.normal(size=3), rng.normal(size=3)
    state = sgrld.init(position, noise, params)
    moved = sgrld.step(state, target, noise, params)
    whitened = metric.velocity(position, metric.momentum(position, noise))
    expected = sgld_step(position, lambda x: metric.velocity(x, -x), whitened, 0.05)
    np.testing.assert_array_equal(moved.position, expected)


def test_the_simplices_move_apart_from_the_rest():
    """A simplex in the middle of the position: the coordinates around it take SGLD's step
    in their own block of the metric, the simplex's stays on its simplex."""
    rng = np.random.default_rng(5)
    layout = SimplexLayout.from_blocks([(2, None), (3, 4), (1, None)])
    np.testing.assert_array_equal(layout.rows(4), [[2, 3, 4]])
    np.testing.assert_array_equal(layout.simplex_indices, [2, 3, 4])
    covariance = np.full((6, 6), 0.3) + np.eye(6)
    decoupled = decoupled_covariance(covariance, layout.simplex_indices)
    assert np.all(decoupled[np.ix_([0, 1, 5], [2, 3, 4])] == 0.0)
    np.testing.assert_array_equal(np.diag(decoupled), np.diag(covariance))
    factor = np.linalg.cholesky(np.linalg.inv(decoupled))
    assert np.all(factor[np.ix_([2, 3, 4], [0, 1, 5])] == 0.0)
    metric = euclidean_metric(np.linalg.inv(decoupled), 6)
    params = sgrld.SGRLDParams(0.05, metric, layout, np.array([20.0]), "gamma")
    gradient = rng.normal(size=6)
    target = Target(logp=None, grad=lambda x: gradient)
    position, noise = rng.normal(size=6), rng.normal(size=7)
    state = sgrld.init(position, noise[:6], params)
    moved = sgrld.step(state, target, noise, params)
    # The outside coordinates' move does not read the simplex's gradient or noise.
    other = sgrld.step(
        state,
        Target(logp=None, grad=lambda x: np.where(np.isin(np.arange(6), [2, 3, 4]), 9.0, gradient)),
        np.concatenate([noise[:2], [1.0, -1.0, 2.0], noise[5:]]),
        params,
    )
    np.testing.assert_allclose(moved.position[[0, 1, 5]], other.position[[0, 1, 5]], rtol=1e-13)
    assert np.all(moved.position[[2, 3, 4]] != other.position[[2, 3, 4]])
    expanded = moved.simplex_total * simplex_point(moved.position[[2, 3, 4]])
    np.testing.assert_allclose(simplex_coordinates(expanded), moved.position[[2, 3, 4]])


def test_bad_options_are_refused_before_sampling():
    with pm.Model():
        pm.Dirichlet("p", np.ones(3))
        with pytest.raises(ValueError, match="simplex_shape must be positive"):
            pmsg.SGRLD(simplex_shape=-1.0)
        with pytest.raises(ValueError, match="integrator must be one of"):
            pmsg.SGRLD(integrator="rk4")


def categorical_model(probabilities, n_rows, alpha, batch_size, seed):
    """Categories drawn with ``probabilities``, seen ``batch_size`` rows at a time."""
    rows = np.random.default_rng(seed).choice(len(probabilities), size=n_rows, p=probabilities)
    rows = rows.astype("int32")
    with pm.Model() as model:
        p = pm.Dirichlet("p", alpha)
        pm.Categorical(
            "y", p=p, observed=pm.Minibatch(rows, batch_size=batch_size), total_size=n_rows
        )
    return model, alpha + np.bincount(rows, minlength=len(probabilities))


def dirichlet_moments(beta):
    """Means and sds of Dirichlet(``beta``), each row of ``beta`` a simplex."""
    total = beta.sum(axis=-1, keepdims=True)
    mean = beta / total
    return mean, np.sqrt(mean * (1.0 - mean) / (total + 1.0))


@pytest.mark.parametrize("integrator", ["gamma", "euler"])
def test_defaults_sample_a_dirichlet_multinomial_posterior(integrator):
    """5,000 rows of 5 categories in minibatches of 200 (every category well seen): the
    exact posterior is Dirichlet(α + counts); both integrators sample it."""
    probabilities = np.array([0.5, 0.3, 0.15, 0.04, 0.01])
    model, beta = categorical_model(probabilities, 5_000, np.full(5, 0.5), 200, seed=0)
    with model:
        step = pmsg.SGRLD(integrator=integrator, mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=1_000, tune=1_000, chains=2, random_seed=1)
    assert_within_mcse(idata.posterior["p"].values, *dirichlet_moments(beta), min_ess=300)


def test_a_sparse_posterior_needs_the_gamma_step():
    """1,000 rows of 50 categories with a sparse prior (α = 0.1): 18 categories have no
    row, so their posterior Beta(0.1, ~1000) lives near 0, far below a step's reach. The
    gamma step samples every category; the paper's Euler step, mirrored at 0, gives the
    unseen categories together (Beta(1.8, ~1003) exactly) too much mass."""
    probabilities = 1.0 / np.arange(1, 51) ** 2
    model, beta = categorical_model(
        probabilities / probabilities.sum(), 1_000, np.full(50, 0.1), 100, seed=0
    )
    unseen = beta < 1.0
    assert unseen.sum() == 18
    results = {}
    for integrator in ("gamma", "euler"):
        with model:
            step = pmsg.SGRLD(integrator=integrator, mode_kwargs={"progressbar": False})
        draws = sample(step, model, draws=2_000, tune=1_000, chains=2, random_seed=2)
        results[integrator] = draws.posterior["p"].values
    mean, sd = dirichlet_moments(beta)
    assert_within_mcse(results["gamma"], mean, sd, min_ess=500)
    pooled = np.array([beta[unseen].sum(), beta[~unseen].sum()])
    for integrator, draws in results.items():
        together = draws[..., unseen].sum(axis=-1)
        error = (together.mean() - pooled[0] / pooled.sum()) / float(az.mcse(together))
        if integrator == "gamma":
            assert abs(error) < MCSE_TOLERANCE
        else:  # measured: ~20 MCSE too much
            assert error > 3 * MCSE_TOLERANCE


def test_the_same_seed_gives_the_same_draws_from_a_step_built_afresh():
    model, _ = categorical_model(np.array([0.6, 0.3, 0.1]), 300, np.ones(3), 30, seed=3)
    runs = []
    for _ in range(2):
        with model:
            step = pmsg.SGRLD(mode_kwargs={"progressbar": False})
        runs.append(sample(step, model, draws=30, tune=30, random_seed=7))
    np.testing.assert_array_equal(runs[0].posterior["p"].values, runs[1].posterior["p"].values)
    np.testing.assert_array_equal(
        runs[0].sample_stats["simplex_total_min"].values,
        runs[1].sample_stats["simplex_total_min"].values,
    )


def mixture(rows, batch_size=None):
    """Two normal components of unknown means and weights, unit sds."""
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Normal("mu", np.array([-2.0, 2.0]), 1.0)
        data = rows if batch_size is None else pm.Minibatch(rows, batch_size=batch_size)
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=data, total_size=len(rows))
    return model


def test_a_mixtures_weights_and_means_agree_with_nuts():
    """2,000 rows, weights (0.3, 0.7), means (−2, 2); batches of 200. SGRLD moves the
    weights on their simplex and the means by SGLD's step, in one sampler."""
    rng = np.random.default_rng(4)
    component = rng.random(2_000) < 0.3
    rows = np.where(component, rng.normal(-2.0, 1.0, 2_000), rng.normal(2.0, 1.0, 2_000))
    with mixture(rows):
        reference = pm.sample(
            1_000, tune=1_000, chains=2, cores=1, random_seed=5, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip
    model = mixture(rows, batch_size=200)
    with model:
        step = pmsg.SGRLD(mode_kwargs={"progressbar": False})
    ours = sample(step, model, draws=1_000, tune=1_000, chains=2, random_seed=6)
    failures = []
    for name, k in [("w", 0), ("mu", 0), ("mu", 1)]:
        x, y = ours.posterior[name].values[..., k], reference.posterior[name].values[..., k]
        for label, method, estimate in [("mean", "mean", np.mean), ("sd", "sd", np.std)]:
            combined = np.hypot(float(az.mcse(x, method=method)), float(az.mcse(y, method=method)))
            if not abs(estimate(x) - estimate(y)) <= MCSE_TOLERANCE * combined:
                failures.append(f"{name}[{k}] {label}: {estimate(x):.4f} vs {estimate(y):.4f}")
    assert not failures, failures
    assert float(az.ess(ours.posterior["w"].values[..., 0])) > 300


def test_a_euclidean_sampler_on_a_sparse_simplex_is_pointed_to_sgrld():
    probabilities = 1.0 / np.arange(1, 51) ** 2
    sparse, _ = categorical_model(
        probabilities / probabilities.sum(), 1_000, np.full(50, 0.1), 100, seed=0
    )
    with sparse, pytest.warns(RuntimeWarning, match=r"'p' \(18\).*pmsg\.SGRLD\(\)"):
        pmsg.SGLD(mode_kwargs={"progressbar": False})
    dense, _ = categorical_model(np.array([0.5, 0.3, 0.2]), 1_000, np.ones(3), 100, seed=1)
    with dense, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pmsg.SGLD(mode_kwargs={"progressbar": False})


def test_a_layout_of_several_simplices_orders_their_totals_by_categories():
    layout = SimplexLayout.from_blocks([(4, 3), (2, None), (3, 4), (2, 3)])
    assert layout.categories == (3, 4) and layout.n_simplices == 4
    np.testing.assert_array_equal(layout.rows(3), [[0, 1], [2, 3], [9, 10]])
    np.testing.assert_array_equal(layout.rows(4), [[6, 7, 8]])
    assert layout.simplex_slices() == [(3, slice(0, 3)), (4, slice(3, 4))]
    np.testing.assert_array_equal(layout.simplex_indices, [0, 1, 2, 3, 6, 7, 8, 9, 10])


def test_simplices_of_several_shapes_in_one_model_sample_their_exact_posteriors():
    """Two rows of 3-category weights (one variable) and one of 4, with a normal mean
    between them: three Dirichlet–multinomial posteriors, and the mean's normal one."""
    rng = np.random.default_rng(8)
    counts3 = np.array([[30, 12, 5], [4, 40, 9]])
    counts4 = np.array([3, 25, 60, 11])
    rows = rng.normal(1.5, 1.0, size=500)
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones((2, 3)))
        mu = pm.Normal("mu", 0.0, 10.0)
        q = pm.Dirichlet("q", np.full(4, 0.5))
        pm.Multinomial("n3", n=counts3.sum(axis=1), p=p, observed=counts3)
        pm.Normal("x", mu, 1.0, observed=pm.Minibatch(rows, batch_size=50), total_size=500)
        pm.Multinomial("n4", n=counts4.sum(), p=q, observed=counts4)
        step = pmsg.SGRLD(mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=1_000, tune=1_000, chains=2, random_seed=9)
    for name, beta in [("p", np.ones((2, 3)) + counts3), ("q", 0.5 + counts4)]:
        draws = idata.posterior[name].values.reshape(2, 1_000, -1)
        mean, sd = dirichlet_moments(beta[None, :] if beta.ndim == 1 else beta)
        assert_within_mcse(draws, mean.ravel(), sd.ravel(), min_ess=300)
    precision = 500.0 + 0.01
    assert_within_mcse(
        idata.posterior["mu"].values[..., None],
        [rows.sum() / precision],
        [precision**-0.5],
        min_ess=300,
    )


def test_a_simplexs_noise_is_whitened_by_its_expanded_mean():
    """Off the simplex ``L⁻¹δ``; on it, in each coordinate, ``√(Σ cₖ²/S)`` with ``c`` the
    centred ``(δ, 0)``: the share of the injected noise ``2ηθ`` averaged over ``θ``."""
    layout = SimplexLayout.from_blocks([(1, None), (2, 3)])
    metric = euclidean_metric(np.array([4.0, 1.0, 1.0]), 3)
    params = sgrld.SGRLDParams(0.1, metric, layout, np.array([50.0]), "gamma")
    state = sgrld.SGRLDState(np.array([0.3, 0.2, -0.1]), np.array([40.0]))
    error = np.array([1.0, 3.0, -6.0])
    whitened = sgrld.noise_whitening(params, state.position, state).whiten(error)
    centred = np.array([3.0, -6.0, 0.0]) + 1.0
    np.testing.assert_allclose(whitened, [1.0 / 2.0, *[np.sqrt(centred @ centred / 40.0)] * 2])
