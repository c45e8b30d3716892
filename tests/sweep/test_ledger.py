"""tsflash.sweep.ledger on real optuna studies (in memory, or SQLite in tmp_path): slots enqueued once,
trials popped largest N first and exactly once, failed trials re-enqueued with their parameters,
per-trial sampling, liveness, and the --storage check."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tsflash.errors import UserError
from tsflash.sweep.ledger import (
    STALE_AFTER_S, Ledger, NotEnqueued, check_storage, holder_gone, plan_slots, storage_url, suggest_params, worker_id,
)

LENGTHS = [32, 64]
LR, WD = 1e-3, 0.1


def states(ledger: Ledger) -> list[str]:
    return [t.state.name for t in ledger.trials()]


def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def dead_worker() -> str:
    """The worker id of a process of this host that has exited."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{socket.gethostname()}:{int(out.stdout)}:1"


def run_all(ledger: Ledger, search: bool = False, lengths=LENGTHS) -> list[dict]:
    """What the workers do with the ledger, in one process: pop, draw the parameters, tell."""
    calls = []
    while (trial := ledger.pop()) is not None:
        params = suggest_params(trial, lengths, LR, WD, search)
        calls.append(params)
        ledger.tell(trial, float(params["n"]))
    return calls


def test_slots_are_enqueued_once_even_by_several_workers(tmp_path):
    slots = plan_slots(LENGTHS, 2, LR, WD)
    first = Ledger.open("s", sqlite(tmp_path), slots, shared=True)
    first.sync()
    first.sync()
    second = Ledger.open("s", sqlite(tmp_path), slots, shared=True)  # a later worker joins the study
    second.sync()
    waiting = second.trials(TrialState.WAITING)
    assert [t.user_attrs["slot"] for t in waiting] == ["n32/0", "n32/1", "n64/0", "n64/1"]
    calls = run_all(second, search=True)
    assert [c["n"] for c in calls] == [64, 64, 32, 32] and second.is_complete()  # the largest N first
    assert calls[2] == {"n": 32, "lr": LR, "weight_decay": WD}  # the default configuration
    assert calls[3]["lr"] != LR and 0 <= calls[3]["weight_decay"] <= 0.3  # the sampler's values


def test_pop_takes_each_trial_once_across_ledgers_then_none(tmp_path):
    slots = plan_slots([32, 64, 128], 1, LR, WD)
    a = Ledger.open("s", sqlite(tmp_path), slots)
    a.sync()
    b = Ledger.open("s", sqlite(tmp_path), slots)  # a second worker on the same study
    popped = [a.pop(), b.pop(), b.pop(), a.pop(), b.pop()]
    assert [t.params if t is None else suggest_params(t, [32, 64, 128], LR, WD, False)["n"] for t in popped[:3]] \
        == [128, 64, 32]
    assert popped[3:] == [None, None]  # the queue is empty: nothing is made up
    assert states(a) == ["RUNNING", "RUNNING", "RUNNING"] and len(a.running()) == 3
    assert {t.user_attrs["worker"] for t in a.running()} == {worker_id()}
    for t in popped[:3]:
        a.tell(t, 1.0)
    a.tell(popped[0], 2.0)  # told twice (two scorers): the first value stays
    assert a.is_complete() and a.trials(TrialState.COMPLETE)[2].value == 1.0
    a.write_json(tmp_path / "ledger.json")
    saved = json.loads((tmp_path / "ledger.json").read_text())
    assert saved["n_complete"] == 3 and [r["slot"] for r in saved["trials"]] == ["n32/0", "n64/0", "n128/0"]


def test_sampled_values_depend_on_the_trial_not_on_the_worker(tmp_path):
    """Two workers popping at once used to draw the same values (one TPE seed per process)."""
    slots = plan_slots([32], 3, LR, WD)
    a = Ledger.open("s", sqlite(tmp_path), slots, seed=7)
    a.sync()
    b = Ledger.open("s", sqlite(tmp_path), slots, seed=7)
    first = a.pop()
    suggest_params(first, [32], LR, WD, search=True)  # the default slot n32/0
    one, two = a.pop(), b.pop()  # n32/1 and n32/2, each by a freshly opened worker
    drawn = [suggest_params(t, [32], LR, WD, search=True) for t in (one, two)]
    assert drawn[0] != drawn[1]
    # the same study again: the same trial numbers draw the same values
    again = Ledger.open("t", f"sqlite:///{tmp_path / 'again.db'}", slots, seed=7)
    again.sync()
    suggest_params(again.pop(), [32], LR, WD, search=True)
    assert [suggest_params(again.pop(), [32], LR, WD, search=True) for _ in range(2)] == drawn


def test_a_made_up_trial_is_failed_and_cannot_be_claimed(tmp_path):
    ledger = Ledger.open("s", sqlite(tmp_path), plan_slots(LENGTHS, 1, LR, WD))
    ledger.sync()
    run_all(ledger)
    made_up = ledger.study.ask()  # what optuna does when a worker asks an empty queue
    with pytest.raises(NotEnqueued, match="was not enqueued"):
        ledger.claim(made_up)
    assert ledger.running() == []  # not an open trial: it has no slot
    assert ledger.sync() == [made_up.number] and states(ledger) == ["COMPLETE", "COMPLETE", "FAIL"]
    assert ledger.is_complete() and ledger.n_waiting() == 0


def test_failed_trial_is_reenqueued_with_its_parameters(tmp_path):
    ledger = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 2, LR, WD))
    ledger.sync()
    first = ledger.pop()
    suggest_params(first, [32], LR, WD, search=True)
    ledger.tell(first, 1.0)
    second = ledger.pop()  # n32/1, whose values the sampler draws ...
    sampled = suggest_params(second, [32], LR, WD, search=True)
    ledger.study.tell(second, state=TrialState.FAIL)  # ... then it failed (a run folder of before cells)
    again = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 2, LR, WD))  # the same command, run again
    assert again.sync() == []
    again.sync()
    assert states(again) == ["COMPLETE", "FAIL", "WAITING"]  # the slot comes back, once
    assert run_all(again, search=True, lengths=[32]) == [sampled] and again.is_complete()  # same values: cells reused


def test_a_running_trial_of_a_dead_worker_stays_open(tmp_path):
    """Trials are not owned: the cells of a dead worker's trial are taken over (tsflash.sweep.workers),
    the trial itself stays RUNNING with its parameters for any worker to finish."""
    slots = plan_slots([32], 1, LR, WD)
    ledger = Ledger.open("s", sqlite(tmp_path), slots)
    ledger.sync()
    trial = ledger.pop()
    suggest_params(trial, [32], LR, WD, False)
    trial.set_user_attr("worker", dead_worker())
    again = Ledger.open("s", sqlite(tmp_path), slots)
    assert again.sync() == [] and states(again) == ["RUNNING"] and again.pop() is None
    (open_trial,) = again.running()
    handle = again.trial(open_trial)
    assert suggest_params(handle, [32], LR, WD, False) == {"n": 32}
    again.tell(handle, 0.5)
    assert again.is_complete()


@pytest.mark.parametrize("shared, age, gone", [
    (False, 0.0, True),  # the private SQLite study has one host at a time: the other host is gone
    (True, 60.0, False),  # a shared study: another host with a recent heartbeat is alive
    (True, 601.0, True),  # ... and one silent for longer than the limit is not
])
def test_holders_on_other_hosts(shared, age, gone):
    now = 1_000_000.0
    assert holder_gone("other-host:123:456", now - age, shared=shared, now=now, stale_after_s=600.0) is gone


def test_holders_on_this_host_live_and_die_with_their_process():
    now = 1_000_000.0
    assert not holder_gone(worker_id(), 0.0, shared=True, now=now, stale_after_s=1.0)  # this process: alive
    assert holder_gone(dead_worker(), now, shared=True, now=now, stale_after_s=1e9)  # its process is gone
    assert holder_gone(None, now, shared=True, now=now, stale_after_s=1e9)  # killed before it named itself
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # not reaped yet: a zombie until wait()
    zombie = worker_id(ended.pid)
    while Path(f"/proc/{ended.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    assert holder_gone(zombie, now, shared=True, now=now, stale_after_s=1e9)  # a killed worker not yet reaped
    ended.wait()
    assert STALE_AFTER_S == 3 * 3600.0  # is_abandoned's limit for trials of older run folders


def test_in_memory_storage_object():
    ledger = Ledger.open("s", optuna.storages.InMemoryStorage(), plan_slots(LENGTHS, 1, LR, WD))
    ledger.sync()
    assert run_all(ledger) == [{"n": 64}, {"n": 32}]
    assert sorted(t.value for t in ledger.trials(TrialState.COMPLETE)) == [32.0, 64.0]


# ---- --storage -----------------------------------------------------------------------------------


def test_storage_url_names_an_installed_driver():
    pytest.importorskip("psycopg2")
    assert storage_url("postgresql://u:p@db.example/tsflash") == "postgresql+psycopg2://u:p@db.example/tsflash"
    assert storage_url("postgres://u@h/db") == "postgresql+psycopg2://u@h/db"
    assert storage_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"  # a driver named is kept
    assert storage_url("sqlite:///run/optuna.db") == "sqlite:///run/optuna.db"


def test_an_unreachable_server_is_one_line_naming_host_and_port():
    pytest.importorskip("psycopg2")
    with pytest.raises(UserError) as exc:
        check_storage("postgresql://ann:s3cret@127.0.0.1:9/tsflash")  # nothing listens on port 9
    message = str(exc.value)
    assert message.startswith("--storage: cannot reach the postgresql server at 127.0.0.1:9 for database 'tsflash': ")
    assert "\n" not in message and "s3cret" not in message
    with pytest.raises(UserError, match=r"^--storage: not a database URL such as postgresql://user:pass@host/db \("):
        check_storage("postgresql://:::")
