"""Validated restarts (train.restarts, issue 29): a cell of k restarts is the validated best of the
k one-by-one cells of seeds k*s .. k*s + k - 1 (bit-identical on CPU), its cost counts all of them,
a killed cell resumes to the same result, and the rule is refused without a validation tail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import KilledAt
from tests.engine.test_engine import VALIDATED, bars, tiny_cfg  # noqa: F401 (fixtures)
from tsflash import engine
from tsflash.config import recipe_words
from tsflash.errors import UserError

pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread

RESTARTS = {**VALIDATED, "train": {**VALIDATED["train"], "restarts": 2}}


@pytest.fixture(scope="module")
def one_by_one(bars):  # noqa: F811
    return engine.prepare(tiny_cfg(**VALIDATED), bars, "cpu")


@pytest.fixture(scope="module")
def with_restarts(bars):  # noqa: F811
    return engine.prepare(tiny_cfg(**RESTARTS), bars, "cpu")


def test_a_restart_cell_is_the_validated_best_of_the_one_by_one_cells_of_its_seeds(one_by_one, with_restarts):
    assert engine.restart_seeds(1, 2) == [2, 3] and engine.restart_seeds(0, 3) == [0, 1, 2]
    singles = [engine.run_fold(one_by_one, 32, 1, s) for s in (2, 3)]
    losses = [r.cost["best_val_loss"] for r in singles]
    assert losses[0] != losses[1]  # the choice is not a tie
    best = singles[int(np.argmin(losses))]
    cell = engine.run_cell(with_restarts, 32, 1, 1)
    assert cell.seed == 1  # the cell's own seed, not its restart's
    np.testing.assert_array_equal(cell.y_prob, best.y_prob)
    assert cell.metrics == best.metrics
    record = cell.cost["restarts"]
    assert record["seeds"] == [2, 3] and record["kept"] == int(np.argmin(losses))
    assert record["best_val_loss"] == losses
    assert cell.cost["train_seconds"] == pytest.approx(sum(record["train_seconds"]))


def test_the_kept_restarts_model_is_the_one_saved(with_restarts, tmp_path):
    from tsflash.model.transformer import CausalTransformer

    path = tmp_path / "model.pt"
    cell = engine.run_cell(with_restarts, 32, 1, 1, model_path=path)
    kept_seed = cell.cost["restarts"]["seeds"][cell.cost["restarts"]["kept"]]
    alone = tmp_path / "alone.pt"
    engine.run_fold(with_restarts, 32, 1, kept_seed, model_path=alone)
    a, b = CausalTransformer.load(path).state_dict(), CausalTransformer.load(alone).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.pt", "model.pt"]  # no restart's file left


def test_one_restart_is_run_fold_itself(one_by_one):
    a, b = engine.run_cell(one_by_one, 32, 0, 0), engine.run_fold(one_by_one, 32, 0, 0)
    np.testing.assert_array_equal(a.y_prob, b.y_prob)
    assert "restarts" not in a.cost


def test_a_restart_cell_killed_in_its_second_restart_resumes_to_the_same_result(with_restarts, tmp_path):
    whole = engine.run_cell(with_restarts, 32, 0, 0)
    steps = with_restarts.cfg.train.steps

    def kill(step):
        if step == steps + 2:  # two steps into the second restart (the hook counts over restarts)
            raise KilledAt

    with pytest.raises(KilledAt):
        engine.run_cell(with_restarts, 32, 0, 0, checkpoint_dir=tmp_path, checkpoint_every_s=0.0, on_step=kill)
    resumed = engine.run_cell(with_restarts, 32, 0, 0, checkpoint_dir=tmp_path, checkpoint_every_s=0.0)
    np.testing.assert_array_equal(resumed.y_prob, whole.y_prob)
    assert resumed.cost["restarts"]["kept"] == whole.cost["restarts"]["kept"]


def test_restarts_need_a_validation_tail_and_say_so_in_the_recipe():
    with pytest.raises(UserError, match=r"train.restarts=2 .* needs splits.val_days > 0, got 0"):
        tiny_cfg(train={"restarts": 2})
    with pytest.raises(UserError, match="train.restarts"):
        tiny_cfg(**{**VALIDATED, "train": {**VALIDATED["train"], "restarts": 0}})
    assert "validated best of 2 trainings" in recipe_words({"restarts": 2})
    assert "validated best" not in recipe_words({})
    # the default is left out of the resolved config, so published runs keep their hash
    assert "restarts" not in tiny_cfg(**VALIDATED).to_dict()["train"]
    assert tiny_cfg(**RESTARTS).to_dict()["train"]["restarts"] == 2
