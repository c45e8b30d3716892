"""Benchmarks behind `tsflash bench`: precision oracle, attention crossover, training step.

All three run on CPU (tiny sizes, for tests) and on CUDA (bf16, the real figures). Conventions:
- FLOPs: the one rule of `tsflash.model.flops` (model FLOPs, derivation there). Causal attention
  forward = 2 * B * H * N^2 * d, forward+backward = 3 x forward (the fused kernels' recomputation
  of the scores in the backward is not counted); a training step = flops_per_token * tokens =
  (6 P + 6 L d N) * tokens, the same figure as the engine's per-cell TFLOP/s. Model FLOP
  utilisation (MFU) = that / step time / the measured matmul ceiling.
- Time: wall clock around `reps` calls, with the device synchronised on both sides.
- Peak memory: `tsflash.device.PeakMemory`: on CUDA the allocator's peak in total (`peak_bytes`)
  and above what was allocated before the call (`peak_extra_bytes`); on CPU only
  `peak_extra_bytes`, the growth of heap bytes in use, sampled by a thread.
- Out of memory is a recorded status ("oom"), never a crash. Bad arguments are UserErrors that
  name the argument and the value.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import torch

from tsflash import atomic
from tsflash.model import fastpath
from tsflash.model import attention as attn
from tsflash.config import check_context_length
from tsflash.device import PeakMemory, autocast, device_name, free_memory, is_oom, sync
from tsflash.errors import UserError
from tsflash.model.flops import FWD_BWD, attention_forward_flops, flops_per_token
from tsflash.data.synthetic import found_bar

log = logging.getLogger(__name__)

PLAIN = "materialised"  # the plain QK^T / mask / softmax / PV path in the attention benchmark


# ---- small shared tools ----------------------------------------------------------------------------


def check_arguments(bench: str, lengths, at_least: dict[str, tuple[int, object]]) -> list[int]:
    """Validate a benchmark's arguments: UserError naming the benchmark, the argument and the value.

    lengths : context lengths, by the one rule (`tsflash.config.check_context_length`: powers of two >= 2).
    at_least : {name: (minimum, value)}; a value None means "not given" and is skipped.
    """
    lengths = list(lengths)
    if not lengths:
        raise UserError(f"bench {bench}: give at least one length, got none")
    lengths = [check_context_length(n, f"bench {bench}: lengths") for n in lengths]
    for name, (minimum, value) in at_least.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise UserError(f"bench {bench}: {name} must be a number >= {minimum}, got {value!r}")
    return lengths


def time_call(fn, device: torch.device, min_time: float = 0.2, max_reps: int = 20) -> float:
    """Seconds per call of fn(): one warm-up call, then enough reps to fill ~min_time."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - start
    reps = max(1, min(max_reps, int(min_time / max(first, 1e-6))))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / reps


def write_json(path: Path, payload: dict) -> Path:
    import json

    atomic.write_text(path, json.dumps(payload, indent=2, default=str) + "\n")
    return path


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["gpu"] = device_name(device)
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Plain-text table; columns = (key, header, format spec); missing values print as '-'."""

    def cell(row, key, spec):
        value = row.get(key)
        if value is None:
            return "-"
        return format(value, spec) if spec and isinstance(value, (int, float)) else str(value)

    body = [[cell(r, k, s) for k, _, s in columns] for r in rows]
    heads = [h for _, h, _ in columns]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


# ---- precision oracle --------------------------------------------------------------------------------


def relative_errors(out: torch.Tensor, ref: torch.Tensor) -> dict:
    err = out.double() - ref
    return {
        "max_rel": float(err.abs().max() / ref.abs().max()),  # max|err| / max|ref|
        "fro_rel": float(err.norm() / ref.norm()),  # ||err|| / ||ref||
    }


def bench_precision(
    lengths: list[int],
    device: torch.device,
    model_path: Path | None = None,
    n_features: int = 16,
    heads: int = 4,
    head_dim: int = 64,
    backend: str = "auto",
    batch: int = 1,
    seed: int = 0,
) -> dict:
    """bf16 fused kernel vs float64, for attention outputs and for the model's decisions.

    Attention: q, k, v ~ N(0, 1) of shape (batch, heads, N, head_dim); the chosen fused backend on
    bf16 copies vs `reference_attention` on the float64 originals (same device).
    Decisions: the model (loaded, or freshly initialised with `n_features` inputs) on x ~ N(0, 1)
    of shape (batch, N, F): bf16 autocast + fused kernel vs a float64 copy of the model whose
    attention is the exact float64 reference; flip fraction = share of positions whose argmax
    class differs.
    """
    from tsflash.model.transformer import CausalTransformer, ModelConfig

    lengths = check_arguments("precision", lengths, {"n_features": (1, n_features), "heads": (1, heads),
                                                     "head_dim": (1, head_dim), "batch": (1, batch)})
    if model_path is not None:
        model = CausalTransformer.load(model_path, map_location=device)
    else:
        torch.manual_seed(seed)
        model = CausalTransformer(ModelConfig(n_features=n_features, attention_backend=backend)).to(device)
    model.eval()
    reference_model = float64_reference_copy(model)
    kernel = attn.resolve_backend(backend, device, torch.bfloat16, head_dim)
    rows = []
    for n in lengths:
        row: dict = {"n": n, "backend": kernel}
        g = torch.Generator(device="cpu").manual_seed(seed + n)
        try:
            q, k, v = (torch.randn(batch, heads, n, head_dim, generator=g, dtype=torch.float64).to(device) for _ in range(3))
            with torch.no_grad():
                out = attn.sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), kernel)
                row.update({f"attn_{k_}": v_ for k_, v_ in relative_errors(out, attn.reference_attention(q, k, v)).items()})
            del q, k, v, out
            x = torch.randn(batch, n, model.config.n_features, generator=g).to(device)
            # bf16 on every device (not `device.autocast`): the oracle measures bf16 rounding, on CPU too
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
                fast, _ = model(x)  # (B, N, 3)
            with torch.no_grad():
                exact, _ = reference_model(x.double())  # (B, N, 3) float64
            row["model_backend"] = model.attention_backend_used
            row["flip_fraction"] = float((fast.argmax(-1) != exact.argmax(-1)).double().mean())
            row["logit_max_abs_err"] = float((fast.double() - exact).abs().max())
            row["status"] = "ok"
        except Exception as exc:  # OOM at the largest N is a result, not a crash
            if not is_oom(exc):
                raise
            row["status"] = "oom"
        free_memory(device)
        log.info("precision N=%d: %s", n, row)
        rows.append(row)
    return {
        "kind": "precision",
        "environment": environment(device),
        "settings": {"heads": heads, "head_dim": head_dim, "batch": batch, "backend": backend, "seed": seed,
                     "model": str(model_path) if model_path else "fresh", "n_params": model.n_params()},
        "auto_choice": attn.auto_report(),
        "rows": rows,
    }


def float64_reference_copy(model):
    """A float64 copy of `model` whose attention is the exact chunked float64 reference."""
    import copy

    ref = copy.deepcopy(model).double()
    for block in ref.blocks:
        block.attn.backend_name = attn.REFERENCE
    return ref


PRECISION_COLUMNS = [
    ("n", "N", ""), ("backend", "kernel", ""), ("attn_max_rel", "max|err|/max|ref|", ".2e"),
    ("attn_fro_rel", "||err||/||ref||", ".2e"), ("flip_fraction", "decision flips", ".4%"),
    ("logit_max_abs_err", "max|dlogit|", ".2e"), ("status", "status", ""),
]


# ---- attention crossover benchmark --------------------------------------------------------------------


def _attention_call(backend: str):
    if backend == PLAIN:
        return attn.materialised_attention
    return lambda q, k, v: attn.sdpa(q, k, v, backend)


def measure_attention(backend: str, n: int, batch: int, heads: int, head_dim: int, dtype, device, min_time: float) -> dict:
    """Forward and forward+backward time, peak memory and TFLOP/s of one backend at one N."""
    fn = _attention_call(backend)
    row = {"backend": backend, "n": n, "batch": batch}
    flops = attention_forward_flops(batch, heads, n, head_dim)
    try:
        q, k, v = (torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype)

        def forward():
            with torch.no_grad():
                fn(q, k, v)

        def forward_backward():
            torch.autograd.backward(fn(q, k, v), grad)
            q.grad = k.grad = v.grad = None

        row["fwd_s"] = time_call(forward, device, min_time)
        row["fwd_tflops"] = flops / row["fwd_s"] / 1e12
        row["fwdbwd_s"] = time_call(forward_backward, device, min_time)
        row["fwdbwd_tflops"] = FWD_BWD * flops / row["fwdbwd_s"] / 1e12
        with PeakMemory(device) as mem:  # after the timed (warm) calls
            forward_backward()
        row["peak_extra_bytes"], row["peak_bytes"], row["memory_source"] = mem.peak_extra_bytes, mem.peak_bytes, mem.source
        row["status"] = "ok"
    except attn.AttentionKernelError as exc:
        row["status"], row["error"] = "unsupported", str(exc)
    except Exception as exc:
        if not is_oom(exc):
            raise
        row["status"], row["error"] = "oom", str(exc).splitlines()[0][:200]
    q = k = v = grad = None  # noqa: F841  (release before the next size)
    free_memory(device)
    return row


def crossover(rows: list[dict], fused: str, key: str = "fwdbwd_s") -> int | None:
    """Smallest measured N from which `fused` beats the materialised path at that N and every larger
    N (a materialised OOM or skip counts as a win). None if it never does."""
    by_n = {r["n"]: r for r in rows if r["backend"] == fused}
    plain = {r["n"]: r for r in rows if r["backend"] == PLAIN}
    wins = []
    for n in sorted(by_n):
        f, p = by_n[n], plain.get(n)
        if f["status"] != "ok":
            wins.append((n, False))
        elif p is None or p["status"] != "ok":
            wins.append((n, True))
        else:
            wins.append((n, f[key] < p[key]))
    answer = None
    for n, win in reversed(wins):
        if not win:
            break
        answer = n
    return answer


def bench_attention(
    lengths: list[int],
    device: torch.device,
    tokens: int = 131072,
    heads: int = 4,
    head_dim: int = 64,
    dtype: torch.dtype | None = None,
    batch: int | None = None,
    backends: list[str] | None = None,
    cpu_memory_cap: int = 2 << 30,
    min_time: float = 0.2,
) -> dict:
    """Crossover benchmark across N.

    At a fixed token count (default) batch = max(1, tokens // N): fused memory stays flat and the
    materialised path's grows linearly in N (B * N^2 = tokens * N). With `batch` fixed instead,
    fused memory grows linearly and the materialised path's quadratically.
    """
    lengths = check_arguments("attention", lengths, {
        "tokens": (1, tokens), "heads": (1, heads), "head_dim": (1, head_dim), "batch": (1, batch),
        "cpu_memory_cap": (1, cpu_memory_cap), "min_time": (0, min_time)})
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if backends is None:
        backends = list(attn.FUSED_BACKENDS) if device.type == "cuda" else ["flash"]
    backends = backends + [PLAIN]
    rows = []
    for backend in backends:
        for n in lengths:
            b_n = batch or max(1, tokens // n)
            score_bytes = b_n * heads * n * n * 4
            if backend == PLAIN and device.type == "cpu" and score_bytes > cpu_memory_cap:
                row = {"backend": backend, "n": n, "batch": b_n, "status": "skipped",
                       "error": f"N x N scores need {score_bytes / 2**30:.1f} GiB > cap {cpu_memory_cap / 2**30:.1f} GiB"}
            else:
                row = measure_attention(backend, n, b_n, heads, head_dim, dtype, device, min_time)
            log.info("attention %s", row)
            rows.append(row)
    fused = [b for b in backends if b != PLAIN]
    try:
        auto = attn.resolve_backend("auto", device, dtype, head_dim)
    except attn.AttentionKernelError as exc:
        auto = f"none ({exc})"
    return {
        "kind": "attention",
        "environment": environment(device),
        "settings": {"tokens": None if batch else tokens, "batch": batch, "heads": heads, "head_dim": head_dim, "dtype": str(dtype), "causal": True,
                     "flops": "fwd = 2*B*H*N^2*d, fwd+bwd = 3x fwd (tsflash.model.flops)", "cpu_memory_cap": cpu_memory_cap},
        "auto": auto,  # what `attention_backend = "auto"` picks for this device, dtype and head_dim
        "rows": rows,
        "crossover": {b: {"fwdbwd_time": crossover(rows, b, "fwdbwd_s"), "fwd_time": crossover(rows, b, "fwd_s"),
                          "memory": crossover(rows, b, "peak_extra_bytes")} for b in fused},
    }


ATTENTION_COLUMNS = [
    ("backend", "backend", ""), ("n", "N", ""), ("batch", "B", ""), ("fwd_s", "fwd ms", ".3f"),
    ("fwdbwd_s", "fwd+bwd ms", ".3f"), ("fwd_tflops", "fwd TF/s", ".3g"), ("fwdbwd_tflops", "f+b TF/s", ".3g"),
    ("peak_mib", "peak MiB", ".1f"), ("status", "status", ""),
]


def attention_table(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        r = dict(r)
        for key in ("fwd_s", "fwdbwd_s"):
            if r.get(key) is not None:
                r[key] = r[key] * 1e3
        peak = r.get("peak_bytes") or r.get("peak_extra_bytes")
        r["peak_mib"] = None if peak is None else peak / 2**20
        rows.append(r)
    lines = [format_table(rows, ATTENTION_COLUMNS), f"auto chooses: {result['auto']}"]
    for b, c in result["crossover"].items():
        lines.append(f"crossover {b} vs {PLAIN}: fwd+bwd time from N={c['fwdbwd_time']}, "
                     f"fwd time from N={c['fwd_time']}, memory from N={c['memory']} (None = never)")
    return "\n".join(lines)


def plot_attention(result: dict, path: Path) -> Path:
    """Log-log: forward+backward time and peak memory against N, one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    backends = list(dict.fromkeys(r["backend"] for r in result["rows"]))
    for b in backends:
        ok = [r for r in result["rows"] if r["backend"] == b and r["status"] == "ok"]
        failed = [r for r in result["rows"] if r["backend"] == b and r["status"] in ("oom", "skipped")]
        style = "--" if b == PLAIN else "-"
        if not ok:
            continue
        label = b + (f" ({failed[0]['status']} from N={failed[0]['n']})" if failed else "")
        line = ax_t.plot([r["n"] for r in ok], [r["fwdbwd_s"] * 1e3 for r in ok], style + "o", label=label)[0]
        ax_m.plot([r["n"] for r in ok], [max(r.get("peak_bytes") or r["peak_extra_bytes"], 1) / 2**20 for r in ok],
                  style + "o", color=line.get_color(), label=label)
        for ax in (ax_t, ax_m):  # failed sizes (oom / skipped): dotted verticals
            for r in failed:
                ax.axvline(r["n"], color=line.get_color(), alpha=0.4, linestyle=":")
    s = result["settings"]
    for ax, label in ((ax_t, "forward+backward time (ms)"), (ax_m, "peak memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length N")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    size = f"batch {s['batch']}" if s.get("batch") else f"{s['tokens']} tokens"
    fig.suptitle(f"causal attention, {size}, {s['heads']} heads, d={s['head_dim']}, {s['dtype']}, "
                 f"{result['environment']['device']}", fontsize=10)
    fig.tight_layout()
    with atomic.atomic_path(path, keep_suffix=True) as tmp:  # savefig infers the format from the suffix
        fig.savefig(tmp, dpi=120)
        plt.close(fig)
    return path


# ---- training step benchmark ----------------------------------------------------------------------------


def matmul_ceiling(device: torch.device, size: int, dtype: torch.dtype, min_time: float = 0.5) -> float:
    """Measured FLOP/s of a (size x size) @ (size x size) product: the practical compute ceiling."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(5):  # library initialisation and clocks
        a @ b
    seconds = time_call(lambda: a @ b, device, min_time, max_reps=50)
    return 2.0 * size**3 / seconds


def copy_ceiling(device: torch.device, nbytes: int | None = None, min_time: float = 0.3) -> float:
    """Measured bytes/s of a device-to-device copy, bytes read plus bytes written: the practical
    memory-bandwidth ceiling (2 GiB on CUDA, far above the L2 cache; 64 MiB on CPU)."""
    nbytes = nbytes or (2**31 if device.type == "cuda" else 2**26)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    seconds = time_call(lambda: dst.copy_(src), device, min_time, max_reps=50)
    del src, dst
    free_memory(device)
    return 2.0 * nbytes / seconds


# Inductor's bandwidth profile (torch._inductor.config.profile_bandwidth): every Triton kernel it
# generated is timed alone at its first call, with the bytes it reads and writes (inductor's own
# count), and each compiled graph's call writes a block to profile_bandwidth_output:
#   TRITON KERNELS BANDWIDTH INFO (<the graph's wrapper file>)
#   0.193ms    \t0.537 GB \t 2780.12GB/s \t 12.34% \t triton_poi_fused_gelu_8
#   ...
#   SUMMARY (<file>)
_BANDWIDTH_BLOCK = re.compile(r"^TRITON KERNELS BANDWIDTH INFO \((?P<graph>.*)\)\s*$")
_BANDWIDTH_LINE = re.compile(r"^\s*(?P<ms>[0-9.eE+-]+)ms\s+(?P<gb>[0-9.eE+-]+) GB\s+(?P<gbs>[0-9.eE+-]+)GB/s\s+"
                             r"[0-9.]+%\s+(?P<kernel>\S+)\s*$")


def parse_inductor_bandwidth(text: str) -> dict:
    """One training step's Triton kernels from inductor's bandwidth profile (the text above): the
    first block of each compiled graph (the step's first call of it; later calls repeat it) gives
    every kernel call of the step. Returns {"graphs": count, "gb": bytes/1e9 moved per step,
    "ms": the kernels' isolated times summed, "kernels": {name: {"calls", "gb", "ms"}} by ms}."""
    graphs: set[str] = set()
    kernels: dict[str, dict] = {}
    current = False  # inside the first block of a graph
    for line in text.splitlines():
        block = _BANDWIDTH_BLOCK.match(line.strip())
        if block:
            current = block["graph"] not in graphs
            graphs.add(block["graph"])
            continue
        if line.startswith("SUMMARY"):
            current = False
            continue
        call = _BANDWIDTH_LINE.match(line)
        if call and current:
            k = kernels.setdefault(call["kernel"], {"calls": 0, "gb": 0.0, "ms": 0.0})
            k["calls"] += 1
            k["gb"] += float(call["gb"])
            k["ms"] += float(call["ms"])
    kernels = dict(sorted(kernels.items(), key=lambda item: -item[1]["ms"]))
    return {"graphs": len(graphs), "gb": sum(k["gb"] for k in kernels.values()),
            "ms": sum(k["ms"] for k in kernels.values()), "kernels": kernels}


def measure_inductor_bandwidth(config, n: int, batch: int, device: torch.device, seed: int) -> dict | None:
    """The bytes inductor's kernels move in one training step at (batch, n): a fresh model compiled
    ("default", for this shape alone) under inductor's bandwidth profile, one step, parsed by
    `parse_inductor_bandwidth`. None where nothing compiles to Triton (CPU, no Triton), and
    where the step did not run whole (out of memory; fewer than the forward and backward graphs).
    The fused kernels and their bytes are the same in every mode but max-autotune's (whose matmul
    templates are Triton kernels too), so "default" stands for them.

    A diagnostic, never a timing: under the profile a kernel runs only at its first call (later
    calls reuse its measurement), so the step computes garbage. Dynamo's caches are reset before
    and after, so no compiled graph of it is reused by anything else."""
    import tempfile

    import torch._inductor.config as inductor_config

    if fastpath.eager_reason(device) is not None:
        return None
    torch._dynamo.reset()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bandwidth.txt"
            # benchmark_harness off: with an output file inductor would also run each new graph on
            # random inputs at compile time (and torch 2.11 fails there: a missing argument)
            with inductor_config.patch(profile_bandwidth=True, profile_bandwidth_regex="", benchmark_harness=False,
                                       profile_bandwidth_output=str(out), force_disable_caches=True):
                row = measure_train_step(config, n, batch, device, steps=1, warmup=1, compile="default", seed=seed)
            parsed = parse_inductor_bandwidth(out.read_text() if out.exists() else "")
    finally:
        torch._dynamo.reset()
    if row["status"] != "ok" or parsed["graphs"] < 2:  # a step is a forward and a backward graph at least
        log.warning("inductor bandwidth N=%d: no whole step (%s, %d graphs)", n, row["status"], parsed["graphs"])
        return None
    return parsed


# Where a training step's device time goes. Kernels inductor generated go by their name's prefix
# (whatever ops their name lists after it: a layout copy for attention is named after attention):
# "triton_tem" matmul templates (max-autotune), every other "triton_" kernel fused element-wise.
# The rest go to the first kind whose name fragment the kernel's (on CPU: the operator's) name
# contains; attention before matmul, since FlashAttention's names carry "cutlass::" template types.
TRITON_KINDS = (("triton_tem", "matmul"), ("triton_", "fused element-wise"))
STEP_KINDS = (
    ("attention", ("sdpa", "fmha", "flash_", "attention", "cudnn::fusion")),  # cudnn::fusion: its backward's helpers
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear")),
    ("optimizer", ("multi_tensor", "adam", "foreach", "lpnorm")),
    ("fused element-wise", ()),
)
OTHER_KIND = "other"  # eager element-wise and reductions, copies, memsets


def kernel_kind(name: str) -> str:
    """The kind (TRITON_KINDS, STEP_KINDS) of a kernel or operator name; OTHER_KIND when none matches."""
    low = name.lower()
    prefixed = next((kind for prefix, kind in TRITON_KINDS if low.startswith(prefix)), None)
    return prefixed or next((kind for kind, parts in STEP_KINDS if any(p in low for p in parts)), OTHER_KIND)


def profile_step(step, device: torch.device, steps: int, step_s: float) -> dict:
    """Where `steps` calls of step() spend their time, per step, from torch.profiler.

    CUDA: the device time of every kernel (one stream, so kernels do not overlap); "idle" is the
    timed step (`step_s`, measured without the profiler) minus the busy time: the device waiting
    for the host, i.e. how launch-bound the step is. CPU: the operators' own (self) time instead
    of kernels. Returns {"kernels": {name: ms per step} (every kernel; names cut at 160
    characters), "ms": {kind: ms per step} (`step_kinds`), "busy_ms", "idle_ms", "source"}."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        sync(device)
    if cuda:
        timed = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    else:
        timed = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    kernels: dict[str, float] = {}
    for name, us in timed:
        if us > 0:
            kernels[name[:160]] = kernels.get(name[:160], 0.0) + us / 1e3 / steps
    kernels = dict(sorted(kernels.items(), key=lambda item: -item[1]))
    by_kind = step_kinds(kernels)
    busy = sum(by_kind.values())
    return {"kernels": kernels, "ms": by_kind, "busy_ms": busy,
            "idle_ms": max(step_s * 1e3 - busy, 0.0) if cuda else None,
            "source": "CUDA kernels" if cuda else "CPU operators (self time)"}


def step_kinds(kernels: dict[str, float]) -> dict[str, float]:
    """{kind: ms} summed over {kernel name: ms} by `kernel_kind`, every kind present."""
    by_kind = {kind: 0.0 for kind, _ in STEP_KINDS} | {OTHER_KIND: 0.0}
    for name, ms in kernels.items():
        by_kind[kernel_kind(name)] += ms
    return by_kind


def measure_train_step(config, n: int, batch: int, device: torch.device, steps: int, warmup: int,
                       compile: bool | str, seed: int, profile: int = 0) -> dict:
    """Seconds per full training step (forward, the model's loss, backward, clip, AdamW) of a fresh
    model with `config` (a ModelConfig) on random (batch, n) inputs: one row, OOM recorded.

    The model is made ready as a sweep cell's is (tsflash.model.fastpath.prepare): `auto` decides its
    kernel at this shape before the first step (the row keeps the decision: kernel, runner-up,
    margin, median times), and `compile` (False, True or a torch.compile mode) compiles it with
    the eager fallback. Warm-up steps absorb compiling; the row keeps the first call's seconds.
    `profile` > 0: that many more steps under torch.profiler (`profile_step`), after the timed ones."""
    from tsflash.model.transformer import CausalTransformer

    cuda = device.type == "cuda"
    torch.manual_seed(seed)
    model = CausalTransformer(config).to(device).train()
    step_model = fastpath.prepare(model, device, n=n, batch=batch, compile=compile)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    x = torch.randn(batch, n, config.n_features, device=device)
    y = torch.randint(0, 3, (batch, n), device=device)
    row = {"n": n, "batch": batch, "tokens_per_step": batch * n, "n_params": model.n_params(),
           "kernel_choice": model.kernel_choice}

    def step():
        with autocast(device):
            _, loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    try:
        for _ in range(max(warmup, 1 if compile else 0)):
            step()
        with PeakMemory(device) as mem:
            step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        seconds = (time.perf_counter() - start) / steps
        row.update(step_s=seconds, tokens_per_s=batch * n / seconds, peak_bytes=mem.peak_bytes,
                   peak_extra_bytes=mem.peak_extra_bytes, backend=model.attention_backend_used, status="ok")
        if profile:
            row["profile"] = profile_step(step, device, profile, seconds)
    except Exception as exc:
        if not is_oom(exc):
            raise
        row.update(status="oom", error=str(exc).splitlines()[0][:200])
    row["compile"] = dict(model.compile_info)
    del model, step_model, opt, x, y
    free_memory(device)
    return row


def bench_train(
    lengths: list[int],
    device: torch.device,
    tokens_per_step: int = 131072,
    n_features: int = 16,
    d_model: int = 256,
    n_layers: int = 4,
    n_heads: int = 4,
    residual: str = "param",
    backend: str = "auto",
    steps: int = 10,
    warmup: int = 3,
    ceiling_size: int | None = None,
    compile: bool | str = False,
    seed: int = 0,
    profile: int = 0,
    bandwidth: bool = False,
) -> dict:
    """Time full training steps (forward, loss, backward, clip, AdamW) at fixed tokens per step.

    CUDA: bf16 autocast and fused AdamW; CPU: float32. Inputs are random (the data pipeline is not
    what is measured). MFU is against a matmul ceiling measured in the same run and dtype.
    `compile`: False (eager), True (tsflash.model.fastpath.COMPILE_MODE) or a mode of
    tsflash.model.fastpath.COMPILE_MODES. `profile` > 0: each row also says where its step's time goes
    (`profile_step`, that many steps).
    `bandwidth`: after every N is timed, each row that ran also gets the bytes inductor's kernels
    move per step (`measure_inductor_bandwidth`, a separate compile per N), to set against the copy
    ceiling measured beside the matmul ceiling (`bandwidth_markdown` needs `profile` too).
    """
    from tsflash.model.transformer import ModelConfig

    lengths = check_arguments("train", lengths, {
        "tokens_per_step": (1, tokens_per_step), "n_features": (1, n_features), "d_model": (1, d_model),
        "n_layers": (1, n_layers), "n_heads": (1, n_heads), "steps": (1, steps), "warmup": (0, warmup),
        "ceiling_size": (1, ceiling_size), "profile": (0, profile)})
    for n in lengths:
        if tokens_per_step % n:
            raise UserError(f"--tokens-per-step={tokens_per_step} must be a multiple of every length, got N={n}")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    ceiling_size = ceiling_size or (8192 if cuda else 512)
    ceiling = matmul_ceiling(device, ceiling_size, dtype)
    copy = copy_ceiling(device)
    log.info("matmul ceiling %d^3 %s: %.2f TFLOP/s; copy %.0f GB/s", ceiling_size, dtype, ceiling / 1e12, copy / 1e9)
    rows = []
    config = ModelConfig(n_features=n_features, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                         attention_backend=backend, residual=residual)
    for n in lengths:
        row = measure_train_step(config, n, tokens_per_step // n, device, steps, warmup, compile, seed, profile)
        if row["status"] == "ok":
            flops = flops_per_token(row["n_params"], n_layers, d_model, n) * tokens_per_step
            row.update(model_tflops=flops / row["step_s"] / 1e12, mfu=flops / row["step_s"] / ceiling)
        log.info("train %s", row)
        rows.append(row)
    if bandwidth:  # after every timed row: its compiles and dynamo resets touch none of them
        for row in (r for r in rows if r["status"] == "ok"):
            row["bandwidth"] = measure_inductor_bandwidth(config, row["n"], row["batch"], device, seed)
            log.info("inductor bandwidth N=%d: %s", row["n"], None if row["bandwidth"] is None else
                     f"{row['bandwidth']['gb']:.2f} GB in {row['bandwidth']['ms']:.2f} ms")
    return {
        "kind": "train",
        "environment": environment(device),
        "settings": {"tokens_per_step": tokens_per_step, "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
                     "residual": residual, "n_features": n_features, "dtype": str(dtype), "backend": backend, "steps": steps, "warmup": warmup,
                     "compile": (fastpath.COMPILE_MODE if compile is True else compile) or False, "optimizer": "AdamW" + (" (fused)" if cuda else ""),
                     "flops": "(6*P + 6*L*d_model*N) * tokens (tsflash.model.flops)", "profiled_steps": profile,
                     "bandwidth": bandwidth},
        "ceiling": {"matmul_size": ceiling_size, "dtype": str(dtype), "tflops": ceiling / 1e12, "copy_gbs": copy / 1e9},
        "auto_choice": attn.auto_report(),
        "rows": rows,
    }


def train_table(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        r = dict(r)
        r["step_ms"] = r["step_s"] * 1e3 if r.get("step_s") else None
        peak = r.get("peak_bytes") or r.get("peak_extra_bytes")
        r["peak_mib"] = None if peak is None else peak / 2**20
        r["kernel_margin"] = kernel_margin(r.get("kernel_choice"))
        r["compiled"] = compile_label(r.get("compile"))
        rows.append(r)
    columns = [("n", "N", ""), ("batch", "B", ""), ("step_ms", "step ms", ".1f"), ("tokens_per_s", "tokens/s", ".4g"),
               ("peak_mib", "peak MiB", ".0f"), ("model_tflops", "TFLOP/s", ".3g"), ("mfu", "MFU", ".1%"),
               ("backend", "kernel", ""), ("kernel_margin", "vs runner-up", ""), ("compiled", "compile", ""),
               ("status", "status", "")]
    c = result["ceiling"]
    reasons = dict.fromkeys(f"eager: {r['compile']['reason']}" for r in rows
                            if r.get("compile") and r["compile"].get("mode") and not r["compile"].get("compiled"))
    profiled = profile_markdown({"": result})
    moved = bandwidth_markdown({"": result})
    copy = f"; copy {c['copy_gbs']:.0f} GB/s" if c.get("copy_gbs") else ""
    return "\n".join([format_table(rows, columns), *reasons,
                      f"ceiling: {c['matmul_size']}^3 {c['dtype']} matmul = {c['tflops']:.3g} TFLOP/s{copy}",
                      *(["", "where a step's time goes (ms per step):", profiled] if profiled else []),
                      *(["", "the element-wise work against the memory bandwidth:", moved] if moved else [])])


def profile_markdown(results: dict[str, dict]) -> str:
    """A Markdown table of where each profiled row's step goes: ms per step by kernel kind, idle
    (the device waiting for the host) and the step; "" when no row was profiled. `results` keyed
    by variant as in `mfu_markdown` (one unnamed result: no variant column)."""
    kinds = [kind for kind, _ in STEP_KINDS] + [OTHER_KIND]
    named = any(results)
    lines = ["| " + " | ".join([*(["variant"] if named else []), "N", *kinds, "idle", "step"]) + " |"]
    lines.append("|" + "---|" * (len(kinds) + 3 + named))
    count = 0
    for variant, result in results.items():
        for r in result["rows"]:
            prof = r.get("profile")
            if not prof:
                continue
            count += 1
            by_kind = step_kinds(prof["kernels"])  # today's kinds, from the kernels' own times
            cells = [*([variant] if named else []), str(r["n"]), *(f"{by_kind.get(k, 0.0):.2f}" for k in kinds),
                     _fmt(prof.get("idle_ms"), ".2f"), _fmt(r.get("step_s"), ".2f", 1e3)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if count else ""


def highest_ceiling(results: dict[str, dict], key: str) -> float:
    """The highest ceiling `key` ("tflops", "copy_gbs") that any of the results' processes measured
    (0.0 where none did): one denominator for every variant of a call (`mfu_markdown`)."""
    return max((result["ceiling"].get(key) or 0.0 for result in results.values()), default=0.0)


def bandwidth_markdown(results: dict[str, dict]) -> str:
    """A Markdown table setting the bytes inductor's kernels move per step (rows measured with
    `bandwidth`) against the memory bandwidth, "" when no row has them. Per variant and N: the GB
    per step, the profiled device time of the fused element-wise kernels and the bandwidth that
    makes, the time those bytes take at the copy ceiling, and the step (and its MFU) had the
    element-wise work run at that ceiling with everything else as profiled: how far fusion alone
    could go. One copy ceiling and one matmul ceiling for every row, the highest any of the
    variants' processes measured (as `mfu_markdown`)."""
    copy_gbs, tflops = highest_ceiling(results, "copy_gbs"), highest_ceiling(results, "tflops")
    named = any(results)
    lines = ["| " + " | ".join([*(["variant"] if named else []), "N", "element-wise GB per step", "profiled ms",
                                "TB/s achieved", "ms at the copy ceiling", "step ms", "step ms, element-wise at the ceiling",
                                "MFU then"]) + " |", "|" + "---|" * (8 + named)]
    count = 0
    for variant, result in results.items():
        for r in result["rows"]:
            bw, prof = r.get("bandwidth"), r.get("profile")
            if not bw or not prof or not copy_gbs or not r.get("step_s"):
                continue
            count += 1
            fused = step_kinds(prof["kernels"])["fused element-wise"]
            floor = element_wise_floor_ms(bw, copy_gbs)
            moved = floor * copy_gbs / 1e3  # GB: each kernel's count, capped as in the floor
            step = r["step_s"] * 1e3
            bound = step - fused + floor
            mfu = r["model_tflops"] * step / bound / tflops if r.get("model_tflops") and tflops else None
            cells = [*([variant] if named else []), str(r["n"]), f"{bw['gb']:.2f}", f"{fused:.2f}",
                     _fmt(moved / fused if fused else None, ".2f"), f"{floor:.2f}", f"{step:.2f}", f"{bound:.2f}",
                     _fmt(mfu, ".1%")]
            lines.append("| " + " | ".join(cells) + " |")
    if not count:
        return ""
    return "\n".join(lines + ["", f"Copy ceiling {copy_gbs / 1e3:.2f} TB/s (a 2 GiB device-to-device copy, bytes read + "
                                  "written); the GB are inductor's count of what its Triton kernels read and write in one "
                                  "training step (torch._inductor.config.profile_bandwidth, each N compiled for its own "
                                  "shape in a separate pass); \"ms at the copy ceiling\" takes each kernel's count at the "
                                  "ceiling, or the kernel's own time measured alone where that is less (its count is then "
                                  "more than it can have moved: inductor counts a whole buffer where a kernel reads a "
                                  "slice of it); \"TB/s achieved\" divides those bytes by the profiled time. The timed "
                                  "steps ran the graphs of the timed process (from the second N on, one graph for any "
                                  "shape, whose kernels are named apart), so bytes and times are matched per step, not "
                                  "per kernel. \"MFU then\" is how far fusion alone could go for these bytes; fewer "
                                  "bytes (another precision or kernels fused across matmuls) are not in it."])


def element_wise_floor_ms(bandwidth: dict, copy_gbs: float) -> float:  # GB/s -> ms
    """The milliseconds the kernels of `bandwidth` (`parse_inductor_bandwidth`) would take at the
    copy ceiling: per kernel its counted GB at `copy_gbs`, or its own time measured alone where
    that is less (a count implying more than the ceiling overstates what the kernel moves)."""
    return sum(min(k["gb"] / copy_gbs * 1e3, k["ms"]) for k in bandwidth["kernels"].values())


def kernel_margin(choice: dict | None) -> str | None:
    """"+12.3% vs FLASH" (the chosen kernel's median lead over the runner-up; negative when the
    tie rule kept a preferred kernel), None when nothing was timed."""
    if not choice or choice.get("margin") is None:
        return None
    return f"{choice['margin']:+.1%} vs {choice['runner_up']}"


def compile_label(info: dict | None) -> str | None:
    """The torch.compile mode that ran, or "eager" (the reason is in info["reason"])."""
    if not info:
        return None
    return info.get("mode") if info.get("compiled") else "eager"


# ---- the published tables: MFU per compile mode, scaling over GPUs ---------------------------------------


# What each variant folder of `experiments/h200.sh mfu` ran (mfu.md says it under the table).
MFU_VARIANTS = {
    "eager": "no torch.compile",
    "default": 'torch.compile mode "default" (inductor fuses the element-wise work)',
    "reduce-overhead": 'torch.compile mode "reduce-overhead" (the same, replayed as CUDA graphs)',
    "tuned": '"default" with inductor\'s Triton kernels (fused element-wise work, norms) tuned block size by '
             "block size (tsflash.model.fastpath.COMPILE_OPTIONS; matmuls left to cuBLAS)",
    "max-autotune-no-cudagraphs": 'torch.compile mode "max-autotune-no-cudagraphs" (matmuls tuned, epilogues fused)',
    "default-head128": '"default" with 2 heads of 128 instead of 4 heads of 64: the same parameters and FLOPs, '
                       "but another model than the experiment's; it shows what the attention kernel does at head size 128",
    "default-bf16-residual": '"default" with the residual stream in bf16 (`--residual compute`) instead of float32: '
                             "the same parameters and FLOPs, fewer bytes for the norms and residual adds, other numerics",
    "default-head128-bf16-residual": '"default" with both: 2 heads of 128 and the residual stream in bf16',
    "reduce-overhead-head128-bf16-residual": '"reduce-overhead" (CUDA graphs) with both: 2 heads of 128 and the '
                                             "residual stream in bf16",
}


def mfu_markdown(results: dict[str, dict]) -> str:
    """One Markdown table from `bench_train` results keyed by variant ("eager", "default", ...):
    per N and variant the step time, MFU (one FLOPs rule) and compile outcome, then the kernel
    `auto` chose at each N with its margin over the runner-up (from the first variant).

    One denominator for every variant: the highest matmul ceiling measured by any of the
    variants' processes. Each process measures its own, and on the H200 they differ by up to 6 %
    within one call (753 to 799 TFLOP/s): per-process ceilings would rank two variants with the
    same step time apart. The highest is the most the chip showed, so the MFU is not flattered."""
    lines = ["| N | variant | step ms | MFU | compiled | first call s |", "|---|---|---|---|---|---|"]
    first = next(iter(results.values()))
    ceiling_tflops = highest_ceiling(results, "tflops")
    for n in [r["n"] for r in first["rows"]]:
        for variant, result in results.items():
            r = next((r for r in result["rows"] if r["n"] == n), {})
            first_s = sum((r.get("compile") or {}).get("first_call_seconds", {}).values()) or None
            mfu = r["model_tflops"] / ceiling_tflops if r.get("model_tflops") else None
            cells = [str(n), variant, _fmt(r.get("step_s"), ".1f", 1e3), _fmt(mfu, ".1%"),
                     compile_label(r.get("compile")) or "-", _fmt(first_s, ".1f")]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| N | kernel auto chose | runner-up | margin | median ms per candidate |", "|---|---|---|---|---|"]
    for r in first["rows"]:
        c = r.get("kernel_choice") or {}
        medians = ", ".join(f"{b} {m:.3f}" for b, m in (c.get("median_ms") or {}).items()) or c.get("rule", "-")
        lines.append(f"| {r['n']} | {c.get('chosen', '-')} | {c.get('runner_up') or '-'} | "
                     f"{_fmt(c.get('margin'), '+.1%')} | {medians} |")
    env, ceiling = first["environment"], first["ceiling"]
    ceilings = ", ".join(f"{variant} {result['ceiling']['tflops']:.0f}" for variant, result in results.items())
    lines += ["", f"{env.get('gpu', env['device'])}, torch {env['torch']}; MFU = model FLOPs (tsflash.model.flops) per second "
              f"over {ceiling_tflops:.0f} TFLOP/s, the highest of the {ceiling['matmul_size']}^3 {ceiling['dtype']} "
              f"matmul ceilings measured by the variants' processes ({ceilings} TFLOP/s)."]
    described = [f"**{v}**: {MFU_VARIANTS[v]}" for v in results if v in MFU_VARIANTS]
    if described:
        lines += ["", "Variants: " + "; ".join(described) + "."]
    profiled = profile_markdown(results)
    if profiled:
        lines += ["", "Where a step's time goes, ms per step (torch.profiler over the steps after the timed ones: "
                  "device time of the kernels by kind; idle = the timed step minus the busy time, the device "
                  "waiting for the host):", "", profiled]
    moved = bandwidth_markdown(results)
    if moved:
        lines += ["", "The fused element-wise work against the memory bandwidth (how much of the step fusion alone "
                  "could still save):", "", moved]
    return "\n".join(lines) + "\n"


def write_mfu_markdown(folder: Path | str) -> Path:
    """<folder>/../mfu.md from the train.json of each variant folder in `folder` (eager first,
    then the compile modes in tsflash.model.fastpath.COMPILE_MODES order, then the other variants by name)."""
    import json

    folder = Path(folder)
    order = ["eager", *fastpath.COMPILE_MODES]
    found = {p.parent.name: json.loads(p.read_text()) for p in folder.glob("*/train.json")}
    results = {v: found[v] for v in sorted(found, key=lambda v: (order.index(v) if v in order else len(order), v))}
    if not results:
        raise UserError(f"no */train.json under {folder}")
    path = folder.parent / "mfu.md"
    atomic.write_text(path, mfu_markdown(results))
    return path


def training_compile_seconds(cell: dict) -> float:
    """The compiling inside an engine cell's train_seconds: the first call of each training shape
    and its first backward (no-grad shapes compile outside the training time)."""
    firsts = (cell.get("compile") or {}).get("first_call_seconds", {})
    return sum(t for shape, t in firsts.items() if not shape.endswith("no_grad"))


def compile_cells_markdown(eager: dict, compiled: dict) -> str:
    """A Markdown table of what torch.compile does to a sweep's cells, from two
    `benchmarks/bench_engine.py` results of the same cells (same config, data, folds and seed),
    one plain and one with train.compile=true. Per cell (N, fold): the steps trained by each, the
    training milliseconds per step of each (the compiled cell's include its compiling: the first
    call of each shape is a training step), the compiling seconds among them and the compiled ms
    per step without them, training + validation + evaluation seconds of each, and the
    |difference| of the test log-loss; then the total over all cells."""
    def cells(result):
        return {(r["n"], r["fold"]): r for r in result["rows"] if "fold" in r}

    plain, fast = cells(eager), cells(compiled)
    lines = ["| N | fold | steps eager / compiled | eager ms/step | compiled ms/step | compiling s | "
             "compiled ms/step without compiling | eager s | compiled s | abs diff log-loss |", "|" + "---|" * 10]
    totals = [0.0, 0.0]
    for key in sorted(k for k in plain if k in fast):
        a, b = plain[key], fast[key]
        compiling = training_compile_seconds(b)
        seconds = [r["train_seconds"] + (r.get("val_seconds") or 0.0) + r["eval_seconds"] for r in (a, b)]
        totals = [t + x for t, x in zip(totals, seconds)]
        lines.append(f"| {key[0]} | {key[1]} | {a['steps']} / {b['steps']} | {a['train_seconds'] / a['steps'] * 1e3:.1f} | "
                     f"{b['train_seconds'] / b['steps'] * 1e3:.1f} | {compiling:.1f} | "
                     f"{(b['train_seconds'] - compiling) / b['steps'] * 1e3:.1f} | {seconds[0]:.1f} | {seconds[1]:.1f} | "
                     f"{abs(a['log_loss'] - b['log_loss']):.4f} |")
    lines.append(f"| all | | | | | | | {totals[0]:.1f} | {totals[1]:.1f} | |")
    modes = {str((r.get("compile") or {}).get("mode")) for r in fast.values() if (r.get("compile") or {}).get("compiled")}
    backward_untimed = any(  # a compiled cell with a training shape but no "<shape> backward"
        not any(k.endswith(" backward") for k in firsts) and any(not k.endswith("no_grad") for k in firsts)
        for firsts in ((r.get("compile") or {}).get("first_call_seconds", {}) for r in fast.values()))
    lines += ["", f"{compiled.get('device_name', compiled.get('device'))}, torch {compiled.get('torch')}; config "
              f"{compiled.get('config')} on {compiled.get('data')}, compiled with mode {', '.join(sorted(modes)) or '(none: eager)'}; "
              "one worker, one process per variant: each shape compiles once per process, so the first cell "
              "at an N pays for the graphs the later cells reuse. \"compiling s\" times the first call of each "
              "training shape and its first backward (where the backward graph compiles)"
              + ("" if not backward_untimed else "; cells recorded before the backward was timed count its "
                 "compiling in the training time only: the first cell's higher ms per step without compiling")
              + ". No-grad shapes compile outside the training time: validation passes are not in it, test "
              "batches are in the evaluation time. The \"s\" columns: training + validation (where the cell "
              "recorded it) + evaluation."
              + ("" if all(r.get("val_seconds") is not None for r in (*plain.values(), *fast.values())) else
                 " Some cells did not record their validation time: their columns leave it out.")
              + ("" if all(plain[k]["steps"] == fast[k]["steps"] for k in plain if k in fast) else
                 " Where early stopping ended a cell at another step (GPU and compiled numerics differ in the last "
                 "bits), the totals cover different numbers of steps: compare the ms per step.")]
    return "\n".join(lines) + "\n"


def write_compile_cells_markdown(folder: Path | str) -> Path:
    """<folder>.md from <folder>/eager and <folder>/compiled's engine-cuda.json (`compile_cells_markdown`)."""
    import json

    folder = Path(folder)
    eager, compiled = (json.loads((folder / v / "engine-cuda.json").read_text()) for v in ("eager", "compiled"))
    path = folder.with_suffix(".md")
    atomic.write_text(path, compile_cells_markdown(eager, compiled))
    return path


MODEL_REFERENCE = "experiment"  # experiments/h200.sh model-variants: the experiment's model, the others' reference


def engine_seed(result: dict) -> int:
    """The seed a `benchmarks/bench_engine.py` result trained (the config's first, after its --set
    overrides; results written before it recorded "seed" say it through those)."""
    if "seed" in result:
        return result["seed"]
    from tsflash.commands.options import parse_overrides
    from tsflash.config import load_config

    seeds = parse_overrides(result.get("overrides", [])).get("train", {}).get("seeds")
    return (seeds if seeds is not None else load_config(result["config"]).train.seeds)[0]


def model_variants_markdown(results: dict[str, list[dict]], found_at: float | None = None) -> str:
    """Do other models learn what the experiment's learns? A Markdown table from
    `benchmarks/bench_engine.py` results of the same cells (config, data, folds, seeds) with other
    model settings (their `--set` overrides): `results` maps each variant to its results (one per
    seed), the first variant the reference. Per cell (N, fold, seed) and variant: steps trained,
    training ms per step outside compiling, test log-loss, its difference from the reference's and
    the direction hit rate; then per variant the mean difference over the cells both have and, with
    `found_at` (a hit rate: the positive control's half-way mark from a coin flip to its oracle),
    how many of the cells found the planted effect."""
    names = list(results)
    if len(names) < 2:
        raise ValueError(f"model_variants_markdown compares two or more variants, got {names}")
    cells: dict[str, dict[tuple, dict]] = {v: {} for v in names}
    for v in names:
        for res in results[v]:
            for r in (r for r in res["rows"] if "fold" in r):
                key = (r["n"], r["fold"], engine_seed(res))
                if key in cells[v]:
                    raise UserError(f"model variant {v}: cell N={key[0]} fold {key[1]} seed {key[2]} is in two results; "
                                    "keep one folder per seed and folds")
                cells[v][key] = r
    ref = names[0]

    def ms_per_step(r):
        return (r["train_seconds"] - training_compile_seconds(r)) / r["steps"] * 1e3

    lines = [f"| N | fold | seed | variant | steps | ms/step | test log-loss | minus {ref} | direction hit rate |",
             "|" + "---|" * 9]
    diffs: dict[str, list[float]] = {v: [] for v in names[1:]}
    for key in sorted(cells[ref]):
        for v in names:
            r = cells[v].get(key)
            if r is None:
                continue
            if v != ref:
                diffs[v].append(r["log_loss"] - cells[ref][key]["log_loss"])
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {v} | {r['steps']} | {ms_per_step(r):.1f} | "
                         f"{r['log_loss']:.4f} | {'' if v == ref else format(diffs[v][-1], '+.4f')} | "
                         f"{r['direction_hit_rate']:.4f} |")
    found = "" if found_at is None else f" found the effect (hit rate >= {found_at:.4f}): {ref}, variant |"
    lines += ["", f"| variant | cells | mean log-loss minus {ref} | cells with a higher log-loss |" + found,
              "|---|---|---|---|" + ("---|" if found_at is not None else "")]
    for v, d in diffs.items():
        row = f"| {v} | {len(d)} | {_fmt(sum(d) / len(d) if d else None, '+.4f')} | {sum(x > 0 for x in d)} |"
        if found_at is not None:
            shared = [k for k in cells[v] if k in cells[ref]]
            row += (f" {sum(cells[ref][k]['direction_hit_rate'] >= found_at for k in shared)}, "
                    f"{sum(cells[v][k]['direction_hit_rate'] >= found_at for k in shared)} |")
        lines.append(row)
    r0 = results[ref][0]
    flags = {v: " ".join(f"`--set {o}`" for o in results[v][0].get("overrides", []) if not o.startswith("train.seeds="))
             for v in names}
    lines += ["", f"{r0.get('device_name', r0.get('device'))}, torch {r0.get('torch')}; config {r0.get('config')} on "
              f"{r0.get('data')}; " + "; ".join(f"**{v}**: {flags[v] or 'the config as it is'}" for v in names)
              + ". One process per variant and seed; ms per step leaves out the compiling of each training shape."]
    return "\n".join(lines) + "\n"


# The published controls (experiments/controls.py), in the checkout this package runs from
CONTROLS_SUMMARY = Path(__file__).resolve().parents[2] / "reports" / "controls" / "protocol" / "summary.json"


def control_found_bar(data: str, summary: Path | str = CONTROLS_SUMMARY) -> float | None:
    """The hit rate at which a cell has found the planted effect of the control market `data`:
    `tsflash.data.synthetic.found_bar` of the oracle's hit rate in the published controls' summary;
    None when the summary (or its oracle for `data`) is not there."""
    import json

    summary = Path(summary)
    if not summary.exists():
        return None
    runs = json.loads(summary.read_text())["runs"]
    rate = next((r["oracle"]["hit_rate"] for r in runs if r["data"] == data and (r.get("oracle") or {}).get("hit_rate")), None)
    return None if rate is None else found_bar(rate)


def write_model_variants_markdown(*folders: Path | str, out: Path | str | None = None,
                                  found_at: float | None = None) -> Path:
    """`out` (default: the first folder's name + .md) from <folder>/<variant>/engine-cuda.json in
    each folder (one folder per seed; `model_variants_markdown`), the experiment's model first."""
    import json

    results: dict[str, list[dict]] = {}
    for folder in map(Path, folders):
        for p in sorted(folder.glob("*/engine-cuda.json")):
            results.setdefault(p.parent.name, []).append(json.loads(p.read_text()))
    if MODEL_REFERENCE not in results:
        raise UserError(f"no {MODEL_REFERENCE}/engine-cuda.json under {', '.join(map(str, folders))}")
    results = {MODEL_REFERENCE: results.pop(MODEL_REFERENCE), **results}
    path = Path(out) if out is not None else Path(folders[0]).with_suffix(".md")
    atomic.write_text(path, model_variants_markdown(results, found_at))
    return path


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def scaling_markdown(rows: list[dict]) -> str:
    """The scaling table from rows {"gpus", "seconds", "cells", "lengths", "complete"[, "invocations"]}:
    wall-clock, cells per minute, speed-up and efficiency (T1 / (K * TK)) against the 1-GPU row of
    the same lengths. A row measured over several invocations (a sweep resumed across device calls)
    sums their wall-clocks, each with its own start-up, and says how many."""
    lines = ["| GPUs | lengths | wall-clock s | invocations | cells | cells per minute | speed-up | efficiency |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["lengths"], r["gpus"])):
        one = next((o for o in rows if o["gpus"] == 1 and o["lengths"] == r["lengths"] and o["complete"]), None)
        speedup = one["seconds"] / r["seconds"] if one and r["complete"] else None
        lines.append(f"| {r['gpus']} | {r['lengths']} | {r['seconds']:.0f}{'' if r['complete'] else ' (unfinished)'} | "
                     f"{r.get('invocations', 1)} | {r['cells']} | {r['cells'] / r['seconds'] * 60:.1f} | "
                     f"{_fmt(speedup, '.2f')}x | {_fmt(None if speedup is None else speedup / r['gpus'], '.0%')} |")
    return "\n".join(lines) + "\n"


SCALING_TIMES = "scaling-seconds.json"  # in the run folder: the wall-clock of each invocation


def add_scaling_time(run_dir: Path, seconds: float) -> tuple[float, int]:
    """Append one invocation's wall-clock to the run folder's SCALING_TIMES; returns (total seconds,
    invocations) so far. A measurement that needs several device calls adds them up."""
    import json

    path = Path(run_dir) / SCALING_TIMES
    times = json.loads(path.read_text())["seconds"] if path.exists() else []
    times.append(float(seconds))
    write_json(path, {"seconds": times})
    return sum(times), len(times)


def record_scaling(path: Path, run_dir: Path, gpus: int, seconds: float, lengths: str, invocations: int = 1) -> Path:
    """Add (or replace) the row of `gpus` GPUs and these lengths in `path` (scaling.json beside
    scaling.md) from a sweep's folder (unfinished rows are marked), and rewrite scaling.md."""
    import json

    from tsflash.runfolder import RunFolder

    folder = RunFolder(run_dir)
    row = {"gpus": gpus, "seconds": seconds, "invocations": invocations, "cells": folder.n_finished_cells(),
           "lengths": lengths, "complete": folder.is_complete(), "run": str(run_dir)}
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if (r["gpus"], r["lengths"]) != (gpus, lengths)] + [row]
    write_json(path, {"rows": rows})
    atomic.write_text(path.with_suffix(".md"), scaling_markdown(rows))
    return path.with_suffix(".md")
