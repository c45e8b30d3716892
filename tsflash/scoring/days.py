"""UTC days of bar times: the one home for "which UTC day is this bar in" (`utc_days`) and for
grouping increasing bar times by it (`day_runs`, then sums or compounded products per day:
`day_sums`, `day_growth`), and the compounded daily returns every statistic of `tsflash.stats`
is applied to (`daily_returns`, whose docstring says why daily). Times are int64 microseconds
since the Unix epoch, UTC.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tsflash.intervals import US_PER_DAY
from tsflash.stats._inputs import SelectionInputError, returns_array  # daily returns are the statistics' input


def utc_days(times_us) -> np.ndarray:
    """int64 (M,): the UTC day of each time, in days since 1970-01-01 (floor division, so a time
    before 1970 falls on its own day too)."""
    return np.floor_divide(np.asarray(times_us, dtype=np.int64), US_PER_DAY)


class DayRuns(NamedTuple):
    """Increasing bar times cut into their UTC days: days datetime64[D] (D,), the days with at
    least one bar, increasing; starts int64 (D,), the index of each day's first bar."""

    days: np.ndarray
    starts: np.ndarray


def day_runs(times_us) -> DayRuns:
    """The UTC days of increasing (or at least day-ordered) bar times and where each day begins."""
    day = utc_days(times_us)
    if not len(day):
        return DayRuns(np.empty(0, "datetime64[D]"), np.empty(0, np.int64))
    starts = np.flatnonzero(np.r_[True, day[1:] != day[:-1]])  # (D,)
    return DayRuns(day[starts].astype("datetime64[D]"), starts)


def day_sums(runs: DayRuns, x: np.ndarray) -> np.ndarray:
    """(D,): the sum of `x` (M,) over each day's bars."""
    return np.add.reduceat(x, runs.starts) if len(runs.starts) else np.empty(0)


def day_growth(runs: DayRuns, r: np.ndarray) -> np.ndarray:
    """(D,): prod(1 + r) over each day's bars of the per-bar returns `r` (M,), multiplied in bar order."""
    return np.multiply.reduceat(1.0 + r, runs.starts) if len(runs.starts) else np.empty(0)


def daily_returns(times_us, per_bar_returns) -> tuple[np.ndarray, np.ndarray]:
    """Compound per-bar returns into UTC-daily returns.

    Why daily: the statistics of `tsflash.stats` assume (close to) i.i.d. returns and a Sharpe
    ratio estimated from T of them. Minute returns of a strategy are neither: positions held over
    a multi-bar horizon make consecutive bar returns strongly autocorrelated, microstructure
    (bid-ask bounce, fee bursts at position changes) and volatility clustering make them
    heavy-tailed and heteroskedastic, and with T in the millions the sqrt(T - 1) in PSR/DSR turns
    any tiny edge (or any small dependence the formulas ignore) into "significance". Daily
    returns are much closer to independent, their moments are estimable, and T (hundreds to a
    few thousand days) matches the information actually in the sample. CSCV blocks of days are
    also long enough for serial dependence not to leak across block edges. So the sweep applies
    every statistic to daily NET returns, with Sharpe ratios per day (annualise with 365:
    BTC trades every day).

    Parameters
    ----------
    times_us : int64 array of shape (M,)
        Bar times in microseconds since the Unix epoch (UTC), strictly increasing. The day of a
        bar is the UTC day of this time (use the bar's open time consistently).
    per_bar_returns : float array of shape (M,)
        Simple (not log) returns of each bar.

    Returns
    -------
    days : datetime64[D] array of shape (D,)
        The UTC days that have at least one bar, increasing (days without bars are absent, not 0).
    returns : float64 array of shape (D,)
        prod(1 + r) - 1 over each day's bars.
    """
    t = np.asarray(times_us)
    if t.ndim != 1 or not np.issubdtype(t.dtype, np.integer):
        raise SelectionInputError(
            f"times_us must be a 1-D integer array (microseconds UTC), got dtype {t.dtype}, shape {t.shape}"
        )
    r = np.asarray(per_bar_returns, dtype=np.float64)
    if r.shape != t.shape:
        raise SelectionInputError(
            f"times_us and per_bar_returns must have the same length, got {t.shape[0]} and {r.shape}"
        )
    if t.size == 0:
        raise SelectionInputError("daily_returns needs at least one bar, got 0")
    r = returns_array(r, name="per_bar_returns", min_len=1)
    t = t.astype(np.int64)
    steps = np.diff(t)
    if np.any(steps <= 0):
        i = int(np.flatnonzero(steps <= 0)[0])
        raise SelectionInputError(
            f"times_us must be strictly increasing, got {int(t[i])} then {int(t[i + 1])} at index {i}"
        )
    runs = day_runs(t)
    return runs.days, day_growth(runs, r) - 1.0
