"""Up / flat / down targets from the forward log return over h bars, gap-aware.

Conventions
-----------
* ``fwd[t] = log(close[t + h] / close[t])``: the return of a position opened at bar t's close and
  closed h bars later. It is defined only when bar t + h exists AND lies exactly h intervals
  after bar t (``open_time[t + h] - open_time[t] == h * interval``), i.e. no bar inside the
  horizon is missing; otherwise it is NaN and the bar gets no label and no loss.
* Class indices (everywhere in tsflash): 0 = down, 1 = flat, 2 = up (``CLASS_NAMES``).
* The flat band ``[-thr, thr]`` is fitted on a fold's TRAINING labels only: ``thr`` is the
  ``flat_fraction`` quantile of ``|fwd|`` over the labelled training bars, so about that share
  of training bars is flat and the rest splits into up and down by the sign (1/3 gives roughly
  balanced classes). Ties at exactly 0 (bars with no price change, common in 2017-2018) can make
  the flat share a little larger than requested.

Leakage: ``fwd[t]`` looks at bars t+1 .. t+h, so a training bar needs ``t + h`` before the test
block; `tsflash.dataset.splits.WalkForward` with ``purge >= h`` guarantees it.
"""

from __future__ import annotations

import torch

from tsflash.dataset.features import as_tensor
from tsflash.errors import UserError

CLASS_NAMES = ("down", "flat", "up")
DOWN, FLAT, UP = 0, 1, 2
IGNORE = -1  # label of bars without a forward return (targets == -1 carry no loss)


def forward_log_returns(bars_close, open_time_us, horizon: int, interval_us: int) -> torch.Tensor:
    """Forward log return over `horizon` bars: (T,) float64, NaN where undefined.

    bars_close : (T,) float prices (tensor or numpy); computed in float64 on its device.
    open_time_us : (T,) int64 bar open times in microseconds, sorted.
    NaN where t + horizon runs past the end or the horizon spans a missing bar.
    """
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise UserError(f"label horizon must be an integer >= 1 bar, got {horizon!r}")
    if interval_us <= 0:
        raise UserError(f"interval_us must be > 0, got {interval_us}")
    device = bars_close.device if isinstance(bars_close, torch.Tensor) else "cpu"
    close = as_tensor(bars_close, torch.float64, device)  # (T,)
    t_us = as_tensor(open_time_us, torch.int64, device)  # (T,)
    if close.shape != t_us.shape or close.dim() != 1:
        raise UserError(
            f"close and open_time must be 1-D of equal length, got {tuple(close.shape)} and {tuple(t_us.shape)}"
        )
    fwd = torch.full_like(close, float("nan"))
    if len(close) > horizon:
        ret = torch.log(close[horizon:] / close[:-horizon])  # (T - h,)
        contiguous = (t_us[horizon:] - t_us[:-horizon]) == horizon * interval_us
        fwd[:-horizon] = torch.where(contiguous, ret, torch.full_like(ret, float("nan")))
    return fwd


def fit_flat_band(fwd: torch.Tensor, train_idx, flat_fraction: float) -> float:
    """Threshold ``thr`` on |fwd| such that about `flat_fraction` of labelled TRAINING bars are flat.

    fwd : (T,) forward log returns (NaN = unlabelled); train_idx : indices of the fold's
    training bars (only these are read). Returns the `flat_fraction` quantile (linear
    interpolation) of ``|fwd[train_idx]|`` over the non-NaN entries.
    """
    if not 0.0 < flat_fraction < 1.0:
        raise UserError(f"flat_fraction must be in (0, 1), got {flat_fraction}")
    idx = as_tensor(train_idx, torch.int64, fwd.device)
    values = fwd[idx].to(torch.float64).abs()
    values = values[~torch.isnan(values)]
    if values.numel() == 0:
        raise UserError(
            f"cannot fit the flat band: none of the {idx.numel()} training bars has a forward return "
            f"(horizon past the end or across gaps)"
        )
    # two order statistics + linear interpolation (numpy's default quantile), instead of
    # torch.quantile, which refuses inputs above 16M elements; kthvalue is O(n), a sort is not
    pos = flat_fraction * (values.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, values.numel() - 1)
    v_lo = torch.kthvalue(values, lo + 1).values
    v_hi = torch.kthvalue(values, hi + 1).values if hi != lo else v_lo
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def make_labels(fwd: torch.Tensor, threshold: float) -> torch.Tensor:
    """(T,) int64: 0 down (fwd < -thr), 1 flat (|fwd| <= thr), 2 up (fwd > thr), -1 where fwd is NaN."""
    if threshold < 0:
        raise UserError(f"flat threshold must be >= 0, got {threshold}")
    labels = torch.full(fwd.shape, FLAT, dtype=torch.int64, device=fwd.device)
    labels[fwd > threshold] = UP
    labels[fwd < -threshold] = DOWN
    labels[torch.isnan(fwd)] = IGNORE
    return labels
