"""Synthetic bars for the controls: a seeded random walk (noise), an iid null, and two markets with
a planted far-context signal (a one-week echo; a slow hidden regime), with their oracles.

`tsflash sweep --data synthetic:NAME[:SEED][:KEY=VALUE,...]` runs the whole pipeline on seeded
bars with the same bar count as the configured range:

random-walk (the noise control)
    The direction of every move is unpredictable by construction, so a sweep on it must NOT pass
    the selection gates (DSR >= 0.95 and PBO <= 0.5) more often than their nominal rate, and no
    context length may beat another. Whatever a model "learns" there is noise or leakage.

iid (the clean null, `iid_bars`)
    Independent, identically distributed returns: one constant scale, no daily regimes and no
    intraday profile, so neither the direction nor the size of a move is predictable from any
    context. The random walk's volatility regimes (an AR(1) in log with daily persistence 0.97)
    are information a far context can carry for the log-loss; here there is none at all.

long-memory (the positive control, `long_memory_bars`)
    A fixed-lag echo: the drift of every 1-minute return is tilted by the move over a short window
    that ended `lag` bars earlier (default one week, 10080 bars, far beyond a 4096-bar context).
    A model whose context reaches back that far can predict the sign of the 15-bar forward return
    better than chance; a shorter context sees nothing of it. Parameters: `LongMemory`.

regime (the positive control of realistic size, `regime_bars`)
    A hidden state that lasts four weeks on average (a Markov chain) tilts the drift of every
    return by a small fraction of its volatility. A window of N bars estimates the state the
    better the longer it is, so the information grows with N, to a direction gain of about
    0.0009 nats per moved bar at N = 32768 (the scale of BTC's own direction skill). The oracle
    (`regime_oracle`) states what the true state and what each N's window hold. Parameters: `Regime`.

What is realistic in all of them, so that the pipeline is exercised like on real data:
    - close follows exp(cumsum(r)) with zero-mean Student-t(4) log return innovations (heavy
      tails) whose scale has an intraday profile and slowly varying daily regimes (iid: one constant scale); the
      long-memory and regime markets add GARCH(1,1) volatility clustering minute to minute;
    - open = previous close; high/low wrap open and close; volume is log-normal and larger on
      big moves; trades ~ Poisson(volume); taker_buy_base is a Beta share of volume;
    - open_time sits on the interval grid, with a few gaps (missing bars) like the exchange's
      outages, so gap handling runs too.

Everything is vectorised over bars; only short recursions (days, GARCH chunks, echo lags, the
regime filter's window steps) are Python-level loops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tsflash.errors import UserError
from tsflash.intervals import INTERVAL_US, bars_per_day

if TYPE_CHECKING:  # at run time imported where bars are built: the store pulls in pyarrow
    from tsflash.data.store import Bars

SOURCE_PREFIX = "synthetic:"
KNOWN_SOURCES = ("random-walk", "iid", "long-memory", "regime")
SOURCE_FORMS = {
    "random-walk": "[:SEED]",
    "iid": "[:SEED]",
    "long-memory": "[:SEED][:KEY=VALUE,...]",
    "regime": "[:SEED][:KEY=VALUE,...]",
}
T_DF = 4.0  # Student-t degrees of freedom of the return innovations


def _start_us(start: str | datetime) -> int:
    if isinstance(start, str):
        start = datetime.fromisoformat(start)
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return int(start.timestamp() * 1_000_000)


def _check_shape(n_bars: int, interval: str, who: str) -> None:
    if n_bars < 2:
        raise ValueError(f"{who}: n_bars must be >= 2, got {n_bars}")
    if interval not in INTERVAL_US:
        raise ValueError(f"{who}: unknown interval {interval!r}; known: {', '.join(INTERVAL_US)}")


def _grid(rng: np.random.Generator, n_bars: int, n_gaps: int, start, step_us: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, open_time): grid slot of each bar and its open time (int64 us), with a few gaps.

    Bar i sits at grid offset i + (missing bars before it); each gap is 5 to 120 missing bars,
    placed away from the edges.
    """
    shift = np.zeros(n_bars, dtype=np.int64)
    n_gaps = n_gaps if n_bars >= 100 else 0
    if n_gaps:
        where = np.sort(rng.choice(np.arange(n_bars // 10, 9 * n_bars // 10), size=n_gaps, replace=False))
        shift[where] = rng.integers(5, 121, size=n_gaps)
    offsets = np.arange(n_bars, dtype=np.int64) + np.cumsum(shift)
    return offsets, _start_us(start) + offsets * step_us


def _base_sigma(rng: np.random.Generator, slots: np.ndarray, per_day: int, daily_vol: float) -> np.ndarray:
    """Return scale at grid `slots`: slow daily regime (AR(1) in log, per day) times an intraday profile."""
    day = slots // per_day
    n_days = int(day[-1]) + 1
    log_regime = np.empty(n_days)
    shocks = rng.normal(0.0, 0.15, n_days)
    level = 0.0
    for d in range(n_days):  # loop over days, not bars
        level = 0.97 * level + shocks[d]
        log_regime[d] = level
    minute_of_day = (slots % per_day) / per_day
    intraday = 1.0 + 0.35 * np.cos(2 * np.pi * (minute_of_day - 0.6))
    return daily_vol / np.sqrt(per_day) * np.exp(log_regime[day]) * intraday  # (len(slots),)


def _innovations(rng: np.random.Generator, n: int) -> np.ndarray:
    """Student-t(T_DF) draws scaled to unit variance, zero mean: (n,)."""
    return rng.standard_t(T_DF, n) / np.sqrt(T_DF / (T_DF - 2))


def _bars_from_returns(
    rng: np.random.Generator,
    r: np.ndarray,
    e: np.ndarray,
    sigma: np.ndarray,
    open_time: np.ndarray,
    start_price: float,
    symbol: str,
    interval: str,
    share_rng: np.random.Generator | None = None,
):
    """Realistic OHLCV columns around log returns r (n,), given each bar's innovation e and scale sigma.

    Bar t's columns use r[:t+1], e[:t+1], sigma[:t+1] and draws made bar by bar in order. Except
    with share_rng=None: the taker shares are then drawn from `rng` after the Poisson trade
    counts, whose number of underlying draws depends on every bar's volume, so bar t's share
    depends (as noise, not information) on later bars. The random walk keeps that order so that
    its published bars stay the same; the long-memory market passes a stream of its own.
    """
    from tsflash.data.store import Bars  # lazy: the store pulls in pyarrow

    n_bars = len(r)
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
    taker_buy_base = volume * (share_rng or rng).beta(5.0, 5.0, n_bars)
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


@dataclass(frozen=True)
class Market:
    """Where the synthetic bars sit and how big their moves are (`long_memory_bars`; the random
    walk takes the same values as arguments of its own)."""

    start: str | datetime = "2021-01-01"  # open time of the first bar (UTC; naive or a date = UTC)
    interval: str = "1m"  # a key of tsflash.intervals.INTERVAL_US
    symbol: str = "BTCUSDT"
    start_price: float = 30_000.0
    daily_vol: float = 0.03  # typical standard deviation of the daily log return (0.03 ~ BTC)
    n_gaps: int = 3  # gaps of 5 to 120 missing bars each, away from the edges


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
    """A seeded geometric random walk of exactly `n_bars` bars as `tsflash.data.store.Bars`.

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
    _check_shape(n_bars, interval, "random_walk_bars")
    rng = np.random.default_rng(seed)
    step_us = INTERVAL_US[interval]
    offsets, open_time = _grid(rng, n_bars, n_gaps, start, step_us)
    sigma = _base_sigma(rng, offsets, bars_per_day(step_us), daily_vol)  # (n_bars,)
    e = _innovations(rng, n_bars)
    return _bars_from_returns(rng, sigma * e, e, sigma, open_time, start_price, symbol, interval)


def iid_bars(
    n_bars: int,
    seed: int = 0,
    start: str | datetime = "2021-01-01",
    interval: str = "1m",
    symbol: str = "BTCUSDT",
    start_price: float = 30_000.0,
    daily_vol: float = 0.03,
    n_gaps: int = 3,
):
    """Like `random_walk_bars`, but the log return of bar t is sigma * e_t with one constant
    sigma = daily_vol / sqrt(bars_per_day): iid returns, the clean null (nothing to forecast, not
    even the size of a move)."""
    _check_shape(n_bars, interval, "iid_bars")
    rng = np.random.default_rng(seed)
    step_us = INTERVAL_US[interval]
    _, open_time = _grid(rng, n_bars, n_gaps, start, step_us)
    sigma = np.full(n_bars, daily_vol / np.sqrt(bars_per_day(step_us)))
    e = _innovations(rng, n_bars)
    return _bars_from_returns(rng, sigma * e, e, sigma, open_time, start_price, symbol, interval)


# ---------------------------------------------------------------------------------------------
# The long-memory market (positive control)


def found_bar(oracle_hit_rate: float) -> float:
    """The direction hit rate at which a model has found a planted effect: half-way from a coin
    flip (0.5) to the oracle's (the sign of the planted drift), as the controls count them."""
    return 0.5 + (oracle_hit_rate - 0.5) / 2


@dataclass(frozen=True)
class LongMemory:
    """Parameters of `long_memory_bars` (each can be set in the source string, e.g.
    `synthetic:long-memory:3:lag=96,strength=0.2` for a scaled-down test market).

    The planted effect at the defaults, measured by the oracle in tests/data/test_synthetic.py on 2.4M
    bars (the default range) and the 15-bar forward return: on the bars outside a flat band of a
    third, the sign of `echo_signal` predicts the sign of the forward return with a hit rate of
    0.558 (out of sample), and a logistic regression on it gains 0.0094 nats per such bar of binary
    log-loss (about 0.006 nats per labelled bar of the 3-class target); a logistic regression on
    every summary of the last 4096 bars' moves gains nothing (-0.0006 +- 0.0001). Modest: the
    planted drift over 15 bars averages 0.10 standard deviations of the 15-bar return (it is
    strength * echo_signal in units of one bar's); the log-loss gain grows about as strength^2.

    Who can see it: the forward return from bar t is tilted by the moves over bars
    t - lag - window + 2 .. t + horizon - lag, so a context of lag + window - 1 bars (10094 at the
    defaults) sees all of it and one of lag - horizon bars (10065) none: at N = 32768 every scored
    bar has more than 16384 bars of context, at N = 4096 fewer than 4097. A shorter context gets
    only a second-order trace: recent returns carry the tilts of the last few bars, whose sources
    overlap the next ones' (a share of the oracle's gain of order strength^2 * window / 3, about
    2 % at the defaults; the 4096-bar regression above finds none beyond noise).
    """

    lag: int = 10080  # bars between a move and its echo: one week of 1-minute bars (> 4096)
    window: int = 15  # bars of the echoed move (= the default label horizon)
    strength: float = 0.06  # drift per bar, in units of the bar's own volatility, at |tanh(z)| = 1
    garch_alpha: float = 0.05  # GARCH(1,1) reaction to the last squared innovation
    garch_beta: float = 0.93  # GARCH(1,1) persistence (alpha + beta < 1: a unit-mean variance)

    def check(self, where: str = "long-memory") -> LongMemory:
        if self.window < 1 or self.lag <= self.window:
            raise UserError(f"{where}: needs window >= 1 and lag > window, got lag={self.lag}, window={self.window}")
        if not 0.0 <= self.strength < 1.0:
            raise UserError(f"{where}: strength must be in [0, 1), got {self.strength}")
        _check_garch(self.garch_alpha, self.garch_beta, where)
        return self


def _check_garch(alpha: float, beta: float, where: str) -> None:
    if alpha < 0 or beta < 0 or alpha + beta >= 1:
        raise UserError(
            f"{where}: needs garch_alpha, garch_beta >= 0 and garch_alpha + garch_beta < 1, got {alpha} and {beta}"
        )


GARCH_CAP = 50.0  # squared innovations feeding the variance are capped: one t(4) outlier must not blow it up 1000x


def garch_scale(e: np.ndarray, alpha: float, beta: float, chunk: int = 256) -> np.ndarray:
    """sqrt(g_t) for the unit-mean GARCH(1,1) variance g_t = (1 - alpha - beta) + (alpha * min(e_{t-1}^2,
    GARCH_CAP) + beta) * g_{t-1}, g_0 = 1: (T,) from innovations e (T,). g_t uses e[:t] only.

    The linear recursion g_t = w + a_{t-1} g_{t-1} is solved in closed form chunk by chunk,
    g_{c+k} = P_k (g_c + w * sum_{j<=k} 1/P_j) with P_k = a_c ... a_{c+k-1}, so only T / chunk
    steps run in Python (short chunks keep P within float64 range).
    """
    a = alpha * np.minimum(e * e, GARCH_CAP) + beta  # (T,)
    w = 1.0 - alpha - beta
    g = np.empty(len(e))
    g_c = 1.0
    for c in range(0, len(e), chunk):
        seg = a[c : c + chunk]
        log_p = np.concatenate([[0.0], np.cumsum(np.log(seg[:-1]))])  # log P_0 .. log P_{len-1}
        inv = np.exp(-log_p)
        inv[0] = 0.0
        g[c : c + len(seg)] = np.exp(log_p) * (g_c + w * np.cumsum(inv))
        g_c = w + seg[-1] * g[c + len(seg) - 1]
    return np.sqrt(g)


def trailing_z(r: np.ndarray, window: int) -> np.ndarray:
    """Self-normalised move of the last `window` returns: sum(r) / sqrt(sum(r^2)) over
    r[max(0, t - window + 1) .. t] for every t: (T,) -> (T,); 0 where all of them are 0.

    Scale free (volatility regimes do not change it); about N(0, 1) for independent returns.
    """
    c1 = np.concatenate([[0.0], np.cumsum(r)])
    c2 = np.concatenate([[0.0], np.cumsum(r * r)])
    lo = np.maximum(np.arange(1, len(r) + 1) - window, 0)
    s1, s2 = c1[1:] - c1[lo], c2[1:] - c2[lo]
    return np.where(s2 > 0, s1 / np.sqrt(np.where(s2 > 0, s2, 1.0)), 0.0)


def echo_returns(sigma: np.ndarray, e: np.ndarray, p: LongMemory) -> np.ndarray:
    """Log returns with the planted echo: r_t = sigma_t * (e_t + strength * tanh(z_{t - lag})).

    z_s = trailing_z(r, window)[s] is the self-normalised move of the `window` returns ending at
    bar s (0 for s < 0). Returns are built `lag` bars at a time: a chunk's drift reads only returns
    at least `lag` bars older, which are final, so bar t depends on sigma[:t+1] and e[:t+1] only.
    """
    r = sigma * e  # (T,)
    if p.strength == 0:
        return r
    for a in range(p.lag, len(r), p.lag):  # bars before `lag` have no source
        b = min(a + p.lag, len(r))
        lo = max(0, a - p.lag - p.window + 1)
        z = trailing_z(r[lo : b - p.lag], p.window)[-(b - a) :]  # z_{a-lag} .. z_{b-1-lag}
        r[a:b] += p.strength * sigma[a:b] * np.tanh(z)
    return r


def echo_signal(log_returns: np.ndarray, p: LongMemory, horizon: int) -> np.ndarray:
    """The oracle's feature: sum over j = 1..horizon of tanh(z_{t + j - lag}), the planted drift of
    the forward return over bars t+1 .. t+horizon in units of volatility / strength: (T,) -> (T,).

    Known at bar t (it reads returns up to t + horizon - lag < t, as horizon < lag), and only from
    returns at least lag - horizon bars old. 0 where the source lies before the series.
    `log_returns`: per-slot log returns on the interval grid (see `grid_returns` for bars with gaps).
    """
    if horizon >= p.lag:
        raise UserError(f"echo_signal: horizon={horizon} must be < lag={p.lag}")
    tz = np.tanh(trailing_z(log_returns, p.window))  # (T,)
    c = np.concatenate([[0.0], np.cumsum(tz)])
    t = np.arange(len(log_returns))
    hi = np.clip(t + horizon - p.lag + 1, 0, len(log_returns))  # sources t+1-lag .. t+horizon-lag
    lo = np.clip(t + 1 - p.lag, 0, len(log_returns))
    return c[hi] - c[lo]


def grid_returns(open_time: np.ndarray, close: np.ndarray, interval_us: int) -> tuple[np.ndarray, np.ndarray]:
    """(returns on the interval grid (G,), grid slot of each bar (T,)) from bars with gaps.

    A missing slot gets 0 and the bar after a gap carries the whole move across it, so on a
    gap-free series this is just the bars' log returns (the first one log(close[0] / close[0]) = 0).
    """
    slots = (np.asarray(open_time, dtype=np.int64) - int(open_time[0])) // interval_us
    out = np.zeros(int(slots[-1]) + 1)
    out[slots[1:]] = np.diff(np.log(close))
    return out, slots


def long_memory_bars(n_bars: int, seed: int = 0, params: LongMemory | None = None, market: Market | None = None):
    """A seeded market of exactly `n_bars` bars whose direction echoes a move `params.lag` bars back.

    Args: n_bars and seed as `random_walk_bars`; params: the echo and the GARCH (`LongMemory`,
    default a one-week lag); market: start, interval, size of moves, gaps (`Market`, default BTC-like).

    On the interval grid (missing bars included: the price moves through an outage and the next
    bar carries the move), the log return of slot t is

        r_t = sigma_t * (e_t + strength * tanh(z_{t - lag})),   sigma_t = base_t * sqrt(g_t)

    with e_t ~ Student-t(4) at unit variance, base_t the random walk's scale (daily regime and
    intraday profile), g_t a unit-mean GARCH(1,1) variance driven by e (volatility clustering),
    and z_s the self-normalised move of the `window` returns ending at slot s (`trailing_z`). So
    E[r_t | past] is a fraction of the bar's volatility whose sign is the sign of a move that
    ended `lag` bars earlier; nothing within the last lag - window bars carries it. The oracle
    feature is `echo_signal`; the effect size at the defaults is in `LongMemory`'s docstring.
    """
    m, p = market or Market(), (params or LongMemory()).check()
    _check_shape(n_bars, m.interval, "long_memory_bars")
    rng = np.random.default_rng(seed)
    step_us = INTERVAL_US[m.interval]
    offsets, open_time = _grid(rng, n_bars, m.n_gaps, m.start, step_us)
    slots = np.arange(int(offsets[-1]) + 1)  # every grid slot, missing bars included
    base = _base_sigma(rng, slots, bars_per_day(step_us), m.daily_vol)  # (G,)
    e = _innovations(rng, len(slots))  # (G,)
    sigma = base * garch_scale(e, p.garch_alpha, p.garch_beta)  # (G,)
    log_close = np.cumsum(echo_returns(sigma, e, p))[offsets]  # (n_bars,)
    r = np.diff(log_close, prepend=0.0)  # bar returns; across a gap, the whole move through it
    return _bars_from_returns(
        rng, r, e[offsets], sigma[offsets], open_time, m.start_price, m.symbol, m.interval, share_rng=rng.spawn(1)[0]
    )


# ---------------------------------------------------------------------------------------------
# The regime market (a second positive control, of realistic size)


@dataclass(frozen=True)
class Regime:
    """Parameters of `regime_bars` (each settable in the source string, e.g.
    `synthetic:regime:3:duration=2000,tilt=0.05` for a scaled-down test market).

    A hidden state s_t in {-1, +1} switches as a symmetric Markov chain (probability 1 / duration
    per bar, so a regime lasts `duration` bars on average: four weeks of 1-minute bars at the
    default) and tilts the drift of every return by tilt * s_t of the bar's volatility. No bar
    tells the state; a window of N bars estimates it from the drift of its returns, the better
    the longer the window, so the information grows with N.

    The size at the defaults, measured by tests/data/test_synthetic_regime.py on 2.4M bars (the
    default range) and the 15-bar forward return, as the expected direction log-loss gain over
    the class prior per moved bar (outside the flat third; `regime_oracle`): given the true state
    0.0016 nats (hit rate 0.528); given only the last N bars (the exact filter of the chain,
    `regime_posterior`) 0.0009 at N = 32768, 0.0007 at 4096 and 0.0002 at 512. At most about
    0.001 nats per moved bar at the longest N: the scale of BTC's own direction skill. A drift that
    gives 0.001 at 15 bars is readable from a few thousand bars, so N=4096 holds most of what
    N=32768 does; longer regimes with a smaller tilt move little of it (0.0008 of 0.0010 at 60480
    bars, tilt 0.011). What it implies at the scale of weeks: a drift of tilt * sqrt(bars per day)
    daily standard deviations a day (0.47 at the defaults), a trend a chart shows; over 15 bars it
    is 0.048 standard deviations of the move.
    """

    duration: int = 40320  # mean bars a regime lasts (four weeks of 1-minute bars)
    tilt: float = 0.0125  # drift per bar in units of the bar's own volatility, signed by the state
    garch_alpha: float = 0.05  # GARCH(1,1) as `LongMemory`: volatility clustering, no direction
    garch_beta: float = 0.93

    def check(self, where: str = "regime") -> Regime:
        if self.duration < 2:
            raise UserError(f"{where}: duration must be an integer >= 2 bars, got {self.duration}")
        if not 0.0 <= self.tilt < 1.0:
            raise UserError(f"{where}: tilt must be in [0, 1), got {self.tilt}")
        _check_garch(self.garch_alpha, self.garch_beta, where)
        return self

    @property
    def switch(self) -> float:
        """Probability per bar that the state flips."""
        return 1.0 / self.duration


class RegimeTruth(NamedTuple):
    """What `regime_bars` drew on the interval grid (G slots, missing bars included): the state
    (G,) in {-1, +1}, each slot's volatility sigma (G,), its innovation e (G,), and the grid slot
    of each bar (n_bars,)."""

    state: np.ndarray
    sigma: np.ndarray
    e: np.ndarray
    slots: np.ndarray


def regime_path(rng: np.random.Generator, n: int, switch: float) -> np.ndarray:
    """A symmetric two-state Markov chain of n steps in {-1, +1}: (n,) int8; s_0 is a fair coin,
    s_t flips with probability `switch` (the flip at t decides s_t, so s_t reads draws <= t)."""
    flips = rng.random(n) < switch
    flips[0] = False
    start = 1 if rng.random() < 0.5 else -1
    return (start * (1 - 2 * (np.cumsum(flips) % 2))).astype(np.int8)


def _regime_draws(n_bars: int, seed: int, p: Regime, m: Market) -> tuple[RegimeTruth, np.ndarray, np.random.Generator]:
    """(truth, open_time, rng after the draws): the one sequence of draws behind `regime_bars`."""
    _check_shape(n_bars, m.interval, "regime_bars")
    rng = np.random.default_rng(seed)
    step_us = INTERVAL_US[m.interval]
    offsets, open_time = _grid(rng, n_bars, m.n_gaps, m.start, step_us)
    n_slots = int(offsets[-1]) + 1
    base = _base_sigma(rng, np.arange(n_slots), bars_per_day(step_us), m.daily_vol)  # (G,)
    e = _innovations(rng, n_slots)  # (G,)
    sigma = base * garch_scale(e, p.garch_alpha, p.garch_beta)  # (G,)
    state = regime_path(rng.spawn(1)[0], n_slots, p.switch)  # its own stream: tilt 0 is the same market
    return RegimeTruth(state, sigma, e, offsets), open_time, rng


def regime_truth(n_bars: int, seed: int = 0, params: Regime | None = None, market: Market | None = None) -> RegimeTruth:
    """The hidden state and volatility behind `regime_bars(n_bars, seed, params, market)` (the same draws)."""
    return _regime_draws(n_bars, seed, (params or Regime()).check(), market or Market())[0]


def regime_bars(n_bars: int, seed: int = 0, params: Regime | None = None, market: Market | None = None):
    """A seeded market of exactly `n_bars` bars whose drift follows a slow hidden regime.

    Args as `long_memory_bars`; params: `Regime` (default: two-week regimes, BTC-scale tilt). On
    the interval grid the log return of slot t is

        r_t = sigma_t * (e_t + tilt * s_t),   sigma_t = base_t * sqrt(g_t)

    with e_t, base_t and g_t as in `long_memory_bars` and s_t the hidden state (`regime_path`).
    E[r_t | s_t] has the sign of the state; returns, volatility and the bars' columns at t depend
    on draws up to t only. The state and sigma: `regime_truth`; the oracle: `regime_oracle`.
    """
    m, p = market or Market(), (params or Regime()).check()
    truth, open_time, rng = _regime_draws(n_bars, seed, p, m)
    r = truth.sigma * (truth.e + p.tilt * truth.state)  # (G,)
    log_close = np.cumsum(r)[truth.slots]
    bar_r = np.diff(log_close, prepend=0.0)  # across a gap, the whole move through it
    return _bars_from_returns(
        rng,
        bar_r,
        truth.e[truth.slots],
        truth.sigma[truth.slots],
        open_time,
        m.start_price,
        m.symbol,
        m.interval,
        share_rng=rng.spawn(1)[0],
    )


def regime_llr(x: np.ndarray, tilt: float) -> np.ndarray:
    """log P(x | s = +1) - log P(x | s = -1) for standardised returns x = r / sigma (the unit-variance
    Student-t(T_DF) innovation shifted by +-tilt): (G,) -> (G,). Exact, not a Gaussian approximation."""
    scale2 = T_DF * (T_DF - 2) / T_DF  # df * c^2 with c^2 = (df - 2) / df: the t's squared scale times df

    def log_density(y):
        return -(T_DF + 1) / 2 * np.log1p(y * y / scale2)

    return log_density(x - tilt) - log_density(x + tilt)


def regime_posterior(llr: np.ndarray, switch: float, rows: np.ndarray, window: int) -> np.ndarray:
    """log-odds of s_t = +1 at each of `rows`, from the log-likelihood ratios `llr` (G,) of the
    slots t-window+1 .. t only: the exact forward filter of the chain started at 1/2 (no
    knowledge) `window` slots back, fewer at the start of the series: (len(rows),). A window of
    many regime lengths gives the filter of the whole history.

    The recursion L_t = llr_t + log(((1-q) e^L + q) / (q e^L + 1-q)), q = switch (the state may
    flip between bars), runs `window` steps vectorised over the rows: window x rows work.
    """
    rows = np.asarray(rows, dtype=np.int64)
    log_q, log_stay = np.log(switch), np.log1p(-switch)
    L = np.zeros(len(rows))
    for k in range(window - 1, -1, -1):  # oldest slot first; the carry of L = 0 is 0
        t = rows - k
        carried = np.logaddexp(log_stay + L, log_q) - np.logaddexp(log_q + L, log_stay)
        L = np.where(t >= 0, llr[np.maximum(t, 0)] + carried, L)
    return L


class OracleGains(NamedTuple):
    """`regime_oracle`: expected direction log-loss gains over a coin flip (the class prior of the
    symmetric market), nats per moved bar.

    rows : moved bars the rate is read on; hit_rate : P(up | moved, state up), that rate;
    true_state : the forecast that knows the state; by_length : {N: the forecast that knows only
    the last N bars (and each bar's volatility)}.
    """

    rows: int
    hit_rate: float
    true_state: float
    by_length: dict


def direction_gain(feature: np.ndarray, up: np.ndarray, iters: int = 25) -> float:
    """Log-loss gain (nats per bar) over the base rate of the logistic calibration
    P(up) = sigmoid(a + b * feature), fitted on the same rows by Newton's method: two parameters
    on many rows, so its in-sample optimism (about 1 / rows) is negligible."""
    x = np.stack([np.ones(len(feature)), np.asarray(feature, np.float64)], axis=1)
    y = np.asarray(up, np.float64)
    w = np.zeros(2)
    for _ in range(iters):
        prob = 1 / (1 + np.exp(-(x @ w)))
        hess = x.T @ (x * (prob * (1 - prob))[:, None]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, x.T @ (prob - y))
        w -= step
        if np.abs(step).max() < 1e-12:
            break
    z = x @ w
    fitted = np.mean(np.logaddexp(0, z) - y * z)  # binary log-loss of sigmoid(z)
    q = y.mean()
    prior = -(q * np.log(q) + (1 - q) * np.log(1 - q))
    return float(prior - fitted)


def regime_oracle(
    n_bars: int,
    seed: int = 0,
    params: Regime | None = None,
    market: Market | None = None,
    *,
    horizon: int = 15,
    lengths=(512, 4096, 32768),
    flat_fraction: float = 1 / 3,
    max_rows: int = 20_000,
) -> OracleGains:
    """How much direction information the regime market of these arguments holds, per context length.

    Labels as the pipeline's: the `horizon`-bar forward log return from each bar past the longest
    length, moved outside a flat band of `flat_fraction` (fitted here on all of them, not per
    fold). One rate is read off the moved bars, a = P(up | moved, s_t = +1) = P(down | moved,
    s_t = -1); then the forecast that knows the state says P(up) = 1/2 + (a - 1/2) s_t, and the one
    that knows the last N bars 1/2 + (a - 1/2)(2 P(s_t = +1 | those bars) - 1) (`regime_posterior`:
    the exact Bayes forecast, as the future depends on the past only through s_t). Gains are the
    expected ones under the true-state forecast (its cross-entropy against each forecast, from
    log 2), not realised outcomes, so they carry no label noise; the windowed filters run on at
    most `max_rows` moved bars, evenly spaced. An upper bound of what a model of N bars can do:
    it knows neither sigma nor the chain.
    """
    p, m = (params or Regime()).check(), market or Market()
    truth = regime_truth(n_bars, seed, p, m)
    lengths = tuple(int(n) for n in lengths)
    log_close = np.cumsum(truth.sigma * (truth.e + p.tilt * truth.state))[truth.slots]
    t = np.arange(max(lengths, default=0), n_bars - horizon)
    t = t[truth.slots[t + horizon] - truth.slots[t] == horizon]  # no gap inside the horizon
    fwd = log_close[t + horizon] - log_close[t]
    moved = np.abs(fwd) > np.quantile(np.abs(fwd), flat_fraction)
    t, up = t[moved], fwd[moved] > 0
    state = truth.state[truth.slots[t]]
    a = float(np.mean(up == (state > 0)))
    if len(t) > max_rows:
        t, state = (x[np.linspace(0, len(t) - 1, max_rows).round().astype(np.int64)] for x in (t, state))
    p_true = 0.5 + (a - 0.5) * state

    def gain(p_forecast):  # expected log-loss gain over 1/2 when the truth is p_true
        return float(np.mean(np.log(2) + p_true * np.log(p_forecast) + (1 - p_true) * np.log1p(-p_forecast)))

    llr = regime_llr(truth.e + p.tilt * truth.state, p.tilt)  # (G,)
    by_length = {
        n: gain(0.5 + (a - 0.5) * np.tanh(regime_posterior(llr, p.switch, truth.slots[t], n) / 2)) for n in lengths
    }  # tanh(L / 2) = 2 P(s = +1) - 1
    return OracleGains(int(moved.sum()), a, gain(p_true), by_length)


# ---------------------------------------------------------------------------------------------
# The source string


def _usage(data: str) -> str:
    forms = ", ".join(SOURCE_PREFIX + k + SOURCE_FORMS[k] for k in KNOWN_SOURCES)
    return f"--data: synthetic sources are {forms}, got {data!r}"


PARAMS = {"long-memory": LongMemory, "regime": Regime}  # the sources that take KEY=VALUE parameters


def _parse_params(name: str, text: str, data: str) -> dict:
    """KEY=VALUE,... -> {field: value} for `name`'s parameters (`PARAMS`)."""
    if name not in PARAMS:
        raise UserError(f"--data: synthetic:{name} takes no KEY=VALUE parameters, got {text!r} in {data!r}")
    types = {f.name: f.type for f in dataclasses.fields(PARAMS[name])}
    out = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in types:
            raise UserError(
                f"--data: unknown synthetic:{name} parameter {key!r} in {data!r}; known: {', '.join(types)}"
            )
        try:
            out[key] = int(value) if types[key] == "int" else float(value)
        except ValueError:
            raise UserError(f"--data: synthetic:{name} parameter {key} must be {types[key]}, got {value!r}") from None
    PARAMS[name](**out).check(f"--data {data}")
    return out


def parse_spec(data: str) -> tuple[str, int | None, dict] | None:
    """`synthetic:NAME[:SEED][:KEY=VALUE,...]` -> (NAME, SEED or None, {KEY: VALUE}); a store path -> None."""
    if not data.startswith(SOURCE_PREFIX):
        return None
    name, *rest = data[len(SOURCE_PREFIX) :].split(":")
    if name not in KNOWN_SOURCES or len(rest) > 2:
        raise UserError(_usage(data))
    seed, params = None, {}
    for i, part in enumerate(rest):
        if "=" in part and i == len(rest) - 1:
            params = _parse_params(name, part, data)
        elif i == 0 and "=" not in part:
            try:
                seed = int(part)
            except ValueError:
                raise UserError(f"--data: the synthetic seed must be an integer, got {part!r} in {data!r}") from None
        else:
            raise UserError(_usage(data))
    return name, seed, params


def parse_source(data: str) -> tuple[str, int | None] | None:
    """`synthetic:NAME[:SEED][...]` -> (NAME, SEED or None), checking the whole string; a store path -> None."""
    spec = parse_spec(data)
    return None if spec is None else spec[:2]


# What a pass means on each source, for the report's note: the nulls hold nothing to find, the
# positive controls hold a planted far-context effect the protocol should find.
CONTROL_NOTES = {
    "random-walk": "a synthetic random walk, the noise control: its direction is unpredictable, so a trading pass "
    "here would be a false positive (its daily volatility regimes are information a far context "
    "can carry for the flat-vs-move part of the log-loss)",
    "iid": "synthetic iid returns, the clean null: nothing is predictable, and a pass here would be a false positive",
    "long-memory": "a synthetic market with a planted far-context echo, a positive control: the lengths that reach "
    "the echo should forecast better, and a miss says the protocol cannot find such an effect",
    "regime": "a synthetic market with a slow hidden regime of BTC's scale, a positive control: longer contexts hold "
    "more of the regime, and a miss says how small an effect the protocol cannot find",
}


def control_note(source: str) -> str:
    """The report's note on a synthetic source ("synthetic:regime:0"): what it is and what a pass means."""
    spec = parse_spec(source)
    if spec is None:
        raise ValueError(f"control_note: not a synthetic source: {source!r}")
    return f"the data is {CONTROL_NOTES[spec[0]]} ({source})."


def synthetic_bars(data: str, n_bars: int, default_seed: int, **where) -> tuple[Bars, dict]:
    """(bars, source description) for a `synthetic:...` data string.

    where : start, interval, symbol (passed to the generator). The description names the source
    with its seed (and parameters), e.g. "synthetic:long-memory:3:lag=96", and says what it is.
    """
    spec = parse_spec(data)
    if spec is None:
        raise ValueError(f"synthetic_bars: not a synthetic source: {data!r}")
    name, seed, params = spec
    seed = default_seed if seed is None else seed
    source = f"{SOURCE_PREFIX}{name}:{seed}"
    if name == "random-walk":
        bars = random_walk_bars(n_bars, seed=seed, **where)
        return bars, {
            "kind": "synthetic",
            "source": source,
            "seed": seed,
            "description": "a seeded synthetic random walk (noise control)",
        }
    if name == "iid":
        bars = iid_bars(n_bars, seed=seed, **where)
        return bars, {
            "kind": "synthetic",
            "source": source,
            "seed": seed,
            "description": "seeded iid returns of one constant scale (clean null)",
        }
    p = PARAMS[name](**params)
    if params:
        source += ":" + ",".join(f"{k}={params[k]}" for k in (f.name for f in dataclasses.fields(p)) if k in params)
    if name == "regime":
        bars = regime_bars(n_bars, seed=seed, params=p, market=Market(**where))
        description = (
            f"a seeded synthetic market whose drift follows a hidden regime lasting {p.duration} bars on "
            f"average, tilted by {p.tilt} of each bar's volatility (positive control of realistic size)"
        )
    else:
        bars = long_memory_bars(n_bars, seed=seed, params=p, market=Market(**where))
        description = (
            f"a seeded synthetic market whose direction echoes the move over {p.window} bars that ended "
            f"{p.lag} bars earlier (positive control)"
        )
    return bars, {
        "kind": "synthetic",
        "source": source,
        "seed": seed,
        "params": dataclasses.asdict(p),
        "description": description,
    }
