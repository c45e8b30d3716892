"""Stage 4, baselines: the class prior, a logistic regression and its direction-blind twin (the
volatility baseline) on the same fold, test bars, metrics and returns as the transformer, fitted
on the same rows; with eval.probe, the linear information probe at every N of the sweep."""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import torch

from tsflash.dataset.features import FEATURE_NAMES
from tsflash.dataset.probe import (
    fitted_probe,
    probe_features,
    probe_fit_rows,
    probe_probabilities,
    probe_windows,
    subsample_rows,
)
from tsflash.engine._evaluate import FoldResult, fold_result
from tsflash.engine._prepare import FoldData, Prepared, fold_data
from tsflash.errors import UserError
from tsflash.runfolder import probe_name

log = logging.getLogger(__name__)

MAX_LOGREG_ROWS = 200_000
BASELINE_WORDS = {"logreg": "logistic", "volatility": "volatility (direction-blind logistic)"}  # for the log


def lagged_features(features: torch.Tensor, rows: np.ndarray, k: int, chunk: int = 65_536) -> np.ndarray:
    """(len(rows), k * F) float32: features of bars t-k+1 .. t for each t in `rows` (oldest first)."""
    lags = torch.arange(-k + 1, 1, device=features.device)  # (k,)
    out = []
    for i in range(0, len(rows), chunk):
        r = torch.as_tensor(rows[i : i + chunk], device=features.device)
        out.append(features[r[:, None] + lags].reshape(len(r), -1).cpu().numpy())  # (b, k*F)
    return np.concatenate(out) if out else np.empty((0, k * features.shape[1]), dtype=np.float32)


# The features whose sign carries the direction of a move: mirroring the price path (every
# return negated) negates log_return and reflects close_location and taker_buy_share about their
# centre. The volatility baseline sees them only as |normalised value|, so it cannot tell up from down.
DIRECTIONAL_FEATURES = ("log_return", "close_location", "taker_buy_share")


def direction_blind(x: np.ndarray, k: int) -> np.ndarray:
    """Lagged features (rows, k * F) with the DIRECTIONAL_FEATURES of every lag as absolute values
    (the normalised features are centred on their training mean, so |z| is the size of the move)."""
    directional = np.isin(np.array(FEATURE_NAMES), DIRECTIONAL_FEATURES)  # (F,)
    cols = np.tile(directional, k)  # (k * F,) oldest lag first, as lagged_features lays them out
    assert cols.shape[0] == x.shape[1], "lagged features must have k * len(FEATURE_NAMES) columns"
    out = x.copy()
    out[:, cols] = np.abs(out[:, cols])
    return out


def _logreg(fd: FoldData, rows: np.ndarray, y: np.ndarray, k: int, transform, name: str) -> tuple:
    """(test probabilities (M, 3), validation-tail probabilities (V, 3) or None) of a logistic
    regression on transform(lagged features) of `rows`."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    # C=0.01 and tol=1e-3: on 1-minute features the fit at C=1 needs hundreds of lbfgs iterations
    # (minutes per fold) for the same test accuracy; the stronger penalty converges in tens.
    clf = LogisticRegression(C=0.01, tol=1e-3, max_iter=200)
    t0 = time.perf_counter()
    n_val = 0 if fd.val is None else fd.val[1] - fd.val[0]
    # a fit on up to MAX_LOGREG_ROWS rows can take a minute: say what starts, and how big, before it does
    log.info("fold %d: fitting the %s baseline on %s bars x %d lags of %d features, then scoring %s test bars%s",
             fd.fold, BASELINE_WORDS[name], f"{len(rows):,}", k, fd.features.shape[1], f"{len(fd.test_idx):,}",
             f" and {n_val:,} validation bars" if n_val else "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a baseline that stops at max_iter is still a baseline
        clf.fit(transform(lagged_features(fd.features, rows, k)), y[rows])

    def predict(idx: np.ndarray) -> np.ndarray:
        probs = np.zeros((len(idx), 3), dtype=np.float32)
        probs[:, clf.classes_] = clf.predict_proba(transform(lagged_features(fd.features, idx, k))).astype(np.float32)
        return probs

    val = predict(np.arange(*fd.val)) if fd.val is not None else None
    test = predict(fd.test_idx)
    log.info("fold %d: %s baseline fitted and scored in %.1f s", fd.fold, BASELINE_WORDS[name], time.perf_counter() - t0)
    return test, val


def _probes(prepared: Prepared, fd: FoldData, train: np.ndarray, y_all: np.ndarray) -> dict[str, FoldResult]:
    """The linear information probe (`tsflash.dataset.probe`) at every N of cfg.lengths, on one fold.

    Every N is fitted on the same rows (`probe_fit_rows`: the labelled training rows the baselines
    use with a whole context of the longest N, capped at MAX_LOGREG_ROWS by the baselines' seeded
    draw); so the N differ in their columns alone. Features of the fitted,
    validation and test rows only (`probe_features(..., rows=)`), never the (T, columns) array.
    """
    lengths = sorted(prepared.cfg.lengths)
    rows = probe_fit_rows(train, lengths, MAX_LOGREG_ROWS)
    if len(rows) == 0:
        raise UserError(f"fold {fd.fold}: eval.probe needs labelled training rows with a whole context of the "
                        f"longest N={lengths[-1]} bars, got none of {len(train)}; set eval.probe=false or give "
                        "the fold more training bars")
    close = np.asarray(prepared.bars.close, dtype=np.float64)
    val = np.arange(*fd.val) if fd.val is not None else np.empty(0, dtype=np.int64)
    scored = np.concatenate([val, fd.test_idx])
    out = {}
    for n in lengths:
        log.info("fold %d: fitting the linear probe N=%d (%d windows) on %s bars, then scoring %s bars", fd.fold, n,
                 len(probe_windows(n)), f"{len(rows):,}", f"{len(scored):,}")
        t0 = time.perf_counter()
        model = fitted_probe(probe_features(close, n, rows), y_all[rows])
        prob = probe_probabilities(model, probe_features(close, n, scored)).astype(np.float32)
        cost = {"probe_windows": list(probe_windows(n)), "n_fit": int(len(rows)), "seconds": time.perf_counter() - t0}
        out[probe_name(n)] = fold_result(prepared, fd, n, 0, prob[len(val):], cost,
                                         val_prob=prob[: len(val)] if fd.val is not None else None)
        log.info("fold %d: linear probe N=%d fitted and scored in %.1f s", fd.fold, n, cost["seconds"])
    return out


def _fit_rows(fd: FoldData, fold: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels (T,), the labelled rows the transformer fits on): the training range less any purged
    validation tail, so that no baseline sees more recent data than the model it is compared with."""
    y_all = fd.labels.cpu().numpy()
    train = fd.fit_idx[y_all[fd.fit_idx] >= 0]
    if len(train) == 0:
        raise UserError(f"fold {fold}: no labelled training bar for the baselines")
    return y_all, train


def run_probes(prepared: Prepared, fold: int, fold_inputs: FoldData | None = None) -> dict[str, FoldResult]:
    """The probe baselines alone ("probe-<N>" at every N of cfg.lengths; `_probes`), whatever
    cfg.eval.probe says: what `run_baselines` adds with it, e.g. for a published run without them."""
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    y_all, train = _fit_rows(fd, fold)
    return _probes(prepared, fd, train, y_all)


def run_baselines(prepared: Prepared, fold: int, fold_inputs: FoldData | None = None) -> dict[str, FoldResult]:
    """The class prior and two logistic regressions on the same fold, test bars, metrics and returns.

    prior : class frequencies of the labelled training bars as every test bar's probabilities
        (prediction = the majority class, so the strategy holds one constant position).
    logreg : multinomial logistic regression (scikit-learn, lbfgs) on the normalised features
        of the last k = cfg.eval.baseline_lags bars; trained on at most 200,000 labelled training
        bars drawn with a fixed seed. `n` of its result is k.
    volatility : the same regression, direction-blind: the DIRECTIONAL_FEATURES enter as absolute
        values (`direction_blind`), so it can forecast how likely a move is but not its sign
        (beyond the class frequencies). What the transformer adds over it is direction.
    probe-<N> : with cfg.eval.probe, the linear information probe at each N of cfg.lengths
        (`_probes`); `n` of its result is N.
    Each also scores the fold's validation tail when there is one (kept for the horizon
    strategy's entry threshold, tsflash.scoring.strategy).
    """
    cfg = prepared.cfg
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    k = cfg.eval.baseline_lags
    if k < 1:
        raise UserError(f"eval.baseline_lags must be >= 1, got {k}")
    y_all, train = _fit_rows(fd, fold)
    out = {}

    counts = np.bincount(y_all[train], minlength=3).astype(np.float64)
    prior = (counts / counts.sum()).astype(np.float32)
    val_prior = np.tile(prior, (fd.val[1] - fd.val[0], 1)) if fd.val is not None else None
    out["prior"] = fold_result(prepared, fd, 0, 0, np.tile(prior, (len(fd.test_idx), 1)), {}, val_prob=val_prior)

    rows = subsample_rows(train[train >= k - 1], MAX_LOGREG_ROWS)
    if fd.test_lo < k - 1:
        raise UserError(f"fold {fold}: logistic baseline needs k-1={k - 1} bars before the test block, got {fd.test_lo}")
    for name, transform in (("logreg", lambda x: x), ("volatility", lambda x: direction_blind(x, k))):
        probs, val = _logreg(fd, rows, y_all, k, transform, name)
        out[name] = fold_result(prepared, fd, k, 0, probs, {}, val_prob=val)
    if cfg.eval.probe:
        out |= _probes(prepared, fd, train, y_all)
    return out
