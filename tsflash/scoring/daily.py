"""Scoring at a fee: per-bar net returns under a trading rule, seed portfolios, daily series and
the trial's value; and the per-day loss sums of the forecasts (question 1's paired tests).
Torch-free.

Fees are applied here, at scoring time (`tsflash.scoring.metrics.apply_fees`), from what every cell
saves: its per-bar positions and gross returns under the one-bar rule, and its probabilities and
next-bar returns from which `tsflash.scoring.strategy` builds the horizon rule. Neither the fee nor the
rule is part of a run's identity: the sweep scores at its configured `eval.fee_bps` and
`eval.strategy`; `tsflash report RUN --set eval.fee_bps=...` re-scores the same cells
(`series_from_cells`) without training.

The sweep scores a trial fold by fold (`score_fold`): as soon as every seed of a fold is saved,
the fold's daily seed-portfolio path and loss table go to a small fold file
(`write_fold_scores`), and the trial's daily series and loss table are joined from those
(`daily_series_of_folds`, bit for bit what `daily_series` gives on the per-bar paths). The fold
files survive where the per-bar cells (about 10 MB each) do not, e.g. a device's state archive.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tsflash import atomic
from tsflash.errors import UserError
from tsflash.runfolder import BASELINE_PREFIX, RunFolder, is_baseline, load_npz, read_json
from tsflash.scoring.days import daily_returns, day_growth, day_runs, utc_days
from tsflash.scoring.metrics import DAILY_SUMS, apply_fees, daily_loss_sums
from tsflash.scoring.strategy import Strategy, break_even_fee, horizon_path, stored, turnover
from tsflash.stats import SelectionInputError
from tsflash.stats.sharpe import sharpe

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
    return BarReturns(
        np.asarray(test_time, dtype=np.int64), apply_fees(position, gross, fee_bps), gross, turnover(position)
    )


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
            raise UserError(
                f"{where} has no per-bar next returns (saved before the horizon strategy existed): "
                "score it with eval.strategy=one-bar, or rerun the sweep"
            )
        position, gross, tau, source = horizon_path(
            strategy, arrays["y_prob"], arrays["next_ret"], fee_bps, arrays.get("val_prob"), arrays.get("val_next_ret")
        )
    bars = bar_returns(arrays["test_time"], position, gross, fee_bps)
    m = len(bars.gross)
    summary = {
        "strategy": strategy.kind,
        "threshold": float(tau),
        "threshold_source": source,
        "n_bars": m,
        "mean_gross_return": float(np.mean(bars.gross)) if m else float("nan"),
        "mean_net_return": float(np.mean(bars.net)) if m else float("nan"),
        "turnover": float(np.mean(bars.turnover)) if m else float("nan"),
        "break_even_fee_bps": break_even_fee(bars.gross, bars.turnover),
    }
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
    with load_npz(npz) as z:
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
    return {
        "mean_gross_return": float(gross.mean()) if m else nan,
        "mean_net_return": float(net.mean()) if m else nan,
        "turnover": float(turn.mean()) if m else nan,
        "n_bars": m,
        "break_even_fee_bps": break_even_fee(gross, turn),
    }


def daily_sharpe(daily_net: np.ndarray) -> float:
    """Sharpe ratio of daily net returns; NaN when undefined (under 2 days, constant)."""
    try:
        return float(sharpe(daily_net))
    except SelectionInputError:
        return float("nan")


# ---------------------------------------------------------------------------------------------
# One fold of a trial, scored on its own: what the trial's series needs of it, kept small


class FoldDaily(NamedTuple):
    """One fold's per-bar path (a seed portfolio) compounded per UTC day, with what joining it to
    the neighbouring folds needs (a UTC day may be split between two folds' test bars).

    days (D,) datetime64[D]; net, gross (D,): the daily returns of this fold's bars alone
    (`tsflash.scoring.days.daily_returns`); growth (2,): prod(1 + r) of net and gross over its bars of
    its last day; head_net, head_gross (F,): the per-bar returns of its bars of its first day;
    start: its first bar time (us), which orders the folds.
    """

    days: np.ndarray
    net: np.ndarray
    gross: np.ndarray
    growth: np.ndarray
    head_net: np.ndarray
    head_gross: np.ndarray
    start: int


def fold_daily(bars: BarReturns) -> FoldDaily:
    """The FoldDaily of one fold's per-bar path."""
    t = np.asarray(bars.times, dtype=np.int64)
    net, gross = (np.asarray(r, dtype=np.float64) for r in (bars.net, bars.gross))
    if not len(t):
        return FoldDaily(np.empty(0, "datetime64[D]"), net, gross, np.ones(2), net, gross, 0)
    days, daily_net = daily_returns(t, net)
    _, daily_gross = daily_returns(t, gross)
    head = utc_days(t) == utc_days(t[:1])  # its bars of its first day
    runs = day_runs(t)
    growth = np.array([day_growth(runs, net)[-1], day_growth(runs, gross)[-1]])
    return FoldDaily(days, daily_net, daily_gross, growth, net[head], gross[head], int(t[0]))


def daily_series_of_folds(folds: list[FoldDaily]) -> dict:
    """`daily_series` of the folds' paths, bit for bit, from their FoldDaily: a UTC day split
    between two folds compounds on from the earlier fold's product over the later fold's bars of
    that day, in the order `daily_series` multiplies them (one sequential product per day)."""
    days: list[np.datetime64] = []
    net: list[np.float64] = []
    gross: list[np.float64] = []
    growth: np.ndarray | list[np.float64] | None = None  # prod(1 + r) of net and gross of the last day so far
    for f in sorted((f for f in folds if len(f.days)), key=lambda f: f.start):
        d, n, g = list(f.days), list(f.net), list(f.gross)
        if days and days[-1] == d[0]:  # the previous fold ended inside this fold's first day
            assert growth is not None  # set with the previous fold's days
            joined = [
                np.multiply.reduceat(np.r_[growth[i], 1.0 + head], [0])[0]
                for i, head in enumerate((f.head_net, f.head_gross))
            ]
            net[-1], gross[-1] = joined[0] - 1.0, joined[1] - 1.0
            growth = joined if len(d) == 1 else f.growth
            d, n, g = d[1:], n[1:], g[1:]
        else:
            growth = f.growth
        days, net, gross = days + d, net + n, gross + g
    return {
        "days": np.array(days, dtype="datetime64[D]"),
        "net": np.array(net, dtype=np.float64),
        "gross": np.array(gross, dtype=np.float64),
    }


class FoldScores(NamedTuple):
    """One fold of a configuration scored: its seed portfolio's FoldDaily, its loss table
    (`fold_losses`) and the scoring it was made under (`scoring_id`)."""

    daily: FoldDaily
    losses: dict
    scoring: str


def scoring_id(strategy: Strategy, fee_bps: float) -> str:
    """The fee and trading rule a score was made under, as one string."""
    return json.dumps({"fee_bps": float(fee_bps), **dataclasses.asdict(strategy)}, sort_keys=True)


def score_fold(
    name: str, fold: int, forecasts: list[Mapping], members: list[str], strategy: Strategy, fee_bps: float
) -> FoldScores:
    """Fold `fold` of configuration `name` scored from its seeds' cell arrays (`cell_arrays`, in
    the config's seed order, named by `members`): the seed portfolio under `strategy` at `fee_bps`
    and the loss table of each seed and of their ensemble."""
    portfolio = seed_portfolio([scored_arrays(a, strategy, fee_bps)[0] for a in forecasts])
    return FoldScores(fold_daily(portfolio), fold_losses(name, fold, forecasts, members), scoring_id(strategy, fee_bps))


_LOSS = "loss_"  # prefix of the loss table's arrays in a fold file


def write_fold_scores(folder: RunFolder, key: str, fold: int, scores: FoldScores) -> Path:
    """Atomically write `scores` to folder.fold_scores_path(key, fold). Idempotent: workers that
    score the same fold at once write the same arrays, and the last rename wins."""
    d = scores.daily
    arrays = {
        "days": d.days.astype("datetime64[D]").astype(np.int64),
        "net": d.net,
        "gross": d.gross,
        "growth": d.growth,
        "head_net": d.head_net,
        "head_gross": d.head_gross,
        "start": np.int64(d.start),
        "scoring": np.str_(scores.scoring),
    }
    arrays |= {_LOSS + k: v for k, v in _loss_arrays(scores.losses).items()}
    return _save_npz(folder.fold_scores_path(key, fold), arrays, compressed=True)  # they travel: keep them small


def read_fold_scores(folder: RunFolder, key: str, fold: int) -> FoldScores | None:
    """The FoldScores `write_fold_scores` wrote for (key, fold), or None when there are none."""
    path = folder.fold_scores_path(key, fold)
    if not path.exists():
        return None
    with load_npz(path) as z:
        daily = FoldDaily(
            z["days"].astype("datetime64[D]"),
            z["net"],
            z["gross"],
            z["growth"],
            z["head_net"],
            z["head_gross"],
            int(z["start"]),
        )
        losses = _loss_table({k.removeprefix(_LOSS): z[k] for k in z.files if k.startswith(_LOSS)})
        return FoldScores(daily, losses, str(z["scoring"]))


def objective_value(daily_net: np.ndarray) -> float:
    """A trial's value: its daily net Sharpe ratio; 0 for a strategy that never trades (no Sharpe)."""
    try:
        return float(sharpe(daily_net))
    except SelectionInputError:
        return 0.0


def series_from_cells(
    folder: RunFolder, name: str, n_folds: int, seeds: list[int], fee_bps: float, strategy: Strategy | None = None
) -> dict:
    """The daily series `name` (a trial key or baseline-<name>) re-scored at `fee_bps` from its
    per-bar cells, under `strategy` (default: the run's own, from its config.json); the cells'
    .npz files must be present (they are not in a published run)."""
    if strategy is None:
        strategy = Strategy.from_config(read_json(folder.config_json))
    if is_baseline(name):
        base = name.removeprefix(BASELINE_PREFIX)
        parts = [cell_returns(folder.baseline_stem(k, base), fee_bps, strategy) for k in range(n_folds)]
    else:
        parts = [
            seed_portfolio([cell_returns(folder.cell_stem(name, k, s), fee_bps, strategy) for s in seeds])
            for k in range(n_folds)
        ]
    return daily_series(parts)


# ---------------------------------------------------------------------------------------------
# Per-day loss sums of the forecasts: what question 1's paired tests need, kept small


ENSEMBLE = "ensemble"  # member name of a configuration's seed ensemble (and of a baseline's one forecast)
LOSS_KEYS = ("series", "member", "fold", "day")  # the key columns of a loss table; then DAILY_SUMS


def fold_losses(name: str, fold: int, forecasts: list[Mapping], members: list[str] | None = None) -> dict:
    """The loss table of one series on one fold: per UTC day, `tsflash.scoring.metrics.daily_loss_sums`.

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
    labelled = list(zip(members, probs, strict=True)) if members else []
    labelled.append((ENSEMBLE, np.mean(probs, axis=0)))  # (M, 3)
    parts = []
    for member, p in labelled:
        sums = daily_loss_sums(t, y, p)
        d = len(sums["days"])
        parts.append(
            {
                "series": np.full(d, name),
                "member": np.full(d, member),
                "fold": np.full(d, fold, np.int64),
                "day": sums["days"],
            }
            | {k: sums[k] for k in DAILY_SUMS}
        )
    return concat_losses(parts)


def concat_losses(parts: list[dict]) -> dict:
    parts = [p for p in parts if p]
    return {k: np.concatenate([p[k] for p in parts]) for k in (*LOSS_KEYS, *DAILY_SUMS)} if parts else {}


def _loss_arrays(table: dict) -> dict:
    """A loss table as the arrays it is stored as (strings, days as int64 days since 1970)."""
    arrays = {k: np.asarray(table[k]).astype(str) for k in ("series", "member")}
    arrays |= {"fold": table["fold"], "day": table["day"].astype("datetime64[D]").astype(np.int64)}
    return arrays | {k: table[k] for k in DAILY_SUMS}


def _loss_table(arrays: Mapping) -> dict:
    """Inverse of `_loss_arrays`."""
    out = {k: arrays[k].astype(object) for k in ("series", "member")}
    out |= {"fold": arrays["fold"].astype(np.int64), "day": arrays["day"].astype("datetime64[D]")}
    return out | {k: arrays[k].astype(np.float64) for k in DAILY_SUMS}


def _save_npz(path: Path, arrays: dict, compressed: bool = False) -> Path:
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
        (np.savez_compressed if compressed else np.savez)(fh, **arrays)
    return path


def write_losses(folder: RunFolder, name: str, table: dict) -> Path:
    return _save_npz(folder.forecasts_path(name), _loss_arrays(table))


def read_losses(folder: RunFolder, name: str) -> dict | None:
    """The loss table `write_losses` wrote for `name`, or None when there is none."""
    path = folder.forecasts_path(name)
    if not path.exists():
        return None
    with load_npz(path) as z:
        return _loss_table(z)


def baseline_losses(folder: RunFolder, base: str, n_folds: int) -> dict:
    """The loss table of baseline `base` from its per-fold cells (their .npz must be present)."""
    return concat_losses(
        [fold_losses(BASELINE_PREFIX + base, k, [cell_arrays(folder.baseline_stem(k, base))]) for k in range(n_folds)]
    )
