"""Benchmarks behind `tsflash bench`: precision oracle, attention crossover, training step.

All three run on CPU (tiny sizes, for tests) and on CUDA (bf16, the real figures). Conventions:
- Causal attention FLOPs: forward = 2 * B * H * N^2 * d (half of the dense 4 * B * H * N^2 * d);
  forward+backward = 3.5 x forward (the backward recomputes the scores).
- Model FLOPs per training step = 6 * n_params * tokens + n_layers * 3.5 * 2 * B * H * N^2 * d;
  model FLOP utilisation (MFU) = that / step time / the measured matmul ceiling.
- Time: wall clock around `reps` calls with `torch.cuda.synchronize` on both sides (CUDA).
- Peak memory: CUDA `max_memory_allocated` after `reset_peak_memory_stats`, reported both in total
  (`peak_bytes`) and above what was allocated before the call (`peak_extra_bytes`); on CPU only
  `peak_extra_bytes`, the peak resident-set growth sampled from /proc/self/statm by a thread.
- Out of memory is a recorded status ("oom"), never a crash.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import threading
import time
from pathlib import Path

import torch

from tsflash import atomic
from tsflash import attention as attn
from tsflash.errors import UserError

log = logging.getLogger(__name__)

PLAIN = "materialised"  # the plain QK^T / mask / softmax / PV path in the attention benchmark


# ---- small shared tools ----------------------------------------------------------------------------


def parse_lengths(text: str) -> list[int]:
    """'256,512,1024' -> [256, 512, 1024]; each a power of two >= 2."""
    try:
        lengths = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--lengths: a comma-separated list of integers, got {text!r}") from None
    bad = [n for n in lengths if n < 2 or n & (n - 1)]
    if not lengths or bad:
        raise UserError(f"--lengths: every length must be a power of two >= 2, got {text!r}")
    return sorted(set(lengths))


def resolve_device(name: str | None) -> torch.device:
    """'auto'/None -> cuda when available else cpu; 'cuda' without a GPU is a UserError."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA device is available here")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and ("out of memory" in text or "can't allocate" in text or isinstance(exc, MemoryError))


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mallinfo_probe():
    """glibc's mallinfo2: bytes currently allocated by malloc (arenas + mmapped), or None."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = MallInfo2

    def in_use() -> int:
        info = fn()
        return info.uordblks + info.hblkhd

    return in_use


_MALLOC_IN_USE = _mallinfo_probe()


def cpu_bytes_in_use() -> tuple[int, str]:
    """Heap bytes in use (glibc mallinfo2) where available, else the resident set size."""
    if _MALLOC_IN_USE is not None:
        return _MALLOC_IN_USE(), "malloc"
    return _rss_bytes(), "rss"


class PeakMemory:
    """Peak memory of the block above what was in use when it began.

    CUDA: allocator statistics (exact). CPU: bytes in use from glibc's mallinfo2 (or, elsewhere, the
    resident set) sampled every ~0.2 ms by a thread (torch ops release the GIL); it can miss a
    very short spike but does not over-count. Measure after a warm-up call: first calls allocate
    thread pools and caches.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_bytes: int | None = None
        self.peak_extra_bytes: int | None = None
        self.source = "cuda allocator"

    def __enter__(self):
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            self._base, self.source = cpu_bytes_in_use()
            self._peak = self._base
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, cpu_bytes_in_use()[0])
            self._stop.wait(0.0002)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
            self.peak_extra_bytes = self.peak_bytes - self._base
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, cpu_bytes_in_use()[0])
            self.peak_extra_bytes = self._peak - self._base
        return False


def time_call(fn, device: torch.device, min_time: float = 0.2, max_reps: int = 20) -> float:
    """Seconds per call of fn(): one warm-up call, then enough reps to fill ~min_time."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    first = time.perf_counter() - start
    reps = max(1, min(max_reps, int(min_time / max(first, 1e-6))))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / reps


def attention_flops(batch: int, heads: int, n: int, head_dim: int) -> float:
    """Causal forward FLOPs: 2 * B * H * N^2 * d (fwd+bwd is 3.5x this)."""
    return 2.0 * batch * heads * n * n * head_dim


def write_json(path: Path, payload: dict) -> Path:
    import json

    atomic.write_text(path, json.dumps(payload, indent=2, default=str) + "\n")
    return path


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
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
    from tsflash.model import CausalTransformer, ModelConfig

    if model_path is not None:
        model = CausalTransformer.load(model_path, map_location=device)
    else:
        torch.manual_seed(seed)
        model = CausalTransformer(ModelConfig(n_features=n_features, attention_backend=backend)).to(device)
    model.eval()
    reference_model = _float64_reference_copy(model)
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


def _float64_reference_copy(model):
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
        return attn.materialized_attention
    return lambda q, k, v: attn.sdpa(q, k, v, backend)


def measure_attention(backend: str, n: int, batch: int, heads: int, head_dim: int, dtype, device, min_time: float) -> dict:
    """Forward and forward+backward time, peak memory and TFLOP/s of one backend at one N."""
    fn = _attention_call(backend)
    row = {"backend": backend, "n": n, "batch": batch}
    flops = attention_flops(batch, heads, n, head_dim)
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
        row["fwdbwd_tflops"] = 3.5 * flops / row["fwdbwd_s"] / 1e12
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
                     "flops": "fwd = 2*B*H*N^2*d, fwd+bwd = 3.5x fwd", "cpu_memory_cap": cpu_memory_cap},
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


def model_flops_per_step(n_params: int, tokens: int, n_layers: int, batch: int, n: int, d_model: int) -> float:
    """6 * P * tokens (matmuls, fwd+bwd) + causal attention fwd+bwd: L * 3.5 * 2 * B * N^2 * d_model."""
    return 6.0 * n_params * tokens + n_layers * 3.5 * attention_flops(batch, 1, n, d_model)


def bench_train(
    lengths: list[int],
    device: torch.device,
    tokens_per_step: int = 131072,
    n_features: int = 16,
    d_model: int = 256,
    n_layers: int = 4,
    n_heads: int = 4,
    backend: str = "auto",
    steps: int = 10,
    warmup: int = 3,
    ceiling_size: int | None = None,
    compile: bool = False,
    seed: int = 0,
) -> dict:
    """Time full training steps (forward, loss, backward, clip, AdamW) at fixed tokens per step.

    CUDA: bf16 autocast and fused AdamW; CPU: float32. Inputs are random (the data pipeline is not
    what is measured). MFU is against a matmul ceiling measured in the same run and dtype.
    """
    from tsflash.model import CausalTransformer, ModelConfig

    for n in lengths:
        if tokens_per_step % n:
            raise UserError(f"--tokens-per-step={tokens_per_step} must be a multiple of every length, got N={n}")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    ceiling_size = ceiling_size or (8192 if cuda else 512)
    ceiling = matmul_ceiling(device, ceiling_size, dtype)
    log.info("matmul ceiling %d^3 %s: %.2f TFLOP/s", ceiling_size, dtype, ceiling / 1e12)
    rows = []
    for n in lengths:
        batch = tokens_per_step // n
        torch.manual_seed(seed)
        config = ModelConfig(n_features=n_features, d_model=d_model, n_layers=n_layers, n_heads=n_heads, attention_backend=backend)
        model = CausalTransformer(config).to(device).train()
        if compile:  # resolve (and cache) the kernel eagerly: the checks would break the graph
            attn.resolve_backend(backend, device, dtype, d_model // n_heads)
        step_model = torch.compile(model) if compile else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        x = torch.randn(batch, n, n_features, device=device)
        y = torch.randint(0, 3, (batch, n), device=device)
        row = {"n": n, "batch": batch, "tokens_per_step": tokens_per_step, "n_params": model.n_params()}

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                _, loss = step_model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        try:
            for _ in range(warmup):
                step()
            with PeakMemory(device) as mem:
                step()
            synchronize(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            synchronize(device)
            seconds = (time.perf_counter() - start) / steps
            flops = model_flops_per_step(row["n_params"], tokens_per_step, n_layers, batch, n, d_model)
            row.update(
                step_s=seconds, tokens_per_s=tokens_per_step / seconds, peak_bytes=mem.peak_bytes,
                peak_extra_bytes=mem.peak_extra_bytes, model_tflops=flops / seconds / 1e12, mfu=flops / seconds / ceiling,
                backend=model.attention_backend_used, status="ok",
            )
        except Exception as exc:
            if not is_oom(exc):
                raise
            row.update(status="oom", error=str(exc).splitlines()[0][:200])
        del model, step_model, opt, x, y
        free_memory(device)
        log.info("train %s", row)
        rows.append(row)
    return {
        "kind": "train",
        "environment": environment(device),
        "settings": {"tokens_per_step": tokens_per_step, "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
                     "n_features": n_features, "dtype": str(dtype), "backend": backend, "steps": steps, "warmup": warmup,
                     "compile": compile, "optimizer": "AdamW" + (" (fused)" if cuda else ""),
                     "flops": "6*P*tokens + L*3.5*2*B*N^2*d_model"},
        "ceiling": {"matmul_size": ceiling_size, "dtype": str(dtype), "tflops": ceiling / 1e12},
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
        rows.append(r)
    columns = [("n", "N", ""), ("batch", "B", ""), ("step_ms", "step ms", ".1f"), ("tokens_per_s", "tokens/s", ".4g"),
               ("peak_mib", "peak MiB", ".0f"), ("model_tflops", "TFLOP/s", ".3g"), ("mfu", "MFU", ".1%"),
               ("backend", "kernel", ""), ("status", "status", "")]
    c = result["ceiling"]
    return format_table(rows, columns) + f"\nceiling: {c['matmul_size']}^3 {c['dtype']} matmul = {c['tflops']:.3g} TFLOP/s"
