"""Labels: forward returns against a plain loop, NaN across gaps and past the end, a flat band
fitted on training bars only, and the class mapping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tsflash.dataset.labels import CLASS_NAMES, fit_flat_band, forward_log_returns, make_labels
from tsflash.errors import UserError

MIN = 60_000_000


def _reference_fwd(close, t, h):
    out = np.full(len(close), np.nan)
    for i in range(len(close) - h):
        if t[i + h] - t[i] == h * MIN:
            out[i] = math.log(close[i + h] / close[i])
    return out


def test_class_names():
    assert CLASS_NAMES == ("down", "flat", "up")


def test_forward_returns_nan_across_a_gap_and_at_the_end():
    t = np.array([0, 1, 2, 3, 5, 6, 7, 8], dtype=np.int64) * MIN  # minute 4 is missing
    close = np.array([100.0, 101, 102, 103, 104, 105, 106, 107])
    fwd = forward_log_returns(close, t, 2, MIN)
    assert fwd.dtype == torch.float64 and fwd.shape == (8,)
    nan = math.nan
    expected = [math.log(102 / 100), math.log(103 / 101), nan, nan, math.log(106 / 104), math.log(107 / 105), nan, nan]
    np.testing.assert_allclose(fwd.numpy(), expected, rtol=0, atol=1e-15)
    # bar 2's horizon spans minutes 3 and 4: the close two BARS later exists but is three minutes later


def test_a_one_minute_horizon_on_one_second_bars():
    """horizon = "1m" at interval 1s is 60 bars; a missing second inside the horizon means no label."""
    from tsflash.intervals import duration_bars

    sec = 1_000_000
    h = duration_bars("1m", "1s", "labels.horizon")
    t = np.r_[0:100, 101:200].astype(np.int64) * sec  # second 100 is missing
    close = 100 * np.exp(np.cumsum(np.random.default_rng(1).normal(0, 1e-4, len(t))))
    fwd = forward_log_returns(close, t, h, sec).numpy()
    assert h == 60
    np.testing.assert_allclose(fwd[:40], np.log(close[60:100] / close[:40]), rtol=1e-12)
    assert np.isnan(fwd[40:100]).all()  # the minute ahead of bars 40..99 spans the missing second
    np.testing.assert_allclose(fwd[100:139], np.log(close[160:199] / close[100:139]), rtol=1e-12)
    assert np.isnan(fwd[139:]).all()  # past the end


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(st.sampled_from([1, 1, 1, 1, 2, 5]), min_size=1, max_size=80),
    h=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_property_forward_returns_match_a_loop(steps, h, seed):
    t = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64) * MIN
    close = 100 * np.exp(np.cumsum(np.random.default_rng(seed).normal(0, 0.01, len(t))))
    fwd = forward_log_returns(torch.from_numpy(close), torch.from_numpy(t), h, MIN).numpy()
    np.testing.assert_allclose(fwd, _reference_fwd(close, t, h), rtol=1e-12, atol=1e-15)


def test_forward_returns_short_series_is_all_nan():
    fwd = forward_log_returns(np.array([1.0, 2.0]), np.array([0, MIN]), 5, MIN)
    assert torch.isnan(fwd).all()


def test_forward_returns_errors():
    t = np.arange(5, dtype=np.int64) * MIN
    with pytest.raises(UserError, match=r"horizon must be an integer >= 1 bar, got 0"):
        forward_log_returns(np.ones(5), t, 0, MIN)
    with pytest.raises(UserError, match=r"1-D of equal length, got \(5,\) and \(4,\)"):
        forward_log_returns(np.ones(5), t[:4], 1, MIN)
    with pytest.raises(UserError, match=r"interval_us must be > 0, got 0"):
        forward_log_returns(np.ones(5), t, 1, 0)


def test_flat_band_gives_the_requested_share_on_train():
    rng = np.random.default_rng(1)
    fwd = torch.from_numpy(rng.normal(0, 1e-3, 3000))
    fwd[::17] = math.nan
    train = np.arange(2000)
    for fraction in (0.2, 1 / 3, 0.5):
        thr = fit_flat_band(fwd, train, fraction)
        y = make_labels(fwd, thr)[train]
        y = y[y >= 0]
        share = (y == 1).double().mean().item()
        assert abs(share - fraction) < 2 / len(y)
        # symmetric returns: up and down split the rest about evenly
        assert abs((y == 0).double().mean().item() - (1 - fraction) / 2) < 0.03


def test_flat_band_reads_training_bars_only():
    rng = np.random.default_rng(2)
    fwd = torch.from_numpy(rng.normal(0, 1e-3, 1000))
    train = np.arange(600)
    thr = fit_flat_band(fwd, train, 1 / 3)
    poisoned = fwd.clone()
    poisoned[600:] = 5.0  # anything outside train
    assert fit_flat_band(poisoned, train, 1 / 3) == thr
    poisoned[10] = 5.0  # ... but a training value does move it (the check can fail)
    poisoned[11] = 5.0
    assert fit_flat_band(poisoned, train, 1 / 3) != thr


def test_flat_band_matches_numpy_quantile():
    fwd = torch.from_numpy(np.random.default_rng(3).normal(0, 1, 501))
    thr = fit_flat_band(fwd, torch.arange(501), 0.3)
    assert thr == pytest.approx(float(np.quantile(np.abs(fwd.numpy()), 0.3)), rel=1e-12)


def test_flat_band_errors():
    fwd = torch.tensor([math.nan, math.nan, 0.1])
    with pytest.raises(UserError, match=r"none of the 2 training bars has a forward return"):
        fit_flat_band(fwd, [0, 1], 1 / 3)
    with pytest.raises(UserError, match=r"flat_fraction must be in \(0, 1\), got 1.0"):
        fit_flat_band(fwd, [2], 1.0)


def test_make_labels_mapping():
    fwd = torch.tensor([-0.3, -0.1, 0.0, 0.1, 0.3, math.nan], dtype=torch.float64)
    assert make_labels(fwd, 0.1).tolist() == [0, 1, 1, 1, 2, -1]  # the band is closed: |fwd| <= thr is flat
    assert make_labels(fwd, 0.0).tolist() == [0, 0, 1, 2, 2, -1]
    assert make_labels(fwd, 0.1).dtype == torch.int64
    with pytest.raises(UserError, match=r"flat threshold must be >= 0, got -0.1"):
        make_labels(fwd, -0.1)
