"""What every benchmark of `tsflash bench` shares: argument checks, the timer, the environment
record, the JSON writer, the plain-text table, and the measured ceilings (a matmul's FLOP/s,
which `tsflash.sweep.progress` also calibrates its first estimate with, and a copy's bytes/s).

Conventions of all benchmarks:
- Time: `time_call`, the median seconds per call of a library timer (its docstring says which
  and why). Training steps are timed where they run (`tsflash.bench.trainstep`).
- Peak memory: `tsflash.device.PeakMemory`: on CUDA the allocator's peak in total (`peak_bytes`)
  and above what was allocated before the call (`peak_extra_bytes`); on CPU only
  `peak_extra_bytes`, the growth of the resident set's high-water mark over the call.
- Out of memory is a recorded status ("oom"), never a crash. Bad arguments are UserErrors that
  name the argument and the value.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from tsflash import atomic
from tsflash.config import check_context_length
from tsflash.device import device_name, free_memory, sync
from tsflash.errors import UserError
from tsflash.report.markdown import format_cell


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


@functools.cache
def _triton_do_bench():
    try:
        from triton.testing import do_bench
    except ImportError:  # triton ships with CUDA builds of torch only
        return None
    return do_bench


def time_call(fn, device: torch.device, min_time: float = 0.2) -> float:
    """Median seconds per call of fn(), by a library timer rather than a hand-written loop.

    CUDA with Triton: `triton.testing.do_bench`: CUDA events around each call (no host time in
    it) and the L2 cache flushed between calls, so a call does not find the last one's inputs
    cached; warm-up calls first, then calls for about `min_time`. Elsewhere
    `torch.utils.benchmark.Timer.blocked_autorange`: its first calls are the warm-up and size a
    block of calls so that the timer's own cost (a device synchronisation) vanishes, then blocks
    for at least `min_time`; on all of torch's threads (the Timer's default is one). The median,
    not the mean: one slow call (a clock change, another process) does not move it. Training
    steps are not timed here: a step changes the model, so its steps are timed as they run.
    """
    sync(device)
    do_bench = _triton_do_bench() if device.type == "cuda" else None
    if do_bench is not None:
        return do_bench(fn, rep=max(min_time * 1e3, 1.0), return_mode="median") / 1e3  # ms -> s
    from torch.utils.benchmark import Timer

    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_time).median


def write_json(path: Path, payload: dict) -> Path:
    """A benchmark's JSON file, laid out as the published ones (`tsflash.atomic.BENCH_JSON`)."""
    return atomic.write_json(path, payload, **atomic.BENCH_JSON)


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["gpu"] = device_name(device)
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Plain-text table; columns = (key, header, format spec); cells by
    `tsflash.report.markdown.format_cell` (missing values print as '-')."""
    body = [[format_cell(r.get(k), s) for k, _, s in columns] for r in rows]
    heads = [h for _, h, _ in columns]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)


# ---- ceilings: what the device can do at most, measured ------------------------------------------


def matmul_ceiling(
    device: torch.device | str, size: int | None = None, dtype: torch.dtype | None = None, min_time: float = 0.5
) -> float:
    """Measured FLOP/s of a (size x size) @ (size x size) product: the practical compute ceiling.
    Default 8192 in bfloat16 on CUDA, 512 in float32 on CPU."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    size = size or (8192 if cuda else 512)
    dtype = dtype or (torch.bfloat16 if cuda else torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(5):  # library initialisation and clocks
        a @ b
    seconds = time_call(lambda: a @ b, device, min_time)
    return 2.0 * size**3 / seconds


def copy_ceiling(device: torch.device, nbytes: int | None = None, min_time: float = 0.3) -> float:
    """Measured bytes/s of a device-to-device copy, bytes read plus bytes written: the practical
    memory-bandwidth ceiling (2 GiB on CUDA, far above the L2 cache; 64 MiB on CPU)."""
    nbytes = nbytes or (2**31 if device.type == "cuda" else 2**26)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    seconds = time_call(lambda: dst.copy_(src), device, min_time)  # noqa: F821 (called before the del below)
    del src, dst
    free_memory(device)
    return 2.0 * nbytes / seconds
