"""The one hash recipe (tsflash.identity.digest): pinned, and still naming every published run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tsflash.config import config_from_dict
from tsflash.identity import digest
from tsflash.runfolder import RunFolder
from tsflash.sweep.plan import folder_run_key, make_run_key, run_hash

PUBLISHED = sorted(p.parent.relative_to(REPO).as_posix() for p in (REPO / "reports").rglob("run.json"))


def test_the_recipe_is_pinned():
    """sha256 of sorted-key JSON, `default=str` for the rest (a Path as its text), the first `chars` digits."""
    obj = {"b": [1, 2.5], "a": None, "p": Path("x/y"), "t": (1, 2)}
    assert digest(obj, 12) == "6b22662cbcdf"
    assert digest(obj, 8) == "6b22662c" and digest({"a": 1}, 64) == digest({"a": 1}, 12) + digest({"a": 1}, 64)[12:]


def test_the_published_runs_are_found():
    assert {"reports/h200-btcusdt-1m", "reports/h200-btcusdt-1m-second-edition"} <= set(PUBLISHED)


@pytest.mark.parametrize("folder", PUBLISHED)
def test_a_published_config_hashes_to_its_folders_recorded_hash_and_key(folder):
    root = REPO / folder
    run = json.loads((root / "run.json").read_text())
    cfg = config_from_dict(json.loads((root / "config.json").read_text()))
    key_args = (cfg, run["data"], run["trials_per_length"], run["device"])
    current = (run_hash(cfg), make_run_key(*key_args))  # the fee left out
    # folders made while the fee was part of the run: the key digested the whole config
    fee_included = (cfg.hash(), digest({"config": cfg.to_dict(), "data": run["data"], "trials": run["trials_per_length"],
                                        "device": run["device"].split(":")[0]}, 12))
    assert (run["config_hash"], run["run_key"]) in (current, fee_included)
    assert folder_run_key(RunFolder(root), *key_args) == run["run_key"]  # --out resumes it under its key
    if folder.endswith("second-edition"):
        assert (run["config_hash"], run["run_key"]) == current
    if folder.endswith("h200-btcusdt-1m"):
        assert (run["config_hash"], run["run_key"]) == fee_included
