"""The A/A reading of a pre-registered replicate.

`tsflash preregister --aa-seeds` plans every arm's config again on the plan's own bars with other
seeds, into OUT/controls/aa/<arm>: the same design and bars, disjoint training runs, so the true
difference between the arm's run (OUT/<arm>) and its replicate is zero at every N. Question 1's
primary test (the config's eval.seed_inference, `tsflash.stats.runs.run_level_test`), applied to
replicate minus run at each N and score, is then a draw from its null on these bars at this design:
how often it says "differ" is its false-positive rate there, beside its level. The two scores of one
N share their runs and every N shares a fold's market, so the comparisons are not independent; the
binomial tail the sentence gives reads them as if they were (indicative), the count is the reading.

The replicate's seeds are also three more training runs of every arm's config on the same folds:
question 1 over both seed sets (six seeds per N, `pooled_table`) is the plan's primary reading
when it has the replicate (`tsflash preregister --aa-seeds`; on the second edition's components the
crossed test's 80 % detectable difference at N=32768 halves from three seeds to six, 0.0083 to
0.0042 nats per bar on the log-loss, reports/controls/aa/summary.md), at no GPU time beyond the A/A's.

So is the nesting check over both seed sets (`pooled_nesting`). The replicate's own report carries
all three (`replicate_check`), with the sentences and the table here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.stats

from tsflash.report.diagnostics.base import OWN
from tsflash.report.diagnostics.nesting import NestingCheck, nesting_check, nesting_sentence
from tsflash.report.diagnostics.power import with_power
from tsflash.report.diagnostics.ranking import with_ranking
from tsflash.report.markdown import table as _table
from tsflash.report.registration import replicated_run
from tsflash.report.rundata import RunData, load_run, seed_inference
from tsflash.report.runlevel import (
    PRIOR,
    SCORES,
    RunQuestion,
    default_keys,
    load_losses,
    run_question,
    runs_results,
)
from tsflash.report.wording import POOLED_LEAD, SCORE_NAMES, fmt, plural, run_sentence, signed
from tsflash.runfolder import RunFolder
from tsflash.scoring.daily import ENSEMBLE
from tsflash.stats.forecasts import holm
from tsflash.stats.runs import (
    ALPHA,
    SEED_PREFIX,
    RunTestInputError,
    RunTestResult,
    run_level_test,
    runs_from_table,
)


@dataclass(frozen=True)
class AARow:
    n: int
    score: str  # a key of SCORES
    result: RunTestResult  # replicate minus the arm's run at N, by the primary test
    p_holm: float = math.nan  # Holm over every row of the reading


@dataclass
class AACheck:
    """The reading, or why there is none (`reason`; `arm` set when the run is a replicate whose
    reading is not possible yet)."""

    arm: str = ""
    reason: str = ""
    inference: str = "fold"
    alpha: float = ALPHA
    run_seeds: tuple[int, ...] = ()
    replicate_seeds: tuple[int, ...] = ()
    rows: list[AARow] = field(default_factory=list)
    pooled: RunQuestion | None = None  # question 1 over the arm's seeds and the replicate's together
    shortest: str = ""  # the arm's trial key at its shortest N (the pooled reading's reference)
    pooled_nesting: NestingCheck | None = None  # the nesting check over both seed sets

    @property
    def available(self) -> bool:
        return bool(self.rows)

    @property
    def differ(self) -> int:
        return sum(r.result.p <= self.alpha for r in self.rows)

    @property
    def differ_holm(self) -> int:
        return sum(r.p_holm <= self.alpha for r in self.rows)

    @property
    def tail(self) -> float:
        """P(at least `differ` of the rows say "differ") for a calibrated test on independent rows."""
        return float(scipy.stats.binom.sf(self.differ - 1, len(self.rows), self.alpha))

    @property
    def calibrated(self) -> bool:
        """No more "differ" than a calibrated test gives with probability alpha (the tail above it)."""
        return self.tail >= self.alpha

    def to_dict(self) -> dict:
        return {
            "arm": self.arm,
            "reason": self.reason,
            "inference": self.inference,
            "alpha": self.alpha,
            "run_seeds": list(self.run_seeds),
            "replicate_seeds": list(self.replicate_seeds),
            "comparisons": len(self.rows),
            "differ": self.differ,
            "differ_holm": self.differ_holm,
            "tail": self.tail if self.rows else None,
            "calibrated": self.calibrated if self.rows else None,
            "rows": [
                {
                    "n": r.n,
                    "score": r.score,
                    "estimate": r.result.estimate,
                    "ci": list(r.result.ci),
                    "p": r.result.p,
                    "p_holm": r.p_holm,
                }
                for r in self.rows
            ],
            "pooled": runs_results(self.pooled) if self.pooled is not None else None,
            "pooled_nesting": self.pooled_nesting.to_dict() if self.pooled_nesting is not None else None,
        }


def shared_lengths(run_keys: dict[int, str], replicate_keys: dict[int, str]) -> list[int]:
    """The context lengths both runs have (N -> trial key maps), in order: the only ones compared."""
    return sorted(run_keys.keys() & replicate_keys.keys())


def pooled_table(run: dict, replicate: dict, run_keys: dict[int, str], replicate_keys: dict[int, str]) -> dict:
    """One loss table of both seed sets: the arm's single runs and the replicate's (renamed to the
    arm's trial keys by N) at every N both have, and the arm's class prior (its skill reference)."""

    def rows(table: dict, keep: np.ndarray, rename: dict[str, str] | None = None) -> dict:
        out = {k: np.asarray(v)[keep] for k, v in table.items()}
        if rename:
            out["series"] = np.array([rename[s] for s in out["series"]], dtype=object)
        return out

    lengths = shared_lengths(run_keys, replicate_keys)
    member = lambda table: np.char.startswith(np.asarray(table["member"]).astype(str), SEED_PREFIX)  # noqa: E731
    series = lambda table, keys: np.isin(np.asarray(table["series"]).astype(str), keys)  # noqa: E731
    parts = [
        rows(run, series(run, [run_keys[n] for n in lengths]) & member(run)),
        rows(
            replicate,
            series(replicate, [replicate_keys[n] for n in lengths]) & member(replicate),
            {replicate_keys[n]: run_keys[n] for n in lengths},
        ),
        rows(
            run, (np.asarray(run["series"]).astype(str) == PRIOR) & (np.asarray(run["member"]).astype(str) == ENSEMBLE)
        ),
    ]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def pooled_nesting(run: RunData, replicate: RunData) -> NestingCheck:
    """The nesting check over both seed sets: the replicate's cells (renamed to the arm's trial keys
    by N) beside the arm's, read from their summaries (the per-bar arrays are in two folders)."""
    run_keys, replicate_keys = default_keys(run), default_keys(replicate)
    lengths = shared_lengths(run_keys, replicate_keys)
    rename = {replicate_keys[n]: run_keys[n] for n in lengths}
    cells = [c for c in run.cells if c["key"] in rename.values()] + [
        c | {"key": rename[c["key"]]} for c in replicate.cells if c["key"] in rename
    ]
    return nesting_check(dataclasses.replace(run, cells=cells), [run_keys[n] for n in lengths])


def compare(
    run: dict,
    replicate: dict,
    run_keys: dict[int, str],
    replicate_keys: dict[int, str],
    *,
    inference: str = "fold",
    alpha: float = ALPHA,
    arm: str = "",
) -> AACheck:
    """Replicate minus run at every N both have, on both scores, by `run_level_test` (`inference`:
    eval.seed_inference); `run`, `replicate`: their loss tables; `*_keys`: N -> trial key."""
    lengths = shared_lengths(run_keys, replicate_keys)
    if not lengths:
        return AACheck(arm, "the replicate and the arm's run share no context length", inference, alpha)
    rows: list[AARow] = []
    seeds: tuple[set[int], set[int]] = (set(), set())
    try:
        for score, (loss, count) in SCORES.items():
            for n in lengths:
                a = runs_from_table(run, run_keys[n], loss=loss, count=count, label=f"N={n}, the arm's seeds")
                b = runs_from_table(
                    replicate, replicate_keys[n], loss=loss, count=count, label=f"N={n}, the replicate's"
                )
                if shared := set(a.seed.tolist()) & set(b.seed.tolist()):
                    return AACheck(
                        arm,
                        f"the replicate repeats the arm's seeds {sorted(shared)}: not disjoint runs",
                        inference,
                        alpha,
                    )
                seeds[0].update(a.seed.tolist())
                seeds[1].update(b.seed.tolist())
                rows.append(AARow(n, score, run_level_test(a, b, alpha=alpha, seeds=inference)))
    except RunTestInputError as exc:
        return AACheck(arm, f"the comparison cannot be tested over training runs: {exc}", inference, alpha)
    rows = [
        AARow(r.n, r.score, r.result, float(p)) for r, p in zip(rows, holm([r.result.p for r in rows]), strict=True)
    ]
    table, primary = pooled_table(run, replicate, run_keys, replicate_keys), [run_keys[n] for n in lengths]
    pooled = with_power(with_ranking(run_question(table, primary, inference), table, primary))
    return AACheck(
        arm, "", inference, alpha, tuple(sorted(seeds[0])), tuple(sorted(seeds[1])), rows, pooled, run_keys[lengths[0]]
    )


def replicate_check(rd: RunData) -> AACheck:
    """The reading of a pre-registered A/A replicate's run folder against its arm's run (OUT/<arm>,
    beside the plan); an empty reason-less check for any other run (nothing to show)."""
    if (own := replicated_run(rd.run_dir)) is None:
        return AACheck()
    arm, inference = own.name, seed_inference(rd.config)
    if not RunFolder(own).run_json.exists() or not RunFolder(own).cell_summaries()[0]:  # a run not yet begun
        return AACheck(arm, f"the arm's own run ({arm}, beside the plan) has no finished cell yet", inference)
    run = load_run(own)
    tables = load_losses(run)[0], load_losses(rd)[0]
    if tables[0] is None or tables[1] is None:
        which = "the arm's run" if tables[0] is None else "the replicate"
        return AACheck(arm, f"{which} has no per-day loss sums yet", inference)
    check = compare(tables[0], tables[1], default_keys(run), default_keys(rd), inference=inference, arm=arm)
    if check.available:
        check.pooled_nesting = pooled_nesting(run, rd)
    return check


# ---------------------------------------------------------------------------------------------
# Its sentences and table


AA_LEAD = "A/A replicate"


def aa_sentence(check) -> str:
    """A pre-registered A/A replicate's reading (`tsflash.report.diagnostics.replicate`): how often question 1's
    primary test says "differ" between disjoint runs of one config, against its level; "" for a run
    that is no replicate."""
    if not check.arm:
        return ""
    if not check.available:
        return f"{AA_LEAD} of arm {check.arm}: no reading yet: {check.reason}."
    n, k = len(check.rows), check.differ
    test = "the fold t" if check.inference == "fold" else "the crossed test"
    seeds = lambda s: ", ".join(map(str, s))  # noqa: E731
    head = (
        f"{AA_LEAD} of arm {check.arm} (seeds {seeds(check.replicate_seeds)} against the arm's "
        f"{seeds(check.run_seeds)}: the same config on the same bars, so no true difference), by question 1's "
        f'primary test ({test}) at each N and score: {k} of {n} comparisons say "differ" at alpha '
        f"{check.alpha:g} ({check.differ_holm} after Holm over the {n}); a calibrated test says so in "
        f"{check.alpha * n:.2g} of {n} on average"
        + (
            f", and in at least {k} with probability {check.tail:.2g} were they independent (they share runs and folds)"
            if k
            else ""
        )
    )
    if check.calibrated:
        return head + ": within the test's level on these bars at this design."
    return (
        head + ": more often than its level allows, so the primary test is not calibrated on these bars at "
        'this design, and a "differ" in question 1 of the arm\'s run is read with that.'
    )


def pooled_sentence(check) -> str:
    """Question 1 over the arm's seeds and its A/A replicate's together (`tsflash.report.diagnostics.replicate`),
    the primary reading of a plan with the replicate; "" without one."""
    if not check.arm or check.pooled is None:
        return ""
    return (
        f"{POOLED_LEAD} (the arm's seeds and the replicate's, {plural(check.pooled.seeds_per_fold, 'seed')} "
        f"per fold): " + run_sentence(SimpleNamespace(runs=check.pooled, shortest=check.shortest))
    )


def pooled_nesting_sentence(check) -> str:
    """The nesting check over an arm's seeds and its A/A replicate's together; "" without it."""
    if not check.arm or check.pooled_nesting is None:
        return ""
    return f"{POOLED_LEAD}: {nesting_sentence(check.pooled_nesting)}"


def aa_table(check) -> dict | None:
    """A pre-registered A/A replicate's comparisons (`tsflash.report.diagnostics.replicate`): replicate minus
    the arm's run per N and score, by question 1's primary test."""
    if not check or not check.available:
        return None
    head = ["N", "score", "replicate − arm's run per bar [95 % over runs]", "p", "Holm p", "says"]
    body = [
        [
            f"N={r.n}",
            SCORE_NAMES[r.score],
            f"{signed(r.result.estimate)} [{signed(r.result.ci[0])}, {signed(r.result.ci[1])}]",
            fmt(r.result.p, ".3g"),
            fmt(r.p_holm, ".3g"),
            "differ" if r.result.p <= check.alpha else "no difference",
        ]
        for r in check.rows
    ]
    return _table(head, body)


@dataclass(frozen=True)
class Replicate:
    """An A/A replicate's reading as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "aa"
    heading: str = "A/A replicate"
    placement: str = OWN

    def compute(self, rd: RunData, nums) -> AACheck:
        return replicate_check(rd)

    def rows(self, check: AACheck) -> dict | None:
        return aa_table(check)

    def sentences(self, check: AACheck) -> dict[str, list[str]]:
        return {"lead": [aa_sentence(check)], "after": [pooled_sentence(check), pooled_nesting_sentence(check)]}

    def to_json(self, check: AACheck) -> dict | None:
        return check.to_dict() if check.arm else None


DIAGNOSTIC = Replicate()
