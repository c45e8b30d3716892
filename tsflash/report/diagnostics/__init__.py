"""The report's diagnostics, each one module owning its numbers, its table and its sentences
(`base.Diagnostic`), registered once in DIAGNOSTICS.

`tsflash.report.compute.compute` runs them in the list's order into `Numbers.diagnostics` (a later
one may read an earlier one's numbers: the ranking reads the probe's); the two questions' sections
(`tsflash.report.questions`) show them in the same order, and results.json (`tsflash.report.outputs`)
holds what each gives. A new diagnostic is a module here and one line below.
"""

from __future__ import annotations

from tsflash.report.diagnostics import gate_power, nesting, pbo_null, power, probe, ranking, replicate
from tsflash.report.diagnostics.base import OWN, RUNS, TRADING, Diagnostic, section

DIAGNOSTICS: list[Diagnostic] = [
    nesting.DIAGNOSTIC,  # each long N cut to the shortest N against it
    probe.DIAGNOSTIC,  # the linear information probe per N (eval.probe)
    ranking.DIAGNOSTIC,  # each N against the next shorter one, held to the probe's order
    power.DIAGNOSTIC,  # question 1's detectable difference at 3 and 6 seeds
    replicate.DIAGNOSTIC,  # a pre-registered A/A replicate against its arm
    gate_power.DIAGNOSTIC,  # what question 2's "no" rules out: effective trials, the DSR's pass line and power
    pbo_null.DIAGNOSTIC,  # PBO's null distribution for the run's candidates and days
]

__all__ = ["DIAGNOSTICS", "OWN", "RUNS", "TRADING", "Diagnostic", "run_all", "section", "sections"]


def run_all(rd, nums) -> dict:
    """{name: numbers} of every diagnostic, computed in the list's order into `nums.diagnostics`."""
    for d in DIAGNOSTICS:
        nums.diagnostics[d.name] = d.compute(rd, nums)
    return nums.diagnostics


def sections(nums, placement: str) -> list[dict]:
    """The context of every diagnostic shown at `placement` (OWN, RUNS or TRADING), in the list's order."""
    return [s for d in DIAGNOSTICS if d.placement == placement and (s := section(d, nums.diagnostics[d.name]))["shown"]]
