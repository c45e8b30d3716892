"""Workers: one process per device pulling CELLS from the run's optuna storage, on one host or several.

    tsflash sweep --lengths 512,4096,32768 --devices cuda:0,cuda:1      # one host, two GPUs
    tsflash sweep --lengths 512,4096,32768 --devices all                # every GPU of this host
    tsflash sweep ... --storage postgresql://u:p@db/tsflash --artifacts /shared/art --devices all   # on each host

The unit of parallel work is a CELL: one (configuration, fold, seed), the baselines, the precision
check, or the scoring of a configuration whose cells are all saved. Each is a trial of the
ledger's cells study (tsflash.sweep.ledger), handed to exactly one worker by the storage; no file
and no lock of ours decides anything. While a worker runs a cell, optuna's heartbeat thread
beats for it; a cell whose worker died is failed by the next worker that looks and queued again
(optuna's RetryFailedTrialCallback), and resumes from its checkpoint. A worker with nothing to
pop opens the next configuration (its cells are queued) or, while other workers' cells run,
waits so that it can take over theirs if they die; it stops when none is left.

Order: scoring of configurations whose cells are saved, then the baselines, then model cells
(largest N first, a fold's seeds together), then a newly opened configuration, then the precision
check: the big cells start first and the tail of a run is made of small ones. Under a time budget a
cell starts only when the rest of its fold fits too (`CellQueue`: a fold is scored whole).

Results equal a one-device run of the same seeds: a cell depends only on (configuration, fold,
seed), never on the worker or the order (bit-identical on CPU at one thread per process,
OMP_NUM_THREADS=1; tests/sweep/test_workers.py). A configuration's trial is completed once, by
the storage's decision (`Ledger.complete`), however many workers score it. With --trials K > 1 the
sampled values of later configurations depend on which had finished when they were opened, as
in any parallel search.

Data. Each worker loads and prepares the data once, on its own device, and reuses it for all its
cells (about a second at full size on the GPU host, in parallel with the other workers).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages._heartbeat import get_heartbeat_thread  # what study.optimize runs around a trial
from optuna.trial import FrozenTrial, Trial, TrialState

from tsflash.errors import UserError
from tsflash.sweep.ledger import Ledger

log = logging.getLogger(__name__)

POLL_S = 2.0  # a worker with nothing to pop looks again after this long while other workers' cells run
_RANK = {"score": 0, "baselines": 1, "cell": 2, "precision": 3}


# ---------------------------------------------------------------------------------------------
# The queue of cells


@dataclass
class Job:
    """One popped cell: kind "baselines" | "cell" | "score" | "precision"; for a model cell its
    configuration's parameters, key, fold and seed; for "score" the configuration's key."""

    kind: str
    cell: Trial  # the cell's trial (study "<study>:cells")
    config: Trial | None = None  # the configuration's trial (model cells and scoring)
    params: dict | None = None
    key: str = ""
    fold: int = -1
    seed: int = -1
    value: float = 0.0  # what the cell's trial is completed with (set by whoever runs it)


def kind_of(cell: FrozenTrial) -> str:
    name = cell.user_attrs.get("cell", "")
    return name.split("/")[0] if name.split("/")[0] in _RANK else "cell"


def cell_name(key: str, fold: int, seed: int) -> str:
    return f"{key}/fold{fold}-seed{seed}"


class CellTime(NamedTuple):
    """A model cell's expected seconds at one N; measured: from cells of this run finished at that N
    (else calibrated, a guess)."""
    seconds: float
    measured: bool


class CellQueue:
    """Pops the next cell for this worker (module doc, "Order"); iterate it to run them all.

    cells(key) -> [(fold, seed, done)] : the cells of a configuration key and whether each is saved.
    params_of(trial) -> (params, key) : the configuration's parameters (drawn once, when opened).
    deadline : time.monotonic() after which no new cell, baselines or precision job starts
        (scoring a finished configuration still does).
    estimate(n) -> CellTime : a model cell's expected time at N; with a deadline, a cell starts only
        when it is expected to end before it, and with whole_folds only when its fold's cells not
        yet saved (itself among them) are: a sliced run then stops between folds. A fold is scored
        from its seeds' per-bar cell files together, so a state carried between slices without
        those files loses the cells of a fold left half done (they train again). Except this queue's
        first model cell when its time is a guess (no cell of the run has finished at that N), so
        that every slice makes progress; a cell (a fold, with whole_folds) that took longer than the
        whole slice in this run never starts (a hard limit around the slice would cut it and lose
        its training): the log says how long a slice it needs.

    Model cells come largest N first, then by configuration, fold and seed: a fold's seeds one after
    another, whatever order they were queued in (a cell queued again comes back to its fold). With a
    deadline, the cells of a fold begun (some of its seeds saved) come before all others.
    """

    def __init__(self, ledger: Ledger, *, cells: Callable[[str], list[tuple[int, int, bool]]],
                 params_of: Callable[[Trial], tuple[dict, str]], deadline: float | None = None, poll_s: float = POLL_S,
                 estimate: Callable[[int], CellTime] | None = None, whole_folds: bool = True):
        self.ledger, self.cells, self.params_of = ledger, cells, params_of
        self.deadline, self.poll_s, self.estimate = deadline, poll_s, estimate
        self.whole_folds = whole_folds
        self.out_of_time = False
        self.cells_started = 0  # model cells this queue has handed out
        self._too_long = False  # a waiting cell was passed over as expected to end after the deadline
        self._measured_too_long: dict[int, float] = {}  # N -> a measured cell time longer than the slice
        self._opened_at = time.monotonic()
        self._opened: dict[int, tuple[dict, str]] = {}  # configuration number -> (params, key)
        self._cells_now: dict[str, list[tuple[int, int, bool]]] = {}

    def __iter__(self) -> Iterator[Job]:
        """Each popped job, heart-beaten while the loop body runs it, then COMPLETE; a body that
        raises (or a loop left early) fails the cell and queues it again."""
        while (job := self.next_job()) is not None:
            frozen = self.ledger.storage.get_trial(job.cell._trial_id)
            with get_heartbeat_thread(job.cell._trial_id, self.ledger.storage):
                try:
                    yield job
                except BaseException:
                    self.ledger.fail(frozen)
                    raise
            # skip_if_finished: a worker that beat too late had its cell failed (and queued again) by
            # another; the suppress covers the other failing it between tell's check and its write
            with contextlib.suppress(UpdateFinishedTrialError):
                self.ledger.cells.tell(job.cell, job.value, skip_if_finished=True)

    def next_job(self) -> Job | None:
        """Pop the next job; wait while other workers' cells run; None when nothing is left."""
        while True:
            self._queue_open_configs()
            late = self._late()
            self._too_long = False
            self._cells_now = {}  # key -> cells(key), looked at once a pop
            if (cell := self.ledger.pop_cell(functools.partial(self._order, late))) is not None:
                if not self._done_already(job := self._job(cell)):
                    self.cells_started += job.kind == "cell"
                    return job
                log.debug("%s was done by another worker meanwhile: pruned", cell.user_attrs.get("cell"))
                self.ledger.cells.tell(cell, state=TrialState.PRUNED, skip_if_finished=True)
                continue
            if not late and (config := self.ledger.pop()) is not None:
                self._open(config)
                continue
            running = self.ledger.trials(TrialState.RUNNING, study=self.ledger.cells)
            if self._too_long:  # waiting on others cannot make it fit: this slice is over
                self.out_of_time = True
                log.info("time budget: the cells left are expected to end after it; none started")
                if self._measured_too_long:
                    n, seconds = max(self._measured_too_long.items())
                    what = "the cells left of a fold" if self.whole_folds else "a cell"
                    log.warning("time budget: %s at N=%d take %.0f s at the longest cell this run measured, longer "
                                "than this whole slice (%.0f s); give a slice at least that long to finish them",
                                what, n, seconds, self.deadline - self._opened_at)
            if late or self._too_long or not running:
                return None
            log.debug("nothing to pop; waiting on %d cell(s) of other workers", len(running))
            time.sleep(self.poll_s)

    def _done_already(self, job: Job) -> bool:
        """A popped copy of a cell that another worker saved, or of the scoring of a configuration
        that another worker completed, after this worker looked and queued it (`_queue_cells`)."""
        if job.kind == "score":
            return self.ledger.storage.get_trial(job.config._trial_id).state.is_finished()
        return job.kind == "cell" and (job.fold, job.seed, True) in self.cells(job.key)

    def _late(self) -> bool:
        self.out_of_time = self.deadline is not None and time.monotonic() > self.deadline
        return self.out_of_time

    def _order(self, late: bool, cell: FrozenTrial):
        """Sort key of a WAITING cell; None: not now (after the deadline only scoring; the
        precision check once every configuration is open)."""
        kind = kind_of(cell)
        if (late and kind != "score") or (kind == "precision" and self.ledger.trials(TrialState.WAITING)):
            return None
        fixed = cell.system_attrs.get("fixed_params", {})
        n, fold, seed = (int(fixed.get(name, -1)) for name in ("n", "fold", "seed"))
        key = cell.user_attrs.get("key", "")
        if kind == "cell" and not self._fits(n, key, fold):
            self._too_long = True
            return None
        # a sliced run finishes a fold begun first: its saved seeds' per-bar files may not outlast the slice
        begun = kind == "cell" and self.deadline is not None and self._fold_cells(key, fold)[1] > 0
        return _RANK[kind], not begun, -n, int(cell.user_attrs.get("config", -1)), fold, seed, cell.number

    def _fold_cells(self, key: str, fold: int) -> tuple[int, int]:
        """(not saved, saved) cells of configuration `key`'s fold, its cells read once a pop; the
        first at least 1 (one popped now among them)."""
        if key not in self._cells_now:
            self._cells_now[key] = self.cells(key)
        done = [d for k, _, d in self._cells_now[key] if k == fold]
        return max(1, done.count(False)), done.count(True)

    def _fits(self, n: int, key: str, fold: int) -> bool:
        """A cell at N of configuration `key`'s fold may start: no deadline or estimate, this queue's
        first cell on a guessed time, or it (with whole_folds, its fold's cells left) expected to end
        in time."""
        if self.deadline is None or self.estimate is None:
            return True
        seconds, measured = self.estimate(n)
        if self.cells_started == 0 and not measured:
            return True
        if self.whole_folds:
            seconds *= self._fold_cells(key, fold)[0]
        if measured and seconds > self.deadline - self._opened_at:
            self._measured_too_long[n] = seconds
        return time.monotonic() + seconds <= self.deadline

    def _open(self, config: Trial) -> None:
        params, key = self._opened[config.number] = self.params_of(config)
        log.info("configuration %d (%s) opened: its cells are queued", config.number, key)
        self._queue_cells(config.number, params, key)

    def _queue_open_configs(self) -> None:
        """For every open configuration: its cells not saved and not queued (a worker that died
        while it queued them, or a run folder of an earlier version), or its scoring once they
        are all saved (the worker that saved the last one pops it first)."""
        for frozen in self.ledger.running():
            # The parameters params_of returns, not frozen.params: a configuration another worker has
            # just popped may not have drawn them yet, and cells queued from that snapshot had no N.
            if frozen.number not in self._opened:
                self._opened[frozen.number] = self.params_of(self.ledger.trial(frozen))
            params, key = self._opened[frozen.number]
            self._queue_cells(frozen.number, dict(params), key)

    def _queue_cells(self, number: int, params: dict, key: str) -> None:
        """What is saved is looked at before what is queued: a cell saved (or a configuration
        scored) in between is queued again, and pruned when popped (`_done_already`); two workers
        that save a configuration's last two cells at once may both queue its scoring that way."""
        cells = self.cells(key)
        if all(done for _, _, done in cells):
            self.ledger.enqueue_cell(f"score/{key}", {}, key=key, config=number)
        for fold, seed, done in cells:
            if not done:
                self.ledger.enqueue_cell(cell_name(key, fold, seed), params | {"fold": fold, "seed": seed},
                                         key=key, config=number)

    def _job(self, cell: Trial) -> Job:
        """The job of a popped cell, its enqueued parameters made its own (the dashboard shows them)."""
        frozen = self.ledger.storage.get_trial(cell._trial_id)
        fixed = {name: (cell.suggest_int if isinstance(value, int) else cell.suggest_float)(name, value, value)
                 for name, value in frozen.system_attrs.get("fixed_params", {}).items()}
        kind, key = kind_of(frozen), frozen.user_attrs.get("key", "")
        config = None
        if kind in ("cell", "score"):
            config = self.ledger.trial(self.ledger.trials()[frozen.user_attrs["config"]])
        params = {k: v for k, v in fixed.items() if k not in ("fold", "seed")}
        return Job(kind, cell, config, params, key, int(fixed.get("fold", -1)), int(fixed.get("seed", -1)))


# ---------------------------------------------------------------------------------------------
# Processes


def run_workers(target: Callable[..., dict], plan, devices: list[str]) -> list[dict]:
    """target(plan, device, index, n_workers) -> dict for each device: in this process for one
    device, else in one spawned process per device (spawn: CUDA cannot be forked). Waits for all.

    A worker that fails with a UserError makes this raise it (one line) after every worker has
    ended; any other failure raises RuntimeError naming the device (its traceback is in the log);
    a worker killed by a signal is logged; its cell is retried by the others once its heartbeat is stale.
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
    except KeyboardInterrupt:  # Ctrl-C reaches the workers too (one process group): they fail and requeue their cells
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
            log.warning("worker %d on %s (pid %s) ended without a result (exit code %s): its cell is retried "
                        "by another worker once its heartbeat is stale, or by the next run", i, device, p.pid, p.exitcode)
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
