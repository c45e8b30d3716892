"""A cell's model made fast before its first training step: the attention kernel decided at the
real shape and pinned, then (``train.compile``) the forward compiled, with an eager fallback.

Why before the first step. `auto` times its candidate kernels (tsflash.model.attention, "auto"). Left
to the model's first forward, that probe ran inside the first training step: inside its time,
and inside the profiler window that records which kernel ran, so the cost record of N=512 on the
GPU read "EFFICIENT+FLASH+cuDNN". `prepare` decides at the cell's training shape (batch, heads,
N) first and pins the choice on every attention layer; the first step then sees one kernel.

Compile. With ``train.compile = true`` the forward (and through AOTAutograd the backward) goes
through torch.compile in mode COMPILE_MODE: inductor fuses the small element-wise ops
(rotary, norms, GELU, casts) whose separate passes over memory dominate an eager step at small N
(on the published runs' GPU at N=512: 18.2 of 25.3 ms, fused to 5.2 ms; the device idles 0.3 ms either way, so
the step is bandwidth-, not launch-bound), and the mode "reduce-overhead" adds CUDA graphs. Which mode measures best is for
`lab/h200.sh mfu` to say (`tsflash bench train --compile MODE` per mode); COMPILE_MODE
holds the answer. Eager runs instead, with the reason in the log, on CPU (a CPU cell is small:
compiling costs more than it saves), without Triton, and when the compiler fails (the first
failure switches the cell to eager).

Compiled once per process, and cached across processes. Only training calls are compiled, one
static graph per training shape (``dynamic=False``): the forward is one function of (model,
inputs) compiled once per mode for the whole process (`compiled_forward`), and its guards read
the model's structure and sizes, never which model it is, so every cell, seed, fold and restart
of a shape in a worker reuses the graph its first cell compiled, and a new N compiles exactly one
(two with short windows mixed in). Compiling happens inside that first training step (counted in
train_seconds; `model.compile_info["first_call_seconds"]` shows it). Without ``dynamic=False``
dynamo made the second N's graph symbolic in the sizes and ran every later N through it (on the
GPU, in the sweep cells and in `bench train` alike, 32768 ran the graph compiled at 4096). Evaluation
(no-grad calls: validation, test, context cuts) runs eager (COMPILE_EVALUATION): each of its
shapes, partial last batches included, would be a graph of its own (about 5 s each on the GPU)
for passes of 0.2-0.8 s per cell eager (docs/benchmarks.md). Inductor's caches (the FX graph and
AOTAutograd caches) live in `compile_cache_dir()`, so a resumed or repeated run loads its
kernels instead of compiling them (docs/benchmarks.md, "Compiling once").

CUDA graphs replay fixed memory: a compiled forward must not create tensors that outlive it. The
model's rotary tables are therefore filled here, eagerly, before compiling
(`CausalTransformer.reserve_positions`), and forward only slices them. Compiled, they are filled
for max(N, ROTARY_AUTO_LONGEST) positions: one table length for every N up to that, so the
table's length, a size each static graph is specialised on, adds no graph of its own.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path

import torch

from tsflash.device import is_oom, sync
from tsflash.model import attention
from tsflash.model.rotary import ROTARY_AUTO_LONGEST

log = logging.getLogger(__name__)

# torch.compile mode of train.compile. Measured (reports/bench/mfu.md, one GPU, one call): "default"
# and "reduce-overhead" (CUDA graphs) run the training step equally fast (N=512 12.5 vs 12.4 ms,
# 4096 19.7 vs 19.7, 32768 82.6 vs 82.7; eager 25.3 / 32.4 / 94.6): the compiled step is not
# launch-bound (the device idles 0.3 ms of 12.5 at N=512), so "default": CUDA graphs keep
# their memory in a private pool that torch.cuda.max_memory_allocated does not see (79-143 MiB "peak"
# against 5.5 GiB for "default"), and the peak memory of a cell is one of the costs the report states.
COMPILE_MODE = "default"
# "tuned" is tsflash's, not a torch.compile mode: "default" with inductor's own Triton kernels (the
# fused element-wise work and norms, bandwidth-bound at d_model 256) tuned block size by block size,
# and the matmuls left to cuBLAS (max-autotune's matmul tuning took 13.5 s per shape on the GPU).
# Measured (reports/bench/fusion/mfu.md): N=512 12.40 ms per step against 12.63, for 121 s of
# compiling against 15: not worth it in cells of a few hundred steps, so not COMPILE_MODE.
COMPILE_OPTIONS = {"tuned": {"max_autotune_pointwise": True, "coordinate_descent_tuning": True}}
COMPILE_MODES = ("default", "reduce-overhead", "tuned", "max-autotune", "max-autotune-no-cudagraphs")
# Evaluation (no-grad calls) compiled too? Off: unmeasured whether its compiling (a graph per
# evaluation shape) pays for passes that take 0.2-0.8 s a cell eager (module doc).
COMPILE_EVALUATION = False
# dynamo's limit on the graphs of one function: past it a new shape runs eager, silently. Static
# graphs take one per training shape of the process (every N, and its short windows): torch's 8
# would send the ninth eager.
RECOMPILE_LIMIT = 64
# Where inductor's caches go unless TSFLASH_COMPILE_CACHE says: the user's cache folder, not the
# run folder (docs/benchmarks.md): compiled kernels depend on torch, the device and the graph,
# never on the run, so every run of the same shapes on this machine reuses them.
CACHE_ENV = "TSFLASH_COMPILE_CACHE"
# tsflash.model.attention.sdpa forces its kernel with torch's sdpa_kernel, which dynamo records in
# the graph as calls of these two functions (the backend by name, the flags set). AOTAutograd's
# cache refuses graphs calling functions it does not know, and every process traced forward and
# backward again (tiny model on CPU: 4.4 s from the FX graph cache alone, 2.0 s with both). They
# are pure functions of their arguments, which are in the graph and so in the cache key.
SDPA_GRAPH_FUNCTIONS = ("torch.nn.attention._backend_from_string", "torch.nn.attention._sdpa_kernel")
_COMPILED: dict[str, object] = {}  # mode -> the process's compiled forward (`compiled_forward`)


def compile_kwargs(mode: str) -> dict:
    """torch.compile's keyword arguments for a mode of COMPILE_MODES (torch takes a mode or
    inductor options, not both)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    return {"options": dict(COMPILE_OPTIONS[mode])} if mode in COMPILE_OPTIONS else {"mode": mode}


def prepare(model, device, *, n: int, batch: int, compile: bool | str = False):
    """Pin `model`'s attention kernel for (batch, n) on `device`, then return the callable that
    runs its forward: `model` itself (eager) or a `Compiled` wrapper. `compile`: False, True
    (COMPILE_MODE) or a mode of COMPILE_MODES. The decision and the compile outcome are kept on the
    model as `kernel_choice` and `compile_info` (for the cell's cost record)."""
    device = torch.device(device)
    model.kernel_choice = pin_attention(model, device, n=n, batch=batch)
    mode = (COMPILE_MODE if compile is True else str(compile)) if compile else None
    why = eager_reason(device) if mode else "train.compile is off"
    # the rotary tables, before any compiled forward; compiled: one length for every N (module doc)
    model.reserve_positions(n if why else max(n, ROTARY_AUTO_LONGEST), device)
    if why is not None:
        if mode:
            log.info("train.compile: running eager on %s: %s", device, why)
        model.compile_info = {"compiled": False, "mode": mode, "reason": why}
        return model
    cache = use_compile_cache()
    compiled = Compiled(model, functools.partial(compiled_forward(mode), model), mode)
    compiled.info["cache_dir"] = str(cache)
    return compiled


def _forward(model, x: torch.Tensor, targets: torch.Tensor | None, loss_denominator: float | None):
    """model(x, targets, loss_denominator): what `compiled_forward` compiles, the model an argument."""
    return model(x, targets, loss_denominator)


def compiled_forward(mode: str):
    """The process's compiled forward for `mode`, a function of (model, x, targets, loss_denominator):
    made at the first call for a mode, then the same object for every model, so the graphs dynamo
    keeps for it (one per training shape, static) serve every cell of the worker."""
    if mode not in _COMPILED:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        _COMPILED[mode] = torch.compile(_forward, dynamic=False, **compile_kwargs(mode))
    return _COMPILED[mode]


def compile_cache_dir() -> Path:
    """Where inductor's caches live: $TSFLASH_COMPILE_CACHE, else $XDG_CACHE_HOME/tsflash/compile
    (~/.cache/tsflash/compile without it)."""
    if stated := os.environ.get(CACHE_ENV):
        return Path(stated).expanduser().resolve()
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home).expanduser().resolve() / "tsflash" / "compile"


def use_compile_cache() -> Path:
    """Point inductor's on-disk caches (FX graphs, AOTAutograd's forward and backward, Triton's
    kernels) at `compile_cache_dir()` and let AOTAutograd cache the graphs of forced SDPA kernels
    (SDPA_GRAPH_FUNCTIONS). Before compiling; returns the folder."""
    import torch._inductor.config as inductor_config

    path = compile_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(path):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)  # torch reads it at each use
        from torch._inductor.utils import clear_caches

        clear_caches()  # what torch memoised under the previous folder
    marked = dict.fromkeys(SDPA_GRAPH_FUNCTIONS, torch.__version__)
    inductor_config.unsafe_marked_cacheable_functions = {**inductor_config.unsafe_marked_cacheable_functions, **marked}
    return path


def pin_attention(model, device: torch.device, *, n: int, batch: int) -> dict:
    """Decide `auto` at the training shape and set the kernel on every attention layer; returns
    the decision record (an explicit backend is kept as asked)."""
    cfg = model.config
    if cfg.attention_backend != "auto":
        return {"chosen": cfg.attention_backend, "rule": "asked for (attention_backend)"}
    # the dtype the kernels see: bf16 under the CUDA autocast (tsflash.device.autocast), else the model's
    dtype = torch.bfloat16 if device.type == "cuda" else next(model.parameters()).dtype
    shape = (batch, cfg.n_heads, n // cfg.patch)  # attention runs over tokens: n / patch of them
    chosen = attention.resolve_backend("auto", device, dtype, cfg.head_dim, shape=shape)
    for block in model.blocks:
        block.attn.backend_name = chosen
    return dict(attention.decision(device, dtype, cfg.head_dim, shape) or {"chosen": chosen})


def eager_reason(device: torch.device) -> str | None:
    """Why torch.compile is not used on `device` (None: it is)."""
    if device.type != "cuda":
        return "torch.compile is applied on CUDA only (a CPU cell is small: compiling costs more than it saves)"
    from torch.utils._triton import has_triton

    if not has_triton():
        return "Triton (torch.compile's GPU code generator) is not installed"
    return None


class Compiled:
    """The model's training calls through torch.compile (`compiled`: a function of (x, targets,
    loss_denominator) running the model), its no-grad calls eager unless COMPILE_EVALUATION; when
    compiling fails (the first call of a new shape raises), the reason is logged and the model
    runs eager from then on (same weights). A real error of the model is raised again by the eager call.

    The first call of each new (shape, grad mode) is timed with the device synchronised: it
    includes compiling where the process had no graph of that shape yet
    (`model.compile_info["first_call_seconds"]`; a later cell's first call reuses it). The backward graph compiles
    at its first backward, so the first training call of a shape also times its loss's backward,
    from the moment backward reaches the loss to the last gradient (the input projection's, the
    first layer's), under "<shape> backward". A lower bound where a shape's first call is not
    backpropagated or a known shape recompiles (neither happens in the engine or the benchmark).
    With CUDA graphs (modes
    "reduce-overhead", "max-autotune") each call starts a new graph step: no caller keeps a
    forward's raw outputs past the next call (the loss is backpropagated, the logits are read)."""

    def __init__(self, model, compiled, mode: str):
        self.model, self.compiled, self.mode = model, compiled, mode
        self.graphs = mode in ("reduce-overhead", "max-autotune")
        self.info = {"compiled": True, "mode": mode, "reason": None, "first_call_seconds": {}}
        model.compile_info = self.info

    def __getattr__(self, name):  # anything else (config, attention_backend_used, ...) is the model's
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def __call__(self, x: torch.Tensor, targets: torch.Tensor | None = None, loss_denominator: float | None = None):
        if self.compiled is None or not (torch.is_grad_enabled() or COMPILE_EVALUATION):
            return self.model(x, targets, loss_denominator)
        signature = f"{tuple(x.shape)}{'' if torch.is_grad_enabled() else ' no_grad'}"
        first = signature not in self.info["first_call_seconds"]
        if first:
            sync(x.device)
            t0 = time.perf_counter()
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        # A float denominator would be a constant of the compiled graph, and each fold has its own
        # (the expected scored positions per window): on the GPU the second fold of N=512
        # recompiled for 62 s. The graph returns the loss summed (denominator 1), divided here:
        # total / 1 / d is total / d, bit for bit.
        scale = loss_denominator if targets is not None else None
        try:
            out = self.compiled(x, targets, None if scale is None else 1.0)
        except Exception as exc:
            if not first or is_oom(exc):
                raise
            self.fall_back(exc)
            return self.model(x, targets, loss_denominator)
        if first:
            sync(x.device)
            self.info["first_call_seconds"][signature] = time.perf_counter() - t0
        logits, loss = out
        loss = loss if scale is None else loss / scale
        if first and loss is not None and loss.requires_grad:
            self.time_first_backward(loss, f"{signature} backward")
        return logits, loss

    def time_first_backward(self, loss: torch.Tensor, key: str) -> None:
        """Add the seconds of `loss`'s backward (compiling the backward graph included) to
        first_call_seconds[key]: hooks that remove themselves once it has run."""
        started: list[float] = []
        last = self.model.inp.weight  # the first layer's weight: its gradient comes last
        device = loss.device  # not the loss itself: the hooks must not keep its graph alive

        def begin(grad_outputs):
            sync(device)
            started.append(time.perf_counter())

        def end(param):
            if started:
                sync(param.device)
                self.info["first_call_seconds"][key] = time.perf_counter() - started[0]
            # else another loss's backward came first: this one was never backpropagated
            for handle in handles:
                handle.remove()

        handles = [loss.grad_fn.register_prehook(begin), last.register_post_accumulate_grad_hook(end)]

    def fall_back(self, exc: BaseException) -> None:
        text = str(exc).strip()
        reason = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        log.warning("train.compile: torch.compile failed (%s); running eager from here on", reason)
        self.compiled = None
        self.info.update(compiled=False, reason=f"compiler failed: {reason}")
