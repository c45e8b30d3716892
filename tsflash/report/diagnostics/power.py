"""Question 1's power in the report: the smallest true difference per bar the run-level test detects
with 80 % power at 3 and 6 seeds, from the variance components of question 1's comparisons
(`power_of`, by `tsflash.stats.runs.min_detectable_difference`). `with_power` stores it in the
`RunQuestion`, whose JSON holds it as `power_80`. Shown inside "Over training runs", after its notes.

Where the family's test is the crossed one (eval.seed_inference = "crossed"), the fold t's figure
is not what the test detects. So `with_power` also gives the crossed test's own detectable
difference at the design that ran (its folds and seeds a fold), per comparison, at Holm's first
step over the family: what a "no" rules out (`crossed_power_80`; `tsflash.stats.runs.crossed_power`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tsflash.report.diagnostics.base import RUNS
from tsflash.report.rundata import RunData
from tsflash.report.runlevel import SCORES, RunQuestion
from tsflash.report.wording import ALPHA_TEXT, SCORE_NAMES, label, plural
from tsflash.stats.runs import RunTestInputError, crossed_power, min_detectable_difference, pooled_components

POWER_SEEDS = (3, 6)  # the seeds per arm and fold at which the report gives the detectable difference


def power_of(results: list, n_folds: int) -> tuple[dict[int, float], float, float]:
    """(detectable difference per seed count, seed sd, between-fold sd) of run-level tests
    (`tsflash.stats.runs.RunTestResult`): the components averaged over `results` (variances, so the
    mean of variances)."""
    c = pooled_components(results)
    if c is None or n_folds < 2:
        return {}, math.nan, math.nan
    try:
        mdd = {k: min_detectable_difference(c, n_folds, k) for k in POWER_SEEDS}
    except (RunTestInputError, ValueError):  # the noncentral t turns NaN far out on degenerate components
        mdd = {}
    return mdd, math.sqrt(c.within_fold_seed), math.sqrt(c.between_fold)


def with_power(runs: RunQuestion) -> RunQuestion:
    """`runs` with its power per score, from its comparisons with the shortest N on that score;
    `runs` itself when question 1 was not tested."""
    if runs.result is None:
        return runs
    out = dataclasses.replace(runs, power={}, seed_sd={}, between_sd={})
    for sc in SCORES:
        mine = [p.result for p in runs.result.comparisons if p.score == sc]
        out.power[sc], out.seed_sd[sc], out.between_sd[sc] = power_of(mine, runs.n_folds)
    return with_crossed_power(out)


def with_crossed_power(runs: RunQuestion) -> RunQuestion:
    """`runs` with the crossed test's 80 % detectable difference per comparison at its own design
    (folds, seeds a fold), two-sided at alpha / m (Holm's first step over the family's m
    comparisons), from each paired table's fold, seed and residual components; `runs` itself where
    the family's test is not the crossed one."""
    if runs.result is None or not runs.crossed:
        return runs
    comparisons = runs.result.comparisons
    level = comparisons[0].result.alpha / len(comparisons)
    found: dict[str, dict[str, float]] = {}
    for (key, sc), c in runs.crossed.items():
        try:
            found.setdefault(sc, {})[key] = crossed_power(c, runs.n_folds, runs.seeds_per_fold, alpha=level).detectable
        except RunTestInputError:  # no variance at all, or too few folds or seeds: nothing to simulate
            continue
    return dataclasses.replace(runs, crossed_power=found, crossed_alpha=level if found else None)


def crossed_power_sentence(runs, label_of) -> str:
    """What a "no" of the crossed test rules out at the design that ran; "" without it. `label_of`:
    trial key -> its words ("N=4096")."""
    if not runs.available or not runs.crossed_power:
        return ""
    m = len(runs.result.comparisons)
    parts = []
    for sc, by_key in runs.crossed_power.items():
        at = [f"{v:.2g} at {label_of(k)}" for k, v in by_key.items()]
        parts.append((", ".join(at[:-1]) + " and " if len(at) > 1 else "") + f"{at[-1]} on the {SCORE_NAMES[sc]}")
    return (
        f'What a "no" rules out: at this design ({plural(runs.n_folds, "fold")}, {plural(runs.seeds_per_fold, "seed")} '
        "a fold), the crossed test detects with 80 % power a true difference per bar (nats) of "
        + "; ".join(parts)
        + f". It is two-sided at {runs.crossed_alpha:.3g}, Holm's first step over the {m} comparisons, simulated at "
        "each comparison's measured fold, seed and residual components. Smaller effects are not ruled out."
    )


def run_power_sentence(runs) -> str:
    """The smallest difference the run-level test detects with 80 % power, at 3 and at 6 seeds."""
    if not runs.available or not any(runs.power.values()):
        return ""
    parts = []
    for sc, mdd in runs.power.items():
        if mdd:
            at = " and ".join(f"{mdd[k]:.2g} at {plural(k, 'seed')}" for k in sorted(mdd))
            parts.append(
                f"on the {SCORE_NAMES[sc]} {at} (seed sd {runs.seed_sd[sc]:.2g}, between-fold sd "
                f"{runs.between_sd[sc]:.2g})"
            )
    return (
        f"Power over training runs: from the variance components measured here, the smallest true difference "
        f"per bar (nats) {'the fold t' if runs.inference == 'crossed' else 'the run-level test'} detects with 80 % "
        f"power at {ALPHA_TEXT} (two-sided, before Holm) "
        f"over {plural(runs.n_folds, 'fold')}: " + "; ".join(parts) + ". More seeds shrink only the seed part; "
        "more folds shrink both."
    )


@dataclass(frozen=True)
class Power:
    """Question 1's power as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "power"
    heading: str = "Power over training runs"
    placement: str = RUNS

    def compute(self, rd: RunData, nums) -> RunQuestion:
        nums.forecast.runs = with_power(nums.forecast.runs)  # questions.json reads it there
        return nums.forecast.runs

    def rows(self, runs: RunQuestion) -> dict | None:
        return None

    def sentences(self, runs: RunQuestion) -> dict[str, list[str]]:
        crossed = crossed_power_sentence(runs, label)
        return {"notes": [*([crossed] if crossed else []), run_power_sentence(runs)]}

    def to_json(self, runs: RunQuestion) -> dict | None:
        return None  # questions.json's forecast.runs.power_80 (`tsflash.report.runlevel.runs_results`)


DIAGNOSTIC = Power()
