"""Trading rules: positions from forecast probabilities, and the fee at which a rule breaks even.

Two rules (`eval.strategy`); both take a position at a bar's close and earn the next bar's simple
return, and each unit of position change costs the fee (`tsflash.scoring.metrics.apply_fees`, applied at
scoring time by `tsflash.scoring.daily`):

one-bar   the predicted class (argmax) sets the position, +1 up, 0 flat, -1 down, held one bar
          (`tsflash.scoring.metrics.positions_from_probs`; the engine saves these positions). The label
          looks h bars ahead, so this rule trades forecasts of 15 minutes every minute: its
          turnover mostly measures how often predictions flip.
horizon   matched to the label: h = labels.horizon overlapping sub-portfolios (Jegadeesh &
          Titman 1993). Sub-portfolio j decides at the test bars j, j + h, j + 2h, ... and holds
          that decision for h bars with 1/h of the capital, so the position at bar t is the mean
          of the last h decisions::

              position[t] = (1/h) * sum_{j=0..h-1} signal[t-j]     (signal before the block = 0)

          e.g. h = 3, signals + + 0 - - 0 -> positions 1/3 2/3 2/3 0 -2/3 -2/3. Only the
          sub-portfolio deciding at t trades there: |position[t] - position[t-1]| =
          |signal[t] - signal[t-h]| / h, so the fees are those of h staggered non-overlapping
          books (nothing is netted between them). Unlike one non-overlapping book it uses every
          forecast, and its result does not depend on an arbitrary phase.

Entry rule (`signals`): at a decision bar, +1 if the argmax class is up and p_up >= threshold,
-1 if it is down and p_down >= threshold, else 0; threshold 0 is the argmax rule.

The threshold (`eval.entry_threshold`): a number in [0, 1) fixes it. -1 (the default) fits it per
cell on the VALIDATION tail's predictions saved with the cell, never on test bars: the candidates
are 0 and the 50/75/90/95 % quantiles of the validation conviction max(p_up, p_down) over
validation bars whose argmax is up or down (the highest still enters on about 5 % of them); the
one with the highest validation mean net return per bar at the scoring fee wins (the smallest on
ties). A cell without validation predictions (no validation tail, splits.val_fraction = 0, or a
cell saved before they were kept) uses threshold 0, the argmax rule; `Scored.threshold_source`
says which. The engine does not give training-set probabilities, so none are used.

Conventions shared with the one-bar rule: each fold's path starts flat and its first trade pays;
its last position is not closed. Probabilities are read at the float16 precision the cells store
them in (`stored`), so a freshly trained cell and the same cell reloaded trade identically.

The break-even fee is the fee at which the mean net return per bar is exactly 0:
mean(gross) - fee * 1e-4 * mean(turnover) = 0, i.e. fee = 1e4 * sum(gross) / sum(turnover) bps
(negative when the rule loses before fees; NaN when it never trades).

Pure numpy; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tsflash.errors import UserError
from tsflash.scoring.metrics import DOWN, UP, apply_fees

__all__ = [
    "FIT",
    "STRATEGIES",
    "THRESHOLD_QUANTILES",
    "Scored",
    "Strategy",
    "break_even_fee",
    "check_strategy",
    "fit_threshold",
    "hold",
    "horizon_path",
    "path",
    "signals",
    "stored",
    "threshold_candidates",
    "turnover",
]

STRATEGIES = ("one-bar", "horizon")  # eval.strategy
FIT = -1.0  # eval.entry_threshold -1: fit on the validation tail
THRESHOLD_QUANTILES = (0.5, 0.75, 0.9, 0.95)


def check_strategy(kind, threshold, where: str = "eval") -> None:
    """The rules of eval.strategy and eval.entry_threshold (`where` names the user's key prefix)."""
    if kind not in STRATEGIES:
        raise UserError(f"{where}.strategy must be one of {', '.join(STRATEGIES)}, got {kind!r}")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not (threshold == FIT or 0.0 <= threshold < 1.0)
    ):
        raise UserError(
            f"{where}.entry_threshold must be -1 (fitted on the validation tail) or in [0, 1), got {threshold!r}"
        )


@dataclass(frozen=True)
class Strategy:
    """A trading rule: `kind` in STRATEGIES, the holding `horizon` in bars (the label's) and the
    entry `threshold` (FIT = -1: fitted on the validation tail; else fixed in [0, 1))."""

    kind: str = "horizon"
    horizon: int = 1
    threshold: float = FIT

    def __post_init__(self):
        check_strategy(self.kind, self.threshold)
        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int) or self.horizon < 1:
            raise UserError(f"strategy horizon must be an integer >= 1 (labels.horizon), got {self.horizon!r}")

    @classmethod
    def from_config(cls, config: dict) -> Strategy:
        """From a resolved config as a dict (config.json). A config saved before eval.strategy
        existed was scored with the one-bar rule, and is read as such."""
        ev = config.get("eval", {})
        return cls(
            kind=ev.get("strategy", "one-bar"),
            horizon=int(config["labels"]["horizon"]),
            threshold=float(ev.get("entry_threshold", FIT)),
        )

    def describe(self) -> str:
        if self.kind == "one-bar":
            return "one-bar: the predicted class sets the position, held one bar"
        entry = (
            "entry threshold fitted on each cell's validation tail (argmax where a cell has none)"
            if self.threshold == FIT
            else f"entry when the direction's probability >= {self.threshold:g}"
        )
        return f"horizon: {self.horizon} overlapping sub-portfolios, each holding for {self.horizon} bars; {entry}"


def stored(y_prob) -> np.ndarray:
    """Probabilities (M, 3) at the float16 precision cells store them in, as float64."""
    return np.asarray(y_prob).astype(np.float16).astype(np.float64)


def signals(y_prob, threshold: float) -> np.ndarray:
    """Entry decision per bar, int8 (M,): +1 / -1 when the argmax is up / down and its probability
    >= threshold, else 0."""
    p = stored(y_prob)
    top = p.argmax(axis=1)
    sig = np.where(top == UP, 1, np.where(top == DOWN, -1, 0))
    return np.where(p.max(axis=1) >= threshold, sig, 0).astype(np.int8)


def hold(signal, h: int) -> np.ndarray:
    """Position of h overlapping sub-portfolios, float64 (M,): position[t] = mean(signal[t-h+1..t])
    with signals before the first bar taken as 0."""
    s = np.asarray(signal, dtype=np.float64)
    c = np.concatenate([np.zeros(h), np.cumsum(s)])  # c[h + t] = sum(signal[0..t])
    return (c[h:] - c[:-h]) / h


def turnover(position) -> np.ndarray:
    """Position change per bar |position[t] - position[t-1]|, from flat at the first bar; (M,)."""
    return np.abs(np.diff(np.asarray(position, dtype=np.float64), prepend=0.0))


def path(y_prob, next_ret, h: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(position (M,), gross returns (M,)) of the horizon rule; h = 1 with threshold 0 is the
    argmax held one bar."""
    next_ret = np.asarray(next_ret, dtype=np.float64)
    if len(next_ret) != len(y_prob):
        raise UserError(
            f"strategy: y_prob and next_ret must have the same length, got {len(y_prob)} and {len(next_ret)}"
        )
    position = hold(signals(y_prob, threshold), h)
    return position, position * next_ret


def break_even_fee(gross, turnover_per_bar) -> float:
    """Fee in basis points at which the mean net return per bar is exactly 0:
    1e4 * sum(gross) / sum(turnover); NaN when nothing trades."""
    total = float(np.sum(turnover_per_bar))
    return 1e4 * float(np.sum(gross)) / total if total > 0 else float("nan")


def threshold_candidates(val_prob) -> np.ndarray:
    """0 and the THRESHOLD_QUANTILES of max(p_up, p_down) over bars whose argmax is up or down."""
    p = stored(val_prob)
    directional = np.isin(p.argmax(axis=1), (DOWN, UP))
    conviction = np.maximum(p[directional, UP], p[directional, DOWN])
    qs = np.quantile(conviction, THRESHOLD_QUANTILES) if len(conviction) else np.empty(0)
    return np.unique(np.concatenate([[0.0], qs]))


def fit_threshold(val_prob, val_next_ret, h: int, fee_bps: float) -> float:
    """The candidate threshold with the highest mean net return per bar on the validation bars
    at `fee_bps` (the smallest on ties); see the module docstring."""
    best, best_mean = 0.0, -np.inf
    for tau in threshold_candidates(val_prob):
        position, gross = path(val_prob, val_next_ret, h, float(tau))
        mean = float(np.mean(apply_fees(position, gross, fee_bps)))
        if mean > best_mean:
            best, best_mean = float(tau), mean
    return best


class Scored(NamedTuple):
    """One cell's path under a rule (before fees) and where its threshold came from."""

    position: np.ndarray  # (M,) float64
    gross: np.ndarray  # (M,) float64
    threshold: float
    threshold_source: str  # "fixed", "validation", "argmax (no validation predictions)", "one-bar"


def horizon_path(strategy: Strategy, y_prob, next_ret, fee_bps: float, val_prob=None, val_next_ret=None) -> Scored:
    """The horizon rule on one cell's test bars, its threshold fixed or fitted on the validation
    bars (val_prob (V, 3), val_next_ret (V,)) at `fee_bps`."""
    if strategy.threshold != FIT:
        tau, source = strategy.threshold, "fixed"
    elif val_prob is not None and len(val_prob) > 0:
        tau, source = fit_threshold(val_prob, val_next_ret, strategy.horizon, fee_bps), "validation"
    else:
        tau, source = 0.0, "argmax (no validation predictions)"
    position, gross = path(y_prob, next_ret, strategy.horizon, tau)
    return Scored(position, gross, tau, source)
