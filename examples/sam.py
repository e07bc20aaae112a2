"""Spherical admixture model (SAM) on a small news corpus: SGGMC and gSGNHT against ADVI.

The real-data experiment of C. Liu, J. Zhu and Y. Song, "Stochastic Gradient Geodesic
MCMC Methods" (NIPS 2016), on a corpus small enough for a laptop: the 300 news articles
of the Lee background corpus that ship with gensim. Each document becomes its
normalised TF-IDF vector ``v_d`` on the sphere S^(V−1) over a pruned vocabulary of V
words, and SAM (J. Reisinger, A. Waters, B. Silverthorn and R. J. Mooney, "Spherical
topic models", ICML 2010) explains it as

    μ ~ vMF(m, κ0),    β_k ~ vMF(μ, σ)    (topics, k = 1..K)
    θ_d ~ Dirichlet(α),    v_d ~ vMF(normalise(Σ_k θ_dk β_k), κ)    (documents)

As in the slides, only the topics β are sampled, from their marginal posterior π(β | v):

* μ is integrated out exactly: ∫ vMF(μ|m, κ0) Π_k vMF(β_k|μ, σ) dμ =
  c(κ0) c(σ)^K / c(|κ0 m + σ Σ_k β_k|), with c the vMF normaliser on S^(V−1).
* θ_d is integrated out against a fixed set of G draws θ_1..θ_G from its Dirichlet
  prior: π(v_d | β) ≈ 1/G Σ_g vMF(v_d | normalise(β θ_g), κ). This is SAM with the
  Dirichlet replaced by the uniform law on those G points, so the sum is an exact
  marginal of a (slightly different) model that every method here shares. Its gradient
  in β is the slides' eq. 13, E_{π(θ|β, v)}[∇_β log π(β, θ | v)], with the expectation
  over π(θ | β, v) computed exactly on the G points instead of by an inner GMC run
  (the slides' Algorithm 3).

With θ gone, a minibatch of documents gives an unbiased gradient of the full log
density with no per-document latent variables to update, the setting SG-MCMC is made
for. SGGMC and gSGNHT run on all training documents and on minibatches of them; ADVI
(mean-field, on the sphere transform's ambient coordinates) fits the same model, also
with full data and with minibatches (the slides' variational and stochastic variational
baselines); ``--nuts`` adds NUTS.

The score is the slides' held-out log-perplexity (lower is better),

    logperp = −1/|D_test| Σ_d log( 1/M Σ_m π(v_d | β^(m)) ),
    π(v_d | β) = E_{θ ~ Dir(α)} [ vMF(v_d | normalise(βθ), κ) ],

with the expectation over θ estimated from fresh prior draws (not the training grid),
the same for every method. For samplers the β^(m) are the draws of the second half of
the run so far (the first half is burn-in); for ADVI it is the normalised mean of the
approximation, the slides' point estimate for variational methods. Every method starts
from the same topics (K randomly chosen training documents) and is timed from its first
draw or iteration; compilation is reported separately.

Default settings take 6–8 minutes on 2 cores; ``--quick`` (300 words, 5 topics, the
minibatch methods only, 10 s each) about 1–2 minutes; ``--plot FILE.png`` saves the
perplexity against time. Results: docs/examples/sam.md.
"""

import argparse
import time
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from gensim.corpora import Dictionary
from gensim.models import TfidfModel
from gensim.parsing.preprocessing import STOPWORDS
from gensim.test.utils import datapath
from gensim.utils import simple_preprocess
from scipy.special import logsumexp
from threadpoolctl import threadpool_limits

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.distributions import log_vmf_normaliser

N_TEST = 50
# Concentrations of the documents around their topic mixture (κ), of the topics around
# the corpus centre (σ) and of that centre around m (κ0); Dirichlet parameter α. κ is
# close to the maximum-likelihood concentration of the training documents around their
# best topic mixture in a pilot run (≈ 250 by the approximation of Banerjee et al.,
# "Clustering on the unit hypersphere using von Mises-Fisher distributions", JMLR
# 2005); with half of it, the topics' posterior was much wider and scored worse.
KAPPA, SIGMA, KAPPA0, ALPHA = 200.0, 100.0, 10.0, 1.0
N_THETA_GRID = 500  # prior draws of θ that the model integrates over
N_THETA_EVAL = 2_000  # fresh prior draws of θ for the held-out perplexity
MAX_EVAL_DRAWS = 100  # β draws per perplexity estimate (thinned from the window)
BATCH = 50  # documents per minibatch gradient
MAX_DRAWS = 20_000  # bound on the trace pm.sample allocates; the time budget ends runs


@dataclass
class Config:
    """Sizes, sampler settings and time budgets; ``--quick`` shrinks them."""

    vocab: int = 500
    topics: int = 8
    budget_s: float = 45.0  # seconds of sampling or fitting per method, after compilation
    checkpoints: tuple = (1, 2, 5, 10, 20, 45)  # seconds after the first draw
    full_batch: bool = True  # also run every method on all training documents
    nuts: bool = False
    # (label, sampler, settings, batch); filled in by sampler_runs
    runs: list = field(default_factory=list)


QUICK = Config(vocab=300, topics=5, budget_s=10.0, checkpoints=(1, 2, 5, 10), full_batch=False)


def sampler_runs(config: Config) -> list:
    """SG-MCMC runs of a configuration: (label, sampler class, settings, batch).

    Full data: ε is set by the stiffest directions of the posterior (curvatures up to
    ~5·10⁴ per coordinate near a fit, so ε√h ≲ 0.45, and ≈ 0.1 for a typical one), and a
    friction of 1 keeps the dynamics close to Hamiltonian. A minibatch of 50 documents
    adds gradient noise of variance V ≈ 2·10⁴ per coordinate on average (up to ~2·10⁵
    for the heaviest words), which heats the dynamics by about εV/2 against the friction
    C. Hence an eight times smaller ε with minibatches, εV/2 ≈ 2 on average, and C = 10
    for SGGMC (its kinetic temperature, printed at the end, shows what heat is left);
    gSGNHT's thermostat raises its own friction to absorb it.
    """
    runs = []
    if config.full_batch:
        runs += [
            ("SGGMC", pmsg.SGGMC, {"step_size": 0.002, "n_steps": 20, "friction": 1.0}, None),
            ("gSGNHT", pmsg.GSGNHT, {"step_size": 0.002, "n_steps": 20, "diffusion": 1.0}, None),
        ]
    runs += [
        (
            f"SGGMC, batch {BATCH}",
            pmsg.SGGMC,
            {"step_size": 0.00025, "n_steps": 20, "friction": 10.0},
            BATCH,
        ),
        (
            f"gSGNHT, batch {BATCH}",
            pmsg.GSGNHT,
            {"step_size": 0.00025, "n_steps": 20, "diffusion": 1.0},
            BATCH,
        ),
    ]
    return runs


# -- corpus ------------------------------------------------------------------------------


def load_corpus(vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Normalised TF-IDF vectors of the Lee corpus: (train, test, words).

    The vocabulary and the IDF weights come from the training documents alone, so that
    nothing about the held-out documents enters the model.
    """
    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        texts = [line for line in f if line.strip()]
    tokens = [[w for w in simple_preprocess(t, min_len=3) if w not in STOPWORDS] for t in texts]
    order = np.random.default_rng(seed).permutation(len(tokens))
    train_tokens = [tokens[i] for i in order[N_TEST:]]
    test_tokens = [tokens[i] for i in order[:N_TEST]]
    dictionary = Dictionary(train_tokens)
    # Words in at least 5 documents and at most half of them: rare words carry no topic
    # signal on a few hundred documents, ubiquitous ones no contrast.
    dictionary.filter_extremes(no_below=5, no_above=0.5, keep_n=vocab)
    tfidf = TfidfModel(dictionary=dictionary, normalize=True)

    def vectors(docs: list[list[str]]) -> np.ndarray:
        out = np.zeros((len(docs), len(dictionary)))
        for row, doc in enumerate(docs):
            for word, weight in tfidf[dictionary.doc2bow(doc)]:
                out[row, word] = weight
        out = out[np.linalg.norm(out, axis=1) > 0]  # documents left with no word
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    words = [dictionary[i] for i in range(len(dictionary))]
    return vectors(train_tokens), vectors(test_tokens), words


# -- model -------------------------------------------------------------------------------


def theta_draws(topics: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(topics, ALPHA), n)


def log_doc_likelihood(docs, beta, theta, log_c: float):
    """``log 1/G Σ_g vMF(v_d | normalise(β θ_g), κ)`` for each row of ``docs``.

    Works on NumPy arrays and PyTensor variables alike, so the model and the held-out
    score use the same formula. ``(docs @ means.T)`` is one matrix product: forming the
    (documents × G × V) array of a broadcast cosine would cost G times the memory.
    """
    xp = pt if isinstance(beta, pt.TensorVariable) else np
    means = xp.dot(theta, beta)  # (G, V): the mean directions, not yet normalised
    norms = xp.sqrt(xp.sum(means**2, axis=-1))
    cosine = (docs @ means.T) / norms  # (documents, G)
    lse = pt.logsumexp if xp is pt else logsumexp
    return lse(KAPPA * cosine, axis=-1) - np.log(theta.shape[0]) + log_c


def build_model(train: np.ndarray, topics: int, batch: int | None = None) -> pm.Model:
    """SAM with μ and θ integrated out; ``batch`` documents per gradient, or all."""
    n_docs, vocab = train.shape
    centre = train.mean(axis=0)
    centre /= np.linalg.norm(centre)  # m: the direction of the mean training document
    theta = theta_draws(topics, N_THETA_GRID, seed=4)
    log_c = float(log_vmf_normaliser(vocab, KAPPA))
    with pm.Model() as model:
        if batch:
            docs = pm.Minibatch(train, batch_size=batch)
        else:
            # As data rather than a constant, so the compiled code can be cached on disk.
            docs = pm.Data("docs", train)
        beta = pmsg.SphereUniform("beta", shape=(topics, vocab))
        # μ integrated out: log c(|κ0 m + σ Σ β_k|) is all that depends on β (the
        # uniform density above is a constant).
        resultant = KAPPA0 * centre + SIGMA * beta.sum(axis=0)
        pm.Potential("topic_prior", -log_vmf_normaliser(vocab, pt.sqrt(pt.sum(resultant**2))))
        # A potential takes no total_size: the minibatch sum is scaled to the corpus here.
        loglik = log_doc_likelihood(docs, beta, theta, log_c).sum()
        pm.Potential("documents", loglik * (n_docs / batch if batch else 1.0))
    return model


def initial_topics(train: np.ndarray, topics: int, seed: int = 1) -> np.ndarray:
    """K distinct training documents: a start near the data that every method shares."""
    rows = np.random.default_rng(seed).choice(len(train), size=topics, replace=False)
    return train[rows]


# -- held-out log-perplexity ------------------------------------------------------------


class Perplexity:
    """The slides' held-out log-perplexity, with fresh prior draws of θ."""

    def __init__(self, test: np.ndarray, topics: int, seed: int = 2) -> None:
        self.test = test
        self.theta = theta_draws(topics, N_THETA_EVAL, seed)
        self.log_c = float(log_vmf_normaliser(test.shape[1], KAPPA))

    def __call__(self, betas: list[np.ndarray]) -> float:
        per_draw = np.stack(
            [log_doc_likelihood(self.test, b, self.theta, self.log_c) for b in betas]
        )  # (draws, documents)
        return float(-np.mean(logsumexp(per_draw, axis=0) - np.log(len(betas))))


# -- runs --------------------------------------------------------------------------------


@dataclass
class Trace:
    """Topics recorded during a run, with the seconds since the first draw.

    At most one β every ``spacing`` seconds is kept: a draw of β holds K·V numbers, and
    the perplexity only needs a few dozen of them per checkpoint.
    """

    label: str
    spacing: float
    point_estimate: bool = False  # ADVI: the latest mean, not an average over draws
    setup_s: float = 0.0  # from the call to the first draw: compilation, initialisation
    n_draws: int = 0
    elapsed_s: float = 0.0  # at the last draw
    times: list = field(default_factory=list)
    betas: list = field(default_factory=list)
    stats: list = field(default_factory=list)  # sampler statistics of the kept draws

    def record(self, start: float, beta, stats: dict | None = None) -> float:
        """Note a draw (``beta`` may be a callable, evaluated only if kept); seconds so far."""
        now = time.perf_counter()
        if not self.n_draws:
            self.setup_s = now - start
        self.n_draws += 1
        elapsed = self.elapsed_s = now - start - self.setup_s
        if not self.times or elapsed - self.times[-1] >= self.spacing:
            beta = np.array(beta() if callable(beta) else beta)
            self.times.append(elapsed)
            self.betas.append(beta / np.linalg.norm(beta, axis=-1, keepdims=True))
            self.stats.append(stats or {})
        return elapsed

    def window(self, seconds: float) -> list[np.ndarray]:
        """β to score at ``seconds``: the second half of the draws, thinned, or the estimate."""
        n = max(1, int(np.searchsorted(self.times, seconds, side="right")))
        if self.point_estimate:
            return [self.betas[n - 1]]
        draws = self.betas[n // 2 : n]
        step = max(1, len(draws) // MAX_EVAL_DRAWS)
        return draws[::-1][::step][::-1]  # keep the last draw

    def mean_direction(self, seconds: float) -> np.ndarray:
        """Normalised mean of the window's draws: a point estimate from the samples."""
        mean = np.mean(self.window(seconds), axis=0)
        return mean / np.linalg.norm(mean, axis=-1, keepdims=True)

    def mean_stat(self, name: str) -> float:
        """Average of a sampler statistic over the second half of the run."""
        values = [s[name] for s in self.stats[len(self.stats) // 2 :] if name in s]
        return float(np.mean(values)) if values else float("nan")


def _sample(model, record: Trace, budget_s: float, beta0: np.ndarray, **kwargs) -> Trace:
    """``pm.sample`` on one chain until ``budget_s`` seconds after its first draw."""
    start = time.perf_counter()

    def callback(trace, draw) -> None:
        stats = draw.stats[0] if draw.stats else {}
        if record.record(start, draw.point["beta_sphere__"], stats) > budget_s:
            raise KeyboardInterrupt  # pm.sample stops and keeps the draws so far

    with model:
        pm.sample(
            draws=MAX_DRAWS,  # the time budget stops the run first
            chains=1,
            initvals={"beta": beta0},
            callback=callback,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,  # a short NUTS run may end within its warm-up
            **kwargs,
        )
    return record


def run_sampler(model, step, label: str, budget_s: float, beta0: np.ndarray) -> Trace:
    return _sample(model, Trace(label, budget_s / 1000), budget_s, beta0, step=step, tune=0)


def run_nuts(model, budget_s: float, beta0: np.ndarray, tune: int) -> Trace:
    """NUTS with a short warm-up, whose draws count in the timeline like any others.

    The sphere transform's value variable has a chi-distributed radius; starting at the
    typical radius √V spares the warm-up a long radial drift from radius 1.
    """
    beta0 = beta0 * np.sqrt(beta0.shape[1])
    return _sample(model, Trace("NUTS", budget_s / 1000), budget_s, beta0, tune=tune)


def run_advi(model, label: str, budget_s: float, beta0: np.ndarray) -> Trace:
    """Mean-field ADVI; its point estimate is the normalised mean of the ``beta`` factor.

    The mean starts at the typical radius √V of the sphere transform's value variable
    (see :func:`run_nuts`): at radius 1, ADVI's initial spread (0.69 per coordinate)
    would scramble the direction of every draw of β.
    """
    record = Trace(label, budget_s / 1000, point_estimate=True)
    start = time.perf_counter()
    advi = pm.ADVI(model=model, start={"beta": beta0 * np.sqrt(beta0.shape[1])}, random_seed=3)
    _, beta_slice, beta_shape, _ = advi.approx.groups[0].ordering["beta_sphere__"]
    mean = advi.approx.params[0]  # the flat mean of the mean-field Gaussian

    def beta() -> np.ndarray:
        return mean.get_value()[beta_slice].reshape(beta_shape)

    def callback(approx, losses, i) -> None:
        if record.record(start, beta) > budget_s:
            raise StopIteration  # pm.fit stops and keeps the fit so far

    advi.fit(
        10**7,
        obj_optimizer=pm.adam(learning_rate=0.02),
        callbacks=[callback],
        progressbar=False,
    )
    return record


def top_words(beta: np.ndarray, words: list[str], n: int = 8) -> list[str]:
    return [" ".join(words[i] for i in np.argsort(-topic)[:n]) for topic in beta]


# -- main --------------------------------------------------------------------------------


def parse_args() -> tuple[Config, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, ~2 minutes")
    parser.add_argument("--nuts", action="store_true", help="also run NUTS (slow)")
    parser.add_argument("--plot", metavar="PNG", help="save perplexity against time")
    args = parser.parse_args()
    config = QUICK if args.quick else Config()
    config.nuts = args.nuts
    config.runs = sampler_runs(config)
    return config, args.plot


def score(traces: list[Trace], perplexity: Perplexity, config: Config) -> dict:
    """Perplexity at each checkpoint a run reached: (slides' score, point estimate)."""
    return {
        t.label: {
            c: (perplexity(t.window(c)), perplexity([t.mean_direction(c)]))
            for c in config.checkpoints
            if c <= t.elapsed_s
        }
        for t in traces
    }


def print_table(traces: list[Trace], scores: dict, config: Config, which: int) -> None:
    header = " | ".join(f"{c} s" for c in config.checkpoints)
    print(f"| method | compile s | draws | {header} |")
    print("| --- " * (3 + len(config.checkpoints)) + "|")
    for t in traces:
        values = scores[t.label]
        cells = [f"{values[c][which]:.2f}" if c in values else "" for c in config.checkpoints]
        print(f"| {t.label} | {t.setup_s:.1f} | {t.n_draws} | " + " | ".join(cells) + " |")


def plot(traces: list[Trace], scores: dict, baseline: float, path: str) -> None:
    """Both scores against time, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    titles = ("slides' score: π(v | β) averaged over draws", "point estimate: mean direction")
    for which, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        for t in traces:
            times = list(scores[t.label])
            ax.plot(times, [scores[t.label][c][which] for c in times], marker="o", label=t.label)
        ax.axhline(baseline, color="grey", linestyle=":", label="initial topics")
        ax.set_xscale("log")
        ax.set_xlabel("seconds after the first draw (compilation excluded)")
        ax.set_title(title, fontsize="medium")
    axes[0].set_ylabel("held-out log-perplexity (lower is better)")
    axes[1].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"\nSaved {path}")


def main() -> None:
    config, plot_path = parse_args()
    train, test, words = load_corpus(config.vocab)
    n_docs, vocab = train.shape
    print(
        f"Lee corpus: {n_docs} training and {len(test)} held-out documents, V = {vocab} "
        f"words, K = {config.topics} topics; κ = {KAPPA}, σ = {SIGMA}, κ0 = {KAPPA0}, "
        f"α = {ALPHA}; θ integrated over {N_THETA_GRID} prior draws.\n"
    )
    model = build_model(train, config.topics) if config.full_batch or config.nuts else None
    batch_model = build_model(train, config.topics, BATCH)
    beta0 = initial_topics(train, config.topics)
    perplexity = Perplexity(test, config.topics)

    budget = config.budget_s
    traces = []
    for label, sampler, settings, batch in config.runs:
        on = batch_model if batch else model
        step = sampler(model=on, **settings)
        traces.append(run_sampler(on, step, label, budget, beta0))
    if config.full_batch:
        traces.append(run_advi(model, "ADVI", budget, beta0))
    traces.append(run_advi(batch_model, f"ADVI, batch {BATCH}", budget, beta0))
    if config.nuts:
        traces.append(run_nuts(model, budget, beta0, tune=200))

    baseline = perplexity([beta0])
    scores = score(traces, perplexity, config)
    print(
        "\nHeld-out log-perplexity (lower is better) after the given seconds of sampling or "
        f"fitting; the initial topics score {baseline:.2f}.\nCompile: seconds from the call "
        "to the first draw.\n\nThe slides' score: samplers average π(v_d | β) over (up to "
        f"{MAX_EVAL_DRAWS} of) the second half of their draws; ADVI scores its mean.\n"
    )
    print_table(traces, scores, config, which=0)
    print(
        "\nPoint estimate: the same draws' normalised mean direction, scored as one β "
        "(ADVI: its mean, as above).\n"
    )
    print_table(traces, scores, config, which=1)

    print("\nSampler diagnostics over the second half of each run:")
    for t in traces:
        temperature = t.mean_stat("kinetic_temperature")
        if np.isfinite(temperature):
            xi = t.mean_stat("thermostat")
            extra = f", thermostat ξ = {xi:.2f}" if np.isfinite(xi) else ""
            print(f"  {t.label}: kinetic temperature {temperature:.2f}{extra}")

    final = traces[0]
    print(f"\nTopics: top words of {final.label}'s point estimate at the end.")
    for k, line in enumerate(top_words(final.mean_direction(final.elapsed_s), words)):
        print(f"  {k}: {line}")
    if plot_path:
        plot(traces, scores, baseline, plot_path)


if __name__ == "__main__":
    # One BLAS thread (what pm.sample's blas_cores default asks for with one core), for
    # ADVI and the scoring too: on a small shared machine, BLAS threads waiting for a
    # core made the matrix products several times slower, not faster.
    with threadpool_limits(limits=1):
        main()
