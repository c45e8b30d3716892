"""Stage 2, train: one (N, fold, seed) from fresh weights to its scored test block.

`run_fold` reads top to bottom: settings, model and optimizer, resume from a checkpoint, the
training loop (`_train`, nanoGPT's: lr, forward with targets, the model's own loss, backward,
clip, step), restore the best weights, score the test block, record the cost. Sampling, the
learning-rate schedule, early stopping and checkpoints are small helpers beside it.

Loss positions: the cross-entropy counts positions p >= loss_warmup_fraction * n of every
window. The first positions of a window see almost no history; a fraction (not a fixed count)
keeps the share of context-starved positions the same for every n, so that the objective
differs between n only through the context available, which is the question. With the default
fraction 0 every position counts (at N >= 512 the starved share is tiny, and each position is
still a causal prediction of its own bar).

Early stopping (only if ``cfg.splits.val_fraction > 0``): the validation-tail loss is measured
VAL_EVALS times per run; after VAL_PATIENCE measurements without improvement training stops
and the best weights are restored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tsflash import atomic, attention, fastpath
from tsflash.config import ExperimentConfig, TrainConfig
from tsflash.device import autocast, reset_peak_memory, sync
from tsflash.engine._cost import StepClock, fold_cost
from tsflash.engine._evaluate import FoldResult, fold_result, predict_range, validation_loss
from tsflash.engine._prepare import FoldData, Prepared, contiguous_runs, fold_data
from tsflash.errors import UserError
from tsflash.windows import check_window_length, gather_windows, window_starts

log = logging.getLogger(__name__)

VAL_EVALS = 10  # early stopping: validation loss is measured this many times per run ...
VAL_PATIENCE = 3  # ... and training stops after this many measurements without improvement
CHECKPOINT_FORMAT = "tsflash-fold-checkpoint-1"


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
    model_path: Path | None = None,
) -> FoldResult:
    """Train a fresh model on fold `fold` with context length `n`, then score its test block.

    Training (identical for every n): ``ModelConfig(n_features, **cfg.model, **model_overrides)``
    initialised from `seed` alone; AdamW with weight decay on 2-D weights only (matrices, not
    norms or biases); linear warm-up then cosine learning rate; ``cfg.train.steps`` steps of
    ``tokens_per_step`` tokens (batch = tokens_per_step // n windows), gradient clipping; window
    starts drawn uniformly from all valid starts by a generator seeded from (seed, fold, step).
    The loss is the model's own (`CausalTransformer.forward(x, targets)`) over the loss
    positions; early stopping on a validation tail (both in the module doc).

    Resume: with `checkpoint_dir`, model + optimizer + step (+ early-stopping state) are written
    atomically every `checkpoint_every_s` seconds and at the end; a second call with the same
    arguments continues from there and, on CPU, reproduces the uninterrupted run exactly.

    on_step : the progress hook, called as ``on_step(step)`` after each completed optimizer step
        (step counts from 1; a resumed run continues from the checkpoint's step). The sweep shows
        progress within a cell with it; tests raise from it to simulate a kill.
    model_path : where to save the trained model (the best, restored weights) with
        `CausalTransformer.save`, e.g. for the precision bench on a trained model's q, k, v.

    The cell's first training step runs under the profiler: the cost record keeps the attention
    kernel it saw (`backend_observed`, `kernels_observed`) beside the forced one (`backend`).
    """
    from tsflash.model import CausalTransformer  # torch-heavy; imported where needed

    cfg = prepared.cfg
    device = torch.device(device) if device is not None else prepared.device
    tc, n, batch = _train_settings(cfg, n, train_overrides)
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    assert fd.fold == fold
    features = fd.features.to(device)  # (T, F)
    labels = fd.labels.to(device)  # (T,)
    starts = _fit_starts(fd, n, prepared.segments.to(device), cfg.data.max_gap_bars)  # (S,)

    settings, mconf = _model_config(cfg, features.shape[1], model_overrides)
    torch.manual_seed(seed)  # initial weights depend on the seed only, not on n or the fold
    model = CausalTransformer(mconf).to(device)
    # the attention kernel decided at this shape before the first step, then compiled (tsflash.fastpath)
    fwd_model = fastpath.prepare(model, device, n=n, batch=batch, compile=tc.compile)
    optimizer = _adamw(model, tc, device)
    checkpoint = _Checkpoint(checkpoint_dir, _identity(prepared, n, fold, seed, settings, tc), n, fold, seed,
                             checkpoint_every_s, device)
    state = checkpoint.load(model, optimizer) or _fresh_state()

    reset_peak_memory(device)
    first = tc.steps if state["stopped"] else state["step"]  # a stopped run draws no more batches
    batch_at = _batch_source(starts, features, labels, n, batch, tc, first, seed, fold, mconf.dropout > 0)
    val_loss = functools.partial(validation_loss, fwd_model, fd, features, labels, n, cfg.eval.batch_tokens, device)
    _train(model, fwd_model, optimizer, tc, state, batch_at, val_loss if fd.val is not None else None, checkpoint,
           on_step, device, f"fold {fold} n={n} seed={seed}")
    if state["best_model"] is not None:
        model.load_state_dict(state["best_model"])
    if model_path is not None:
        model.save(model_path)

    model.eval()
    sync(device)
    t0 = time.perf_counter()
    _, _, probs = predict_range(fwd_model, features, fd.test_lo, fd.test_hi, n, cfg.eval.batch_tokens, device)
    y_prob = probs.cpu().numpy()
    cost = fold_cost(model, state, n=n, batch=batch, tokens_per_step=tc.tokens_per_step, n_train_bars=len(fd.fit_idx),
                     n_train_windows=len(starts), eval_seconds=time.perf_counter() - t0, device=device)
    result = fold_result(prepared, fd, n, seed, y_prob, cost)
    log.info("fold %d n=%d seed=%d: acc %.4f logloss %.4f, %.1f s train, %.3g tok/s, backend %s (observed %s)", fold, n,
             seed, result.metrics["accuracy"], result.metrics["log_loss"], cost["train_seconds"], cost["tokens_per_s"],
             cost["backend"], cost["backend_observed"])
    return result


def _train(model, fwd_model, optimizer, tc: TrainConfig, state: dict, batch_at, val_loss, checkpoint: _Checkpoint,
           on_step, device: torch.device, label: str) -> None:
    """The training loop, from `state["step"]` to tc.steps or an early stop; updates `state`.

    batch_at(step) -> (x, y) : the step's windows (B, n, F) and targets (B, n), -1 = no loss.
    val_loss : None, or a function giving the validation loss (early stopping).
    """
    val_every = max(1, tc.steps // VAL_EVALS) if val_loss is not None else 0
    if state.get("kernels_observed") is None:
        attention.warm_up_profiler()  # its one-time setup is not part of a training step
    clock = StepClock(device, state["train_seconds"])
    step = state["step"]
    model.train()
    while step < tc.steps and not state["stopped"]:
        clock.start()
        lr = lr_at(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch_at(step)  # (B, n, F), (B, n)
        with _observe_kernels_once(state):
            with autocast(device):
                _, loss = fwd_model(x, y)
            loss.backward()
        if tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step = state["step"] = step + 1

        validate = bool(val_every) and (step % val_every == 0 or step == tc.steps)
        save = step == tc.steps or checkpoint.due()
        if validate or save:
            state["train_seconds"] = clock.pause()  # validation and checkpoint writes are not training
        if validate:
            vl = _evaluating(model, val_loss)
            _early_stopping(state, model, vl)
            log.info("%s step %d: val loss %.5f (best %.5f)", label, step, vl, state["best_loss"])
        if save or state["stopped"]:
            checkpoint.save(model, optimizer, state)
        if log.isEnabledFor(logging.DEBUG) and step % max(1, tc.steps // 10) == 0:
            log.debug("%s step %d/%d lr %.2e loss %.5f", label, step, tc.steps, lr, loss.item())
        if on_step is not None:
            on_step(step)
    state["train_seconds"] = clock.pause()


def _batch_source(starts: torch.Tensor, features: torch.Tensor, labels: torch.Tensor, n: int, batch: int,
                  tc: TrainConfig, first: int, seed: int, fold: int, dropout: bool):
    """batch_at(step) -> (x (B, n, F), y (B, n)) for steps first .. tc.steps - 1.

    Windows start at `starts[sample_starts(...)]`; all remaining steps' picks are drawn up front
    (one host->device copy, no per-step sync). Targets before position loss_warmup_fraction * n
    are -1 (no loss). With dropout, the step's seed also fixes the masks (reproducible on resume).
    """
    device = features.device
    pos = torch.arange(n, device=device)  # (n,)
    warm = int(tc.loss_warmup_fraction * n)
    picks = torch.stack([sample_starts(len(starts), batch, seed, fold, s) for s in range(first, tc.steps)]).to(device) \
        if first < tc.steps else None  # (steps - first, B)

    def batch_at(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if dropout:
            torch.manual_seed(step_seed(seed, fold, step))
        s = starts[picks[step - first]]  # (B,)
        y = labels[s[:, None] + pos]  # (B, n)
        if warm:
            y = y.masked_fill(pos[None, :] < warm, -1)
        return gather_windows(features, s, n), y  # (B, n, F), (B, n)

    return batch_at


@contextlib.contextmanager
def _observe_kernels_once(state: dict):
    """Run the block under the profiler on a cell's first step (once: the result is kept in
    `state`, which checkpoints carry across a resume). Same math (the parity test of a step
    checks it bit for bit); it adds some tens of ms to that one step, which stays timed."""
    if state.get("kernels_observed") is not None:
        yield
        return
    with attention.observe_kernel_ops() as ops:
        yield
    state["kernels_observed"] = ops


def _evaluating(model, fn):
    """fn() with `model` in eval mode (dropout off), then back to training mode."""
    model.eval()
    try:
        return fn()
    finally:
        model.train()


def _early_stopping(state: dict, model, loss: float) -> None:
    """Keep the best weights (on the host); stop after VAL_PATIENCE measurements without improvement."""
    if loss < state["best_loss"]:
        best = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        state.update(best_loss=loss, bad_evals=0, best_model=best)
    else:
        state["bad_evals"] += 1
        state["stopped"] = state["bad_evals"] >= VAL_PATIENCE


# ---- settings ----------------------------------------------------------------------------------


def _train_settings(cfg: ExperimentConfig, n, train_overrides: dict | None) -> tuple[TrainConfig, int, int]:
    """(train config with the overrides, n, windows per batch); user errors name the key and values."""
    known = {f.name for f in dataclasses.fields(cfg.train)}
    if unknown := sorted(set(train_overrides or {}) - known):
        raise UserError(f"unknown train override(s) {unknown}; known: {', '.join(sorted(known))}")
    tc = dataclasses.replace(cfg.train, **(train_overrides or {}))
    n = check_window_length(n, "context length n")
    if tc.tokens_per_step % n or tc.tokens_per_step < n:
        raise UserError(f"train.tokens_per_step={tc.tokens_per_step} must be a positive multiple of the context length n={n}")
    if tc.steps < 1:
        raise UserError(f"train.steps must be >= 1, got {tc.steps}")
    return tc, n, tc.tokens_per_step // n


def _model_config(cfg: ExperimentConfig, n_features: int, model_overrides: dict | None):
    """(settings dict, ModelConfig): the preset's model settings with the overrides."""
    from tsflash.model import ModelConfig

    settings = dataclasses.asdict(cfg.model) | (model_overrides or {})
    known = {f.name for f in dataclasses.fields(ModelConfig)} - {"n_features"}
    if unknown := sorted(set(settings) - known):
        raise UserError(f"unknown model override(s) {unknown}; known: {', '.join(sorted(known))}")
    return settings, ModelConfig(n_features=n_features, **settings)


def _fit_starts(fd: FoldData, n: int, segments: torch.Tensor, max_gap_bars: int) -> torch.Tensor:
    """Every start of an n-bar training window inside the fit range and one gap-free segment: (S,)."""
    starts = torch.cat([window_starts(lo, hi, n, segments) for lo, hi in contiguous_runs(fd.fit_idx)] or
                       [torch.empty(0, dtype=torch.int64, device=segments.device)])  # (S,)
    if len(starts) == 0:
        raise UserError(f"fold {fd.fold}: no training window of n={n} bars fits in one gap-free segment of the "
                        f"{len(fd.fit_idx)} training bars (data.max_gap_bars={max_gap_bars})")
    return starts


def _adamw(model, tc: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D weights only (matrices; not norms or biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=tc.lr, betas=tuple(tc.betas), fused=device.type == "cuda",
    )


# ---- checkpoints ---------------------------------------------------------------------------------


def _fresh_state() -> dict:
    return {"step": 0, "train_seconds": 0.0, "best_loss": math.inf, "bad_evals": 0, "stopped": False,
            "best_model": None, "kernels_observed": None}


def _identity(prepared: Prepared, n: int, fold: int, seed: int, settings: dict, tc: TrainConfig) -> str:
    """A short hash of everything that makes a checkpoint belong to one run."""
    identity = {"format": CHECKPOINT_FORMAT, "config": prepared.cfg.hash(), "n": n, "fold": fold, "seed": seed,
                "model": settings, "train": dataclasses.asdict(tc),
                "bars": [len(prepared.open_time), int(prepared.open_time[0]), int(prepared.open_time[-1])]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]


class _Checkpoint:
    """Model + optimizer + training state of one (N, fold, seed) in `<dir>/fold<k>-n<N>-seed<s>.pt`
    (nothing without a folder), written atomically; refuses a file of another run. `due()` says
    when `every_s` seconds have passed since the last write (or since the start)."""

    def __init__(self, folder: Path | None, identity: str, n: int, fold: int, seed: int, every_s: float,
                 device: torch.device):
        self.path = Path(folder) / f"fold{fold}-n{n}-seed{seed}.pt" if folder is not None else None
        self.identity, self.every_s, self.device = identity, every_s, device
        self.last = time.perf_counter()

    def due(self) -> bool:
        return time.perf_counter() - self.last >= self.every_s

    def load(self, model, optimizer) -> dict | None:
        """Restore model and optimizer in place and return the training state; None if there is none."""
        if self.path is None or not self.path.exists():
            return None
        blob = torch.load(self.path, map_location=self.device, weights_only=True)
        if blob.get("identity") != self.identity:
            raise UserError(f"checkpoint {self.path} belongs to a different run (identity {blob.get('identity')} != "
                            f"{self.identity}); delete it or use another checkpoint_dir")
        model.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
        log.info("%s: resumed at step %d", self.path.name, blob["state"]["step"])
        return blob["state"]

    def save(self, model, optimizer, state: dict) -> None:
        if self.path is not None:
            sync(self.device)
            blob = {"identity": self.identity, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "state": state}
            with atomic.atomic_path(self.path) as tmp:
                torch.save(blob, tmp)
        self.last = time.perf_counter()
