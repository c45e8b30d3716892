"""What the report reads from a run folder, through `tsflash.runfolder.RunFolder`.

Only what the sweep saved: run.json, config.json, data.json, ledger.json, precision.json,
cells/**/*.cell.json and series/*.npz. No torch, no optuna.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tsflash.config import config_version
from tsflash.errors import UserError
from tsflash.runfolder import DamagedFile, RunFolder, baseline_order, check_run_meta, read_json


def seed_inference(config: dict) -> str:
    """The run's eval.seed_inference: how question 1 and the nesting check treat seeds ("fold" for
    a config.json written before the choice; `tsflash.stats.runs.run_level_test`)."""
    return config.get("eval", {}).get("seed_inference", "fold")


@dataclass
class Series:
    name: str  # trial key ("n512") or "baseline-prior"
    days: np.ndarray  # datetime64[D] (D,)
    net: np.ndarray  # (D,) daily net returns
    gross: np.ndarray  # (D,)


@dataclass
class RunData:
    folder: RunFolder
    run: dict
    config: dict
    data: dict
    ledger: dict
    precision: dict
    cells: list[dict]  # model cell summaries
    baselines: list[dict]  # baseline summaries (one per fold and baseline)
    series: dict[str, Series] = field(default_factory=dict)
    rescored_from: dict | None = None  # {"overrides": {...}, "run_fee_bps": ...} for a re-scored copy

    @property
    def run_dir(self) -> Path:
        return self.folder.root

    @property
    def trial_keys(self) -> list[str]:
        """The sweep's trials in order of N then key (only those with saved daily series)."""
        keys = {c["key"]: c["n"] for c in self.cells if c["key"] in self.series}
        return sorted(keys, key=lambda k: (keys[k], k))

    @property
    def baseline_names(self) -> list[str]:
        return sorted({c["name"] for c in self.baselines}, key=baseline_order)

    def n_of(self, key: str) -> int | None:
        return next((c["n"] for c in self.cells if c["key"] == key), None)


def _required(path: Path) -> dict:
    if not path.exists():
        raise UserError(f"report: {path} not found; is {path.parent} a finished `tsflash sweep` run folder?")
    try:
        return read_json(path)
    except DamagedFile as exc:
        raise UserError(f"report: {exc}") from None


def _optional(path: Path, default: dict) -> dict:
    return read_json(path) if path.exists() else default


def load_run(run_dir: Path | str) -> RunData:
    """Everything the report needs from a run folder; UserError naming what is missing."""
    rf = RunFolder(Path(run_dir))
    if not rf.root.is_dir():
        raise UserError(f"report: run folder not found: {rf.root}")
    run = check_run_meta(_required(rf.run_json), rf.run_json)
    config = _required(rf.config_json)
    config_version(config, str(rf.root))  # a config newer than this code is refused
    data = _required(rf.data_json)
    ledger = _optional(rf.ledger_json, {"trials": [], "n_complete": 0})
    precision = _optional(rf.precision_json, {"available": False, "reason": "not run"})
    cells, baselines = rf.cell_summaries()
    if not cells:
        raise UserError(f"report: no finished cells under {rf.cells_dir}; run `tsflash sweep` first")
    rd = RunData(rf, run, config, data, ledger, precision, cells, baselines)
    for name in rf.series_names():
        s = rf.read_series(name)
        rd.series[name] = Series(name, s["days"], s["net"], s["gross"])
    return rd
