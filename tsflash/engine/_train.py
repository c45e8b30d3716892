"""Stage 2, train: one (N, fold, seed) from fresh weights to its scored test block.

`run_fold` reads top to bottom: settings, model and optimizer, resume from a checkpoint (`_set_up`),
the training loop (`_train`, nanoGPT's: lr, forward with targets, the model's own loss, backward,
clip, step), restore the best weights, score the test block (and, for the far-context question,
the same test bars with the context cut to each of ``cfg.eval.context_cuts`` < n), record the
cost and the learning curve. `train_until` is its first half, paused at a step and checkpointed
(screened restarts, `tsflash.engine._restarts`), which `run_fold` continues. Sampling, the
learning-rate schedule and early stopping are small helpers beside it; the `TrainingState` they
update and its checkpoint are `tsflash.engine._checkpoint`.

The same training signal for every N
------------------------------------
Every N gets the same model, initial weights, optimizer, tokens per step (batch = tokens / N)
and rule for when to stop; what N changes is only the context the positions see. Concretely:

* Validated stopping (``splits.val_days > 0``): the loss on a purged validation tail at the end
  of the fold's training range is measured every ``train.eval_every`` steps; training stops
  after ``train.patience`` evaluations without improvement, or at ``train.steps`` (the maximum),
  and the weights of the best evaluation are restored. Each N is compared at its own validated
  optimum, not at a step count that favours one N (the published fixed 200 steps).
* Coverage-balanced sampling (`tsflash.dataset.windows.BalancedWindows`): every training bar has the
  same chance of being scored at every N, the last days before the validation tail included.
* The loss of a step is the cross-entropy summed over its scored positions divided by their
  EXPECTED count (batch x mean scored positions per window, exact by index arithmetic), not by
  the count in that batch: a window that scores few bars (at a piece's edge) does not weigh its
  bars up, which at N = 131072 (one window per step) would make edge bars count over 1000x.
* One learning rate and schedule for every N. A per-N learning rate picked on the validation
  tail was measured and rejected: at toy size on CPU (`benchmarks/bench_signal.py`: real BTC
  2024-07..2025-06, fold 1 of the CPU preset, its d_model-32 model, N = 64, 512, 4096 at 4096
  tokens per step, i.e. 64, 8 and 1 windows -- the default's 256/32/4 pushed one step further;
  300 steps, validation every 10 on a 14-day tail, no early stop) the mean validation loss over
  steps 151-300 (sd between evaluations) was::

        lr      N=64              N=512             N=4096
        3e-4    1.0663 (0.0007)   1.0672 (0.0004)   1.0671 (0.0003)
        1e-3    1.0666 (0.0012)   1.0668 (0.0006)   1.0668 (0.0007)
        3e-3    1.0674 (0.0014)   1.0671 (0.0008)   1.0664 (0.0009)

  Seeds 1 and 2 at lr 1e-3 put the plateaus at 1.0658-1.0666 (N=64), 1.0667-1.0669 (N=512) and
  1.0663-1.0668 (N=4096): the best other learning rate lies inside the seeds' range at N = 64
  and 4096, and 0.0002 above it at N = 512 (where 1e-3 is best), while the seeds' test log-loss
  differs by up to 0.008. A per-N learning rate would select on the noise between evaluations
  (sd 0.0003-0.0014), at three times the compute. What does differ is where each N flattens:
  the best step was 70-270 at N = 64 and 512 and 50-300 at N = 4096 (one window per step; with
  lr 3e-3 still falling at 300), over seeds and learning rates: hence validated stopping with a
  maximum well beyond the plateau, and the report's convergence criterion to say when it was too
  short. (The training-loss curve of a one-window batch is noisy: its mean over 10 steps is the
  loss of 10 windows, i.e. of 10 regimes.)

Loss positions: with ``train.loss_warmup_fraction`` > 0 a window's first positions are not
scored (their context is short); a fraction keeps that share the same for every n. Default 0:
every position is a causal prediction of its own bar.

Patch tokens (``model.patch`` = p > 1, the second architecture): the same loop, windows and
stopping rule; a window's labels are taken at its patch ends only (every p-th bar), and since
the balanced windows start at every offset, every training bar is a patch end in n / p of its
windows (`tsflash.dataset.windows`); validation and test bars are scored once each, from windows
whose patch grid ends at the bar (at most p x the eval windows of p = 1).

The recipe (issue 29; off by default, the published runs): the best weights restored at steps
137-184 of 600 were those of 83-91 % of the peak learning rate, unannealed, and the validation
loss of N=32768 moved 2.4x more between evaluations than at 512. ``train.ema_decay`` > 0 keeps a
debiased exponential moving average of the weights (`_update_average`): it is what is validated,
restored and scored, so the kept model is an average, not one noisy iterate. ``train.schedule =
"wsd"`` (warm-up, stable, decay; `wsd_lr_at`) fits the stopping rule where a cosine to a fixed
step count cannot: the stable phase runs under the stopping rule, then training rewinds to its
best step s (weights, optimizer, average, kept on the host at each new best) and decays linearly
over ``decay_fraction`` x s steps, validated as before (no early stop within it). That is the
"second pass ending its decay at the validated step" without the second pass: a rerun with the
same seed would repeat the stable phase up to s exactly. It costs the decay steps (about 20 % of
s) and host memory for one copy of weights and optimizer. Without a validation tail the decay
is the last ``decay_fraction`` of ``train.steps``. ``train.short_fraction`` > 0 replaces that
share of each batch of N > ``train.short_length`` bars by short windows of the same tokens
(`_batch_parts`, drawn from their own stream of the step), scored under one loss: the long-N
models cut to 512 bars had lost what the N=512 model learns.

Learning curves: every evaluation appends (step, mean training loss since the previous
evaluation, validation loss) to the training state; checkpoints carry it and the early-stopping
state, so an interrupted cell resumes bit-identically on CPU. `FoldResult.cost` keeps the curve,
the best step and the stopping step. A "wsd" cell's step count and curve go on through the
decay (they count optimizer steps run), so its curve holds the rewind as a step back in loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tsflash.config import ExperimentConfig, TrainConfig, check_schedule, check_short_windows
from tsflash.dataset.windows import BalancedWindows, check_window_length, fit_pieces, gather_windows
from tsflash.device import autocast, reset_peak_memory, sync
from tsflash.engine._checkpoint import Checkpoint, TrainingState, checkpoint_identity
from tsflash.engine._cost import StepClock, fold_cost
from tsflash.engine._evaluate import FoldResult, fold_result, predict_range, validation_loss
from tsflash.engine._prepare import FoldData, Prepared, contiguous_runs, fold_data
from tsflash.errors import UserError
from tsflash.model import attention, fastpath
from tsflash.model.rotary import rotary_wavelength
from tsflash.model.spec import check_patch

log = logging.getLogger(__name__)

def lr_at(step: int, steps: int, lr: float, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup_steps` steps to `lr`, then cosine decay to lr * min_lr_ratio at the last step."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def wsd_lr_at(step: int, lr: float, warmup_steps: int, min_lr_ratio: float, decay_start: int | None,
              decay_steps: int = 1) -> float:
    """Warm-up, stable, decay: linear warm-up over `warmup_steps` steps to `lr`, then `lr` until
    `decay_start` (None: no decay yet), then a linear decay from `lr` reaching lr * min_lr_ratio at
    the decay's last step, decay_start + decay_steps - 1 (and held there after)."""
    if decay_start is not None and step >= decay_start:
        done = min(decay_steps, step - decay_start + 1)
        return lr * (1 - (1 - min_lr_ratio) * done / decay_steps)
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    return lr


def decay_steps(fraction: float, steps: int) -> int:
    """The decay phase's length: `fraction` of `steps` (the steps before it), at least one."""
    return max(1, round(fraction * steps))


def step_seed(seed: int, fold: int, step: int, part: int = 0) -> int:
    """Seed of one optimizer step's sampling, a pure function of (seed, fold, step): resumable.
    `part` > 0 names another stream of the same step (the short windows of a mixed batch)."""
    entropy = [seed, fold, step] + ([part] if part else [])
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))


def sample_starts(n_starts: int, batch: int, seed: int, fold: int, step: int, part: int = 0) -> torch.Tensor:
    """Indices into the fold's `n_starts` (virtual) windows for one step: (batch,) int64 on CPU,
    uniform with replacement."""
    g = torch.Generator(device="cpu").manual_seed(step_seed(seed, fold, step, part))
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
) -> FoldResult:  # long: the cell's whole contract in its docstring; the body is one straight pass, each stage a call
    """Train a fresh model on fold `fold` with context length `n`, then score its test block.

    Training (identical for every n): ``ModelConfig(n_features, **cfg.model, **model_overrides)``
    initialised from `seed` alone; AdamW with weight decay on 2-D weights only (matrices, not
    norms or biases); linear warm-up then cosine learning rate over ``cfg.train.steps`` steps of
    ``tokens_per_step`` tokens (batch = tokens_per_step // n windows), gradient clipping;
    coverage-balanced windows drawn by a generator seeded from (seed, fold, step). The loss is
    the model's own (`CausalTransformer.forward(x, targets, loss_denominator)`); validated early
    stopping and the best weights restored (module doc).

    Resume: with `checkpoint_dir`, model + optimizer + training state (step, early stopping,
    learning curve) are written atomically every `checkpoint_every_s` seconds, at each early stop
    and at the end; a second call with the same arguments continues from there and, on CPU,
    reproduces the uninterrupted run exactly.

    on_step : the progress hook, called as ``on_step(step)`` after each completed optimizer step
        (step counts from 1; a resumed run continues from the checkpoint's step). The sweep shows
        progress within a cell with it; tests raise from it to simulate a kill.
    model_path : where to save the trained model (the best, restored weights) with
        `CausalTransformer.save`, e.g. for the precision bench on a trained model's q, k, v.

    The cell's first training step runs under the profiler: the cost record keeps the attention
    kernel it saw (`backend_observed`, `kernels_observed`) beside the forced one (`backend`).
    """
    cfg = prepared.cfg
    t = _set_up(prepared, n, fold, seed, device, checkpoint_dir, model_overrides, train_overrides, fold_inputs,
                checkpoint_every_s)
    t.run(on_step)
    model, fwd_model, state, fd, features, device = t.model, t.fwd_model, t.state, t.fd, t.features, t.device
    tc, batch, windows = t.tc, t.batch, t.windows
    if state.best_model is not None:
        model.load_state_dict(state.best_model)
    elif state.average is not None:  # a fixed budget: the average at the last step is the model
        _copy_into(model, state.average["weights"])
    if model_path is not None:
        model.save(model_path)

    model.eval()
    cuts = [m for m in cfg.eval.context_cuts if m < n]
    # at a long N on a CPU the test block alone can take minutes: say what starts, then how long it took
    log.info("fold %d n=%d seed=%d: scoring %s test bars%s", fold, n, seed, f"{fd.test_hi - fd.test_lo:,}",
             f" (and again with the context cut to {', '.join(map(str, cuts))})" if cuts else "")
    t0 = time.perf_counter()
    y_prob, cut_probs, eval_seconds = _score_test(fwd_model, features, fd, n, cfg, device)
    val_prob = _score_validation(fwd_model, features, fd, n, cfg, device)
    log.info("fold %d n=%d seed=%d: scored in %.1f s", fold, n, seed, time.perf_counter() - t0)
    cost = fold_cost(model, state, n=n, batch=batch, tokens_per_step=tc.tokens_per_step, n_train_bars=len(fd.fit_idx),
                     n_train_windows=windows.count, eval_seconds=eval_seconds, device=device)
    cost |= _training_record(state, tc, fd.val is not None, model)
    result = fold_result(prepared, fd, n, seed, y_prob, cost, val_prob=val_prob, cut_probs=cut_probs)
    log.debug("fold %d n=%d seed=%d: acc %.4f logloss %.4f, %d steps (best %s), %.1f s train, %.3g tok/s, backend %s "
             "(observed %s)", fold, n, seed, result.metrics["accuracy"], result.metrics["log_loss"], cost["steps"],
             cost["best_step"], cost["train_seconds"], cost["tokens_per_s"], cost["backend"], cost["backend_observed"])
    return result


def lowest_val_loss_by(curve: dict, step: int) -> float:
    """The lowest validation loss a learning curve ({"step": [...], "val_loss": [...]}, as a cell's
    cost keeps it) had shown by `step`; inf before its first evaluation. The screening rule of
    validated restarts, in the engine and in the recipes' simulation of it alike."""
    return min((v for s, v in zip(curve["step"], curve["val_loss"]) if s <= step), default=math.inf)


@dataclasses.dataclass
class _Training:
    """One cell's training, set up and resumed from its checkpoint (`_set_up`): what `run_fold` and
    `train_until` share."""

    model: torch.nn.Module
    fwd_model: torch.nn.Module  # the model itself or its compiled forward (tsflash.model.fastpath)
    optimizer: torch.optim.Optimizer
    tc: TrainConfig
    state: TrainingState
    checkpoint: Checkpoint
    batch_at: Callable
    val_loss: Callable | None  # None: no validation tail (a fixed budget)
    fd: FoldData
    features: torch.Tensor
    batch: int
    windows: BalancedWindows
    device: torch.device
    label: str

    def run(self, on_step: Callable[[int], None] | None, until: int | None = None) -> None:
        _train(self.model, self.fwd_model, self.optimizer, self.tc, self.state, self.batch_at, self.val_loss,
               self.checkpoint, on_step, self.device, self.label, until)


def _set_up(prepared: Prepared, n: int, fold: int, seed: int, device, checkpoint_dir: Path | None,
            model_overrides: dict | None, train_overrides: dict | None, fold_inputs: FoldData | None,
            checkpoint_every_s: float) -> _Training:
    """Settings, data on the device, model and optimizer, and the state of a checkpoint if there is one."""
    from tsflash.model.transformer import CausalTransformer  # torch-heavy; imported where needed

    cfg = prepared.cfg
    device = torch.device(device) if device is not None else prepared.device
    tc, n, batch = _train_settings(cfg, n, train_overrides)
    fd = fold_inputs if fold_inputs is not None else fold_data(prepared, fold)
    assert fd.fold == fold
    features = fd.features.to(device)  # (T, F)
    labels = fd.labels.to(device)  # (T,)
    settings, mconf = _model_config(cfg, features.shape[1], model_overrides)
    check_patch(mconf.patch, n, ("model.patch", "context length n"))
    segments = prepared.segments.to(device)
    windows = _fit_windows(fd, n, segments, cfg.data.max_gap_bars, tc, mconf.patch)
    parts = _batch_parts(fd, windows, n, batch, segments, cfg.data.max_gap_bars, tc, mconf.patch)
    torch.manual_seed(seed)  # initial weights depend on the seed only, not on n or the fold
    model = CausalTransformer(mconf).to(device)
    # the attention kernel decided at this shape before the first step, then compiled (tsflash.model.fastpath)
    fwd_model = fastpath.prepare(model, device, n=n, batch=batch, compile=tc.compile)
    optimizer = _adamw(model, tc, device)
    checkpoint = Checkpoint(checkpoint_dir, checkpoint_identity(prepared, n, fold, seed, settings, tc), n, fold, seed,
                            checkpoint_every_s, device)
    state = checkpoint.load(model, optimizer) or TrainingState()

    reset_peak_memory(device)
    # a finished run draws no more batches; a "wsd" decay past this end draws its own (`_batch_source`)
    batch_at = _batch_source(parts, features, labels, state.step, _last_step(state, tc), seed, fold, mconf.dropout > 0)
    val_loss = (functools.partial(validation_loss, fwd_model, fd, features, labels, n, cfg.eval.batch_tokens, device,
                                  mconf.patch) if fd.val is not None else None)
    return _Training(model, fwd_model, optimizer, tc, state, checkpoint, batch_at, val_loss, fd, features, batch,
                     windows, device, f"fold {fold} n={n} seed={seed}")


def train_until(
    prepared: Prepared,
    n: int,
    fold: int,
    seed: int,
    until: int,
    device=None,
    checkpoint_dir: Path | None = None,
    model_overrides: dict | None = None,
    train_overrides: dict | None = None,
    *,
    fold_inputs: FoldData | None = None,
    checkpoint_every_s: float = 60.0,
    on_step: Callable[[int], None] | None = None,
) -> dict:
    """The first `until` steps of `run_fold` (fewer if it stops early), checkpointed there, nothing
    scored: `run_fold` with the same arguments continues from that checkpoint as if never paused
    (bit-identical on CPU). The screening of validated restarts (`tsflash.engine._restarts`).

    Returns {"best_val_loss": the lowest validation loss measured at a step <= until (read from the
    learning curve, so a cell that already ran past `until` answers the same), "steps": the steps done
    by then, "train_seconds", "val_seconds": their cost so far}.
    """
    if checkpoint_dir is None:
        raise ValueError("train_until needs a checkpoint_dir: run_fold continues from the checkpoint it leaves")
    t = _set_up(prepared, n, fold, seed, device, checkpoint_dir, model_overrides, train_overrides, fold_inputs,
                checkpoint_every_s)
    if t.val_loss is None:
        raise ValueError("train_until screens by the validation loss: the fold needs a validation tail")
    t.run(on_step, until)
    if t.state.step < _last_step(t.state, t.tc):  # paused, not finished: where run_fold continues
        t.checkpoint.save(t.model, t.optimizer, t.state)
    return {"best_val_loss": lowest_val_loss_by(t.state.curve, until), "steps": min(t.state.step, until),
            "train_seconds": t.state.train_seconds, "val_seconds": t.state.val_seconds}


def _score_validation(fwd_model, features: torch.Tensor, fd: FoldData, n: int, cfg: ExperimentConfig, device):
    """(V, 3) probabilities of the validation tail from the restored best weights, or None without a
    tail: the trading rule fits its entry threshold on them (tsflash.scoring.strategy), never on test bars."""
    if fd.val is None:
        return None
    return predict_range(fwd_model, features, *fd.val, n=n, batch_tokens=cfg.eval.batch_tokens, device=device,
                         patch=fwd_model.config.patch)[2].cpu().numpy()


def _score_test(fwd_model, features: torch.Tensor, fd: FoldData, n: int, cfg: ExperimentConfig, device):
    """(y_prob (M, 3), {m: (M, 3)} with the context cut to each m in eval.context_cuts below n, seconds of
    the full scoring): every test bar once, the cut scorings on the same bars (eval windows of length m)."""
    sync(device)
    t0 = time.perf_counter()
    score = functools.partial(predict_range, fwd_model, features, fd.test_lo, fd.test_hi,
                              batch_tokens=cfg.eval.batch_tokens, device=device, patch=fwd_model.config.patch)
    y_prob = score(n=n)[2].cpu().numpy()
    seconds = time.perf_counter() - t0
    return y_prob, {m: score(n=m)[2].cpu().numpy() for m in cfg.eval.context_cuts if m < n}, seconds


def _train(model, fwd_model, optimizer, tc: TrainConfig, state: TrainingState, batch_at, val_loss,
           checkpoint: Checkpoint, on_step, device: torch.device, label: str, until: int | None = None) -> None:
    """The training loop, from `state.step` to `_last_step` (tc.steps, an early stop, or the end
    of a "wsd" decay), or to step `until` when that comes first (a pause: `train_until`); updates `state`.

    batch_at(step) -> (parts, denominator) : the step's windows, [(x (B, n, F), targets (B, n) with
        -1 = not scored)], one part per window length, and the loss's fixed denominator.
    val_loss : None (a fixed budget), or a function giving the validation loss (early stopping).
    """
    if state.kernels_observed is None:
        attention.warm_up_profiler()  # its one-time setup is not part of a training step
    if tc.schedule == "wsd" and val_loss is None and state.decay is None:  # a fixed budget: the classic end
        length = decay_steps(tc.decay_fraction, tc.steps)
        state.decay = {"from": None, "start": tc.steps - length, "steps": length}
    rewinds = tc.schedule == "wsd" and val_loss is not None
    clock = StepClock(device, state.train_seconds)
    step = first = state.step
    # A compiled forward compiles in its first step: the profiler would record every op of the
    # compiling and autotuning too (on the GPU 3-6 s more to process them, seen in no timer), so
    # the kernels are observed one step later, the same graph running (unless there is no later step).
    compiles = isinstance(fwd_model, fastpath.Compiled)
    model.train()
    while step < _last_step(state, tc) and (until is None or step < until):
        clock.start()
        lr = _learning_rate(step, tc, state)
        for group in optimizer.param_groups:
            group["lr"] = lr
        parts, denominator = batch_at(step)  # [((B, n, F), (B, n)), ...], float
        with _observe_kernels_once(state, now=not compiles or step > first or step + 1 >= tc.steps):
            with autocast(device):
                loss = _batch_loss(fwd_model, parts, denominator)
            loss.backward()
        if tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if tc.ema_decay:
            _update_average(state, model, tc.ema_decay)
        state.loss_sum = state.loss_sum + loss.detach()  # on the device: no sync per step
        step = state.step = step + 1

        last = _last_step(state, tc)
        validate = val_loss is not None and (step % tc.eval_every == 0 or step == last)
        save = step == last or checkpoint.due()
        if validate or save:
            state.train_seconds = clock.pause()  # validation and checkpoint writes are not training
        if validate:
            _validate(state, model, optimizer, val_loss, tc, rewinds, label)
        if rewinds and state.decay is None and state.rewind is not None and (state.stopped or step == tc.steps):
            _begin_decay(state, model, optimizer, tc, device)
            log.debug("%s step %d: decay over %d steps from the best step %d", label, step, state.decay["steps"],
                      state.decay["from"])
            save = True
        if save or step >= _last_step(state, tc):
            checkpoint.save(model, optimizer, state)
        if log.isEnabledFor(logging.DEBUG) and step % max(1, tc.steps // 10) == 0:
            log.debug("%s step %d/%d lr %.2e loss %.5f", label, step, tc.steps, lr, loss.item())
        if on_step is not None:
            on_step(step)
    state.train_seconds = clock.pause()


def _last_step(state: TrainingState, tc: TrainConfig) -> int:
    """Where training ends: the end of the decay once it is planned, else the early stop or tc.steps."""
    if state.decay is not None:
        return state.decay["start"] + state.decay["steps"]
    return state.step if state.stopped else tc.steps


def _learning_rate(step: int, tc: TrainConfig, state: TrainingState) -> float:
    if tc.schedule == "cosine":
        return lr_at(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_ratio)
    decay = state.decay or {"start": None, "steps": 1}
    return wsd_lr_at(step, tc.lr, tc.warmup_steps, tc.min_lr_ratio, decay["start"], decay["steps"])


def _validate(state: TrainingState, model, optimizer, val_loss, tc: TrainConfig, rewinds: bool, label: str) -> None:
    """One evaluation, of the weight average where there is one; with `rewinds` (a "wsd" schedule
    before its decay) a new best also keeps the state the decay would start from."""
    t0 = time.perf_counter()
    with _averaged_weights(model, state.average):
        val = _evaluating(model, val_loss)  # a float: the device has finished
        # no early stop within the decay: it is short, and its end is the annealed model
        improved = _evaluate_and_stop(state, model, val, tc.patience if state.decay is None else 0, tc.keep_from)
    if state.val_seconds is not None:  # None: resumed from a checkpoint that did not record it
        state.val_seconds += time.perf_counter() - t0
    if improved and rewinds and state.decay is None:
        state.rewind = {"step": state.step, "model": _to_host(model.state_dict()),
                        "optimizer": _to_host(optimizer.state_dict()), "average": _to_host(state.average)}
    log.debug("%s step %d: train loss %.5f, val loss %.5f (best %.5f at step %d)", label, state.step,
              state.curve["train_loss"][-1], state.curve["val_loss"][-1], state.best_loss, state.best_step)


def _begin_decay(state: TrainingState, model, optimizer, tc: TrainConfig, device: torch.device) -> None:
    """The "wsd" schedule's annealed end at the validated step: weights, optimizer and average
    rewound to the stable phase's best step s, then a decay of decay_fraction * s steps. The step
    count goes on (it counts the optimizer steps run), and so do the batches drawn."""
    rewind, state.rewind = state.rewind, None  # used once; not carried by later checkpoints
    model.load_state_dict(rewind["model"])
    optimizer.load_state_dict(rewind["optimizer"])
    if rewind["average"] is not None:
        state.average = _to_device(rewind["average"], device)
    state.decay = {"from": rewind["step"], "start": state.step, "steps": decay_steps(tc.decay_fraction, rewind["step"])}


def _update_average(state: TrainingState, model, decay: float) -> None:
    """The debiased exponential moving average of the weights after each optimizer step: after t
    steps, sum_i decay^(t-i) w_i / sum_i decay^(t-i) (so no weight of the initialisation), i.e.
    a lerp towards the new weights by (1 - decay) / (1 - decay^t)."""
    named = list(model.named_parameters())
    if state.average is None:
        state.average = {"count": 0, "weights": {k: p.detach().clone() for k, p in named}}
    average = state.average
    average["count"] += 1
    weight = (1 - decay) / (1 - decay ** average["count"])
    with torch.no_grad():
        torch._foreach_lerp_([average["weights"][k] for k, _ in named], [p.detach() for _, p in named], weight)


@contextlib.contextmanager
def _averaged_weights(model, average: dict | None):
    """The block runs with the weight average in the model's parameters (as they are without one)."""
    if average is None:
        yield
        return
    live = {k: p.detach().clone() for k, p in model.named_parameters()}
    _copy_into(model, average["weights"])
    try:
        yield
    finally:
        _copy_into(model, live)


def _copy_into(model, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(weights[k])


def _to_host(obj):
    """A copy on the host of a (nested) state: tensors copied, containers rebuilt, the rest as is."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def _to_device(average: dict, device: torch.device) -> dict:
    return {"count": average["count"], "weights": {k: v.to(device, copy=True) for k, v in average["weights"].items()}}


def _batch_parts(fd: FoldData, windows: BalancedWindows, n: int, batch: int, segments: torch.Tensor,
                 max_gap_bars: int, tc: TrainConfig, patch: int) -> list[tuple[BalancedWindows, int]]:
    """(windows, how many a step draws) of each part of a batch: `batch` windows of n bars, or with
    train.short_fraction at n > train.short_length that share of them as short windows of the same
    tokens (n / short_length short windows for each long one)."""
    if not tc.short_fraction or n <= tc.short_length:
        return [(windows, batch)]
    replaced = round(tc.short_fraction * batch)
    short = _fit_windows(fd, tc.short_length, segments, max_gap_bars, tc, patch)
    return [(windows, batch - replaced), (short, replaced * n // tc.short_length)]


def _batch_loss(fwd_model, parts, denominator: float) -> torch.Tensor:
    """The model's own loss, summed over the batch's parts (one shape each) with one denominator."""
    _, loss = fwd_model(*parts[0], denominator)
    for x, y in parts[1:]:
        loss = loss + fwd_model(x, y, denominator)[1]
    return loss


def _batch_source(parts: list[tuple[BalancedWindows, int]], features: torch.Tensor, labels: torch.Tensor,
                  first: int, last: int, seed: int, fold: int, dropout: bool):
    """batch_at(step) -> ([(x (B, n, F), y (B, n)) per part], loss denominator) for steps from `first` on.

    A part's windows are `windows.targets(labels, k)` for k = `sample_starts(...)` (part i > 0 from
    its own stream of the step); the picks of steps first .. last - 1 are drawn up front (one
    host->device copy, no per-step sync), those of later steps (a "wsd" decay that runs past the
    planned end) when asked, the same picks either way. The denominator is the expected number of
    scored positions of a batch (module doc), over all its parts. With dropout, the step's seed
    also fixes the masks (reproducible on resume).
    """
    device = features.device
    denominator = sum(count * windows.scored_per_window() for windows, count in parts)

    def draw(i: int, steps: range) -> torch.Tensor:  # (len(steps), count) on the device
        windows, count = parts[i]
        return torch.stack([sample_starts(windows.count, count, seed, fold, s, part=i) for s in steps]).to(device)

    picks = [draw(i, range(first, last)) for i in range(len(parts))] if first < last else None

    def batch_at(step: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], float]:
        if dropout:
            torch.manual_seed(step_seed(seed, fold, step))
        out = []
        for i, (windows, _) in enumerate(parts):
            pick = picks[i][step - first] if first <= step < last else draw(i, range(step, step + 1))[0]
            start, y = windows.targets(labels, pick)  # (B,), (B, n)
            out.append((gather_windows(features, start, windows.n), y))  # (B, n, F), (B, n)
        return out, denominator

    return batch_at


@contextlib.contextmanager
def _observe_kernels_once(state: TrainingState, now: bool = True):
    """Run the block under the profiler on a cell's first step (the second when compiled: `now`
    says when; once: the result is kept in `state`, which checkpoints carry across a resume).
    Same math (the parity test of a step checks it bit for bit); it adds some tens of ms to that
    one step, which stays timed."""
    if state.kernels_observed is not None or not now:
        yield
        return
    with attention.observe_kernel_ops() as ops:
        yield
    state.kernels_observed = ops


def _evaluating(model, fn):
    """fn() with `model` in eval mode (dropout off), then back to training mode."""
    model.eval()
    try:
        return fn()
    finally:
        model.train()


def _evaluate_and_stop(state: TrainingState, model, val: float, patience: int, keep_from: int = 0) -> bool:
    """Append (step, mean training loss since the last evaluation, val) to the curve; keep the best
    weights (on the host); stop after `patience` evaluations without improvement (0 = never). Before
    step `keep_from` an evaluation is only recorded: it neither keeps weights nor counts towards
    patience (train.keep_from). Returns whether `val` is a new best."""
    curve, step = state.curve, state.step
    since = step - (curve["step"][-1] if curve["step"] else 0)
    curve["step"].append(step)
    curve["train_loss"].append(float(state.loss_sum) / since)
    curve["val_loss"].append(val)
    state.loss_sum = 0.0
    if step < keep_from:
        return False
    if val < state.best_loss:
        state.best_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        state.best_loss, state.best_step, state.bad_evals = val, step, 0
        return True
    state.bad_evals += 1
    state.stopped = state.stopped or (patience > 0 and state.bad_evals >= patience)
    return False


def _training_record(state: TrainingState, tc: TrainConfig, validated: bool, model) -> dict:
    """The cost record's training fields: the learning curve {"step", "train_loss", "val_loss"}
    (empty lists without a validation tail), the best step and its validation loss (None without
    a tail), the last step trained, the rule (maximum, eval_every, patience, lr) and the rotary
    base in use with its slowest wavelength in bars; with a recipe other than the published one
    (cosine, raw weights) also "recipe" (`_recipe_record`)."""
    head_dim, base = model.config.head_dim, model.config.rotary_base
    record = {"rotary_base": base, "rotary_wavelength": rotary_wavelength(head_dim, base),
              "curve": {k: list(v) for k, v in state.curve.items()},
              "best_step": state.best_step if validated else None,
              "best_val_loss": state.best_loss if validated else None, "stop_step": state.step,
              "max_steps": tc.steps, "eval_every": tc.eval_every if validated else None,
              "patience": tc.patience if validated else None, "lr": tc.lr}
    if tc.schedule != "cosine" or tc.ema_decay or tc.short_fraction or tc.keep_from:
        record["recipe"] = _recipe_record(state, tc, state.best_step if validated else state.step)
    return record


def _recipe_record(state: TrainingState, tc: TrainConfig, kept: int) -> dict:
    """The schedule, the average's decay, the decay phase ({"from", "start", "steps"} or None), and
    of the kept weights (after optimizer step `kept`): the updates they had ("wsd" rewinds, so
    after its decay fewer than `kept`) and the learning rate of their last update over lr."""
    decay = state.decay
    rewound = decay is not None and decay["from"] is not None and kept > decay["start"]
    updates = decay["from"] + kept - decay["start"] if rewound else kept
    return {"schedule": tc.schedule, "ema_decay": tc.ema_decay, "short_fraction": tc.short_fraction, "decay": decay,
            **({"keep_from": tc.keep_from} if tc.keep_from else {}), "kept_updates": updates,
            "kept_lr_ratio": _learning_rate(kept - 1, tc, state) / tc.lr if kept else None}


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
    if not 0 <= tc.ema_decay < 1:
        raise UserError(f"train.ema_decay must be in [0, 1) (0 = no weight average), got {tc.ema_decay}")
    check_schedule(tc)
    check_short_windows(tc, [n])
    return tc, n, tc.tokens_per_step // n


def _model_config(cfg: ExperimentConfig, n_features: int, model_overrides: dict | None):
    """(settings dict, ModelConfig): the preset's model settings with the overrides."""
    from tsflash.model.transformer import ModelConfig

    settings = dataclasses.asdict(cfg.model) | (model_overrides or {})
    known = {f.name for f in dataclasses.fields(ModelConfig)} - {"n_features"}
    if unknown := sorted(set(settings) - known):
        raise UserError(f"unknown model override(s) {unknown}; known: {', '.join(sorted(known))}")
    return settings, ModelConfig(n_features=n_features, **settings)


def _fit_windows(fd: FoldData, n: int, segments: torch.Tensor, max_gap_bars: int, tc: TrainConfig,
                 patch: int = 1) -> BalancedWindows:
    """The coverage-balanced windows of n bars over the fit range's gap-free pieces (scoring
    only the bars that end a patch, for patch tokens)."""
    lo, hi = fit_pieces(contiguous_runs(fd.fit_idx), segments, n, patch)  # (pieces,), (pieces,)
    if len(lo) == 0:
        raise UserError(f"fold {fd.fold}: no training window of n={n} bars fits in the {len(fd.fit_idx)} training "
                        f"bars (data.max_gap_bars={max_gap_bars})")
    return BalancedWindows(lo, hi, n, warm=int(tc.loss_warmup_fraction * n), patch=patch)


def _adamw(model, tc: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D weights only (matrices; not norms or biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=tc.lr, betas=tuple(tc.betas), fused=device.type == "cuda",
    )
