"""Causal per-bar features computed on tensors (CPU or CUDA), and a train-only normaliser.

`compute_features(bars)` returns a (T, F) float32 tensor whose row t uses bars 0..t only (each
column below is a function of bar t and earlier bars), so any prefix of the series gives the
same rows. Arithmetic runs in float64 on `device` and is cast to float32 at the end; no polars,
no Python loop over bars. Normalisation is NOT applied here: `Normalizer.fit` uses the training
rows of a fold only, so nothing from the test period shapes the inputs.

Columns (``FEATURE_NAMES``), with the convention for the first bar and for degenerate bars:

==================  ============================================================================
log_return          log(close[t] / close[t-1]); 0 at t = 0. Across a gap: the return since the
                    last bar that exists (the gap columns tell the model how long it was).
log_range           log(high[t] / low[t]); 0 when high == low.
close_location      (close - low) / (high - low): where the close sits in the bar's range, a
                    cheap buying/selling pressure signal; 0.5 when high == low.
log_volume          log1p(volume[t]) (base asset); volume spans orders of magnitude.
log_volume_change   log_volume[t] - log_volume[t-1]; 0 at t = 0.
taker_buy_share     taker_buy_base / volume, in [0, 1]; 0.5 (no imbalance) when volume == 0.
log_trades          log1p(trades[t]).
time_of_day_sin/cos sin/cos(2 pi * (seconds since 00:00 UTC) / 86400): intraday seasonality
                    without a jump at midnight. From the bar's timestamp, not a bar count, so
                    it is right at any interval (1s .. 1d) and across gaps.
day_of_week_sin/cos sin/cos(2 pi * weekday / 7), weekday 0 = Monday (UTC).
gap_marker          1.0 if bar t comes right after one or more missing bars, else 0.0.
log_gap_bars        log1p(number of missing bars between bar t-1 and bar t); 0 at t = 0.
log_realized_vol    log(sqrt(mean(log_return^2 over the last REALIZED_VOL_BARS bars, t
                    included)) + 1e-5); fewer bars at the start of the series. Why: volatility
                    regimes differ by an order of magnitude across years, and a fold-wide
                    normaliser cannot remove that; the trailing 60 bars tell every model the
                    current regime. Its memory (60 bars) is far below the smallest context
                    length studied (512), so it adds no long-range information that would blur
                    the comparison between context lengths.
==================  ============================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tsflash.errors import UserError
from tsflash.intervals import INTERVAL_US, US_PER_DAY

FEATURE_NAMES: tuple[str, ...] = (
    "log_return",
    "log_range",
    "close_location",
    "log_volume",
    "log_volume_change",
    "taker_buy_share",
    "log_trades",
    "time_of_day_sin",
    "time_of_day_cos",
    "day_of_week_sin",
    "day_of_week_cos",
    "gap_marker",
    "log_gap_bars",
    "log_realized_vol",
)

# Trailing window of log_realized_vol, in bars at every interval (an hour of 1-minute bars, a minute
# of 1-second bars): in bars on purpose, so that its memory stays far below the smallest N at any
# interval and adds no long-range information to the comparison between context lengths.
REALIZED_VOL_BARS = 60
_VOL_FLOOR = 1e-5  # keeps log finite on flat stretches (zero-trade bars of 2017-2018)


def as_tensor(x, dtype: torch.dtype, device) -> torch.Tensor:
    """numpy array / sequence / tensor -> tensor of `dtype` on `device` (copies read-only arrays)."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    arr = np.asarray(x)
    if not arr.flags.writeable or not arr.flags.c_contiguous:  # pyarrow zero-copy arrays are read-only
        arr = np.array(arr, copy=True, order="C")
    return torch.from_numpy(arr).to(device=device, dtype=dtype)


def interval_us_of(bars) -> int:
    """The bar interval in microseconds, from `bars.interval` (e.g. "1m")."""
    if bars.interval not in INTERVAL_US:
        raise UserError(f"unknown bar interval {bars.interval!r}; known: {', '.join(INTERVAL_US)}")
    return INTERVAL_US[bars.interval]


def _lag_diff(x: torch.Tensor) -> torch.Tensor:
    """x[t] - x[t-1], with 0 at t = 0."""
    out = torch.zeros_like(x)
    out[1:] = x[1:] - x[:-1]
    return out


def trailing_mean(x: torch.Tensor, window: int) -> torch.Tensor:
    """Mean of x[max(0, t - window + 1) .. t] for every t: (T,) -> (T,) float64.

    Each output is its own window sum (avg_pool1d over a left zero-padded series), not a
    difference of a running cumsum: row t is bitwise independent of bars after t on any device
    (a parallel scan on CUDA may round a prefix differently depending on the series length).
    """
    padded = F.pad(x.to(torch.float64).view(1, 1, -1), (window - 1, 0))  # (1, 1, T + w - 1)
    total = F.avg_pool1d(padded, window, stride=1).view(-1) * window  # (T,)
    count = torch.clamp(torch.arange(1, len(x) + 1, device=x.device, dtype=torch.float64), max=window)
    return total / count


def compute_features(bars, device="cpu", interval_us: int | None = None) -> torch.Tensor:
    """Causal features of every bar: (T, F) float32 on `device`, F = len(FEATURE_NAMES).

    bars : a `tsflash.data.store.Bars` (or any object with its numpy columns: open_time int64 us
        UTC, open, high, low, close, volume, taker_buy_base float, trades int).
    interval_us : bar length in microseconds; default from ``bars.interval``.

    Row t depends on bars 0..t only. Not normalised (see `Normalizer`).
    """
    if interval_us is None:
        interval_us = interval_us_of(bars)
    if len(bars.close) == 0:
        raise UserError("compute_features needs at least one bar, got 0")
    columns = ("open_time", "high", "low", "close", "volume", "taker_buy_base", "trades")
    lengths = {name: len(getattr(bars, name)) for name in columns}
    if len(set(lengths.values())) != 1:
        raise UserError(f"bars columns must have equal lengths, got {lengths}")
    f64 = torch.float64
    t_us = as_tensor(bars.open_time, torch.int64, device)  # (T,)
    low = as_tensor(bars.low, f64, device)
    bad = torch.nonzero(low <= 0)  # one host sync per call, not per bar: log() of a 0 price is -inf
    if len(bad):
        i = int(bad[0])
        raise UserError(
            f"prices must be > 0 for log features, got low={float(low[i])} at bar {i} (of {len(bad)} such bars)"
        )
    # Each column is computed in float64 and written straight into the float32 output, so that a
    # year of 1-second bars (31.5 M rows) holds a few float64 columns at a time, not all fourteen.
    out = torch.empty(len(t_us), len(FEATURE_NAMES), dtype=torch.float32, device=device)  # (T, F)
    col = {name: out[:, j] for j, name in enumerate(FEATURE_NAMES)}  # (T,) views

    close = as_tensor(bars.close, f64, device)
    log_return = _lag_diff(torch.log(close))
    col["log_return"].copy_(log_return)
    high = as_tensor(bars.high, f64, device)
    col["log_range"].copy_(torch.log(high / low))
    span = high - low
    col["close_location"].copy_(torch.where(span > 0, (close - low) / torch.where(span > 0, span, 1.0), 0.5))
    del high, low, close, span
    volume = as_tensor(bars.volume, f64, device)
    log_volume = torch.log1p(volume)
    col["log_volume"].copy_(log_volume)
    col["log_volume_change"].copy_(_lag_diff(log_volume))
    taker = as_tensor(bars.taker_buy_base, f64, device)
    col["taker_buy_share"].copy_(torch.where(volume > 0, taker / torch.where(volume > 0, volume, 1.0), 0.5).clamp(0.0, 1.0))
    del volume, log_volume, taker
    col["log_trades"].copy_(torch.log1p(as_tensor(bars.trades, f64, device)))

    # Calendar columns from each bar's own timestamp (never from a bar count), so they are right
    # at every interval and across gaps.
    day_angle = (t_us % US_PER_DAY).to(f64) * (2 * math.pi / US_PER_DAY)
    col["time_of_day_sin"].copy_(torch.sin(day_angle))
    col["time_of_day_cos"].copy_(torch.cos(day_angle))
    weekday = ((t_us // US_PER_DAY) + 3) % 7  # 1970-01-01 was a Thursday (weekday 3)
    week_angle = weekday.to(f64) * (2 * math.pi / 7)
    col["day_of_week_sin"].copy_(torch.sin(week_angle))
    col["day_of_week_cos"].copy_(torch.cos(week_angle))
    del day_angle, weekday, week_angle

    missing = torch.zeros_like(log_return)
    missing[1:] = ((t_us[1:] - t_us[:-1]) // interval_us - 1).clamp_min(0).to(f64)
    col["gap_marker"].copy_((missing > 0).to(f64))
    col["log_gap_bars"].copy_(torch.log1p(missing))
    del missing

    realized_var = trailing_mean(log_return.square(), REALIZED_VOL_BARS)
    col["log_realized_vol"].copy_(torch.log(realized_var.sqrt() + _VOL_FLOOR))
    return out


@dataclass
class Normalizer:
    """Per-feature standardisation fitted on a fold's training rows only.

    ``apply(x) = clamp((x - mean) / std, -clip, clip)``. A feature that is constant on the
    training rows (std < 1e-8) gets std = 1 so it is centred, not blown up. The clip bounds the
    fat tails of 1-minute returns (a crash bar at 40 sigma would otherwise dominate a batch);
    clip = None disables it.
    """

    mean: torch.Tensor  # (F,) float32
    std: torch.Tensor  # (F,) float32, > 0
    clip: float | None = 10.0

    @classmethod
    def fit(cls, features: torch.Tensor, train_idx, clip: float | None = 10.0) -> Normalizer:
        """Mean and (population) std of ``features[train_idx]``; reads no other row.

        train_idx : int indices (numpy or tensor). A contiguous numpy range is read as a slice
        (no gather copy of the training rows). `torch.var_mean` in float32 agrees with a float64
        computation to about 1e-7 relative on the real series.
        """
        if len(train_idx) == 0:
            raise UserError("Normalizer.fit needs at least one training row, got train_idx of length 0")
        if isinstance(train_idx, torch.Tensor):
            rows = features[train_idx.to(features.device)]  # (n_train, F)
        else:
            idx = np.asarray(train_idx, dtype=np.int64)
            if idx[-1] - idx[0] + 1 == len(idx) and np.all(np.diff(idx) == 1):
                rows = features[int(idx[0]) : int(idx[-1]) + 1]  # (n_train, F), a view
            else:
                rows = features[torch.from_numpy(idx).to(features.device)]
        var, mean = torch.var_mean(rows.to(torch.float32), dim=0, correction=0)  # (F,), (F,)
        std = var.sqrt()
        std = torch.where(std < 1e-8, torch.ones_like(std), std)
        return cls(mean=mean, std=std, clip=clip)

    def apply(self, features: torch.Tensor) -> torch.Tensor:
        """(…, F) -> (…, F) float32 on the features' device."""
        mean = self.mean.to(features.device)
        std = self.std.to(features.device)
        out = (features - mean) / std
        if self.clip is not None:
            out = out.clamp(-self.clip, self.clip)
        return out

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "clip": self.clip}

    @classmethod
    def from_dict(cls, d: dict) -> Normalizer:
        return cls(
            mean=torch.tensor(d["mean"], dtype=torch.float32),
            std=torch.tensor(d["std"], dtype=torch.float32),
            clip=d["clip"],
        )
