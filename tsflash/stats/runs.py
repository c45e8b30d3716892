"""Question 1 tested at the unit of its claim, training runs: the primary test of "does
arm B (a context length N) forecast better than arm A", its A/A calibration, its power, a
simulator of runs for both, PBO's null distribution for few candidates, and the nesting check
(a long-N model with its context cut to the shortest N against the shortest-N model, over the
same runs). Torch-free (numpy and scipy); it reads per-day loss sums, the table
`tsflash.scoring.daily.fold_losses` writes, or one mean loss per run (`runs_from_means`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
import scipy  # scipy.stats and scipy.optimize load on first use (`tsflash data --help` imports this package)

from tsflash.errors import UserError
from tsflash.stats.forecasts import ALPHA, holm
from tsflash.stats.pbo import CSCV_BLOCKS, pbo_cscv

SEED_PREFIX = "seed"  # the loss table's member names of single runs ("seed0"); the rest are ensembles
VERDICTS = ("better", "no better", "worse")  # B against A: B's loss significantly lower / neither / higher
PBO_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
SEED_TESTS = ("fold", "crossed")  # run_level_test's treatment of seeds: the config's eval.seed_inference


class RunTestInputError(UserError, ValueError):
    """Input the run-level test cannot use; the message names the rule and the values."""


# ---------------------------------------------------------------------------------------------
# Runs: one arm's training runs as per-day loss sums


@dataclass(frozen=True, eq=False)
class Runs:
    """One arm's training runs as per-day loss sums, one row per (fold, seed, day).

    label : the arm's name in messages and results ("N=512").
    fold, seed : (R,) int; day : (R,) any comparable day key (datetime64[D] or int);
    loss : (R,) float64, the day's summed per-bar loss; count : (R,) float64, the bars it sums.
    """

    label: str
    fold: np.ndarray
    seed: np.ndarray
    day: np.ndarray
    loss: np.ndarray
    count: np.ndarray

    def __post_init__(self):
        cols = {
            "fold": np.asarray(self.fold, np.int64),
            "seed": np.asarray(self.seed, np.int64),
            "day": np.asarray(self.day),
            "loss": np.asarray(self.loss, np.float64),
            "count": np.asarray(self.count, np.float64),
        }
        lengths = {k: v.shape for k, v in cols.items()}
        if len(set(lengths.values())) != 1 or cols["fold"].ndim != 1:
            raise RunTestInputError(
                f"{self.label}: fold, seed, day, loss and count must be 1-D of one length, got shapes {lengths}"
            )
        for k, v in cols.items():
            object.__setattr__(self, k, v)

    def seeds_of(self, fold: int) -> list[int]:
        return sorted(set(self.seed[self.fold == fold].tolist()))

    @property
    def folds(self) -> list[int]:
        return sorted(set(self.fold.tolist()))

    def subset(self, seeds: Sequence[int], label: str | None = None) -> Runs:
        """The runs of `seeds` only (on every fold)."""
        keep = np.isin(self.seed, list(seeds))
        return Runs(
            label or self.label, self.fold[keep], self.seed[keep], self.day[keep], self.loss[keep], self.count[keep]
        )


def runs_from_table(
    table: Mapping, series: str, *, loss: str = "log_loss", count: str = "n_labelled", label: str | None = None
) -> Runs:
    """The single runs ("seed<k>" members) of `series` in a loss table (`tsflash.scoring.daily.read_losses`
    or `tsflash.report.compute.read_table`), on the score summed in column `loss` over the bars
    counted in `count` (log-loss: log_loss / n_labelled; direction: direction_loss / n_moves)."""
    member = np.asarray(table["member"]).astype(str)
    keep = (np.asarray(table["series"]).astype(str) == series) & np.char.startswith(member, SEED_PREFIX)
    if not keep.any():
        raise RunTestInputError(f"the loss table has no single runs ({SEED_PREFIX}<k> members) of {series!r}")
    seeds = np.array([int(m.removeprefix(SEED_PREFIX)) for m in member[keep]], np.int64)
    return Runs(
        label or series,
        np.asarray(table["fold"])[keep],
        seeds,
        np.asarray(table["day"])[keep],
        np.asarray(table[loss])[keep],
        np.asarray(table[count])[keep],
    )


def _check_finite(runs: Runs) -> None:
    bad = ~(np.isfinite(runs.loss) & np.isfinite(runs.count))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RunTestInputError(
            f"losses and bar counts must be finite (no NaN): {runs.label} has {int(bad.sum())} non-finite rows, "
            f"the first on fold {runs.fold[i]} seed {runs.seed[i]} day {runs.day[i]} "
            f"(loss {runs.loss[i]}, count {runs.count[i]})"
        )


def run_means(runs: Runs) -> dict[int, dict[int, float]]:
    """{fold: {seed: the run's mean loss per bar}}: its summed loss over its summed bar count."""
    _check_finite(runs)
    out: dict[int, dict[int, float]] = {}
    for f in runs.folds:
        for s in runs.seeds_of(f):
            m = (runs.fold == f) & (runs.seed == s)
            n = runs.count[m].sum()
            if n <= 0:
                raise RunTestInputError(f"each run needs scored bars: {runs.label} fold {f} seed {s} counts {n}")
            out.setdefault(f, {})[s] = float(runs.loss[m].sum() / n)
    return out


def _check_design(a: Runs, b: Runs, min_seeds_per_fold: int) -> None:
    """Same folds in both arms, enough runs per fold, every run of a fold on the same days."""
    if a.folds != b.folds:
        raise RunTestInputError(
            f"both arms need runs on the same folds: {a.label} has folds {a.folds}, {b.label} has {b.folds}"
        )
    if len(a.folds) < 2:
        raise RunTestInputError(f"the test needs at least 2 folds (its df is folds - 1), got {len(a.folds)}")
    for runs in (a, b):
        for f in runs.folds:
            k = len(runs.seeds_of(f))
            if k < min_seeds_per_fold:
                raise RunTestInputError(
                    f"each arm needs at least {min_seeds_per_fold} runs per fold: {runs.label} has {k} on fold {f}"
                )
    for f in a.folds:
        ref = None
        for runs in (a, b):
            for s in runs.seeds_of(f):
                days = runs.day[(runs.fold == f) & (runs.seed == s)]
                if ref is None:
                    ref = (runs.label, s, np.unique(days))
                if len(np.unique(days)) != len(days) or not np.array_equal(np.unique(days), ref[2]):
                    raise RunTestInputError(
                        f"every run of a fold must score the same days, once each: on fold {f}, {runs.label} seed "
                        f"{s} has {len(days)} rows on {len(np.unique(days))} days, {ref[0]} seed {ref[1]} "
                        f"{len(ref[2])} days"
                    )


# ---------------------------------------------------------------------------------------------
# The primary test


@dataclass(frozen=True)
class VarianceComponents:
    """The two levels of Var d_f, in (nats per bar)^2.

    between_fold : variance of the true difference B - A from fold to fold (the arm x fold
        interaction); estimated as what the fold differences spread beyond the seeds, floored at 0.
    within_fold_seed : variance of one run's mean loss per bar about its (arm, fold) mean (seed to
        seed, run to run and the days' noise in one run), pooled over arms and folds.
    seed_df : the degrees of freedom of within_fold_seed (runs minus (arm, fold) cells).
    """

    between_fold: float
    within_fold_seed: float
    seed_df: int

    @property
    def seed_sd(self) -> float:
        return math.sqrt(self.within_fold_seed)


@dataclass(frozen=True)
class RunTestResult:
    """`run_level_test`: arm B minus arm A, in nats per bar (negative: B forecasts better).

    p is two-sided; p_holm is p until `holm_adjust` sets it for a family; the verdict ("better",
    "no better", "worse": B's loss significantly lower, neither, significantly higher) reads
    p_holm at alpha. ci is the 1 - alpha interval of the estimate (t with df).
    """

    arm_a: str
    arm_b: str
    estimate: float
    se: float
    df: float  # folds - 1 for the fold t; Satterthwaite's (fractional) for seeds="crossed"
    t: float
    p: float
    ci: tuple[float, float]
    components: VarianceComponents
    n_runs_a: int
    n_runs_b: int
    folds: tuple[int, ...]
    fold_differences: tuple[float, ...]
    alpha: float
    p_holm: float
    verdict: str


def verdict_of(estimate: float, p: float, alpha: float = ALPHA) -> str:
    """B against A: "better" when B's loss is significantly lower, "worse" when higher."""
    if not p <= alpha:
        return "no better"
    return "better" if estimate < 0 else "worse"


def _seed_variance(means: Sequence[dict[int, dict[int, float]]]) -> tuple[float, int]:
    """(pooled within-(arm, fold) variance of run means, its df); NaN with no df."""
    ss, df = 0.0, 0
    for arm in means:
        for runs in arm.values():
            x = np.fromiter(runs.values(), float)
            ss, df = ss + float(((x - x.mean()) ** 2).sum()), df + len(x) - 1
    return (ss / df if df else math.nan), df


def one_sample_t(d: np.ndarray, alpha: float = ALPHA) -> tuple[float, float, int, float, float, tuple[float, float]]:
    """(mean, se, df, t, two-sided p, 1 - alpha interval) of the one-sample t of `d` against 0."""
    d = np.asarray(d, np.float64)
    mean, df = float(d.mean()), len(d) - 1
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else math.nan)
    p = float(2 * scipy.stats.t.sf(abs(t), df)) if not math.isnan(t) else 1.0
    half = float(scipy.stats.t.ppf(1 - alpha / 2, df) * se)
    return mean, se, df, float(t), p, (mean - half, mean + half)


def run_level_test(
    a: Runs, b: Runs, *, alpha: float = ALPHA, min_seeds_per_fold: int = 2, seeds: str = "fold"
) -> RunTestResult:
    """The primary test of question 1: arm B minus arm A over training runs (`RunTestResult`).

    `seeds` (the config's eval.seed_inference): "fold", the t over the fold means below; "crossed",
    `crossed_seed_test`'s estimate, se, Satterthwaite df, p and interval over folds and initial
    weights, in the same result (its variance components the fold t's).

    `min_seeds_per_fold` below 2 admits single runs (e.g. one seed against another, for A/A on
    three seeds); the t is the same, the split of its variance is then NaN where no arm and
    fold has two runs.

    The design, and why. A claim about *training* at context N must carry the variation of
    training: two seeds of one N differ by as much as the effects claimed, and a rerun of one seed
    moves too. A test that treats a seed ensemble's forecasts as fixed and takes its variance from
    the days alone (the forecast-level Diebold-Mariano) answers "these ensembles' forecasts differ
    on these days", not "training at N forecasts better". Here each run (fold f, seed s) is
    summarised by its mean loss per bar over its fold's test bars, m[arm, f, s]. Within a fold both
    arms score the same bars, so the fold's market (an easy or a hard half-year, the days'
    volatility) is common to all its runs and cancels in the fold-level difference

        d_f = mean_s m[B, f, s] - mean_s m[A, f, s].

    The seeds are averaged within the fold, not differenced seed by seed: seed s at two N shares
    its initial weights and window sampling, but nothing says that pairs the runs' outcomes (on the
    second edition the within-fold correlation of same-seed runs across N ranges from -0.7 to 0.8
    on 10 df), and averaging needs no assumption either way. Under the nested model
    m = mu_arm + fold_f + (arm x fold) + run, with run ~ (0, sigma_seed^2) independent across arms,

        Var d_f = sigma_between^2 + sigma_seed^2 (1/S_A + 1/S_B),

    so the spread of the F fold differences carries the seed-to-seed and run-to-run variation, the
    days' noise left in each run's mean, and whatever makes the benefit of N vary from fold to
    fold. The test is the one-sample t of the d_f with F - 1 degrees of freedom: exact for normal
    d_f, whatever the split of the variance (and whatever the correlation of same-seed runs). The
    split is estimated as a nested ANOVA (sigma_seed^2 pooled from the seeds' spread within each
    arm and fold; sigma_between^2 what the d_f spread beyond it, floored at 0) and reported for the
    power (`min_detectable_difference`); the test does not use it. Set aside: a t over the 15
    (fold, seed) differences with 14 df, which pairs runs by seed label and counts seeds as
    replicates of the fold effect; a mixed model with fold and seed effects, which estimates the
    same two components but takes its df from a variance model five folds cannot check; a cluster
    bootstrap over runs and days, unreliable with five clusters. F - 1 df are few (4 for five
    folds): the folds are the replicates of "the benefit of N in a market", and more seeds shrink
    only the seed part of Var d_f.
    """
    if seeds not in SEED_TESTS:
        raise RunTestInputError(f"seeds must be one of {', '.join(SEED_TESTS)}, got {seeds!r}")
    _check_design(a, b, min_seeds_per_fold)
    means = run_means(a), run_means(b)
    fold_t = _fold_t(a, b, means, alpha)
    if seeds == "fold":
        return fold_t
    c = _crossed(a.label, b.label, means, alpha, fold_t.p)
    return dataclasses.replace(
        fold_t, se=c.se, df=c.df, t=c.t, p=c.p, ci=c.ci, p_holm=c.p, verdict=verdict_of(c.estimate, c.p, alpha)
    )


def _fold_t(a: Runs, b: Runs, means: tuple[dict, dict], alpha: float) -> RunTestResult:
    """`run_level_test`'s t over the fold means, from the arms' run means (design checked)."""
    folds = a.folds
    d = np.array([np.mean(list(means[1][f].values())) - np.mean(list(means[0][f].values())) for f in folds])
    mean, se, df, t, p, ci = one_sample_t(d, alpha)
    seed_var, seed_df = _seed_variance(means)
    inv_seeds = cast(float, np.mean([1 / len(means[0][f]) + 1 / len(means[1][f]) for f in folds]))  # np.float64
    between = max(0.0, float(d.var(ddof=1)) - seed_var * inv_seeds) if seed_df else math.nan
    return RunTestResult(
        a.label,
        b.label,
        mean,
        se,
        df,
        t,
        p,
        ci,
        VarianceComponents(between, seed_var, seed_df),
        sum(map(len, means[0].values())),
        sum(map(len, means[1].values())),
        tuple(folds),
        tuple(d.tolist()),
        alpha,
        p,
        verdict_of(mean, p, alpha),
    )


# ---------------------------------------------------------------------------------------------
# Seeds as initial weights: a seed's effect shared by every fold


@dataclass(frozen=True)
class CrossedTestResult:
    """`crossed_seed_test`: B minus A, in nats per bar, generalising over folds *and* seeds.

    se carries the seeds' main effect (`seed_main`, the variance of a seed's effect shared by every
    fold: per arm, or of the paired differences when both arms ran the same seeds); df is
    Satterthwaite's (fractional). fold_t_p is `run_level_test`'s p on the same runs. With the seed
    main effect estimated at 0 (or one seed an arm, where it cannot be estimated) the test is the
    fold t: `seed_estimable` says which.
    """

    arm_a: str
    arm_b: str
    estimate: float
    se: float
    df: float
    t: float
    p: float
    ci: tuple[float, float]
    paired: bool
    seed_main: tuple[float, ...]
    seed_estimable: bool
    fold_t_p: float


def _two_way(table: np.ndarray) -> tuple[float, float, float]:
    """(MS_fold, MS_seed, MS_residual) of a folds x seeds table without replication."""
    n_f, n_s = table.shape
    grand, rows, cols = table.mean(), table.mean(axis=1), table.mean(axis=0)
    ms_f = n_s * float(((rows - grand) ** 2).sum()) / (n_f - 1)
    ms_s = n_f * float(((cols - grand) ** 2).sum()) / (n_s - 1)
    resid = table - rows[:, None] - cols[None, :] + grand
    return ms_f, ms_s, float((resid**2).sum()) / ((n_f - 1) * (n_s - 1))


def _seed_table(means: dict[int, dict[int, float]], label: str) -> tuple[list[int], np.ndarray]:
    seeds = {tuple(sorted(v)) for v in means.values()}
    if len(seeds) != 1:
        raise RunTestInputError(
            f"the crossed test needs the same seeds on every fold (a seed is one set of initial "
            f"weights for all folds): {label} has {sorted(seeds)}"
        )
    order = list(seeds.pop())
    return order, np.array([[means[f][s] for s in order] for f in sorted(means)])


def crossed_seed_test(a: Runs, b: Runs, *, alpha: float = ALPHA) -> CrossedTestResult:
    """B minus A over training runs when a seed is shared by every fold (`CrossedTestResult`).

    Why: the engine draws a run's initial weights from its seed alone (`torch.manual_seed(seed)`,
    the same for every fold and N), and at N=32768 on the echo the seed decides whether a run finds
    it: seeds 0, 1 and 3 found it in 12 of 15 folds, seeds 4, 5 and 7 in none (reports/recipes). A
    seed's effect is then common to all its folds, so it does not move the fold differences d_f of
    `run_level_test`, and a t over folds treats the seed set's luck as the arm's effect: it
    generalises over folds for these seeds, not over initial weights. Here fold and seed are crossed
    random effects. With each arm's run means as a folds x seeds table (balanced: every seed on
    every fold),

        Var(estimate) = var(d_f) / F + sum over arms of sigma_seed^2 / S,

    sigma_seed^2 = (MS_seed - MS_residual) / F from the arm's two-way table (floored at 0); when
    both arms ran the same seeds, the table of paired differences D[f, s] = m_B - m_A gives the
    usual (MS_fold + MS_seed - MS_residual) / (F S) instead, as a seed's effect may carry over
    from one arm to the other. Degrees of freedom: Satterthwaite's. Never narrower than the fold t:
    with no seed main effect it is the fold t. Few seeds make it wide (S - 1 df for that part):
    what three seeds can say about initial weights is little, and this says so.
    """
    _check_design(a, b, 1)
    means = run_means(a), run_means(b)
    return _crossed(a.label, b.label, means, alpha, _fold_t(a, b, means, alpha).p)


def _crossed(label_a: str, label_b: str, means: tuple[dict, dict], alpha: float, fold_t_p: float) -> CrossedTestResult:
    """`crossed_seed_test` from the arms' run means (design checked); `fold_t_p` the fold t's p."""
    sa, ta = _seed_table(means[0], label_a)
    sb, tb = _seed_table(means[1], label_b)
    n_f = ta.shape[0]
    paired = sa == sb
    if not paired and set(sa) & set(sb):
        raise RunTestInputError(
            f"the crossed test needs the same seeds in both arms or disjoint ones: {label_a} "
            f"has seeds {sa}, {label_b} {sb}"
        )
    estimate = float(tb.mean() - ta.mean())
    terms: list[tuple[float, float]] = []  # (coefficient x mean square, its df): Satterthwaite's pieces
    if paired:
        tables = [tb - ta]
        d_f = (tb - ta).mean(axis=1)
    else:
        tables = [ta, tb]
        d_f = tb.mean(axis=1) - ta.mean(axis=1)
    terms.append((float(d_f.var(ddof=1)) / n_f, n_f - 1))
    seed_main, estimable = [], all(t.shape[1] > 1 for t in tables)
    for t in tables:
        n_s = t.shape[1]
        if n_s < 2:
            seed_main.append(math.nan)
            continue
        _ms_f, ms_s, ms_e = _two_way(t)
        seed_main.append(max(0.0, (ms_s - ms_e) / n_f))
        if ms_s > ms_e:
            terms += [(ms_s / (n_f * n_s), n_s - 1), (-ms_e / (n_f * n_s), (n_f - 1) * (n_s - 1))]
    var = sum(c for c, _ in terms)
    se = math.sqrt(var)
    df = var**2 / sum(c**2 / k for c, k in terms) if var > 0 else float(n_f - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_stat = estimate / se if se > 0 else (math.copysign(math.inf, estimate) if estimate else math.nan)
    p = float(2 * scipy.stats.t.sf(abs(t_stat), df)) if not math.isnan(t_stat) else 1.0
    half = float(scipy.stats.t.ppf(1 - alpha / 2, df) * se)
    return CrossedTestResult(
        label_a,
        label_b,
        estimate,
        se,
        float(df),
        float(t_stat),
        p,
        (estimate - half, estimate + half),
        paired,
        tuple(seed_main),
        estimable,
        fold_t_p,
    )


def holm_adjust(results: Sequence[RunTestResult], alpha: float | None = None) -> list[RunTestResult]:
    """The results as one Holm family (`tsflash.stats.forecasts.holm`): p_holm set, verdicts read
    from it at `alpha` (default: each result's own)."""
    adjusted: np.ndarray | list[float] = holm([r.p for r in results]) if results else []
    return [
        dataclasses.replace(
            r, p_holm=float(q), alpha=alpha or r.alpha, verdict=verdict_of(r.estimate, float(q), alpha or r.alpha)
        )
        for r, q in zip(results, adjusted, strict=True)
    ]


# ---------------------------------------------------------------------------------------------
# A/A calibration: disjoint seed sets of one arm


def seed_splits(seeds: Sequence[int], how: str = "all") -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Disjoint seed sets to compare with each other.

    how : "halves" the first half of the sorted seeds against the rest (0-2 vs 3-5: one split,
        independent of other datasets' splits); "all" every split into a half (rounded down) and
        the rest, each once (10 for six seeds); "pairs" every pair of single seeds.
    """
    s = sorted(seeds)
    if how == "halves":
        return [(tuple(s[: len(s) // 2]), tuple(s[len(s) // 2 :]))]
    if how == "pairs":
        return [((x,), (y,)) for x, y in itertools.combinations(s, 2)]
    if how == "all":
        k = len(s) // 2
        splits = [(c, tuple(x for x in s if x not in c)) for c in itertools.combinations(s, k)]
        return [sp for sp in splits if 2 * k < len(s) or s[0] in sp[0]]  # an even split and its mirror once
    raise RunTestInputError(f"how must be 'halves', 'all' or 'pairs', got {how!r}")


class AAComparison(NamedTuple):
    """One A/A comparison: the seeds of each side and `run_level_test` of B against A."""

    seeds_a: tuple[int, ...]
    seeds_b: tuple[int, ...]
    result: RunTestResult


def aa_tests(runs: Runs, how: str = "all", *, alpha: float = ALPHA, min_seeds_per_fold: int = 2) -> list[AAComparison]:
    """`run_level_test` of disjoint seed sets of one arm against each other (`seed_splits`): the
    true difference is 0, so a calibrated test says "no better" in 1 - alpha of independent pairs.
    Splits of one pool share runs: count each dataset's splits as one replicate, not many."""
    seeds = {tuple(runs.seeds_of(f)) for f in runs.folds}
    if len(seeds) != 1:
        raise RunTestInputError(f"A/A splits need the same seeds on every fold: {runs.label} has {sorted(seeds)}")
    out = []
    for s1, s2 in seed_splits(seeds.pop(), how):
        a = runs.subset(s1, f"{runs.label} seeds {','.join(map(str, s1))}")
        b = runs.subset(s2, f"{runs.label} seeds {','.join(map(str, s2))}")
        out.append(AAComparison(s1, s2, run_level_test(a, b, alpha=alpha, min_seeds_per_fold=min_seeds_per_fold)))
    return out


def binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a rate k / n."""
    lo = float(scipy.stats.beta.ppf((1 - level) / 2, k, n - k + 1)) if k > 0 else 0.0
    hi = float(scipy.stats.beta.ppf(1 - (1 - level) / 2, k + 1, n - k)) if k < n else 1.0
    return lo, hi


# ---------------------------------------------------------------------------------------------
# Simulated runs


@dataclass(frozen=True)
class RunNoise:
    """Sizes (standard deviations, nats per bar) of what moves a run's daily loss per bar in
    `simulate_runs`. Defaults: the second edition's log-loss (BTCUSDT 1m; seed sd 0.0027 pooled at
    N=512 and 4096, day-to-day sd of a run's daily loss 0.05-0.2, of two seeds' daily gap 0.004-0.008)."""

    fold: float = 0.05  # the fold's market, common to all runs of the fold
    interaction: float = 0.0  # arm x fold: the benefit of B varies from fold to fold (sd of d_f's part)
    seed: float = 0.0027  # one training run against its arm's mean on the fold
    day: float = 0.1  # the day's market, common to all runs of the fold
    run_day: float = 0.006  # one run on one day
    # a seed's initial weights, shared by all its folds (the engine seeds the weights by the seed
    # alone), per arm; 0 = none (and no draw, so the other draws are as before)
    init: float = 0.0

    def components(self, n_days: int) -> VarianceComponents:
        """The VarianceComponents this noise gives runs of `n_days` days (run means include the
        run-day noise averaged over the days)."""
        return VarianceComponents(self.interaction**2, self.seed**2 + self.run_day**2 / n_days, 0)


def simulate_runs(
    rng: np.random.Generator,
    *,
    difference: float = 0.0,
    noise: RunNoise = RunNoise(),
    n_folds: int = 5,
    n_seeds: int = 3,
    n_days: int = 182,
    bars_per_day: int = 1440,
    base: float = 1.0,
    labels: tuple[str, str] = ("A", "B"),
) -> tuple[Runs, Runs]:
    """Two arms' runs (A, B) as per-day loss sums, B's true mean loss per bar `difference` above
    A's: loss per bar = base + fold + day + arm x fold + run + run x day (+ the seed's initial
    weights, shared by its folds, with `RunNoise.init`)."""
    shape = (2, n_folds, n_seeds, n_days)
    fold = rng.normal(0, noise.fold, (1, n_folds, 1, 1))
    day = rng.normal(0, noise.day, (1, n_folds, 1, n_days))
    inter = rng.normal(0, noise.interaction / math.sqrt(2), (2, n_folds, 1, 1))
    seed = rng.normal(0, noise.seed, (2, n_folds, n_seeds, 1))
    per_bar = base + fold + day + inter + seed + rng.normal(0, noise.run_day, shape)
    if noise.init:
        per_bar += rng.normal(0, noise.init, (2, 1, n_seeds, 1))
    per_bar[1] += difference
    f, s, d = (np.broadcast_to(x, shape[1:]).ravel() for x in np.ix_(range(n_folds), range(n_seeds), range(n_days)))
    count = np.full(f.size, float(bars_per_day))
    a, b = (Runs(labels[i], f, s, d, per_bar[i].ravel() * bars_per_day, count) for i in range(2))
    return a, b


# ---------------------------------------------------------------------------------------------
# Power


def _check_power_design(n_folds: int, n_seeds: int, alpha: float, power: float | None = None) -> None:
    if n_folds < 2 or n_seeds < 1:
        raise RunTestInputError(
            f"power needs at least 2 folds and 1 seed per arm, got {n_folds} folds, {n_seeds} seeds"
        )
    if not (0 < alpha < 1) or (power is not None and not alpha < power < 1):
        raise RunTestInputError(f"need 0 < alpha < power < 1, got alpha {alpha}, power {power}")


def fold_difference_sd(components: VarianceComponents, n_seeds: int) -> float:
    """sd of one fold's difference d_f with `n_seeds` runs per arm."""
    return math.sqrt(components.between_fold + 2 * components.within_fold_seed / n_seeds)


def power_of(
    difference: float, components: VarianceComponents, n_folds: int, n_seeds: int, alpha: float = ALPHA
) -> float:
    """P(the primary test rejects at alpha) when the true difference is `difference`: the t of
    F fold differences is noncentral t with F - 1 df and noncentrality difference / se."""
    _check_power_design(n_folds, n_seeds, alpha)
    df = n_folds - 1
    ncp = difference / (fold_difference_sd(components, n_seeds) / math.sqrt(n_folds))
    crit = scipy.stats.t.ppf(1 - alpha / 2, df)
    return float(scipy.stats.nct.sf(crit, df, ncp) + scipy.stats.nct.cdf(-crit, df, ncp))


def min_detectable_difference(
    components: VarianceComponents, n_folds: int, n_seeds: int, alpha: float = ALPHA, power: float = 0.8
) -> float:
    """The smallest |difference| (nats per bar) the primary test detects with `power` at `alpha`,
    two-sided, with `n_folds` folds and `n_seeds` runs per arm and fold."""
    _check_power_design(n_folds, n_seeds, alpha, power)
    se = fold_difference_sd(components, n_seeds) / math.sqrt(n_folds)
    if not se > 0:
        raise RunTestInputError(f"power needs a positive variance, got {components}")
    short = lambda c: power_of(c * se, components, n_folds, n_seeds, alpha) - power  # noqa: E731
    hi = 1.0
    while short(hi) < 0:  # bracket by doubling: nct turns NaN far out (ncp ~ 40), before it is needed
        hi *= 2
    return float(scipy.optimize.brentq(short, 0.0, hi) * se)


@dataclass(frozen=True)
class CrossedComponents:
    """Variance components, in (nats per bar)^2, of the paired table of run-mean differences
    D[f, s] = B - A on fold f with seed s (both arms ran the same seeds):
    D = delta + a_f + b_s + e_fs.

    fold : Var a_f, the true difference's spread from fold to fold.
    seed : Var b_s, a seed's initial weights' effect on the difference, shared by its folds (what
        the fold t cannot see, and why `crossed_seed_test` exists).
    residual : Var e_fs, one run's difference about those (run to run, day noise).
    Estimated from a folds x seeds table by the two-way mean squares, each floored at 0.
    """

    fold: float
    seed: float
    residual: float

    @classmethod
    def from_runs(cls, a: Runs, b: Runs) -> CrossedComponents:
        means = run_means(a), run_means(b)
        (sa, ta), (sb, tb) = _seed_table(means[0], a.label), _seed_table(means[1], b.label)
        if sa != sb:
            raise RunTestInputError(
                f"crossed components need the same seeds in both arms: {a.label} has {sa}, {b.label} {sb}"
            )
        n_f, n_s = ta.shape
        if n_f < 2 or n_s < 2:
            raise RunTestInputError(f"crossed components need at least 2 folds and 2 seeds, got {n_f} x {n_s}")
        ms_f, ms_s, ms_e = _two_way(tb - ta)
        return cls(max(0.0, (ms_f - ms_e) / n_s), max(0.0, (ms_s - ms_e) / n_f), ms_e)

    def sds(self) -> tuple[float, float, float]:
        return math.sqrt(self.fold), math.sqrt(self.seed), math.sqrt(self.residual)


def paired_crossed_batch(tables: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, se, Satterthwaite df) of `crossed_seed_test` on many paired tables at once:
    `tables` (K, folds, seeds) of D[f, s] = B - A, both arms with the same seeds (at least 2). The
    same terms as `_crossed`'s paired branch, a term whose seed mean square does not exceed the
    residual's adding nothing; what `crossed_power` simulates."""
    k, n_f, n_s = tables.shape
    if n_f < 2 or n_s < 2:
        raise RunTestInputError(f"paired crossed tables need at least 2 folds and 2 seeds, got {n_f} x {n_s}")
    grand, rows, cols = tables.mean(axis=(1, 2)), tables.mean(axis=2), tables.mean(axis=1)
    ms_s = n_f * ((cols - grand[:, None]) ** 2).sum(axis=1) / (n_s - 1)
    resid = tables - rows[:, :, None] - cols[:, None, :] + grand[:, None, None]
    ms_e = (resid**2).sum(axis=(1, 2)) / ((n_f - 1) * (n_s - 1))
    seed = ms_s > ms_e
    terms = [  # (coefficient x mean square, its df), as in `_crossed`
        (rows.var(axis=1, ddof=1) / n_f, n_f - 1),
        (np.where(seed, ms_s / (n_f * n_s), 0.0), n_s - 1),
        (np.where(seed, -ms_e / (n_f * n_s), 0.0), (n_f - 1) * (n_s - 1)),
    ]
    var = terms[0][0] + terms[1][0] + terms[2][0]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var > 0, var**2 / sum(c**2 / d for c, d in terms), float(n_f - 1))
    return grand, np.sqrt(var), df


class CrossedPower(NamedTuple):
    """The crossed test's power curve at one design, from simulated null tables (`crossed_power`)."""

    n_folds: int
    n_seeds: int
    detectable: float  # the smallest |difference| found with the requested power, nats per bar
    fold_t_false_positive: float  # how often the fold t says "differ" on the same tables with no difference
    crossed_false_positive: float  # the crossed test's rate on them (the level, if it is calibrated)
    power_at: float | None = None  # the crossed test's rejection rate at the true difference `at`, if asked


def crossed_power(
    components: CrossedComponents,
    n_folds: int,
    n_seeds: int,
    *,
    alpha: float = ALPHA,
    power: float = 0.8,
    n_sims: int = 4000,
    seed: int = 0,
    at: float | None = None,
) -> CrossedPower:
    """The smallest true difference `crossed_seed_test` detects with `power` (two-sided, `alpha`)
    at F folds x S seeds, by simulation: `n_sims` tables D = a_f + b_s + e_fs drawn at
    `components`, each tested as the test does (`_crossed`). A constant difference moves only the
    estimate, never the mean squares, so each table's se and Satterthwaite df are computed once and
    the power at any difference follows from them; the detectable difference is where it reaches
    `power` (bisection on the simulated curve). Beside it, the fold t's rejection rate on the same
    null tables: above `alpha` when seeds carry an effect of their own; with `at`, the power at that
    true difference (the same curve read at one point)."""
    _check_power_design(n_folds, max(n_seeds, 2), alpha, power)
    if n_seeds < 2:
        raise RunTestInputError(f"the crossed test's power needs at least 2 seeds, got {n_seeds}")
    rng = np.random.default_rng(seed)
    sd_f, sd_s, sd_e = components.sds()
    if not (sd_f or sd_s or sd_e):
        raise RunTestInputError("the crossed test's power needs some variance: every component is 0")
    tables = (
        rng.normal(0, sd_f, (n_sims, n_folds, 1))
        + rng.normal(0, sd_s, (n_sims, 1, n_seeds))
        + rng.normal(0, sd_e, (n_sims, n_folds, n_seeds))
    )
    est, se, df = paired_crossed_batch(tables)
    d_f = tables.mean(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        fold_t = d_f.mean(axis=1) / (d_f.std(axis=1, ddof=1) / math.sqrt(n_folds))
    fold_p = np.where(np.isnan(fold_t), 1.0, 2 * scipy.stats.t.sf(np.abs(fold_t), n_folds - 1))
    crit = scipy.stats.t.ppf(1 - alpha / 2, df)

    def rejects(delta: float) -> float:
        return float(np.mean(np.abs(est + delta) / se > crit))

    lo, hi = 0.0, float(np.median(se * crit))
    while rejects(hi) < power:  # bracket by doubling (a few tables with tiny Satterthwaite df never reject)
        lo, hi = hi, 2 * hi
    for _ in range(60):  # the simulated curve is a step function: bisect to its first step past `power`
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejects(mid) < power else (lo, mid)
    return CrossedPower(
        n_folds, n_seeds, hi, float(np.mean(fold_p < alpha)), rejects(0.0), None if at is None else rejects(abs(at))
    )


# ---------------------------------------------------------------------------------------------
# PBO's null distribution with few candidates


@dataclass(frozen=True, eq=False)
class PBONull:
    """PBO (`pbo_cscv`) over `values.size` replicates of iid normal daily returns, K candidates,
    T days: its mean, quantiles {q: value} and, given an observed PBO, P(PBO >= observed)."""

    n_candidates: int
    n_days: int
    n_blocks: int
    values: np.ndarray
    mean: float
    quantiles: dict[float, float]
    observed: float | None
    p_at_least: float | None


def pbo_null(
    n_candidates: int,
    n_days: int,
    n_blocks: int = CSCV_BLOCKS,
    *,
    n_replicates: int = 1000,
    observed: float | None = None,
    rng: np.random.Generator | None = None,
) -> PBONull:
    """PBO's distribution when no candidate is better than another (iid N(0, 1) returns: the Sharpe
    ratios, hence PBO, do not depend on the scale). With few candidates the winner's out-of-sample
    rank takes few values and PBO sits well above 0.5 on noise (about 0.675 for K = 3, T = 911,
    16 blocks), so a PBO inside this distribution says nothing about overfitting."""
    if n_replicates < 1:
        raise RunTestInputError(f"pbo_null needs at least 1 replicate, got {n_replicates}")
    rng = rng or np.random.default_rng(0)
    values = np.array(
        [pbo_cscv(rng.standard_normal((n_days, n_candidates)), n_blocks).pbo for _ in range(n_replicates)]
    )
    p = None if observed is None else float(np.mean(values >= observed))
    return PBONull(
        n_candidates,
        n_days,
        n_blocks,
        values,
        float(values.mean()),
        {q: float(np.quantile(values, q)) for q in PBO_QUANTILES},
        observed,
        p,
    )


# ---------------------------------------------------------------------------------------------
# The nesting check: a long-N model with its context cut to the shortest N


NESTING_PARTS = ("log_loss", "move", "direction")  # the log-loss and its flat-vs-move and up-vs-down parts
PASSES, FAILS, NOT_MEASURED = "passes", "fails", "not measured"


def runs_from_means(label: str, fold, seed, mean, count) -> Runs:
    """Runs given as one mean loss per bar per (fold, seed) run, over `count` bars (a cell summary's
    metrics): one row per run (day 0) whose loss sum is mean * count, so `run_means` gives `mean`."""
    mean, count = np.asarray(mean, np.float64), np.asarray(count, np.float64)
    return Runs(label, fold, seed, np.zeros(mean.shape, np.int64), mean * count, count)


@dataclass(frozen=True)
class NestingTest:
    """One long N of the nesting check: per part of NESTING_PARTS measured, `run_level_test` of the
    long-N model scored with its context cut to `cut` bars (arm B) minus the model trained at N = `cut`
    (arm A), on the same test bars; p_holm over the long Ns within the part. Positive: the cut model
    forecasts worse, so its training lost skill the shorter model learns."""

    n: int
    cut: int
    parts: Mapping[str, RunTestResult]

    @property
    def lost_skill(self) -> bool:
        """The log-loss (the total, the part that decides) significantly higher after Holm."""
        return self.parts["log_loss"].verdict == "worse"


def nesting_tests(
    short: Mapping[str, Runs],
    cut: Mapping[int, Mapping[str, Runs]],
    *,
    cut_length: int,
    alpha: float = ALPHA,
    min_seeds_per_fold: int = 2,
    seeds: str = "fold",
) -> list[NestingTest]:
    """The nesting check over training runs, one `NestingTest` per long N (sorted).

    short : {part: the runs of the model trained at N = cut_length}, parts from NESTING_PARTS,
        "log_loss" required; cut : {N: {part: the runs of the N model scored with its context cut
        to cut_length bars}}. A part is tested where every arm has it (a run whose cells keep only
        the cut log-loss is tested on the total alone).

    Why it is a check of training: every evaluation context of the cut scoring holds the same
    last `cut_length` bars as the short model's, so both forecasts rest on the same information,
    and the long model was trained on windows whose first `cut_length` positions are exactly such
    contexts. A long context cannot remove information, so a cut model significantly worse than
    the short one lost short-range skill in training. The decision reads the log-loss, the proper
    score of the whole forecast; its parts (which add up to it, run by run) say where the loss
    lies. Holm over the long Ns within each part (any dependence between them); two-sided tests,
    so a cut model better than the short one is reported too, and it passes.
    """
    unknown = {p for arm in (short, *cut.values()) for p in arm} - set(NESTING_PARTS)
    if unknown:
        raise RunTestInputError(f"nesting parts must be among {NESTING_PARTS}, got {sorted(unknown)}")
    if not cut:
        raise RunTestInputError(f"the nesting check needs at least one N longer than {cut_length}, got none")
    longs = sorted(cut)
    if longs[0] <= cut_length:
        raise RunTestInputError(f"every nested N must be longer than the cut {cut_length}, got N = {longs}")
    if "log_loss" not in short or any("log_loss" not in cut[n] for n in longs):
        raise RunTestInputError("the nesting check needs the log-loss of every arm (part 'log_loss')")
    parts = [p for p in NESTING_PARTS if p in short and all(p in cut[n] for n in longs)]
    tested = {
        p: holm_adjust(
            [
                run_level_test(short[p], cut[n][p], alpha=alpha, min_seeds_per_fold=min_seeds_per_fold, seeds=seeds)
                for n in longs
            ]
        )
        for p in parts
    }
    return [NestingTest(n, cut_length, {p: tested[p][i] for p in parts}) for i, n in enumerate(longs)]


def nesting_verdict(tests: Sequence[NestingTest]) -> str:
    """FAILS when some long N cut to the short length lost skill (`NestingTest.lost_skill`), else
    PASSES; NOT_MEASURED without tests."""
    if not tests:
        return NOT_MEASURED
    return FAILS if any(t.lost_skill for t in tests) else PASSES


IN_ORDER, OUT_OF_ORDER, ORDER_NOT_SHOWN = "in order", "out of order", "not shown"


@dataclass(frozen=True)
class RankingCheck:
    """The lengths ranked by the run-level test: each N against the next
    shorter one (B = the longer), Holm over these consecutive pairs. IN_ORDER when every longer N
    forecasts significantly better than the next shorter one, the order of the information a longer
    context holds where it holds more (the slow regime's design); OUT_OF_ORDER when some longer N is
    significantly worse than the next shorter one; ORDER_NOT_SHOWN otherwise."""

    pairs: tuple[RunTestResult, ...]

    @property
    def verdict(self) -> str:
        if all(r.verdict == "better" for r in self.pairs):
            return IN_ORDER
        return OUT_OF_ORDER if any(r.verdict == "worse" for r in self.pairs) else ORDER_NOT_SHOWN

    @property
    def estimates_in_order(self) -> bool:
        """Every longer N's estimate below the next shorter one's (significant or not)."""
        return all(r.estimate < 0 for r in self.pairs)


def ranking_check(runs: Sequence[Runs], *, seeds: str = "fold", alpha: float = ALPHA) -> RankingCheck:
    """`RankingCheck` of one arm's runs at three or more lengths, given in increasing N, each pair
    by `run_level_test` with `seeds` (the family's eval.seed_inference)."""
    if len(runs) < 3:
        raise RunTestInputError(
            f"the ranking check needs at least three lengths (two are question 1's comparison), "
            f"got {len(runs)}: {', '.join(r.label for r in runs)}"
        )
    pairs = [run_level_test(a, b, seeds=seeds, alpha=alpha) for a, b in itertools.pairwise(runs)]
    return RankingCheck(tuple(holm_adjust(pairs, alpha)))


def pooled_components(results: Sequence[RunTestResult]) -> VarianceComponents | None:
    """The variance components of several run-level tests pooled (the mean of each variance; df
    summed) for a power statement; None when none has a finite seed variance."""
    comps = [r.components for r in results if math.isfinite(r.components.within_fold_seed)]
    if not comps:
        return None
    return VarianceComponents(
        float(np.mean([c.between_fold for c in comps])),
        float(np.mean([c.within_fold_seed for c in comps])),
        sum(c.seed_df for c in comps),
    )
