"""The report's nesting check: each long N scored with its context cut to the shortest N
of the sweep, against the model trained at that shortest N on the same test bars, over training
runs (`tsflash.stats.runs.nesting_tests`). Every evaluation context holds the last N_short bars, so
a long model cut to them sees what the short model sees; one that forecasts significantly worse lost
short-range skill in training, and training, not the context, is the cause of part of the gap.

Per run (fold, seed) the numbers come from the per-bar cells where every one is kept
(cells/**/*.npz: y_true, y_prob and the cut probabilities "y_prob_ctx<m>"), which split the
log-loss into its parts, else from the cell summaries (metrics, far_context), which hold the cut
model's log-loss alone. The split, per labelled bar (`tsflash.scoring.metrics.bar_losses`, each
probability floored at 1e-12): flat-vs-move -log(p_up + p_down) on a bar that moved and -log p_flat on
a flat bar; up-vs-down -log q_y on a bar that moved (q_up = p_up / (p_up + p_down)) and 0 on a flat
bar; the log-loss of the check is their sum, run by run, so the parts add up exactly, and it equals
the 3-class log-loss -log p_y wherever no probability is floored (the largest difference over the
runs is recorded). Each part is a mean over the run's labelled bars. Beside the check: the gap (the
full N minus the shortest, the same runs) and the far context (full minus cut): gap = far context +
cut minus shortest, exactly. Its sentences and table are below; question 1's answer reads a failed
check (`nesting_answer`, through `NestingCheck.answer`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from tsflash.report.diagnostics.base import OWN
from tsflash.report.markdown import table as _table
from tsflash.report.rundata import RunData, seed_inference
from tsflash.report.wording import CROSSED_WORDS, NESTING_FAILS, df_text, fmt, plural, signed
from tsflash.runfolder import RunFolder, load_npz
from tsflash.scoring.metrics import bar_losses
from tsflash.stats.runs import (
    NOT_MEASURED,
    NestingTest,
    RunTestInputError,
    RunTestResult,
    min_detectable_difference,
    nesting_tests,
    nesting_verdict,
    pooled_components,
    run_level_test,
    runs_from_means,
)

CUT_ARRAY = "y_prob_ctx{}"  # a cell's probabilities with the context cut to m bars (tsflash.engine._evaluate)
PER_BAR, SUMMARIES = "per-bar cells", "cell summaries"


@dataclass
class NestingCheck:
    """The nesting check of a run, or why it was not measured (`reason`).

    tests : one `NestingTest` per long N (cut minus shortest, per part, Holm over the long Ns);
    gaps : {N: {part: run-level result of the full N minus the shortest}} (estimates shown, not tested
        here: question 1's run-level comparisons test the gap); parts_reason : why only the log-loss
        is split into no parts; residual : the largest |3-class log-loss - (flat-vs-move + up-vs-down)|
        of a run, per bar (NaN from summaries); detectable : the smallest loss of the cut model per
        bar the check finds with 80 % power at this run's folds and seeds (None without it).
    """

    cut: int | None = None
    shortest: str | None = None
    inference: str = "fold"  # eval.seed_inference: the tests' treatment of seeds
    reason: str = ""
    source: str = ""
    tests: list[NestingTest] = field(default_factory=list)
    gaps: dict[int, dict[str, RunTestResult]] = field(default_factory=dict)
    parts_reason: str = ""
    residual: float = math.nan
    seeds_per_fold: int = 0
    detectable: float | None = None

    @property
    def verdict(self) -> str:
        return NOT_MEASURED if self.reason else nesting_verdict(self.tests)

    @property
    def failed(self) -> list[NestingTest]:
        return [t for t in self.tests if t.lost_skill]

    def answer(self) -> str:
        """What question 1's answer adds from the check (`nesting_answer`)."""
        return nesting_answer(self)

    def to_dict(self) -> dict:
        """results.json's and questions.json's "nesting": the verdict, each test and gap as numbers."""

        def result(r: RunTestResult) -> dict:
            return {
                "estimate": r.estimate,
                "ci": list(r.ci),
                "se": r.se,
                "df": r.df,
                "t": r.t,
                "p": r.p,
                "p_holm": r.p_holm,
                "n_runs": [r.n_runs_a, r.n_runs_b],
                "fold_differences": list(r.fold_differences),
            }

        return {
            "verdict": self.verdict,
            "reason": self.reason or None,
            "cut": self.cut,
            "shortest": self.shortest,
            "source": self.source or None,
            "parts_reason": self.parts_reason or None,
            "parts_residual_per_bar": self.residual,
            "seeds_per_fold": self.seeds_per_fold,
            "detectable_80": self.detectable,
            "tests": [
                {
                    "n": t.n,
                    "cut": t.cut,
                    "lost_skill": t.lost_skill,
                    "cut_minus_shortest": {p: result(r) for p, r in t.parts.items()},
                    "gap": {p: r.estimate for p, r in self.gaps.get(t.n, {}).items()},
                    "far_context": {
                        p: self.gaps[t.n][p].estimate - r.estimate
                        for p, r in t.parts.items()
                        if p in self.gaps.get(t.n, {})
                    },
                }
                for t in self.tests
            ],
        }


@dataclass
class _Run:
    """One cell as the check reads it: mean loss per labelled bar per part, of the full model and
    (long N) of the cut one, the bars it scored (`bars`: what must match across N) and its residual."""

    fold: int
    seed: int
    count: float
    full: dict[str, float]
    cut: dict[str, float] | None
    bars: tuple
    residual: float = math.nan


def part_means(y_true: np.ndarray, y_prob: np.ndarray) -> tuple[dict[str, float], int, float]:
    """({part: mean per labelled bar}, labelled bars, |3-class log-loss - sum of parts| per bar) of
    one forecast: the parts of the module doc, float64, the log-loss their sum."""
    losses = bar_losses(y_true, y_prob)
    labelled = np.isfinite(losses["log_loss"])
    n = int(labelled.sum())
    if n == 0:
        raise RunTestInputError("a cell of the nesting check has no labelled test bar")
    move = float(losses["move_loss"][labelled].sum())
    direction = float(np.nansum(losses["direction_loss"]))
    total = move + direction
    residual = abs(float(losses["log_loss"][labelled].sum()) - total) / n
    return {"log_loss": total / n, "move": move / n, "direction": direction / n}, n, residual


def _from_cells(stem, fold: int, seed: int, cut: int | None) -> _Run:
    with load_npz(RunFolder.cell_npz(stem)) as z:
        y_true, times = z["y_true"], z["test_time"]
        full, n, res = part_means(y_true, z["y_prob"].astype(np.float64))
        cut_parts, res_cut = None, 0.0
        if cut is not None:
            cut_parts, _, res_cut = part_means(y_true, z[CUT_ARRAY.format(cut)].astype(np.float64))
    bars = (len(times), hashlib.sha1(np.ascontiguousarray(times).tobytes()).hexdigest())
    return _Run(fold, seed, float(n), full, cut_parts, bars, max(res, res_cut))


def _summary_parts(m: dict) -> dict[str, float]:
    """The log-loss of a cell summary's metrics (or of its far_context scoring), with its parts when
    the summary holds them (cut scorings hold them since the nesting check; older ones do not)."""
    parts = {"log_loss": m["log_loss"]}
    if m.get("move_log_loss") is not None and m.get("direction_log_loss_moves") is not None:
        parts |= {"move": m["move_log_loss"], "direction": m["moves_fraction"] * m["direction_log_loss_moves"]}
    return parts


def _from_summary(cell: dict, cut: int | None) -> _Run:
    full = _summary_parts(cell["metrics"])
    cut_parts = None if cut is None else _summary_parts(cell["far_context"][str(cut)])
    m = cell["metrics"]
    return _Run(
        cell["fold"],
        cell["seed"],
        float(m["n_scored"]),
        full,
        cut_parts,
        (m["n_scored"], cell["test_start"], cell["test_end"]),
    )


def _record(rd: RunData, cell: dict, cut: int | None, per_bar: bool) -> _Run:
    """The cell's _Run (with its cut scoring when `cut` is given), from its .npz or its summary."""
    if per_bar:
        return _from_cells(
            rd.folder.cell_stem(cell["key"], cell["fold"], cell["seed"]), cell["fold"], cell["seed"], cut
        )
    return _from_summary(cell, cut)


def _has_cut_arrays(rd: RunData, cells: list[dict], cut: int | None) -> bool:
    for c in cells:
        npz = RunFolder.cell_npz(rd.folder.cell_stem(c["key"], c["fold"], c["seed"]))
        if not npz.exists():
            return False
        if cut is not None:
            with load_npz(npz) as z:
                if CUT_ARRAY.format(cut) not in z.files:
                    return False
    return True


def _runs(label: str, records: list[_Run], which: str) -> dict:
    """{part: Runs} of the parts every record has, from the full (`which` "full") or cut scoring."""
    values = [getattr(r, which) for r in records]
    parts = [p for p in values[0] if all(p in v for v in values)]
    fold, seed, count = (np.array([getattr(r, k) for r in records]) for k in ("fold", "seed", "count"))
    return {p: runs_from_means(label, fold, seed, [v[p] for v in values], count) for p in parts}


def _mismatch(short: list[_Run], long: list[_Run], n: int) -> str:
    """Why N's runs do not score the short model's test bars ('' when every fold matches)."""
    bars = {r.fold: r.bars for r in short}
    for r in long:
        if bars.get(r.fold) != r.bars:
            return f"N={n} fold {r.fold} seed {r.seed} does not score the same test bars as the shortest N"
    return ""


def _n(rd: RunData, key: str) -> int:
    """N of one of the run's trial keys; `RunData.n_of` is None only for a key with no cell."""
    return cast(int, rd.n_of(key))


def nesting_check(rd: RunData, primary: list[str]) -> NestingCheck:
    """The nesting check over the default configuration per N (`primary`, trial keys in order of N)."""
    if len(primary) < 2:
        return NestingCheck(reason="the run has one context length, so nothing is nested in it")
    short, longs = primary[0], primary[1:]
    cut = _n(rd, short)
    cells = {k: sorted((c for c in rd.cells if c["key"] == k), key=lambda c: (c["fold"], c["seed"])) for k in primary}
    out = NestingCheck(cut=cut, shortest=short)
    unscored = [_n(rd, k) for k in longs if any(str(cut) not in (c.get("far_context") or {}) for c in cells[k])]
    if unscored:
        cuts = rd.config.get("eval", {}).get("context_cuts", [])
        out.reason = (
            f"the cells of N = {', '.join(map(str, unscored))} were not scored with their context cut to "
            f"{cut} bars (eval.context_cuts = {cuts}; runs made before far-context scoring have none)"
        )
        return out
    per_bar = _has_cut_arrays(rd, cells[short], None) and all(_has_cut_arrays(rd, cells[k], cut) for k in longs)
    out.source = PER_BAR if per_bar else SUMMARIES
    split_in_summaries = all("move" in _summary_parts(c["far_context"][str(cut)]) for k in longs for c in cells[k])
    if not per_bar and not split_in_summaries:
        out.parts_reason = (
            f"the cut model's split needs its per-bar probabilities (cells/**/*.npz, array "
            f"{CUT_ARRAY.format(cut)}) or cell summaries that hold the cut scoring's parts "
            "(cells scored since the nesting check), and this folder has neither"
        )
    try:
        records = {k: [_record(rd, c, None if k == short else cut, per_bar) for c in cells[k]] for k in primary}
        why = next((w for k in longs if (w := _mismatch(records[short], records[k], _n(rd, k)))), "")
        if why:
            out.reason = why
            return out
        base = _runs(f"N={cut}", records[short], "full")
        cut_runs = {_n(rd, k): _runs(f"N={_n(rd, k)} cut to {cut}", records[k], "cut") for k in longs}
        seeds = out.inference = seed_inference(rd.config)
        out.tests = nesting_tests(base, cut_runs, cut_length=cut, seeds=seeds)
        for k in longs:
            full = _runs(f"N={_n(rd, k)}", records[k], "full")
            out.gaps[_n(rd, k)] = {p: run_level_test(base[p], full[p], seeds=seeds) for p in base if p in full}
    except RunTestInputError as exc:
        out.reason, out.tests = f"the run-level test cannot run: {exc}", []
        return out
    out.residual = max(r.residual for rs in records.values() for r in rs) if per_bar else math.nan
    per_fold = [sum(r.fold == f for r in rs) for rs in records.values() for f in {r.fold for r in rs}]
    out.seeds_per_fold = min(per_fold)
    out.detectable = _detectable(
        [t.parts["log_loss"] for t in out.tests], len(out.tests[0].parts["log_loss"].folds), out.seeds_per_fold
    )
    return out


def _detectable(results: list[RunTestResult], n_folds: int, n_seeds: int) -> float | None:
    """The smallest log-loss difference per bar the check detects with 80 % power (pooled components)."""
    comps = pooled_components(results)
    if comps is None:
        return None
    try:
        return min_detectable_difference(comps, n_folds, n_seeds)
    except (RunTestInputError, ValueError):  # degenerate components (no spread at all)
        return None


# ---------------------------------------------------------------------------------------------
# Its sentences and table


NESTING_PART_NAMES = {"log_loss": "log-loss", "move": "flat-vs-move part", "direction": "up-vs-down part"}


def _nested(t, part: str = "log_loss") -> str:
    """\"N=32768 cut to 512 bars +0.0054 per bar against N=512 (95 % [...], p 0.056, Holm p 0.056)"."""
    r = t.parts[part]
    return (
        f"N={t.n} cut to {t.cut} bars {signed(r.estimate)} per bar against N={t.cut} (95 % "
        f"[{signed(r.ci[0])}, {signed(r.ci[1])}], p {fmt(r.p, '.3g')}, Holm p {fmt(r.p_holm, '.3g')})"
    )


def _nested_parts(t) -> str:
    """\"; flat-vs-move part +0.003 (Holm p 0.01), up-vs-down part +0.002 (Holm p 0.2)" where measured."""
    parts = [p for p in ("move", "direction") if p in t.parts]
    return "".join(
        f"; {NESTING_PART_NAMES[p]} {signed(t.parts[p].estimate)} (Holm p {fmt(t.parts[p].p_holm, '.3g')})"
        for p in parts
    )


def nesting_sentence(check) -> str:
    """The nesting check's verdict with its numbers: "passes", "fails: ..." or "not measured"."""
    if check.verdict == "not measured":
        return f"Nesting check: not measured in this run ({check.reason})."
    lead = (
        f"Nesting check (each longer N scored with its context cut to the last {check.cut} bars, which every "
        f"evaluation context holds, against N={check.cut} on the same test bars; over training runs, "
        f"{plural(check.seeds_per_fold, 'seed')} per fold, Holm over {plural(len(check.tests), 'longer N', 'longer Ns')})"
    )
    if check.failed:
        who = "these models" if len(check.failed) > 1 else "this model"
        return (
            f"{lead}: {NESTING_FAILS}. "
            + "; ".join(_nested(t) + _nested_parts(t) for t in check.failed)
            + f". A long context cannot remove information, so {who} lost short-range skill in training."
        )
    worst = max(check.tests, key=lambda t: t.parts["log_loss"].estimate)
    power = (
        f"; at this design the check finds a loss of {check.detectable:.2g} per bar with 80 % power"
        if check.detectable
        else ""
    )
    return (
        f"{lead}: passes: no longer N cut to {check.cut} bars forecasts significantly worse than N={check.cut} "
        f"(the largest difference: {_nested(worst)}{_nested_parts(worst)}){power}."
    )


def nesting_answer(check) -> str:
    """What question 1's answer adds from the nesting check: a sentence only when it fails."""
    if not check.failed:
        return ""
    return (
        f"The nesting check {NESTING_FAILS}: "
        + "; ".join(_nested(t) for t in check.failed)
        + f": in training, the long model lost short-range skill that N={check.cut} learns."
    )


def nesting_table(check) -> dict | None:
    """The nesting check per longer N and part: cut minus the shortest N over training runs (the
    test), beside the gap (full minus the shortest) and the far context (full minus cut)."""
    if not check.tests:
        return None
    short = f"N={check.cut}"
    head = [
        "N (context cut to the shortest N)",
        "part (per labelled bar)",
        f"runs ({short}, cut)",
        f"cut − {short}",
        "95 % interval",
        "t (df)",
        "p",
        "Holm p (over longer N)",
        f"gap: full − {short}",
        "far context: full − cut",
        "verdict",
    ]
    body = []
    for t in check.tests:
        gaps = check.gaps.get(t.n, {})
        for part in [p for p in NESTING_PART_NAMES if p in t.parts or p in gaps]:
            gap = gaps[part].estimate if part in gaps else math.nan
            row = [f"N={t.n} cut to {t.cut}", NESTING_PART_NAMES[part]]
            r = t.parts.get(part)
            if r is None:  # the gap's part is known, the cut model's is not
                body.append(row + ["not measured"] + [""] * 5 + [signed(gap), "", ""])
                continue
            verdict = ("lost skill" if t.lost_skill else "no significant loss") if part == "log_loss" else ""
            body.append(
                row
                + [
                    f"{r.n_runs_a}, {r.n_runs_b}",
                    signed(r.estimate),
                    f"[{signed(r.ci[0])}, {signed(r.ci[1])}]",
                    f"{fmt(r.t, '+.2f')} ({df_text(r.df)})",
                    fmt(r.p, ".3g"),
                    fmt(r.p_holm, ".3g"),
                    signed(gap),
                    signed(gap - r.estimate),
                    verdict,
                ]
            )
    return _table(head, body)


def nesting_notes(check) -> list[str]:
    """How the check is computed, and what of it this run could not measure."""
    if not check.tests:
        return []
    notes = [
        f"How: every evaluation context of the cut scoring holds the same last {check.cut} bars as "
        f"N={check.cut}'s, so both forecasts rest on the same information. Each run (fold, seed) is its mean "
        "loss per labelled bar on the fold's test bars; per fold, the mean over seeds of the cut model's runs "
        f"minus the mean over seeds of N={check.cut}'s; the test is {CROSSED_WORDS if check.inference == 'crossed' else 'the one-sample t of these fold differences'} "
        "(`tsflash.stats.runs.run_level_test`, the test of question 1), Holm over the longer N within each "
        "part; the log-loss decides, its parts say where the difference lies. Positive: the cut model "
        "forecasts worse. Gap = far context + (cut − shortest), exactly, on the same runs; the gap's test is "
        f"question 1's. Source: {check.source}."
    ]
    if check.parts_reason:
        notes.append(
            f"The split of the cut model's log-loss into its parts: not measured in this run "
            f"({check.parts_reason}); the gap's parts are the cells' move_log_loss and moves_fraction × "
            "direction_log_loss_moves, which add up to the log-loss up to the 1e-12 probability floor."
        )
    else:
        notes.append(
            "The split (per labelled bar, each probability floored at 1e-12): flat-vs-move −log(p_up + "
            "p_down) on a bar that moved and −log p_flat on a flat bar; up-vs-down −log q_y on a bar that "
            "moved (q_up = p_up / (p_up + p_down)), 0 on a flat bar. The log-loss of this table is their "
            "sum run by run, so the parts add up exactly; it differs from the 3-class −log p_y by at most "
            f"{check.residual:.2g} nats per bar over these runs (where a probability is floored)."
        )
    return notes


@dataclass(frozen=True)
class Nesting:
    """The nesting check as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "nesting"
    heading: str = "Nesting check"
    placement: str = OWN

    def compute(self, rd: RunData, nums) -> NestingCheck:
        return nesting_check(rd, [s["series"] for s in nums.primary])

    def rows(self, check: NestingCheck) -> dict | None:
        return nesting_table(check)

    def sentences(self, check: NestingCheck) -> dict[str, list[str]]:
        return {"lead": [nesting_sentence(check)], "notes": nesting_notes(check)}

    def to_json(self, check: NestingCheck) -> dict | None:
        return check.to_dict()


DIAGNOSTIC = Nesting()
