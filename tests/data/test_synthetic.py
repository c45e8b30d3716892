"""Synthetic markets: the long-memory positive control's planted effect (visible only past 4096
bars, of the documented size), no look-ahead, volatility clustering; the random walk has none of
it; the source strings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from tsflash.data.store import INTERVAL_US, find_gaps
from tsflash.data.synthetic import (
    LongMemory,
    Market,
    _bars_from_returns,
    echo_returns,
    echo_signal,
    garch_scale,
    grid_returns,
    iid_bars,
    long_memory_bars,
    parse_source,
    parse_spec,
    random_walk_bars,
    synthetic_bars,
    trailing_z,
)
from tsflash.errors import UserError

HORIZON = 15  # the default label horizon
STEP = INTERVAL_US["1m"]


def log_returns(bars) -> np.ndarray:
    return np.diff(np.log(bars.close), prepend=np.log(bars.close[0]))


# ---------------------------------------------------------------------------------------------
# Oracle checks on a large sample at the full-size defaults (one-week lag)


@pytest.fixture(scope="module")
def sample():
    """2.4M gap-free bars (4.5 years of minutes, the default range) at the defaults, and the same
    count of random-walk bars; labels as the pipeline's (15-bar forward return, flat third removed)."""
    n = 2_400_000
    out = {}
    for name, bars in (("long-memory", long_memory_bars(n, seed=11, market=Market(n_gaps=0))),
                       ("random-walk", random_walk_bars(n, seed=11, n_gaps=0))):
        r = log_returns(bars)
        lc = np.log(bars.close)
        rows = np.arange(LongMemory().lag + HORIZON, n - HORIZON, 5)  # every 5th bar whose echo source exists
        fwd = lc[rows + HORIZON] - lc[rows]
        moving = np.abs(fwd) > np.quantile(np.abs(fwd), 1 / 3)  # the up/down bars of a 1/3 flat band
        out[name] = {"r": r, "rows": rows[moving], "up": (fwd[moving] > 0).astype(int)}
    return out


def logistic_fit(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, iters: int = 30) -> np.ndarray:
    """Weights (intercept first) of a ridge-penalised logistic regression by Newton's method: fast
    and exact on a few hundred thousand rows of a few dozen features."""
    x = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(x.shape[1])
    penalty = ridge * np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    for _ in range(iters):
        p = expit(x @ w)
        step = np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]) / len(y) + penalty, x.T @ (p - y) / len(y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w


def binary_gain(x: np.ndarray, up: np.ndarray) -> tuple[float, float, float]:
    """Out-of-sample (second half) log-loss gain in nats per bar of a logistic regression on x
    (columns standardised on the first half) over the training base rate, its standard error,
    and the hit rate of its predicted sign."""
    half = len(up) // 2
    mu, sd = x[:half].mean(axis=0), x[:half].std(axis=0) + 1e-12
    w = logistic_fit((x[:half] - mu) / sd, up[:half])
    p = expit(w[0] + ((x[half:] - mu) / sd) @ w[1:])
    p = np.clip(p, 1e-9, 1 - 1e-9)
    q, y = up[:half].mean(), up[half:]
    gain = -(y * np.log(q) + (1 - y) * np.log(1 - q)) + (y * np.log(p) + (1 - y) * np.log(1 - p))
    return float(gain.mean()), float(gain.std() / np.sqrt(len(gain))), float(np.mean((p > 0.5) == y))


def window_features(r: np.ndarray, rows: np.ndarray, reach: int) -> np.ndarray:
    """What a window of the last `reach` bars could use: the self-normalised move and its tanh over
    geometric blocks (1, 1, 1, 1, 2, 2, 4, ... bars, finest near t) covering bars t-reach+1 .. t."""
    c1, c2 = np.concatenate([[0.0], np.cumsum(r)]), np.concatenate([[0.0], np.cumsum(r * r)])
    edges = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
             3072, 4096, 6144, 8192, 12288, 16384]
    edges = [e for e in edges if e < reach] + [reach]
    cols = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):  # bars t-hi+1 .. t-lo
        s1, s2 = c1[rows + 1 - lo] - c1[rows + 1 - hi], c2[rows + 1 - lo] - c2[rows + 1 - hi]
        z = s1 / np.sqrt(s2 + 1e-30)
        cols += [z, np.tanh(z)]
    return np.stack(cols, axis=1)


def test_planted_effect_is_invisible_to_4096_bars_and_of_the_documented_size(sample):
    s = sample["long-memory"]
    oracle = echo_signal(s["r"], LongMemory(), HORIZON)[s["rows"]][:, None]
    o_gain, o_se, o_hit = binary_gain(oracle, s["up"])
    # the documented effect (LongMemory's docstring): hit rate ~0.56, ~0.010 nats per moving bar
    assert 0.55 < o_hit < 0.575 and 0.008 < o_gain < 0.013, (o_hit, o_gain)
    assert o_gain > 15 * o_se
    # a window of the last 4096 bars: no edge beyond noise, with every summary of its moves
    w_gain, w_se, w_hit = binary_gain(window_features(s["r"], s["rows"], 4096), s["up"])
    assert w_gain < 3 * w_se and w_gain < 0.03 * o_gain, (w_gain, w_se)
    assert abs(w_hit - 0.5) < 0.01
    # the same machinery is not blind: given the oracle beside the window, it finds the edge
    both, _, _ = binary_gain(np.hstack([window_features(s["r"], s["rows"], 4096), oracle]), s["up"])
    assert both > 0.8 * o_gain
    print(f"oracle: hit {o_hit:.4f}, gain {o_gain:.5f} +- {o_se:.5f}; 4096-bar window: hit {w_hit:.4f}, "
          f"gain {w_gain:.5f} +- {w_se:.5f}; both {both:.5f}")


def test_the_random_walk_has_none_of_the_planted_effect(sample):
    s = sample["random-walk"]
    oracle = echo_signal(s["r"], LongMemory(), HORIZON)[s["rows"]]
    gain, se, hit = binary_gain(oracle[:, None], s["up"])
    assert gain < 3 * se and abs(hit - 0.5) < 3 * 0.5 / np.sqrt(len(s["up"]) / 2)
    assert abs(np.corrcoef(np.sign(oracle), 2 * s["up"] - 1)[0, 1]) < 4 / np.sqrt(len(oracle) / HORIZON)


def abs_acf(r: np.ndarray, lags) -> np.ndarray:
    a = np.abs(r) - np.abs(r).mean()
    return np.array([np.dot(a[k:], a[:-k]) / np.dot(a, a) for k in lags])


def test_volatility_clusters_at_a_btc_like_level(sample):
    r = sample["long-memory"]["r"][1:]
    assert np.all(abs_acf(r, range(1, 11)) > 0.1)
    assert 5e-4 < r.std() < 2e-3 and np.abs(r).max() < 0.2  # ~1e-3 a minute, no absurd bar


# ---------------------------------------------------------------------------------------------
# No look-ahead


@settings(max_examples=25, deadline=None)
@given(t=st.integers(0, 599), seed=st.integers(0, 2**16))
def test_returns_and_volatility_at_t_depend_on_nothing_after_t(t, seed):
    rng = np.random.default_rng(seed)
    p = LongMemory(lag=40, window=7, strength=0.3)
    e, base = rng.standard_t(4, 600), rng.uniform(0.5, 2.0, 600) * 1e-3
    e2, base2 = e.copy(), base.copy()
    e2[t + 1:], base2[t + 1:] = rng.standard_t(4, 599 - t), rng.uniform(0.5, 2.0, 599 - t) * 1e-3
    g, g2 = garch_scale(e, 0.05, 0.93, chunk=16), garch_scale(e2, 0.05, 0.93, chunk=16)
    assert np.array_equal(g[: t + 1], g2[: t + 1])
    r, r2 = echo_returns(base * g, e, p), echo_returns(base2 * g2, e2, p)
    assert np.array_equal(r[: t + 1], r2[: t + 1])
    # bar t's columns from the returns: nothing after t either (same draws for the per-bar noise)
    times = np.arange(600, dtype=np.int64) * STEP
    b1, b2 = (_bars_from_returns(np.random.default_rng(0), r_, e_, s_, times, 100.0, "X", "1m",
                                 share_rng=np.random.default_rng(1)) for r_, e_, s_ in ((r, e, base * g), (r2, e2, base2 * g2)))
    for col in ("open", "high", "low", "close", "volume", "trades", "taker_buy_base"):
        assert np.array_equal(getattr(b1, col)[: t + 1], getattr(b2, col)[: t + 1]), col
    # the oracle feature at t reads returns up to t + horizon - lag only
    sig, sig_cut = echo_signal(r, p, 5), echo_signal(r[: t + 1], p, 5)
    assert np.array_equal(sig[: t + 1], sig_cut)


def test_the_echo_is_the_documented_recursion():
    """r_t = sigma_t (e_t + strength tanh(z_{t-lag})), checked bar by bar against a direct loop."""
    rng = np.random.default_rng(5)
    p = LongMemory(lag=12, window=4, strength=0.5)
    e, sigma = rng.standard_normal(100), rng.uniform(1, 2, 100)
    r = echo_returns(sigma, e, p)
    ref = np.zeros(100)
    for t in range(100):
        s = t - p.lag
        src = ref[max(0, s - p.window + 1) : s + 1] if s >= 0 else np.zeros(0)
        z = src.sum() / np.sqrt((src**2).sum()) if s >= 0 else 0.0
        ref[t] = sigma[t] * (e[t] + p.strength * np.tanh(z))
    assert np.allclose(r, ref, rtol=1e-12, atol=1e-12)
    assert np.allclose(trailing_z(np.array([1.0, -1.0, 2.0, 0.0]), 2), [1.0, 0.0, 1 / np.sqrt(5), 1.0])
    # GARCH recursion in closed form equals the loop
    g = garch_scale(e, 0.1, 0.8, chunk=7) ** 2
    ref_g = [1.0]
    for t in range(1, 100):
        ref_g.append(0.1 + (0.1 * min(e[t - 1] ** 2, 50.0) + 0.8) * ref_g[-1])
    assert np.allclose(g, ref_g, rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# The bars and the source strings


def check_bars_like_binance(bars, n: int):
    """n 1-minute bars from 2024-01-01 on the minute grid, with 3 gaps of 5-120 minutes, consistent
    OHLC, each bar opening at the last close, volume and trades zero together, taker volume within
    the volume. Returns the gaps."""
    assert len(bars) == n and bars.open_time[0] == 1_704_067_200_000_000
    assert np.all(bars.open_time % STEP == 0) and np.all(np.diff(bars.open_time) > 0)
    gaps = find_gaps(bars.open_time, STEP)
    assert len(gaps) == 3 and np.all((gaps.missing >= 5) & (gaps.missing <= 120))
    assert np.all(bars.high >= np.maximum(bars.open, bars.close)) and np.all(bars.low <= np.minimum(bars.open, bars.close))
    assert np.all(bars.low > 0) and np.array_equal(bars.open[1:], bars.close[:-1])
    assert np.all((bars.volume == 0) == (bars.trades == 0))
    assert np.all((bars.taker_buy_base >= 0) & (bars.taker_buy_base <= bars.volume))
    return gaps


def test_random_walk_bars_look_like_bars():
    n = 20_000
    bars = random_walk_bars(n, seed=3, start="2024-01-01")
    check_bars_like_binance(bars, n)
    assert bars.trades.dtype == np.int64
    # seeded: same seed same bars, another seed other bars
    assert np.array_equal(random_walk_bars(n, seed=3, start="2024-01-01").close, bars.close)
    assert not np.array_equal(random_walk_bars(n, seed=4, start="2024-01-01").close, bars.close)
    # direction unpredictable: lag-1 autocorrelation of returns indistinguishable from 0
    r = np.diff(np.log(bars.close))
    assert abs(np.corrcoef(r[1:], r[:-1])[0, 1]) < 4 / np.sqrt(n)


def test_long_memory_bars_look_like_bars():
    n = 30_000
    where = Market(start="2024-01-01")
    bars = long_memory_bars(n, seed=3, params=LongMemory(lag=500), market=where)
    gaps = check_bars_like_binance(bars, n)
    assert np.array_equal(long_memory_bars(n, seed=3, params=LongMemory(lag=500), market=where).close, bars.close)
    assert not np.array_equal(long_memory_bars(n, seed=4, params=LongMemory(lag=500), market=where).close, bars.close)
    # the echo lives on the time grid: across a gap the next bar carries the move through it
    g, slots = grid_returns(bars.open_time, bars.close, STEP)
    assert len(g) == n + gaps.missing.sum() and np.allclose(np.cumsum(g)[slots], np.log(bars.close / bars.close[0]))


# Sums and linearly weighted sums (weights 0.5..1.5) of the noise control's bars, per column.
RANDOM_WALK_FINGERPRINT = {
    (50, 1): {"open": (1498834.429529, 1498529.930021), "high": (1499485.419461, 1499202.031674),
              "low": (1498162.099347, 1497834.437703), "close": (1498753.347562, 1498432.094224),
              "volume": (2067.692566035, 2166.896357367), "trades": (51581.0, 54063.23469388),
              "taker_buy_base": (1000.697187086, 1040.305856634)},
    (20_000, 3): {"open": (575312334.989, 579182679.6863), "high": (575588278.1003, 579457889.52),
                  "low": (575036643.271, 578908936.1809), "close": (575312165.7306, 579183660.2437),
                  "volume": (813209.7395424, 811437.3179175), "trades": (20326673.0, 20281308.14813),
                  "taker_buy_base": (408012.880991, 407215.3764968)},
}


def test_the_random_walk_is_unchanged():
    """The noise control's bars are the ones its published runs used: the same bar times, and the
    same prices, volumes and counts up to 1e-9 relative. Not a byte hash: numpy's vectorised
    exp/cos round differently in the last bit on CPUs with and without AVX-512 (a byte hash taken
    on one failed on the other), and a last-bit difference is not a different market."""
    for (n, seed), expected in RANDOM_WALK_FINGERPRINT.items():
        b = random_walk_bars(n, seed=seed, start="2024-01-01")
        open_time = np.asarray(b.open_time, dtype=np.int64)
        assert len(open_time) == n and (sum(map(int, open_time)), int(open_time[-1])) == {  # Python ints: no overflow
            50: (85203433500000000, 1704070140000000), 20_000: (34093557177060000000, 1705283580000000)}[n]
        w = np.linspace(0.5, 1.5, n)
        for col, (total, weighted) in expected.items():
            a = np.asarray(getattr(b, col), dtype=np.float64)
            assert float(a.sum()) == pytest.approx(total, rel=1e-9), (n, col)
            assert float((a * w).sum()) == pytest.approx(weighted, rel=1e-9), (n, col)


def test_source_strings():
    assert parse_source("data") is None and parse_spec("runs/x") is None
    assert parse_source("synthetic:long-memory") == ("long-memory", None)
    assert parse_spec("synthetic:long-memory:3:lag=96,strength=0.2") == ("long-memory", 3, {"lag": 96, "strength": 0.2})
    assert parse_spec("synthetic:long-memory:window=5") == ("long-memory", None, {"window": 5})
    both = r"synthetic sources are synthetic:random-walk\[:SEED\], synthetic:iid\[:SEED\], synthetic:long-memory\[:SEED\]\[:KEY=VALUE,...\], synthetic:regime\[:SEED\]\[:KEY=VALUE,...\]"
    for bad in ("synthetic:brownian", "synthetic:long-memory:1:2:3", "synthetic:long-memory:lag=9:4"):
        with pytest.raises(UserError, match=rf"^--data: {both}, got '{bad}'$"):
            parse_spec(bad)
    with pytest.raises(UserError, match=r"^--data: the synthetic seed must be an integer, got 'x' in 'synthetic:long-memory:x'$"):
        parse_spec("synthetic:long-memory:x")
    with pytest.raises(UserError, match=r"^--data: unknown synthetic:long-memory parameter 'lags' in .*; known: lag, window, "
                                        r"strength, garch_alpha, garch_beta$"):
        parse_spec("synthetic:long-memory:1:lags=96")
    with pytest.raises(UserError, match=r"^--data: synthetic:long-memory parameter lag must be int, got '9.5'$"):
        parse_spec("synthetic:long-memory:lag=9.5")
    with pytest.raises(UserError, match=r"^--data synthetic:long-memory:lag=10: needs window >= 1 and lag > window, "
                                        r"got lag=10, window=15$"):
        parse_spec("synthetic:long-memory:lag=10")
    with pytest.raises(UserError, match=r"^--data: synthetic:random-walk takes no KEY=VALUE parameters, got 'lag=9'"):
        parse_spec("synthetic:random-walk:1:lag=9")


def test_synthetic_bars_name_their_source():
    bars, src = synthetic_bars("synthetic:long-memory:strength=0.2,lag=96", 5000, default_seed=7, start="2024-01-01")
    assert len(bars) == 5000 and src["source"] == "synthetic:long-memory:7:lag=96,strength=0.2" and src["seed"] == 7
    assert src["params"] == dataclasses.asdict(LongMemory(lag=96, strength=0.2)) and "96 bars earlier" in src["description"]
    same, _ = synthetic_bars(src["source"], 5000, default_seed=0, start="2024-01-01")
    assert np.array_equal(same.close, bars.close)
    rw, src = synthetic_bars("synthetic:random-walk", 100, default_seed=2, start="2024-01-01")
    assert src == {"kind": "synthetic", "source": "synthetic:random-walk:2", "seed": 2,
                   "description": "a seeded synthetic random walk (noise control)"}
    assert np.array_equal(rw.close, random_walk_bars(100, seed=2, start="2024-01-01").close)
    iid, src = synthetic_bars("synthetic:iid:4", 100, default_seed=2, start="2024-01-01")
    assert src["source"] == "synthetic:iid:4" and "clean null" in src["description"]
    assert np.array_equal(iid.close, iid_bars(100, seed=4, start="2024-01-01").close)


def test_iid_returns_carry_no_volatility_information_the_random_walk_does():
    """The clean null: the day-to-day autocorrelation of realised variance is about 0 for iid
    bars and large for the random walk (its daily regimes), so only the latter lets a far context
    forecast the size of a move."""
    per_day, days = 1440, 200

    def daily_variance_autocorrelation(bars) -> float:
        r = np.diff(np.log(bars.close))[: per_day * days].reshape(days, per_day)
        v = np.log((r ** 2).sum(axis=1))
        return float(np.corrcoef(v[:-1], v[1:])[0, 1])

    n = per_day * days + 1
    assert abs(daily_variance_autocorrelation(iid_bars(n, seed=1, n_gaps=0))) < 0.2
    assert daily_variance_autocorrelation(random_walk_bars(n, seed=1, n_gaps=0)) > 0.5


def test_the_reports_note_says_whether_a_source_is_a_null_or_a_positive_control():
    from tsflash.data.synthetic import KNOWN_SOURCES, control_note

    assert "positive control" in control_note("synthetic:regime:0")
    assert "positive control" in control_note("synthetic:long-memory:3:strength=0.2")
    assert "false positive" in control_note("synthetic:iid:1") and "false positive" in control_note("synthetic:random-walk")
    for name in KNOWN_SOURCES:  # every source has its note, naming it
        assert control_note(f"synthetic:{name}:0").endswith(f"(synthetic:{name}:0).")
    with pytest.raises(ValueError, match="not a synthetic source"):
        control_note("data/BTCUSDT")
