"""The config's version: `migrate` upgrades a stored config of any version step by step, a config
round-trips through its stored form, a newer one is refused naming the folder, and every published
run folder loads with the config hash, run hash and run key it had before the version existed
(tests/published_configs.json, made with the code before it)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from tests.conftest import REPO
from tsflash import cli
from tsflash.config import (
    CONFIG_VERSION,
    MIGRATIONS,
    ExperimentConfig,
    added_by,
    added_since,
    config_from_dict,
    load_config,
    migrate,
    read_run_config,
)
from tsflash.engine._checkpoint import CHECKPOINT_CONFIG_VERSION
from tsflash.errors import UserError
from tsflash.runfolder import RunFolder
from tsflash.sweep.plan import folder_run_key, make_run_key, run_hash

PUBLISHED = json.loads((REPO / "tests" / "published_configs.json").read_text())
# Every key a later step filled, in the order the steps were added (one step per addition).
HISTORY = [
    ["splits.val_days", "train.eval_every", "train.patience", "model.rope_base", "eval.context_cuts"],
    ["eval.strategy", "eval.entry_threshold"],
    ["model.residual"],
    ["model.norm"],
    ["model.patch"],
    ["train.ema_decay", "train.schedule", "train.decay_fraction"],
    ["train.short_fraction", "train.short_length"],
    ["train.restarts"],
    ["eval.seed_inference"],
    ["eval.probe"],
    ["train.restart_screen"],
    ["train.keep_from"],
]


def later_keys_set() -> ExperimentConfig:
    """The default preset with every key a step added away from the value that step fills."""
    return load_config("default", {
        "splits": {"val_days": 20}, "train": {"eval_every": 10, "patience": 3, "ema_decay": 0.9, "schedule": "wsd",
                                              "decay_fraction": 0.3, "restarts": 2, "restart_screen": 20,
                                              "keep_from": 30},
        "model": {"rope_base": 1e6, "residual": "compute", "norm": "layernorm"},
        "eval": {"strategy": "horizon", "entry_threshold": 0.5, "seed_inference": "crossed", "probe": True}})


def test_one_step_per_addition_in_order():
    assert CONFIG_VERSION == len(MIGRATIONS) == len(HISTORY) == 12
    assert [list(added_by(v)) for v in range(1, CONFIG_VERSION + 1)] == HISTORY
    assert [step.__name__.split("_")[1] for step in MIGRATIONS] == [f"v{v}" for v in range(1, CONFIG_VERSION + 1)]
    assert list(added_since(0)) == [k for keys in HISTORY for k in keys] and added_since(CONFIG_VERSION) == {}


@pytest.mark.parametrize("version", range(CONFIG_VERSION + 1))
def test_a_config_of_each_version_migrates_to_the_current_one(version):
    """A config of `version` lacks the keys added after it: they are filled at the value a config
    without them means, the keys it has are kept, and it hashes as before the version existed."""
    cfg = later_keys_set()
    raw = cfg.stored()
    for key in added_since(version):
        section, name = key.split(".")
        del raw[section][name]
    if version:
        raw["config_version"] = version
    else:
        del raw["config_version"]  # version 0: every folder made before the version existed
    before = copy.deepcopy(raw)
    migrated = migrate(raw)
    assert raw == before, "migrate returns a new dict"
    assert migrated["config_version"] == CONFIG_VERSION
    for key, value in added_since(version).items():
        section, name = key.split(".")
        assert migrated[section][name] == value, key
    expected = copy.deepcopy(cfg)
    for key, value in added_since(version).items():
        section, name = key.split(".")
        setattr(getattr(expected, section), name, copy.deepcopy(value))
    loaded = config_from_dict(raw)
    assert loaded == expected and loaded.hash() == expected.hash()


@pytest.mark.parametrize("version", range(1, CONFIG_VERSION + 1))
def test_a_step_fills_only_its_keys_and_keeps_a_value_given(version):
    step = MIGRATIONS[version - 1]
    raw: dict = {}
    step(raw)
    assert {f"{s}.{k}" for s, table in raw.items() for k in table} == set(added_by(version))
    given = {s: {k: "given" for k in table} for s, table in raw.items()}
    kept = copy.deepcopy(given)
    step(kept)
    assert kept == given


@pytest.mark.parametrize("name", ["default", "cpu", "first-edition", "btc-1s", "later"])
def test_a_config_round_trips_through_its_stored_form(name):
    cfg = later_keys_set() if name == "later" else load_config(name)
    stored = json.loads(json.dumps(cfg.stored()))  # as config.json holds it (tuples as lists)
    assert stored["config_version"] == CONFIG_VERSION
    assert set(stored) - {"config_version"} == {f.name for f in dataclasses.fields(ExperimentConfig)}
    assert stored["train"].keys() == dataclasses.asdict(cfg.train).keys()  # every key, none left out
    again = config_from_dict(stored)
    assert again == cfg and again.hash() == cfg.hash() and again.to_dict() == cfg.to_dict()
    assert "config_version" not in cfg.to_dict()  # the hashed form: the version is no part of a run
    assert config_from_dict(cfg.to_dict()) == cfg  # the hashed form reads as version 0


def test_the_hash_leaves_out_a_key_added_later_at_its_filled_value():
    cfg = load_config("default")
    assert all(k.split(".")[1] not in cfg.to_dict()[k.split(".")[0]]
               for k, v in added_since(0).items() if getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]) == v)
    assert cfg.to_dict()["eval"]["strategy"] == "horizon"  # not the filled value: hashed


def test_the_checkpoint_identity_leaves_out_the_keys_added_since_its_format():
    """The same keys as before the version existed, so a cell cut then still resumes."""
    since = added_since(CHECKPOINT_CONFIG_VERSION)
    assert {k for k in since if k.startswith(("model.", "train."))} == {
        "model.residual", "model.norm", "model.patch", "train.ema_decay", "train.schedule", "train.decay_fraction",
        "train.short_fraction", "train.short_length", "train.restarts", "train.restart_screen", "train.keep_from"}


def newer_folder(tmp_path, version=CONFIG_VERSION + 1):
    folder = tmp_path / "run"
    folder.mkdir()
    published = REPO / "reports" / "h200-btcusdt-1m"
    (folder / "run.json").write_text((published / "run.json").read_text())
    raw = json.loads((published / "config.json").read_text()) | {"config_version": version}
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


def test_a_config_newer_than_this_code_is_refused_naming_the_folder_and_both_versions(tmp_path, capsys):
    folder = newer_folder(tmp_path)
    newer = CONFIG_VERSION + 1
    with pytest.raises(UserError, match=rf"^{folder}: config_version {newer} is newer than this tsflash's "
                                        rf"CONFIG_VERSION {CONFIG_VERSION}: upgrade tsflash to read it$"):
        read_run_config(folder)
    assert cli.main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder}: config_version {newer} is newer" in err
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "run.json"]  # nothing written
    with pytest.raises(UserError, match=r"config: config_version must be an integer >= 0, got '2'"):
        migrate({"config_version": "2"})


def test_a_plan_check_of_a_newer_folder_names_the_folder(tmp_path):
    from tsflash.report.registration import deviations

    folder = newer_folder(tmp_path)
    with pytest.raises(UserError, match=rf"^{folder}: config_version {CONFIG_VERSION + 1} is newer"):
        deviations({"arms": []}, folder)


def test_a_folder_without_a_config_is_one_line(tmp_path):
    with pytest.raises(UserError, match=rf"^{tmp_path}: no config.json, not a run folder$"):
        read_run_config(tmp_path)


def test_every_published_folder_with_a_config_is_checked():
    on_disk = {p.parent.relative_to(REPO).as_posix() for p in (REPO / "reports").rglob("config.json")}
    assert set(PUBLISHED) <= on_disk, "a published folder is gone"
    # the third edition's folders arrive while its runs finish: the rest were all listed
    assert {f for f in on_disk if not f.startswith("reports/third-edition/")} <= set(PUBLISHED)
    assert len(PUBLISHED) >= 100


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_a_published_folder_loads_with_its_hashes_and_run_key(folder):
    want = PUBLISHED[folder]
    root = REPO / folder
    cfg = read_run_config(root)
    assert (cfg.hash(), run_hash(cfg)) == (want["config_hash"], want["run_hash"])
    if (root / "run.json").exists():
        run = json.loads((root / "run.json").read_text())
        args = (run["data"], run["trials_per_length"], run["device"])
        assert folder_run_key(RunFolder(root), cfg, *args) == want["run_key"]
        if not want.get("fee_in_run_key"):
            assert make_run_key(cfg, *args) == want["run_key"]
