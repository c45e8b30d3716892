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
import threading

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
    """"NVIDIA H200" or "cpu (x86_64, 2 logical cores, torch threads 2)"."""
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
    on CPU the process's peak resident set (ru_maxrss: process-wide and never reset, so an upper
    bound for whatever ran since the process started)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB


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
    """Peak memory of a block: `peak_extra_bytes` above what was in use when it began, and on
    CUDA also the total `peak_bytes` (`peak_memory_bytes` after `reset_peak_memory`).

    CUDA: allocator statistics (exact). CPU: bytes in use from glibc's mallinfo2 (or, elsewhere,
    the resident set) sampled every ~0.2 ms by a thread (torch ops release the GIL); it can miss
    a very short spike but does not over-count, and `peak_bytes` stays None. Measure after a
    warm-up call: first calls allocate thread pools and caches.

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
            sync(self.device)
            self.peak_bytes = peak_memory_bytes(self.device)
            self.peak_extra_bytes = self.peak_bytes - self._base
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, cpu_bytes_in_use()[0])
            self.peak_extra_bytes = self._peak - self._base
        return False
