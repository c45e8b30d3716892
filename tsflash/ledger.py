"""The trial ledger: an optuna study with one trial per planned configuration, shared by workers.

Slots. The plan is a list of SLOTS, e.g. "n512/0": per context length N the default
configuration, then (with --trials K > 1) K - 1 slots whose lr and weight decay the sampler fills
in. Each slot is enqueued once (`study.enqueue_trial`, its id in the trial's user attrs); a
worker runs `study.optimize(objective)`, and optuna hands it the oldest WAITING trial.

Liveness. A RUNNING trial whose worker is gone is ABANDONED: it is failed and its slot enqueued
again with the same parameters (so that the cells it saved are reused). A worker is named
host:pid:process-start; on this host it is gone when that process is; on another host it is gone
when the study is the run folder's private SQLite file (one worker at a time, e.g. a GPU machine
that was taken back), or, with a shared --storage, when its heartbeat (a user attr refreshed
after each cell) is older than STALE_AFTER_S. A trial that FAILED (an exception, Ctrl-C inside
`study.optimize`) has its slot enqueued again the same way by the next `Ledger.sync`.

Why not optuna's own heartbeat (RDBStorage(heartbeat_interval, grace_period) with
`fail_stale_trials`): it declares a worker dead only after its grace period, while a kill -9 on
this host followed by the same command must take the trial back at once; and the in-memory
storage has no heartbeat at all.

    ledger = Ledger.open("tsflash-abc", "sqlite:///run/optuna.db", plan_slots([512, 4096], 1, 1e-3, 0.1))
    ledger.sync()                                   # fail abandoned trials, enqueue missing slots
    ledger.optimize(objective, timeout=600)         # objective(trial) calls ledger.claim(trial) first
    ledger.is_complete()                            # every planned slot has a COMPLETE trial
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from tsflash.runfolder import write_json

log = logging.getLogger(__name__)

# With a shared --storage, a RUNNING trial of another host whose heartbeat (after each cell) is
# older than this is taken as abandoned and re-enqueued. Generous: a full-size cell on a CPU is slow.
STALE_AFTER_S = 3 * 3600.0
# Searched with --trials K > 1, within each N (N itself is always enqueued, never sampled).
SEARCH_SPACE_DOC = "lr (log-uniform, lr/10 .. 3 lr) and weight_decay (uniform, 0 .. max(0.3, wd))"
_LIVE = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)


@dataclass(frozen=True)
class Slot:
    """One planned trial: `id` "n512/0" (N, index within N) and the parameters enqueued for it."""

    id: str
    params: dict


def plan_slots(lengths: Iterable[int], trials: int, lr: float, weight_decay: float) -> list[Slot]:
    """Every planned trial: per N the default configuration, then trials - 1 slots whose searched
    values the sampler fills in."""
    slots = []
    for n in lengths:
        base = {"n": n} | ({"lr": lr, "weight_decay": weight_decay} if trials > 1 else {})
        slots.append(Slot(f"n{n}/0", base))
        slots += [Slot(f"n{n}/{j}", {"n": n}) for j in range(1, trials)]
    return slots


def suggest_params(trial: Trial, lengths: list[int], lr: float, weight_decay: float, search: bool) -> dict:
    """The trial's configuration, declared inline (enqueued values are returned as enqueued)."""
    params = {"n": trial.suggest_categorical("n", lengths)}
    if search:
        params["lr"] = trial.suggest_float("lr", lr / 10, lr * 3, log=True)
        params["weight_decay"] = trial.suggest_float("weight_decay", 0.0, max(0.3, weight_decay))
    return params


class NotEnqueued(Exception):
    """optuna created a fresh trial: another worker took the last enqueued one."""


# ---------------------------------------------------------------------------------------------
# Workers


def _proc_start(pid: int) -> str:
    """The process start time (clock ticks since boot) so that a reused pid is not mistaken."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def worker_id(pid: int | None = None) -> str:
    """host:pid:process-start of this process (or of `pid` on this host)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid)}"


def worker_alive(worker: str | None) -> bool | None:
    """True/False for a worker of this host, None when it ran elsewhere (cannot tell)."""
    if not worker:
        return False
    host, pid, start = (worker.split(":") + ["", "", ""])[:3]
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return _proc_start(int(pid)) == start


def is_abandoned(trial: FrozenTrial, *, shared: bool, now: float) -> bool:
    """Is RUNNING `trial` abandoned? Its worker is dead on this host (or never named itself); or
    it ran on another host and the study is private to the run folder; or, with a shared storage,
    its heartbeat is older than STALE_AFTER_S."""
    alive = worker_alive(trial.user_attrs.get("worker"))
    if alive is not None:
        return not alive
    if not shared:
        return True
    return now - float(trial.user_attrs.get("heartbeat", 0.0)) > STALE_AFTER_S


# ---------------------------------------------------------------------------------------------
# The ledger


class Ledger:
    """The planned slots of one optuna study and the bookkeeping around them."""

    def __init__(self, study: optuna.Study, slots: list[Slot], *, shared: bool):
        self.study = study
        self.slots = slots
        self.shared = shared

    @classmethod
    def open(cls, study_name: str, storage: str | optuna.storages.BaseStorage | None, slots: list[Slot], *,
             shared: bool = False, seed: int = 0) -> Ledger:
        """Create the study or load it (`load_if_exists`: later workers join the first one's study)."""
        # optuna's warning on a failed trial repeats, with a traceback, the exception that reaches
        # the command line anyway (a UserError as one line there).
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        n_lengths = len({s.params["n"] for s in slots})
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_lengths)
        study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize", sampler=sampler,
                                    load_if_exists=True)
        return cls(study, slots, shared=shared)

    def trials(self, *states: TrialState) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def sync(self, now: float | None = None) -> list[int]:
        """Fail abandoned RUNNING trials, then enqueue every planned slot that has no WAITING,
        RUNNING or COMPLETE trial: with the parameters of its newest failed trial when it has one
        (so that its saved cells are reused), else as planned. Returns the failed trial numbers."""
        now = time.time() if now is None else now
        failed = []
        for t in self.trials(TrialState.RUNNING):
            if is_abandoned(t, shared=self.shared, now=now):
                log.info("trial %d (%s) was left running by a dead worker %s: failing and re-enqueuing it",
                         t.number, t.user_attrs.get("key", "?"), t.user_attrs.get("worker", "(unknown)"))
                self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
                failed.append(t.number)
        present = {t.user_attrs.get("slot") for t in self.trials(*_LIVE)}
        last_failed = {t.user_attrs.get("slot"): t for t in self.trials(TrialState.FAIL) if t.params}  # newest wins
        for slot in self.slots:
            if slot.id not in present:
                params = dict(last_failed[slot.id].params) if slot.id in last_failed else slot.params
                self.study.enqueue_trial(params, user_attrs={"slot": slot.id})
        return failed

    def n_waiting(self) -> int:
        return len(self.trials(TrialState.WAITING))

    def claim(self, trial: Trial) -> str:
        """Mark `trial` as this worker's; returns its slot. Raises NotEnqueued for a trial optuna
        made up because the queue was empty (another worker took the last enqueued one)."""
        slot = trial.user_attrs.get("slot")
        if slot is None:
            raise NotEnqueued(f"trial {trial.number} was not enqueued: the queue is empty")
        trial.set_user_attr("worker", worker_id())
        self.heartbeat(trial)
        return slot

    @staticmethod
    def heartbeat(trial: Trial) -> None:
        trial.set_user_attr("heartbeat", time.time())

    def stop_when_empty(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Callback: stop after the trial that leaves no WAITING trial.

        Why a callback and not `n_trials`: with a shared study other workers take trials from the
        same queue, so how many this worker will run is unknown when it starts.
        """
        if self.n_waiting() == 0:
            study.stop()

    def optimize(self, objective: Callable[[Trial], float], timeout: float | None = None,
                 callbacks: Iterable[Callable[[optuna.Study, FrozenTrial], None]] = ()) -> None:
        """Run WAITING trials until none is left, or until `timeout` seconds have passed (checked
        before each trial: a started trial runs to its end). A trial that was not enqueued fails."""
        if self.n_waiting() == 0:
            return  # optuna would make up a fresh trial only to fail it
        self.study.optimize(objective, timeout=timeout, catch=(NotEnqueued,),
                            callbacks=[self.stop_when_empty, *callbacks])

    def is_complete(self) -> bool:
        """Does every planned slot have a COMPLETE trial?"""
        done = {t.user_attrs.get("slot") for t in self.trials(TrialState.COMPLETE)}
        return {s.id for s in self.slots} <= done

    def rows(self) -> list[dict]:
        """Every trial of the study as a plain dict (ledger.json)."""
        return [{
            "number": t.number, "state": t.state.name, "params": t.params, "value": t.value,
            "key": t.user_attrs.get("key"), "slot": t.user_attrs.get("slot"),
            "intermediate": {str(k): v for k, v in t.intermediate_values.items()},
            "daily_returns_path": t.user_attrs.get("daily_returns_path"),
        } for t in self.trials()]

    def write_json(self, path: Path) -> Path:
        rows = self.rows()
        return write_json(path, {"study_name": self.study.study_name, "trials": rows,
                                 "n_complete": sum(r["state"] == "COMPLETE" for r in rows)})
