"""Context windows by index arithmetic: training windows inside gap-free segments, and
evaluation windows that score every test bar exactly once.

The series (features, labels) stays on the device as one (T, F) tensor; a window is just its
start index s and covers bars s .. s + n - 1. `gather_windows` materialises only the batch
``series[starts[:, None] + arange(n)]`` -- no copy of every window is ever made.

Segments: the series is cut after every gap of more than `max_gap_bars` missing bars; a
training window must lie inside one segment, so it never bridges a long outage (shorter gaps
stay inside segments and are announced by the gap features).

Coverage-balanced training windows (`BalancedWindows`): with uniformly drawn window starts, a
bar near either end of a training piece lies in fewer windows than a bar in the middle (at
N=131072, 22 % of a fold's bars were never trained on and the last week before the test block
weighed 0.06x). Instead, one draw picks one of the piece's L + n - 1 "virtual" windows
[v, v + n) that overlap it, uniformly over all pieces; the bars it scores are its bars inside
the piece, and it is realised as the real window inside the piece that holds them (shifted
right at the piece's start, left at its end; causal attention, so a shift only adds history)::

    piece [lo, hi), n = 4:     lo                 hi
    virtual v = lo - 2:  [= = S S]                    scores lo, lo+1 -> window [lo, lo+4), positions 0..1
    virtual v = lo + 3:        . . . [S S S S]        interior: the window itself, every position
    virtual v = hi - 1:                       [S = = =]  scores hi-1 -> window [hi-4, hi), position 3

Every bar of a piece lies in exactly n virtual windows, so every bar has the same chance of
being scored, at every n. A piece shorter than n bars (a segment between two long gaps: on
2021-2025 BTC one of 5 days, four of 23-47 days) is scored through the window [lo, lo + n): its
bars after the gap are not scored and, attention being causal, invisible to the scored ones, so
no scored position's context bridges the gap; only a piece too close to the end of its training
run for that (lo + n beyond it) holds no window. Without this, 22 % of fold 0's bars could not
be trained on at N=131072.

Patch tokens (`patch` = p > 1; `tsflash.model.transformer`): a model reads p bars per token
and forecasts only the bar ending each patch, so a window scores the bars of its range at
positions p - 1, 2p - 1, ..., n - 1. A virtual window is then realised by a shift of whole
patches (start = v, or the first start >= lo, or the last <= hi - n, on v's grid): the bars it
scores are exactly the patch ends of [v, v + n) inside the piece. Every bar of a piece but its
first p - 1 (no patch inside the piece ends there) is a patch end in exactly n / p of its n
virtual windows: equal weight again, every bar trained at some offset. A piece shorter than
n + p - 1 bars may start its windows up to p - 1 bars late (`fit_pieces` keeps it only if
that fits in its run) and is balanced approximately. Evaluation scores every bar once from a
window whose patch grid ends at it (`eval_windows` with `patch`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from tsflash.dataset.features import as_tensor
from tsflash.errors import UserError


def segment_ids(open_time_us, interval_us: int, max_gap_bars: int):
    """(T,) int64 segment id per bar: 0 at the start, +1 after each gap > `max_gap_bars` bars.

    A gap of g missing bars between consecutive bars means ``open_time[t] - open_time[t-1] ==
    (g + 1) * interval_us``. Returns a torch tensor on the input's device for a tensor input,
    else a numpy array. Ids are non-decreasing, so "same id" == "same contiguous segment".
    """
    if interval_us <= 0:
        raise UserError(f"interval_us must be > 0, got {interval_us}")
    if isinstance(max_gap_bars, bool) or not isinstance(max_gap_bars, (int, np.integer)) or max_gap_bars < 0:
        raise UserError(f"max_gap_bars must be an integer >= 0, got {max_gap_bars!r}")
    if isinstance(open_time_us, torch.Tensor):
        t = open_time_us.to(torch.int64)
        missing = (t[1:] - t[:-1]) // interval_us - 1  # (T-1,)
        breaks = (missing > max_gap_bars).to(torch.int64)
        return torch.cat([torch.zeros(min(len(t), 1), dtype=torch.int64, device=t.device), torch.cumsum(breaks, 0)])
    t = np.asarray(open_time_us, dtype=np.int64)
    missing = np.diff(t) // interval_us - 1
    return np.concatenate([np.zeros(min(len(t), 1), dtype=np.int64), np.cumsum(missing > max_gap_bars, dtype=np.int64)])


def window_starts(lo: int, hi: int, n: int, segment_ids) -> torch.Tensor:
    """Every start s of an n-bar window inside [lo, hi) and inside one segment: (W,) int64.

    Valid s: ``lo <= s``, ``s + n <= hi``, ``segment_ids[s] == segment_ids[s + n - 1]``.
    Ascending; empty when none fits (the caller decides whether that is an error). On the
    segment ids' device (CPU for numpy ids).

    Example: 12 bars, a long gap between bars 5 and 6, n = 4, [lo, hi) = [0, 12)::

        bar:       0 1 2 3 4 5 | 6 7 8 9 10 11
        segment:   0 0 0 0 0 0 | 1 1 1 1 1  1
        starts:    0 1 2         6 7 8           (3, 4, 5 would bridge the gap)
    """
    seg = segment_ids if isinstance(segment_ids, torch.Tensor) else as_tensor(segment_ids, torch.int64, "cpu")
    T = len(seg)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UserError(f"window length n must be an integer >= 1, got {n!r}")
    if not 0 <= lo <= hi <= T:
        raise UserError(f"window range must satisfy 0 <= lo <= hi <= T, got lo={lo}, hi={hi}, T={T}")
    if hi - lo < n:
        return torch.empty(0, dtype=torch.int64, device=seg.device)
    s = torch.arange(lo, hi - n + 1, device=seg.device)  # (W0,)
    same = seg[s] == seg[s + n - 1]
    return s[same]


def gather_windows(series: torch.Tensor, starts: torch.Tensor, n: int) -> torch.Tensor:
    """Batch of windows by index arithmetic: (T, ...) series, (B,) starts -> (B, n, ...).

    Works for features (T, F) -> (B, n, F) and labels (T,) -> (B, n). Starts must satisfy
    ``0 <= s`` and ``s + n <= T`` (not checked here: that would force a host sync per batch;
    `window_starts` and `eval_windows` only produce valid starts).
    """
    idx = starts.to(series.device).unsqueeze(1) + torch.arange(n, device=series.device)  # (B, n)
    return series[idx]  # (B, n, ...)


def check_window_length(n, where: str = "n") -> int:
    """The engine's rule for a context length: an even integer >= 2, because `eval_windows`
    strides by n/2 and scores the last half of each window. `where` names the caller's value.

    This is the structural rule; the experiment's policy for lengths a user asks for (powers of
    two, `tsflash.config.check_context_length`) is stricter and applied where they are read.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2 or n % 2:
        raise UserError(f"{where} must be an even integer >= 2, got {n!r}")
    return int(n)


def eval_windows(test_lo: int, test_hi: int, n: int, device="cpu", patch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows that score every test bar in [test_lo, test_hi) exactly once: (starts, score_from).

    Window w covers bars ``starts[w] .. starts[w] + n - 1`` and scores its positions
    ``score_from[w] .. n - 1``. The stride is n/2 and each window scores its last half, so a
    scored bar at position p sees a context of p + 1 bars (window start to the bar itself), with
    ``n/2 < p + 1 <= n``. The first window starts n/2 bars BEFORE the test block: those bars are
    legitimate history (they precede every scored bar), hence ``test_lo >= n/2`` is required.
    If the block length is not a multiple of n/2, the last window is pulled back to end exactly
    at ``test_hi`` and scores only the bars not yet scored (their context is even longer), so no
    window ever reads a bar at or after ``test_hi``; that needs ``test_hi >= n``.

    n = 8 (stride 4), test block [8, 18) of 10 bars; ``=`` context only, ``S`` scored::

        bar:        0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17
        test:                               #  #  #  #  #  #  #  #  #  #
        window 0:               =  =  =  =  S  S  S  S                     start 4, score_from 4
        window 1:                           =  =  =  =  S  S  S  S         start 8, score_from 4
        window 2:                                 =  =  =  =  =  =  S  S   start 10, score_from 6

    Evaluation contexts may span gaps of the series: every test bar must be scored with
    history, and the gap features tell the model where bars are missing.

    Patch tokens (`patch` > 1): a window scores only the bars ending one of its patches, the
    positions p >= score_from with (p + 1) % patch == 0 (`_patch_eval_windows`).
    """
    n = check_window_length(n, "eval window length n")
    half = n // 2
    if test_hi <= test_lo:
        raise UserError(f"test block must be non-empty (test_lo < test_hi), got test_lo={test_lo}, test_hi={test_hi}")
    if patch > 1:
        return _patch_eval_windows(test_lo, test_hi, n, patch, device)
    if test_lo < half:
        raise UserError(
            f"eval windows need n/2={half} bars of history before the test block, got test_lo={test_lo} (n={n})"
        )
    if test_hi < n:
        raise UserError(
            f"eval windows need test_hi >= n={n} so the last window fits in the series, got test_hi={test_hi}"
        )
    n_regular = (test_hi - test_lo) // half
    starts = test_lo - half + half * torch.arange(n_regular, dtype=torch.int64)  # (K,)
    score_from = torch.full((n_regular,), half, dtype=torch.int64)
    scored_to = test_lo + n_regular * half  # first bar not yet scored
    if scored_to < test_hi:
        last = test_hi - n
        starts = torch.cat([starts, torch.tensor([last])])
        score_from = torch.cat([score_from, torch.tensor([scored_to - last])])
    return starts.to(device), score_from.to(device)


def _patch_eval_windows(test_lo: int, test_hi: int, n: int, patch: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """`eval_windows` for patch tokens: each test bar scored once, from a window whose patch grid
    ends at that bar, with a context of n/2 < (p + 1) <= n bars as at patch 1.

    The bars of one residue class mod patch end patches of the same grid: class c's bars are the
    tokens j of the grid whose j-th patch ends at bar e(j) = r + patch - 1 + j * patch (r, the first
    bar of token 0, in [0, patch)). Each class is scored by the per-bar rule on its tokens (windows
    of n / patch tokens, stride half of them, each scoring its last half), mapped back to bars. So
    patch classes of windows, each scoring n / (2 patch) bars per window: the eval compute of
    patch 1 times `patch` (at most; the attention per window is (n / patch)^2, not n^2). The
    first class needs n/2 + patch - 1 bars of history before the test block, and the last
    window of a class ends at its last test bar, never later.
    """
    n_tokens, half = n // patch, n // 2
    if test_lo < half + patch - 1 or test_hi < n + patch - 1:
        raise UserError(f"eval windows of n={n} bars in patches of {patch} need test_lo >= n/2 + patch - 1 = "
                        f"{half + patch - 1} (history) and test_hi >= n + patch - 1 = {n + patch - 1}, "
                        f"got test_lo={test_lo}, test_hi={test_hi}")
    starts, score_from = [], []
    for first in range(test_lo, min(test_lo + patch, test_hi)):  # the first test bar of each class
        r = (first + 1) % patch  # the first bar of the grid's token 0
        j_lo = (first - r - patch + 1) // patch  # the class's first test bar, as a token
        token_starts, token_from = eval_windows(j_lo, j_lo + len(range(first, test_hi, patch)), n_tokens)
        starts.append(r + token_starts * patch)
        score_from.append(token_from * patch)
    return torch.cat(starts).to(device), torch.cat(score_from).to(device)


def fit_pieces(runs: list[tuple[int, int]], segment_ids: torch.Tensor, n: int, patch: int = 1
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The pieces [lo, hi) of the training runs [run_lo, run_hi) cut at segment breaks, those
    that an n-bar window inside their run can score (lo + n <= run_hi; module doc; with patch
    tokens the window may start up to patch - 1 bars later: lo + n + patch - 1 <= run_hi):
    (pieces,) lo and (pieces,) hi, int64 on the segment ids' device, in order."""
    seg = segment_ids if isinstance(segment_ids, torch.Tensor) else as_tensor(segment_ids, torch.int64, "cpu")
    los, his = [], []
    for lo, hi in runs:
        cut = torch.nonzero(seg[lo + 1 : hi] != seg[lo : hi - 1]).flatten() + lo + 1  # first bar of each new segment
        piece_lo = torch.cat([torch.tensor([lo], device=seg.device), cut])
        keep = piece_lo + n + patch - 1 <= hi
        los.append(piece_lo[keep])
        his.append(torch.cat([cut, torch.tensor([hi], device=seg.device)])[keep])
    empty = torch.empty(0, dtype=torch.int64, device=seg.device)
    return torch.cat(los) if los else empty, torch.cat(his) if his else empty


@dataclass
class BalancedWindows:
    """Coverage-balanced training windows of n bars over pieces [lo, hi) (module doc).

    Draw k uniformly from range(count); `windows(k)` gives the real window start and the range
    [score_lo, score_hi) of bars it scores. `warm` > 0 also leaves out each window's first
    `warm` positions (the loss warm-up), whose context is short. `patch` > 1 (patch tokens):
    of that range only the bars ending a patch of the window are scored (module doc).
    """

    lo: torch.Tensor  # (pieces,) int64
    hi: torch.Tensor  # (pieces,) int64
    n: int
    warm: int = 0
    patch: int = 1

    def __post_init__(self):
        per_piece = self.hi - self.lo + self.n - 1  # virtual windows overlapping each piece: (P,)
        self.offset = torch.cat([torch.zeros(1, dtype=torch.int64, device=self.lo.device), torch.cumsum(per_piece, 0)])

    @property
    def count(self) -> int:
        return int(self.offset[-1])

    def windows(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(start, score_lo, score_hi), each (B,) int64, for virtual-window indices k (B,)."""
        k = k.to(self.lo.device)
        piece = torch.searchsorted(self.offset[1:], k, right=True)  # (B,)
        lo, hi, n, p = self.lo[piece], self.hi[piece], self.n, self.patch
        v = lo - n + 1 + (k - self.offset[piece])  # virtual window [v, v + n)
        # the real start: v shifted into the piece by whole patches, so that the virtual window's
        # patch grid is kept (p = 1: v clamped to [lo, hi - n])
        first = lo + (v - lo) % p  # the first start >= lo on v's grid
        last = hi - n - (hi - n - v) % p  # the last start <= hi - n on v's grid
        start = torch.where(v < lo, first, torch.where(v > hi - n, last, v))
        start = torch.where(start < lo, first, start)  # a piece shorter than n + p - 1 (`fit_pieces` span)
        score_lo = torch.maximum(torch.maximum(v, lo), start + self.warm)
        return start, score_lo, torch.minimum(torch.minimum(v + n, hi), start + n)

    def targets(self, labels: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(start (B,), y (B, n)): the windows' labels, -1 where a bar is not scored."""
        start, score_lo, score_hi = self.windows(k)
        bar = start[:, None] + torch.arange(self.n, device=start.device)  # (B, n)
        y = labels[bar]  # (B, n)
        skip = (bar < score_lo[:, None]) | (bar >= score_hi[:, None])
        if self.patch > 1:
            skip |= (bar - start[:, None]) % self.patch != self.patch - 1  # not a patch end
        return start, y.masked_fill(skip, -1)

    def coverage(self, length: int) -> np.ndarray:
        """(length,) int64: in how many of the `count` windows each bar is scored (exact, index arithmetic)."""
        windows = self.windows(torch.arange(self.count, device=self.lo.device))
        return patch_end_coverage(*(t.cpu().numpy() for t in windows), self.patch, length)

    def scored_per_window(self) -> float:
        """The mean number of scored positions per window, over all `count` windows (exact)."""
        start, score_lo, score_hi = self.windows(torch.arange(self.count, device=self.lo.device))
        p = self.patch  # the patch ends in [score_lo, score_hi): bars b with (b - start + 1) % p == 0
        ends = (score_hi - start).div(p, rounding_mode="floor") - (score_lo - start).div(p, rounding_mode="floor")
        return float(ends.clamp_min(0).sum()) / self.count


def patch_end_coverage(start: np.ndarray, lo: np.ndarray, hi: np.ndarray, patch: int, length: int) -> np.ndarray:
    """(length,) int64: how many windows score each bar, window i scoring the bars of [lo_i, hi_i)
    that end a patch of `patch` bars counted from start_i (every bar of it for patch 1). The
    bars a window scores are those of one residue class mod patch: a range of that class's bars."""
    start, lo, hi = (np.asarray(a, dtype=np.int64) for a in (start, lo, hi))
    out = np.zeros(length, dtype=np.int64)
    ends = (start + patch - 1) % patch  # the residue of the window's patch-end bars
    for r in range(min(patch, length)):
        mine = ends == r
        # class r's bars r, r + patch, ...: the j-th is bar r + j * patch; [lo, hi) holds j in [ceil, ceil)
        j_lo, j_hi = (-((r - a[mine]) // patch) for a in (lo, hi))
        out[r::patch] = range_coverage(j_lo, j_hi, len(range(r, length, patch)))
    return out


def range_coverage(lo: np.ndarray, hi: np.ndarray, length: int) -> np.ndarray:
    """(length,) int64: how many of the ranges [lo_i, hi_i) hold each index (empty ranges count 0)."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    keep = hi > lo
    diff = np.zeros(length + 1, dtype=np.int64)
    np.add.at(diff, lo[keep], 1)
    np.add.at(diff, hi[keep], -1)
    return np.cumsum(diff[:-1])
