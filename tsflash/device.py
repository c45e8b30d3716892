"""One home for the compute device: parse and resolve it (`--device`, `--devices`), name it,
synchronise it, autocast on it, and measure its peak memory. The engine, the sweep and
`tsflash bench` all go through here.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import resource
import sys

import torch

from tsflash.errors import UserError


def resolve_device(spec: str | torch.device | None = "auto", flag: str = "--device") -> torch.device:
    """"auto"/None -> cuda when available else cpu; "cpu", "cuda", "cuda:K" as given.

    A device that is not there (CUDA on a CPU machine, cuda:3 on a 2-GPU host) is a UserError
    naming `flag` and the value.
    """
    if spec is None or spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(spec, torch.device):
        device = spec
    else:
        text = str(spec).strip()
        if text != "cpu" and not text.startswith("cuda"):
            raise UserError(f"{flag} must be auto, cpu, cuda or cuda:K, got {spec!r}")
        try:
            device = torch.device(text)
        except RuntimeError:
            raise UserError(f"{flag} must be auto, cpu, cuda or cuda:K, got {spec!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{flag} {spec}: CUDA is not available on this machine (use {flag} cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"{flag} {spec}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def parse_devices(text: str, flag: str = "--devices") -> list[str]:
    """"cuda:0,cuda:1" | "all" (every CUDA device) | "cpu" | "cpu,cpu" (two CPU workers sharing the
    cores) -> the device of each worker. One kind only; a GPU named twice or absent is refused."""
    text = str(text).strip()
    if text == "all":
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise UserError(f"{flag} all: this machine has no CUDA device (use {flag} cpu)")
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    names = [part.strip() for part in text.split(",")]
    if not text or any(not name for name in names):
        raise UserError(f"{flag}: give all, or comma-separated devices such as cuda:0,cuda:1, got {text!r}")
    bad = [name for name in names if name != "cpu" and not name.startswith("cuda")]
    if bad:
        raise UserError(f"{flag}: each device must be cpu, cuda or cuda:K, got {bad[0]!r}")
    if len({name == "cpu" for name in names}) > 1:
        raise UserError(f"{flag} {text}: mixes CPU and CUDA devices; one sweep runs on one kind")
    names = ["cuda:0" if name == "cuda" else name for name in names]
    twice = sorted({name for name in names if name != "cpu" and names.count(name) > 1})
    if twice:
        raise UserError(f"{flag} {text}: {twice[0]} is named twice (one worker per GPU)")
    for name in dict.fromkeys(names):
        resolve_device(name, flag=flag)
    return names


def device_name(device: torch.device | str) -> str:
    """"NVIDIA <the GPU's model>" or "cpu (x86_64, 2 logical cores, torch threads 2)"."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return (f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, "
            f"torch threads {torch.get_num_threads()})")


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously); no-op on CPU.

    Every wall-clock measurement on CUDA needs it on both sides, or it times the launch only.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device | str):
    """The training and evaluation precision: bf16 autocast on CUDA (the fused attention kernels
    need 16-bit inputs there), plain float32 elsewhere (a null context)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---- memory --------------------------------------------------------------------------------------


def is_oom(exc: BaseException) -> bool:
    """True for out-of-memory failures of any device (CUDA's own error, CPU allocation errors)."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate" in text)


def free_memory(device: torch.device | str) -> None:
    """Collect garbage and hand cached CUDA blocks back, so the next size starts clean."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def reset_peak_memory(device: torch.device | str) -> None:
    """Start a new CUDA peak for `peak_memory_bytes`; on CPU the peak is the process's (no reset)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device | str) -> int:
    """Peak memory in bytes: on CUDA the allocator's maximum since `reset_peak_memory` (exact);
    on CPU `process_peak_bytes`, the job's peak resident set (never reset by
    `reset_peak_memory`, so an upper bound for whatever ran since the process started)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return process_peak_bytes()


def process_peak_bytes() -> int:
    """The job's peak memory on CPU, in bytes: the largest resident set (pages held in RAM) that
    this process, or any child process it has waited for, has had. The one CPU peak-memory rule:
    the engine's `peak_memory_bytes` per cell and `PeakMemory`'s growth of a block read it.

    Why this measure: the resident set, not heap bytes or address space, is what the machine had
    to hold for the job (torch's tensors, Python, the data, the libraries), and what an
    out-of-memory killer counts; the kernel keeps its high-water mark, so no short spike is
    missed, as a sampler can miss one. This process: Linux's VmHWM, the count ru_maxrss reports
    without the maximum Linux carries over an exec (which charges a process started by a large
    one with its parent's memory); ru_maxrss elsewhere. Children (spawned sweep workers, compile
    workers): RUSAGE_CHILDREN's ru_maxrss, the largest child's. The larger of the two, not their
    sum: a child's count starts with the pages it shares with its parent, which a sum would
    count twice. Since the process started, or since a `PeakMemory` block reset the mark.
    """
    return max(_own_peak_bytes(), _maxrss_bytes(resource.RUSAGE_CHILDREN))


def _own_peak_bytes() -> int:
    return _status_bytes("VmHWM") or _maxrss_bytes(resource.RUSAGE_SELF)


def _maxrss_bytes(who: int) -> int:
    rss = resource.getrusage(who).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB


def _status_bytes(field: str) -> int | None:
    """A size ("VmHWM", "VmRSS") from /proc/self/status in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return None


def _reset_own_peak() -> bool:
    """Start this process's resident-set high-water mark again from its current size (Linux:
    /proc/self/clear_refs, "5"); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim_probe():
    """glibc's malloc_trim, or None: it hands the heap's free pages back to the system."""
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim_probe()


class PeakMemory:
    """Peak memory of a block: `peak_extra_bytes` above what was in use when it began, and on
    CUDA also the total `peak_bytes` (`peak_memory_bytes` after `reset_peak_memory`).

    CUDA: allocator statistics (exact). CPU: the rule of `process_peak_bytes` for this process,
    over the block: the heap's free pages are handed back first (glibc's malloc_trim), so what
    the block allocates has to come into RAM, the high-water mark is reset to the resident set
    (Linux), and `peak_extra_bytes` is the mark at the end minus the resident set at the start
    (page-granular; it counts what the block touched, not what it reserved). `peak_bytes` stays
    None: the process's total says little about one call. Where the mark cannot be reset, the
    growth of the process's peak instead (0 unless the block sets a new one; `source` says so).
    Measure after a warm-up call: first calls allocate thread pools and caches.

        with PeakMemory(device) as mem:
            step()
        mem.peak_extra_bytes
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.peak_bytes: int | None = None
        self.peak_extra_bytes: int | None = None
        self.source = "cuda allocator"

    def __enter__(self):
        if self.device.type == "cuda":
            sync(self.device)
            reset_peak_memory(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            if _MALLOC_TRIM is not None:
                _MALLOC_TRIM(0)
            reset = _reset_own_peak()
            self.source = "rss high-water" if reset else "process peak rss (not reset)"
            self._base = _status_bytes("VmRSS") if reset else _own_peak_bytes()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            sync(self.device)
            self.peak_bytes = peak_memory_bytes(self.device)
            self.peak_extra_bytes = self.peak_bytes - self._base
        else:
            self.peak_extra_bytes = max(_own_peak_bytes() - self._base, 0)
        return False
