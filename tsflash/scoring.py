"""Scoring at a fee: per-bar net returns under a trading rule, seed portfolios, daily series and
the trial's value; and the per-day loss sums of the forecasts (question 1's paired tests).
Torch-free.

Fees are applied here, at scoring time (`tsflash.metrics.apply_fees`), from what every cell
saves: its per-bar positions and gross returns under the one-bar rule, and its probabilities and
next-bar returns from which `tsflash.strategy` builds the horizon rule. Neither the fee nor the
rule is part of a run's identity: the sweep scores at its configured `eval.fee_bps` and
`eval.strategy`; `tsflash report RUN --set eval.fee_bps=...` re-scores the same cells
(`series_from_cells`) without training.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tsflash import atomic
from tsflash.errors import UserError
from tsflash.metrics import DAILY_SUMS, apply_fees, daily_loss_sums
from tsflash.runfolder import BASELINE_PREFIX, RunFolder, is_baseline, read_json
from tsflash.selection import SelectionInputError, daily_returns, sharpe
from tsflash.strategy import Strategy, break_even_fee, horizon_path, stored, turnover

ONE_BAR = Strategy(kind="one-bar")
# The cell arrays the scoring reads (FoldResult attributes, or the keys of its .npz).
_CELL_ARRAYS = ("test_time", "y_true", "y_prob", "position", "gross_returns", "next_ret", "val_prob", "val_next_ret")


class BarReturns(NamedTuple):
    """One strategy path over scored test bars: times (M,) int64 us, net, gross and turnover (M,)
    float64 (turnover = position change per bar, what the fee is charged on)."""

    times: np.ndarray
    net: np.ndarray
    gross: np.ndarray
    turnover: np.ndarray


def bar_returns(test_time, position, gross, fee_bps: float) -> BarReturns:
    """Per-bar net returns at `fee_bps` from a path's positions and gross returns."""
    gross = np.asarray(gross, dtype=np.float64)
    return BarReturns(np.asarray(test_time, dtype=np.int64), apply_fees(position, gross, fee_bps), gross,
                      turnover(position))


def scored_arrays(arrays: Mapping, strategy: Strategy, fee_bps: float, where: str = "cell") -> tuple[BarReturns, dict]:
    """(per-bar returns, summary) of one cell's arrays under `strategy` at `fee_bps`.

    arrays : the cell's saved arrays by name (`cell_arrays`); the one-bar rule uses the saved
        positions and gross returns, the horizon rule the probabilities and next-bar returns.
    The summary holds the rule, its threshold and where it came from, mean gross and net returns
    per bar, turnover per bar, the bar count and the break-even fee (bps).
    """
    if strategy.kind == "one-bar":
        position, gross, tau, source = arrays["position"], arrays["gross_returns"], 0.0, "one-bar"
    else:
        if arrays.get("next_ret") is None or len(arrays["next_ret"]) != len(arrays["test_time"]):
            raise UserError(f"{where} has no per-bar next returns (saved before the horizon strategy existed): "
                            "score it with eval.strategy=one-bar, or rerun the sweep")
        position, gross, tau, source = horizon_path(strategy, arrays["y_prob"], arrays["next_ret"], fee_bps,
                                                    arrays.get("val_prob"), arrays.get("val_next_ret"))
    bars = bar_returns(arrays["test_time"], position, gross, fee_bps)
    m = len(bars.gross)
    summary = {"strategy": strategy.kind, "threshold": float(tau), "threshold_source": source, "n_bars": m,
               "mean_gross_return": float(np.mean(bars.gross)) if m else float("nan"),
               "mean_net_return": float(np.mean(bars.net)) if m else float("nan"),
               "turnover": float(np.mean(bars.turnover)) if m else float("nan"),
               "break_even_fee_bps": break_even_fee(bars.gross, bars.turnover)}
    return bars, summary


def result_arrays(result) -> dict:
    """The scoring arrays of an in-memory `tsflash.engine.FoldResult` (absent ones as None)."""
    return {k: getattr(result, k, None) for k in _CELL_ARRAYS}


def cell_arrays(stem: Path) -> dict:
    """The scoring arrays of the cell saved at `stem` (its `<stem>.npz`, written by FoldResult.save);
    arrays a cell saved before they existed are None."""
    npz = RunFolder.cell_npz(stem)
    if not npz.exists():
        raise UserError(
            f"re-scoring needs the per-bar cell files (cells/**/*.npz); {npz} is missing "
            "(a published run does not commit them): rerun the sweep to make them"
        )
    with np.load(npz) as z:
        return {k: (z[k] if k in z.files else None) for k in _CELL_ARRAYS}


def cell_scored(stem: Path, fee_bps: float, strategy: Strategy = ONE_BAR) -> tuple[BarReturns, dict]:
    """`scored_arrays` of the cell saved at `stem`."""
    return scored_arrays(cell_arrays(stem), strategy, fee_bps, where=str(RunFolder.cell_npz(stem)))


def cell_returns(stem: Path, fee_bps: float, strategy: Strategy = ONE_BAR) -> BarReturns:
    """Per-bar returns of the cell saved at `stem` under `strategy` at `fee_bps`."""
    return cell_scored(stem, fee_bps, strategy)[0]


def seed_portfolio(per_seed: list[BarReturns]) -> BarReturns:
    """Several seeds of one (configuration, fold): an equal-weight portfolio of their strategies,
    summed in the order given (the config's seeds), so a run re-scored at its own fee gives its
    daily series bit for bit. Each seed pays its own fees (turnover is the seeds' mean)."""
    if not per_seed:
        raise UserError("seed_portfolio: needs at least one seed's returns, got 0")
    times, net, gross, turn = per_seed[0]
    for other in per_seed[1:]:
        assert np.array_equal(other.times, times), "seeds scored different test bars"
        net, gross, turn = net + other.net, gross + other.gross, turn + other.turnover
    k = len(per_seed)
    return BarReturns(times, net / k, gross / k, turn / k)


def daily_series(parts: list[BarReturns]) -> dict:
    """Per-fold per-bar paths, concatenated in time order and compounded to UTC-daily returns:
    {"days": datetime64[D] (D,), "net": (D,), "gross": (D,)}."""
    parts = sorted(parts, key=lambda p: int(p.times[0]) if len(p.times) else 0)
    t = np.concatenate([p.times for p in parts])
    days, net = daily_returns(t, np.concatenate([p.net for p in parts]))
    _, gross = daily_returns(t, np.concatenate([p.gross for p in parts]))
    return {"days": days, "net": net, "gross": gross}


def path_summary(parts: list[BarReturns]) -> dict:
    """Per-bar means over several folds' paths: gross, net, turnover, bar count, break-even fee."""
    gross = np.concatenate([p.gross for p in parts]) if parts else np.empty(0)
    net = np.concatenate([p.net for p in parts]) if parts else np.empty(0)
    turn = np.concatenate([p.turnover for p in parts]) if parts else np.empty(0)
    m = len(gross)
    nan = float("nan")
    return {"mean_gross_return": float(gross.mean()) if m else nan, "mean_net_return": float(net.mean()) if m else nan,
            "turnover": float(turn.mean()) if m else nan, "n_bars": m, "break_even_fee_bps": break_even_fee(gross, turn)}


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


def series_from_cells(folder: RunFolder, name: str, n_folds: int, seeds: list[int], fee_bps: float,
                      strategy: Strategy | None = None) -> dict:
    """The daily series `name` (a trial key or baseline-<name>) re-scored at `fee_bps` from its
    per-bar cells, under `strategy` (default: the run's own, from its config.json); the cells'
    .npz files must be present (they are not in a published run)."""
    if strategy is None:
        strategy = Strategy.from_config(read_json(folder.config_json))
    if is_baseline(name):
        base = name.removeprefix(BASELINE_PREFIX)
        parts = [cell_returns(folder.baseline_stem(k, base), fee_bps, strategy) for k in range(n_folds)]
    else:
        parts = [seed_portfolio([cell_returns(folder.cell_stem(name, k, s), fee_bps, strategy) for s in seeds])
                 for k in range(n_folds)]
    return daily_series(parts)


# ---------------------------------------------------------------------------------------------
# Per-day loss sums of the forecasts: what question 1's paired tests need, kept small


ENSEMBLE = "ensemble"  # member name of a configuration's seed ensemble (and of a baseline's one forecast)
LOSS_KEYS = ("series", "member", "fold", "day")  # the key columns of a loss table; then DAILY_SUMS


def fold_losses(name: str, fold: int, forecasts: list[Mapping], members: list[str] | None = None) -> dict:
    """The loss table of one series on one fold: per UTC day, `tsflash.metrics.daily_loss_sums`.

    forecasts : the fold's cell arrays (test_time, y_true, y_prob), one per member; all score the
        same bars. With `members` (e.g. ["seed0", "seed1"], one per forecast) each member gets its
        rows and the seed ensemble (the mean of their probabilities per bar) gets ENSEMBLE rows;
        without, the one forecast is the ENSEMBLE. Probabilities are read at their stored float16
        precision, so a fresh cell and a reloaded one give the same sums.
    Returns {column: (R,) array}: series and member (str), fold (int64), day (datetime64[D]) and
    the float64 DAILY_SUMS.
    """
    probs = [stored(f["y_prob"]) for f in forecasts]
    t, y = forecasts[0]["test_time"], forecasts[0]["y_true"]
    labelled = list(zip(members, probs)) if members else []
    labelled.append((ENSEMBLE, np.mean(probs, axis=0)))  # (M, 3)
    parts = []
    for member, p in labelled:
        sums = daily_loss_sums(t, y, p)
        d = len(sums["days"])
        parts.append({"series": np.full(d, name), "member": np.full(d, member), "fold": np.full(d, fold, np.int64),
                      "day": sums["days"]} | {k: sums[k] for k in DAILY_SUMS})
    return concat_losses(parts)


def concat_losses(parts: list[dict]) -> dict:
    parts = [p for p in parts if p]
    return {k: np.concatenate([p[k] for p in parts]) for k in (*LOSS_KEYS, *DAILY_SUMS)} if parts else {}


def write_losses(folder: RunFolder, name: str, table: dict) -> Path:
    path = folder.forecasts_path(name)
    arrays = {k: np.asarray(table[k]).astype(str) for k in ("series", "member")}
    arrays |= {"fold": table["fold"], "day": table["day"].astype("datetime64[D]").astype(np.int64)}
    arrays |= {k: table[k] for k in DAILY_SUMS}
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
        np.savez(fh, **arrays)
    return path


def read_losses(folder: RunFolder, name: str) -> dict | None:
    """The loss table `write_losses` wrote for `name`, or None when there is none."""
    path = folder.forecasts_path(name)
    if not path.exists():
        return None
    with np.load(path) as z:
        out = {k: z[k].astype(object) for k in ("series", "member")}
        out |= {"fold": z["fold"].astype(np.int64), "day": z["day"].astype("datetime64[D]")}
        return out | {k: z[k].astype(np.float64) for k in DAILY_SUMS}


def baseline_losses(folder: RunFolder, base: str, n_folds: int) -> dict:
    """The loss table of baseline `base` from its per-fold cells (their .npz must be present)."""
    return concat_losses([fold_losses(BASELINE_PREFIX + base, k, [cell_arrays(folder.baseline_stem(k, base))])
                          for k in range(n_folds)])
