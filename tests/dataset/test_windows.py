"""Windows: segments break at long gaps, training windows never cross them, gathering is pure
index arithmetic, evaluation windows score every test bar exactly once with context in
[n/2, n], and the coverage-balanced training windows score every training bar equally often
(exactly on synthetic layouts, within 5 % on a real fold at N = 64..4096)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tsflash.dataset.windows import (
    BalancedWindows,
    eval_windows,
    fit_pieces,
    gather_windows,
    range_coverage,
    segment_ids,
    window_starts,
)
from tsflash.errors import UserError

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
    for s, f in zip(starts.tolist(), score_from.tolist(), strict=True):
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


# ---- coverage-balanced training windows ---------------------------------------------------------


def _all_windows(bw: BalancedWindows):
    return [t.tolist() for t in bw.windows(torch.arange(bw.count))]


def test_balanced_windows_docstring_example():
    """Piece [10, 20), n = 4: 13 virtual windows; the first scores bar 10 from window [10, 14),
    an interior one is itself, the last scores bar 19 from window [16, 20)."""
    bw = BalancedWindows(torch.tensor([10]), torch.tensor([20]), 4)
    start, lo, hi = _all_windows(bw)
    assert bw.count == 13
    assert (start[0], lo[0], hi[0]) == (10, 10, 11)
    assert (start[5], lo[5], hi[5]) == (12, 12, 16)
    assert (start[-1], lo[-1], hi[-1]) == (16, 19, 20)
    assert bw.coverage(25).tolist() == [0] * 10 + [4] * 10 + [0] * 5
    assert bw.scored_per_window() == 40 / 13
    _, y = bw.targets(torch.arange(25), torch.tensor([0, 12]))
    assert y.tolist() == [[10, -1, -1, -1], [-1, -1, -1, 19]]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.sampled_from([1, 1, 1, 1, 1, 2, 3, 8, 30]), min_size=2, max_size=120),
    max_gap=st.integers(0, 10),
    n=st.integers(1, 24),
    warm_share=st.sampled_from([0.0, 0.0, 0.25, 0.5]),
    data=st.data(),
)
def test_property_balanced_windows_score_every_bar_n_times_and_never_bridge_a_gap(steps, max_gap, n, warm_share, data):
    t = _times(steps)
    T = len(t)
    seg = segment_ids(t, MIN, max_gap)
    cut = data.draw(st.integers(0, T))  # two training runs, [0, cut) and [cut2, T) (an embargo between)
    cut2 = data.draw(st.integers(cut, T))
    runs = [r for r in [(0, cut), (cut2, T)] if r[1] > r[0]]
    lo, hi = fit_pieces(runs, torch.from_numpy(seg), n)
    if len(lo) == 0:
        return
    warm = int(warm_share * n)
    bw = BalancedWindows(lo, hi, n, warm)
    start, s_lo, s_hi = _all_windows(bw)
    for a, b, c in zip(start, s_lo, s_hi, strict=True):
        run = next(r for r in runs if r[0] <= a < r[1])
        assert a + n <= run[1]  # the window lies in one training run
        assert a + warm <= b and c <= a + n  # scored positions are positions of the window past the warm-up
        assert all(seg[bar] == seg[a] for bar in range(a, c))  # no scored bar's context bridges a long gap
    coverage = bw.coverage(T)
    pieces = set()
    for p_lo, p_hi in zip(lo.tolist(), hi.tolist(), strict=True):
        pieces |= set(range(p_lo, p_hi))
        if warm == 0:
            assert (coverage[p_lo:p_hi] == n).all()  # every bar of every piece in exactly n windows
    assert all(coverage[b] == 0 for b in range(T) if b not in pieces)
    # every piece kept is one an n-bar window inside its run can score; the others cannot
    for r_lo, r_hi in runs:
        edges = [r_lo] + [b for b in range(r_lo + 1, r_hi) if seg[b] != seg[b - 1]]
        assert sorted(e for e in edges if e + n <= r_hi) == [p for p in lo.tolist() if r_lo <= p < r_hi]


def test_range_coverage_counts_overlaps():
    assert range_coverage([0, 2, 5], [3, 4, 5], 6).tolist() == [1, 1, 2, 1, 0, 0]


def _real_fold(shared_store, start, end, val_days):
    """A real fold by index arithmetic only: the last of 2 expanding folds of 30 test days, with a
    validation tail of val_days days: (fit runs, segment ids, fit bar indices)."""
    from tsflash.data.store import load_bars
    from tsflash.dataset.splits import WalkForward
    from tsflash.engine import contiguous_runs, split_validation

    bars = load_bars(shared_store, start=start, end=end)
    seg = torch.from_numpy(segment_ids(bars.open_time, MIN, 60))
    train_idx, _ = list(WalkForward(n_splits=2, test_size=30 * 1440, purge=15).split(len(bars)))[-1]
    fit_idx, _ = split_validation(train_idx, val_days * 1440, 15)
    return contiguous_runs(fit_idx), seg, fit_idx


def test_real_fold_every_training_bar_has_the_same_expected_weight(shared_store):
    """2021-01 .. 2021-09 holds segments of 5, 23 and 41 days between long gaps: at every n from 64 to
    4096 every fit bar's expected weight is within 5 % of the mean, the last 30 days included."""
    runs, seg, fit_idx = _real_fold(shared_store, "2021-01-01", "2021-09-30", 30)
    assert int(seg[fit_idx].max() - seg[fit_idx].min()) >= 4  # the slice does hold several long gaps
    last30 = fit_idx[-30 * 1440:]
    for n in [64, 128, 256, 512, 1024, 2048, 4096]:
        bw = BalancedWindows(*fit_pieces(runs, seg, n), n)
        weight = bw.coverage(len(seg))[fit_idx] / bw.count  # expected times each bar is scored per draw
        mean = weight.mean()
        assert np.abs(weight / mean - 1).max() <= 0.05, n
        assert abs(weight[-len(last30):].mean() / mean - 1) <= 0.05, n
        # the uniform window starts this replaces miss that: its edges weigh less
        starts = torch.cat([window_starts(lo, hi, n, seg) for lo, hi in runs])
        old = range_coverage(starts.numpy(), starts.numpy() + n, len(seg))[fit_idx]
        assert old.min() / old.mean() < 0.05


# ---- patch tokens -------------------------------------------------------------------------------


def _scored_patch_ends(starts, score_from, n, patch):
    """(bar, context length) for every bar a patch model's eval windows score: positions past
    score_from that end a patch."""
    return [(b, ctx) for b, ctx in _scored(starts, score_from, n) if ctx % patch == 0]


@settings(max_examples=300, deadline=None)
@given(log_patch=st.integers(1, 4), log_tokens=st.integers(1, 4), length=st.integers(1, 300), extra=st.integers(0, 40))
def test_property_patch_eval_scores_every_test_bar_once_at_a_patch_end(log_patch, log_tokens, length, extra):
    """Each test bar exactly once, from a window whose patch grid ends at it, context in (n/2, n],
    never reading a bar at or after the block's end; at most `patch` x the windows of patch 1."""
    patch, n = 2 ** log_patch, 2 ** (log_patch + log_tokens)
    lo = n // 2 + patch - 1 + extra
    hi = lo + length
    if hi < n + patch - 1:
        with pytest.raises(UserError, match=rf"test_hi >= n \+ patch - 1 = {n + patch - 1}"):
            eval_windows(lo, hi, n, patch=patch)
        return
    starts, score_from = eval_windows(lo, hi, n, patch=patch)
    scored = _scored_patch_ends(starts, score_from, n, patch)
    assert sorted(b for b, _ in scored) == list(range(lo, hi))
    assert all(n // 2 < ctx <= n for _, ctx in scored)
    assert starts.min() >= 0 and (starts + n).max() <= hi
    assert len(starts) <= patch * (len(eval_windows(lo, hi, n)[0]) + 1)  # the eval compute: x patch at most


def test_patch_eval_windows_errors_name_the_rule():
    with pytest.raises(UserError, match=r"n=32 bars in patches of 4 need test_lo >= n/2 \+ patch - 1 = 19 \(history\) "
                                        r"and test_hi >= n \+ patch - 1 = 35, got test_lo=18, test_hi=100"):
        eval_windows(18, 100, 32, patch=4)
    starts, _ = eval_windows(19, 35, 32, patch=4)  # the least history and the shortest block it takes
    assert starts.min() == 0


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.sampled_from([1, 1, 1, 1, 1, 2, 3, 8, 30]), min_size=2, max_size=150),
    max_gap=st.integers(0, 10),
    log_patch=st.integers(1, 3),
    log_tokens=st.integers(1, 3),
    warm_share=st.sampled_from([0.0, 0.0, 0.25]),
    data=st.data(),
)
def test_property_patch_training_windows_score_patch_ends_equally_often(steps, max_gap, log_patch, log_tokens,
                                                                        warm_share, data):
    """Patch tokens: a window scores only bars that end one of its patches, inside the window
    and its piece, never bridging a gap; in a piece of >= n + patch - 1 bars every bar but the
    first patch - 1 (which no patch inside the piece can end) is scored in exactly n / patch
    windows at every offset; `targets`, `coverage` and `scored_per_window` agree."""
    patch, n = 2 ** log_patch, 2 ** (log_patch + log_tokens)
    t = _times(steps)
    T = len(t)
    seg = segment_ids(t, MIN, max_gap)
    cut = data.draw(st.integers(0, T))
    runs = [r for r in [(0, cut), (cut, T)] if r[1] > r[0]]
    lo, hi = fit_pieces(runs, torch.from_numpy(seg), n, patch)
    if len(lo) == 0:
        return
    warm = int(warm_share * n)
    bw = BalancedWindows(lo, hi, n, warm, patch)
    start, y = bw.targets(torch.arange(T), torch.arange(bw.count))  # the labels are the bar indices
    counts = np.zeros(T, dtype=np.int64)
    for a, row in zip(start.tolist(), y.tolist(), strict=True):
        run = next(r for r in runs if r[0] <= a < r[1])
        assert a + n <= run[1]
        bars = [b for b in row if b >= 0]
        assert all((b - a) % patch == patch - 1 and b - a >= warm for b in bars)  # patch ends past the warm-up
        assert all(seg[b] == seg[a] for b in bars)
        np.add.at(counts, bars, 1)
    assert np.array_equal(bw.coverage(T), counts)
    assert bw.scored_per_window() == counts.sum() / bw.count
    for p_lo, p_hi in zip(lo.tolist(), hi.tolist(), strict=True):
        assert (counts[p_lo : p_lo + patch - 1] == 0).all()
        if warm == 0 and p_hi - p_lo >= n + patch - 1:
            assert (counts[p_lo + patch - 1 : p_hi] == n // patch).all()


def test_balanced_windows_of_patch_1_are_the_per_bar_windows():
    """patch = 1 is the published sampling, window for window: the clamp of v into the piece."""
    lo, hi, n, warm = torch.tensor([10, 40, 60]), torch.tensor([20, 45, 90]), 8, 2  # [40, 45) is shorter than n
    bw = BalancedWindows(lo, hi, n, warm)
    k = torch.arange(bw.count)
    piece = torch.searchsorted(bw.offset[1:], k, right=True)
    v = lo[piece] - n + 1 + k - bw.offset[piece]
    start = torch.maximum(torch.minimum(torch.maximum(v, lo[piece]), hi[piece] - n), lo[piece])
    published = (start, torch.maximum(torch.maximum(v, lo[piece]), start + warm), torch.minimum(v + n, hi[piece]))
    assert all(torch.equal(a, b) for a, b in zip(bw.windows(k), published, strict=True))


def test_real_fold_patch_tokens_weigh_every_scorable_training_bar_the_same(shared_store):
    """Patch 16 on the same real fold: every fit bar a patch inside its piece can end (all but the
    first 15 of each piece) has the same expected weight within 5 %, at n = 512 and 4096."""
    runs, seg, fit_idx = _real_fold(shared_store, "2021-01-01", "2021-09-30", 30)
    for n in [512, 4096]:
        lo, hi = fit_pieces(runs, seg, n, 16)
        bw = BalancedWindows(lo, hi, n, patch=16)
        weight = bw.coverage(len(seg)) / bw.count
        first = np.concatenate([np.arange(p, p + 15) for p in lo.tolist()])
        scorable = np.setdiff1d(fit_idx, first)
        assert (weight[first] == 0).all() and len(scorable) > 0.99 * len(fit_idx)
        assert np.abs(weight[scorable] / weight[scorable].mean() - 1).max() <= 0.05, n
