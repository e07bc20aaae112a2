"""The samplers, run inside a worker.

PyMC's NUTS, nutpie and NumPyro through ``pm.sample``, ADVI, ours (``pymc_sgmcmc``), and
NumPyro's NUTS directly in JAX.

Each ``pm.sample`` runner is called inside the model's context by :func:`run_pymc`, fills
``out`` (setup time, tree sizes or rows touched, notes) and returns the inference data.
"""

from __future__ import annotations

import contextlib
import time
import zlib

import numpy as np

from .clocks import DrawClock, JaxCompileClock
from .problems import STRONG_GROUP_ROWS, numpyro_model_fn, pymc_model

FALLBACK_STEP_SIZE = 1e-4


def seed_of(label: str, seed: int) -> int:
    """The random seed of a row: ``--seed`` and the row's label."""
    return (seed * 1_000_003 + zlib.crc32(label.encode())) % 2**31


def posterior_arrays(idata, names: list[str], chains: int | None = None) -> dict:
    """The posterior draws of ``names`` as arrays (chain, draw, ...)."""
    out = {}
    for name in names:
        values = np.asarray(idata.posterior[name].values)
        if chains is not None:  # ADVI: one "chain" of chains × draws
            values = values.reshape(chains, -1, *values.shape[2:])
        out[name] = values
    return out


def make_step(cls: type, gradient: str, notes: list[str]):
    """``cls(gradient=...)``; before the package has defaults, fall back loudly."""
    try:
        return cls(gradient=gradient)
    except TypeError as err:
        if "step_size" not in str(err):
            first = err
        else:
            first = None
    if first is None:
        try:
            step = cls(gradient=gradient, step_size=FALLBACK_STEP_SIZE)
            notes.append(f"!! step_size={FALLBACK_STEP_SIZE:g} passed: no default step size")
            return step
        except TypeError as err:
            first = err
    if gradient == "minibatch" and "gradient" in str(first):
        try:
            step = cls()
        except TypeError as err:
            if "step_size" not in str(err):
                raise
            step = cls(step_size=FALLBACK_STEP_SIZE)
            notes.append(f"!! step_size={FALLBACK_STEP_SIZE:g} passed: no default step size")
        notes.append("!! gradient= not accepted: plain minibatches without it")
        return step
    raise TypeError(f"{cls.__name__}(gradient={gradient!r}): {first}") from first


def sample_nuts(cfg: dict, common: dict, out: dict, t0: float):
    """``nuts``: PyMC's own NUTS; setup = time of the first draw, tree sizes per phase."""
    import pymc as pm

    clock = DrawClock(cfg["chains"])
    idata = pm.sample(nuts_sampler="pymc", callback=clock, **common)
    out["setup_s"] = clock.first - t0
    out["tune_steps"], out["draw_steps"] = clock.steps["tune"], clock.steps["draw"]
    return idata


def sample_nuts_external(kind: str, cfg: dict, common: dict, out: dict, t0: float):
    """``nutpie`` and ``numpyro-pymc``: ``pm.sample(nuts_sampler=...)``.

    Setup: nutpie's total less its ``sampling_time``; NumPyro's total less its sampler
    call (timed by wrapping PyMC's ``_sample_numpyro_nuts``) plus the JAX compilation
    inside it.
    """
    import pymc as pm

    jax_clock = JaxCompileClock() if kind == "numpyro-pymc" else None
    window = []
    if kind == "numpyro-pymc":
        import pymc.sampling.jax as pmjax

        inner = pmjax._sample_numpyro_nuts

        def timed(*a, **k):
            window.append(time.perf_counter())
            try:
                return inner(*a, **k)
            finally:
                window.append(time.perf_counter())

        pmjax._sample_numpyro_nuts = timed
    idata = pm.sample(nuts_sampler=kind.split("-")[0], **common)
    draw_steps = np.asarray(idata.sample_stats["n_steps"].values, dtype=float)
    out["draw_steps"] = draw_steps.sum(axis=1)
    if "warmup_sample_stats" in idata.children:
        out["tune_steps"] = idata.warmup_sample_stats["n_steps"].values.sum(axis=1)
    else:
        out["tune_steps"] = cfg["tune"] * draw_steps.mean(axis=1)
        out["steps_exact"] = False
    t_end = time.perf_counter()
    if len(window) == 2:
        sampling = window[1] - window[0] - jax_clock.within(*window)
        out["setup_s"] = t_end - t0 - sampling
    else:
        attrs = {**idata.attrs, **idata.posterior.attrs}
        if "sampling_time" in attrs:
            out["setup_s"] = t_end - t0 - float(attrs["sampling_time"])
    return idata


def fit_advi(cfg: dict, seed: int, out: dict, t0: float):
    """``advi``: ``pm.fit`` on minibatches, then chains × draws from the approximation."""
    import pymc as pm

    first = []

    def on_iteration(approx, losses, i):
        if not first:
            first.append(time.perf_counter())

    approx = pm.fit(
        cfg["advi_iterations"],
        method="advi",
        random_seed=seed,
        progressbar=False,
        callbacks=[on_iteration],
    )
    idata = approx.sample(draws=cfg["chains"] * cfg["draws"], random_seed=seed)
    out["setup_s"] = first[0] - t0 if first else None
    out["rows_touched"] = cfg["advi_iterations"] * cfg["batch_size"]
    return idata


def sample_ours(cfg: dict, common: dict, out: dict, t0: float):
    """``ours``: ``pmsg.<sampler>(gradient=...)`` in ``pm.sample`` with ``cfg["cores"]``.

    None is PyMC's default, as a user gets it: ``min(4, logical cores)`` worker processes.
    """
    import pymc as pm

    import pymc_sgmcmc as pmsg

    chains = cfg["chains"]
    cls = getattr(pmsg, cfg["sampler"])
    step = make_step(cls, cfg["gradient"], out["notes"])
    clock = DrawClock(chains)
    idata = pm.sample(step=step, cores=cfg.get("cores"), callback=clock, **common)
    out["setup_s"] = clock.first - t0
    mode_s = getattr(step, "mode_seconds", None)
    setup_rows = getattr(step, "rows_touched_by_setup", None)
    out["mode_s"] = None if mode_s is None else float(mode_s)
    out["setup_rows"] = None if setup_rows is None else int(setup_rows)
    n_steps = int(getattr(step, "n_steps", 10))
    factor = 2 if cfg["gradient"] in ("control_variates", "svrg") else 1
    iterations = (cfg["tune"] + cfg["draws"]) * chains
    out["rows_touched"] = iterations * n_steps * cfg["batch_size"] * factor + int(setup_rows or 0)
    out["step_size"] = describe(getattr(step, "step_size_adapter", None))
    return idata


def run_pymc(
    cfg: dict, X: np.ndarray, y: np.ndarray, g: np.ndarray | None, names: list[str], t0: float
) -> dict:
    """PyMC's NUTS, nutpie and NumPyro through pm.sample, ADVI, and ours."""
    kind, chains = cfg["kind"], cfg["chains"]
    seed = seed_of(cfg["label"], cfg["seed"])
    common = dict(draws=cfg["draws"], tune=cfg["tune"], chains=chains, random_seed=seed)
    common.update(progressbar=False, compute_convergence_checks=False)
    out: dict = {"notes": [], "steps_exact": True}
    model = pymc_model(cfg, X, y, g, minibatch=kind in ("advi", "ours"))
    with model:
        if kind == "nuts":
            idata = sample_nuts(cfg, common, out, t0)
        elif kind in ("nutpie", "numpyro-pymc"):
            idata = sample_nuts_external(kind, cfg, common, out, t0)
        elif kind == "advi":
            idata = fit_advi(cfg, seed, out, t0)
        else:  # ours
            idata = sample_ours(cfg, common, out, t0)
    out["draws"] = posterior_arrays(idata, names, chains if kind == "advi" else None)
    return out


def describe(adapter) -> str | None:
    """A step-size adapter's step size (or schedule), for the JSON output."""
    if adapter is None:
        return None
    for name in ("step_size", "value", "schedule"):
        if hasattr(adapter, name):
            with contextlib.suppress(Exception):
                return repr(getattr(adapter, name))
    return None


def run_numpyro(
    cfg: dict, X: np.ndarray, y: np.ndarray, g: np.ndarray | None, names: list[str], t0: float
) -> dict:
    """NumPyro's NUTS directly, chains vectorised (or ``cfg["chain_method"]``).

    A full run reports the draws' tree sizes (the warm-up's are estimated from them); a
    short run to extrapolate warms up apart and reports the warm-up's too.
    """
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    jax_clock = JaxCompileClock()
    form = cfg.get("form", "non-centred")
    strong = None
    if form == "mixed":
        strong = np.bincount(g, minlength=cfg["groups"]) >= STRONG_GROUP_ROWS
    model = numpyro_model_fn(g is not None, cfg.get("groups", 0), form, strong)
    data = (jnp.asarray(X), jnp.asarray(y)) + ((jnp.asarray(g),) if g is not None else ())
    mcmc = MCMC(
        NUTS(model),
        num_warmup=cfg["tune"],
        num_samples=cfg["draws"],
        num_chains=cfg["chains"],
        chain_method=cfg.get("chain_method", "vectorized"),
        progress_bar=False,
    )
    start = time.perf_counter()
    key = jax.random.PRNGKey(seed_of(cfg["label"], cfg["seed"]))
    tune_steps, uncounted = None, 0.0
    if cfg.get("full_tune") is not None:
        # A short run to extrapolate: warm-up apart, for its tree sizes (its first
        # iterations build the largest trees, which the draws' mean would miss). run()
        # after warmup() compiles the sampler again; that second compile is not counted.
        mcmc.warmup(key, *data, extra_fields=("num_steps",), collect_warmup=True)
        fields = mcmc.get_extra_fields(group_by_chain=True)
        tune_steps = np.asarray(fields["num_steps"], float).reshape(cfg["chains"], -1)
        between = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *data, extra_fields=("num_steps",))
    else:
        mcmc.run(key, *data, extra_fields=("num_steps",))
    samples = mcmc.get_samples(group_by_chain=True)
    draws = {name: np.asarray(samples[name]) for name in names}
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"], float)
    stop = time.perf_counter()
    if tune_steps is not None:
        uncounted = jax_clock.within(between, stop)
    sampling = stop - start - jax_clock.within(start, stop)
    steps = steps.reshape(cfg["chains"], -1)
    vectorized = cfg.get("chain_method", "vectorized") == "vectorized"
    out = {
        "notes": [],
        "steps_exact": tune_steps is not None,
        "setup_s": stop - t0 - sampling - uncounted,
        "uncounted_s": uncounted,
        "tune_steps": (
            tune_steps.sum(axis=1) if tune_steps is not None else cfg["tune"] * steps.mean(axis=1)
        ),
        "draw_steps": steps.sum(axis=1),
        "draws": draws,
    }
    if vectorized:
        # Vectorised chains move together: an iteration costs the largest tree of the chains.
        out["joint_draw_steps"] = float(steps.max(axis=0).sum())
        if tune_steps is not None:
            out["joint_tune_steps"] = float(tune_steps.max(axis=0).sum())
    if uncounted:
        out["notes"].append(
            f"a second compile of {uncounted:.1f} s (warmup() then run()) not counted"
        )
    return out
