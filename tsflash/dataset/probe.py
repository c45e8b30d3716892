"""The linear information probe per context length N (issue 29): a logistic regression on
multi-scale aggregates of the last N bars, asking "does the far information exist in a form a
linear model can read?" beside the transformer's "can it use it?".

For each window w in `probe_windows(N)` (1, 4, 16, ... below N, then N itself) row t holds the
sum of log returns over bars t-w+1 .. t and the log realised volatility over them (log of the
square root of the sum of squared log returns, floored), fewer bars at the start of the series.
Windows count bars, as the transformer's context does; the log return is the engine's
(`tsflash.dataset.features`: across a gap, the move since the last bar that exists), so a
window spanning a gap carries the move through it. Each column is a difference of running
sums (O(T) per window); numpy's cumsum accumulates in order, so row t reads bars <= t only and
is bitwise the same on any prefix of the series. Labels, folds and the flat band are the
engine's (the caller passes them), the model and its settings the logistic baseline's
(`tsflash.engine._baselines`), standardised and clipped on the rows it is fitted on, and the
scores are `tsflash.scoring.metrics`'. Torch-free: numpy and scikit-learn only.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from tsflash.errors import UserError
from tsflash.scoring.metrics import classification_metrics, direction_metrics

log = logging.getLogger(__name__)

WINDOW_RATIO = 4  # windows 1, 4, 16, ...: a geometric ladder, so N = 131072 needs 10 windows, not 131072 lags
VOL_FLOOR = 1e-5  # keeps log finite on flat stretches (zero-trade bars), as the engine's realised volatility
CLIP = 10.0  # standardised columns are clipped like the engine's Normalizer: fat tails must not dominate a fit
# The logistic baseline's settings (tsflash.engine._baselines._logreg), so that the probe differs from
# it only in its columns.
LOGREG_C, LOGREG_TOL, LOGREG_MAX_ITER = 0.01, 1e-3, 200


def probe_windows(n: int) -> tuple[int, ...]:
    """The probe's windows for context length `n`: 1, 4, 16, ... (powers of WINDOW_RATIO below n),
    then n itself, so that the probe reads every bar of its context and no bar before it."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UserError(f"probe context length must be an integer >= 1, got {n!r}")
    out = [1]
    while out[-1] * WINDOW_RATIO < n:
        out.append(out[-1] * WINDOW_RATIO)
    return tuple(out) if out[-1] == n else (*out, int(n))


def probe_feature_names(n: int) -> tuple[str, ...]:
    """Column names of `probe_features(close, n)`, in its order (per window: the sum, then the volatility)."""
    return tuple(name for w in probe_windows(n) for name in (f"sum_log_return_{w}", f"log_realized_vol_{w}"))


def bar_log_returns(close) -> np.ndarray:
    """log(close[t] / close[t-1]), 0 at t = 0: (T,) float64, the engine's log_return column."""
    close = np.asarray(close, dtype=np.float64)
    if close.ndim != 1 or len(close) == 0:
        raise UserError(f"close must be a non-empty 1-D array, got shape {close.shape}")
    if not np.all(close > 0):
        raise UserError(f"prices must be > 0 for log returns, got {int(np.sum(~(close > 0)))} bars that are not")
    return np.diff(np.log(close), prepend=math.log(close[0]))


def probe_features(close, n: int, rows=None) -> np.ndarray:
    """Multi-scale aggregates of the last `n` bars for every bar, or for `rows` alone:
    (T or len(rows), 2 * len(probe_windows(n))) float64.

    Columns as `probe_feature_names(n)`; row t reads close[0 .. t] only. With `rows`, the same
    numbers (the running sums are the whole series' either way) without the (T, columns) array:
    what a fold's fitted, validation and test rows need of a long series.
    """
    r = bar_log_returns(close)  # (T,)
    sums = np.concatenate([[0.0], np.cumsum(r)])  # (T + 1,)
    squares = np.concatenate([[0.0], np.cumsum(r * r)])  # (T + 1,)
    t = np.arange(1, len(sums)) if rows is None else np.asarray(rows, dtype=np.int64) + 1  # end of each window
    if rows is not None and len(t) and (t.min() < 1 or t.max() > len(r)):
        raise UserError(f"probe rows must lie in 0 .. {len(r) - 1}, got {t.min() - 1} .. {t.max() - 1}")
    windows = probe_windows(n)
    out = np.empty((len(t), 2 * len(windows)))
    for j, w in enumerate(windows):
        start = np.maximum(t - w, 0)
        out[:, 2 * j] = sums[t] - sums[start]
        # a difference of running sums can round a little below 0 on a flat stretch
        out[:, 2 * j + 1] = np.log(np.maximum(np.sqrt(np.maximum(squares[t] - squares[start], 0.0)), VOL_FLOOR))
    return out


def subsample_rows(rows: np.ndarray, max_rows: int, seed: int = 0) -> np.ndarray:
    """At most `max_rows` of `rows`, drawn without replacement with a fixed seed and sorted: the
    logistic baseline's draw (pass it tsflash.engine.MAX_LOGREG_ROWS for the same rows)."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) <= max_rows:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, max_rows, replace=False))


def probe_fit_rows(train_rows: np.ndarray, lengths, max_rows: int) -> np.ndarray:
    """The rows every N's probe is fitted on: of the labelled training rows, those whose whole
    context of the longest N lies in the series (row >= max(lengths) - 1), capped at `max_rows` by
    `subsample_rows`' seeded draw; so the probes of one fold differ in their columns alone."""
    rows = np.asarray(train_rows, dtype=np.int64)
    return subsample_rows(rows[rows >= max(lengths) - 1], max_rows)


def _clip(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -CLIP, CLIP)


def probe_model():
    """The unfitted probe: standardise (on the fitted rows), clip at +-CLIP, multinomial logistic
    regression with the baseline's settings (a scikit-learn Pipeline)."""
    return make_pipeline(StandardScaler(), FunctionTransformer(_clip),
                         LogisticRegression(C=LOGREG_C, tol=LOGREG_TOL, max_iter=LOGREG_MAX_ITER))


@dataclass
class ProbeResult:
    """One probe (context length n) on one fold: test probabilities and their scores.

    prob : (len(test_rows), 3) float64 class probabilities (0 down, 1 flat, 2 up) of the test rows.
    log_loss : mean 3-class log-loss over the labelled test rows; direction : the direction score,
        the up-vs-down log-loss over every test row that moved (`direction_log_loss_moves`);
    move_log_loss : the flat-vs-move part; n_scored : labelled test rows; n_fit : rows fitted on.
    """

    n: int
    windows: tuple[int, ...]
    prob: np.ndarray
    log_loss: float
    direction: float
    move_log_loss: float
    n_scored: int
    n_fit: int
    seconds: float


def score(labels: np.ndarray, prob: np.ndarray) -> dict[str, float]:
    """log_loss, direction (score), move_log_loss and n_scored of `prob` against `labels` (-1: unlabelled)."""
    classes = classification_metrics(labels, prob)
    direction = direction_metrics(labels, prob)
    return {"log_loss": classes["log_loss"], "direction": direction["direction_log_loss_moves"],
            "move_log_loss": direction["move_log_loss"], "n_scored": classes["n_scored"]}


def fitted_probe(x: np.ndarray, y: np.ndarray):
    """`probe_model()` fitted on the rows `x` (rows, columns) with labels `y` (0 down, 1 flat, 2 up)."""
    model = probe_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # as the baseline: one stopped at max_iter is still a probe
        model.fit(x, y)
    return model


def probe_probabilities(model, x: np.ndarray) -> np.ndarray:
    """(rows, 3) float64 class probabilities of a fitted probe; 0 for a class its fit never saw."""
    prob = np.zeros((len(x), 3))
    prob[:, model.classes_] = model.predict_proba(x)
    return prob


def fit_probe(features: np.ndarray, labels: np.ndarray, fit_rows: np.ndarray, test_rows: np.ndarray,
              n: int) -> ProbeResult:
    """Fit the probe on `features[fit_rows]` (from `probe_features(close, n)`) and score `test_rows`.

    labels : (T,) int, 0 down, 1 flat, 2 up, -1 none (the engine's `make_labels` with the fold's
    flat band); fit_rows : labelled training rows, already capped (`subsample_rows`); they and the
    test rows are the caller's fold (`tsflash.engine.fold_data`), so the fit reads no test label.
    """
    labels = np.asarray(labels, dtype=np.int64)
    fit_rows, test_rows = np.asarray(fit_rows, dtype=np.int64), np.asarray(test_rows, dtype=np.int64)
    check_fit_labels(labels[fit_rows])
    t0 = time.perf_counter()
    model = fitted_probe(features[fit_rows], labels[fit_rows])
    prob = probe_probabilities(model, features[test_rows])
    seconds = time.perf_counter() - t0
    scores = score(labels[test_rows], prob)
    log.info("probe N=%d: %d windows on %d rows in %.1f s, test log-loss %.5f", n, len(probe_windows(n)),
             len(fit_rows), seconds, scores["log_loss"])
    return ProbeResult(n=int(n), windows=probe_windows(n), prob=prob, n_fit=len(fit_rows), seconds=seconds, **scores)


def check_fit_labels(y: np.ndarray) -> None:
    """UserError unless `y` (the fitted rows' labels) is non-empty and every row labelled."""
    if len(y) == 0 or np.any(y < 0):
        raise UserError(f"the probe needs labelled training rows, got {len(y)} rows, "
                        f"{int(np.sum(y < 0))} of them unlabelled")


def run_probe(close, labels: np.ndarray, fit_rows: np.ndarray, test_rows: np.ndarray, n: int) -> ProbeResult:
    """`fit_probe` on the aggregates of `close` (T,) for context length `n`."""
    return fit_probe(probe_features(close, n), labels, fit_rows, test_rows, n)
