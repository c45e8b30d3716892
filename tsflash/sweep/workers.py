"""Workers: one process per device pulling CELLS from the run's ledger, on one host or several.

    tsflash sweep --lengths 512,4096,32768 --devices cuda:0,cuda:1      # one host, two GPUs
    tsflash sweep --lengths 512,4096,32768 --devices all                # every GPU of this host
    tsflash sweep ... --storage postgresql://u:p@db/tsflash --out /shared/run --devices all   # on each host

The unit of parallel work is a CELL, one (trial, fold, seed): a trial of N=32768 no longer keeps
one GPU busy for five folds while another idles. optuna stays the trial ledger (tsflash.sweep.ledger):
a worker with nothing to claim pops the next trial, which opens its cells to every worker, and
the trial is completed by the worker that scores it once all its cells are saved.

Claims. A job (a cell, a trial's scoring, the baselines, the precision check, the report) is
claimed by creating `claims/<job>.claim` in the run folder with O_CREAT | O_EXCL, holding the
worker's id (host:pid:process-start) and device. Every look-and-claim happens under an exclusive
lock on `claims/.lock` (flock), so deciding that a job is free and taking it is one atomic step
for every worker that shares the run folder: the processes of one host, and the hosts that
share it over a filesystem with working locks (NFSv4, or NFSv3 with lockd; not one mounted
`nolock`). A finished cell is its summary file (tsflash.runfolder); its claim is removed after
that file is written, and a job whose result exists is never claimed again, so a cell never runs
twice to completion. A claim is refreshed (its mtime) every HEARTBEAT_S by a thread of its
worker; a claim whose worker is gone (`tsflash.sweep.ledger.holder_gone`: a dead process of this host,
at once; another host's, when the study is private, at once, else after CLAIM_STALE_S without a
heartbeat) is taken over by the next worker that looks, and the cell resumes from the dead
worker's checkpoint. A worker with nothing to claim waits while live workers hold claims, so that
it can take over theirs if they die; it stops when none is left. Hosts must have distinct names
(socket.gethostname): a worker id of this host is judged by its process, another host's by its
heartbeat.

Order: scoring of finished trials, then the baselines, then the cells of open trials (largest N
first), then a newly popped trial (largest N first), then the precision check: the big cells
start first and the tail of a run is made of small ones.

Results equal a one-device run of the same seeds: a cell depends only on (configuration, fold,
seed), never on the worker or the order (bit-identical on CPU, where CPU workers keep torch's
default thread count for that reason; tests/sweep/test_workers.py). With
--trials K > 1 the sampled values of later trials depend on which trials had finished when they
were popped, as in any parallel search.

Data. Each worker loads and prepares the data once, on its own device, and reuses it for all its
cells (about a second at full size on the H200 host, in parallel with the other workers). More
sharing is possible but not worth it: preparing once in the launcher and handing the CPU tensors
over shared memory would save K - 1 copies of host memory (about 0.2 GB each at full size), not
wall-clock time; the device copies are per GPU by nature.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tsflash.errors import UserError
from tsflash.sweep.ledger import Ledger, holder_gone, worker_id
from tsflash.runfolder import RunFolder

log = logging.getLogger(__name__)

HEARTBEAT_S = 30.0  # a worker refreshes its claims this often ...
CLAIM_STALE_S = 600.0  # ... and another host's claim silent this long is taken over (shared storage only)
POLL_S = 2.0  # a worker with nothing to claim looks again after this long while others hold claims
SUFFIX = ".claim"


# ---------------------------------------------------------------------------------------------
# Claims


class ClaimBoard:
    """The claims of one run folder (module doc): `lock()` around every look-and-claim, `take`,
    `release`, and a heartbeat thread for the claims this worker holds.

    `shared`: the study is shared by hosts (a --storage URL), so another host's claim is alive
    until its heartbeat is CLAIM_STALE_S old; otherwise another host's claim is dead at once.
    """

    def __init__(self, root: Path, *, shared: bool, device: str = "", stale_after_s: float = CLAIM_STALE_S,
                 heartbeat_s: float = HEARTBEAT_S):
        self.dir = RunFolder(root).claims_dir
        self.shared, self.device = shared, device
        self.stale_after_s, self.heartbeat_s = stale_after_s, heartbeat_s
        self.worker = worker_id()
        self.held: set[str] = set()
        self._depth = 0
        self._fh = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def path(self, name: str) -> Path:
        return self.dir / f"{name}{SUFFIX}"

    @contextlib.contextmanager
    def lock(self):
        """The run folder's exclusive lock (re-entrant within this board)."""
        if self._depth == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.dir / ".lock", "a+")
            fcntl.flock(self._fh, fcntl.LOCK_EX)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                fcntl.flock(self._fh, fcntl.LOCK_UN)
                self._fh.close()
                self._fh = None

    def holder(self, name: str) -> dict | None:
        """{"worker", "device", "claimed", "heartbeat"} of the claim `name`, or None when unclaimed.
        A claim without a readable holder (its worker died while writing it) has worker None."""
        path = self.path(name)
        try:
            beat = path.stat().st_mtime
            info = json.loads(path.read_text() or "{}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            info = {}
        return {"worker": info.get("worker"), "device": info.get("device"), "claimed": info.get("claimed"),
                "heartbeat": beat}

    def is_dead(self, holder: dict, now: float | None = None) -> bool:
        return holder_gone(holder["worker"], holder["heartbeat"], shared=self.shared,
                           now=time.time() if now is None else now, stale_after_s=self.stale_after_s)

    def take(self, name: str) -> bool:
        """Claim `name` (under `lock()`): True when it was free, or held by a worker that is gone
        (logged, then replaced); False when a live worker holds it."""
        assert self._depth > 0, "claims are taken under the run folder's lock"
        path = self.path(name)
        holder = self.holder(name)
        if holder is not None:
            if holder["worker"] == self.worker or not self.is_dead(holder):
                return False
            log.info("taking over %s from worker %s (%s), which is gone", name, holder["worker"] or "(unnamed)",
                     holder["device"] or "?")
            path.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # a host outside this lock (a filesystem without locks) was first
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump({"worker": self.worker, "device": self.device, "claimed": time.time()}, fh)
        self.held.add(name)
        return True

    def release(self, name: str) -> None:
        """Give up `name` (its result is saved, or the job failed and may be taken again)."""
        with self.lock():
            holder = self.holder(name)
            if holder is not None and holder["worker"] == self.worker:
                self.path(name).unlink(missing_ok=True)
        self.held.discard(name)

    def others_alive(self) -> list[str]:
        """Claims held by other workers that are alive (under `lock()`)."""
        names = []
        for path in sorted(self.dir.rglob(f"*{SUFFIX}")) if self.dir.is_dir() else []:
            name = path.relative_to(self.dir).as_posix().removesuffix(SUFFIX)
            holder = self.holder(name)
            if holder is not None and holder["worker"] != self.worker and not self.is_dead(holder):
                names.append(name)
        return names

    # ---- heartbeat ---------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="tsflash-claims-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for name in list(self.held):
                with contextlib.suppress(OSError):
                    os.utime(self.path(name))


def tidy_claims(root: Path) -> None:
    """Remove the claims folder of a finished run (the lock file with it)."""
    folder = RunFolder(root).claims_dir
    if folder.is_dir():
        for path in sorted(folder.rglob("*"), reverse=True):
            (path.rmdir if path.is_dir() else path.unlink)()
        folder.rmdir()


# ---------------------------------------------------------------------------------------------
# The queue of jobs


@dataclass
class Job:
    """One claimed job: kind "baselines" | "cell" | "score" | "precision"; for a cell its trial,
    parameters, trial key, fold and seed; for "score" the trial."""

    kind: str
    name: str  # the claim's name
    trial: object = None  # optuna.trial.Trial
    params: dict | None = None
    key: str = ""
    fold: int = -1
    seed: int = -1


class CellQueue:
    """Claims the next job for this worker (module doc, "Order"); iterate it to run them all.

    cells(key) -> [(fold, seed, done)] : the cells of a trial key and whether each is saved.
    params_of(trial) -> (params, key) : the trial's parameters (suggested once, when popped).
    baselines_done() / precision_due() : whether those jobs are saved / still wanted.
    deadline : time.monotonic() after which no new cell, baselines or precision job starts
        (scoring a finished trial still does).
    """

    def __init__(self, board: ClaimBoard, ledger: Ledger, *, cells: Callable[[str], list[tuple[int, int, bool]]],
                 params_of: Callable[[object], tuple[dict, str]], baselines_done: Callable[[], bool],
                 precision_due: Callable[[], bool], deadline: float | None = None, poll_s: float = POLL_S):
        self.board, self.ledger = board, ledger
        self.cells, self.params_of = cells, params_of
        self.baselines_done, self.precision_due = baselines_done, precision_due
        self.deadline, self.poll_s = deadline, poll_s
        self.out_of_time = False
        self._open: dict[int, tuple[object, dict, str]] = {}  # trial number -> (trial, params, key)

    def __iter__(self) -> Iterator[Job]:
        """Each claimed job; its claim is released after the loop body (also on an exception)."""
        self.board.start_heartbeat()
        try:
            while (job := self.next_job()) is not None:
                try:
                    yield job
                finally:
                    self.board.release(job.name)
        finally:
            self.board.stop_heartbeat()

    def next_job(self) -> Job | None:
        """Claim the next job; wait while other live workers hold claims; None when nothing is left."""
        while True:
            with self.board.lock():
                # live claims first: one whose worker dies while we look is then taken now or next time
                waiting_on = self.board.others_alive()
                job = self._claim()
            if job is not None or not waiting_on or self._late():
                return job
            log.debug("nothing to claim; waiting on %d claim(s) of other workers: %s", len(waiting_on), waiting_on[:4])
            time.sleep(self.poll_s)

    def _late(self) -> bool:
        self.out_of_time = self.deadline is not None and time.monotonic() > self.deadline
        return self.out_of_time

    def _claim(self) -> Job | None:
        trials = self._open_trials()
        if job := self._score_job(trials):
            return job
        if self._late():
            return None
        if not self.baselines_done() and self.board.take("baselines"):
            return Job("baselines", "baselines")
        while not (job := self._cell_job(trials)):
            popped = self.ledger.pop()
            if popped is None:
                break
            trials[popped.number] = self._open[popped.number] = (popped, *self.params_of(popped))
            log.info("trial %d (%s) opened: its cells may now be claimed", popped.number, trials[popped.number][2])
            if job := self._score_job({popped.number: trials[popped.number]}):  # its cells were saved before
                return job
        if job is None and self.precision_due() and self.board.take("precision"):
            return Job("precision", "precision")
        return job

    def _score_job(self, trials: dict) -> Job | None:
        for number, (trial, params, key) in trials.items():
            if all(done for _, _, done in self.cells(key)) and self.board.take(f"score-trial{number}"):
                return Job("score", f"score-trial{number}", trial, params, key)
        return None

    def _cell_job(self, trials: dict) -> Job | None:
        for trial, params, key in sorted(trials.values(), key=lambda t: (-t[1]["n"], t[0].number)):
            for fold, seed, done in self.cells(key):
                name = f"{key}/fold{fold}-seed{seed}"
                if not done and self.board.take(name):
                    return Job("cell", name, trial, params, key, fold, seed)
        return None

    def _open_trials(self) -> dict[int, tuple[object, dict, str]]:
        """The RUNNING trials with their parameters, keeping the handles already made (a trial
        popped by a worker that died before its parameters were set gets them now)."""
        opened = {}
        for t in self.ledger.running():
            if t.number not in self._open:
                trial = self.ledger.trial(t)
                self._open[t.number] = (trial, *self.params_of(trial))
            opened[t.number] = self._open[t.number]
        self._open = dict(opened)
        return opened


# ---------------------------------------------------------------------------------------------
# Processes


def run_workers(target: Callable[..., dict], plan, devices: list[str]) -> list[dict]:
    """target(plan, device, index, n_workers) -> dict for each device: in this process for one
    device, else in one spawned process per device (spawn: CUDA cannot be forked). Waits for all.

    A worker that fails with a UserError makes this raise it (one line) after every worker has
    ended; any other failure raises RuntimeError naming the device (its traceback is in the log);
    a worker killed by a signal is logged, its cells are taken over by the others.
    """
    if len(devices) == 1:
        return [target(plan, devices[0], 0, 1)]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    level = logging.getLogger("tsflash").getEffectiveLevel()
    procs = [ctx.Process(target=_child, args=(target, plan, device, i, len(devices), results, level),
                         name=f"tsflash-worker-{i}-{device}") for i, device in enumerate(devices)]
    for p in procs:
        p.start()
    log.info("started %d workers: %s", len(procs), ", ".join(f"{d} (pid {p.pid})" for d, p in zip(devices, procs)))
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:  # Ctrl-C reaches the workers too (one process group): they release their claims
        for p in procs:
            p.join()
        raise
    outcomes: dict[int, tuple] = {}
    while len(outcomes) < len(procs):
        try:
            index, *outcome = results.get(timeout=0.5)  # small messages: all in the pipe once a worker has ended
        except queue.Empty:
            break
        outcomes[index] = tuple(outcome)
    return _outcomes(devices, procs, outcomes)


def _outcomes(devices: list[str], procs, outcomes: dict[int, tuple]) -> list[dict]:
    done, failures = [], []
    for i, (device, p) in enumerate(zip(devices, procs)):
        status, payload = outcomes.get(i, ("killed", None))
        if status == "ok":
            done.append(payload)
        elif status == "killed":
            log.warning("worker %d on %s (pid %s) ended without a result (exit code %s): its claimed cell is "
                        "taken over by another worker or by the next run", i, device, p.pid, p.exitcode)
        else:
            failures.append((status, device, payload))
    for status, device, payload in failures:
        if status == "user":
            raise UserError(payload)
        if status == "interrupted":
            raise KeyboardInterrupt
        raise RuntimeError(f"the worker on {device} failed: {payload} (traceback in the log)")
    return done


def worker_tag(device: str, index: int) -> str:
    """How a worker's log lines are marked: its GPU ("cuda:1"), or "cpu#1" (CPU workers share a name)."""
    return device if device.startswith("cuda") else f"{device}#{index}"


def _child(target, plan, device: str, index: int, n_workers: int, results, level: int) -> None:
    """A spawned worker: console logging tagged with its device, its GPU selected, then target().

    A GPU worker's CPU-side work (batches, baselines) gets its share of the cores. CPU workers keep
    torch's default thread count: a reduction split over another number of threads sums in another
    order, and their cells must equal a one-worker run bit for bit (they share the cores instead).
    Bit for bit needs one thread per process (OMP_NUM_THREADS=1): with more, libgomp combines the
    threads' partial sums in the order they finish, and on loaded cores the last bits move."""
    import torch

    tag = worker_tag(device, index)
    logging.basicConfig(level=level, format=f"%(asctime)s %(levelname)s [{tag}] %(name)s: %(message)s", datefmt="%H:%M:%S")
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))  # no stray context on cuda:0
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // n_workers))
    try:
        results.put((index, "ok", target(plan, device, index, n_workers)))
    except UserError as exc:
        results.put((index, "user", str(exc)))
    except KeyboardInterrupt:
        results.put((index, "interrupted", None))
    except Exception as exc:
        log.error("worker on %s failed:\n%s", device, traceback.format_exc())
        results.put((index, "error", f"{type(exc).__name__}: {exc}"))
