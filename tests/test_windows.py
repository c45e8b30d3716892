"""Windows: segments break at long gaps, training windows never cross them, gathering is pure
index arithmetic, and evaluation windows score every test bar exactly once with context in
[n/2, n]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tsflash.errors import UserError
from tsflash.windows import eval_windows, gather_windows, segment_ids, window_starts

MIN = 60_000_000


def _times(steps) -> np.ndarray:
    """open_time (us) from the step between consecutive bars, in bars (1 = no gap)."""
    return np.concatenate([[0], np.cumsum(steps)]).astype(np.int64) * MIN


def test_segment_ids_break_only_after_gaps_longer_than_the_limit():
    # steps of 1 = contiguous; 4 = 3 missing bars; 5 = 4 missing bars
    t = _times([1, 1, 4, 1, 5, 1])
    np.testing.assert_array_equal(segment_ids(t, MIN, max_gap_bars=3), [0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(segment_ids(t, MIN, max_gap_bars=2), [0, 0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(segment_ids(t, MIN, max_gap_bars=0), [0, 0, 0, 1, 1, 2, 2])
    torch_ids = segment_ids(torch.from_numpy(t), MIN, max_gap_bars=2)
    assert isinstance(torch_ids, torch.Tensor) and torch_ids.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert segment_ids(np.zeros(0, dtype=np.int64), MIN, 3).shape == (0,)


def test_segment_ids_errors():
    with pytest.raises(UserError, match=r"max_gap_bars must be an integer >= 0, got -1"):
        segment_ids(_times([1]), MIN, -1)
    with pytest.raises(UserError, match=r"interval_us must be > 0, got 0"):
        segment_ids(_times([1]), 0, 3)


def test_window_starts_docstring_example():
    seg = np.array([0] * 6 + [1] * 6)
    assert window_starts(0, 12, 4, seg).tolist() == [0, 1, 2, 6, 7, 8]
    assert window_starts(1, 11, 4, seg).tolist() == [1, 2, 6, 7]
    assert window_starts(0, 3, 4, seg).tolist() == []
    assert window_starts(0, 12, 4, torch.from_numpy(seg)).dtype == torch.int64


def test_window_starts_errors():
    seg = np.zeros(10, dtype=np.int64)
    with pytest.raises(UserError, match=r"0 <= lo <= hi <= T, got lo=3, hi=11, T=10"):
        window_starts(3, 11, 4, seg)
    with pytest.raises(UserError, match=r"0 <= lo <= hi <= T, got lo=5, hi=4, T=10"):
        window_starts(5, 4, 2, seg)
    with pytest.raises(UserError, match=r"window length n must be an integer >= 1, got 0"):
        window_starts(0, 10, 0, seg)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.sampled_from([1, 1, 1, 1, 1, 2, 3, 8, 30]), min_size=1, max_size=120),
    max_gap=st.integers(0, 10),
    n=st.integers(1, 20),
    data=st.data(),
)
def test_property_training_windows_never_cross_long_gaps_and_miss_none(steps, max_gap, n, data):
    t = _times(steps)
    T = len(t)
    lo = data.draw(st.integers(0, T))
    hi = data.draw(st.integers(lo, T))
    starts = window_starts(lo, hi, n, segment_ids(t, MIN, max_gap)).tolist()
    missing = np.diff(t) // MIN - 1
    brute = [
        s for s in range(lo, hi - n + 1) if np.all(missing[s : s + n - 1] <= max_gap)  # gaps inside the window
    ]
    assert starts == brute


def test_gather_windows_is_index_arithmetic():
    series = torch.arange(40, dtype=torch.float32).reshape(20, 2)  # (T, F)
    starts = torch.tensor([0, 5, 14])
    batch = gather_windows(series, starts, 6)  # (B, n, F)
    assert batch.shape == (3, 6, 2)
    for b, s in enumerate(starts.tolist()):
        torch.testing.assert_close(batch[b], series[s : s + 6])
    labels = torch.arange(20)
    assert gather_windows(labels, starts, 6).shape == (3, 6)
    batch[0, 0, 0] = -1.0  # the batch is a copy: the series on the device is never modified
    assert series[0, 0] == 0.0


def _scored(starts, score_from, n):
    """(bar, context length) for every scored bar."""
    out = []
    for s, f in zip(starts.tolist(), score_from.tolist()):
        out += [(s + p, p + 1) for p in range(f, n)]
    return out


def test_eval_windows_docstring_example():
    starts, score_from = eval_windows(8, 18, 8)
    assert starts.tolist() == [4, 8, 10] and score_from.tolist() == [4, 4, 6]


@settings(max_examples=300, deadline=None)
@given(half=st.integers(1, 64), length=st.integers(1, 400), extra=st.integers(0, 100))
def test_property_eval_scores_every_test_bar_once_with_context_in_half_to_n(half, length, extra):
    n = 2 * half
    lo = half + extra
    hi = lo + length
    if hi < n:
        with pytest.raises(UserError, match=rf"test_hi >= n={n}"):
            eval_windows(lo, hi, n)
        return
    starts, score_from = eval_windows(lo, hi, n)
    scored = _scored(starts, score_from, n)
    bars = [b for b, _ in scored]
    assert sorted(bars) == list(range(lo, hi))  # every test bar exactly once, nothing else
    assert all(half <= ctx <= n for _, ctx in scored)
    assert starts.min() >= 0 and (starts + n).max() <= hi  # never reads a bar at or after the block's end
    if length % half == 0:  # aligned blocks: plain stride n/2
        assert torch.all(torch.diff(starts) == half) and torch.all(score_from == half)


def test_eval_windows_errors():
    with pytest.raises(UserError, match=r"need n/2=16 bars of history before the test block, got test_lo=10 \(n=32\)"):
        eval_windows(10, 100, 32)
    with pytest.raises(UserError, match=r"even integer >= 2, got 7"):
        eval_windows(10, 100, 7)
    with pytest.raises(UserError, match=r"non-empty \(test_lo < test_hi\), got test_lo=50, test_hi=50"):
        eval_windows(50, 50, 8)
    with pytest.raises(UserError, match=r"test_hi >= n=64 so the last window fits in the series, got test_hi=40"):
        eval_windows(32, 40, 64)


def test_eval_windows_on_device_argument():
    starts, score_from = eval_windows(16, 48, 32, device="cpu")
    assert starts.device.type == "cpu" and starts.dtype == torch.int64 and score_from.dtype == torch.int64
