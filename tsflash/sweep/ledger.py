"""The trial ledger: an optuna study with one trial per planned configuration, shared by workers.

Slots. The plan is a list of SLOTS, e.g. "n512/0": per context length N the default
configuration, then (with --trials K > 1) K - 1 slots whose lr and weight decay the sampler fills
in. Each slot is enqueued once (`study.enqueue_trial`, its id in the trial's user attrs).

Trials and cells. A trial is one configuration over every fold and seed; its CELLS (fold, seed)
are the unit of parallel work (tsflash.sweep.workers). A worker that finds no cell to claim POPS the
next trial (`Ledger.pop`: the WAITING trial with the largest N first, so that the big cells start
early and the tail of a run is made of small ones), which makes it RUNNING and fixes its
parameters; from then on any worker may claim its cells. A RUNNING trial is open, not owned:
it is completed (`Ledger.tell`) by the worker that scores it once all its cells are saved. So
a dead worker never leaves a trial behind; what it leaves is a claimed cell, and cells have the
liveness rules (`holder_gone`, applied by tsflash.sweep.workers to cell claims).

Liveness. A worker is named host:pid:process-start; on this host it is gone when that process
is; on another host it is gone when the study is the run folder's private SQLite file (one host
at a time, e.g. a GPU machine that was taken back), or, with a shared --storage, when its
heartbeat is older than the caller's staleness limit. `is_abandoned` applies the rule to a
RUNNING trial (used for trials of run folders made before cells were claimed one by one).

Sampling with several workers. With --trials K > 1 the searched values of a trial are drawn when
it is popped, by a TPE sampler seeded from (seed, trial number): two workers never draw the same
values, and a trial's values depend only on the seed and the trials finished before it.

Storage. `check_storage` resolves and tests a --storage URL before anything is written: a
postgresql URL without a driver gets the installed one (psycopg2, else psycopg), and a server
that cannot be reached is a UserError naming its host and port.

    ledger = Ledger.open("tsflash-abc", "sqlite:///run/optuna.db", plan_slots([512, 4096], 1, 1e-3, 0.1))
    ledger.sync()                                   # enqueue missing slots (once, under the run folder's lock)
    trial = ledger.pop()                            # the next trial, RUNNING; None when none waits
    ledger.tell(trial, value)                       # COMPLETE once its cells are scored
    ledger.is_complete()                            # every planned slot has a COMPLETE trial
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from tsflash.errors import UserError
from tsflash.runfolder import write_json

log = logging.getLogger(__name__)

# `is_abandoned`: with a shared --storage, a RUNNING trial of another host whose heartbeat (after
# each cell) is older than this is taken as abandoned. Generous: a full-size cell on a CPU is slow.
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


def _proc_stat(pid: int) -> tuple[str, str]:
    """(state, start time in clock ticks since boot) of a process of this host, ("?", "?") when
    unknown. The start time tells a reused pid apart; state "Z" is a zombie: a process that has
    ended and whose parent has not reaped it yet (a killed worker whose launcher is waiting on
    another) -- gone, though `kill(pid, 0)` still finds it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return "?", "?"


def worker_id(pid: int | None = None) -> str:
    """host:pid:process-start of this process (or of `pid` on this host)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_proc_stat(pid)[1]}"


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
    state, started = _proc_stat(int(pid))
    return started == start and state != "Z"


def holder_gone(worker: str | None, heartbeat: float, *, shared: bool, now: float, stale_after_s: float) -> bool:
    """Is the worker that holds something gone? Its process is dead on this host (or it never
    named itself); or it ran on another host and the study is private to the run folder; or, with
    a shared storage, its last heartbeat (a time.time()) is older than `stale_after_s`."""
    alive = worker_alive(worker)
    if alive is not None:
        return not alive
    if not shared:
        return True
    return now - heartbeat > stale_after_s


def is_abandoned(trial: FrozenTrial, *, shared: bool, now: float) -> bool:
    """Is RUNNING `trial` abandoned? `holder_gone` for its worker and heartbeat user attrs, with
    STALE_AFTER_S (run folders made before cells were claimed one by one)."""
    return holder_gone(trial.user_attrs.get("worker"), float(trial.user_attrs.get("heartbeat", 0.0)), shared=shared,
                       now=now, stale_after_s=STALE_AFTER_S)


# ---------------------------------------------------------------------------------------------
# The ledger


class Ledger:
    """The planned slots of one optuna study and the bookkeeping around them."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage, slots: list[Slot], *,
                 shared: bool, seed: int = 0):
        self.study, self.storage = study, storage
        self.slots = slots
        self.shared = shared
        self.seed = seed

    @classmethod
    def open(cls, study_name: str, storage: str | optuna.storages.BaseStorage | None, slots: list[Slot], *,
             shared: bool = False, seed: int = 0) -> Ledger:
        """Create the study or load it (`load_if_exists`: later workers join the first one's study)."""
        # optuna's warning on a failed trial repeats, with a traceback, the exception that reaches
        # the command line anyway (a UserError as one line there).
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        storage = optuna.storages.get_storage(storage)  # the object, for the WAITING -> RUNNING transition
        sampler = trial_sampler(seed, 0, slots)
        study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize", sampler=sampler,
                                    load_if_exists=True)
        return cls(study, storage, slots, shared=shared, seed=seed)

    def trials(self, *states: TrialState) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def sync(self) -> list[int]:
        """Fail RUNNING trials that were never enqueued (optuna makes one up when a worker asks an
        empty queue), then enqueue every planned slot that has no WAITING, RUNNING or COMPLETE
        trial: with the parameters of its newest failed trial when it has one (so that its saved
        cells are reused), else as planned. Returns the failed trial numbers. Run it under the
        run folder's lock: two workers syncing at once would enqueue a slot twice."""
        failed = []
        for t in self.trials(TrialState.RUNNING):
            if t.user_attrs.get("slot") is None:
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

    def pop(self) -> Trial | None:
        """The WAITING trial with the largest N (then the oldest), made RUNNING and claimed by this
        worker; None when none waits. Atomic per trial (optuna's WAITING -> RUNNING transition);
        call it under the run folder's lock so that SQLite sees one popper at a time."""
        waiting = self.trials(TrialState.WAITING)
        for t in sorted(waiting, key=lambda t: (-int(_enqueued(t).get("n", 0)), t.number)):
            if self.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                trial = self.trial(t)
                self.claim(trial)
                return trial
        return None

    def running(self) -> list[FrozenTrial]:
        """The open trials: RUNNING and enqueued (a slot)."""
        return [t for t in self.trials(TrialState.RUNNING) if t.user_attrs.get("slot") is not None]

    def trial(self, frozen: FrozenTrial) -> Trial:
        """A live handle on `frozen` (any worker may suggest, report and tell through it), with the
        sampler seeded for its number."""
        self.study.sampler = trial_sampler(self.seed, frozen.number, self.slots)
        return Trial(self.study, frozen._trial_id)

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

    def tell(self, trial: Trial, value: float) -> None:
        """Complete `trial` with `value` (a trial another worker completed meanwhile is left as it is)."""
        self.study.tell(trial, value, skip_if_finished=True)

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


def trial_sampler(seed: int, number: int, slots: list[Slot]) -> optuna.samplers.BaseSampler:
    """TPE seeded from (seed, trial number): workers that draw at once draw different values. Its
    first len(lengths) trials are random (TPE's start-up), the rest model the finished ones."""
    state = int(np.random.SeedSequence([seed, number]).generate_state(1)[0])
    return optuna.samplers.TPESampler(seed=state, n_startup_trials=len({s.params["n"] for s in slots}))


def _enqueued(trial: FrozenTrial) -> dict:
    """The parameters a WAITING trial was enqueued with."""
    return trial.system_attrs.get("fixed_params", {})


# ---------------------------------------------------------------------------------------------
# Storage


def storage_url(url: str) -> str:
    """`url` with an installed driver: "postgresql://" names none, and SQLAlchemy 2.1 defaults to
    psycopg (3), 2.0 to psycopg2; the one installed is named (psycopg2 first, the dev dependency)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        for module, driver in (("psycopg2", "psycopg2"), ("psycopg", "psycopg")):
            if importlib.util.find_spec(module) is not None:
                return f"postgresql+{driver}://{rest}"
    return url


def check_storage(url: str, flag: str = "--storage", timeout_s: int = 10) -> str:
    """Resolve (`storage_url`) and test a shared optuna storage URL before anything is written.
    A server that cannot be reached is a UserError naming its host and port; a missing driver one
    that says what to install. SQLite URLs are returned as they are. No message shows the password."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    url = storage_url(url)
    if url.startswith("sqlite"):
        return url
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise UserError(f"{flag}: not a database URL such as postgresql://user:pass@host/db ({exc})") from None
    backend = parsed.get_backend_name()
    host = parsed.host or parsed.query.get("host") or "localhost"  # a Unix socket's folder comes as ?host=
    where = f"{host}:{parsed.port or _DEFAULT_PORTS.get(backend, '?')}"
    try:
        engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=_timeout_args(backend, timeout_s))
        with engine.connect():
            pass
    except (ModuleNotFoundError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise UserError(f"{flag}: no driver for {parsed.drivername} ({exc}); for PostgreSQL: "
                        "pip install psycopg2-binary") from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise UserError(f"{flag}: cannot reach the {backend} server at {where} for database {parsed.database!r}: "
                        f"{reason}") from None
    engine.dispose()
    return url


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


def _timeout_args(backend: str, seconds: int) -> dict:
    """connect_args that bound the wait for a server that does not answer."""
    return {"connect_timeout": seconds} if backend in _DEFAULT_PORTS else {}
