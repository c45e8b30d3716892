"""Shared fixtures. Real data comes from ../shared/data beside the repository (tests skip,
saying why, where it is absent)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@contextlib.contextmanager
def one_thread():
    """This process at one thread: torch's, and every OpenMP and BLAS pool loaded (threadpoolctl),
    sklearn's among them (its logistic regression sums its loss in OpenMP). Runs compared bit for bit
    need it (with more threads on loaded cores, reductions sum in the order the threads finish), and
    tiny tensors run faster on one thread than on two fighting over a shared 2-core machine."""
    import sklearn.linear_model  # noqa: F401  (loads sklearn's OpenMP runtime, so that it is limited too)
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def single_thread():
    """A module's tests at one thread (`one_thread`): `pytestmark = pytest.mark.usefixtures("single_thread")`."""
    with one_thread():
        yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: btcusdt-1m/ (one Parquet a year) and binance-raw/ (two real archives)."""
    if not (SHARED_DATA / "btcusdt-1m").is_dir():
        pytest.skip(f"real data not present: {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_store(shared_data: Path) -> Path:
    """The shared folder is laid out as a canonical store root: <root>/btcusdt-1m/btcusdt-1m-YYYY.parquet."""
    return shared_data


@pytest.fixture
def compile_cache_settings(monkeypatch):
    """What `tsflash.model.fastpath.use_compile_cache` sets for the whole process (torch's cache
    folder, the functions AOTAutograd may cache), unset during the test and put back after it
    (inductor's config by its own patch: monkeypatch's undo would delete the entry)."""
    import torch._inductor.config as inductor_config

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with inductor_config.patch(unsafe_marked_cacheable_functions={}):
        yield


def load_experiment(name: str):
    """lab/<name>.py imported as a module (the experiment scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "lab" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sigkill_when(proc: subprocess.Popen, ready: Callable[[], bool], what: str, poll: float = 0.05,
                 limit: float = 120.0) -> None:
    """SIGKILL `proc` as soon as `ready()` holds, failing if it ends first or `what` does not happen
    within `limit` seconds; returns once it is dead."""
    deadline = time.monotonic() + limit
    try:
        while not ready():
            assert proc.poll() is None, f"{what}: the process ended before it could be killed"
            assert time.monotonic() < deadline, f"{what}: not within {limit:.0f} s"
            time.sleep(poll)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


class KilledAt(Exception):
    """Raised at the chosen step by `run_fold_killed_at`: training stops as a kill would stop it."""


def run_fold_killed_at(run_fold, step: int, *args, **kwargs) -> None:
    """`run_fold(*args, checkpoint_every_s=0.0, **kwargs)` stopped at `step` as by a kill (a
    checkpoint is written every step, so the kill leaves the state of the step before)."""

    def kill(s):
        if s == step:
            raise KilledAt

    try:
        run_fold(*args, checkpoint_every_s=0.0, on_step=kill, **kwargs)
    except KilledAt:
        return
    raise AssertionError(f"the cell finished before step {step}")
