"""Question 1's power in the report: the smallest true difference per bar the run-level test detects
with 80 % power at 3 and 6 seeds, from the variance components measured on the run
(`tsflash.stats.runs.min_detectable_difference`, computed with question 1 in
`tsflash.report.runlevel.run_question`, whose JSON holds it as `power_80`). Shown inside "Over
training runs", after its notes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tsflash.report.diagnostics.base import RUNS
from tsflash.report.rundata import RunData
from tsflash.report.runlevel import RunQuestion
from tsflash.report.wording import ALPHA_TEXT, SCORE_NAMES, plural


def run_power_sentence(runs) -> str:
    """The smallest difference the run-level test detects with 80 % power, at 3 and at 6 seeds."""
    if not runs.available or not any(runs.power.values()):
        return ""
    parts = []
    for sc, mdd in runs.power.items():
        if mdd:
            at = " and ".join(f"{mdd[k]:.2g} at {plural(k, 'seed')}" for k in sorted(mdd))
            parts.append(f"on the {SCORE_NAMES[sc]} {at} (seed sd {runs.seed_sd[sc]:.2g}, between-fold sd "
                         f"{runs.between_sd[sc]:.2g})")
    return (f"Power over training runs: from the variance components measured here, the smallest true difference "
            f"per bar (nats) the run-level test detects with 80 % power at {ALPHA_TEXT} (two-sided, before Holm) "
            f"over {plural(runs.n_folds, 'fold')}: " + "; ".join(parts) + ". More seeds shrink only the seed part; "
            "more folds shrink both.")


@dataclass(frozen=True)
class Power:
    """Question 1's power as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "power"
    heading: str = "Power over training runs"
    placement: str = RUNS

    def compute(self, rd: RunData, nums) -> RunQuestion:
        return nums.forecast.runs

    def rows(self, runs: RunQuestion) -> dict | None:
        return None

    def sentences(self, runs: RunQuestion) -> dict[str, list[str]]:
        return {"notes": [run_power_sentence(runs)]}

    def to_json(self, runs: RunQuestion) -> dict | None:
        return None  # questions.json's forecast.runs.power_80 (`tsflash.report.runlevel.runs_results`)


DIAGNOSTIC = Power()
