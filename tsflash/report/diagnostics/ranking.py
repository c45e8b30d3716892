"""The ranking check in the report: each N against the next shorter one over training runs, on the
log-loss, by question 1's primary test (`ranking_of`, by `tsflash.stats.runs.ranking_check`; stored
in the `RunQuestion` by `with_ranking`), and with the linear probe the order of the information the
lengths hold that it is held to (`information_order`). Shown inside "Over training runs".
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from tsflash.report.diagnostics.base import RUNS
from tsflash.report.diagnostics.probe import ProbeCheck
from tsflash.report.rundata import RunData
from tsflash.report.runlevel import SCORES, RunQuestion
from tsflash.report.wording import DOES_NOT_FOLLOW, FOLLOWS, NO_ORDER, fmt, label, plural, signed
from tsflash.stats.runs import IN_ORDER, OUT_OF_ORDER, RankingCheck, RunTestInputError, ranking_check, runs_from_table

__all__ = [
    "DOES_NOT_FOLLOW",
    "FOLLOWS",
    "NO_ORDER",
    "Ranking",
    "RankingReading",
    "information_order",
    "ranking_of",
    "ranking_sentence",
    "with_ranking",
]


def ranking_of(table: dict, primary: list[str], inference: str = "fold") -> RankingCheck:
    """The ranking check of the loss table's series `primary` (in increasing N, three or more) on
    the log-loss, each pair by question 1's test (`inference`: eval.seed_inference)."""
    loss, count = SCORES["log_loss"]
    return ranking_check([runs_from_table(table, n, loss=loss, count=count) for n in primary], seeds=inference)


def with_ranking(runs: RunQuestion, table: dict | None, primary: list[str]) -> RunQuestion:
    """`runs` with its ranking check (`ranking_of`) where question 1 was tested on three lengths or
    more; a ranking pair that cannot be tested leaves question 1 untested, as its own tests do."""
    if not runs.available or table is None or len(primary) < 3:
        return runs
    try:
        return dataclasses.replace(runs, ranking=ranking_of(table, primary, runs.inference))
    except RunTestInputError as exc:
        return RunQuestion(
            False,
            f"question 1 cannot be tested over training runs: {exc}",
            n_folds=runs.n_folds,
            seeds_per_fold=runs.seeds_per_fold,
        )


def information_order(ranking, probe: ProbeCheck, lengths: list[int]) -> str | None:
    """The ranking check held to the order of the information the lengths hold, as the linear probe
    measures it (`ProbeCheck.steps`): FOLLOWS when, at every step, the transformer is significantly
    better where the probe reads more and not significantly worse where it does not (and the probe
    reads more at some step); DOES_NOT_FOLLOW otherwise; NO_ORDER when the probe reads more at no
    step (nothing to rank by). `lengths`: the ranking's N in order. None without both, or when the
    probe's steps are not the ranking's pairs."""
    steps = [(t.shorter, t.longer) for t in probe.steps]
    if ranking is None or steps != list(itertools.pairwise(lengths)) or len(ranking.pairs) != len(steps):
        return None
    if not any(t.reads_more for t in probe.steps):
        return NO_ORDER
    ok = all(
        r.verdict == "better" if t.reads_more else r.verdict != "worse"
        for t, r in zip(probe.steps, ranking.pairs, strict=True)
    )
    return FOLLOWS if ok else DOES_NOT_FOLLOW


@dataclass(frozen=True)
class RankingReading:
    """The ranking check (None with fewer than three lengths), the probe's steps and the order it is held to."""

    check: RankingCheck | None
    steps: tuple = ()
    information: str | None = None


def ranking_sentence(check, steps=(), information: str | None = None) -> str:
    """The ranking check's reading with its numbers (`tsflash.stats.runs.RankingCheck`), and with the
    linear probe's steps (`tsflash.report.diagnostics.probe.ProbeStep`) the order of the information it is held to
    (`information_order`); "" without a check."""
    if check is None:
        return ""
    return _ranking_reading(check) + (_information_reading(steps, information) if information else "")


def _information_reading(steps, information: str) -> str:
    each = "; ".join(
        f"N={t.longer} {'reads more' if t.reads_more else 'no more shown'} than N={t.shorter} "
        f"({signed(t.difference.mean)} per bar, Holm p {fmt(t.p_holm, '.3g')})"
        for t in steps
    )
    tail = (
        "no order to hold the ranking to (the probe finds no longer N holding more)"
        if information == NO_ORDER
        else f"the ranking {information}"
    )
    return (
        f" Against the information the lengths hold, as the linear probe reads it (each N against the next "
        f"shorter one, t over folds, Holm over the steps: {each}): {tail}."
    )


def _ranking_reading(check) -> str:
    pairs = "; ".join(
        f"{label(r.arm_b)} minus {label(r.arm_a)} {signed(r.estimate)} per bar [{signed(r.ci[0])}, "
        f"{signed(r.ci[1])}], Holm p {fmt(r.p_holm, '.3g')}"
        for r in check.pairs
    )
    lead = (
        f"Ranking check (each N against the next shorter one over training runs, log-loss, Holm over "
        f"{plural(len(check.pairs), 'pair')}): {pairs}"
    )
    if check.verdict == IN_ORDER:
        return f"{lead}: in order: every longer N forecasts better than the next shorter one."
    if check.verdict == OUT_OF_ORDER:
        worse = [r for r in check.pairs if r.verdict == "worse"]
        return (
            f"{lead}: out of order: "
            + ", ".join(f"{label(r.arm_b)} forecasts worse than {label(r.arm_a)}" for r in worse)
            + "."
        )
    return f"{lead}: not shown: " + (
        "the estimates fall with N, but not every step is significant."
        if check.estimates_in_order
        else "the estimates do not fall with N at every step."
    )


@dataclass(frozen=True)
class Ranking:
    """The ranking check as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`); it
    reads the probe's numbers, so it comes after the probe in the list."""

    name: str = "ranking"
    heading: str = "Ranking check"
    placement: str = RUNS

    def compute(self, rd: RunData, nums) -> RankingReading:
        fq = nums.forecast
        fq.runs = with_ranking(fq.runs, fq.table, [s["series"] for s in nums.primary])  # questions.json reads it there
        ranking, probe = fq.runs.ranking, nums.diagnostics["probe"]
        return RankingReading(
            ranking, tuple(probe.steps), information_order(ranking, probe, [s["n"] for s in nums.primary])
        )

    def rows(self, reading: RankingReading) -> dict | None:
        return None

    def sentences(self, reading: RankingReading) -> dict[str, list[str]]:
        return {"lead": [ranking_sentence(reading.check, reading.steps, reading.information)]}

    def to_json(self, reading: RankingReading) -> dict | None:
        return None  # questions.json's forecast.runs.ranking (`tsflash.report.runlevel.runs_results`)


DIAGNOSTIC = Ranking()
