"""Features: known values, causality (perturbing the future leaves the past unchanged), the
train-only normaliser, and the no-leakage check of a whole fold's preparation: poisoning every
bar from a test block's start on changes no training input, normaliser, threshold or label."""

from __future__ import annotations

import datetime as dt
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tsflash.dataset.features import FEATURE_NAMES, REALIZED_VOL_BARS, Normalizer, compute_features
from tsflash.dataset.labels import fit_flat_band, forward_log_returns, make_labels
from tsflash.dataset.splits import WalkForward
from tsflash.dataset.windows import gather_windows, segment_ids, window_starts
from tsflash.errors import UserError

MIN = 60_000_000
START_2024 = 1_704_067_200_000_000  # 2024-01-01 00:00 UTC, a Monday
COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


def make_bars(n: int, seed: int = 0, gaps: dict[int, int] | None = None) -> SimpleNamespace:
    """A Bars-like random walk; gaps maps bar index -> number of missing minutes before it."""
    rng = np.random.default_rng(seed)
    steps = np.ones(n, dtype=np.int64)
    steps[:1] = 0
    for i, missing in (gaps or {}).items():
        steps[i] += missing
    close = 30_000 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    open_ = np.r_[close[:1], close[:-1]]
    high = np.maximum(open_, close) * (1 + rng.uniform(0, 1e-3, n))
    low = np.minimum(open_, close) * (1 - rng.uniform(0, 1e-3, n))
    volume = rng.exponential(5.0, n)
    return SimpleNamespace(
        open_time=START_2024 + np.cumsum(steps) * MIN,
        open=open_,
        high=high,
        low=low,
        close=close,
        volume=volume,
        trades=rng.integers(0, 500, n).astype(np.int64),
        taker_buy_base=volume * rng.uniform(0, 1, n),
        symbol="BTCUSDT",
        interval="1m",
    )


def _copy(bars) -> SimpleNamespace:
    return SimpleNamespace(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(bars).items()})


def test_shape_dtype_names_and_finite():
    x = compute_features(make_bars(300, gaps={100: 3}))
    assert x.shape == (300, len(FEATURE_NAMES)) and x.dtype == torch.float32
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert torch.isfinite(x).all()


def test_known_values():
    t = START_2024 + np.array([0, 1, 2, 6 * 60, 6 * 60 + 5], dtype=np.int64) * MIN  # 4 min missing before the last bar
    bars = SimpleNamespace(
        open_time=t,
        open=np.array([100.0, 100, 110, 110, 121]),
        high=np.array([101.0, 100, 120, 110, 121]),
        low=np.array([99.0, 100, 100, 110, 110]),
        close=np.array([100.0, 100, 110, 110, 121]),
        volume=np.array([2.0, 0.0, 4.0, 1.0, 3.0]),
        trades=np.array([3, 0, 9, 1, 2]),
        taker_buy_base=np.array([1.5, 0.0, 1.0, 1.0, 0.0]),
        interval="1m",
    )
    x = compute_features(bars).double()
    c = lambda name: x[:, COL[name]].tolist()  # noqa: E731
    close = bars.close
    assert c("log_return") == pytest.approx([0, 0, math.log(1.1), 0, math.log(1.1)], abs=1e-6)
    assert c("log_range") == pytest.approx([math.log(101 / 99), 0, math.log(1.2), 0, math.log(1.1)], abs=1e-6)
    assert c("close_location") == pytest.approx([0.5, 0.5, 0.5, 0.5, 1.0], abs=1e-6)  # 0.5 when high == low
    assert c("log_volume") == pytest.approx(np.log1p(bars.volume).tolist(), abs=1e-6)
    assert c("log_volume_change") == pytest.approx([0, -math.log(3), math.log(5), math.log(2 / 5), math.log(2)], abs=1e-6)
    assert c("taker_buy_share") == pytest.approx([0.75, 0.5, 0.25, 1.0, 0.0], abs=1e-6)  # 0.5 when volume == 0
    assert c("log_trades") == pytest.approx(np.log1p(bars.trades).tolist(), abs=1e-6)
    # 00:00 UTC -> angle 0; 06:00 -> a quarter of the day
    assert c("time_of_day_sin")[0] == pytest.approx(0, abs=1e-6) and c("time_of_day_cos")[0] == pytest.approx(1, abs=1e-6)
    assert c("time_of_day_sin")[3] == pytest.approx(1, abs=1e-6) and c("time_of_day_cos")[3] == pytest.approx(0, abs=1e-6)
    # 2024-01-01 is a Monday (weekday 0)
    assert c("day_of_week_sin")[0] == pytest.approx(0, abs=1e-6) and c("day_of_week_cos")[0] == pytest.approx(1, abs=1e-6)
    # the bar after 6 h minus 2 min of missing bars, and the one after 4 missing minutes
    assert c("gap_marker") == [0, 0, 0, 1, 1]
    assert c("log_gap_bars") == pytest.approx([0, 0, 0, math.log1p(6 * 60 - 3), math.log1p(4)], abs=1e-6)
    r = np.r_[0, np.diff(np.log(close))]
    vol = [math.log(math.sqrt(np.mean(r[: i + 1] ** 2)) + 1e-5) for i in range(5)]
    assert c("log_realized_vol") == pytest.approx(vol, abs=1e-5)


def test_weekday_of_a_sunday():
    bars = make_bars(3)
    bars.open_time = bars.open_time - START_2024 + START_2024 - 86_400_000_000  # 2023-12-31, a Sunday
    x = compute_features(bars)
    angle = 2 * math.pi * 6 / 7
    assert x[0, COL["day_of_week_sin"]].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert x[0, COL["day_of_week_cos"]].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("interval, step_us", [("1s", 1_000_000), ("1m", MIN), ("5m", 5 * MIN), ("1h", 60 * MIN)])
def test_calendar_and_gap_columns_are_right_at_every_interval(interval, step_us):
    """Time of day and day of week come from each bar's own timestamp (checked against datetime),
    never from a bar count; gap columns count missing bars of the interval."""
    n = 400
    start = dt.datetime(2024, 1, 7, tzinfo=dt.UTC) - dt.timedelta(microseconds=n // 2 * step_us)
    steps = np.ones(n, dtype=np.int64)
    steps[0], steps[300] = 0, 1 + 7  # 7 bars missing before bar 300
    bars = make_bars(n, seed=2)
    bars.interval = interval
    bars.open_time = int(start.timestamp()) * 1_000_000 + np.cumsum(steps) * step_us
    x = compute_features(bars).double()
    when = [dt.datetime.fromtimestamp(t / 1e6, dt.UTC) for t in bars.open_time.tolist()]
    day_angle = [2 * math.pi * (w.hour * 3600 + w.minute * 60 + w.second) / 86_400 for w in when]
    week_angle = [2 * math.pi * w.weekday() / 7 for w in when]  # Monday = 0
    np.testing.assert_allclose(x[:, COL["time_of_day_sin"]], np.sin(day_angle), atol=1e-6)
    np.testing.assert_allclose(x[:, COL["time_of_day_cos"]], np.cos(day_angle), atol=1e-6)
    np.testing.assert_allclose(x[:, COL["day_of_week_sin"]], np.sin(week_angle), atol=1e-6)
    np.testing.assert_allclose(x[:, COL["day_of_week_cos"]], np.cos(week_angle), atol=1e-6)
    assert {5, 6} <= {w.weekday() for w in when}  # across midnight, Saturday into Sunday
    gap = x[:, COL["gap_marker"]].numpy()
    assert gap.nonzero()[0].tolist() == [300]
    assert x[300, COL["log_gap_bars"]].item() == pytest.approx(math.log1p(7), abs=1e-6)


def test_realized_vol_matches_a_trailing_loop():
    bars = make_bars(REALIZED_VOL_BARS * 3, seed=4)
    x = compute_features(bars)
    r = np.r_[0, np.diff(np.log(bars.close))]
    ref = [math.log(math.sqrt(np.mean(r[max(0, i - REALIZED_VOL_BARS + 1) : i + 1] ** 2)) + 1e-5) for i in range(len(r))]
    np.testing.assert_allclose(x[:, COL["log_realized_vol"]].numpy(), ref, atol=1e-5)


def test_explicit_interval_and_errors():
    bars = make_bars(10)
    torch.testing.assert_close(compute_features(bars, interval_us=MIN), compute_features(bars))
    bars.interval = "7q"
    with pytest.raises(UserError, match=r"unknown bar interval '7q'"):
        compute_features(bars)
    with pytest.raises(UserError, match=r"at least one bar, got 0"):
        compute_features(make_bars(0), interval_us=MIN)
    bad = make_bars(10)
    bad.low[4] = 0.0
    with pytest.raises(UserError, match=r"prices must be > 0 for log features, got low=0.0 at bar 4 \(of 1 such bars\)"):
        compute_features(bad)
    bad = make_bars(10)
    bad.volume = bad.volume[:9]
    with pytest.raises(UserError, match=r"bars columns must have equal lengths, got .*'volume': 9"):
        compute_features(bad)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 200), data=st.data(), seed=st.integers(0, 1000))
def test_property_causal_future_bars_do_not_change_past_rows(n, data, seed):
    t = data.draw(st.integers(0, n - 2))
    bars = make_bars(n, seed=seed, gaps={n // 2: 7})
    x = compute_features(bars)
    future = _copy(bars)
    rng = np.random.default_rng(seed + 1)
    k = n - t - 1
    for name in ("open", "high", "low", "close", "volume", "taker_buy_base"):
        getattr(future, name)[t + 1 :] *= rng.uniform(0.1, 10.0, k)
    future.high[t + 1 :] = np.maximum.reduce([future.high[t + 1 :], future.low[t + 1 :], future.close[t + 1 :]])
    future.trades[t + 1 :] = rng.integers(0, 10_000, k)
    future.open_time[t + 1 :] += rng.integers(0, 100) * MIN  # even a new gap after t
    y = compute_features(future)
    assert torch.equal(x[: t + 1], y[: t + 1])
    assert not torch.equal(x[t + 1 :], y[t + 1 :])  # the perturbation did reach the features (non-vacuous)
    # and any prefix of the series gives the same rows
    prefix = SimpleNamespace(**{k_: (v[: t + 1] if isinstance(v, np.ndarray) else v) for k_, v in vars(bars).items()})
    assert torch.equal(compute_features(prefix), x[: t + 1])


def test_normalizer_fits_train_rows_only_and_handles_constant_columns():
    x = torch.randn(500, 3) * torch.tensor([1.0, 5.0, 0.0]) + torch.tensor([0.0, 3.0, 7.0])
    train = np.arange(300)
    norm = Normalizer.fit(x, train)
    z = norm.apply(x)
    torch.testing.assert_close(z[:300, :2].mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(z[:300, :2].std(0, correction=0), torch.ones(2), atol=1e-4, rtol=0)
    assert norm.std[2] == 1.0 and torch.all(z[:, 2] == 0)  # constant column: centred, not blown up
    # the slice path (contiguous numpy), the gather path (tensor, non-contiguous) agree
    assert torch.equal(Normalizer.fit(x, torch.arange(300)).mean, norm.mean)
    holes = np.r_[0:100, 150:300]
    ref = Normalizer.fit(x[torch.from_numpy(holes)], np.arange(250))
    assert torch.equal(Normalizer.fit(x, holes).mean, ref.mean) and torch.equal(Normalizer.fit(x, holes).std, ref.std)
    x2 = x.clone()
    x2[300:] = 1e6
    assert torch.equal(Normalizer.fit(x2, train).mean, norm.mean)
    assert Normalizer.fit(x2, np.arange(500)).mean[0] > 1e5  # including rows does change it
    assert norm.apply(x2)[400].abs().max() == norm.clip  # clipped fat tails
    assert torch.equal(Normalizer.from_dict(norm.to_dict()).apply(x), z)
    with pytest.raises(UserError, match=r"at least one training row, got train_idx of length 0"):
        Normalizer.fit(x, np.array([], dtype=np.int64))


def _fold_inputs(bars, train_idx, horizon, n):
    """Everything a fold's training sees: normaliser, threshold, labels, normalised windows."""
    x = compute_features(bars)
    fwd = forward_log_returns(bars.close, bars.open_time, horizon, MIN)
    norm = Normalizer.fit(x, train_idx)
    thr = fit_flat_band(fwd, train_idx, 1 / 3)
    y = make_labels(fwd, thr)
    seg = segment_ids(bars.open_time, MIN, max_gap_bars=10)
    starts = window_starts(int(train_idx.min()), int(train_idx.max()) + 1, n, seg)
    return dict(
        mean=norm.mean,
        std=norm.std,
        thr=torch.tensor(thr),
        fwd=fwd[train_idx],
        labels=y[train_idx],
        starts=starts,
        x_windows=gather_windows(norm.apply(x), starts, n),
        y_windows=gather_windows(y, starts, n),
    )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN equal to NaN (unlabelled bars)."""
    if a.is_floating_point():
        return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    return torch.equal(a, b)


def _poison_from(bars, start):
    bad = _copy(bars)
    rng = np.random.default_rng(99)
    k = len(bad.close) - start
    bad.close[start:] *= rng.uniform(0.01, 100.0, k)
    bad.high[start:] = bad.close[start:] * 2
    bad.low[start:] = bad.close[start:] / 2
    bad.volume[start:] = rng.uniform(0, 1e6, k)
    bad.taker_buy_base[start:] = bad.volume[start:] * rng.uniform(0, 1, k)
    bad.trades[start:] = rng.integers(0, 10**6, k)
    bad.open_time[start:] += 40 * MIN  # and a long gap right at the test block's start
    return bad


@pytest.mark.parametrize("embargo", [0, 3])
def test_poisoning_from_a_test_block_start_changes_no_training_input_of_that_fold(embargo):
    horizon, n = 5, 16
    bars = make_bars(700, seed=7, gaps={150: 3, 260: 20})
    cv = WalkForward(n_splits=3, test_size=120, purge=horizon, embargo=embargo)
    for train_idx, test_idx in cv.split(len(bars.close)):
        clean = _fold_inputs(bars, train_idx, horizon, n)
        poisoned = _fold_inputs(_poison_from(bars, int(test_idx.min())), train_idx, horizon, n)
        assert len(clean["starts"]) > 0 and (clean["labels"] >= 0).sum() > 100
        for key in clean:
            assert _same(clean[key], poisoned[key]), key


def test_poisoning_canary_purge_below_horizon_does_leak():
    """The test above can fail: without the purge the last training labels read test bars."""
    horizon, n = 5, 16
    bars = make_bars(700, seed=7)
    train_idx, test_idx = next(WalkForward(n_splits=3, test_size=120, purge=0).split(len(bars.close)))
    clean = _fold_inputs(bars, train_idx, horizon, n)
    poisoned = _fold_inputs(_poison_from(bars, int(test_idx.min())), train_idx, horizon, n)
    assert not _same(clean["fwd"], poisoned["fwd"])


def test_real_data_slice_gap_features_labels_and_segments(shared_data):
    """2023-03-24 on real data: an 80-minute outage. Gap columns, labels and segments agree with
    the timestamps computed independently."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(shared_data / "btcusdt-1m" / "btcusdt-1m-2023.parquet")
    t = table.column("open_time").cast(pa.int64())
    lo, hi = 1_679_616_000_000_000, 1_679_702_400_000_000  # 2023-03-24 00:00 .. 2023-03-25 00:00 UTC
    table = table.filter(pc.and_(pc.greater_equal(t, lo), pc.less(t, hi)))
    cols = {c: table.column(c).to_numpy() for c in table.column_names if c != "open_time"}
    bars = SimpleNamespace(open_time=table.column("open_time").cast(pa.int64()).to_numpy(), interval="1m", **cols)
    x = compute_features(bars)
    assert torch.isfinite(x).all()
    missing = np.r_[0, np.diff(bars.open_time) // MIN - 1]
    assert missing.max() >= 60  # the outage
    np.testing.assert_array_equal(x[:, COL["gap_marker"]].numpy(), (missing > 0).astype(np.float32))
    np.testing.assert_allclose(x[:, COL["log_gap_bars"]].numpy(), np.log1p(missing), rtol=1e-6)
    g = int(np.argmax(missing))  # first bar after the outage
    fwd = forward_log_returns(bars.close, bars.open_time, 15, MIN)
    assert torch.isnan(fwd[g - 15 : g]).all() and not torch.isnan(fwd[g - 16]) and not torch.isnan(fwd[g])
    seg = segment_ids(bars.open_time, MIN, max_gap_bars=60)
    assert seg[g - 1] + 1 == seg[g]
    starts = window_starts(0, len(seg), 64, seg)
    assert not torch.any((starts < g) & (starts + 64 > g))  # no training window bridges it


def test_accepts_the_store_bars_dataclass():
    from tsflash.data.store import Bars

    fields = {k: v for k, v in vars(make_bars(50, seed=3)).items()}
    bars = Bars(**fields)
    torch.testing.assert_close(compute_features(bars), compute_features(make_bars(50, seed=3)), rtol=0, atol=0)
