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
def one_by_one(bars):
    return engine.prepare(tiny_cfg(**VALIDATED), bars, "cpu")


@pytest.fixture(scope="module")
def with_restarts(bars):
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


def _screened(bars, screen: int, restarts: int = 3):
    cfg = {**VALIDATED, "train": {**VALIDATED["train"], "restarts": restarts, "restart_screen": screen}}
    return engine.prepare(tiny_cfg(**cfg), bars, "cpu")


def _seen_by(result, step: int) -> float:  # by hand, not engine.lowest_val_loss_by: the rule under test
    curve = result.cost["curve"]
    return min(v for s, v in zip(curve["step"], curve["val_loss"], strict=True) if s <= step)


def test_a_screened_cell_continues_alone_the_restart_best_validated_by_the_screen(one_by_one, bars, monkeypatch):
    """train.restart_screen=3: the restarts of fold 0, seed 1 (seeds 3, 4, 5) train to step 3, and
    the one with the lowest validation loss by then (seed 5) goes on: the cell is that seed's run,
    bit for bit, though its full run is not the best at the end (seed 3 is: a screen can choose
    otherwise). Its cost counts the other two restarts' three steps, and it is scored once."""
    singles = [engine.run_fold(one_by_one, 32, 0, s) for s in (3, 4, 5)]
    at_screen = [_seen_by(r, 3) for r in singles]
    kept = int(np.argmin(at_screen))
    assert kept != int(np.argmin([r.cost["best_val_loss"] for r in singles]))  # the screen decides here
    from tsflash.engine import _train

    scored, score = [], _train._score_test
    monkeypatch.setattr(_train, "_score_test", lambda *a, **k: scored.append(1) or score(*a, **k))
    cell = engine.run_cell(_screened(bars, 3), 32, 0, 1)
    assert len(scored) == 1
    np.testing.assert_array_equal(cell.y_prob, singles[kept].y_prob)
    assert cell.seed == 1 and cell.metrics == singles[kept].metrics
    record = cell.cost["restarts"]
    assert (record["seeds"], record["kept"], record["screen"]) == ([3, 4, 5], kept, 3)
    assert record["best_val_loss"] == at_screen and record["steps"] == [3, 3, 3]
    assert cell.cost["steps"] == singles[kept].cost["steps"]
    others = sum(t for r, t in enumerate(record["train_seconds"]) if r != kept)
    assert cell.cost["train_seconds"] > others > 0  # the kept run's whole time and the others' screening
    # the recipes' simulation of screening (lab/recipes.py, from full runs) keeps the same restart
    from tests.conftest import load_experiment

    recipes = load_experiment("recipes")
    train = one_by_one.cfg.to_dict()["train"]
    rows = [recipes.validation_view({"n": 32, "fold": 0, "seed": s, "cost": r.cost}, train) for s, r in zip((3, 4, 5), singles, strict=True)]
    assert rows.index(min(rows, key=lambda row: recipes._seen_loss(row, 3))) == kept


def test_a_screened_restart_that_stopped_before_the_screen_is_kept_whole(one_by_one, bars):
    """Seeds 0-2 of fold 0 at screen 12: seed 0 stopped early at step 9 and has the lowest
    validation loss by step 12; the cell is its run."""
    singles = [engine.run_fold(one_by_one, 32, 0, s) for s in (0, 1, 2)]
    assert singles[0].cost["stop_step"] < 12
    cell = engine.run_cell(_screened(bars, 12), 32, 0, 0)
    assert cell.cost["restarts"]["kept"] == int(np.argmin([_seen_by(r, 12) for r in singles])) == 0
    np.testing.assert_array_equal(cell.y_prob, singles[0].y_prob)


@pytest.mark.parametrize("kill_at", [5, 11])  # in the second restart's screening; in the kept one's continuation
def test_a_screened_cell_killed_anywhere_resumes_to_the_same_result(bars, tmp_path, kill_at):
    screened = _screened(bars, 3)
    whole = engine.run_cell(screened, 32, 0, 1)

    def kill(step):
        if step == kill_at:  # the hook counts 3 steps a restart, then the kept one's from step 4 on
            raise KilledAt

    with pytest.raises(KilledAt):
        engine.run_cell(screened, 32, 0, 1, checkpoint_dir=tmp_path, checkpoint_every_s=0.0, on_step=kill)
    seen = []
    resumed = engine.run_cell(screened, 32, 0, 1, checkpoint_dir=tmp_path, checkpoint_every_s=0.0, on_step=seen.append)
    np.testing.assert_array_equal(resumed.y_prob, whole.y_prob)
    assert resumed.cost["restarts"]["kept"] == whole.cost["restarts"]["kept"]
    assert seen[0] == kill_at + 1  # no screened step trained again


def test_the_screen_is_refused_where_it_screens_nothing_and_costs_its_steps():
    from tsflash.config import TrainConfig

    screened = {**VALIDATED, "train": {**VALIDATED["train"], "restarts": 3, "restart_screen": 6}}
    for train, rule in (({"restarts": 1}, r"train.restart_screen=6 .* train.restarts > 1 only, got 1"),
                        ({"restart_screen": 2}, r"at least train.eval_every=3 .* below train.steps=40"),
                        ({"restart_screen": 40}, r"below train.steps=40")):
        with pytest.raises(UserError, match=rule):
            tiny_cfg(**{**screened, "train": {**screened["train"], **train}})
    assert "screened at step 6" in recipe_words(tiny_cfg(**screened).to_dict()["train"])
    assert "restart_screen" not in tiny_cfg(**RESTARTS).to_dict()["train"]  # the default: published hashes kept
    assert engine.cell_steps(TrainConfig(steps=600, restarts=3, restart_screen=300)) == 1200
    assert engine.cell_steps(TrainConfig(steps=600, restarts=3)) == 1800 and engine.cell_steps(TrainConfig()) == 200
