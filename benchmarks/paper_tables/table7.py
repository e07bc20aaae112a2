"""Table 7: the MCEM paper's Table 4 and Figure 1, a Gamma-process Poisson factor analysis.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §4.3:
test perplexity of a nonparametric topic model (Poisson factor analysis with a
Gamma-process prior on the topics' weights) against iterations and wall-clock time, for
SGHMC, SGNHT, SG-NPHMC and their EM variants (the paper's SGR-NPHMC row, its slowest, is
not run). At laptop scale:

- **Corpus.** The Lee background corpus that gensim ships (300 news articles; the paper:
  20-Newsgroups, 18,845 documents, and RCV1, 804,414). Tokens of at least three letters
  less gensim's stop words; the vocabulary is the words of at least 3 and at most half
  of the training documents (1,415 words; the paper: 2,000 and 10,000). The first 60 %
  of the documents in the corpus's order train, the rest test (the paper's chronological
  60-40 split).
- **Model.** ``y_nv ~ Poisson(Σ_k θ_nk φ_kv)`` with ``K = 20`` topics (the paper: 100),
  ``φ_k ~ Dirichlet(0.1)`` over the vocabulary, ``θ_nk ~ Gamma(r_k, rate (1 − p_n)/p_n)``,
  ``p_n ~ Beta(1, 1)`` per document, and the topics' weights from the truncated
  Gamma-process construction of Roychowdhury and Kulis ("Gamma Processes,
  Stick-Breaking, and Variational Inference"), as we read it: ``r_k = E_k e^{−T_k}``,
  ``E_k ~ Exponential(c)``, ``T_k ~ Gamma(i_k, α)`` for atom ``k`` in round ``i_k``
  (4 rounds of 5 atoms), ``α, c ~ Gamma(1, 1)``. The construction's third
  hyperparameter ``γ`` (the expected atoms per round) only sets how many atoms a round
  has; at a fixed truncation with fixed rounds it reads no data, so it is not sampled.
- **Held-out documents.** The paper learns each test document's parameters from 80 % of
  its words and scores the other 20 %. Here those 80 % enter the model as more
  documents (their ``θ_n`` are sampled with the rest, which lets them inform the topics
  a little) and the 20 % are scored by the perplexity of the Riemannian paper's
  supplement (§D.2): ``exp(−Σ y_nv log m_nv / Σ y_nv)``, ``m_nv`` the mean over the
  collected draws of ``Θ Φ``, normalised over the vocabulary.
- **Samplers.** As in the paper's own tables: plain minibatch gradients
  (``gradient="minibatch"``) of 20 documents, 10 leapfrog steps per iteration, one step
  size ``ε = 10⁻³`` for all, identity mass to start (the EM rows learn theirs; the
  paper keeps the mass of its ``E_k`` chain fixed, ours learns all of it), SGHMC with
  ``B̂ = 0``, every sampler started at the model's initial point. The package's grouped
  minibatches are turned off (``groups=False``: SG-NPHMC has none, and the paper
  updates every sampler alike); one more row runs SGNHT with them (``groups="auto"``:
  each drawn document's ``θ`` gets its exact gradient and every document's ``θ`` an
  exact move after each iteration). With default arguments the package refuses this
  model: its joint density has no mode (``r_k → 0`` with every ``θ_nk → 0`` grows without
  bound), so there is no start, mass or anchor to take from one (docs/hierarchical.md).
- **Length.** 1,000 burn-in (tuning) iterations and 1,000 kept, a perplexity draw every
  50 (the paper: 1,500 and 1,500, every 100); ``--quick``: 300 and 300, every 30. Time is
  the wall clock of each iteration (``pm.sample``'s callback), set-up and compilation
  not counted.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.exceptions import SamplingError

import pymc_sgmcmc as pmsg

from .config import N_STEPS, PAPER_SGHMC, PAPER_SGNHT, SEED
from .output import print_table, progress
from .paper import PAPER_TABLE4

TOPICS = 20
ROUNDS = 4
BATCH_DOCUMENTS = 20
STEP_SIZE = 1e-3
PHI_CONCENTRATION = 0.1
TRAIN_SHARE = 0.6
OBSERVED_SHARE = 0.8
"""Share of each test document's words given to the model; the rest are scored."""

ROWS = [
    ("SGHMC", pmsg.SGHMC, PAPER_SGHMC),
    ("SGHMC-EM", pmsg.SGHMCEM, PAPER_SGHMC),
    ("SGNHT", pmsg.SGNHT, PAPER_SGNHT),
    ("SGNHT-EM", pmsg.SGNHTEM, PAPER_SGNHT),
    ("SG-NPHMC", pmsg.SGNPHMC, {"gradient": "minibatch"}),
    ("SG-NPHMC-EM", pmsg.SGNPHMCEM, {"gradient": "minibatch"}),
]


def lee_counts() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Word counts of the Lee corpus: (training documents, test documents, words)."""
    from gensim.corpora import Dictionary
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.test.utils import datapath
    from gensim.utils import simple_preprocess

    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        texts = [line for line in f if line.strip()]
    tokens = [[w for w in simple_preprocess(t, min_len=3) if w not in STOPWORDS] for t in texts]
    n_train = int(TRAIN_SHARE * len(tokens))
    dictionary = Dictionary(tokens[:n_train])
    dictionary.filter_extremes(no_below=3, no_above=0.5, keep_n=None)

    def counts(docs: list[list[str]]) -> np.ndarray:
        out = np.zeros((len(docs), len(dictionary)))
        for row, doc in enumerate(docs):
            for word, count in dictionary.doc2bow(doc):
                out[row, word] = count
        return out

    words = [dictionary[i] for i in range(len(dictionary))]
    return counts(tokens[:n_train]), counts(tokens[n_train:]), words


def split_words(
    counts: np.ndarray, share: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each document's words split at random: ``share`` of them, and the rest."""
    kept, held = np.zeros_like(counts), np.zeros_like(counts)
    for row, doc in enumerate(counts):
        words = rng.permutation(np.repeat(np.arange(counts.shape[1]), doc.astype(int)))
        cut = int(share * words.size)
        kept[row] = np.bincount(words[:cut], minlength=counts.shape[1])
        held[row] = np.bincount(words[cut:], minlength=counts.shape[1])
    return kept, held


def gamma_process_pfa(counts: np.ndarray, batch: int) -> pm.Model:
    """The Poisson factor analysis of the module's docstring, minibatched by document."""
    n_docs, vocabulary = counts.shape
    rounds = np.repeat(np.arange(1, ROUNDS + 1), TOPICS // ROUNDS)
    with pm.Model() as model:
        document, rows = pm.Minibatch(np.arange(n_docs), counts, batch_size=batch)
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        c = pm.Gamma("c", 1.0, 1.0)
        e = pm.Exponential("E", c, shape=TOPICS)
        t = pm.Gamma("T", alpha=rounds, beta=alpha, shape=TOPICS)
        r = pm.Deterministic("r", e * pt.exp(-t))
        p = pm.Beta("p", 1.0, 1.0, shape=n_docs)
        theta = pm.Gamma("theta", alpha=r, beta=((1 - p) / p)[:, None], shape=(n_docs, TOPICS))
        phi = pm.Dirichlet("phi", a=np.full((TOPICS, vocabulary), PHI_CONCENTRATION))
        pm.Poisson("y", mu=theta[document] @ phi, observed=rows, total_size=counts.shape)
    return model


def perplexity(theta: np.ndarray, phi: np.ndarray, held: np.ndarray) -> float:
    """The supplement's §D.2 perplexity of ``held`` given draws of ``θ`` and ``φ``.

    ``theta``: (draws, documents, topics); ``phi``: (draws, topics, words).
    """
    rates = np.einsum("snk,skv->nv", theta, phi)
    m = rates / rates.sum(axis=1, keepdims=True)
    return float(np.exp(-(held * np.log(m)).sum() / held.sum()))


def run_row(name, sampler, kwargs, data, sizes, groups) -> dict:
    """One chain: perplexity after each collected draw, and the time of every iteration."""
    counts, held, n_train = data
    model = gamma_process_pfa(counts, BATCH_DOCUMENTS)
    with model:
        step = sampler(
            step_size=STEP_SIZE,
            n_steps=N_STEPS,
            start="initial_point",
            **({} if sampler in (pmsg.SGNPHMC, pmsg.SGNPHMCEM) else {"groups": groups}),
            **kwargs,
        )
        stamps = []
        idata = pm.sample(
            tune=sizes.tune,
            draws=sizes.draws,
            chains=1,
            cores=1,
            step=step,
            random_seed=SEED,
            progressbar=False,
            compute_convergence_checks=False,
            callback=lambda **_: stamps.append(time.perf_counter()),
        )
    seconds = np.diff(stamps)
    posterior = idata.posterior
    theta = posterior["theta"].values[0, :, n_train:]
    phi = posterior["phi"].values[0]
    collected = np.arange(sizes.stride - 1, sizes.draws, sizes.stride)
    curve = [
        perplexity(theta[collected[: k + 1]], phi[collected[: k + 1]], held)
        for k in range(collected.size)
    ]
    kept_start = sizes.tune - 1  # stamps[i] ends iteration i; iteration tune is the first kept
    elapsed = np.asarray(stamps)[sizes.tune + collected] - stamps[kept_start]
    return {
        "name": name,
        "iterations": collected + 1,
        "elapsed": elapsed,
        "curve": np.asarray(curve),
        "seconds": float(np.median(seconds)),
    }


class Sizes7:
    """Burn-in, kept iterations and the stride of the collected draws."""

    def __init__(self, quick: bool) -> None:
        self.tune, self.draws, self.stride = (300, 300, 30) if quick else (1000, 1000, 50)


def table7(quick: bool, plot: str | None = None, mass_estimator: str | None = None) -> list[dict]:
    """Print the table (and save Figure 1's two panels to ``plot``).

    ``mass_estimator`` is given to the EM rows where set (``"momentum"``: the paper's M
    step; by default theirs is the package's default).
    """
    sizes = Sizes7(quick)
    train, test, words = lee_counts()
    observed, held = split_words(test, OBSERVED_SHARE, np.random.default_rng(SEED))
    counts = np.concatenate([train, observed])
    data = (counts, held, train.shape[0])
    unigram = (train.sum(0) + observed.sum(0) + 0.5) / (counts.sum() + 0.5 * len(words))
    baseline = float(np.exp(-(held * np.log(unigram)).sum() / held.sum()))
    em = {} if mass_estimator is None else {"mass_estimator": mass_estimator}
    specs = [
        (name, sampler, kwargs | (em if name.endswith("-EM") else {}), False)
        for name, sampler, kwargs in ROWS
    ]
    specs.append(("SGNHT, grouped", pmsg.SGNHT, PAPER_SGNHT, "auto"))
    results, failures = [], []
    for name, sampler, kwargs, groups in specs:
        progress(f"Table 7: {name}")
        try:
            results.append(run_row(name, sampler, kwargs, data, sizes, groups))
        except SamplingError as error:  # a row that blows up is a result, not the end
            failures.append(f"{name}: {error}")
            results.append({"name": name, "failed": True})
    rows = []
    for result in results:
        paper = PAPER_TABLE4.get(result["name"], (None, None))
        failed = result.get("failed", False)
        rows.append(
            [
                result["name"],
                "stopped (below)" if failed else f"{result['curve'][-1]:.0f}",
                "—" if failed else f"{1e3 * result['seconds']:.0f} ms",
                "—" if paper[0] is None else f"{paper[0]}",
                "—" if paper[1] is None else f"{paper[1]:.3f} s",
            ]
        )
    print_table(
        "Table 7 (the MCEM paper's Table 4): test perplexity and time per iteration",
        ["sampler", "perplexity", "time / iteration", "paper (20-News)", "paper time"],
        rows,
        notes=[
            f"Lee corpus, {train.shape[0]} training and {test.shape[0]} test documents, "
            f"{len(words)} words, {int(held.sum())} held-out tokens; {TOPICS} topics; "
            f"{sizes.tune} burn-in and {sizes.draws} kept iterations, a draw every "
            f"{sizes.stride}. Unigram perplexity (word frequencies of the observed "
            f"documents): {baseline:.0f}. EM rows' M step: "
            f"mass_estimator={mass_estimator or 'the default'}.",
            *failures,
        ],
    )
    if plot:
        save_figure([r for r in results if not r.get("failed")], plot, baseline)
    return results


def save_figure(results: list[dict], path: str, baseline: float) -> None:
    """Figure 1: perplexity against post-burn-in iterations and against seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for result in results:
        style = "--" if "grouped" in result["name"] else "-"
        axes[0].plot(result["iterations"], result["curve"], style, label=result["name"])
        axes[1].plot(result["elapsed"], result["curve"], style, label=result["name"])
    for ax, label in zip(axes, ["post-burn-in iterations", "seconds after burn-in"], strict=True):
        ax.axhline(baseline, color="grey", lw=0.8, ls=":")
        ax.set_xlabel(label)
    axes[0].set_ylabel("test perplexity")
    axes[1].legend(fontsize=8)
    fig.suptitle("Gamma-process Poisson factor analysis, Lee corpus (dotted: unigram)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
