"""Stage 5, cost: what one cell cost to train and score (`FoldResult.cost`).

train_seconds     wall-clock of the optimizer steps (CUDA synchronised; checkpoint writes and
                  validation passes excluded; summed over resumed sessions). The first step of
                  a cell (the second when compiled: the first one compiles) runs under the
                  profiler (`kernels_observed`) and is counted: it is a real training step.
epoch_seconds     train_seconds * n_train_bars / tokens_trained: the time one pass over as many
                  tokens as the fold has training bars would take. Windows overlap, so an
                  "epoch" is a token count, not a pass over distinct windows; it makes folds and
                  N comparable.
val_seconds       wall-clock of the validation passes that decide early stopping (eager in a
                  compiled cell too: fastpath.COMPILE_EVALUATION; summed over resumed sessions;
                  None for a cell resumed from a checkpoint written before this was recorded):
                  the protocol's cost beside training.
eval_seconds      wall-clock of scoring the test block.
tokens_per_s      tokens_trained / train_seconds (every position of every window is a token).
tflops            flops_per_token * tokens_trained / train_seconds / 1e12, with the one FLOPs
                  rule `tsflash.model.flops.flops_per_token` = 6 P + 6 L d N (derivation there).
                  With patch tokens (``model.patch`` = p > 1) a token is still a bar: the model's
                  own tokens are n / p per window, so flops_per_token is the rule's at context
                  n / p, divided by p (per bar), and the record says "patch": p.
peak_memory_bytes `tsflash.device.peak_memory_bytes`: the CUDA allocator's peak since the cell
                  began; on CPU the job's peak resident set (`tsflash.device.process_peak_bytes`:
                  this process or a child it waited for, since it started, so an upper bound).
backend           the attention kernel forced (`CausalTransformer.attention_backend_used`).
backend_observed  the kernel the profiler saw run on the cell's first training step ("cuDNN",
                  "FLASH", "EFFICIENT", "flash CPU", "MATH"; None when the cell was resumed from
                  a checkpoint written before this was recorded, or no SDPA kernel ran).
kernels_observed  the raw profiler op names behind backend_observed, forward and backward.
kernel_choice     how the kernel was decided before the first step (`tsflash.model.fastpath.prepare`):
                  for `auto` the shape timed, the candidates, their median ms, the runner-up, the
                  margin and the tie rule; for an explicit backend the name and "asked for".
compile           the torch.compile outcome (`tsflash.model.fastpath`): {"compiled", "mode", "reason"
                  (why eager), "first_call_seconds" per shape (compiling included, where the
                  worker had not compiled that shape for an earlier cell), and when compiled
                  "cache_dir" (inductor's caches, `fastpath.compile_cache_dir`)}.
Both are None for a model that `tsflash.model.fastpath.prepare` did not make ready.
"""

from __future__ import annotations

import copy
import logging
import time

import torch

from tsflash.device import peak_memory_bytes, sync
from tsflash.engine._checkpoint import TrainingState
from tsflash.model import attention
from tsflash.model.flops import flops_per_token

log = logging.getLogger(__name__)


class StepClock:
    """Wall-clock of training steps only: `start` before a step (no-op while running), `pause`
    around anything else (validation, checkpoint writes). Both wait for the device first."""

    def __init__(self, device: torch.device, seconds: float = 0.0):
        self.device = device
        self.seconds = seconds  # accumulated over finished stretches (and earlier sessions)
        self._mark: float | None = None

    def start(self) -> None:
        if self._mark is None:
            sync(self.device)
            self._mark = time.perf_counter()

    def pause(self) -> float:
        """Stop the clock; returns the accumulated seconds."""
        if self._mark is not None:
            sync(self.device)
            self.seconds += time.perf_counter() - self._mark
            self._mark = None
        return self.seconds


def kernel_record(forced: str | None, ops: list[str] | None) -> dict:
    """{"backend": forced, "backend_observed": short label, "kernels_observed": op names}.

    A mismatch between the forced and the observed kernel is logged, not raised: the cell is
    trained already, and its record says what ran.
    """
    observed = attention.kernel_label(ops or [])
    backends = {attention.OP_BACKEND[attention.kernel_op(op)] for op in ops or []}
    if ops and forced != attention.REFERENCE and backends != {forced}:
        log.warning("forced attention kernel %r but the profiler saw %s on the first training step", forced, ops)
    return {"backend": forced, "backend_observed": observed, "kernels_observed": ops}


def fold_cost(model, state: TrainingState, *, n: int, batch: int, tokens_per_step: int, n_train_bars: int,
              n_train_windows: int, eval_seconds: float, device: torch.device) -> dict:
    """The cost record of a trained cell (module doc) from its training state (steps done,
    train_seconds, val_seconds, early stop, kernels_observed)."""
    steps = state.step
    tokens = steps * batch * n
    seconds = state.train_seconds
    n_params = model.n_params()
    patch = model.config.patch
    fpt = flops_per_token(n_params, model.config.n_layers, model.config.d_model, n, patch)  # per bar
    kernels = kernel_record(model.attention_backend_used, state.kernels_observed)
    return {
        "train_seconds": seconds,
        "epoch_seconds": seconds * n_train_bars / tokens if tokens else float("nan"),
        "val_seconds": state.val_seconds,
        "eval_seconds": eval_seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
        "peak_memory_bytes": peak_memory_bytes(device),
        **kernels,
        "tflops": fpt * tokens / seconds / 1e12 if seconds > 0 else float("nan"),
        "flops_per_token": fpt,
        "steps": steps,
        "tokens_per_step": tokens_per_step,
        "batch_size": batch,
        "n_params": n_params,
        "n_train_bars": n_train_bars,
        "n_train_windows": n_train_windows,
        "early_stopped": bool(state.stopped),
        "device": str(device),
        "kernel_choice": copy.deepcopy(getattr(model, "kernel_choice", None)),
        "compile": copy.deepcopy(getattr(model, "compile_info", None)),
    } | ({"patch": patch} if patch > 1 else {})  # a per-bar cell's record as before patch tokens existed
