"""Patch tokens in the engine (``model.patch`` = 16): a cell trains on the bars ending its windows'
patches, scores every test bar exactly once from a window whose patch grid ends at that bar,
resumes after a kill bit for bit on CPU, and runs as a tiny CPU sweep cell."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import run_fold_killed_at
from tests.engine.test_engine import tiny_cfg
from tests.engine.test_resume import argv as sweep_argv
from tsflash import cli, engine
from tsflash.data.synthetic import random_walk_bars
from tsflash.engine import FoldResult
from tsflash.errors import UserError
from tsflash.runfolder import RunFolder

PATCH = 16
VALIDATED = {"splits": {"val_days": 1}, "train": {"steps": 12, "eval_every": 3, "patience": 2}}


pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread


@pytest.fixture(scope="module")
def prepared():
    """The engine tests' tiny setup, patch 16, a one-day validation tail (its loss scored like test bars)."""
    return engine.prepare(tiny_cfg(model={"patch": PATCH}, **VALIDATED), random_walk_bars(8000, seed=3), "cpu")


@pytest.fixture(scope="module")
def results(prepared):
    return {n: engine.run_fold(prepared, n, 1, 0) for n in (32, 64)}


def test_a_patch_cell_scores_every_test_bar_once(prepared, results):
    fd = engine.fold_data(prepared, 1)
    for r in results.values():
        assert np.array_equal(r.test_time, prepared.open_time[fd.test_idx])  # every test bar, in order, once
        assert r.y_prob.shape == (len(fd.test_idx), 3) and np.isfinite(r.y_prob).all()
        np.testing.assert_allclose(r.y_prob.sum(1), 1, atol=1e-5)
        assert len(r.val_prob) == fd.val[1] - fd.val[0] and r.cost["best_step"] > 0
        assert r.cost["patch"] == PATCH and r.cost["steps"] >= 3
    # the same parameters at every N (the input projection has 16 x F inputs)
    assert results[32].cost["n_params"] == results[64].cost["n_params"]


class _PatchProbe:
    """A patch model's interface that forecasts its window's start at every patch end (feature 0
    carries the bar index), so that the test recovers which window scored each bar."""

    class config:  # what predict_range reads: the model's config.patch
        patch = 4

    def __call__(self, x):
        start = x[:, :1, 0:1]  # (B, 1, 1)
        tokens = x.shape[1] // self.config.patch
        return torch.cat([start.expand(-1, tokens, 1), torch.zeros(x.shape[0], tokens, 2)], -1), None


@pytest.mark.parametrize("n,lo,hi", [(32, 19, 100), (64, 40, 500), (8, 7, 30)])
def test_each_bar_is_scored_from_a_window_whose_patch_ends_at_it(n, lo, hi):
    series = torch.arange(hi + 5, dtype=torch.float32)[:, None] / 1000
    bars, ctx, probs = engine.predict_range(_PatchProbe(), series, lo, hi, n, batch_tokens=3 * n, device="cpu", patch=4)
    assert torch.equal(bars, torch.arange(lo, hi))
    assert bool(((ctx > n // 2) & (ctx <= n) & (ctx % 4 == 0)).all())  # whole patches, the last ending at the bar
    start = 1000 * torch.log(probs[:, 0] / probs[:, 1])
    torch.testing.assert_close(start, (bars - ctx + 1).float(), rtol=0, atol=0.05)


def test_a_patch_model_scored_as_per_bar_is_a_clear_error():
    series = torch.zeros(100, 1)
    with pytest.raises(UserError, match=r"forecasts 8 positions of a window of n=32 bars, not n / patch = 32"):
        engine.predict_range(_PatchProbe(), series, 40, 80, 32, batch_tokens=64, device="cpu")



def test_resume_after_kill_gives_identical_results(prepared, results, tmp_path):
    """Killed at step 4 (between validations), resumed: the same cell as the uninterrupted one, bit for bit."""
    run_fold_killed_at(engine.run_fold, 4, prepared, 32, 1, 0, checkpoint_dir=tmp_path)
    seen = []
    resumed = engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, on_step=seen.append)
    full = results[32]
    assert seen[0] == 5  # continued, did not restart
    np.testing.assert_array_equal(resumed.y_prob, full.y_prob)
    np.testing.assert_array_equal(resumed.val_prob, full.val_prob)
    assert resumed.metrics == full.metrics and resumed.cost["curve"] == full.cost["curve"]


def test_a_tiny_cpu_sweep_cell_with_patch_16_scores_every_test_bar_once(tmp_path):
    out = tmp_path / "run"
    assert cli.main(sweep_argv(out) + ["--set", f"model.patch={PATCH}", "--set", "train.seeds=[0]"]) == 0
    folder = RunFolder(out)
    config = json.loads(folder.config_json.read_text())
    assert config["model"]["patch"] == PATCH
    cells = sorted((out / "cells").glob("n*/*.cell.json"))
    assert len(cells) == 4  # N = 32, 64 x 2 folds x 1 seed
    for marker in cells:
        key, stem = marker.parent.name, marker.name.removesuffix(".cell.json")
        fold = int(stem.split("fold")[1].split("-")[0])
        cell = FoldResult.load(folder.cell_stem(key, fold, 0))
        assert cell.cost["patch"] == PATCH
        times = cell.test_time
        assert len(times) == 2 * 1440 and np.all(np.diff(times) > 0)  # the 2-day test block's bars, each once
        assert times[0] == cell.test_start and times[-1] == cell.test_end
    assert (out / "report.md").is_file()
