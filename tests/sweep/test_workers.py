"""tsflash.sweep.workers: cells as optuna trials (each popped by one worker across processes,
retried when their worker's heartbeat stops), the order of jobs, a configuration whose last two
cells two workers save at once (completed once), and a tiny sweep on two CPU workers that is
bit-identical to one worker."""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from optuna.trial import TrialState

from tsflash.runfolder import CLAIMS_DIR, encode_trial_key
from tsflash.sweep.ledger import Ledger, plan_slots, suggest_params
from tsflash.sweep.workers import CellQueue, CellTime

REPO = Path(__file__).resolve().parents[2]
# One thread per process, in the reference run and in every worker: a reduction split over threads
# is combined in the order the threads finish (sklearn's OpenMP loss sums, libgomp), so under two
# processes on two cores the same cell came out different in the last bits in 1 of 3 runs (measured:
# baseline log-loss 1.0837077504 against 1.0837077482; a transformer cell 1.09147837403301 against
# ...03355). Bit-identity across workers holds at a fixed thread count, which is what is tested.
PYTHON_ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


# A tiny sweep whose model cells take about a second each on a 2-core CPU (long enough to kill one
# mid-cell in tests/sweep/test_postgres.py): 2 lengths x 2 folds, baselines, the precision check.
TINY = [
    "data.start=\"2024-01-01\"", "data.end=\"2024-01-08\"", "splits.test_days=2", "splits.n_folds=2", "splits.val_days=0",
    "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=12", "train.tokens_per_step=1024",
    "train.warmup_steps=1", "eval.baseline_lags=2", "eval.batch_tokens=4096", "selection.cscv_blocks=4",
]
LENGTHS = "64,128"
N_CELLS = 6  # 2 baseline folds + 2 lengths x 2 folds


def tiny_argv(out: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "tsflash.cli", "sweep", "--lengths", LENGTHS, "--data", "synthetic:random-walk",
            "--out", str(out), "--preset", "cpu", "--seed", "0", *extra]
    for item in TINY:
        argv += ["--set", item]
    return argv


def tiny_sweep(out: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(tiny_argv(out, *extra), cwd=REPO, env=PYTHON_ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="session")
def one_worker_run(tmp_path_factory) -> Path:
    """The reference: the tiny sweep on one CPU worker, SQLite ledger."""
    out = tmp_path_factory.mktemp("one-worker") / "run"
    tiny_sweep(out, "--device", "cpu")
    return out


# Cost fields measure the machine, not the model: everything else of a cell must be identical.
TIMING = {"seconds", "train_seconds", "val_seconds", "epoch_seconds", "eval_seconds", "tokens_per_s", "tflops", "peak_memory_bytes",
          "kernel_choice", "compile"}


def cell_records(run: Path) -> dict:
    """Every cell's summary (timings left out) and the bytes of its per-bar arrays."""
    records = {}
    for marker in sorted((run / "cells").rglob("*.cell.json")):
        summary = json.loads(marker.read_text())
        summary.pop("seconds", None)
        for row in summary.get("baselines", {}).values() if "baselines" in summary else [summary]:
            row["cost"] = {k: v for k, v in row.get("cost", {}).items() if k not in TIMING}
        records[marker.relative_to(run).as_posix()] = summary
    for npz in sorted((run / "cells").rglob("*.npz")):
        records[npz.relative_to(run).as_posix()] = npz.read_bytes()
    return records


def report_numbers(run: Path) -> dict:
    """The report's numbers: the daily series, the selection (DSR, PBO, verdict), the ledger's values."""
    results = json.loads((run / "results.json").read_text())
    ledger = json.loads((run / "ledger.json").read_text())
    return {
        "series": {p.name: p.read_bytes() for p in sorted((run / "series").glob("*.npz"))},
        "selection": results["selection"],
        "values": sorted((t["key"], t["value"]) for t in ledger["trials"] if t["state"] == "COMPLETE"),
    }


def completions(log: str) -> Counter:
    """How many times each cell was finished, from the "[i/total] <cell>: ..." lines of sweep.log."""
    return Counter(re.findall(r"tsflash\.sweep\.progress: \[\d+/\d+\] (n\d+ fold \d+ seed \d+|baselines fold \d+): ", log))


# ---- cells as trials ----------------------------------------------------------------------------


POP = textwrap.dedent("""
    import json, sys, time
    from tsflash.sweep.ledger import Ledger, plan_slots
    url, start = sys.argv[1], float(sys.argv[2])
    ledger = Ledger.open("s", url, plan_slots([64], 1, 1e-3, 0.1), shared=True)
    time.sleep(max(0.0, start - time.time()))  # all four start popping at once
    mine = []
    while (cell := ledger.pop_cell(lambda t: t.number)) is not None:
        mine.append(cell.user_attrs["cell"])
    print(json.dumps(mine))
""")


def test_each_cell_is_popped_by_exactly_one_worker_across_processes(tmp_path):
    """Four processes pop the same 40 queued cells from one SQLite study: each cell goes to exactly one."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    ledger = Ledger.open("s", url, plan_slots([64], 1, 1e-3, 0.1), shared=True)
    names = [f"n{n}/fold{k}-seed0" for n in (64, 128, 256, 512) for k in range(10)]
    for name in names:
        ledger.enqueue_cell(name, {"n": int(name[1:].split("/")[0])}, key=name.split("/")[0])
    start = str(time.time() + 5)
    procs = [subprocess.Popen([sys.executable, "-c", POP, url, start], env=PYTHON_ENV, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    won = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert sorted(sum(won, [])) == sorted(names)  # every cell once: none twice, none lost


def test_a_cell_queued_twice_runs_once(tmp_path):
    """Two invocations syncing at once may queue a cell twice: the later copy is pruned when popped."""
    ledger = Ledger.open("s", f"sqlite:///{tmp_path / 'optuna.db'}", plan_slots([64], 1, 1e-3, 0.1), shared=True)
    for _ in range(2):
        ledger.cells.enqueue_trial({"n": 64}, user_attrs={"cell": "n64/fold0-seed0"})
    first = ledger.pop_cell(lambda t: -t.number)  # the later copy is looked at first, and pruned
    assert first.number == 0 and ledger.pop_cell(lambda t: t.number) is None
    assert [t.state for t in ledger.cells.trials] == [TrialState.RUNNING, TrialState.PRUNED]


class FakeRun:
    """Cells saved in a set instead of files; a real SQLite ledger, and the baselines and the
    precision check queued as `tsflash.sweep.run` queues them."""

    def __init__(self, tmp_path: Path, lengths=(64, 128), folds=2, baselines=True, precision=True, seeds=1):
        slots = plan_slots(list(lengths), 1, 1e-3, 0.1)
        self.url = f"sqlite:///{tmp_path / 'optuna.db'}"
        self.ledger = Ledger.open("s", self.url, slots)
        self.ledger.sync()
        for name, wanted in (("baselines", baselines), ("precision", precision)):
            if wanted:
                self.ledger.enqueue_cell(name, {})
        self.lengths, self.folds, self.seeds = list(lengths), folds, seeds
        self.saved: set = set()  # (key, fold, seed)

    def queue(self, **kw) -> CellQueue:
        return CellQueue(self.ledger, cells=self.cells, params_of=self.params_of, **kw)

    def second_worker(self) -> FakeRun:
        """Another worker on the same study and the same saved cells (its own storage connection)."""
        other = copy.copy(self)
        other.ledger = Ledger.open("s", self.url, self.ledger.slots, shared=True)
        return other

    def cells(self, key: str):
        return [(k, s, (key, k, s) in self.saved) for k in range(self.folds) for s in range(self.seeds)]

    def params_of(self, trial):
        params = suggest_params(trial, self.lengths, 1e-3, 0.1, False)
        key = encode_trial_key(params)
        trial.set_user_attr("key", key)
        return params, key

    def run(self, job) -> str:
        if job.kind == "cell":
            self.saved.add((job.key, job.fold, job.seed))
            return f"{job.key}/{job.fold}" + (f"/{job.seed}" if self.seeds > 1 else "")
        if job.kind == "score":  # recorded on the trial, then told, as tsflash.sweep.run scores
            self.ledger.complete(job.config, 1.0, lambda trial: trial.set_user_attr("daily_returns_path", job.key))
            return f"score {job.key}"
        return job.kind


def test_jobs_come_baselines_first_then_largest_n_then_scoring_then_precision(tmp_path):
    run = FakeRun(tmp_path)
    order = [run.run(job) for job in run.queue()]
    assert order == ["baselines", "n128/0", "n128/1", "score n128", "n64/0", "n64/1", "score n64", "precision"]
    assert run.ledger.is_complete()
    cells = run.ledger.cells.trials
    assert {t.state for t in cells} == {TrialState.COMPLETE} and len(cells) == len(order)  # each cell once
    first = next(t for t in cells if t.user_attrs["cell"] == "n128/fold0-seed0")
    assert first.params == {"n": 128, "fold": 0, "seed": 0} and first.user_attrs["key"] == "n128"


def test_after_the_deadline_only_scoring_runs(tmp_path):
    run = FakeRun(tmp_path, baselines=False)
    jobs = iter(run.queue())
    assert run.run(next(jobs)) == "n128/0"
    next(jobs)  # n128/1, popped and left: the loop ends before it is run
    jobs.close()
    assert [t.state for t in run.ledger.cells.trials][-2:] == [TrialState.FAIL, TrialState.WAITING]  # queued again
    run.saved.add(("n128", 1, 0))  # another worker finished it
    late = run.queue(deadline=time.monotonic() - 1)
    assert [run.run(job) for job in late] == ["score n128"] and late.out_of_time


def test_a_cell_expected_to_end_after_the_deadline_does_not_start_but_the_first_one_does(tmp_path):
    """--time-budget with the cost model: a sliced run stops between cells, not inside one; a shorter
    cell that fits still runs, and every slice starts at least one cell when its time is a guess."""
    run = FakeRun(tmp_path, baselines=False, precision=False)
    guessed = lambda seconds: (lambda n: CellTime(seconds(n), measured=False))  # noqa: E731
    queue = run.queue(deadline=time.monotonic() + 100, estimate=guessed(lambda n: 1000.0 if n == 128 else 1.0))
    assert [run.run(job) for job in queue] == ["n128/0", "n64/0", "n64/1", "score n64"]
    assert queue.out_of_time and queue.cells_started == 3
    waiting = [t.user_attrs["cell"] for t in run.ledger.trials(TrialState.WAITING, study=run.ledger.cells)]
    assert waiting == ["n128/fold1-seed0"]  # left for the next slice
    # the next slice: its first cell starts though it will not end in time
    nxt = run.queue(deadline=time.monotonic() + 100, estimate=guessed(lambda n: 1000.0))
    assert [run.run(job) for job in nxt] == ["n128/1", "score n128"] and not nxt.out_of_time


def test_a_cell_measured_longer_than_the_whole_slice_never_starts(tmp_path, caplog):
    """A hard limit around a slice (a lent GPU's call) would cut such a cell and lose its training:
    a measured time longer than the slice is not started even as the slice's first cell; shorter
    cells still run, and the log says how long a slice the long one needs."""
    run = FakeRun(tmp_path, baselines=False, precision=False)
    measured = lambda n: CellTime(480.0 if n == 128 else 1.0, measured=True)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="tsflash.sweep.workers"):
        queue = run.queue(deadline=time.monotonic() + 390, estimate=measured)
        assert [run.run(job) for job in queue] == ["n64/0", "n64/1", "score n64"]
    assert queue.out_of_time and queue.cells_started == 2
    assert "a fold at N=128 take 480 s" in caplog.text
    assert len(run.ledger.trials(TrialState.WAITING, study=run.ledger.cells)) == 2  # both n128 cells left
    # a slice long enough runs them
    longer = run.queue(deadline=time.monotonic() + 1000, estimate=measured)
    assert [run.run(job) for job in longer] == ["n128/0", "n128/1", "score n128"]


def test_under_a_deadline_a_fold_starts_only_when_all_its_cells_left_fit(tmp_path, caplog):
    """A fold is scored from its seeds' per-bar files together, and a state carried between slices
    leaves those behind: a sliced run must not leave a fold half done. With three seeds of 100 s
    measured and 250 s left, one seed alone would fit but the fold does not: the slice goes to the
    smaller N; with 350 s the whole fold runs, its seeds one after another."""
    run = FakeRun(tmp_path, folds=1, seeds=3, baselines=False, precision=False)
    measured = lambda n: CellTime(100.0 if n == 128 else 1.0, measured=True)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="tsflash.sweep.workers"):
        queue = run.queue(deadline=time.monotonic() + 250, estimate=measured)
        assert [run.run(job) for job in queue] == ["n64/0/0", "n64/0/1", "n64/0/2", "score n64"]
        assert queue.out_of_time and "a fold at N=128 take 300 s" in caplog.text and "slice (250 s)" in caplog.text
        caplog.clear()
        nxt = run.queue(deadline=time.monotonic() + 350, estimate=measured)
        assert [run.run(job) for job in nxt] == ["n128/0/0", "n128/0/1", "n128/0/2", "score n128"]
    assert not caplog.text


def test_a_fold_half_done_counts_only_its_cells_left_and_a_cell_queued_again_comes_back_to_its_fold(tmp_path):
    """Two of three seeds saved: the third fits where the whole fold would not. A cell queued again
    (its files left behind) runs with its own fold's seeds, not after the other folds' cells."""
    run = FakeRun(tmp_path, lengths=(64,), folds=2, seeds=3, baselines=False, precision=False)
    run.saved |= {("n64", 0, 1), ("n64", 0, 2)}
    measured = lambda n: CellTime(100.0, measured=True)  # noqa: E731
    queue = run.queue(deadline=time.monotonic() + 150, estimate=measured)
    assert [run.run(job) for job in queue] == ["n64/0/0"]
    run.saved.discard(("n64", 0, 0))  # its per-bar files were left behind before the fold was scored
    run.saved |= {("n64", 1, 0)}
    assert [run.run(job) for job in run.queue()] == ["n64/0/0", "n64/1/1", "n64/1/2", "score n64"]


def test_sliced_by_cell_a_cell_starts_when_it_alone_fits_and_a_fold_begun_comes_first(tmp_path, monkeypatch, caplog):
    """--slice-by cell (a run folder kept whole between slices): three seeds of 100 s measured and
    250 s left run two seeds of the N=128 fold, where whole folds would run none of them. The next
    slice, by whole folds, finishes that fold before it starts another: a carry that leaves per-bar
    files behind would lose its saved seeds. Each cell takes its measured time on a fake clock."""
    from tsflash.sweep import workers

    clock = [0.0]
    monkeypatch.setattr(workers, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    run = FakeRun(tmp_path, folds=2, seeds=3, baselines=False, precision=False)
    seconds = lambda n: 100.0 if n == 128 else 1.0  # noqa: E731
    measured = lambda n: CellTime(seconds(n), measured=True)  # noqa: E731

    def ran(queue):
        out = []
        for job in queue:
            clock[0] += seconds(job.params.get("n", 0))
            out.append(run.run(job))
        return out

    by_cell = run.queue(deadline=clock[0] + 250, estimate=measured, whole_folds=False)
    n64 = [f"n64/{k}/{s}" for k in (0, 1) for s in range(3)] + ["score n64"]
    assert ran(by_cell) == ["n128/0/0", "n128/0/1"] + n64 and by_cell.out_of_time
    by_fold = run.queue(deadline=clock[0] + 350, estimate=measured)  # fold 1's 300 s would fit too
    assert ran(by_fold)[0] == "n128/0/2"
    with caplog.at_level(logging.WARNING, logger="tsflash.sweep.workers"):
        short = run.queue(deadline=clock[0] + 50, estimate=measured, whole_folds=False)
        assert ran(short) == [] and short.out_of_time
    assert "a cell at N=128 take 100 s" in caplog.text and "slice (50 s)" in caplog.text


def test_a_fold_begun_comes_before_a_larger_n(tmp_path):
    """A resumed slice, both configurations open and one seed of the N=64 fold saved: that fold is
    finished before the N=128 fold starts. Without a deadline the order is the plain one."""
    run = FakeRun(tmp_path, folds=1, seeds=2, baselines=False, precision=False)
    assert run.ledger.pop() is not None and run.ledger.pop() is not None  # both open, as an earlier slice left them
    run.saved.add(("n64", 0, 1))
    sliced = run.queue(deadline=time.monotonic() + 1000)
    assert [run.run(job) for job in sliced] == ["n64/0/0", "score n64", "n128/0/0", "n128/0/1", "score n128"]
    (tmp_path / "plain").mkdir()
    other = FakeRun(tmp_path / "plain", folds=1, seeds=2, baselines=False, precision=False)
    assert other.ledger.pop() is not None and other.ledger.pop() is not None
    other.saved.add(("n64", 0, 1))
    assert [other.run(job) for job in other.queue()] == ["n128/0/0", "n128/0/1", "score n128", "n64/0/0", "score n64"]


def test_a_configuration_popped_but_not_yet_drawn_by_another_worker_queues_cells_with_their_n(tmp_path):
    # Worker A pops a configuration (RUNNING, its values not yet drawn); worker B sees it open and
    # queues its cells before A does. B's cells must carry N: from a snapshot of the trial they had
    # none, and the worker that ran one failed (KeyError 'n', seen in CI under load).
    a = FakeRun(tmp_path, lengths=(64,), baselines=False, precision=False)
    b = a.second_worker()
    popped = a.ledger.pop()
    assert popped is not None and not a.ledger.storage.get_trial(popped._trial_id).params  # not drawn yet
    b.queue()._queue_open_configs()
    cells = [t for t in b.ledger.trials(TrialState.WAITING, study=b.ledger.cells) if t.user_attrs.get("cell", "").startswith("n64/")]
    assert len(cells) == a.folds
    assert all(t.system_attrs["fixed_params"]["n"] == 64 for t in cells)
    order = [b.run(job) for job in b.queue()]
    assert order == ["n64/0", "n64/1", "score n64"]


@pytest.mark.parametrize("prune", [True, False], ids=["pruned-when-popped", "completed-once-by-the-storage"])
def test_two_workers_saving_a_configurations_last_two_cells_at_once_complete_it_once(tmp_path, monkeypatch, prune):
    """Workers A and B save n64's last two cells at the same moment. Both find n64 open with every
    cell saved; B's look at the saved cells is held until A has scored n64 and completed its
    scoring cell, so B queues the scoring again (the interleaving behind a CI failure on
    PostgreSQL: a configuration's trial "already finished" when told). B's copy is pruned when
    popped (by B, or by A if A pops it first); without that guard it is scored again and `Ledger.complete` leaves it as A completed
    it. Either way n64 is completed once, with A's value and attributes, and no worker fails."""
    if not prune:
        monkeypatch.setattr(CellQueue, "_done_already", lambda queue, job: False)
    a = FakeRun(tmp_path, lengths=(64,), baselines=False, precision=False)
    b = a.second_worker()
    b_looks, both_saved = threading.Event(), threading.Barrier(2, timeout=60)

    def scored() -> bool:
        return any(t.user_attrs.get("cell") == "score/n64" and t.state == TrialState.COMPLETE
                   for t in a.ledger.trials(study=a.ledger.cells))

    def b_cells(key: str):
        cells = a.cells(key)
        if all(done for *_, done in cells):
            b_looks.set()
            wait_until(scored)
        return cells

    def a_run(job) -> str:
        if job.kind == "score":
            assert b_looks.wait(timeout=60)  # B has seen n64 open and all its cells saved
        return a.run(job)

    queues = {"A": a.queue(poll_s=0.05), "B": CellQueue(b.ledger, cells=b_cells, params_of=b.params_of, poll_s=0.05)}
    jobs = {name: iter(queue) for name, queue in queues.items()}
    firsts = {name: next(jobs[name]) for name in ("A", "B")}  # n64 fold 0 for A, fold 1 for B
    done, errors = {"A": [], "B": []}, []

    def work(name: str, run) -> None:
        try:
            for job in itertools.chain([firsts[name]], jobs[name]):
                done[name].append(run(job))
                if job.kind == "cell":
                    both_saved.wait()  # the two last cells are saved at once
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            jobs[name].close()  # a failed job is queued again, and the other worker is not left waiting on it

    threads = [threading.Thread(target=work, args=("A", a_run)), threading.Thread(target=work, args=("B", b.run))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert done["A"][:2] == ["n64/0", "score n64"] and done["B"][:1] == ["n64/1"]
    # B's copy of the scoring is popped by whichever worker asks first (A too, once it has scored:
    # seen once in CI): pruned, or without the guard scored a second time, once
    assert done["A"][2:] + done["B"][1:] == ([] if prune else ["score n64"])
    (config,) = a.ledger.trials()
    assert config.state == TrialState.COMPLETE and config.value == 1.0 and config.user_attrs["key"] == "n64"
    scorings = [t.state for t in a.ledger.trials(study=a.ledger.cells) if t.user_attrs["cell"] == "score/n64"]
    assert scorings == [TrialState.COMPLETE, TrialState.PRUNED if prune else TrialState.COMPLETE]


def wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_cell_whose_worker_dies_is_retried_once_its_heartbeat_is_stale(tmp_path, monkeypatch, caplog):
    """A worker pops a cell and is killed: a waiting worker retries the cell once optuna's
    heartbeat says it is stale (interval 1 s, grace 5 s here), with its parameters."""
    caplog.set_level(logging.INFO, logger="tsflash.sweep.ledger")
    monkeypatch.setenv("TSFLASH_HEARTBEAT_S", "1")
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    run = FakeRun(tmp_path, lengths=(64,), folds=1, baselines=False, precision=False)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from optuna.storages._heartbeat import get_heartbeat_thread
        from tsflash.sweep.ledger import Ledger, plan_slots
        ledger = Ledger.open("s", {url!r}, plan_slots([64], 1, 1e-3, 0.1), shared=True)
        cell = ledger.pop_cell(lambda t: t.number)
        with get_heartbeat_thread(cell._trial_id, ledger.storage):
            print(cell.user_attrs["cell"], flush=True)
            time.sleep(600)
    """)], env={**PYTHON_ENV, "TSFLASH_HEARTBEAT_S": "1"}, stdout=subprocess.PIPE, text=True)
    queue = run.queue(poll_s=0.2)
    queue._queue_open_configs = lambda: None  # the other worker opened the configuration
    trial = run.ledger.pop()
    run.params_of(trial)
    run.ledger.enqueue_cell("n64/fold0-seed0", {"n": 64, "fold": 0, "seed": 0}, key="n64", config=trial.number)
    assert holder.stdout.readline().strip() == "n64/fold0-seed0"
    holder.kill()
    holder.wait()
    t0 = time.monotonic()
    job = queue.next_job()
    assert job.kind == "cell" and job.key == "n64" and job.fold == 0 and time.monotonic() - t0 > 3
    assert "cell n64/fold0-seed0 (trial 0) lost its worker" in caplog.text
    assert [t.state for t in run.ledger.cells.trials] == [TrialState.FAIL, TrialState.RUNNING]


# ---- a sweep on two workers ------------------------------------------------------------------------


@pytest.mark.slow  # two tiny sweeps in subprocesses (about a minute on 2 shared cores)
def test_two_cpu_workers_equal_one_bit_for_bit(one_worker_run, tmp_path):
    run = tmp_path / "two"
    proc = tiny_sweep(run, "--devices", "cpu,cpu")
    assert "report: " in proc.stdout
    assert cell_records(run) == cell_records(one_worker_run)  # every cell's arrays and summary
    assert report_numbers(run) == report_numbers(one_worker_run)  # the report's numbers
    log = (run / "sweep.log").read_text()
    done = completions(log)
    assert len(done) == N_CELLS and done == completions((one_worker_run / "sweep.log").read_text())
    assert set(done.values()) == {1}  # each cell finished once
    assert {m.group(1) for m in re.finditer(r" \[(cpu#\d)\] ", log)} == {"cpu#0", "cpu#1"}  # both worked
    meta = json.loads((run / "run.json").read_text())
    assert meta["devices"] == ["cpu", "cpu"] and meta["status"] == "complete"
    choices = meta["kernel_choices"]
    assert {c["chosen"] for c in choices.values()} == {"flash"}
    assert any(c["timing"]["shape"] == {"batch": 8, "heads": 2, "n": 128} for c in choices.values())  # the real shape
    assert not (run / CLAIMS_DIR).exists() and not (run / "checkpoints").exists()
    assert socket.gethostname() in next(iter(choices))
    cell = json.loads((run / "cells" / "n128" / "fold0-seed0.cell.json").read_text())
    assert cell["cost"]["backend_observed"] == "flash CPU"  # the first step saw only the chosen kernel
    assert np.isfinite(json.loads((run / "results.json").read_text())["selection"]["pbo"]["pbo"])
