"""PBO's null distribution in the report: for the run's candidate count, common days and blocks, PBO
over iid normal daily returns (`tsflash.stats.runs.pbo_null`, seeded), P(PBO >= observed), and
whether the observed PBO says more than noise (`tsflash.stats.gate.pbo_informative`). Shown among the
trading rule's notes; questions.json holds the summary as trading.pbo_null.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tsflash.report.diagnostics.base import TRADING
from tsflash.report.rundata import RunData
from tsflash.report.wording import plural
from tsflash.stats.gate import RunSelection, pbo_informative
from tsflash.stats.runs import pbo_null

PBO_NULL_REPLICATES = 200  # enough for the quantiles a sentence gives; seeded, so the report is reproducible


@functools.lru_cache(maxsize=8)
def _pbo_null_values(n_candidates: int, n_days: int, n_blocks: int) -> np.ndarray:
    return pbo_null(
        n_candidates, n_days, n_blocks, n_replicates=PBO_NULL_REPLICATES, rng=np.random.default_rng(0)
    ).values


def pbo_null_summary(selection: RunSelection) -> dict | None:
    """PBO's null distribution for the run's candidate count, common days and blocks (iid returns,
    `tsflash.stats.runs.pbo_null`), with P(PBO >= observed) and whether the observed PBO says more
    than noise (`tsflash.stats.gate.pbo_informative`); None when the gates did not run."""
    p = selection.verdict.pbo_result
    if p is None:
        return None
    assert selection.n_blocks_used is not None  # set whenever PBO was computed
    k, t, blocks = len(selection.verdict.table), len(selection.days), int(selection.n_blocks_used)
    values = _pbo_null_values(k, t, blocks)
    return {
        "n_candidates": k,
        "n_days": t,
        "n_blocks": blocks,
        "replicates": len(values),
        "observed": float(p.pbo),
        "mean": float(values.mean()),
        "q05": float(np.quantile(values, 0.05)),
        "q95": float(np.quantile(values, 0.95)),
        "p_at_least": float(np.mean(values >= p.pbo)),
        "p_above_max": float(np.mean(values > selection.verdict.max_pbo)),
        "informative": bool(pbo_informative(values, p.pbo)),
    }


@dataclass(frozen=True)
class PboNullReading:
    summary: dict | None  # pbo_null_summary's, None when the gates did not run
    max_pbo: float  # the PBO gate's line


def pbo_null_sentence(null: dict | None, max_pbo: float) -> str:
    """PBO's null distribution for the candidates and days at hand, and whether PBO says anything."""
    if not null:
        return ""
    text = (
        f"PBO under the null (iid normal daily returns, {plural(null['n_candidates'], 'candidate')}, "
        f"{plural(null['n_days'], 'day')}, {plural(null['n_blocks'], 'block')}, {null['replicates']} seeded "
        f"replicates): mean {null['mean']:.3f}, 5 % to 95 % from {null['q05']:.2f} to {null['q95']:.2f}; noise "
        f"alone gives PBO >= the observed {null['observed']:.3f} in {null['p_at_least']:.0%} of replicates and "
        f"fails the PBO gate (> {max_pbo:g}) in {null['p_above_max']:.0%}."
    )
    if null["informative"]:
        return text + " The observed PBO lies outside that range, so it says more than noise would."
    return text + (
        " PBO is not informative here: with so few candidates the observed value lies inside what noise "
        "gives, so neither a pass nor a fail of the PBO gate tells overfitting from chance."
    )


@dataclass(frozen=True)
class PboNull:
    """PBO's null distribution as a report diagnostic (`tsflash.report.diagnostics.base.Diagnostic`)."""

    name: str = "pbo_null"
    heading: str = "PBO under the null"
    placement: str = TRADING

    def compute(self, rd: RunData, nums) -> PboNullReading:
        return PboNullReading(pbo_null_summary(nums.selection), nums.selection.verdict.max_pbo)

    def rows(self, reading: PboNullReading) -> dict | None:
        return None

    def sentences(self, reading: PboNullReading) -> dict[str, list[str]]:
        return {"notes": [pbo_null_sentence(reading.summary, reading.max_pbo)]}

    def to_json(self, reading: PboNullReading) -> dict | None:
        return None  # questions.json's trading.pbo_null (questions.results)


DIAGNOSTIC = PboNull()
