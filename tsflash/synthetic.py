"""Synthetic bars for the noise control: a seeded geometric random walk with realistic columns.

`tsflash sweep --data synthetic:random-walk[:SEED]` runs the whole pipeline on bars whose
direction is unpredictable by construction, so that a sweep on them must NOT pass the selection
gates (DSR >= 0.95 and PBO <= 0.5) more often than the gates' nominal rate. Whatever a model
"learns" there is noise or leakage, which is the point of the control.

What is realistic, so that the pipeline is exercised like on real data:
    - close follows exp(cumsum(r)) with zero-mean Student-t(4) log returns (heavy tails) whose
      scale has an intraday profile and slowly varying daily regimes (volatility clustering):
      the *size* of moves is partly forecastable, their *sign* is not;
    - open = previous close; high/low wrap open and close; volume is log-normal and larger on
      big moves; trades ~ Poisson(volume); taker_buy_base is a Beta share of volume;
    - open_time sits on the interval grid, with a few gaps (missing bars) like the exchange's
      outages, so gap handling runs too.

Everything is vectorised over bars; only the daily regime (a few thousand days at most) is a
Python-level recursion.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from tsflash.errors import UserError
from tsflash.intervals import INTERVAL_US, bars_per_day

SOURCE_PREFIX = "synthetic:"
KNOWN_SOURCES = ("random-walk",)


def _start_us(start: str | datetime) -> int:
    if isinstance(start, str):
        start = datetime.fromisoformat(start)
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    return int(start.timestamp() * 1_000_000)


def random_walk_bars(
    n_bars: int,
    seed: int = 0,
    start: str | datetime = "2021-01-01",
    interval: str = "1m",
    symbol: str = "BTCUSDT",
    start_price: float = 30_000.0,
    daily_vol: float = 0.03,
    n_gaps: int = 3,
):
    """A seeded geometric random walk of exactly `n_bars` bars as `tsflash.store.Bars`.

    Args:
        n_bars: number of bars returned (gaps push the last bar later, they do not drop bars).
        seed: numpy Generator seed; the same seed gives identical bars.
        start: open time of the first bar (UTC; a naive datetime or ISO date is taken as UTC).
        interval: bar interval, a key of `tsflash.intervals.INTERVAL_US` ("1m").
        daily_vol: typical standard deviation of the daily log return (0.03 ~ BTC).
        n_gaps: number of gaps, each 5 to 120 missing bars, placed away from the edges.

    The log return of bar t is sigma_t * e_t with e_t ~ Student-t(4) scaled to unit variance,
    sigma_t = daily_vol / sqrt(bars_per_day) * regime[day(t)] * intraday(t). E[r_t | past] = 0.
    """
    from tsflash.store import Bars  # lazy: the store pulls in pyarrow

    if n_bars < 2:
        raise ValueError(f"random_walk_bars: n_bars must be >= 2, got {n_bars}")
    if interval not in INTERVAL_US:
        raise ValueError(f"random_walk_bars: unknown interval {interval!r}; known: {', '.join(INTERVAL_US)}")
    rng = np.random.default_rng(seed)
    step_us = INTERVAL_US[interval]
    per_day = bars_per_day(step_us)

    # Grid with a few gaps: bar i sits at grid offset i + (missing bars before it).
    shift = np.zeros(n_bars, dtype=np.int64)
    n_gaps = n_gaps if n_bars >= 100 else 0
    if n_gaps:
        where = np.sort(rng.choice(np.arange(n_bars // 10, 9 * n_bars // 10), size=n_gaps, replace=False))
        shift[where] = rng.integers(5, 121, size=n_gaps)
    offsets = np.arange(n_bars, dtype=np.int64) + np.cumsum(shift)
    open_time = _start_us(start) + offsets * step_us  # int64 us

    # Volatility: slow daily regime (AR(1) in log, per day: few iterations) times an intraday profile.
    day = offsets // per_day
    n_days = int(day[-1]) + 1
    log_regime = np.empty(n_days)
    shocks = rng.normal(0.0, 0.15, n_days)
    level = 0.0
    for d in range(n_days):  # loop over days, not bars
        level = 0.97 * level + shocks[d]
        log_regime[d] = level
    minute_of_day = (offsets % per_day) / per_day
    intraday = 1.0 + 0.35 * np.cos(2 * np.pi * (minute_of_day - 0.6))
    sigma = daily_vol / np.sqrt(per_day) * np.exp(log_regime[day]) * intraday  # (n_bars,)

    df = 4.0
    e = rng.standard_t(df, n_bars) / np.sqrt(df / (df - 2))  # unit variance, zero mean
    r = sigma * e
    close = start_price * np.exp(np.cumsum(r))
    open_ = np.concatenate([[start_price], close[:-1]])
    wick = np.abs(rng.normal(0.0, 0.5, (2, n_bars))) * sigma
    high = np.maximum(open_, close) * np.exp(wick[0])
    low = np.minimum(open_, close) * np.exp(-wick[1])

    # Volume grows with the move's size relative to its scale; some bars are empty, as in 2017-18.
    volume = np.exp(rng.normal(np.log(20.0), 0.6, n_bars)) * (1.0 + np.abs(e))
    volume[rng.random(n_bars) < 0.002] = 0.0
    trades = rng.poisson(volume * 25.0).astype(np.int64)
    volume[trades == 0] = 0.0
    taker_buy_base = volume * rng.beta(5.0, 5.0, n_bars)

    return Bars(
        open_time=open_time,
        open=open_,
        high=high,
        low=low,
        close=close,
        volume=volume,
        trades=trades,
        taker_buy_base=taker_buy_base,
        symbol=symbol,
        interval=interval,
    )


def parse_source(data: str) -> tuple[str, int | None] | None:
    """`synthetic:random-walk[:SEED]` -> ("random-walk", SEED or None); a store path -> None."""
    if not data.startswith(SOURCE_PREFIX):
        return None
    parts = data[len(SOURCE_PREFIX):].split(":")
    name = parts[0]
    if name not in KNOWN_SOURCES or len(parts) > 2:
        raise UserError(
            f"--data: synthetic sources are {', '.join(SOURCE_PREFIX + k + '[:SEED]' for k in KNOWN_SOURCES)}, got {data!r}"
        )
    if len(parts) == 2:
        try:
            return name, int(parts[1])
        except ValueError:
            raise UserError(f"--data: the synthetic seed must be an integer, got {parts[1]!r} in {data!r}") from None
    return name, None
