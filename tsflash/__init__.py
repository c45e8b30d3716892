"""tsflash: does a longer context help a causal transformer forecast BTC direction?

Public API (see README, "In a notebook"):
    run_sweep, SweepResult           -- the sweep with the CLI's options as keywords (tsflash.api)
    CausalTransformer, ModelConfig   -- the model (tsflash.model.transformer)
    model_inputs, ModelInputs        -- bars -> the model's (T, 14) features and labels (tsflash.engine.inputs)
    random_walk_bars, load_bars      -- a seeded synthetic market; bars from the store (tsflash.data)
    load_config                      -- experiment presets (tsflash.config)
and the subpackages data, dataset, model, engine, scoring, stats, sweep, report, bench. Everything
is imported on first use: `import tsflash` loads no torch (the data CLI stays fast).
"""

import os

# Each cell profiles its first training step to record the attention kernel that ran; torch's
# profiler backend (kineto) prints a "profiler_start"/"profiler_stop" line to stderr for each use
# at its highest level, USDT = 5, so only a level above every one (6) silences it. Kineto reads
# the setting when torch loads: set here, before any tsflash module imports torch, it covers the
# CLI, the notebook API and the scripts alike (not a torch imported before tsflash).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

from tsflash._exports import lazy_exports  # after the setting above

__version__ = "0.1.0"

_EXPORTS = {
    "run_sweep": "api",
    "SweepResult": "api",
    "CausalTransformer": "model.transformer",
    "ModelConfig": "model.transformer",
    "model_inputs": "engine.inputs",
    "ModelInputs": "engine.inputs",
    "random_walk_bars": "data.synthetic",
    "load_bars": "data.store",
    "load_config": "config",
}
SUBPACKAGES = ("data", "dataset", "model", "engine", "scoring", "stats", "sweep", "report", "bench")
__all__ = sorted(_EXPORTS) + ["__version__"]

_getattr, _dir = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str):
    if name in SUBPACKAGES:  # `tsflash.data.random_walk_bars(...)` after a bare `import tsflash`
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted([*_dir(), *SUBPACKAGES, "__version__"])
