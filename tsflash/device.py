"""One home for the compute device: resolve it, name it, synchronise it, autocast on it, and
measure its peak memory. The engine, the sweep and `tsflash bench` all go through here.
"""

from __future__ import annotations

import os
import platform

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


def device_name(device: torch.device | str) -> str:
    """"NVIDIA H200" or "cpu (x86_64, 2 logical cores, torch threads 2)"."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return (f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, "
            f"torch threads {torch.get_num_threads()})")
