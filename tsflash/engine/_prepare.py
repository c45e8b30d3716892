"""Stage 1, prepare: what needs no fitting (once for all N, folds and seeds), then each fold's
fitted inputs (normaliser and flat band fitted on the fold's training bars only)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from tsflash.config import ExperimentConfig
from tsflash.data.store import find_gaps
from tsflash.dataset.features import Normalizer, as_tensor, compute_features, interval_us_of
from tsflash.dataset.labels import fit_flat_band, forward_log_returns, make_labels
from tsflash.dataset.splits import WalkForward
from tsflash.dataset.windows import segment_ids
from tsflash.device import sync
from tsflash.errors import UserError
from tsflash.intervals import bars_per_day

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """Everything a fold needs that is fitted on nothing (shared by all N, folds and seeds).

    features : (T, F) float32 on `device`, raw (not normalised; `fold_data` fits that per fold).
    fwd : (T,) float64 forward log return over the label horizon (NaN: no label).
    next_ret : (T,) float64 simple return of bar t+1, close[t+1] / close[t] - 1, earned by a
        position taken at bar t's close; 0 for the last bar (nothing to hold into).
    open_time : (T,) int64 us (numpy, host); folds: [(train_idx, test_idx)] numpy int64.
    segments : (T,) int64 segment id per bar on `device` (+1 after each gap > max_gap_bars).
    """

    bars: object
    features: torch.Tensor
    fwd: torch.Tensor
    next_ret: torch.Tensor
    folds: list
    segments: torch.Tensor
    gaps: object
    cfg: ExperimentConfig
    open_time: np.ndarray
    interval_us: int
    device: torch.device
    timings: dict = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])


def prepare(cfg: ExperimentConfig, bars, device="cpu") -> Prepared:
    """Features, targets, segments and walk-forward folds for `bars` on `device` (see the package doc).

    Test blocks are ``cfg.splits.test_days`` days of bars each (test_days * bars per day of the
    interval: 1440 a day at 1m, 86,400 at 1s), the last ending at the last bar; expanding train
    window, or rolling with ``cfg.splits.train_days`` days; purge ``cfg.purge`` (default = label
    horizon), embargo ``cfg.splits.embargo`` bars. Durations given as time in the config are bars
    and days here (`tsflash.config.validate` converted them).
    """
    device = torch.device(device)
    interval_us = interval_us_of(bars)
    if len(bars) < 2:
        raise UserError(f"prepare needs at least 2 bars, got {len(bars)}")
    timings = {}
    t0 = time.perf_counter()
    features = compute_features(bars, device=device, interval_us=interval_us)  # (T, F) float32
    timings["features_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    close = as_tensor(bars.close, torch.float64, device)  # (T,)
    open_time_t = as_tensor(bars.open_time, torch.int64, device)  # (T,)
    fwd = forward_log_returns(close, open_time_t, cfg.labels.horizon, interval_us)  # (T,)
    next_ret = torch.zeros_like(close)
    next_ret[:-1] = close[1:] / close[:-1] - 1.0
    segments = segment_ids(open_time_t, interval_us, cfg.data.max_gap_bars)  # (T,) on device
    open_time = np.ascontiguousarray(bars.open_time, dtype=np.int64)
    gaps = find_gaps(open_time, interval_us)
    timings["targets_s"] = time.perf_counter() - t0

    per_day = bars_per_day(interval_us)
    splitter = WalkForward(
        n_splits=cfg.splits.n_folds,
        test_size=cfg.splits.test_days * per_day,
        train_size=None if cfg.splits.scheme == "expanding" else cfg.splits.train_days * per_day,
        purge=cfg.purge,
        embargo=cfg.splits.embargo,
    )
    folds = list(splitter.split(len(bars)))
    sync(device)
    log.info("prepared %d bars x %d features, %d folds on %s", len(bars), features.shape[1], len(folds), device)
    return Prepared(bars=bars, features=features, fwd=fwd, next_ret=next_ret, folds=folds, segments=segments,
                    gaps=gaps, cfg=cfg, open_time=open_time, interval_us=interval_us, device=device, timings=timings)


@dataclass
class FoldData:
    """A fold's fitted inputs. Fitted on `train_idx` only (normaliser, flat band).

    fit_idx : bars whose windows the model trains on (= train_idx without a validation tail).
    val : (lo, hi) of the purged validation tail, or None.
    features : (T, F) normalised with the fold's normaliser; labels : (T,) int64, -1 = none.
    """

    fold: int
    train_idx: np.ndarray
    test_idx: np.ndarray
    fit_idx: np.ndarray
    val: tuple[int, int] | None
    normalizer: Normalizer
    flat_threshold: float
    features: torch.Tensor
    labels: torch.Tensor

    @property
    def test_lo(self) -> int:
        return int(self.test_idx[0])

    @property
    def test_hi(self) -> int:
        return int(self.test_idx[-1]) + 1


def fold_data(prepared: Prepared, fold: int) -> FoldData:
    """Fit the normaliser and the flat band on fold `fold`'s training bars and apply them.

    With ``cfg.splits.val_days > 0`` the last val_days days of the training bars are a
    validation tail for early stopping (`split_validation`).
    """
    cfg = prepared.cfg
    if not 0 <= fold < len(prepared.folds):
        raise UserError(f"fold must be in [0, {len(prepared.folds)}), got {fold}")
    train_idx, test_idx = prepared.folds[fold]
    train_t = torch.as_tensor(train_idx, device=prepared.device)
    normalizer = Normalizer.fit(prepared.features, train_t)
    threshold = fit_flat_band(prepared.fwd, train_t, cfg.labels.flat_fraction)
    features = normalizer.apply(prepared.features)  # (T, F)
    labels = make_labels(prepared.fwd, threshold)  # (T,)
    val_bars = cfg.splits.val_days * bars_per_day(prepared.interval_us)
    fit_idx, val = split_validation(train_idx, val_bars, cfg.purge, f"fold {fold}")
    return FoldData(fold=fold, train_idx=train_idx, test_idx=test_idx, fit_idx=fit_idx, val=val, normalizer=normalizer,
                    flat_threshold=threshold, features=features, labels=labels)


def split_validation(train_idx: np.ndarray, val_bars: int, purge: int, where: str = "fold"
                     ) -> tuple[np.ndarray, tuple[int, int] | None]:
    """(fit_idx, val): the last `val_bars` training bars are the validation tail [lo, hi), and
    the `purge` bars before it are dropped from the bars trained on, so that no trained label's
    horizon reaches into the tail (the fold's own purge keeps the tail's labels out of the test
    block). val_bars = 0: every training bar is fitted, val None::

        TTTTTTTTTTTTTTTTTTTT...VVVVV...#####      T fit, . purge, V validation tail, # test
    """
    if val_bars <= 0:
        return train_idx, None
    if len(train_idx) < val_bars + purge + 1:
        raise UserError(f"{where}: a validation tail of {val_bars} bars (splits.val_days) and its purge of {purge} "
                        f"bars leave no bar to train on in its {len(train_idx)} training bars")
    val = (int(train_idx[-val_bars]), int(train_idx[-1]) + 1)
    return train_idx[train_idx < val[0] - purge], val


def contiguous_runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs [lo, hi) of a sorted index array (the embargo can split a training range)."""
    if len(idx) == 0:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    los = np.concatenate([[idx[0]], idx[cut]])
    his = np.concatenate([idx[cut - 1] + 1, [idx[-1] + 1]])
    return list(zip(los.tolist(), his.tolist()))
