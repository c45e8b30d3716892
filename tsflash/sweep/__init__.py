"""The context-length sweep: its options and plan (`plan`), the run (`run`), the trial ledger on
optuna's storage (`ledger`), one worker per device (`workers`), cost estimates, ETA and the log
(`progress`), the bars of a configured range (`source`), where a run came from (`provenance`), the out-of-time confirmation (`confirm`), and the
pre-registration written before a published run and checked against it (`preregister`)."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "SweepOptions": "plan",
    "SweepPlan": "plan",
    "plan_sweep": "plan",
    "run_sweep": "run",
    "confirm": "confirm",
    "HoldOut": "confirm",
    "load_data": "source",
    "configured_bar_count": "source",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
