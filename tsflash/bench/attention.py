"""The attention benchmark: forward and forward+backward time, peak memory and TFLOP/s of each
fused causal kernel and of the materialised path (QK^T, mask, softmax, PV) across N, and the
crossover: the N from which a fused kernel always wins. FLOPs by `tsflash.model.flops`: causal
attention forward = 2 * B * H * N^2 * d, forward+backward = 3 x forward (the fused kernels'
recomputation of the scores in the backward is not counted). Time, memory and out-of-memory
rows as in `tsflash.bench.common`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from tsflash import atomic
from tsflash.bench.common import check_arguments, environment, format_table, time_call
from tsflash.device import PeakMemory, free_memory, is_oom
from tsflash.model import attention as attn
from tsflash.model.flops import FWD_BWD, attention_forward_flops

log = logging.getLogger(__name__)

PLAIN = "materialised"  # the plain QK^T / mask / softmax / PV path in the attention benchmark


def _attention_call(backend: str):
    if backend == PLAIN:
        return attn.materialised_attention
    return lambda q, k, v: attn.sdpa(q, k, v, backend)


def measure_attention(
    backend: str, n: int, batch: int, heads: int, head_dim: int, dtype, device, min_time: float
) -> dict:
    """Forward and forward+backward time, peak memory and TFLOP/s of one backend at one N."""
    fn = _attention_call(backend)
    row: dict[str, Any] = {"backend": backend, "n": n, "batch": batch}
    flops = attention_forward_flops(batch, heads, n, head_dim)
    try:
        q, k, v = (
            torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3)
        )
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
        row["peak_extra_bytes"], row["peak_bytes"], row["memory_source"] = (
            mem.peak_extra_bytes,
            mem.peak_bytes,
            mem.source,
        )
        row["status"] = "ok"
    except attn.AttentionKernelError as exc:
        row["status"], row["error"] = "unsupported", str(exc)
    except Exception as exc:
        if not is_oom(exc):
            raise
        row["status"], row["error"] = "oom", str(exc).splitlines()[0][:200]
    q = k = v = grad = None  # type: ignore[assignment]  # release before the next size
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
    lengths = check_arguments(
        "attention",
        lengths,
        {
            "tokens": (1, tokens),
            "heads": (1, heads),
            "head_dim": (1, head_dim),
            "batch": (1, batch),
            "cpu_memory_cap": (1, cpu_memory_cap),
            "min_time": (0, min_time),
        },
    )
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
                row = {
                    "backend": backend,
                    "n": n,
                    "batch": b_n,
                    "status": "skipped",
                    "error": f"N x N scores need {score_bytes / 2**30:.1f} GiB > cap {cpu_memory_cap / 2**30:.1f} GiB",
                }
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
        "settings": {
            "tokens": None if batch else tokens,
            "batch": batch,
            "heads": heads,
            "head_dim": head_dim,
            "dtype": str(dtype),
            "causal": True,
            "flops": "fwd = 2*B*H*N^2*d, fwd+bwd = 3x fwd (tsflash.model.flops)",
            "cpu_memory_cap": cpu_memory_cap,
        },
        "auto": auto,  # what `attention_backend = "auto"` picks for this device, dtype and head_dim
        "rows": rows,
        "crossover": {
            b: {
                "fwdbwd_time": crossover(rows, b, "fwdbwd_s"),
                "fwd_time": crossover(rows, b, "fwd_s"),
                "memory": crossover(rows, b, "peak_extra_bytes"),
            }
            for b in fused
        },
    }


ATTENTION_COLUMNS = [
    ("backend", "backend", ""),
    ("n", "N", ""),
    ("batch", "B", ""),
    ("fwd_s", "fwd ms", ".3f"),
    ("fwdbwd_s", "fwd+bwd ms", ".3f"),
    ("fwd_tflops", "fwd TF/s", ".3g"),
    ("fwdbwd_tflops", "f+b TF/s", ".3g"),
    ("peak_mib", "peak MiB", ".1f"),
    ("status", "status", ""),
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
        lines.append(
            f"crossover {b} vs {PLAIN}: fwd+bwd time from N={c['fwdbwd_time']}, "
            f"fwd time from N={c['fwd_time']}, memory from N={c['memory']} (None = never)"
        )
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
        ax_m.plot(
            [r["n"] for r in ok],
            [max(r.get("peak_bytes") or r["peak_extra_bytes"], 1) / 2**20 for r in ok],
            style + "o",
            color=line.get_color(),
            label=label,
        )
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
    fig.suptitle(
        f"causal attention, {size}, {s['heads']} heads, d={s['head_dim']}, {s['dtype']}, "
        f"{result['environment']['device']}",
        fontsize=10,
    )
    fig.tight_layout()
    with atomic.atomic_path(path, keep_suffix=True) as tmp:  # savefig infers the format from the suffix
        fig.savefig(tmp, dpi=120)
        plt.close(fig)
    return path
