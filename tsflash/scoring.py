"""Scoring at a fee: per-bar net returns from saved positions, seed portfolios, daily series and
the trial's value. Torch-free.

Fees are applied here, at scoring time (`tsflash.metrics.apply_fees`), from the per-bar positions
and gross returns every cell saves: the fee is not part of a run's identity. The sweep scores at
the run's configured fee; `tsflash report` can re-score the same cells at another fee
(`series_from_cells`) without training.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from tsflash.errors import UserError
from tsflash.metrics import apply_fees
from tsflash.runfolder import BASELINE_PREFIX, RunFolder, is_baseline
from tsflash.selection import SelectionInputError, daily_returns, sharpe


class BarReturns(NamedTuple):
    """One strategy path over scored test bars: times (M,) int64 us, net and gross (M,) float64."""

    times: np.ndarray
    net: np.ndarray
    gross: np.ndarray


def bar_returns(test_time, position, gross, fee_bps: float) -> BarReturns:
    """Per-bar net returns at `fee_bps` from a cell's saved positions and gross returns."""
    gross = np.asarray(gross, dtype=np.float64)
    return BarReturns(np.asarray(test_time, dtype=np.int64), apply_fees(position, gross, fee_bps), gross)


def cell_returns(stem: Path, fee_bps: float) -> BarReturns:
    """`bar_returns` of the cell saved at `stem` (its `<stem>.npz`, written by FoldResult.save)."""
    npz = RunFolder.cell_npz(stem)
    if not npz.exists():
        raise UserError(
            f"re-scoring needs the per-bar cell files (cells/**/*.npz); {npz} is missing "
            "(a published run does not commit them): rerun the sweep to make them"
        )
    with np.load(npz) as z:
        return bar_returns(z["test_time"], z["position"], z["gross_returns"], fee_bps)


def seed_portfolio(per_seed: list[BarReturns]) -> BarReturns:
    """Several seeds of one (configuration, fold): an equal-weight portfolio of their strategies,
    summed in the order given (the config's seeds), so a run re-scored at its own fee gives its
    daily series bit for bit."""
    if not per_seed:
        raise UserError("seed_portfolio: needs at least one seed's returns, got 0")
    times, net, gross = per_seed[0]
    for other in per_seed[1:]:
        assert np.array_equal(other.times, times), "seeds scored different test bars"
        net, gross = net + other.net, gross + other.gross
    return BarReturns(times, net / len(per_seed), gross / len(per_seed))


def daily_series(parts: list[BarReturns]) -> dict:
    """Per-fold per-bar paths, concatenated in time order and compounded to UTC-daily returns:
    {"days": datetime64[D] (D,), "net": (D,), "gross": (D,)}."""
    parts = sorted(parts, key=lambda p: int(p.times[0]) if len(p.times) else 0)
    t = np.concatenate([p.times for p in parts])
    days, net = daily_returns(t, np.concatenate([p.net for p in parts]))
    _, gross = daily_returns(t, np.concatenate([p.gross for p in parts]))
    return {"days": days, "net": net, "gross": gross}


def daily_sharpe(bars: BarReturns) -> float:
    """Per-day Sharpe ratio of a per-bar net path; NaN when undefined (under 2 days, constant)."""
    try:
        return float(sharpe(daily_returns(bars.times, bars.net)[1]))
    except SelectionInputError:
        return float("nan")


def objective_value(daily_net: np.ndarray) -> float:
    """A trial's value: its daily net Sharpe ratio; 0 for a strategy that never trades (no Sharpe)."""
    try:
        return float(sharpe(daily_net))
    except SelectionInputError:
        return 0.0


def series_from_cells(folder: RunFolder, name: str, n_folds: int, seeds: list[int], fee_bps: float) -> dict:
    """The daily series `name` (a trial key or baseline-<name>) re-scored at `fee_bps` from its
    per-bar cells; the cells' .npz files must be present (they are not in a published run)."""
    if is_baseline(name):
        base = name.removeprefix(BASELINE_PREFIX)
        parts = [cell_returns(folder.baseline_stem(k, base), fee_bps) for k in range(n_folds)]
    else:
        parts = [seed_portfolio([cell_returns(folder.cell_stem(name, k, s), fee_bps) for s in seeds])
                 for k in range(n_folds)]
    return daily_series(parts)
