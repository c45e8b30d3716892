"""Out-of-sample measures of one prediction series: classification scores and strategy returns.

Conventions (shared by every model and baseline so that they are comparable):

- Classes are 0 = down, 1 = flat, 2 = up (`tsflash.labels.CLASS_NAMES`); a true label of -1 marks a
  bar without a label (its horizon crosses a data gap or runs past the data). Such bars are scored
  by the model and traded by the strategy, but left out of the classification scores.
- `y_prob` rows are class probabilities (softmax, float32); the prediction is their argmax.
- The strategy takes position +1 (up), 0 (flat) or -1 (down) from each bar's prediction at the
  close of that bar and holds it over the next bar, earning that bar's simple return. Each unit of
  position change costs `fee_bps` basis points; the first bar's change is measured from flat (0).

All functions are pure (numpy in, numpy/dict out); none needs torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    balanced_accuracy_score,
    confusion_matrix,
    f1_score,
    log_loss,
    matthews_corrcoef,
)

from tsflash.errors import UserError

N_CLASSES = 3
LABELS = [0, 1, 2]


def positions_from_probs(y_prob: np.ndarray) -> np.ndarray:
    """Position per bar from the argmax class: down -> -1, flat -> 0, up -> +1; int8 of shape (M,)."""
    return (np.asarray(y_prob).argmax(axis=1) - 1).astype(np.int8)


def classification_metrics(y_true: np.ndarray, y_prob: np.ndarray) -> dict:
    """Accuracy, balanced accuracy, log-loss, macro-F1, MCC and confusion matrix (scikit-learn).

    Parameters
    ----------
    y_true : ndarray of shape (M,), int; -1 = unlabelled (excluded).
    y_prob : ndarray of shape (M, 3), class probabilities (rows renormalised in float64 here so
        that float32 rounding never trips scikit-learn's sum-to-one check).

    Returns a dict with accuracy, balanced_accuracy, log_loss, macro_f1, mcc, confusion (3x3 list:
    rows = true class, columns = predicted, order down/flat/up) and n_scored (labelled bars).
    With no labelled bar every score is NaN and the confusion matrix is all zeros.
    """
    y_true = np.asarray(y_true).astype(np.int64)
    y_prob = np.asarray(y_prob, dtype=np.float64)
    if y_prob.ndim != 2 or y_prob.shape[1] != N_CLASSES or len(y_prob) != len(y_true):
        raise UserError(
            f"classification_metrics: y_prob must have shape (len(y_true), 3), got {y_prob.shape} "
            f"for len(y_true)={len(y_true)}"
        )
    bad = (y_true < -1) | (y_true > 2)
    if bad.any():
        raise UserError(f"classification_metrics: labels must be -1, 0, 1 or 2, got {np.unique(y_true[bad])}")
    keep = y_true >= 0
    n = int(keep.sum())
    if n == 0:
        nan = float("nan")
        return {"accuracy": nan, "balanced_accuracy": nan, "log_loss": nan, "macro_f1": nan, "mcc": nan,
                "confusion": np.zeros((3, 3), dtype=int).tolist(), "n_scored": 0}
    yt = y_true[keep]
    p = y_prob[keep]
    p = p / p.sum(axis=1, keepdims=True)
    yp = p.argmax(axis=1)
    with warnings.catch_warnings():
        # a fold where one class never occurs in y_true is legitimate (tiny slices); sklearn warns
        warnings.simplefilter("ignore", UserWarning)
        return {
            "accuracy": float(accuracy_score(yt, yp)),
            "balanced_accuracy": float(balanced_accuracy_score(yt, yp)),
            "log_loss": float(log_loss(yt, p, labels=LABELS)),
            "macro_f1": float(f1_score(yt, yp, labels=LABELS, average="macro", zero_division=0)),
            "mcc": float(matthews_corrcoef(yt, yp)),
            "confusion": confusion_matrix(yt, yp, labels=LABELS).tolist(),
            "n_scored": n,
        }


def strategy_returns(position: np.ndarray, next_ret: np.ndarray, fee_bps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar gross and net returns of holding `position[t]` over bar t+1.

    gross[t] = position[t] * next_ret[t]
    net[t]   = gross[t] - fee_bps * 1e-4 * |position[t] - position[t-1]|,  position[-1] := 0

    Parameters
    ----------
    position : ndarray of shape (M,), values in {-1, 0, +1}.
    next_ret : ndarray of shape (M,), simple return of the bar after each scored bar.
    fee_bps : cost per unit of turnover in basis points (a flip from -1 to +1 pays twice).

    Returns (gross, net), float64 arrays of shape (M,).
    """
    position = np.asarray(position)
    next_ret = np.asarray(next_ret, dtype=np.float64)
    if position.shape != next_ret.shape or position.ndim != 1:
        raise UserError(f"strategy_returns: position and next_ret must be 1-D of equal length, got {position.shape} and {next_ret.shape}")
    if fee_bps < 0:
        raise UserError(f"strategy_returns: fee_bps must be >= 0, got {fee_bps}")
    if not np.isin(position, (-1, 0, 1)).all():
        raise UserError(f"strategy_returns: positions must be -1, 0 or +1, got {np.unique(position)}")
    gross = position.astype(np.float64) * next_ret
    return gross, apply_fees(position, gross, fee_bps)


def apply_fees(position: np.ndarray, gross: np.ndarray, fee_bps: float) -> np.ndarray:
    """Net per-bar returns from saved positions and gross returns: fees are applied at scoring
    time, so a finished run can be re-scored at another fee without retraining.

    net[t] = gross[t] - fee_bps * 1e-4 * |position[t] - position[t-1]|,  position[-1] := 0
    """
    if fee_bps < 0:
        raise UserError(f"fee_bps must be >= 0, got {fee_bps}")
    turnover = np.abs(np.diff(np.asarray(position, dtype=np.float64), prepend=0.0))
    return np.asarray(gross, dtype=np.float64) - fee_bps * 1e-4 * turnover


def return_summary(position: np.ndarray, gross: np.ndarray, net: np.ndarray) -> dict:
    """Per-bar means and turnover of a strategy path (added to every metrics dict)."""
    pos = np.asarray(position, dtype=np.float64)
    m = len(pos)
    if m == 0:
        return {"mean_gross_return": float("nan"), "mean_net_return": float("nan"), "turnover": float("nan"), "n_bars": 0}
    return {
        "mean_gross_return": float(np.mean(gross)),
        "mean_net_return": float(np.mean(net)),
        "turnover": float(np.abs(np.diff(pos, prepend=0.0)).mean()),  # position change per bar
        "n_bars": m,
    }


def pooled_metrics(results: Sequence) -> dict:
    """Metrics over the union of several folds' test bars (FoldResult-like objects).

    Classification scores are computed on the concatenated labelled bars (not an average of fold
    scores, so a long fold weighs more); return summaries on the concatenated per-bar paths, each
    fold's path already charged from flat at its first bar.
    """
    if not results:
        raise UserError("pooled_metrics: needs at least one fold result, got 0")
    y_true = np.concatenate([r.y_true for r in results])
    y_prob = np.concatenate([r.y_prob for r in results])
    position = np.concatenate([r.position for r in results])
    gross = np.concatenate([r.gross_returns for r in results])
    net = np.concatenate([r.net_returns for r in results])
    out = classification_metrics(y_true, y_prob)
    out.update(return_summary(position, gross, net))
    out["turnover"] = float(np.mean(np.concatenate([np.abs(np.diff(r.position.astype(np.float64), prepend=0.0)) for r in results])))
    out["n_folds"] = len(results)
    return out
