"""Stage 4, baselines: the class prior and a logistic regression on the same fold, test bars,
metrics and returns as the transformer, fitted on the same rows."""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import torch

from tsflash.engine._evaluate import FoldResult, fold_result
from tsflash.engine._prepare import FoldData, Prepared, fold_data
from tsflash.errors import UserError

log = logging.getLogger(__name__)

MAX_LOGREG_ROWS = 200_000


def lagged_features(features: torch.Tensor, rows: np.ndarray, k: int, chunk: int = 65_536) -> np.ndarray:
    """(len(rows), k * F) float32: features of bars t-k+1 .. t for each t in `rows` (oldest first)."""
    lags = torch.arange(-k + 1, 1, device=features.device)  # (k,)
    out = []
    for i in range(0, len(rows), chunk):
        r = torch.as_tensor(rows[i : i + chunk], device=features.device)
        out.append(features[r[:, None] + lags].reshape(len(r), -1).cpu().numpy())  # (b, k*F)
    return np.concatenate(out) if out else np.empty((0, k * features.shape[1]), dtype=np.float32)


def run_baselines(prepared: Prepared, fold: int, fold_inputs: FoldData | None = None) -> dict[str, FoldResult]:
    """The class prior and a logistic regression on the same fold, test bars, metrics and returns.

    prior : class frequencies of the labelled training bars as every test bar's probabilities
        (prediction = the majority class, so the strategy holds one constant position).
    logreg : multinomial logistic regression (scikit-learn, lbfgs) on the normalised features
        of the last k = cfg.eval.baseline_lags bars; trained on at most 200,000 labelled training
        bars drawn with a fixed seed. `n` of its result is k.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    cfg = prepared.cfg
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    k = cfg.eval.baseline_lags
    if k < 1:
        raise UserError(f"eval.baseline_lags must be >= 1, got {k}")
    y_all = fd.labels.cpu().numpy()
    # The rows the transformer fits on (the training range less any purged validation tail), so
    # that the baselines never see more recent data than the model they are compared with.
    train = fd.fit_idx[y_all[fd.fit_idx] >= 0]
    if len(train) == 0:
        raise UserError(f"fold {fold}: no labelled training bar for the baselines")
    out = {}

    counts = np.bincount(y_all[train], minlength=3).astype(np.float64)
    prior = counts / counts.sum()
    probs = np.tile(prior.astype(np.float32), (len(fd.test_idx), 1))
    out["prior"] = fold_result(prepared, fd, 0, 0, probs, {})

    rows = train[train >= k - 1]
    if len(rows) > MAX_LOGREG_ROWS:
        rows = np.sort(np.random.default_rng(0).choice(rows, MAX_LOGREG_ROWS, replace=False))
    if fd.test_lo < k - 1:
        raise UserError(f"fold {fold}: logistic baseline needs k-1={k - 1} bars before the test block, got {fd.test_lo}")
    # C=0.01 and tol=1e-3: on 1-minute features the fit at C=1 needs hundreds of lbfgs iterations
    # (minutes per fold) for the same test accuracy; the stronger penalty converges in tens.
    clf = LogisticRegression(C=0.01, tol=1e-3, max_iter=200)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a baseline that stops at max_iter is still a baseline
        clf.fit(lagged_features(fd.features, rows, k), y_all[rows])
    probs = np.zeros((len(fd.test_idx), 3), dtype=np.float32)
    probs[:, clf.classes_] = clf.predict_proba(lagged_features(fd.features, fd.test_idx, k)).astype(np.float32)
    log.info("fold %d: logistic baseline on %d rows x %d features in %.1f s", fold, len(rows), k * fd.features.shape[1],
             time.perf_counter() - t0)
    out["logreg"] = fold_result(prepared, fd, k, 0, probs, {})
    return out
