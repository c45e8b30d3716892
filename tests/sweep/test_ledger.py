"""tsflash.sweep.ledger on real optuna studies (in memory, or SQLite in tmp_path): slots enqueued once,
trials popped largest N first and exactly once, failed trials re-enqueued with their parameters,
per-trial sampling, the cells of a dead invocation queued again, and the --storage check."""

from __future__ import annotations

import json
import socket

import optuna
import pytest
from optuna.trial import TrialState

from tsflash.errors import UserError
from tsflash.sweep.ledger import Ledger, check_storage, plan_slots, storage_url, suggest_params
from tsflash.sweep.provenance import worker_id

LENGTHS = [32, 64]
LR, WD = 1e-3, 0.1


def states(ledger: Ledger) -> list[str]:
    return [t.state.name for t in ledger.trials()]


def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def run_all(ledger: Ledger, search: bool = False, lengths=LENGTHS) -> list[dict]:
    """What the workers do with the ledger, in one process: pop, draw the parameters, tell."""
    calls = []
    while (trial := ledger.pop()) is not None:
        params = suggest_params(trial, lengths, LR, WD, search)
        calls.append(params)
        ledger.complete(trial, float(params["n"]))
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
    for t in popped[:3]:
        a.complete(t, 1.0)
    # a second scorer (another worker) completes it again: its writes are refused, nothing changes
    b.complete(b.trial(a.trials()[2]), 1.0, record=lambda trial: trial.set_user_attr("daily_returns_path", "late"))
    assert "daily_returns_path" not in a.trials()[2].user_attrs
    with pytest.raises(RuntimeError, match=r"configuration trial 2 is COMPLETE with value 1.0, but this worker scored "
                                           r"it 2.0"):
        a.complete(popped[0], 2.0)  # a late scorer that disagrees is an error, not a second value
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


def test_failed_trial_is_reenqueued_with_its_parameters(tmp_path):
    ledger = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 2, LR, WD))
    ledger.sync()
    first = ledger.pop()
    suggest_params(first, [32], LR, WD, search=True)
    ledger.complete(first, 1.0)
    second = ledger.pop()  # n32/1, whose values the sampler draws ...
    sampled = suggest_params(second, [32], LR, WD, search=True)
    ledger.study.tell(second, state=TrialState.FAIL)  # ... then it failed (a run folder of before cells)
    again = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 2, LR, WD))  # the same command, run again
    again.sync()
    again.sync()
    assert states(again) == ["COMPLETE", "FAIL", "WAITING"]  # the slot comes back, once
    assert run_all(again, search=True, lengths=[32]) == [sampled] and again.is_complete()  # same values: cells reused


def test_a_running_trial_of_a_dead_worker_stays_open(tmp_path):
    """Configurations are not owned: the cells of a dead worker's configuration are retried
    (tsflash.sweep.workers), the configuration stays RUNNING with its parameters for any worker to finish."""
    slots = plan_slots([32], 1, LR, WD)
    ledger = Ledger.open("s", sqlite(tmp_path), slots)
    ledger.sync()
    trial = ledger.pop()
    suggest_params(trial, [32], LR, WD, False)
    again = Ledger.open("s", sqlite(tmp_path), slots)
    again.sync()
    assert states(again) == ["RUNNING"] and again.pop() is None
    (open_trial,) = again.running()
    handle = again.trial(open_trial)
    assert suggest_params(handle, [32], LR, WD, False) == {"n": 32}
    again.complete(handle, 0.5)
    assert again.is_complete()


@pytest.mark.parametrize("shared", [False, True])
def test_the_running_cells_of_a_dead_invocation(tmp_path, shared):
    """A private study (the run folder's SQLite file) has one invocation at a time: its RUNNING cells
    were a dead invocation's and are queued again at once, with their parameters. A shared study's
    are left to optuna's heartbeat (tests/sweep/test_workers.py)."""
    ledger = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 1, LR, WD), shared=shared)
    ledger.enqueue_cell("n32/fold0-seed0", {"n": 32, "fold": 0, "seed": 0}, key="n32")
    cell = ledger.pop_cell(lambda t: t.number)
    assert cell.suggest_int("fold", 0, 0) == 0
    again = Ledger.open("s", sqlite(tmp_path), plan_slots([32], 1, LR, WD), shared=shared)
    again.sync()
    cells = again.cells.trials
    if shared:
        assert [t.state for t in cells] == [TrialState.RUNNING]
    else:
        assert [t.state for t in cells] == [TrialState.FAIL, TrialState.WAITING]
        assert cells[1].user_attrs == cells[0].user_attrs and cells[1].params == {"fold": 0}
        assert again.pop_cell(lambda t: t.number).number == 1


def test_worker_id_names_host_pid_and_start():
    host, pid, start = worker_id().split(":")
    assert host == socket.gethostname() and int(pid) > 0 and start.isdigit()


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
