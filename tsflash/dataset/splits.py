"""Walk-forward splits with a purge before every test block (numpy only, no torch).

`WalkForward` has scikit-learn's splitter shape: the constructor only stores its parameters,
`split(X)` validates them against the number of samples and yields `(train_idx, test_idx)`.

Conventions
-----------
Indices are bar positions 0 .. n_samples - 1 in time order. The `n_splits` test blocks have
`test_size` bars each, are contiguous, consecutive and non-overlapping, and the LAST block ends
at the last sample. Fold k trains on every index before `test_start_k - purge` (expanding), or
on the last `train_size` of them (rolling), minus the embargoed bars after earlier test blocks.

Three folds over 50 bars (test_size = 10, purge = 3, embargo = 2; ``T`` train, ``#`` test,
``.`` purged or embargoed, ``-`` not used by that fold), as `draw_folds` prints them::

    >>> folds = list(WalkForward(n_splits=3, test_size=10, purge=3, embargo=2).split(50))
    >>> print(draw_folds(50, folds))
    TTTTTTTTTTTTTTTTT...##########--------------------
    TTTTTTTTTTTTTTTTTTTTTTTTTTT...##########----------
    TTTTTTTTTTTTTTTTTTTTTTTTTTTTTT..TTTTT...##########

In fold 2, bars 30-31 (``..`` in the middle) are the embargo after fold 0's test block 20-29,
and bars 37-39 (``...``) are the purge before its own test block 40-49.

The same with a rolling window of ``train_size = 12``::

    >>> folds = list(WalkForward(3, 10, train_size=12, purge=3, embargo=2).split(50))
    >>> print(draw_folds(50, folds))
    -----TTTTTTTTTTTT...##########--------------------
    ---------------TTTTTTTTTTTT...##########----------
    -------------------------TTTTT..TTTTT...##########

Look-ahead warning: a training sample at index t carries a label built from bars t+1 .. t+h
(h = the label horizon). With ``purge >= h`` no training label reaches into the test block:
``train_idx.max() + purge < test_idx.min()`` implies ``train_idx.max() + h < test_idx.min()``.
``purge = 0`` is only safe for labels that use nothing after their own bar.

The embargo only matters where training data lies AFTER a test block. In a walk-forward that
happens in later folds, which train on earlier test blocks: the embargo drops the first
`embargo` bars after each earlier test block from their training set (de Prado's embargo for
purged k-fold, for features with a trailing memory). With ``embargo = 0`` later folds train on
everything before their purge.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator

import numpy as np

from tsflash.errors import UserError


def _num_samples(X) -> int:
    """Number of samples of an array-like (or an int meaning that many samples)."""
    if isinstance(X, numbers.Integral):
        return int(X)
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    try:
        return len(X)
    except TypeError:
        raise UserError(f"split(X): X must be an int or have a length, got {type(X).__name__}") from None


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class WalkForward:
    """Walk-forward splitter: consecutive test blocks at the end, training strictly before them.

    Parameters
    ----------
    n_splits : int, default 5
        Number of folds (test blocks), >= 1.
    test_size : int or None, default None
        Bars per test block; None uses ``n_samples // (n_splits + 1)`` like scikit-learn's
        ``TimeSeriesSplit``.
    train_size : int or None, default None
        None: expanding window (all bars before the purge). An int: rolling window of the last
        ``train_size`` bars before the purge; every fold must have that much history.
    purge : int, default 0
        Bars dropped between training and each test block; set it to the label horizon.
    embargo : int, default 0
        Bars dropped from training right after each earlier test block.

    Yields (from `split`)
    ---------------------
    train_idx : ndarray of shape (n_train,), int64, sorted
    test_idx : ndarray of shape (test_size,), int64, contiguous

    Guarantee: ``train_idx.max() + purge < test_idx.min()`` for every fold.

    Examples
    --------
    >>> cv = WalkForward(n_splits=3, test_size=4, purge=2)
    >>> for tr, te in cv.split(20):
    ...     print(tr.min(), tr.max(), te.min(), te.max())
    0 5 8 11
    0 9 12 15
    0 13 16 19
    """

    def __init__(
        self,
        n_splits: int = 5,
        test_size: int | None = None,
        train_size: int | None = None,
        purge: int = 0,
        embargo: int = 0,
    ):
        self.n_splits = n_splits
        self.test_size = test_size
        self.train_size = train_size
        self.purge = purge
        self.embargo = embargo

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def __repr__(self) -> str:
        return (
            f"WalkForward(n_splits={self.n_splits}, test_size={self.test_size}, "
            f"train_size={self.train_size}, purge={self.purge}, embargo={self.embargo})"
        )

    def _validated(self, n_samples: int) -> tuple[int, int, int | None, int, int]:
        n_splits = _check_int("n_splits", self.n_splits, 1)
        purge = _check_int("purge", self.purge, 0)
        embargo = _check_int("embargo", self.embargo, 0)
        train_size = None if self.train_size is None else _check_int("train_size", self.train_size, 1)
        if self.test_size is None:
            test_size = n_samples // (n_splits + 1)
            if test_size < 1:
                raise UserError(
                    f"Too many splits={n_splits} for number of samples={n_samples}: "
                    f"the default test_size = n_samples // (n_splits + 1) is 0"
                )
        else:
            test_size = _check_int("test_size", self.test_size, 1)
        first_train = 1 if train_size is None else train_size
        need = min_samples(n_splits, test_size, purge, first_train)
        if n_samples < need:
            what = "at least 1 training sample" if train_size is None else f"train_size={train_size} training samples"
            raise UserError(
                f"Too many splits={n_splits} for number of samples={n_samples} with test_size={test_size} "
                f"and purge={purge}: the first fold needs {what}, i.e. n_samples >= "
                f"n_splits * test_size + purge + {first_train} = {need}"
            )
        return n_splits, test_size, train_size, purge, embargo

    def split(self, X, y=None, groups=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_idx, test_idx)`` per fold, oldest test block first.

        X : array-like of shape (n_samples, ...) or an int n_samples.
        """
        n_samples = _num_samples(X)
        params = self._validated(n_samples)
        folds = walk_forward_folds(n_samples, *params)
        for k, (train_idx, _) in enumerate(folds):
            if len(train_idx) == 0:  # only a rolling window shorter than the embargo gets here
                raise UserError(
                    f"embargo={params[4]} removes every training sample of fold {k} "
                    f"(train_size={params[2]}, test_size={params[1]}); use a smaller embargo or a longer train_size"
                )
        yield from folds


def min_samples(n_splits: int, test_size: int, purge: int = 0, first_train: int = 1) -> int:
    """The fewest samples a walk-forward fits: its n_splits test blocks and, before the first of
    them, the purge and the `first_train` samples the first fold trains on (1 for an expanding
    window, train_size for a rolling one; more where a caller keeps a validation tail there).
    The one feasibility rule: `WalkForward.split` and `tsflash.config.validate` both apply it."""
    return n_splits * test_size + purge + first_train


def walk_forward_folds(
    n_samples: int, n_splits: int, test_size: int, train_size: int | None, purge: int, embargo: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The folds of `WalkForward` for already validated parameters (pure function)."""
    first_test = n_samples - n_splits * test_size
    test_starts = first_test + test_size * np.arange(n_splits, dtype=np.int64)
    folds = []
    for k, start in enumerate(test_starts.tolist()):
        train_end = start - purge  # exclusive
        train_lo = 0 if train_size is None else train_end - train_size
        keep = np.ones(train_end - train_lo, dtype=bool)
        if embargo:
            for prev in test_starts[:k].tolist():  # at most n_splits blocks: no loop over bars
                e_lo, e_hi = prev + test_size - train_lo, prev + test_size + embargo - train_lo
                keep[max(e_lo, 0) : max(min(e_hi, len(keep)), 0)] = False
        train_idx = np.arange(train_lo, train_end, dtype=np.int64)[keep]
        test_idx = np.arange(start, start + test_size, dtype=np.int64)
        assert len(train_idx) == 0 or train_idx.max() + purge < test_idx.min()
        folds.append((train_idx, test_idx))
    return folds


def draw_folds(n_samples: int, folds) -> str:
    """One text line per fold: ``T`` train, ``#`` test, ``.`` purged/embargoed gap, ``-`` unused.

    A bar between the first training bar and the test block that is not trained on is a gap
    (``.``); bars after the test block, or before a rolling window, are unused (``-``).
    """
    lines = []
    for train_idx, test_idx in folds:
        row = np.full(n_samples, "-", dtype="<U1")
        lo = int(train_idx.min()) if len(train_idx) else int(test_idx.min())
        row[lo : int(test_idx.min())] = "."
        row[train_idx] = "T"
        row[test_idx] = "#"
        lines.append("".join(row.tolist()))
    return "\n".join(lines)
