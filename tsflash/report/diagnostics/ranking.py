"""The ranking check in the report: each N against the next shorter one over training runs, on the
log-loss, by question 1's primary test (`tsflash.stats.runs.ranking_check`, computed with question 1
in `tsflash.report.runlevel.run_question`), and with the linear probe the order of the information
the lengths hold that it is held to (`information_order`). Shown inside "Over training runs".
"""

from __future__ import annotations

from dataclasses import dataclass

from tsflash.report.diagnostics.base import RUNS
from tsflash.report.diagnostics.probe import ProbeCheck
from tsflash.report.rundata import RunData
from tsflash.report.wording import DOES_NOT_FOLLOW, FOLLOWS, NO_ORDER, fmt, label, plural, signed
from tsflash.stats.runs import IN_ORDER, OUT_OF_ORDER, RankingCheck

__all__ = ["DOES_NOT_FOLLOW", "FOLLOWS", "NO_ORDER", "Ranking", "RankingReading", "information_order", "ranking_sentence"]



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
    each = "; ".join(f"N={t.longer} {'reads more' if t.reads_more else 'no more shown'} than N={t.shorter} "
                     f"({signed(t.difference.mean)} per bar, Holm p {fmt(t.p_holm, '.3g')})" for t in steps)
    tail = ("no order to hold the ranking to (the probe finds no longer N holding more)"
            if information == NO_ORDER else f"the ranking {information}")
    return (f" Against the information the lengths hold, as the linear probe reads it (each N against the next "
            f"shorter one, t over folds, Holm over the steps: {each}): {tail}.")


def _ranking_reading(check) -> str:
    pairs = "; ".join(f"{label(r.arm_b)} minus {label(r.arm_a)} {signed(r.estimate)} per bar [{signed(r.ci[0])}, "
                      f"{signed(r.ci[1])}], Holm p {fmt(r.p_holm, '.3g')}" for r in check.pairs)
    lead = (f"Ranking check (each N against the next shorter one over training runs, log-loss, Holm over "
            f"{plural(len(check.pairs), 'pair')}): {pairs}")
    if check.verdict == IN_ORDER:
        return f"{lead}: in order: every longer N forecasts better than the next shorter one."
    if check.verdict == OUT_OF_ORDER:
        worse = [r for r in check.pairs if r.verdict == "worse"]
        return f"{lead}: out of order: " + ", ".join(f"{label(r.arm_b)} forecasts worse than {label(r.arm_a)}"
                                                     for r in worse) + "."
    return (f"{lead}: not shown: " + ("the estimates fall with N, but not every step is significant."
                                      if check.estimates_in_order else "the estimates do not fall with N at every step."))


@dataclass(frozen=True)
class Ranking:
    """The ranking check as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`); it
    reads the probe's numbers, so it comes after the probe in the list."""

    name: str = "ranking"
    heading: str = "Ranking check"
    placement: str = RUNS

    def compute(self, rd: RunData, nums) -> RankingReading:
        ranking, probe = nums.forecast.runs.ranking, nums.diagnostics["probe"]
        return RankingReading(ranking, tuple(probe.steps),
                              information_order(ranking, probe, [s["n"] for s in nums.primary]))

    def rows(self, reading: RankingReading) -> dict | None:
        return None

    def sentences(self, reading: RankingReading) -> dict[str, list[str]]:
        return {"lead": [ranking_sentence(reading.check, reading.steps, reading.information)]}

    def to_json(self, reading: RankingReading) -> dict | None:
        return None  # questions.json's forecast.runs.ranking (`tsflash.report.runlevel.runs_results`)


DIAGNOSTIC = Ranking()
