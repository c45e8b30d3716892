"""Paired forecast comparison, and question 1's decision rule: the Diebold-Mariano test that two
forecasts of the same targets have equal expected loss (`diebold_mariano`, with the Newey-West
long-run variance), Holm's step-down adjustment over a family of such tests (`holm`), and the
rule that turns the adjusted comparisons with the shortest context into the answer "better",
"no better" or "worse" (`forecast_answer`), applied at the unit of the claim, training runs
(`run_answer`, over `tsflash.stats.runs.run_level_test` results: the primary answer) and to the
seed ensembles' forecasts (the Diebold-Mariano comparisons: secondary). This compares
forecasts; it selects nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy  # scipy.stats loads on first use (SciPy's lazy submodules)

from tsflash.stats._inputs import REL_STD_FLOOR, SelectionInputError

ALPHA = 0.05  # family-wise level of the Holm-adjusted tests


@dataclass(frozen=True)
class DMResult:
    """Diebold-Mariano test of equal expected loss (see `diebold_mariano`)."""

    statistic: float  # mean_diff / se (times the HLN factor with hln=True)
    pvalue: float  # two-sided
    mean_diff: float  # mean of loss_a - loss_b (negative: a has the lower loss)
    se: float  # Newey-West standard error of mean_diff, sqrt(S / T)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _paired_losses(loss_a, loss_b, lag) -> tuple[np.ndarray, int]:
    a = np.asarray(loss_a, dtype=np.float64)
    b = np.asarray(loss_b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise SelectionInputError(f"loss_a and loss_b must be 1-D, got shapes {a.shape} and {b.shape}")
    if a.shape != b.shape:
        raise SelectionInputError(f"loss_a and loss_b must have the same length, got {a.size} and {b.size}")
    if a.size < 2:
        raise SelectionInputError(f"the Diebold-Mariano test needs at least 2 paired losses, got {a.size}")
    bad = ~(np.isfinite(a) & np.isfinite(b))
    if bad.any():
        raise SelectionInputError(
            f"losses must be finite (no NaN or inf), got {int(bad.sum())} non-finite pair(s), first at index "
            f"{int(np.flatnonzero(bad)[0])}"
        )
    if isinstance(lag, bool) or not float(lag).is_integer() or not 0 <= lag < a.size:
        raise SelectionInputError(f"lag must be an integer with 0 <= lag < T={a.size}, got lag={lag}")
    return a - b, int(lag)


def newey_west_variance(x, lag: int) -> float:
    """Long-run variance S = g0 + 2 * sum_{k=1..lag} (1 - k/(lag+1)) * g_k of a 1-D series, with
    autocovariances g_k = (1/T) * sum_{t>k} (x_t - mean)(x_{t-k} - mean) (Newey & West 1987:
    Bartlett weights, so S >= 0). `lag` must satisfy 0 <= lag < T."""
    x = np.asarray(x, dtype=np.float64)
    e = x - x.mean()
    t = e.size
    s = float(e @ e) / t
    for k in range(1, lag + 1):  # O(T * lag), each term one vectorised dot product
        s += 2.0 * (1.0 - k / (lag + 1.0)) * float(e[k:] @ e[:-k]) / t
    return max(s, 0.0)


def diebold_mariano(loss_a, loss_b, lag: int, *, hln: bool = False) -> DMResult:
    """Diebold-Mariano (1995) test that two forecasts of the same targets have equal expected loss.

    d_t = loss_a[t] - loss_b[t], t = 1..T (the two forecasts of the SAME target, paired):

        statistic = mean(d) / sqrt(S / T)
        S   = g0 + 2 * sum_{k=1..lag} (1 - k / (lag + 1)) * g_k            (Newey-West, Bartlett)
        g_k = (1/T) * sum_{t>k} (d_t - mean(d)) (d_{t-k} - mean(d))

    with a two-sided p-value from the standard normal. Use lag >= the forecast horizon minus one
    (losses of h-step forecasts overlap for h - 1 steps); here, lag >= the label horizon.

    hln=True applies the Harvey, Leybourne & Newbold (1997) small-sample correction: the
    statistic is multiplied by sqrt((T + 1 - 2h + h(h - 1)/T) / T) with h = lag + 1, and the
    p-value comes from Student's t with T - 1 degrees of freedom (`se` stays the Newey-West one).

    Identical losses (S = 0 and mean 0) give statistic 0 and p-value 1; a constant non-zero
    difference gives an infinite statistic and p-value 0.

    Raises `SelectionInputError` (one line) for lengths that differ, NaN/inf, T < 2 or a lag
    outside 0 <= lag < T.

    >>> r = diebold_mariano([1, 3, 2, 4, 0], [0, 0, 0, 0, 0], lag=1)   # S = 1, worked in the tests
    >>> round(r.statistic ** 2, 9), round(r.se ** 2, 9)
    (20.0, 0.2)
    """
    d, lag = _paired_losses(loss_a, loss_b, lag)
    t = d.size
    mean = float(d.mean())
    se = math.sqrt(newey_west_variance(d, lag) / t)
    if se <= REL_STD_FLOOR * max(float(np.abs(d).max()), 1e-300):
        stat = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        return DMResult(statistic=stat, pvalue=1.0 if mean == 0.0 else 0.0, mean_diff=mean, se=0.0)
    stat = mean / se
    if not hln:
        # 2 * (1 - Phi(|z|)) = erfc(|z| / sqrt 2), accurate far in the tail (NormalDist.cdf rounds it to 0)
        return DMResult(statistic=stat, pvalue=math.erfc(abs(stat) / math.sqrt(2.0)), mean_diff=mean, se=se)
    h = lag + 1
    stat *= math.sqrt(max(0.0, (t + 1 - 2 * h + h * (h - 1) / t) / t))
    return DMResult(statistic=stat, pvalue=float(2.0 * scipy.stats.t.sf(abs(stat), t - 1)), mean_diff=mean, se=se)


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in the order given.

    With p_(1) <= ... <= p_(m) sorted: adjusted p_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)),
    so the adjusted values are monotone in the raw ones and capped at 1; rejecting where the
    adjusted p <= alpha is Holm's procedure at family-wise error rate alpha (Holm 1979).

    >>> holm([0.01, 0.04, 0.03, 0.005]).round(3).tolist()   # Wikipedia's example: reject 1st, 4th
    [0.03, 0.06, 0.06, 0.02]
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise SelectionInputError(f"holm needs a 1-D array of p-values, got shape {p.shape}")
    bad = ~(np.isfinite(p) & (p >= 0) & (p <= 1))
    if bad.any():
        raise SelectionInputError(f"p-values must be in [0, 1], got {p[bad][:5].tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


# --------------------------------------------------------------------------------------------
# question 1's decision rule


class Comparison(Protocol):
    """One paired comparison as the decision rule reads it (`tsflash.report.compute.Paired` is one):
    `series` minus `reference` on `score`, per bar (mean_diff < 0: `series` has the lower loss),
    with its Holm-adjusted p-value."""

    # Read-only members, so that frozen dataclasses and properties (`RunComparison`) match too.
    @property
    def series(self) -> str: ...
    @property
    def reference(self) -> str: ...
    @property
    def score(self) -> str: ...
    @property
    def mean_diff(self) -> float: ...
    @property
    def p_holm(self) -> float: ...


def significant(p_holm: float) -> bool:
    """A Holm-adjusted p-value at or below the family-wise level `ALPHA`."""
    return p_holm <= ALPHA


def winner(p: Comparison) -> str:
    """The forecast with the lower loss in comparison `p`."""
    return p.series if p.mean_diff < 0 else p.reference


def counts(p: Comparison, skill: Mapping[tuple[str, str], Comparison]) -> bool:
    """Does `p` decide the answer: a significant difference whose winner also beats the no-skill
    forecast significantly on the same score (`skill`: (series, score) -> that series against the
    class prior)? Two forecasts without skill can differ truly and significantly in how far they
    stray from the no-skill forecast; "less wrong than the shortest N" is not "forecasts better"."""
    s = skill.get((winner(p), p.score))
    return significant(p.p_holm) and s is not None and significant(s.p_holm) and s.mean_diff < 0


def forecast_answer(vs_shortest: Iterable[Comparison], skill: Mapping[tuple[str, str], Comparison]) -> tuple[str, bool]:
    """("better" | "no better" | "worse", mixed) from the comparisons with the shortest N that count.

    "better" when some longer N counts as better, even if another counts as worse (mixed): the
    question is whether a longer context can forecast better, and Holm keeps the family-wise error
    of "N=X beats the shortest" at its level. (The positive control is the case: N=32768 sees the
    planted echo, N=4096 cannot and loses a little short-range skill.) "worse" when some counts as
    worse and none as better; "no better" otherwise.
    """
    deciding = [p for p in vs_shortest if counts(p, skill)]
    better = any(p.mean_diff < 0 for p in deciding)
    worse = any(p.mean_diff > 0 for p in deciding)
    if better:
        return "better", worse
    return ("worse" if worse else "no better"), False


# --------------------------------------------------------------------------------------------
# question 1's decision rule over training runs

ONE_SEED = "one seed per fold: question 1 cannot be tested over training runs"


@dataclass(frozen=True)
class RunComparison:
    """A run-level test (`tsflash.stats.runs.RunTestResult` in `result`) as the decision rule reads
    it (a `Comparison`): `series` minus `reference` on `score`, with its Holm-adjusted p-value."""

    series: str
    reference: str
    score: str
    result: Any
    p_holm: float

    @property
    def mean_diff(self) -> float:
        return float(self.result.estimate)

    @property
    def significant(self) -> bool:
        return significant(self.p_holm)


@dataclass(frozen=True)
class RunAnswer:
    """Question 1 over training runs: the comparisons with the shortest N (one Holm family), the
    skill tests against the no-skill forecast (a second family), and the answer they give."""

    comparisons: tuple[RunComparison, ...]
    skill: Mapping[tuple[str, str], RunComparison]
    answer: str
    mixed: bool

    def counts(self, p: RunComparison) -> bool:
        return counts(p, self.skill)


def _family(tests: Mapping[tuple[str, str, str], Any]) -> list[RunComparison]:
    keys = list(tests)
    adjusted: np.ndarray | list[float] = holm([tests[k].p for k in keys]) if keys else []
    return [
        RunComparison(s, r, score, tests[(s, r, score)], float(q))
        for (s, r, score), q in zip(keys, adjusted, strict=True)
    ]


def run_answer(
    vs_shortest: Mapping[tuple[str, str, str], Any], vs_prior: Mapping[tuple[str, str, str], Any]
) -> RunAnswer:
    """Question 1's answer over training runs, by the rule of `forecast_answer`.

    vs_shortest : {(series, shortest, score): run-level result of series minus the shortest N},
        each longer N on the log-loss and the direction score: one Holm family (2 (K - 1) tests).
    vs_prior : {(series, prior, score): run-level result of series minus the no-skill forecast}
        for every N: the skill tests, Holm-adjusted as a family of their own, so that the answer's
        family stays the comparisons the question asks for.
    A significant difference counts only when its winner also beats the no-skill forecast over
    runs: on the positive control N=4096's direction score is significantly worse than N=512's,
    but N=512 has no direction skill there (the echo lies beyond its context), so that difference
    is between two forecasts without skill and decides nothing. Results must carry `estimate` and
    `p` (two-sided).
    """
    comparisons = _family(vs_shortest)
    skill = {(p.series, p.score): p for p in _family(vs_prior)}
    answer, mixed = forecast_answer(comparisons, skill)
    return RunAnswer(tuple(comparisons), skill, answer, mixed)
