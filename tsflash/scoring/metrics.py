"""Out-of-sample measures of one prediction series: classification scores and strategy returns.

Conventions (shared by every model and baseline so that they are comparable):

- Classes are 0 = down, 1 = flat, 2 = up (`tsflash.dataset.labels.CLASS_NAMES`); a true label of -1 marks a
  bar without a label (its horizon crosses a data gap or runs past the data). Such bars are scored
  by the model and traded by the strategy, but left out of the classification scores.
- `y_prob` rows are class probabilities (softmax, float32); the prediction is their argmax.
- The one-bar strategy takes position +1 (up), 0 (flat) or -1 (down) from each bar's prediction
  at the close of that bar and holds it over the next bar, earning that bar's simple return. Each
  unit of position change costs `fee_bps` basis points; the first bar's change is measured from
  flat (0). The strategy matched to the label's horizon lives in `tsflash.scoring.strategy`.
- Direction apart from volatility: the 3-class log-loss of a labelled bar splits exactly into a
  flat-vs-move part and an up-vs-down part, -log p_y = -log(p_up + p_down) - log q_y for a bar
  that moved (q_up = p_up / (p_up + p_down), q_down = 1 - q_up) and -log p_flat for a flat bar.
  A volatility forecast (how likely a move is) improves only the first; the second measures the
  direction (`bar_losses`, `direction_metrics`). Probabilities are clipped at `EPS` inside logs.

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
from tsflash.scoring.days import day_runs, day_sums

N_CLASSES = 3
LABELS = [0, 1, 2]
DOWN, FLAT, UP = LABELS
EPS = 1e-12  # probability floor inside logs (a float16-stored probability can round to 0)


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
        return {
            "accuracy": nan,
            "balanced_accuracy": nan,
            "log_loss": nan,
            "macro_f1": nan,
            "mcc": nan,
            "confusion": np.zeros((3, 3), dtype=int).tolist(),
            "n_scored": 0,
        }
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
        raise UserError(
            f"strategy_returns: position and next_ret must be 1-D of equal length, got {position.shape} and {next_ret.shape}"
        )
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
        return {
            "mean_gross_return": float("nan"),
            "mean_net_return": float("nan"),
            "turnover": float("nan"),
            "n_bars": 0,
        }
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
    out["turnover"] = float(
        np.mean(np.concatenate([np.abs(np.diff(r.position.astype(np.float64), prepend=0.0)) for r in results]))
    )
    out["n_folds"] = len(results)
    return out


# ---------------------------------------------------------------------------------------------
# Direction apart from volatility


def _checked(y_true, y_prob, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels int64 (M,), probabilities float64 (M, 3) with rows renormalised)."""
    y = np.asarray(y_true).astype(np.int64)
    p = np.asarray(y_prob, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != N_CLASSES or len(p) != len(y) or y.ndim != 1:
        raise UserError(f"{where}: y_prob must have shape (len(y_true), 3), got {p.shape} for len(y_true)={len(y)}")
    if ((y < -1) | (y > 2)).any():
        raise UserError(f"{where}: labels must be -1, 0, 1 or 2, got {np.unique(y[(y < -1) | (y > 2)])}")
    return y, p / p.sum(axis=1, keepdims=True)


def bar_losses(y_true: np.ndarray, y_prob: np.ndarray) -> dict[str, np.ndarray]:
    """Per-bar losses of one forecast, NaN where a loss is not defined; float64 arrays of shape (M,).

    log_loss        -log p_y on labelled bars (the 3-class log-loss)
    move_loss       -log(p_up + p_down) if the bar moved (up or down), -log p_flat if flat
    direction_loss  -log q_y on bars that moved (q_up = p_up / (p_up + p_down)): up-vs-down
    direction_error 1 - hit on bars that moved, hit = sign(p_up - p_down) matches (0.5 on a tie)
    both            1.0 where the outcome moved AND the forecast (argmax) is up or down, else 0

    log_loss = move_loss + direction_loss on every bar that moved, = move_loss on flat bars. The
    bars of direction_loss/direction_error depend on the outcome only, so two forecasts of the
    same bars are scored on the same set (what a paired test needs).
    """
    y, p = _checked(y_true, y_prob, "bar_losses")
    lab = y >= 0
    moved = lab & (y != FLAT)
    yc = np.clip(y, 0, 2)
    p_y = np.take_along_axis(p, yc[:, None], axis=1)[:, 0]
    p_move = p[:, UP] + p[:, DOWN]
    with np.errstate(divide="ignore", invalid="ignore"):
        q_up = np.where(p_move > 0, p[:, UP] / p_move, 0.5)
    q_y = np.where(y == UP, q_up, 1.0 - q_up)
    nan = np.full(len(y), np.nan)
    edge = np.sign(p[:, UP] - p[:, DOWN])
    hit = np.where(edge == 0, 0.5, (edge == np.where(y == UP, 1.0, -1.0)).astype(np.float64))
    forecast_moves = np.isin(p.argmax(axis=1), (DOWN, UP))
    return {
        "log_loss": np.where(lab, -np.log(np.maximum(p_y, EPS)), nan),
        "move_loss": np.where(lab, -np.log(np.maximum(np.where(moved, p_move, p[:, FLAT]), EPS)), nan),
        "direction_loss": np.where(moved, -np.log(np.maximum(q_y, EPS)), nan),
        "direction_error": np.where(moved, 1.0 - hit, nan),
        "both": (moved & forecast_moves).astype(np.float64),
    }


def direction_metrics(y_true: np.ndarray, y_prob: np.ndarray) -> dict:
    """The direction score next to the 3-class scores (NaN where no bar qualifies).

    direction_hit_rate, direction_log_loss : on bars where both the outcome and the forecast
        (argmax) are up or down: the share whose predicted direction is right, and the up-vs-down
        log-loss -log q_y (ln 2 = 0.6931 for a coin flip); n_direction counts those bars.
    move_log_loss : the flat-vs-move log-loss over labelled bars (the volatility part).
    moves_fraction : share of labelled bars that moved (up or down).
    direction_log_loss_moves : the up-vs-down log-loss over every bar that moved, so that
        log_loss = move_log_loss + moves_fraction * direction_log_loss_moves (up to clipping).
    """
    y, p = _checked(y_true, y_prob, "direction_metrics")
    losses = bar_losses(y, p)
    lab = y >= 0
    moved = lab & (y != FLAT)
    both = losses["both"] > 0
    hits = p.argmax(axis=1) == y

    def mean(x, mask):
        return float(np.mean(x[mask])) if mask.any() else float("nan")

    return {
        "direction_hit_rate": mean(hits, both),
        "direction_log_loss": mean(losses["direction_loss"], both),
        "n_direction": int(both.sum()),
        "move_log_loss": mean(losses["move_loss"], lab),
        "moves_fraction": float(moved.sum() / lab.sum()) if lab.any() else float("nan"),
        "direction_log_loss_moves": mean(losses["direction_loss"], moved),
    }


def hit_rate_from_confusion(confusion) -> float:
    """Directional hit rate from a 3x3 confusion matrix (rows true, columns predicted, order
    down/flat/up): correct among bars both truly and predicted up or down; NaN when none."""
    c = np.asarray(confusion, dtype=np.float64)
    both = c[DOWN, DOWN] + c[DOWN, UP] + c[UP, DOWN] + c[UP, UP]
    return float((c[DOWN, DOWN] + c[UP, UP]) / both) if both > 0 else float("nan")


# The per-day sums `daily_loss_sums` returns (besides "days"), each over that day's bars.
DAILY_SUMS = (
    "n_labelled",
    "log_loss",
    "move_loss",
    "n_moves",
    "direction_loss",
    "direction_error",
    "n_both",
    "both_hits",
    "both_direction_loss",
)


def daily_loss_sums(times_us: np.ndarray, y_true: np.ndarray, y_prob: np.ndarray) -> dict[str, np.ndarray]:
    """Per-UTC-day sums of `bar_losses` (the compact record the paired tests need).

    times_us : (M,) int64 bar open times in increasing order. Returns {"days": datetime64[D] (D,)}
    and, for each name in DAILY_SUMS, a float64 (D,) array: counts (n_labelled, n_moves, n_both)
    and sums of losses over the bars where each is defined; both_hits and both_direction_loss
    sum the hits and up-vs-down losses over the bars where outcome and forecast are not flat.
    """
    t = np.asarray(times_us, dtype=np.int64)
    y, p = _checked(y_true, y_prob, "daily_loss_sums")
    if len(t) != len(y):
        raise UserError(f"daily_loss_sums: times_us and y_true must have the same length, got {len(t)} and {len(y)}")
    if len(t) and np.any(np.diff(t) <= 0):
        raise UserError("daily_loss_sums: times_us must be strictly increasing")
    losses = bar_losses(y, p)
    lab, moved, both = y >= 0, (y >= 0) & (y != FLAT), losses["both"] > 0
    hits = (p.argmax(axis=1) == y) & both
    cols = {
        "n_labelled": lab,
        "log_loss": losses["log_loss"],
        "move_loss": losses["move_loss"],
        "n_moves": moved,
        "direction_loss": losses["direction_loss"],
        "direction_error": losses["direction_error"],
        "n_both": both,
        "both_hits": hits,
        "both_direction_loss": np.where(both, losses["direction_loss"], 0.0),
    }
    runs = day_runs(t)
    out = {"days": runs.days}
    for name in DAILY_SUMS:
        out[name] = day_sums(runs, np.nan_to_num(np.asarray(cols[name], dtype=np.float64), nan=0.0))
    return out
