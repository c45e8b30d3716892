"""tsflash.device, the one home of the compute device: `--devices` parsed (one kind, each GPU once)
and the one CPU peak-memory rule (a transient allocation seen; the job's peak is the largest
resident set of the process or a child)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from tsflash import device
from tsflash.device import parse_devices
from tsflash.errors import UserError

CPU = torch.device("cpu")


def test_devices_one_kind_each_gpu_once():
    assert parse_devices("cpu") == ["cpu"]
    assert parse_devices("cpu, cpu") == ["cpu", "cpu"]  # CPU workers share the cores
    for text, message in [
        ("cpu,cuda:0", r"^--devices cpu,cuda:0: mixes CPU and CUDA devices; one sweep runs on one kind$"),
        ("cuda:0,cuda:0", r"^--devices cuda:0,cuda:0: cuda:0 is named twice \(one worker per GPU\)$"),
        ("cuda,cuda:0", r"^--devices cuda,cuda:0: cuda:0 is named twice"),
        ("cpu,", r"^--devices: give all, or comma-separated devices such as cuda:0,cuda:1, got 'cpu,'$"),
        ("tpu", r"^--devices: each device must be cpu, cuda or cuda:K, got 'tpu'$"),
    ]:
        with pytest.raises(UserError, match=message):
            parse_devices(text)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match=r"^--devices all: this machine has no CUDA device \(use --devices cpu\)$"):
            parse_devices("all")
        with pytest.raises(UserError, match=r"^--devices cuda:0: CUDA is not available on this machine \(use --devices cpu\)$"):
            parse_devices("cuda:0,cuda:1")
    else:
        assert parse_devices("all") == [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def test_cpu_peak_memory_sees_a_transient_allocation():
    with device.PeakMemory(CPU) as mem:
        t = torch.ones(16 * 2**20)  # 64 MiB, freed before the block ends
        del t
    assert mem.peak_extra_bytes >= 60 * 2**20 and mem.peak_bytes is None
    with device.PeakMemory(CPU) as idle:
        pass
    assert idle.peak_extra_bytes < 8 * 2**20


PEAK_PROBE = textwrap.dedent(
    """
    import json, subprocess, sys
    from tsflash import device
    child = subprocess.run([sys.executable, "-c", "b = b'x' * (512 * 2**20)"])  # 512 MiB, touched
    print(json.dumps({"job": device.process_peak_bytes(), "cpu": device.peak_memory_bytes("cpu"),
                      "own": device._own_peak_bytes(), "rc": child.returncode}))
    """
)


def test_the_jobs_cpu_peak_is_the_largest_resident_set_of_the_process_or_a_child():
    """One CPU peak-memory rule (`tsflash.device.process_peak_bytes`), the engine's per cell too: a
    child's peak counts (the larger of the two, not the sum), in a fresh small process."""
    out = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak = json.loads(out.stdout.strip().splitlines()[-1])
    assert peak["rc"] == 0 and peak["own"] < 512 * 2**20  # torch imported, no more
    assert 512 * 2**20 <= peak["job"] == peak["cpu"] < peak["own"] + 512 * 2**20 + 64 * 2**20
    assert device.peak_memory_bytes(CPU) >= device._status_bytes("VmRSS")  # never below what is held now
