"""The training recipe (issue 29): the weight average is the hand-computed one, the schedules give
the hand-computed rates, the "wsd" decay starts from the validated step, a cell killed mid-way
resumes bit-identically with each option on, and the defaults leave checkpoints as they were."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import run_fold_killed_at
from tests.engine.test_engine import VALIDATED, bars, tiny_cfg  # noqa: F401 (fixtures)
from tsflash import engine
from tsflash.engine import _train
from tsflash.engine._checkpoint import checkpoint_identity
from tsflash.engine._train import decay_steps, wsd_lr_at

pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread

RECIPES = {"ema": {"ema_decay": 0.8}, "wsd": {"schedule": "wsd", "decay_fraction": 0.5},
           "wsd-ema": {"schedule": "wsd", "decay_fraction": 0.5, "ema_decay": 0.8},
           "short": {"short_fraction": 0.5, "short_length": 16},
           # the chosen recipe's pair (reports/recipes, seventh screen), at toy size
           "short-ema": {"short_fraction": 0.5, "short_length": 16, "ema_decay": 0.8},
           "keep-from": {"keep_from": 12}}


@pytest.fixture(scope="module")
def fixed(bars):
    return engine.prepare(tiny_cfg(train={"steps": 6}), bars, "cpu")


@pytest.fixture(scope="module")
def validated(bars):
    """Validation every 3 steps, patience 2, a high lr: the stable phase stops early."""
    return engine.prepare(tiny_cfg(**VALIDATED), bars, "cpu")


@pytest.fixture(scope="module")
def uninterrupted(validated):
    return {name: engine.run_fold(validated, 32, 1, 0, train_overrides=over) for name, over in RECIPES.items()}


def hand_average(iterates: list[dict], decay: float) -> dict:
    """sum_i decay^(t-i) w_i / sum_i decay^(t-i) over the t iterates, in float64."""
    t = len(iterates)
    weights = [decay ** (t - 1 - i) for i in range(t)]
    return {k: sum(w * it[k].double() for w, it in zip(weights, iterates, strict=True)) / sum(weights) for k in iterates[0]}


def test_the_average_is_the_hand_computed_one():
    model = torch.nn.Linear(3, 2)
    state, iterates = engine.TrainingState(), []
    for step in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(step)))
        iterates.append({k: p.detach().clone() for k, p in model.named_parameters()})
        _train._update_average(state, model, 0.7)
        want = hand_average(iterates, 0.7)
        assert state.average["count"] == step + 1
        for k, v in state.average["weights"].items():
            torch.testing.assert_close(v.double(), want[k], rtol=1e-6, atol=1e-7)
    assert torch.equal(iterates[0]["weight"], hand_average(iterates[:1], 0.7)["weight"].float())  # no weight of init


def test_a_fixed_budget_scores_the_average_of_its_iterates(fixed, tmp_path, monkeypatch):
    iterates = []
    update = _train._update_average

    def spied(state, model, decay):
        iterates.append({k: p.detach().clone() for k, p in model.named_parameters()})
        update(state, model, decay)

    monkeypatch.setattr(_train, "_update_average", spied)
    r = engine.run_fold(fixed, 32, 1, 0, train_overrides={"ema_decay": 0.6}, model_path=tmp_path / "m.pt")
    from tsflash.model.transformer import CausalTransformer

    saved = dict(CausalTransformer.load(tmp_path / "m.pt").named_parameters())
    assert len(iterates) == 6
    for k, v in hand_average(iterates, 0.6).items():
        torch.testing.assert_close(saved[k].double(), v, rtol=1e-5, atol=1e-6)
    assert r.cost["recipe"] == {"schedule": "cosine", "ema_decay": 0.6, "short_fraction": 0.0, "decay": None,
                                "kept_updates": 6,
                                "kept_lr_ratio": pytest.approx(0.1)}


def test_the_validation_loss_is_the_averages(validated, tmp_path):
    """The kept checkpoint is the average: its validation loss, recomputed from the saved model, is the best one."""
    r = engine.run_fold(validated, 32, 1, 0, train_overrides=RECIPES["ema"], model_path=tmp_path / "m.pt")
    from tsflash.model.transformer import CausalTransformer

    model = CausalTransformer.load(tmp_path / "m.pt").eval()
    fd = engine.fold_data(validated, 1)
    assert engine.validation_loss(model, fd, fd.features, fd.labels, 32, 4096, "cpu") == r.cost["best_val_loss"]
    plain = engine.run_fold(validated, 32, 1, 0)
    assert r.cost["curve"]["val_loss"] != plain.cost["curve"]["val_loss"]


def test_the_schedules_at_chosen_steps():
    got = [wsd_lr_at(s, 1e-3, 2, 0.1, 6, 4) for s in range(11)]
    want = [0.5e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 0.775e-3, 0.55e-3, 0.325e-3, 0.1e-3, 0.1e-3]
    assert got == pytest.approx(want, rel=1e-12)
    assert [wsd_lr_at(s, 1e-3, 2, 0.1, None) for s in (0, 1, 50)] == pytest.approx([0.5e-3, 1e-3, 1e-3])
    # cosine: warm-up to the peak, half-way down at the middle of the decay, the floor at the last step
    assert engine.lr_at(10, 21, 1.0, 0, 0.1) == pytest.approx(0.55) and engine.lr_at(20, 21, 1.0, 0, 0.1) == 0.1
    assert (decay_steps(0.2, 180), decay_steps(0.2, 2), decay_steps(0.5, 9)) == (36, 1, 4)  # round half to even


def test_wsd_without_a_tail_decays_over_the_last_steps(fixed, monkeypatch):
    seen = []
    rate = _train._learning_rate
    monkeypatch.setattr(_train, "_learning_rate", lambda step, tc, state: seen.append(rate(step, tc, state)) or seen[-1])
    r = engine.run_fold(fixed, 32, 1, 0, train_overrides={"schedule": "wsd", "decay_fraction": 0.5})
    lr = fixed.cfg.train.lr
    # warm-up 2, decay 3 of 6 steps (a 7th rate is the cost record's, of the kept weights' last update)
    assert seen[:6] == pytest.approx([lr / 2, lr, lr, lr * 0.7, lr * 0.4, lr * 0.1])
    assert r.cost["recipe"]["decay"] == {"from": None, "start": 3, "steps": 3} and r.cost["steps"] == 6


def test_wsd_decays_from_the_validated_step(uninterrupted):
    c = uninterrupted["wsd"].cost
    decay = c["recipe"]["decay"]
    # the stable phase is the plain run's at the peak rate: it stops by the same rule, then rewinds
    stable = [i for i, s in enumerate(c["curve"]["step"]) if s <= decay["start"]]
    best = min(stable, key=lambda i: c["curve"]["val_loss"][i])
    assert decay["from"] == c["curve"]["step"][best] and decay["start"] == c["curve"]["step"][stable[-1]]
    assert decay["start"] - decay["from"] == 2 * 3  # patience 2 evaluations of 3 steps
    assert decay["steps"] == decay_steps(0.5, decay["from"]) and c["stop_step"] == decay["start"] + decay["steps"]
    assert c["curve"]["step"][-1] == c["stop_step"] and c["early_stopped"]
    assert c["best_val_loss"] == min(c["curve"]["val_loss"])
    if c["best_step"] > decay["start"]:
        assert c["recipe"]["kept_updates"] == decay["from"] + c["best_step"] - decay["start"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_resume_after_a_kill_is_bit_identical_with_each_option(validated, uninterrupted, name, tmp_path):
    full = uninterrupted[name]
    decay = (full.cost["recipe"]["decay"] or {}).get("start")  # None: no decay phase
    kills = [4] + ([decay + 1] if decay is not None else [])  # in the stable phase; within the decay
    for kill in kills:
        folder = tmp_path / f"kill{kill}"
        run_fold_killed_at(engine.run_fold, kill, validated, 32, 1, 0, checkpoint_dir=folder,
                           train_overrides=RECIPES[name])
        seen = []
        resumed = engine.run_fold(validated, 32, 1, 0, checkpoint_dir=folder, train_overrides=RECIPES[name],
                                  on_step=seen.append)
        assert seen[0] == kill + 1  # continued after the checkpoint of the killed step
        assert torch.equal(torch.as_tensor(resumed.y_prob), torch.as_tensor(full.y_prob)), kill
        for k in ("curve", "best_step", "best_val_loss", "stop_step", "steps", "recipe"):
            assert resumed.cost[k] == full.cost[k], (kill, k)


def test_the_defaults_leave_checkpoints_as_they_were(validated, tmp_path):
    """At the defaults the identity and the saved state are those of checkpoints written before the
    recipe existed; a recipe is another run."""
    import dataclasses

    from tsflash.engine._train import _model_config

    settings, _ = _model_config(validated.cfg, 5, None)
    tc = validated.cfg.train
    recipe = ("ema_decay", "schedule", "decay_fraction", "short_fraction", "short_length", "restarts", "restart_screen",
              "keep_from")
    before = {k: v for k, v in dataclasses.asdict(tc).items() if k not in recipe}
    from tsflash.engine import _checkpoint

    identity = checkpoint_identity(validated, 32, 1, 0, settings, tc)
    # the model keys added since the format began, left out at the value every older checkpoint trained with
    model = {k: v for k, v in settings.items() if (k, v) not in {("residual", "param"), ("norm", "rmsnorm"),
                                                                ("patch", 1)}}
    older = _checkpoint.digest({"format": _checkpoint.TRAINING_CHECKPOINT_FORMAT, "config": validated.cfg.hash(),
                                "n": 32, "fold": 1, "seed": 0, "model": model, "train": before,
                                "bars": [len(validated.open_time), int(validated.open_time[0]),
                                         int(validated.open_time[-1])]}, 12)
    assert identity == older
    assert checkpoint_identity(validated, 32, 1, 0, settings, dataclasses.replace(tc, ema_decay=0.5)) != identity
    assert engine.TrainingState().to_dict().keys().isdisjoint({"average", "rewind", "decay"})


def test_short_windows_replace_a_share_of_the_long_batch_under_one_loss(fixed, monkeypatch):
    """At n=64 and 2048 tokens (32 windows), a quarter of them as 32-bar windows: 24 + 16 windows of
    the same tokens, two forwards with the denominator of the whole mixed batch, their losses summed."""
    from tsflash.model.transformer import CausalTransformer

    calls, losses = [], []
    forward = CausalTransformer.forward

    def spy(self, x, targets=None, loss_denominator=None):
        logits, loss = forward(self, x, targets, loss_denominator)
        if self.training:
            calls.append((tuple(x.shape[:2]), loss_denominator, loss.detach()))
        return logits, loss

    batch_loss = _train._batch_loss
    monkeypatch.setattr(CausalTransformer, "forward", spy)
    monkeypatch.setattr(_train, "_batch_loss", lambda *a: losses.append(batch_loss(*a)) or losses[-1])
    over = {"steps": 1, "short_fraction": 0.25, "short_length": 32}
    engine.run_fold(fixed, 64, 1, 0, train_overrides=over)
    monkeypatch.undo()
    assert [c[0] for c in calls] == [(24, 64), (16, 32)] and calls[0][1] == calls[1][1]
    assert torch.equal(losses[0].detach(), calls[0][2] + calls[1][2])
    fd = engine.fold_data(fixed, 1)
    windows = {n: _train._fit_windows(fd, n, fixed.segments, 60, fixed.cfg.train) for n in (32, 64)}
    want = 24 * windows[64].scored_per_window() + 16 * windows[32].scored_per_window()
    assert calls[0][1] == pytest.approx(want, rel=1e-12)
    # a length at or below short_length is untouched; a share that is not whole windows is refused
    calls.clear()
    monkeypatch.setattr(CausalTransformer, "forward", spy)
    engine.run_fold(fixed, 32, 1, 0, train_overrides=over)
    assert [c[0] for c in calls] == [(64, 32)]
    from tsflash.errors import UserError

    with pytest.raises(UserError, match=r"train.short_fraction=0.3 of the batch of 32 windows at N=64 \(train.tokens_per_step=2048\) is 9.6 windows"):
        engine.run_fold(fixed, 64, 1, 0, train_overrides=over | {"short_fraction": 0.3})


def test_keep_from_starts_the_stopping_rule_and_the_kept_weights_at_its_step(validated, uninterrupted):
    """train.keep_from=12: the same training up to step 12 as the plain run (which stops earlier),
    then the stopping rule from there; the kept weights are the best validated at or after 12."""
    plain, late = engine.run_fold(validated, 32, 1, 0), uninterrupted["keep-from"]
    assert plain.cost["stop_step"] < 12 <= late.cost["best_step"] <= late.cost["stop_step"]
    c, p = late.cost["curve"], plain.cost["curve"]
    before = [i for i, s in enumerate(c["step"]) if s < 12]
    assert [c["val_loss"][i] for i in before] == p["val_loss"][:len(before)]  # the same run until then
    after = [v for s, v in zip(c["step"], c["val_loss"], strict=True) if s >= 12]
    assert late.cost["best_val_loss"] == min(after) and min(after) > min(c["val_loss"])  # an earlier step was lower
    # patience counts from step 12: two evaluations without improvement after the best, then the stop
    assert late.cost["stop_step"] == late.cost["best_step"] + 2 * 3 or late.cost["stop_step"] == validated.cfg.train.steps


def test_keep_from_needs_a_tail_and_a_step_within_the_run_and_says_so():
    from tsflash.config import recipe_words
    from tsflash.errors import UserError

    with pytest.raises(UserError, match=r"train.keep_from=5 .* needs splits.val_days > 0, got 0"):
        tiny_cfg(train={"keep_from": 5})
    with pytest.raises(UserError, match=r"train.keep_from=41 must be at most train.steps=40"):
        tiny_cfg(**{**VALIDATED, "train": {**VALIDATED["train"], "keep_from": 41}})
    cfg = tiny_cfg(**{**VALIDATED, "train": {**VALIDATED["train"], "keep_from": 12}})
    assert "no early stop before step 12" in recipe_words(cfg.to_dict()["train"])
    assert "keep_from" not in tiny_cfg(**VALIDATED).to_dict()["train"]  # the default: published hashes kept
