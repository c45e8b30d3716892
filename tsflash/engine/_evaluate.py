"""Stage 3, evaluate: score bars with a trained model (every bar exactly once), the validation
loss for early stopping, and `FoldResult`, the saved out-of-sample record of one cell.

Far context: `predict_range(..., n=m)` with m below the model's own N scores the same bars with
the model's context cut to the windows of length m (context m/2..m bars, as a model trained at
N = m is scored); `FoldResult.y_prob_cut` keeps those probabilities per cut and
`FoldResult.far_context` their metrics.

Patch tokens (``model.patch`` > 1): every bar is still scored exactly once, from a window whose
patch grid ends at it (`tsflash.dataset.windows.eval_windows` with its patch): `patch` classes
of windows, each scoring n / (2 patch) bars, so at most `patch` x the windows of patch 1 (each
cheaper in attention: n / patch tokens)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tsflash import atomic
from tsflash.dataset.windows import eval_windows, gather_windows
from tsflash.device import autocast
from tsflash.engine._prepare import FoldData, Prepared
from tsflash.errors import UserError
from tsflash.model.spec import check_patch
from tsflash.model.transformer import patch_ends
from tsflash.scoring.metrics import (
    classification_metrics,
    direction_metrics,
    positions_from_probs,
    return_summary,
    strategy_returns,
)


@torch.no_grad()
def predict_range(model, features: torch.Tensor, lo: int, hi: int, n: int, batch_tokens: int, device, patch: int = 1):
    """Class probabilities for every bar in [lo, hi), each scored exactly once by `eval_windows`.

    patch : the model's `config.patch`; > 1: a patch-token model, whose logits forecast the bars
        ending its patches (`tsflash.model.transformer.patch_ends`); each bar is scored from a
        window whose patch grid ends at it (`eval_windows(..., patch)`: at most `patch` x the
        compute of patch 1).

    Returns (bars (M,) int64, context (M,) int64 = bars seen including the scored one, probs
    (M, 3) float32 softmax of float32 logits), on `device`, sorted by bar; M = hi - lo.
    """
    device = torch.device(device)
    if patch > 1:
        check_patch(patch, n, ("model.patch", "eval window length n"))
    starts, score_from = eval_windows(lo, hi, n, device=device, patch=patch)  # (W,), (W,)
    per_batch = max(1, batch_tokens // n)
    pos = patch_ends(n, patch, device)  # (n/patch,): the window positions the logits forecast
    out_bar, out_ctx, out_prob = [], [], []
    for i in range(0, len(starts), per_batch):
        s = starts[i : i + per_batch]  # (B,)
        x = gather_windows(features, s, n)  # (B, n, F)
        with autocast(device):
            logits, _ = model(x)
        if logits.shape[1] != len(pos):
            raise UserError(f"the model forecasts {logits.shape[1]} positions of a window of n={n} bars, "
                            f"not n / patch = {len(pos)}: pass the model's patch (patch={patch} given)")
        prob = torch.softmax(logits.float(), dim=-1)  # (B, n/patch, 3)
        keep = pos[None, :] >= score_from[i : i + per_batch, None]  # (B, n/patch)
        out_bar.append((s[:, None] + pos[None, :])[keep])
        out_ctx.append((pos[None, :] + 1).expand_as(keep)[keep])
        out_prob.append(prob[keep])
    bars = torch.cat(out_bar)
    order = torch.argsort(bars)
    bars, ctx, probs = bars[order], torch.cat(out_ctx)[order], torch.cat(out_prob)[order]
    expected = torch.arange(lo, hi, device=device)
    assert len(bars) == hi - lo and bool((bars == expected).all()), "eval windows must score each bar once"
    return bars, ctx, probs


def validation_loss(model, fd: FoldData, features: torch.Tensor, labels: torch.Tensor, n: int, batch_tokens: int,
                    device, patch: int = 1) -> float:
    """Mean cross-entropy of the labelled bars of the validation tail, scored like test bars.

    features, labels : the fold's inputs already on the model's `device` (FoldData's may live elsewhere).
    """
    lo, hi = fd.val
    bars, _, probs = predict_range(model, features, lo, hi, n, batch_tokens, device, patch)
    y = labels[bars]
    valid = y >= 0
    nll = -torch.log(probs.gather(1, y.clamp_min(0)[:, None]).squeeze(1).clamp_min(1e-12))
    return float((nll * valid).sum() / valid.sum().clamp_min(1))


_ARRAYS = ("test_time", "y_true", "y_prob", "position", "gross_returns", "net_returns")
# Optional arrays (a cell saved before they existed loads them empty): what re-scoring under the
# horizon strategy needs (tsflash.scoring.strategy), and the validation tail its entry threshold is fitted on.
_OPTIONAL = ("next_ret", "val_time", "val_prob", "val_next_ret")
_FLOAT16 = ("y_prob", "val_prob")  # stored as float16 (half the size; every score reads them back)


def _empty(*shape, dtype=np.float64):
    return lambda: np.empty((0, *shape), dtype=dtype)
_CUT_PREFIX = "y_prob_ctx"  # + the cut m: probabilities with the context cut to m bars
FAR_CONTEXT_METRICS = ("log_loss", "accuracy", "balanced_accuracy", "mcc")
# The parts of the cut scoring's log-loss (flat-vs-move, up-vs-down on the bars that moved), so that
# the report's nesting check can split it from the cell summaries alone (tsflash.report.diagnostics.nesting):
# published folders keep the summaries, not the per-bar arrays.
FAR_CONTEXT_PARTS = ("move_log_loss", "direction_log_loss_moves", "moves_fraction")


@dataclass
class FoldResult:
    """Out-of-sample result of one (N, fold, seed) or baseline.

    Times are int64 microseconds UTC; train_end / test_end are the open times of the LAST bar of
    the range (inclusive). Arrays have one row per scored test bar, in time order:
    test_time (M,) int64, y_true (M,) int8 (-1 = unlabelled), y_prob (M, 3) float32,
    position (M,) int8, gross_returns / net_returns (M,) float64 (the one-bar rule), next_ret (M,)
    float64 (the bar after each test bar). The validation tail, when the fold has one and its
    probabilities were given: val_time (V,) int64, val_prob (V, 3) float32, val_next_ret (V,).
    y_prob_cut : {m: (M, 3) float32}, the same bars scored with the context cut to m < n bars
        (saved as arrays "y_prob_ctx<m>"); far_context : {"<m>": metrics of that scoring}.
        Both empty for cells saved before they existed, baselines, and n <= every cut.

    On disk (`save`) the probabilities are float16; `load` returns them as float32.
    """

    fold: int
    n: int
    seed: int
    train_start: int
    train_end: int
    test_start: int
    test_end: int
    metrics: dict
    test_time: np.ndarray
    y_true: np.ndarray
    y_prob: np.ndarray
    position: np.ndarray
    gross_returns: np.ndarray
    net_returns: np.ndarray
    cost: dict
    flat_threshold: float
    next_ret: np.ndarray = field(default_factory=_empty())
    val_time: np.ndarray = field(default_factory=_empty(dtype=np.int64))
    val_prob: np.ndarray = field(default_factory=_empty(3, dtype=np.float32))
    val_next_ret: np.ndarray = field(default_factory=_empty())
    far_context: dict = field(default_factory=dict)
    y_prob_cut: dict = field(default_factory=dict)

    @staticmethod
    def _paths(path) -> tuple[Path, Path]:
        p = Path(path)
        stem = p.with_suffix("") if p.suffix in (".npz", ".json") else p
        return stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")

    def save(self, path) -> tuple[Path, Path]:
        """Write `<path>.npz` (arrays) then `<path>.json` (the rest), each atomically."""
        npz, js = self._paths(path)
        arrays = {k: getattr(self, k) for k in (*_ARRAYS, *_OPTIONAL)}
        arrays |= {f"{_CUT_PREFIX}{m}": p for m, p in self.y_prob_cut.items()}
        arrays |= {k: np.asarray(v).astype(np.float16) for k, v in arrays.items()
                   if k in _FLOAT16 or k.startswith(_CUT_PREFIX)}
        with atomic.atomic_path(npz) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
            np.savez(fh, **arrays)
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in arrays and f.name != "y_prob_cut"}
        atomic.write_json(js, meta)
        return npz, js

    @classmethod
    def load(cls, path) -> FoldResult:
        npz, js = cls._paths(path)
        if not js.exists() or not npz.exists():
            raise UserError(f"fold result not found: {npz} and {js} must both exist")
        meta = json.loads(js.read_text())
        with np.load(npz) as z:
            arrays = {k: z[k] for k in (*_ARRAYS, *_OPTIONAL) if k in z.files}
            cuts = {int(k[len(_CUT_PREFIX):]): z[k].astype(np.float32) for k in z.files if k.startswith(_CUT_PREFIX)}
        arrays |= {k: arrays[k].astype(np.float32) for k in _FLOAT16 if k in arrays}
        return cls(**meta, **arrays, y_prob_cut=cuts)


def _validation_arrays(prepared: Prepared, fd: FoldData, val_prob: np.ndarray | None) -> dict:
    """val_time, val_prob, val_next_ret of the fold's validation tail (nothing without one)."""
    if val_prob is None or fd.val is None:
        return {}
    lo, hi = fd.val
    if len(val_prob) != hi - lo:
        raise UserError(f"fold {fd.fold}: val_prob has {len(val_prob)} rows for a validation tail of {hi - lo} bars")
    return {"val_time": prepared.open_time[lo:hi].copy(), "val_prob": np.asarray(val_prob, dtype=np.float32),
            "val_next_ret": prepared.next_ret[lo:hi].cpu().numpy().astype(np.float64)}


def fold_result(prepared: Prepared, fd: FoldData, n: int, seed: int, y_prob: np.ndarray, cost: dict,
                val_prob: np.ndarray | None = None, cut_probs: dict[int, np.ndarray] | None = None) -> FoldResult:
    """Metrics and strategy returns of test-bar probabilities y_prob (M, 3), M = test bars in order.

    cut_probs {m: (M, 3)}: the same bars scored with the context cut to m bars (their metrics too).

    val_prob : (V, 3) probabilities of the fold's validation tail `fd.val` in bar order, when the
        caller scored it; kept with the cell so that the horizon strategy's entry threshold can
        be fitted on it (tsflash.scoring.strategy), never on test bars.
    """
    test = fd.test_idx
    y_true = fd.labels[torch.as_tensor(test, device=fd.labels.device)].cpu().numpy().astype(np.int8)
    position = positions_from_probs(y_prob)
    next_ret = prepared.next_ret[torch.as_tensor(test, device=prepared.next_ret.device)].cpu().numpy()
    gross, net = strategy_returns(position, next_ret, prepared.cfg.eval.fee_bps)
    metrics = classification_metrics(y_true, y_prob)
    metrics.update(direction_metrics(y_true, y_prob))
    metrics.update(return_summary(position, gross, net))
    cut_probs = {int(m): p.astype(np.float32) for m, p in (cut_probs or {}).items()}
    far = {str(m): _subset(classification_metrics(y_true, p), FAR_CONTEXT_METRICS)
           | _subset(direction_metrics(y_true, p), FAR_CONTEXT_PARTS) for m, p in cut_probs.items()}
    t = prepared.open_time
    return FoldResult(
        fold=fd.fold, n=n, seed=seed,
        train_start=int(t[fd.train_idx[0]]), train_end=int(t[fd.train_idx[-1]]),
        test_start=int(t[test[0]]), test_end=int(t[test[-1]]),
        metrics=metrics, test_time=t[test].copy(), y_true=y_true, y_prob=y_prob.astype(np.float32),
        position=position, gross_returns=gross, net_returns=net, cost=cost, flat_threshold=float(fd.flat_threshold),
        next_ret=np.asarray(next_ret, dtype=np.float64), **_validation_arrays(prepared, fd, val_prob),
        far_context=far, y_prob_cut=cut_probs,
    )


def _subset(d: dict, keys: tuple[str, ...]) -> dict:
    return {k: d[k] for k in keys}
