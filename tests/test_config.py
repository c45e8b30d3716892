"""Experiment config: presets load, overrides are checked by name and type, cross-field rules."""

from __future__ import annotations

import pytest

from tsflash.config import ExperimentConfig, config_from_dict, load_config
from tsflash.errors import UserError


def test_presets_load_and_round_trip():
    default = load_config("default")
    cpu = load_config("cpu")
    assert default.lengths == [512, 4096, 32768] and default.model.d_model == 256
    assert cpu.model.d_model < default.model.d_model and cpu.splits.n_folds == 2
    assert config_from_dict(default.to_dict()).hash() == default.hash()
    assert default.purge == default.labels.horizon  # purge = -1 means "the horizon"


def test_overrides_apply_and_toml_dates_become_strings():
    cfg = load_config("default", {"train": {"steps": 7}, "data": {"start": __import__("datetime").date(2024, 1, 2)}})
    assert cfg.train.steps == 7 and cfg.data.start == "2024-01-02"
    assert cfg.hash() != load_config("default").hash()


@pytest.mark.parametrize(
    "overrides, pattern",
    [
        ({"train": {"stepz": 3}}, r"unknown config key 'train.stepz'; known keys here: .*steps"),
        ({"train": {"steps": "many"}}, r"config key train.steps: expected int, got 'many'"),
        ({"train": 5}, r"config key train: expected a table, got 5"),
        ({"lengths": [512, 100]}, r"lengths: every length must be a power of two >= 2, got 100"),
        ({"train": {"tokens_per_step": 1000}}, r"train.tokens_per_step=1000 must be a multiple of every context length"),
        ({"splits": {"purge": 3}}, r"splits.purge=3 must be >= labels.horizon=15 .*look into the test block"),
        ({"data": {"start": "2025-01-01", "end": "2024-01-01"}}, r"data range: end 2024-01-01 is before start 2025-01-01"),
        ({"selection": {"cscv_blocks": 7}}, r"selection.cscv_blocks must be even and >= 2, got 7"),
    ],
)
def test_bad_config_is_one_clear_error(overrides, pattern):
    with pytest.raises(UserError, match=pattern):
        load_config("default", overrides)


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(UserError, match=r"unknown preset 'turbo'; known presets: .*cpu.*default"):
        load_config("turbo")


def test_a_purge_of_at_least_the_horizon_is_accepted():
    assert load_config("default", {"splits": {"purge": 20}}).purge == 20
    assert isinstance(ExperimentConfig().purge, int)
