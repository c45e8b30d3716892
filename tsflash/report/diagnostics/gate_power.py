"""What question 2's "no" rules out, in the report: the effective number of trials among the candidates
and the DSR with it, the line an observed Sharpe ratio must cross to pass the DSR gate, the true
Sharpe ratio the gate finds with 80 % power, and the minimum track record length. The numbers are
`tsflash.stats.gate.Deflation`, computed with the gates in `select_run` (the one place a run's DSR
is computed); their sentences are here. Shown among the trading rule's notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tsflash.report.diagnostics.base import TRADING
from tsflash.report.rundata import RunData
from tsflash.report.wording import NA, fmt, per_day, plural
from tsflash.stats.sharpe import PERIODS_PER_YEAR


@dataclass(frozen=True)
class GateReading:
    """The gates' deflation (None when they did not run), the DSR's trial count and where it came from."""

    deflation: Any
    n_trials: int
    count_source: str | None = None


def effective_sentence(d, n_trials: int) -> str:
    if d is None:
        return ""
    e = d.effective
    return (
        f"Effective number of trials: {e.n_effective:.2f} among the {plural(e.n_columns, 'candidate')} ({e.method}, "
        f"over their daily net returns); scaled to the ledger's {plural(n_trials, 'trial')} and rounded: "
        f"{d.n_trials_effective}. DSR of the highest-Sharpe candidate with the effective count: "
        f"{fmt(d.dsr_effective.dsr, '.3f')} (SR0 {per_day(d.dsr_effective.sr0)}); with the raw count it is the DSR "
        "of the table."
    )


def power_sentence(d, n_trials: int, periods_per_year: float, count_source: str | None = None) -> str:
    """What a "no" rules out: the pass line of the DSR gate (the Sharpe ratio an observed one must
    cross, about 50 % power) with the trials' measured variance and with the null variance 1/T,
    the true Sharpe ratio needed for 80 % power, and the selected candidate's minimum track record
    length (`gate.Deflation`)."""
    if d is None:
        return "Power: not computable (the gates did not run)."
    ann = math.sqrt(periods_per_year)
    yearly = lambda x: NA if x is None else f"{x * ann:.2f}"  # noqa: E731
    trl = (
        "never: its Sharpe ratio does not exceed SR0"
        if not math.isfinite(d.min_trl)
        else f"{plural(math.ceil(d.min_trl), 'day')}"
    )
    source = f" ({count_source})" if count_source else ""
    return (
        f"Power: with {plural(d.t, 'day')} and {plural(n_trials, 'trial')}{source}, the line an observed "
        f"annualised Sharpe ratio must cross to pass the DSR gate at {d.confidence:g} (about 50 % power; normal "
        f"returns) is {yearly(d.min_sharpe)} with the trials' measured Sharpe variance and "
        f"{yearly(d.min_sharpe_null)} with the null variance 1/T ({yearly(d.min_sharpe_effective)} with "
        f"{plural(d.n_trials_effective, 'effective trial')}); 80 % power needs a true Sharpe ratio near "
        f"{yearly(d.power_sharpe)} ({yearly(d.power_sharpe_null)} with the null variance). A true Sharpe ratio "
        f'below that is not ruled out by a "no". Minimum track record length of the highest-Sharpe candidate '
        f"against SR0: {trl}."
    )


@dataclass(frozen=True)
class GatePower:
    """What a "no" of the DSR gate rules out, as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "gate_power"
    heading: str = 'What a "no" rules out'
    placement: str = TRADING

    def compute(self, rd: RunData, nums) -> GateReading:
        s = nums.selection
        return GateReading(s.deflation, s.n_trials, s.trial_count.source if s.trial_count else None)

    def rows(self, reading: GateReading) -> dict | None:
        return None

    def sentences(self, reading: GateReading) -> dict[str, list[str]]:
        d, n = reading.deflation, reading.n_trials
        return {"notes": [effective_sentence(d, n), power_sentence(d, n, PERIODS_PER_YEAR, reading.count_source)]}

    def to_json(self, reading: GateReading) -> dict | None:
        return None  # questions.json's trading: n_effective, dsr_effective, min_sharpe_*, power80_* (questions.results)


DIAGNOSTIC = GatePower()
