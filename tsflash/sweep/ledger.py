"""The trial ledger: two optuna studies of one storage, the configurations and their cells.

Configurations. The plan is a list of SLOTS, e.g. "n512/0": per context length N the default
configuration, then (with --trials K > 1) K - 1 slots whose lr and weight decay the sampler fills
in. Each slot is enqueued once (`study.enqueue_trial`, its id in the trial's user attrs) in the
study named by the run ("tsflash-<run key>"). A worker with no cell to run POPS the next
configuration (`Ledger.pop`: the largest N first), which makes it RUNNING and fixes its values;
its cells are then queued, and the configuration is completed with its daily net Sharpe ratio
once all its cells are (`Ledger.complete`: once, as the storage decides). These trials, and only
these, are the DSR's trials: ledger.json lists them (`Ledger.rows`) and the report counts its
COMPLETE rows, one per slot (`tsflash.stats.gate.complete_trials`).

Cells. A cell (N, fold, seed; or "baselines", or "precision") is one trial of the study
"<study>:cells": enqueued with its N, fold and seed as fixed parameters and its configuration's key
as a user attribute, handed to exactly one worker by optuna's WAITING -> RUNNING transition
(`Ledger.pop_cell`). While a worker runs it, optuna's heartbeat thread beats for it; a cell
whose worker stopped beating (killed, its host gone) is failed by the next worker that looks
(`optuna.storages.fail_stale_trials`) and queued again by `Retry` (optuna's
RetryFailedTrialCallback), and resumes from its checkpoint. No file, no lock: the storage decides.

Sampling with several workers. With --trials K > 1 the searched values of a configuration are
drawn when it is popped, by a TPE sampler seeded from (seed, trial number): two workers never draw
the same values, and a trial's values depend only on the seed and the trials finished before it.

Storage. `check_storage` resolves and tests a --storage URL before anything is written: a
postgresql URL without a driver gets the installed one (psycopg2, else psycopg), and a server
that cannot be reached is a UserError naming its host and port.

    ledger = Ledger.open("tsflash-abc", "sqlite:///run/optuna.db", plan_slots([512, 4096], 1, 1e-3, 0.1))
    ledger.sync()                                   # enqueue missing slots
    trial = ledger.pop()                            # the next configuration, RUNNING; None when none waits
    ledger.enqueue_cell("n512/fold0-seed0", {"n": 512, "fold": 0, "seed": 0}, key="n512")
    cell = ledger.pop_cell(order)                   # a cell for this worker; None when none waits
    ledger.complete(trial, value, record)           # COMPLETE once its cells are (once, whoever scores it)
    ledger.is_complete()                            # every planned slot has a COMPLETE trial
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import FrozenTrial, Trial, TrialState

from tsflash.errors import UserError
from tsflash.runfolder import DamagedFile, write_json

log = logging.getLogger(__name__)

# optuna's heartbeat of a RUNNING cell (seconds; TSFLASH_HEARTBEAT_S overrides, e.g. in tests): a cell
# whose worker has been silent for GRACE_FACTOR beats is failed and queued again.
HEARTBEAT_S = 20
GRACE_FACTOR = 5
# Searched with --trials K > 1, within each N (N itself is always enqueued, never sampled).
SEARCH_SPACE_DOC = "lr (log-uniform, lr/10 .. 3 lr) and weight_decay (uniform, 0 .. max(0.3, wd))"
_LIVE = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
_QUEUED = (TrialState.WAITING, TrialState.RUNNING)


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
    params: dict[str, int | float] = {"n": trial.suggest_categorical("n", lengths)}
    if search:
        params["lr"] = trial.suggest_float("lr", lr / 10, lr * 3, log=True)
        params["weight_decay"] = trial.suggest_float("weight_decay", 0.0, max(0.3, weight_decay))
    return params


# ---------------------------------------------------------------------------------------------
# Workers


def heartbeat_storage(url: str) -> optuna.storages.RDBStorage:
    """The study's storage with optuna's heartbeat: a RUNNING cell whose worker has not beaten for
    GRACE_FACTOR beats is failed by the next worker that looks (`optuna.storages.fail_stale_trials`),
    and `Retry` puts it back in the queue with its parameters and user attrs."""
    import sqlalchemy

    interval = int(os.environ.get("TSFLASH_HEARTBEAT_S", HEARTBEAT_S))
    try:
        with _quiet():
            storage = optuna.storages.RDBStorage(
                url,
                heartbeat_interval=interval,
                grace_period=GRACE_FACTOR * interval,
                heartbeat_stale_trial_callback=Retry(max_retry=None),
            )
    except sqlalchemy.exc.DatabaseError as exc:  # a run folder's ledger file that is not a database
        if not url.startswith("sqlite:///"):
            raise
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise DamagedFile(
            f"{url.removeprefix('sqlite:///')} is damaged: not a readable SQLite database ({reason})"
        ) from None
    if storage.engine.dialect.name == "sqlite":
        _serialise_sqlite(storage.engine)
    return storage


def _serialise_sqlite(engine) -> None:
    """Each SQLite transaction takes the database's write lock when it begins (BEGIN IMMEDIATE,
    SQLAlchemy's recipe). optuna hands a WAITING trial over by reading it, then updating it, in
    one transaction; SQLite's default transaction locks only at the update, so two processes could
    both read WAITING and both run the trial (tests/sweep/test_workers.py). PostgreSQL locks the
    row it reads (SELECT ... FOR UPDATE) and needs nothing."""
    import sqlalchemy

    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA busy_timeout = 60000")  # several workers wait their turn

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections made before the listeners close


class Retry(optuna.storages.RetryHeartbeatStaleTrialCallback):
    """optuna's retry, logged: the cell resumes from its checkpoint on whichever worker pops it."""

    def __init__(self, **kwargs):
        with _quiet():
            super().__init__(**kwargs)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        log.info(
            "cell %s (trial %d) lost its worker: queued again, to resume from its checkpoint",
            trial.user_attrs.get("cell"),
            trial.number,
        )
        with _quiet():
            super().__call__(study, trial)


@contextlib.contextmanager
def _quiet():
    """optuna's heartbeat and retry are marked experimental; the warning says nothing to a user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


# ---------------------------------------------------------------------------------------------
# The ledger


class Ledger:
    """The configurations (`study`, one trial per planned slot) and their cells (`cells`, a study
    of the same storage named "<study>:cells", one trial per cell) of one run."""

    def __init__(self, study: optuna.Study, cells: optuna.Study, slots: list[Slot], *, shared: bool, seed: int = 0):
        self.study, self.cells, self.storage = study, cells, study._storage
        self.slots = slots
        self.shared = shared
        self.seed = seed

    @classmethod
    def open(
        cls,
        study_name: str,
        storage: str | optuna.storages.BaseStorage | None,
        slots: list[Slot],
        *,
        shared: bool = False,
        seed: int = 0,
    ) -> Ledger:
        """Create both studies or load them (`load_if_exists`: later workers join the first one's)."""
        # optuna's warning on a failed trial repeats, with a traceback, the exception that reaches
        # the command line anyway (a UserError as one line there).
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        storage = heartbeat_storage(storage) if isinstance(storage, str) else optuna.storages.get_storage(storage)
        study, cells = (
            optuna.create_study(
                study_name=name, storage=storage, direction="maximize", sampler=sampler, load_if_exists=True
            )
            for name, sampler in (
                (study_name, trial_sampler(seed, 0, slots)),
                (f"{study_name}:cells", optuna.samplers.RandomSampler(seed)),
            )
        )
        return cls(study, cells, slots, shared=shared, seed=seed)

    def trials(self, *states: TrialState, study: optuna.Study | None = None) -> list[FrozenTrial]:
        return (study or self.study).get_trials(deepcopy=False, states=states or None)

    def sync(self) -> None:
        """Enqueue every planned slot that has no WAITING, RUNNING or COMPLETE trial: with the
        parameters of its newest failed trial when it has one (so that its saved cells are reused),
        else as planned. A private study (no --storage) has no other worker: its RUNNING cells are
        a dead invocation's, queued again at once. Two workers syncing at once may enqueue a slot
        twice: `pop` runs one of the two, `tsflash.stats.gate.complete_trials` counts one."""
        present = {t.user_attrs.get("slot") for t in self.trials(*_LIVE)}
        last_failed = {t.user_attrs.get("slot"): t for t in self.trials(TrialState.FAIL) if t.params}  # newest wins
        for slot in self.slots:
            if slot.id not in present:
                params = dict(last_failed[slot.id].params) if slot.id in last_failed else slot.params
                self.study.enqueue_trial(params, user_attrs={"slot": slot.id})
        if not self.shared:
            for t in self.trials(TrialState.RUNNING, study=self.cells):
                self.fail(t)

    def pop(self) -> Trial | None:
        """The WAITING configuration with the largest N (then the oldest), made RUNNING (optuna's
        WAITING -> RUNNING transition in one transaction, what `study.ask()` does); None when none
        waits. Its values are drawn by the caller; then `open_cells` queues its cells."""
        largest_n_first = lambda t: (-int(t.system_attrs.get("fixed_params", {}).get("n", 0)), t.number)  # noqa: E731
        frozen = _pop(self.storage, self.trials(TrialState.WAITING), largest_n_first)
        return None if frozen is None else self.trial(frozen)

    def running(self) -> list[FrozenTrial]:
        """The open configurations: RUNNING and enqueued (a slot)."""
        return [t for t in self.trials(TrialState.RUNNING) if t.user_attrs.get("slot") is not None]

    def trial(self, frozen: FrozenTrial, study: optuna.Study | None = None) -> Trial:
        """A live handle on `frozen` (any worker may suggest, report and tell through it), with the
        configurations' sampler seeded for its number."""
        if study is None:
            self.study.sampler = trial_sampler(self.seed, frozen.number, self.slots)
        return Trial(study or self.study, frozen._trial_id)

    def complete(self, trial: Trial, value: float, record: Callable[[Trial], None] | None = None) -> None:
        """`record(trial)` (its per-fold values and paths), then `trial` COMPLETE with `value`: once,
        however many workers score the configuration at once (two that saved its last two cells
        together may both queue its scoring, and a scorer killed after this leaves its scoring to
        be retried). The storage decides: it finishes a trial in one transaction that locks the
        trial's row (SELECT ... FOR UPDATE on PostgreSQL, BEGIN IMMEDIATE on SQLite) and refuses a
        trial already finished, so one worker's tell completes it and the others' writes are
        refused. A configuration's value depends only on its saved cells: a late scorer's value
        must equal the stored one, else this raises."""
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            if record is not None:
                record(trial)
            self.study.tell(trial, value, skip_if_finished=True)
        stored = self.storage.get_trial(trial._trial_id)
        if stored.state != TrialState.COMPLETE or stored.value != value:
            raise RuntimeError(
                f"configuration trial {stored.number} is {stored.state.name} with value {stored.value}, "
                f"but this worker scored it {value}: its cells changed under it"
            )

    def is_complete(self) -> bool:
        """Does every planned slot have a COMPLETE trial?"""
        done = {t.user_attrs.get("slot") for t in self.trials(TrialState.COMPLETE)}
        return {s.id for s in self.slots} <= done

    # ---- cells -------------------------------------------------------------------------------

    def enqueue_cell(self, cell: str, params: dict, **attrs) -> None:
        """Queue the cell named `cell` ("n512/fold0-seed1", "baselines", "precision") unless a
        trial of it is WAITING or RUNNING. The caller knows whether it is saved: a COMPLETE cell
        whose files a state archive left behind is queued again."""
        if not any(t.user_attrs.get("cell") == cell for t in self.trials(*_QUEUED, study=self.cells)):
            self.cells.enqueue_trial(params, user_attrs={"cell": cell, **attrs})

    def pop_cell(self, order) -> Trial | None:
        """The WAITING cell first in `order` (a sort key of FrozenTrial, None to leave it), RUNNING
        and heart-beaten from now on by the caller. A cell queued twice (two workers queueing it at
        once) runs once: the copy with the higher number is PRUNED while the other is queued."""
        with _quiet():
            optuna.storages.fail_stale_trials(self.cells)
        while True:
            waiting = [t for t in self.trials(TrialState.WAITING, study=self.cells) if order(t) is not None]
            if (frozen := _pop(self.storage, waiting, order, beat=True)) is None:
                return None
            if not self._duplicate(frozen):
                return self.trial(frozen, self.cells)
            self.cells.tell(frozen.number, state=TrialState.PRUNED, skip_if_finished=True)

    def _duplicate(self, cell: FrozenTrial) -> bool:
        name = cell.user_attrs.get("cell")
        return any(
            t.user_attrs.get("cell") == name and t.number < cell.number for t in self.trials(*_QUEUED, study=self.cells)
        )

    def fail(self, cell: FrozenTrial) -> None:
        """Fail a cell that did not finish and queue it again (`Retry`)."""
        if self.storage.set_trial_state_values(cell._trial_id, state=TrialState.FAIL):
            Retry(max_retry=None)(self.cells, self.storage.get_trial(cell._trial_id))

    def rows(self) -> list[dict]:
        """Every configuration of the study as a plain dict (ledger.json; cells are not trials of
        the DSR: their study is left out)."""
        return [
            {
                "number": t.number,
                "state": t.state.name,
                "params": t.params,
                "value": t.value,
                "key": t.user_attrs.get("key"),
                "slot": t.user_attrs.get("slot"),
                "intermediate": {str(k): v for k, v in t.intermediate_values.items()},
                "daily_returns_path": t.user_attrs.get("daily_returns_path"),
            }
            for t in self.trials()
        ]

    def write_json(self, path: Path) -> Path:
        rows = self.rows()
        return write_json(
            path,
            {
                "study_name": self.study.study_name,
                "trials": rows,
                "n_complete": sum(r["state"] == "COMPLETE" for r in rows),
            },
        )


def _pop(storage, waiting: list[FrozenTrial], order, beat: bool = False) -> FrozenTrial | None:
    """The first of `waiting` (sorted by `order`) that this worker moves WAITING -> RUNNING.

    `beat`: its first heartbeat is recorded before the move. optuna never calls a RUNNING trial
    without a heartbeat stale, so a worker killed between the move and its heartbeat thread's first
    beat would leave the cell RUNNING for ever (a beat on a trial another worker wins is harmless)."""
    for t in sorted(waiting, key=order):
        if beat and is_heartbeat_enabled(storage):
            storage.record_heartbeat(t._trial_id)
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            if storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                return t
    return None


def trial_sampler(seed: int, number: int, slots: list[Slot]) -> optuna.samplers.BaseSampler:
    """TPE seeded from (seed, trial number): workers that draw at once draw different values. Its
    first len(lengths) trials are random (TPE's start-up), the rest model the finished ones."""
    state = int(np.random.SeedSequence([seed, number]).generate_state(1)[0])
    return optuna.samplers.TPESampler(seed=state, n_startup_trials=len({s.params["n"] for s in slots}))


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
        raise UserError(
            f"{flag}: no driver for {parsed.drivername} ({exc}); for PostgreSQL: pip install psycopg2-binary"
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise UserError(
            f"{flag}: cannot reach the {backend} server at {where} for database {parsed.database!r}: {reason}"
        ) from None
    engine.dispose()
    return url


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


def _timeout_args(backend: str, seconds: int) -> dict:
    """connect_args that bound the wait for a server that does not answer."""
    return {"connect_timeout": seconds} if backend in _DEFAULT_PORTS else {}
