"""tsflash.ledger on real optuna studies (in memory, or SQLite in tmp_path): slots enqueued once,
abandoned and failed trials re-enqueued with their parameters, the empty queue, the time budget."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tsflash.ledger import STALE_AFTER_S, Ledger, NotEnqueued, plan_slots, suggest_params, worker_id

LENGTHS = [32, 64]
LR, WD = 1e-3, 0.1


def states(ledger: Ledger) -> list[str]:
    return [t.state.name for t in ledger.trials()]


def objective_of(ledger: Ledger, search: bool = False, calls: list | None = None, lengths=LENGTHS):
    """What the sweep's objective does with the ledger: claim, declare the parameters, return a value."""

    def objective(trial) -> float:
        ledger.claim(trial)
        params = suggest_params(trial, lengths, LR, WD, search)
        if calls is not None:
            calls.append(params)
        return float(params["n"])

    return objective


def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def dead_worker() -> str:
    """The worker id of a process of this host that has exited."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{socket.gethostname()}:{int(out.stdout)}:1"


def test_slots_are_enqueued_once_even_by_several_workers(tmp_path):
    slots = plan_slots(LENGTHS, 2, LR, WD)
    first = Ledger.open("s", sqlite(tmp_path), slots, shared=True)
    first.sync()
    first.sync()
    second = Ledger.open("s", sqlite(tmp_path), slots, shared=True)  # a later worker joins the study
    second.sync()
    waiting = second.trials(TrialState.WAITING)
    assert [t.user_attrs["slot"] for t in waiting] == ["n32/0", "n32/1", "n64/0", "n64/1"]
    calls: list = []
    second.optimize(objective_of(second, search=True, calls=calls))
    assert [c["n"] for c in calls] == [32, 32, 64, 64] and second.is_complete()
    assert calls[0] == calls[2] | {"n": 32} == {"n": 32, "lr": LR, "weight_decay": WD}  # the default configuration
    assert calls[1]["lr"] != LR and 0 <= calls[1]["weight_decay"] <= 0.3  # the sampler's values


def test_optimize_runs_every_slot_then_stops(tmp_path):
    ledger = Ledger.open("s", None, plan_slots(LENGTHS, 1, LR, WD))
    ledger.sync()
    calls: list = []
    ledger.optimize(objective_of(ledger, calls=calls))
    assert calls == [{"n": 32}, {"n": 64}]  # in slot order, no trial made up after the queue emptied
    assert states(ledger) == ["COMPLETE", "COMPLETE"] and ledger.is_complete() and ledger.n_waiting() == 0
    ledger.sync()
    ledger.optimize(objective_of(ledger, calls=calls))  # a rerun of a finished study does nothing
    assert len(calls) == 2 and len(ledger.trials()) == 2
    assert {t.user_attrs["worker"] for t in ledger.trials()} == {worker_id()}
    ledger.write_json(tmp_path / "ledger.json")
    saved = json.loads((tmp_path / "ledger.json").read_text())
    assert saved["n_complete"] == 2 and [r["slot"] for r in saved["trials"]] == ["n32/0", "n64/0"]


def test_a_trial_that_was_not_enqueued_fails_and_the_worker_stops(tmp_path):
    slots = plan_slots(LENGTHS, 1, LR, WD)
    mine = Ledger.open("s", sqlite(tmp_path), slots, shared=True)
    mine.sync()
    other = Ledger.open("s", sqlite(tmp_path), slots, shared=True)
    taken = []

    def other_worker_takes_the_last_slot(study, trial):  # runs after the ledger's own "queue empty?" check
        if not taken:
            taken.append(other.study.ask())

    calls: list = []
    mine.optimize(objective_of(mine, calls=calls), callbacks=[other_worker_takes_the_last_slot])
    assert calls == [{"n": 32}]
    assert states(mine) == ["COMPLETE", "RUNNING", "FAIL"]  # the made-up trial failed, then the worker stopped
    assert "slot" not in mine.trials()[2].user_attrs
    with pytest.raises(NotEnqueued, match="was not enqueued"):
        mine.claim(mine.study.ask())


def test_time_budget_starts_no_new_trial():
    ledger = Ledger.open("s", None, plan_slots(LENGTHS, 1, LR, WD))
    ledger.sync()
    ledger.optimize(objective_of(ledger), timeout=0.0)
    assert states(ledger) == ["WAITING", "WAITING"]

    def slow(trial) -> float:
        time.sleep(0.2)  # longer than the budget: the started trial still finishes
        return objective_of(ledger)(trial)

    ledger.optimize(slow, timeout=0.1)
    assert states(ledger) == ["COMPLETE", "WAITING"] and not ledger.is_complete()


def test_abandoned_trial_is_failed_and_reenqueued_with_its_sampled_parameters(tmp_path):
    slots = plan_slots([32], 2, LR, WD)
    ledger = Ledger.open("s", sqlite(tmp_path), slots)
    ledger.sync()
    first = ledger.study.ask()  # slot n32/0 ...
    ledger.claim(first)
    suggest_params(first, [32], LR, WD, search=True)
    ledger.study.tell(first, 1.0)
    second = ledger.study.ask()  # ... and n32/1, whose lr and weight decay the sampler draws
    ledger.claim(second)
    sampled = suggest_params(second, [32], LR, WD, search=True)
    second.set_user_attr("worker", dead_worker())  # its process was killed

    again = Ledger.open("s", sqlite(tmp_path), slots)  # the same command, run again
    assert again.sync() == [second.number]
    assert states(again) == ["COMPLETE", "FAIL", "WAITING"]
    assert again.trials(TrialState.WAITING)[0].user_attrs["slot"] == "n32/1"
    calls: list = []
    again.optimize(objective_of(again, search=True, calls=calls, lengths=[32]))
    assert calls == [sampled] and again.is_complete()  # same values, so the cells it saved are reused


def test_failed_trial_is_reenqueued_with_its_parameters():
    ledger = Ledger.open("s", None, plan_slots([32], 2, LR, WD))
    ledger.sync()
    seen = []

    def interrupted(trial) -> float:
        ledger.claim(trial)
        seen.append(suggest_params(trial, [32], LR, WD, search=True))
        if len(seen) == 2:
            raise KeyboardInterrupt  # Ctrl-C inside study.optimize: optuna marks the trial FAIL
        return 1.0

    with pytest.raises(KeyboardInterrupt):
        ledger.optimize(interrupted)
    assert states(ledger) == ["COMPLETE", "FAIL"]
    assert ledger.sync() == []  # nothing RUNNING to fail ...
    ledger.sync()
    assert len(ledger.trials(TrialState.WAITING)) == 1  # ... the slot comes back, once
    calls: list = []
    ledger.optimize(objective_of(ledger, search=True, calls=calls, lengths=[32]))
    assert calls == [seen[1]] and ledger.is_complete()


@pytest.mark.parametrize("shared, age, abandoned", [
    (False, 0.0, True),  # the private SQLite study has one worker at a time: the other host is gone
    (True, 60.0, False),  # a shared study: another host with a recent heartbeat is alive
    (True, STALE_AFTER_S + 1, True),  # ... and one silent for longer than STALE_AFTER_S is not
])
def test_trials_of_other_hosts(shared, age, abandoned):
    now = 1_000_000.0
    ledger = Ledger.open("s", None, plan_slots([32], 1, LR, WD), shared=shared)
    ledger.sync()
    trial = ledger.study.ask()
    suggest_params(trial, [32], LR, WD, search=False)
    trial.set_user_attr("worker", "other-host:123:456")
    trial.set_user_attr("heartbeat", now - age)
    assert ledger.sync(now=now) == ([trial.number] if abandoned else [])
    assert states(ledger) == (["FAIL", "WAITING"] if abandoned else ["RUNNING"])


def test_in_memory_storage_object(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    ledger = Ledger.open("s", storage, plan_slots(LENGTHS, 1, LR, WD))
    ledger.sync()
    ledger.optimize(objective_of(ledger))
    assert sorted(t.value for t in ledger.trials(TrialState.COMPLETE)) == [32.0, 64.0]
