"""Walk-forward engine: prepare the data once, then train and evaluate one (N, fold, seed).

The experiment asks whether the context length N changes out-of-sample performance, so N is the
only thing that varies between runs of `run_fold`: architecture and parameter count (rotary
positions, no per-position parameters), initial weights (seeded by `seed` only), AdamW, the
learning-rate schedule, the number of optimizer steps, the tokens per step (batch = tokens / N),
the target, the loss positions (a fixed FRACTION of each window) and the early-stopping rule.

Data flow and leakage guards
----------------------------
`prepare` computes, once for all folds, the quantities that need no fitting: causal features
(row t uses bars <= t), forward log returns fwd[t] over bars t+1..t+h (NaN across gaps), next-bar
simple returns, gap segments and the walk-forward folds (`WalkForward`, purge >= h, so no
training label's horizon reaches a test block). `fold_data` then fits, on the fold's TRAINING
bars only, the feature normaliser and the flat band of the labels. Training windows lie inside
the training range and inside one gap-free segment; test bars are scored by `eval_windows`
(every test bar exactly once, context of N/2..N bars ending at the bar).

One fold, as bars (T train, . purge, # test, - later data, never read)::

    TTTTTTTTTTTTTTTTTTTTTTTTT...##########----------
    [train windows of N bars ]   [eval windows reach back N/2 before the test block]

Cost accounting (`FoldResult.cost`)
-----------------------------------
train_seconds   wall-clock of the optimizer steps (CUDA synchronised; checkpoint writes and
                validation passes excluded; summed over resumed sessions)
epoch_seconds   train_seconds * n_train_bars / tokens_trained: the time one pass over as many
                tokens as the fold has training bars would take. Windows overlap, so an "epoch"
                is a token count, not a pass over distinct windows; it makes folds and N
                comparable.
tokens_per_s    tokens_trained / train_seconds (every position of every window is a token)
tflops          flops_per_token * tokens_trained / train_seconds / 1e12 with
                flops_per_token = 6 * n_params + 12 * n_layers * d_model * (N / 2)
                (6N rule for the weights, forward + backward; attention scores and values cost
                4 * d_model * keys per layer forward, 3x that with backward, and a causal token
                sees N/2 keys on average, which is what fused kernels compute).
peak_memory     torch.cuda.max_memory_allocated on CUDA (reset per fold); on CPU the process's
                peak RSS (ru_maxrss; process-wide, so an upper bound for the fold).
backend         the attention kernel that actually ran (`CausalTransformer.attention_backend_used`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import numbers
import resource
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tsflash import atomic
from tsflash.config import ExperimentConfig
from tsflash.errors import UserError
from tsflash.features import Normalizer, as_tensor, compute_features
from tsflash.labels import forward_log_returns, fit_flat_band, make_labels
from tsflash.metrics import classification_metrics, positions_from_probs, return_summary, strategy_returns
from tsflash.splits import WalkForward
from tsflash.store import INTERVAL_US, find_gaps
from tsflash.windows import eval_windows, gather_windows, segment_ids, window_starts

log = logging.getLogger(__name__)

US_PER_DAY = 86_400_000_000
VAL_EVALS = 10  # early stopping: validation loss is measured this many times per run ...
VAL_PATIENCE = 3  # ... and training stops after this many measurements without improvement
CHECKPOINT_FORMAT = "tsflash-fold-checkpoint-1"


# --------------------------------------------------------------------------------------------
# data preparation
# --------------------------------------------------------------------------------------------


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


def bars_per_day(interval_us: int) -> int:
    return max(1, US_PER_DAY // interval_us)


def prepare(cfg: ExperimentConfig, bars, device="cpu") -> Prepared:
    """Features, targets, segments and walk-forward folds for `bars` on `device` (see module doc).

    Test blocks are ``cfg.splits.test_days`` days of bars each (test_days * bars per day, e.g.
    1440 a day at 1m), the last ending at the last bar; expanding train window, or rolling with
    ``cfg.splits.train_days`` days; purge ``cfg.purge`` (default = label horizon), embargo
    ``cfg.splits.embargo`` bars.
    """
    device = torch.device(device)
    if bars.interval not in INTERVAL_US:
        raise UserError(f"unknown bar interval {bars.interval!r}; known: {', '.join(INTERVAL_US)}")
    interval_us = INTERVAL_US[bars.interval]
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
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    log.info("prepared %d bars x %d features, %d folds on %s", len(bars), features.shape[1], len(folds), device)
    return Prepared(bars=bars, features=features, fwd=fwd, next_ret=next_ret, folds=folds, segments=segments,
                    gaps=gaps, cfg=cfg, open_time=open_time, interval_us=interval_us, device=device, timings=timings)


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs [lo, hi) of a sorted index array (the embargo can split a training range)."""
    if len(idx) == 0:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    los = np.concatenate([[idx[0]], idx[cut]])
    his = np.concatenate([idx[cut - 1] + 1, [idx[-1] + 1]])
    return list(zip(los.tolist(), his.tolist()))


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

    With ``cfg.splits.val_fraction > 0`` the last fraction of the training bars is a validation
    tail for early stopping; the `purge` bars before it are dropped from the fit range so that
    no fit label's horizon reaches into the validation tail.
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
    fit_idx, val = train_idx, None
    vf = cfg.splits.val_fraction
    if vf > 0:
        if not vf < 1:
            raise UserError(f"splits.val_fraction must be in [0, 1), got {vf}")
        n_val = int(len(train_idx) * vf)
        if n_val < 1:
            raise UserError(f"splits.val_fraction={vf} leaves no validation bar in {len(train_idx)} training bars")
        val = (int(train_idx[-n_val]), int(train_idx[-1]) + 1)
        fit_idx = train_idx[train_idx < val[0] - cfg.purge]
    return FoldData(fold=fold, train_idx=train_idx, test_idx=test_idx, fit_idx=fit_idx, val=val, normalizer=normalizer,
                    flat_threshold=threshold, features=features, labels=labels)


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------

_ARRAYS = ("test_time", "y_true", "y_prob", "position", "gross_returns", "net_returns")


@dataclass
class FoldResult:
    """Out-of-sample result of one (N, fold, seed) or baseline.

    Times are int64 microseconds UTC; train_end / test_end are the open times of the LAST bar of
    the range (inclusive). Arrays have one row per scored test bar, in time order:
    test_time (M,) int64, y_true (M,) int8 (-1 = unlabelled), y_prob (M, 3) float32,
    position (M,) int8, gross_returns / net_returns (M,) float64.
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

    @staticmethod
    def _paths(path) -> tuple[Path, Path]:
        p = Path(path)
        stem = p.with_suffix("") if p.suffix in (".npz", ".json") else p
        return stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")

    def save(self, path) -> tuple[Path, Path]:
        """Write `<path>.npz` (arrays) then `<path>.json` (the rest), each atomically."""
        npz, js = self._paths(path)
        with atomic.atomic_path(npz) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
            np.savez(fh, **{k: getattr(self, k) for k in _ARRAYS})
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _ARRAYS}
        atomic.write_json(js, meta, indent=1, default=_json_default)
        return npz, js

    @classmethod
    def load(cls, path) -> FoldResult:
        npz, js = cls._paths(path)
        if not js.exists() or not npz.exists():
            raise UserError(f"fold result not found: {npz} and {js} must both exist")
        meta = json.loads(js.read_text())
        with np.load(npz) as z:
            arrays = {k: z[k] for k in _ARRAYS}
        return cls(**meta, **arrays)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _result(prepared: Prepared, fd: FoldData, n: int, seed: int, y_prob: np.ndarray, cost: dict) -> FoldResult:
    """Metrics and strategy returns of test-bar probabilities (M = number of test bars, in order)."""
    test = fd.test_idx
    y_true = fd.labels[torch.as_tensor(test, device=fd.labels.device)].cpu().numpy().astype(np.int8)
    position = positions_from_probs(y_prob)
    next_ret = prepared.next_ret[torch.as_tensor(test, device=prepared.next_ret.device)].cpu().numpy()
    gross, net = strategy_returns(position, next_ret, prepared.cfg.eval.fee_bps)
    metrics = classification_metrics(y_true, y_prob)
    metrics.update(return_summary(position, gross, net))
    t = prepared.open_time
    return FoldResult(
        fold=fd.fold, n=n, seed=seed,
        train_start=int(t[fd.train_idx[0]]), train_end=int(t[fd.train_idx[-1]]),
        test_start=int(t[test[0]]), test_end=int(t[test[-1]]),
        metrics=metrics, test_time=t[test].copy(), y_true=y_true, y_prob=y_prob.astype(np.float32),
        position=position, gross_returns=gross, net_returns=net, cost=cost, flat_threshold=float(fd.flat_threshold),
    )


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------


def lr_at(step: int, steps: int, lr: float, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup_steps` steps to `lr`, then cosine decay to lr * min_lr_ratio at the last step."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def step_seed(seed: int, fold: int, step: int) -> int:
    """Seed of one optimizer step's sampling, a pure function of (seed, fold, step): resumable."""
    return int(np.random.SeedSequence([seed, fold, step]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def sample_starts(n_starts: int, batch: int, seed: int, fold: int, step: int) -> torch.Tensor:
    """Indices into the fold's window starts for one step: (batch,) int64 on CPU, uniform with replacement."""
    g = torch.Generator(device="cpu").manual_seed(step_seed(seed, fold, step))
    return torch.randint(n_starts, (batch,), generator=g)


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean CE over targets != -1; an all-ignored batch gives 0 (not NaN), without a host sync."""
    flat = targets.reshape(-1)  # (B*T,)
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), flat.clamp_min(0), reduction="none")
    valid = flat != -1
    return (losses * valid).sum() / valid.sum().clamp_min(1)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def predict_range(model, features: torch.Tensor, lo: int, hi: int, n: int, batch_tokens: int, device):
    """Class probabilities for every bar in [lo, hi), each scored exactly once by `eval_windows`.

    Returns (bars (M,) int64, context (M,) int64 = bars seen including the scored one, probs
    (M, 3) float32 softmax of float32 logits), on `device`, sorted by bar; M = hi - lo.
    """
    device = torch.device(device)
    starts, score_from = eval_windows(lo, hi, n, device=device)  # (W,), (W,)
    per_batch = max(1, batch_tokens // n)
    pos = torch.arange(n, device=device)  # (n,)
    out_bar, out_ctx, out_prob = [], [], []
    for i in range(0, len(starts), per_batch):
        s = starts[i : i + per_batch]  # (B,)
        x = gather_windows(features, s, n)  # (B, n, F)
        with _autocast(device):
            logits, _ = model(x)
        prob = torch.softmax(logits.float(), dim=-1)  # (B, n, 3)
        keep = pos[None, :] >= score_from[i : i + per_batch, None]  # (B, n)
        out_bar.append((s[:, None] + pos[None, :])[keep])
        out_ctx.append((pos[None, :] + 1).expand_as(keep)[keep])
        out_prob.append(prob[keep])
    bars = torch.cat(out_bar)
    order = torch.argsort(bars)
    bars, ctx, probs = bars[order], torch.cat(out_ctx)[order], torch.cat(out_prob)[order]
    expected = torch.arange(lo, hi, device=device)
    assert len(bars) == hi - lo and bool((bars == expected).all()), "eval windows must score each bar once"
    return bars, ctx, probs


def _val_loss(model, fd: FoldData, features: torch.Tensor, labels: torch.Tensor, n: int, batch_tokens: int,
              device) -> float:
    """Mean CE of the labelled bars of the validation tail, scored like test bars.

    features, labels : the fold's inputs already on the model's `device` (FoldData's may live elsewhere).
    """
    lo, hi = fd.val
    bars, _, probs = predict_range(model, features, lo, hi, n, batch_tokens, device)
    y = labels[bars]
    valid = y >= 0
    nll = -torch.log(probs.gather(1, y.clamp_min(0)[:, None]).squeeze(1).clamp_min(1e-12))
    return float((nll * valid).sum() / valid.sum().clamp_min(1))


def _peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB


def flops_per_token(n_params: int, n_layers: int, d_model: int, n: int) -> float:
    """Training FLOPs per token: 6 * params + 12 * n_layers * d_model * (n / 2) (causal attention)."""
    return 6.0 * n_params + 12.0 * n_layers * d_model * (n / 2)


def _atomic_torch_save(obj, path: Path) -> None:
    with atomic.atomic_path(path) as tmp:
        torch.save(obj, tmp)


def run_fold(
    prepared: Prepared,
    n: int,
    fold: int,
    seed: int,
    device=None,
    checkpoint_dir: Path | None = None,
    model_overrides: dict | None = None,
    train_overrides: dict | None = None,
    *,
    fold_inputs: FoldData | None = None,
    checkpoint_every_s: float = 60.0,
    on_step: Callable[[int], None] | None = None,
) -> FoldResult:
    """Train a fresh model on fold `fold` with context length `n`, then score its test block.

    Training (identical for every n): ``ModelConfig(n_features, **cfg.model, **model_overrides)``
    initialised from `seed` alone; AdamW with weight decay on 2-D weights only (matrices, not
    norms or biases); linear warm-up then cosine learning rate; ``cfg.train.steps`` steps of
    ``tokens_per_step`` tokens (batch = tokens_per_step // n windows), gradient clipping; window
    starts drawn uniformly from all valid starts by a generator seeded from (seed, fold, step).

    Loss positions: the cross-entropy counts positions p >= loss_warmup_fraction * n of every
    window. The first positions of a window see almost no history; a fraction (not a fixed
    count) keeps the share of context-starved positions the same for every n, so that the
    objective differs between n only through the context available, which is the question.
    With the default fraction 0 every position counts (at N >= 512 the starved share is tiny,
    and each position is still a causal prediction of its own bar).

    Early stopping (only if ``cfg.splits.val_fraction > 0``): the validation-tail loss is
    measured VAL_EVALS times per run; after VAL_PATIENCE measurements without improvement
    training stops and the best weights are restored.

    Resume: with `checkpoint_dir`, model + optimizer + step (+ early-stopping state) are written
    atomically every `checkpoint_every_s` seconds and at the end; a second call with the same
    arguments continues from there and, on CPU, reproduces the uninterrupted run exactly.
    `on_step(step)` is called after every completed step (tests use it to simulate a kill).
    """
    cfg = prepared.cfg
    device = torch.device(device) if device is not None else prepared.device
    from tsflash.model import CausalTransformer, ModelConfig  # torch-heavy; imported where needed

    known = {f.name for f in dataclasses.fields(cfg.train)}
    if unknown := sorted(set(train_overrides or {}) - known):
        raise UserError(f"unknown train override(s) {unknown}; known: {', '.join(sorted(known))}")
    tc = dataclasses.replace(cfg.train, **(train_overrides or {}))
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2 or n % 2:
        raise UserError(f"context length n must be an even integer >= 2, got {n!r}")
    n = int(n)
    if tc.tokens_per_step % n or tc.tokens_per_step < n:
        raise UserError(f"train.tokens_per_step={tc.tokens_per_step} must be a positive multiple of the context length n={n}")
    if tc.steps < 1:
        raise UserError(f"train.steps must be >= 1, got {tc.steps}")
    batch = tc.tokens_per_step // n
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    assert fd.fold == fold

    features = fd.features.to(device)  # (T, F)
    labels = fd.labels.to(device)  # (T,)
    segments = prepared.segments.to(device)
    starts = torch.cat([window_starts(lo, hi, n, segments) for lo, hi in _runs(fd.fit_idx)] or
                       [torch.empty(0, dtype=torch.int64, device=device)])  # (S,)
    if len(starts) == 0:
        raise UserError(f"fold {fold}: no training window of n={n} bars fits in one gap-free segment of the "
                        f"{len(fd.fit_idx)} training bars (data.max_gap_bars={cfg.data.max_gap_bars})")

    settings = dataclasses.asdict(cfg.model) | (model_overrides or {})
    known = {f.name for f in dataclasses.fields(ModelConfig)} - {"n_features"}
    if unknown := sorted(set(settings) - known):
        raise UserError(f"unknown model override(s) {unknown}; known: {', '.join(sorted(known))}")
    mconf = ModelConfig(n_features=features.shape[1], **settings)
    torch.manual_seed(seed)  # initial weights depend on the seed only, not on n or the fold
    model = CausalTransformer(mconf).to(device)
    fwd_model = torch.compile(model) if (tc.compile and device.type == "cuda") else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=tc.lr, betas=tuple(tc.betas), fused=device.type == "cuda",
    )

    identity = {"format": CHECKPOINT_FORMAT, "config": cfg.hash(), "n": n, "fold": fold, "seed": seed,
                "model": settings, "train": dataclasses.asdict(tc),
                "bars": [len(prepared.open_time), int(prepared.open_time[0]), int(prepared.open_time[-1])]}
    ident_key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    ckpt_path = Path(checkpoint_dir) / f"fold{fold}-n{n}-seed{seed}.pt" if checkpoint_dir is not None else None
    state = {"step": 0, "train_seconds": 0.0, "best_loss": math.inf, "bad_evals": 0, "stopped": False, "best_model": None}
    if ckpt_path is not None and ckpt_path.exists():
        blob = torch.load(ckpt_path, map_location=device, weights_only=True)
        if blob.get("identity") != ident_key:
            raise UserError(f"checkpoint {ckpt_path} belongs to a different run (identity {blob.get('identity')} != "
                            f"{ident_key}); delete it or use another checkpoint_dir")
        model.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
        state = blob["state"]
        log.info("fold %d n=%d seed=%d: resumed at step %d/%d", fold, n, seed, state["step"], tc.steps)

    def save_checkpoint():
        if ckpt_path is None:
            return
        _sync(device)
        _atomic_torch_save({"identity": ident_key, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "state": state}, ckpt_path)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    val_every = max(1, tc.steps // VAL_EVALS) if fd.val is not None else 0
    warm = int(tc.loss_warmup_fraction * n)
    pos = torch.arange(n, device=device)  # (n,)
    first = state["step"]
    # All remaining steps' window picks at once: one host->device copy, no per-step sync.
    picks = torch.stack([sample_starts(len(starts), batch, seed, fold, s) for s in range(first, tc.steps)]).to(device) \
        if first < tc.steps and not state["stopped"] else None  # (steps - first, B)

    model.train()
    t_mark = None  # start of the current timed stretch of optimizer steps (None: paused)
    last_ckpt = time.perf_counter()
    step = first
    while step < tc.steps and not state["stopped"]:
        if t_mark is None:
            _sync(device)
            t_mark = time.perf_counter()
        lr = lr_at(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if mconf.dropout > 0:
            torch.manual_seed(step_seed(seed, fold, step))  # dropout masks reproducible on resume
        s = starts[picks[step - first]]  # (B,)
        x = gather_windows(features, s, n)  # (B, n, F)
        y = labels[s[:, None] + pos]  # (B, n)
        if warm:
            y = y.masked_fill(pos[None, :] < warm, -1)
        with _autocast(device):
            logits, _ = fwd_model(x)  # (B, n, 3)
        loss = masked_cross_entropy(logits, y)
        loss.backward()
        if tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        state["step"] = step

        validate = bool(val_every) and (step % val_every == 0 or step == tc.steps)
        checkpoint = step == tc.steps or time.perf_counter() - last_ckpt >= checkpoint_every_s
        if validate or checkpoint:  # pause the clock: validation and checkpoint writes are not training
            _sync(device)
            state["train_seconds"] += time.perf_counter() - t_mark
            t_mark = None
        if validate:
            model.eval()
            vl = _val_loss(fwd_model, fd, features, labels, n, cfg.eval.batch_tokens, device)
            model.train()
            if vl < state["best_loss"]:
                best = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                state.update(best_loss=vl, bad_evals=0, best_model=best)
            else:
                state["bad_evals"] += 1
                state["stopped"] = state["bad_evals"] >= VAL_PATIENCE
            log.info("fold %d n=%d step %d: val loss %.5f (best %.5f)", fold, n, step, vl, state["best_loss"])
        if checkpoint or state["stopped"]:
            save_checkpoint()
            last_ckpt = time.perf_counter()
        if log.isEnabledFor(logging.DEBUG) and step % max(1, tc.steps // 10) == 0:
            log.debug("fold %d n=%d step %d/%d lr %.2e loss %.5f", fold, n, step, tc.steps, lr, loss.item())
        if on_step is not None:
            on_step(step)
    if t_mark is not None:
        _sync(device)
        state["train_seconds"] += time.perf_counter() - t_mark
    if state["best_model"] is not None:
        model.load_state_dict(state["best_model"])

    model.eval()
    _sync(device)
    t0 = time.perf_counter()
    _, _, probs = predict_range(fwd_model, features, fd.test_lo, fd.test_hi, n, cfg.eval.batch_tokens, device)
    y_prob = probs.cpu().numpy()
    eval_seconds = time.perf_counter() - t0

    steps_done = state["step"]
    tokens = steps_done * batch * n
    train_seconds = state["train_seconds"]
    n_params = model.n_params()
    fpt = flops_per_token(n_params, mconf.n_layers, mconf.d_model, n)
    cost = {
        "train_seconds": train_seconds,
        "epoch_seconds": train_seconds * len(fd.fit_idx) / tokens if tokens else float("nan"),
        "eval_seconds": eval_seconds,
        "tokens_per_s": tokens / train_seconds if train_seconds > 0 else float("nan"),
        "peak_memory_bytes": _peak_memory(device),
        "backend": model.attention_backend_used,
        "tflops": fpt * tokens / train_seconds / 1e12 if train_seconds > 0 else float("nan"),
        "flops_per_token": fpt,
        "steps": steps_done,
        "tokens_per_step": tc.tokens_per_step,
        "batch_size": batch,
        "n_params": n_params,
        "n_train_bars": len(fd.fit_idx),
        "n_train_windows": len(starts),
        "early_stopped": bool(state["stopped"]),
        "device": str(device),
    }
    result = _result(prepared, fd, n, seed, y_prob, cost)
    log.info("fold %d n=%d seed=%d: acc %.4f logloss %.4f, %.1f s train, %.3g tok/s, backend %s", fold, n, seed,
             result.metrics["accuracy"], result.metrics["log_loss"], train_seconds, cost["tokens_per_s"], cost["backend"])
    return result


# --------------------------------------------------------------------------------------------
# baselines
# --------------------------------------------------------------------------------------------

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
    out["prior"] = _result(prepared, fd, 0, 0, probs, {})

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
    out["logreg"] = _result(prepared, fd, k, 0, probs, {})
    return out
