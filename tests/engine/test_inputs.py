"""tsflash.engine.inputs: `model_inputs` gives the features and labels the engine builds for a
fold (`engine.prepare` + `engine.fold_data`), bit for bit, when fitted on that fold's training bars."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

import tsflash
from tests.conftest import REPO
from tsflash import engine
from tsflash.config import config_from_dict, load_config, merge_overrides
from tsflash.dataset import FEATURE_NAMES
from tsflash.engine.inputs import model_inputs


def small_config():
    cfg = load_config("default").to_dict()
    return config_from_dict(merge_overrides(cfg, {"splits": {"n_folds": 2, "test_days": 2, "val_days": 0}}))


def test_model_inputs_are_the_engines_for_a_fold():
    bars = tsflash.data.random_walk_bars(8 * 1440, seed=1)
    cfg = small_config()
    prepared = engine.prepare(cfg, bars, "cpu")
    fold = engine.fold_data(prepared, 1)
    mine = model_inputs(bars, horizon=cfg.labels.horizon, flat_fraction=cfg.labels.flat_fraction,
                        fit_idx=fold.train_idx)
    assert mine.features.shape == (len(bars), len(FEATURE_NAMES)) == (len(bars), 14)
    assert mine.features.dtype == torch.float32 and mine.labels.dtype == torch.int64
    assert torch.equal(mine.features, fold.features) and torch.equal(mine.labels, fold.labels)
    assert mine.flat_threshold == fold.flat_threshold
    assert mine.x.shape == (1, len(bars), 14) and mine.targets.shape == (1, len(bars))


def test_model_inputs_defaults_fit_every_bar():
    bars = tsflash.data.random_walk_bars(2000, seed=0)
    inputs = model_inputs(bars)
    labelled = inputs.labels[inputs.labels >= 0]
    assert set(labelled.unique().tolist()) == {0, 1, 2}
    assert np.allclose(inputs.features.mean(0).numpy(), 0, atol=0.2)  # normalised on all bars


def test_import_tsflash_loads_no_torch_and_lists_its_names():
    code = "import sys, tsflash; names = dir(tsflash); print('torch' in sys.modules, 'run_sweep' in names, " \
           "'model_inputs' in names, 'CausalTransformer' in names, 'data' in names)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": ""}).stdout.split()
    assert out == ["False", "True", "True", "True", "True"]
