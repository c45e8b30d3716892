"""The report's linear information probe per N (`eval.probe`): "does the far information
exist in a form a linear model can read?" beside question 1's "can the transformer use it?".

The probe baselines "probe-<N>" (`tsflash.engine._baselines`; the model is `tsflash.dataset.probe`)
are deterministic given the fold: every N is fitted on the same rows, so the probe at N minus the
probe at the shortest N is the information its longer windows add, tested by the one-sample t of
the fold differences (df = folds - 1). Beside it, question 1's test of the transformer at N minus the
shortest N over training runs (the answer's test, `RunQuestion`), on the same log-loss. Its
sentence and table are here.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from tsflash.report.diagnostics.base import OWN
from tsflash.report.markdown import table as _table
from tsflash.report.rundata import RunData
from tsflash.report.wording import fmt, plural, signed
from tsflash.runfolder import baseline_series_name, probe_n
from tsflash.stats.forecasts import holm
from tsflash.stats.runs import ALPHA, RunTestResult, one_sample_t

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
    transformer: RunTestResult | None = None  # question 1's RunTestResult of the transformer at N minus the shortest N
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

        return {
            "shortest": self.shortest,
            "steps": [
                {
                    "shorter": t.shorter,
                    "longer": t.longer,
                    **diff(t.difference),
                    "p_holm": t.p_holm,
                    "reads_more": t.reads_more,
                }
                for t in self.steps
            ],
            "rows": [
                {
                    "n": r.n,
                    "series": r.series,
                    "means": r.means,
                    "vs_shortest": {m: diff(d) for m, d in r.vs_shortest.items()},
                    "p_holm": r.p_holm,
                    "reads_more": r.reads_more,
                    "transformer": None
                    if r.transformer is None
                    else {"estimate": r.transformer.estimate, "ci": list(r.transformer.ci), "p": r.transformer.p},
                }
                for r in self.rows
            ],
        }


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
    for r, p in zip(longer, holm([r.vs_shortest["log_loss"].p for r in longer]) if longer else (), strict=True):
        r.p_holm = float(p)
    return ProbeCheck(rows, _steps([(n, folds[series]["log_loss"]) for n, series in names]))


def _steps(per_n: list[tuple[int, dict[int, float]]]) -> list[ProbeStep]:
    """Each N's probe against the next shorter N's on their common folds, Holm over the steps."""
    diffs = [
        (a, b, fold_difference([vb[f] - va[f] for f in sorted(set(va) & set(vb))]))
        for (a, va), (b, vb) in itertools.pairwise(per_n)
    ]
    diffs = [d for d in diffs if math.isfinite(d[2].p)]
    adjusted: np.ndarray | list[float] = holm([d.p for _, _, d in diffs]) if diffs else []
    return [ProbeStep(a, b, d, float(q)) for (a, b, d), q in zip(diffs, adjusted, strict=True)]


# ---------------------------------------------------------------------------------------------
# Its sentences and table


PROBE_LEAD = (
    "Linear information probe (a logistic regression on sums of log returns and log realised volatility over "
    "windows of 1, 4, 16, ... bars up to N; every N fitted on the same rows, scored on the same test bars)"
)


def probe_sentence(check) -> str:
    """The probe's verdict: does a linear reader get more from the longest windows than from the shortest?"""
    if not check.available:
        return ""
    short = check.shortest
    if check.longest is None:
        return f"{PROBE_LEAD}: at N={short} only; no longer N to compare."

    def one(r) -> str:
        d = r.vs_shortest["log_loss"]
        ci = (
            f" [{d.lo:+.2g}, {d.hi:+.2g}], p {d.p:.2g}, Holm p {r.p_holm:.2g}"
            if d.folds > 1
            else " (one fold: no interval)"
        )
        return f"N={r.n} minus N={short} {d.mean:+.2g} nats per bar{ci}"

    longer = check.rows[1:]
    found = [r for r in longer if r.reads_more]
    folds = longer[-1].vs_shortest["log_loss"].folds
    verdict = (
        f"the far bars hold information a linear reader finds (at {', '.join(f'N={r.n}' for r in found)})"
        if found
        else f"the longer windows give a linear reader nothing significant over N={short}'s"
    )
    out = f"{PROBE_LEAD}, over {plural(folds, 'fold')}: " + "; ".join(one(r) for r in longer) + f": {verdict}."
    used = [r for r in found if r.transformer is not None]
    if used:
        out += (
            " The transformer at the same N, over training runs: "
            + "; ".join(f"N={r.n} {r.transformer.estimate:+.2g} (p {r.transformer.p:.2g})" for r in used)
            + "."
        )
    return out


def probe_table(check) -> dict | None:
    """Per N: the probe's scores, its difference to the shortest N over folds, and the transformer's
    difference over training runs (question 1's test) beside it."""
    if not check.available:
        return None
    short = f"N={check.shortest}"
    head = [
        "N",
        "probe: log-loss",
        "probe: direction score",
        f"probe: log-loss − {short} [95 % over folds]",
        "p",
        "Holm p",
        f"probe: direction − {short}",
        f"transformer: log-loss − {short} [95 % over runs]",
        "p",
    ]
    body = []
    for r in check.rows:
        row = [f"N={r.n}", fmt(r.means["log_loss"]), fmt(r.means["direction_log_loss_moves"])]
        d, dd, t = r.vs_shortest.get("log_loss"), r.vs_shortest.get("direction_log_loss_moves"), r.transformer
        row += (
            [
                f"{signed(d.mean)} [{signed(d.lo)}, {signed(d.hi)}]",
                fmt(d.p, ".3g"),
                fmt(r.p_holm, ".3g"),
                signed(dd.mean),
            ]
            if d is not None
            else ["", "", "", ""]
        )
        row += (
            [f"{signed(t.estimate)} [{signed(t.ci[0])}, {signed(t.ci[1])}]", fmt(t.p, ".3g")]
            if t is not None
            else ["", ""]
        )
        body.append(row)
    return _table(head, body)


PROBE_NOTE = (
    "How: `eval.probe` (`tsflash.dataset.probe`). Per bar t and window w in 1, 4, 16, ... (powers of 4 "
    "below N, then N), the sum of the log returns of bars t-w+1 .. t and the log of their realised "
    "volatility; standardised and clipped on the fitted rows, then the logistic baseline's multinomial "
    "regression (C 0.01). Every N is fitted on the same labelled training rows (those with a whole "
    "context of the longest N, at most the baselines' 200,000 by their seeded draw), so the N differ in "
    "their columns alone. The probe has no seeds: its difference is the t of the fold differences "
    "(df = folds - 1), Holm over the longer N; the transformer's is question 1's test over training "
    "runs. Negative: N forecasts better than the shortest N. A probe that gains where the transformer "
    "does not says the information is there and training does not use it."
)


@dataclass(frozen=True)
class Probe:
    """The linear information probe as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "probe"
    heading: str = "Information probe"
    placement: str = OWN

    def compute(self, rd: RunData, nums) -> ProbeCheck:
        return probe_check(rd, nums.primary, nums.forecast.runs)

    def rows(self, check: ProbeCheck) -> dict | None:
        return probe_table(check)

    def sentences(self, check: ProbeCheck) -> dict[str, list[str]]:
        return {"lead": [probe_sentence(check)], "notes": [PROBE_NOTE] if check.available else []}

    def to_json(self, check: ProbeCheck) -> dict | None:
        return check.to_dict() if check.available else None


DIAGNOSTIC = Probe()
