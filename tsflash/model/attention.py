"""The one place that chooses, runs and proves the attention kernel.

PyTorch's `F.scaled_dot_product_attention` silently falls back to its materialising MATH kernel
when a fused kernel's precondition fails (float32 on CUDA flash/cuDNN, dropout on CPU, an odd head
size). A silent fallback looks like a working model that is merely slow, then runs out of memory
at long N. So every attention call here runs inside `sdpa_kernel([chosen])` with ONLY the chosen
backend allowed: if it cannot run, PyTorch raises, and we re-raise an `AttentionKernelError` that
says why.

Backends (`attention_backend` in `ModelConfig`):
    auto       the fused backend that passes a numerical check on this device/dtype/head size and,
               timed at the real shape, is fastest by the tie rule (section "auto" below)
    cudnn      cuDNN fused attention           (CUDA, fp16/bf16)
    flash      FlashAttention-2 (CUDA, fp16/bf16) or PyTorch's flash CPU kernel (CPU, any float)
    efficient  memory-efficient attention      (CUDA, fp16/bf16/fp32)
    math       the materialising reference     (only when asked for explicitly)

The causal mask (`is_causal=True`) is the lower triangle, query t sees keys 0..t:

    1 0 0 0
    1 1 0 0
    1 1 1 0
    1 1 1 1
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import warnings
from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tsflash.model.spec import ATTENTION_BACKENDS, FUSED_BACKENDS, check_choice

log = logging.getLogger(__name__)

# The names live in tsflash.model.spec (torch-free), so that a config is checked without torch.
BACKENDS = ATTENTION_BACKENDS
# Internal, not a user choice: exact float64 attention in query chunks (the precision oracle's model path).
REFERENCE = "reference"
SDP_BACKEND = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
# Profiler op name -> (backend, short label of the kernel): the kernel that ACTUALLY ran,
# independent of what was asked for. A fused kernel's backward op is the same name + "_backward".
OP_KERNEL = {
    "aten::_scaled_dot_product_cudnn_attention": ("cudnn", "cuDNN"),
    "aten::_scaled_dot_product_flash_attention": ("flash", "FLASH"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("flash", "flash CPU"),
    "aten::_scaled_dot_product_efficient_attention": ("efficient", "EFFICIENT"),
    "aten::_scaled_dot_product_attention_math": ("math", "MATH"),
    "aten::_scaled_dot_product_fused_attention_overrideable": ("overrideable", "overrideable"),
}
OP_BACKEND = {op: backend for op, (backend, _) in OP_KERNEL.items()}
# Numerical check of a candidate against a float64 reference on the same device: relative
# Frobenius error bound per input dtype (bf16 fused kernels measure about 3e-3 on the GPU).
CHECK_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 2e-2}
GRAD_TOLERANCE_FACTOR = 4  # gradients go through one more reduction: allow 4x the output tolerance


class AttentionKernelError(RuntimeError):
    """The chosen attention kernel cannot run these inputs; the message says which rule failed."""


def check_backend_name(name: str) -> str:
    return check_choice(name, BACKENDS, "attention_backend")


def diagnose(backend: str, q: torch.Tensor, dropout_p: float = 0.0) -> list[str]:
    """Known reasons why `backend` cannot run on q's device/dtype/head size (may be incomplete)."""
    dev, dtype, hd = q.device.type, q.dtype, q.shape[-1]
    reasons = []
    if backend == "math":
        return reasons
    if dev == "cpu":
        if backend in ("cudnn", "efficient"):
            reasons.append(f"backend {backend!r} exists only on CUDA, got device cpu (use 'flash' or 'auto')")
        if dropout_p > 0:
            reasons.append(f"dropout_p={dropout_p} > 0: the CPU flash kernel has no dropout (MATH only)")
    elif dev == "cuda":
        if backend in ("cudnn", "flash") and dtype not in (torch.float16, torch.bfloat16):
            reasons.append(
                f"backend {backend!r} needs float16/bfloat16 inputs on CUDA, got {dtype} "
                "(wrap forward in torch.autocast('cuda', dtype=torch.bfloat16))"
            )
        if backend == "efficient" and dtype == torch.float64:
            reasons.append("backend 'efficient' does not take float64")
        if backend in ("cudnn", "flash") and (hd > 256 or hd % 8):
            reasons.append(f"backend {backend!r} needs head_dim <= 256 and a multiple of 8, got {hd}")
        if backend == "efficient" and hd % 8:
            reasons.append(f"backend 'efficient' needs head_dim a multiple of 8, got {hd}")
    else:
        reasons.append(f"no fused attention kernel is known for device type {dev!r}")
    return reasons


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal SDPA with only `backend` allowed; raises AttentionKernelError instead of falling back.

    q, k, v: (B, H, T, hd). Returns (B, H, T, hd) in q's dtype.
    """
    if backend == REFERENCE:
        assert dropout_p == 0.0
        return reference_attention(q, k, v)
    assert backend in SDP_BACKEND, backend  # resolve 'auto' first
    try:
        with sdpa_kernel([SDP_BACKEND[backend]]):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    except RuntimeError as exc:
        if "kernel" not in str(exc).lower() and "backend" not in str(exc).lower():
            raise
        first_line = str(exc).splitlines()[0]
    why = diagnose(backend, q, dropout_p) + _refusal_warnings(q, k, v, backend, dropout_p)
    raise AttentionKernelError(
        f"attention backend {backend!r} cannot run q of shape {tuple(q.shape)}, dtype {q.dtype}, "
        f"device {q.device.type}, head_dim {q.shape[-1]}, dropout_p {dropout_p}: "
        + ("; ".join(dict.fromkeys(why)) or first_line)
        + " -- refusing to fall back to the materialising MATH kernel"
    )


def _refusal_warnings(q, k, v, backend: str, dropout_p: float) -> list[str]:
    """Re-run the refused call to collect PyTorch's own explanation (it says why in UserWarnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([SDP_BACKEND[backend]]), torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        except RuntimeError:
            pass
    messages = [str(w.message).split(" (Triggered")[0].strip() for w in caught]
    return [m for m in messages if m and not m.endswith("because:")]


def materialised_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal attention, written out: QK^T, mask, softmax, PV. Memory O(B*H*T^2).

    q, k, v: (B, H, T, hd) -> (B, H, T, hd). The reference for parity tests and the benchmark.
    """
    T, hd = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B, H, T, T)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
    scores = scores.masked_fill(~mask, float("-inf"))
    # softmax in at least float32 (as the fused kernels do), in float64 for float64 inputs
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(q.dtype, torch.float32))  # (B, H, T, T)
    return probs.to(q.dtype) @ v  # (B, H, T, hd)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_bytes: int = 1 << 30) -> torch.Tensor:
    """Exact causal attention in float64, in query chunks so memory stays O(chunk * N), any N.

    q, k, v: (B, H, N, d) -> (B, H, N, d) float64.
    """
    q, k, v = q.double(), k.double(), v.double()  # (B, H, N, d)
    B, H, N, d = q.shape
    rows = max(1, chunk_bytes // (B * H * N * 8))
    out = torch.empty_like(q)
    keys = torch.arange(N, device=q.device)
    for lo in range(0, N, rows):
        hi = min(N, lo + rows)
        scores = q[:, :, lo:hi] @ k[:, :, :hi].transpose(-2, -1) / math.sqrt(d)  # (B, H, r, hi)
        future = keys[None, :hi] > torch.arange(lo, hi, device=q.device)[:, None]  # (r, hi)
        out[:, :, lo:hi] = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v[:, :, :hi]
    return out


# ---- auto: check numerically, time at the real shape, decide by a stated rule, cache --------------
#
# `auto` decides per (device, dtype, head size, N, batch, heads): the numerical check (shape-free,
# cached per device/dtype/head size) keeps the fused kernels that agree with float64; those are
# then timed at the real shape, causal forward+backward, with WARMUP_CALLS untimed calls each and
# TIMED_ROUNDS interleaved rounds (every candidate once per round, the order rotated each round,
# so that drift and the first-timed penalty fall on all alike), and compared by their MEDIAN.
# Tie rule: the kernels are preferred in the order of FUSED_BACKENDS (cuDNN, then FLASH, then
# EFFICIENT); the most preferred kernel whose median is within TIE_MARGIN of the fastest median
# wins. So cuDNN is kept unless another kernel is more than 3 % faster. Timings taken while other
# jobs share the GPU can flip a decision (on the GPU, six jobs at once timed FLASH 24 % ahead at
# N=32768, where alone cuDNN leads by 37 %), so a run keeps its first decisions: `pin` makes a later
# invocation (a resume, another worker) use them untimed (tsflash.sweep.run reads them from run.json).

TIE_MARGIN = 0.03
WARMUP_CALLS = 2
TIMED_ROUNDS = 7
# After this many rounds a candidate slower than DROP_ABOVE x the best median so far stops being
# timed: it cannot win under the tie rule, and at large N a slow kernel's calls are the probe's cost.
DROP_AFTER_ROUNDS = 3
DROP_ABOVE = 1.5
# The shape timed when the caller gives none (a model's first forward): (batch, heads, N).
DEFAULT_PROBE_SHAPE = (4, 4, 4096)

_CACHE: dict[tuple, str] = {}  # decision key -> chosen backend
_CHECKS: dict[tuple, dict] = {}  # (device type, index, dtype, head_dim) -> {backend: {"rel_err", ..., "error"}}
_TIMINGS: dict[tuple, dict] = {}  # decision key -> the timing record of `decide`


def _cache_key(device, dtype, head_dim) -> tuple:
    device = torch.device(device)
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    return (device.type, index, str(dtype), int(head_dim))


def _decision_key(device, dtype, head_dim, shape: tuple[int, int, int] | None) -> tuple:
    """The check key, plus ("b<batch>", "h<heads>", "n<N>") for a decision at a given shape."""
    base = _cache_key(device, dtype, head_dim)
    if shape is None:
        return base
    batch, heads, n = shape
    return (*base, f"n{n}", f"b{batch}", f"h{heads}")


def check_backend(backend: str, device, dtype: torch.dtype, head_dim: int, n: int = 256, heads: int = 2) -> dict:
    """Relative Frobenius errors of `backend` vs a float64 reference on the same device and inputs.

    Returns {"rel_err": output error, "grad_rel_err": worst of the q, k, v gradient errors} for
    a causal forward+backward at (1, heads, n, head_dim). Raises AttentionKernelError when the
    backend cannot run these inputs.
    """
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, dout = torch.randn(4, 1, heads, n, head_dim, generator=g, dtype=torch.float64).to(device)
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = materialised_attention(*ref_in)  # float64 on the device
    ref_grads = torch.autograd.grad(ref, ref_in, dout)
    ref = ref.detach()
    test_in = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = sdpa(*test_in, backend=backend)
    grads = torch.autograd.grad(out, test_in, dout.to(dtype))

    def rel(a, b):
        return float((a.detach().double() - b).norm() / b.norm())

    return {"rel_err": rel(out, ref), "grad_rel_err": max(rel(a, b) for a, b in zip(grads, ref_grads))}


def passing_backends(device, dtype: torch.dtype, head_dim: int) -> list[str]:
    """The fused backends of this device that pass the numerical check (cached per device, dtype,
    head size); AttentionKernelError, saying what each reported, when none does."""
    key = _cache_key(device, dtype, head_dim)
    device = torch.device(device)
    if key not in _CHECKS:
        candidates = FUSED_BACKENDS if device.type == "cuda" else ("flash",)
        _CHECKS[key] = {b: _checked(b, device, dtype, head_dim) for b in candidates}
    report = _CHECKS[key]
    passing = [b for b, r in report.items() if "error" not in r]
    if not passing:
        detail = "; ".join(f"{b}: {r.get('error')}" for b, r in report.items())
        raise AttentionKernelError(
            f"attention_backend 'auto': no fused backend passed on device {device.type}, dtype {dtype}, "
            f"head_dim {head_dim} ({detail}); MATH is used only when asked for explicitly"
        )
    return passing


def _checked(backend: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> dict:
    """check_backend's errors, with "error" set when the backend cannot run or is too inexact."""
    tol = CHECK_TOLERANCE.get(dtype, 2e-2)
    try:
        # the checks may be reached from a model's first forward: under autocast or no_grad
        with torch.autocast(device.type, enabled=False), torch.enable_grad():
            result = check_backend(backend, device, dtype, head_dim)
    except RuntimeError as exc:  # AttentionKernelError, or a backend's own failure (cuDNN status...)
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            raise
        return {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    if result["rel_err"] > tol or result["grad_rel_err"] > GRAD_TOLERANCE_FACTOR * tol:
        result["error"] = (f"relative error {result['rel_err']:.3g} (tolerance {tol:g}) or gradient error "
                           f"{result['grad_rel_err']:.3g} (tolerance {GRAD_TOLERANCE_FACTOR * tol:g}) too large")
    return result


def median_times(candidates: list[str], time_once: Callable[[str], float], warmup: int = WARMUP_CALLS,
                 rounds: int = TIMED_ROUNDS) -> dict[str, list[float]]:
    """Seconds of each candidate's calls: `warmup` untimed calls each (interleaved), then `rounds`
    rounds that time every remaining candidate once, in an order rotated by one each round.

    time_once(backend) -> seconds of one call (the real one syncs the device; tests inject noise).
    A candidate whose median after DROP_AFTER_ROUNDS rounds exceeds DROP_ABOVE x the best median
    is not timed further (it cannot win under the tie rule); a lone survivor is not timed further either.
    """
    for _ in range(warmup):
        for b in candidates:
            time_once(b)
    times: dict[str, list[float]] = {b: [] for b in candidates}
    active = list(candidates)
    for r in range(rounds):
        shift = r % len(active)
        for b in active[shift:] + active[:shift]:
            times[b].append(time_once(b))
        if r + 1 == DROP_AFTER_ROUNDS and len(active) > 1:
            best = min(statistics.median(times[b]) for b in active)
            active = [b for b in active if statistics.median(times[b]) <= DROP_ABOVE * best]
            if len(active) == 1:  # the winner is known
                break
    return times


def pick_kernel(medians: dict[str, float], margin: float = TIE_MARGIN) -> dict:
    """The tie rule on median seconds per candidate: the first of FUSED_BACKENDS whose median is
    within `margin` of the fastest. Returns {"chosen", "runner_up", "margin"}, where margin is the
    runner-up's median over the chosen one's, minus 1 (negative when a preferred kernel won a tie)."""
    fastest = min(medians.values())
    order = sorted(medians, key=lambda b: FUSED_BACKENDS.index(b) if b in FUSED_BACKENDS else len(FUSED_BACKENDS))
    chosen = next(b for b in order if medians[b] <= fastest * (1 + margin))
    others = {b: t for b, t in medians.items() if b != chosen}
    runner_up = min(others, key=others.get) if others else None
    return {"chosen": chosen, "runner_up": runner_up,
            "margin": others[runner_up] / medians[chosen] - 1 if runner_up else None}


def _cuda_call_timer(device: torch.device, dtype: torch.dtype, shape: tuple[int, int, int], head_dim: int):
    """time_once(backend) for the real shape: one causal forward+backward, timed by CUDA events.
    Inputs from a private generator (the caller's random state is left alone)."""
    batch, heads, n = shape
    g = torch.Generator(device=device).manual_seed(0)
    # (B, H, N, hd) views of (B, N, H, hd) memory: the layout the model hands the kernels
    q, k, v, grad = (torch.randn(batch, n, heads, head_dim, device=device, dtype=dtype, generator=g).transpose(1, 2)
                     for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_once(backend: str) -> float:
        start.record()
        torch.autograd.grad(sdpa(q, k, v, backend), (q, k, v), grad)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return time_once


def decide(device, dtype: torch.dtype, head_dim: int, *, shape: tuple[int, int, int] | None = None,
           time_once: Callable[[str], float] | None = None) -> str:
    """`auto`'s kernel for (device, dtype, head size) at `shape` = (batch, heads, N) (default
    DEFAULT_PROBE_SHAPE), by the rule at the top of this section; cached per decision key. With
    one passing candidate (on CPU: flash) nothing is timed. `time_once` replaces the CUDA timer."""
    key = _decision_key(device, dtype, head_dim, shape)
    if key in _CACHE:
        return _CACHE[key]
    device = torch.device(device)
    passing = passing_backends(device, dtype, head_dim)
    record: dict = {"shape": dict(zip(("batch", "heads", "n"), shape or DEFAULT_PROBE_SHAPE)), "candidates": passing}
    if len(passing) == 1:
        record.update(chosen=passing[0], runner_up=None, margin=None, rule="the only candidate that passed")
    else:
        time_once = time_once or _cuda_call_timer(device, dtype, shape or DEFAULT_PROBE_SHAPE, head_dim)
        with torch.autocast(device.type, enabled=False), torch.enable_grad():  # reached from a first forward too
            times = median_times(passing, time_once)
        medians = {b: statistics.median(t) for b, t in times.items()}
        record.update(pick_kernel(medians), median_ms={b: m * 1e3 for b, m in medians.items()},
                      calls={b: len(t) for b, t in times.items()},
                      rule=f"median of {TIMED_ROUNDS} interleaved rounds after {WARMUP_CALLS} warm-up calls; "
                           f"{'/'.join(FUSED_BACKENDS)} in that order unless another is > {TIE_MARGIN:.0%} faster")
    _CACHE[key], _TIMINGS[key] = record["chosen"], record
    log.info("attention auto -> %s on %s/%s/head_dim=%d at %s (%s)", record["chosen"], device.type, dtype, head_dim,
             record["shape"], {b: f"{m:.3f} ms" for b, m in record.get("median_ms", {}).items()} or record["rule"])
    return record["chosen"]


def resolve_backend(name: str, device, dtype: torch.dtype, head_dim: int, *,
                    shape: tuple[int, int, int] | None = None) -> str:
    """The concrete backend for `name` on this device/dtype/head size (and shape, for auto).

    An explicit name is returned as is (it is enforced when attention runs). `auto` is `decide`:
    the fused backends that pass a float64 check, timed at `shape` = (batch, heads, N) when more
    than one passes (CUDA), chosen by the tie rule. MATH is never chosen by `auto`: if no fused
    backend passes, AttentionKernelError says what each one reported.
    """
    if name == REFERENCE:
        return name
    check_backend_name(name)
    if name != "auto":
        return name
    return decide(device, dtype, head_dim, shape=shape)


def decision(device, dtype: torch.dtype, head_dim: int, shape: tuple[int, int, int] | None = None) -> dict | None:
    """The record of the decision `decide` made for these arguments (None if it made none)."""
    return _TIMINGS.get(_decision_key(device, dtype, head_dim, shape))


def auto_report() -> dict:
    """Every auto decision made in this process, its numerical checks and timings (for run
    manifests): {"cuda|0|torch.bfloat16|64|n512|b256|h4": {"chosen", "checks", "timing"}}."""
    return {"|".join(map(str, k)): {"chosen": _CACHE.get(k), "checks": _CHECKS.get(k[:4], {}), "timing": v}
            for k, v in _TIMINGS.items()}


def _key_of(text: str) -> tuple | None:
    """auto_report's key string back to a decision key; None if it is not one."""
    parts = text.split("|")
    if len(parts) != 7 or not parts[1].isdigit() or not parts[3].isdigit():
        return None
    return (parts[0], int(parts[1]), parts[2], int(parts[3]), *parts[4:])


def pin(decisions: dict[str, dict]) -> dict[str, str]:
    """Make `decide` return earlier decisions in this process, untimed: {auto_report key: its record
    ({"chosen", "timing", ...})}, e.g. those a run folder kept from its first invocation. So a run's
    later invocations (a resume, another worker) train under the kernels it began with: no cell
    trains under two kernels, and no two cells of a run differ by a timing taken under load. A
    decision for a device this process lacks, or whose kernel fails this device's numerical check,
    is not pinned (it is decided afresh). Returns {key: kernel} of those pinned."""
    pinned = {}
    for text, record in decisions.items():
        key, chosen = _key_of(text), (record or {}).get("chosen")
        if key is None or chosen not in FUSED_BACKENDS or key in _CACHE:
            continue
        device_type, index, dtype_name, head_dim = key[:4]
        if device_type == "cuda" and (not torch.cuda.is_available() or index >= torch.cuda.device_count()):
            continue
        dtype = getattr(torch, dtype_name.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            continue
        device = torch.device(device_type, index) if device_type == "cuda" else torch.device(device_type)
        try:
            passing = passing_backends(device, dtype, head_dim)
        except AttentionKernelError:
            continue
        if chosen not in passing:
            log.warning("attention: the run's kernel %s for %s fails the numerical check here; deciding afresh", chosen, text)
            continue
        _CACHE[key] = chosen
        _TIMINGS[key] = dict(record.get("timing") or {}, chosen=chosen, kept="the run's earlier decision (attention.pin)")
        pinned[text] = chosen
    return pinned


def clear_cache() -> None:
    _CACHE.clear()
    _CHECKS.clear()
    _TIMINGS.clear()


# ---- proof: which kernel ran, from the profiler's op names ---------------------------------------


def kernel_op(name: str) -> str | None:
    """The forward op of an SDPA kernel event name ("..._backward" included), or None for any other op."""
    op = name.removesuffix("_backward")
    return op if op in OP_KERNEL else None


def kernel_label(ops) -> str | None:
    """Short label of the kernels in `ops` (profiler op names): "cuDNN", "flash CPU", ...; None if none."""
    labels = sorted({OP_KERNEL[op][1] for op in map(kernel_op, ops) if op is not None})
    return "+".join(labels) or None


@functools.cache
def warm_up_profiler() -> None:
    """Start and stop the profiler once per process: its first use costs about a second of setup,
    which would otherwise land in the first observed training step's time. Later uses cost ~10 ms."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        pass


@contextmanager
def observe_kernel_ops():
    """Record the raw profiler names of the SDPA kernel ops that run inside the block, forward
    and backward (sorted, filled in when the block ends). The profiler records CPU-side op
    events only (no CUDA tracing): cheap, and the op name is what says which kernel ran.

    >>> with observe_kernel_ops() as ops:          # doctest: +SKIP
    ...     model(x, y)[1].backward()
    >>> ops                                         # doctest: +SKIP
    ['aten::_scaled_dot_product_flash_attention_for_cpu', 'aten::_scaled_dot_product_flash_attention_for_cpu_backward']
    """
    ops: list[str] = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield ops
    ops.extend(sorted({e.name for e in prof.events() if kernel_op(e.name) is not None}))


@contextmanager
def observe_kernels():
    """Record the SDPA backends whose kernels actually run inside the block.

    >>> with observe_kernels() as seen:          # doctest: +SKIP
    ...     model(x)
    >>> seen                                      # doctest: +SKIP
    {'flash'}
    """
    seen: set[str] = set()
    with observe_kernel_ops() as ops:
        yield seen
    seen.update(OP_BACKEND[kernel_op(op)] for op in ops)
