"""The input checks every statistic shares: `SelectionInputError`, raised on bad input with a
message that names the rule and the values; returns arrays (shape, length, finite); ddof; and
the rule for a series too constant to have a Sharpe ratio."""

from __future__ import annotations

import numpy as np

from tsflash.errors import UserError

# A series is constant when its std is at this level relative to its largest |value|: the mean of
# a constant series is not exact in floating point, so its computed std is ~1e-18, not 0.
REL_STD_FLOOR = 1e-12


class SelectionInputError(UserError, ValueError):
    """Bad input to a selection statistic; the message names the rule and the offending values."""


def returns_array(returns, name: str = "returns", ndim: int = 1, min_len: int = 2) -> np.ndarray:
    """`returns` as a finite float64 array of `ndim` dimensions with at least `min_len` rows."""
    x = np.asarray(returns, dtype=np.float64)
    if x.ndim != ndim:
        raise SelectionInputError(f"{name} must be a {ndim}-D array, got shape {x.shape}")
    if x.shape[0] < min_len:
        raise SelectionInputError(f"{name} needs at least {min_len} periods, got {x.shape[0]}")
    bad = ~np.isfinite(x)
    if bad.any():
        where = np.argwhere(bad)[0].tolist()
        raise SelectionInputError(
            f"{name} must be finite (no NaN or inf), got {int(bad.sum())} non-finite value(s), "
            f"first at index {where[0] if ndim == 1 else tuple(where)}"
        )
    return x


def check_ddof(ddof, t: int) -> int:
    """`ddof` (0 or 1) of a standard deviation over `t` periods."""
    if ddof not in (0, 1):
        raise SelectionInputError(f"ddof must be 0 or 1, got {ddof}")
    if t - ddof < 1:
        raise SelectionInputError(f"the standard deviation needs more periods than ddof={ddof}, got {t}")
    return int(ddof)


def is_constant(std, x: np.ndarray):
    """Whether each column of `x` (or a 1-D `x`) with standard deviation `std` is constant."""
    return std <= REL_STD_FLOOR * np.abs(x).max(axis=0)
