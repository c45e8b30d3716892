"""The report's linear information probe per N (issue 29; `eval.probe`): "does the far information
exist in a form a linear model can read?" beside question 1's "can the transformer use it?".

The probe baselines "probe-<N>" (`tsflash.engine._baselines`; the model is `tsflash.dataset.probe`)
are deterministic given the fold: every N is fitted on the same rows, so the probe at N minus the
probe at the shortest N is the information its longer windows add, tested by the one-sample t of
the fold differences (df = folds - 1). Beside it, question 1's test of the transformer at N minus the
shortest N over training runs (the answer's test, `RunQuestion`), on the same log-loss. The
sentence is in wording.py, the table in questions.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tsflash.report.rundata import RunData
from tsflash.runfolder import baseline_series_name, probe_n
from tsflash.stats.forecasts import holm
from tsflash.stats.runs import ALPHA, one_sample_t

# the fold-level metrics of the probe's rows: log-loss, direction score, and the flat-vs-move part
PROBE_SCORES = ("log_loss", "direction_log_loss_moves", "move_log_loss")


@dataclass(frozen=True)
class Difference:
    """Mean over folds of a per-fold difference, its 1 - ALPHA t interval and two-sided p."""

    mean: float
    lo: float
    hi: float
    p: float
    folds: int

    @property
    def significant(self) -> bool:
        return self.folds > 1 and self.p < ALPHA


def fold_difference(d) -> Difference:
    d = np.asarray(d, dtype=np.float64)
    if len(d) < 2:  # one fold: a difference without an interval
        m = float(d.mean()) if len(d) else math.nan
        return Difference(m, math.nan, math.nan, math.nan, len(d))
    mean, _, _, _, p, (lo, hi) = one_sample_t(d)
    return Difference(mean, lo, hi, p, len(d))


@dataclass
class ProbeRow:
    n: int
    series: str  # "baseline-probe-<N>"
    means: dict[str, float]  # PROBE_SCORES -> mean over folds
    vs_shortest: dict[str, Difference]  # PROBE_SCORES -> the probe at N minus at the shortest N (longer N only)
    transformer: object | None = None  # question 1's RunTestResult of the transformer at N minus the shortest N
    p_holm: float = math.nan  # the log-loss difference's p, Holm over the longer N

    @property
    def reads_more(self) -> bool:
        """The probe at N forecasts significantly better than at the shortest N (Holm over the longer N)."""
        d = self.vs_shortest.get("log_loss")
        return d is not None and d.mean < 0 and self.p_holm < ALPHA


@dataclass(frozen=True)
class ProbeStep:
    """The probe at N against the next shorter N (log-loss, fold t; Holm over the steps): whether the
    longer windows add information a linear reader finds, the order the ranking check is held to."""

    shorter: int
    longer: int
    difference: Difference  # the probe at `longer` minus at `shorter`
    p_holm: float

    @property
    def reads_more(self) -> bool:
        return self.difference.mean < 0 and self.p_holm < ALPHA


@dataclass
class ProbeCheck:
    rows: list[ProbeRow] = field(default_factory=list)
    steps: list[ProbeStep] = field(default_factory=list)  # each N against the next shorter one

    @property
    def available(self) -> bool:
        return len(self.rows) > 0

    @property
    def shortest(self) -> int | None:
        return self.rows[0].n if self.rows else None

    @property
    def longest(self) -> ProbeRow | None:
        return self.rows[-1] if len(self.rows) > 1 else None

    def to_dict(self) -> dict:
        """results.json's "probe": per N the means, the differences to the shortest N and the
        transformer's test beside them, as numbers."""
        def diff(d: Difference) -> dict:
            return {"mean": d.mean, "ci": [d.lo, d.hi], "p": d.p, "folds": d.folds}

        return {"shortest": self.shortest,
                "steps": [{"shorter": t.shorter, "longer": t.longer, **diff(t.difference), "p_holm": t.p_holm,
                           "reads_more": t.reads_more} for t in self.steps],
                "rows": [
            {"n": r.n, "series": r.series, "means": r.means, "vs_shortest": {m: diff(d) for m, d in r.vs_shortest.items()},
             "p_holm": r.p_holm, "reads_more": r.reads_more,
             "transformer": None if r.transformer is None else {"estimate": r.transformer.estimate,
                                                                "ci": list(r.transformer.ci), "p": r.transformer.p}}
            for r in self.rows]}


def _per_fold(rd: RunData, series: str, metric: str) -> dict[int, float]:
    out = {}
    for b in rd.baselines:
        if baseline_series_name(b["name"]) == series and b["metrics"].get(metric) is not None:
            out[b["fold"]] = float(b["metrics"][metric])
    return out


def probe_check(rd: RunData, primary: list[dict], runs) -> ProbeCheck:
    """The probe rows of a run (empty without eval.probe). `primary`: the report's default
    configuration per N (their series keys); `runs`: question 1 over training runs (RunQuestion)."""
    names = sorted((n, baseline_series_name(b)) for b in rd.baseline_names if (n := probe_n(b)) is not None)
    if not names:
        return ProbeCheck()
    key_of = {s["n"]: s["series"] for s in primary}
    tests = {}
    if runs is not None and runs.available:
        tests = {p.series: p.result for p in runs.result.comparisons if p.score == "log_loss"}
    folds = {series: {m: _per_fold(rd, series, m) for m in PROBE_SCORES} for _, series in names}
    base = folds[names[0][1]]
    rows = []
    for n, series in names:
        mine = folds[series]
        means = {m: float(np.mean(list(v.values()))) if v else math.nan for m, v in mine.items()}
        vs = {}
        if series != names[0][1]:
            for m, v in mine.items():
                common = sorted(set(v) & set(base[m]))
                vs[m] = fold_difference([v[f] - base[m][f] for f in common])
        rows.append(ProbeRow(n, series, means, vs, tests.get(key_of.get(n))))
    longer = [r for r in rows[1:] if math.isfinite(r.vs_shortest["log_loss"].p)]
    for r, p in zip(longer, holm([r.vs_shortest["log_loss"].p for r in longer]) if longer else ()):
        r.p_holm = float(p)
    return ProbeCheck(rows, _steps([(n, folds[series]["log_loss"]) for n, series in names]))


def _steps(per_n: list[tuple[int, dict[int, float]]]) -> list[ProbeStep]:
    """Each N's probe against the next shorter N's on their common folds, Holm over the steps."""
    diffs = [(a, b, fold_difference([vb[f] - va[f] for f in sorted(set(va) & set(vb))]))
             for (a, va), (b, vb) in zip(per_n, per_n[1:])]
    diffs = [d for d in diffs if math.isfinite(d[2].p)]
    adjusted = holm([d.p for _, _, d in diffs]) if diffs else []
    return [ProbeStep(a, b, d, float(q)) for (a, b, d), q in zip(diffs, adjusted)]


FOLLOWS, DOES_NOT_FOLLOW, NO_ORDER = "follows the information", "does not follow the information", "no information order"


def information_order(ranking, probe: ProbeCheck, lengths: list[int]) -> str | None:
    """The ranking check held to the order of the information the lengths hold, as the linear probe
    measures it (`ProbeCheck.steps`): FOLLOWS when, at every step, the transformer is significantly
    better where the probe reads more and not significantly worse where it does not (and the probe
    reads more at some step); DOES_NOT_FOLLOW otherwise; NO_ORDER when the probe reads more at no
    step (nothing to rank by). `lengths`: the ranking's N in order. None without both, or when the
    probe's steps are not the ranking's pairs."""
    if ranking is None or [(t.shorter, t.longer) for t in probe.steps] != list(zip(lengths, lengths[1:])):
        return None
    if not any(t.reads_more for t in probe.steps):
        return NO_ORDER
    ok = all(r.verdict == "better" if t.reads_more else r.verdict != "worse" for t, r in zip(probe.steps, ranking.pairs))
    return FOLLOWS if ok else DOES_NOT_FOLLOW
