"""Engine and metrics: one rule across N, every test bar once (also with the context cut), resume,
validated early stopping, leakage, baselines."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from tests.conftest import run_fold_killed_at
from tsflash import engine
from tsflash.config import load_config
from tsflash.data.synthetic import random_walk_bars
from tsflash.dataset.windows import BalancedWindows, fit_pieces
from tsflash.errors import UserError
from tsflash.scoring.metrics import (
    classification_metrics,
    direction_metrics,
    pooled_metrics,
    positions_from_probs,
    strategy_returns,
)

N_BARS = 8000


pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread


def tiny_cfg(**over):
    base = {
        "lengths": [32, 64],
        "splits": {"n_folds": 2, "test_days": 1, "val_days": 0},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 12, "tokens_per_step": 2048, "warmup_steps": 2, "lr": 1e-2},
        "eval": {"baseline_lags": 4},
    }
    for k, v in over.items():
        base.setdefault(k, {}).update(v) if isinstance(v, dict) else base.__setitem__(k, v)
    return load_config("default", base)


@pytest.fixture(scope="module")
def bars():
    return random_walk_bars(N_BARS, seed=3)


@pytest.fixture(scope="module")
def prepared(bars):
    return engine.prepare(tiny_cfg(), bars, "cpu")


@pytest.fixture(scope="module")
def results(prepared):
    """Fold 1 trained at N = 32 and N = 64 (shared by several tests)."""
    return {n: engine.run_fold(prepared, n, 1, 0) for n in (32, 64)}


# ---- prepare / folds ---------------------------------------------------------------------------


def test_prepare_folds_follow_config(prepared):
    assert len(prepared.folds) == 2
    for train_idx, test_idx in prepared.folds:
        assert len(test_idx) == 1440  # 1 day of 1-minute bars
        assert train_idx.max() + prepared.cfg.purge < test_idx.min()  # purge = horizon 15
    assert prepared.folds[-1][1][-1] == N_BARS - 1
    assert prepared.features.shape == (N_BARS, 14)
    close = prepared.bars.close
    np.testing.assert_allclose(prepared.next_ret[:-1].numpy(), close[1:] / close[:-1] - 1)
    assert prepared.next_ret[-1] == 0


def test_fold_data_fits_on_training_bars_only(prepared):
    fd = engine.fold_data(prepared, 0)
    train = torch.as_tensor(fd.train_idx)
    raw = prepared.features[train].double()
    torch.testing.assert_close(fd.normalizer.mean, raw.mean(0).float())
    fwd = prepared.fwd[train]
    fwd = fwd[~torch.isnan(fwd)].abs()
    share_flat = float((fwd <= fd.flat_threshold).double().mean())
    assert abs(share_flat - prepared.cfg.labels.flat_fraction) < 0.01


def test_poisoning_after_test_start_changes_no_training_input(bars, tmp_path):
    """Scramble every bar from fold 0's test start on: fold 0's inputs, thresholds and trained weights stay identical."""
    cfg = tiny_cfg(train={"steps": 4})
    clean = engine.prepare(cfg, bars, "cpu")
    test_lo = int(clean.folds[0][1][0])
    rng = np.random.default_rng(9)
    cols = {f.name: getattr(bars, f.name).copy() for f in dataclasses.fields(bars) if f.name not in ("symbol", "interval")}
    m = len(bars) - test_lo
    scale = np.exp(rng.normal(0, 0.2, m))
    for name in ("open", "high", "low", "close"):
        cols[name][test_lo:] *= scale
    cols["volume"][test_lo:] = rng.exponential(50, m)
    cols["taker_buy_base"][test_lo:] = cols["volume"][test_lo:] * rng.random(m)
    cols["trades"][test_lo:] = rng.integers(0, 5000, m)
    poisoned = engine.prepare(cfg, type(bars)(**cols, symbol=bars.symbol, interval=bars.interval), "cpu")

    a, b = engine.fold_data(clean, 0), engine.fold_data(poisoned, 0)
    assert a.flat_threshold == b.flat_threshold
    torch.testing.assert_close(a.normalizer.mean, b.normalizer.mean, rtol=0, atol=0)
    torch.testing.assert_close(a.normalizer.std, b.normalizer.std, rtol=0, atol=0)
    assert torch.equal(a.features[:test_lo], b.features[:test_lo])  # every input a window can read
    assert torch.equal(a.labels[a.train_idx], b.labels[b.train_idx])
    assert not torch.equal(a.labels[test_lo:], b.labels[test_lo:])  # the poison did land

    engine.run_fold(clean, 32, 0, 0, checkpoint_dir=tmp_path / "clean")
    engine.run_fold(poisoned, 32, 0, 0, checkpoint_dir=tmp_path / "poisoned")
    wa = torch.load(tmp_path / "clean" / "fold0-n32-seed0.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "poisoned" / "fold0-n32-seed0.pt", weights_only=True)["model"]
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


# ---- training budget identical across N ------------------------------------------------------------


def test_identical_parameters_and_steps_across_n(results):
    a, b = results[32].cost, results[64].cost
    assert a["n_params"] == b["n_params"] > 0
    assert a["steps"] == b["steps"] == 12
    assert a["tokens_per_step"] == b["tokens_per_step"] == 2048
    assert (a["batch_size"], b["batch_size"]) == (64, 32)
    assert a["backend"] in ("flash", "efficient", "cudnn", "math")
    for c, n in ((a, 32), (b, 64)):
        assert c["flops_per_token"] == 6 * c["n_params"] + 12 * 1 * 16 * n / 2
        assert c["train_seconds"] > 0 and c["tokens_per_s"] > 0 and c["peak_memory_bytes"] > 0
        tokens = c["steps"] * c["tokens_per_step"]
        assert math.isclose(c["epoch_seconds"], c["train_seconds"] * c["n_train_bars"] / tokens)


def test_initial_weights_depend_on_the_seed_only(prepared, tmp_path):
    """With lr = 0 the checkpointed weights are the initial ones: identical at N = 32 and N = 64."""
    zero = {"steps": 1, "lr": 0.0}
    engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, train_overrides=zero)
    engine.run_fold(prepared, 64, 1, 0, checkpoint_dir=tmp_path, train_overrides=zero)
    engine.run_fold(prepared, 64, 1, 1, checkpoint_dir=tmp_path, train_overrides=zero)
    w = {name: torch.load(tmp_path / f"{name}.pt", weights_only=True)["model"]
         for name in ("fold1-n32-seed0", "fold1-n64-seed0", "fold1-n64-seed1")}
    assert all(torch.equal(w["fold1-n32-seed0"][k], v) for k, v in w["fold1-n64-seed0"].items())
    assert not all(torch.equal(w["fold1-n64-seed1"][k], v) for k, v in w["fold1-n64-seed0"].items())


def test_step_sampling_is_a_function_of_seed_fold_step():
    a = engine.sample_starts(1000, 8, 0, 1, 5)
    assert torch.equal(a, engine.sample_starts(1000, 8, 0, 1, 5))
    assert not torch.equal(a, engine.sample_starts(1000, 8, 0, 1, 6))
    assert not torch.equal(a, engine.sample_starts(1000, 8, 0, 2, 5))
    assert not torch.equal(a, engine.sample_starts(1000, 8, 1, 1, 5))


def test_learning_rate_schedule():
    lrs = [engine.lr_at(s, 10, 1.0, 2, 0.1) for s in range(10)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[2] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert all(x >= y for x, y in itertools.pairwise(lrs[1:]))


def test_a_training_step_is_the_models_loss_backward_clip_and_adamw(prepared, tmp_path, monkeypatch):
    """Parity with a hand-written step: the loss the engine trains on is `model(x, y)[1]`, and one
    step of backward, clipping and AdamW from the seed's weights gives the checkpointed weights."""
    from tsflash.model.transformer import CausalTransformer, ModelConfig

    calls = []
    forward = CausalTransformer.forward

    def spy(self, x, targets=None, loss_denominator=None):
        logits, loss = forward(self, x, targets, loss_denominator)
        if self.training:
            calls.append((x.clone(), None if targets is None else targets.clone(), loss_denominator, loss))
        return logits, loss

    monkeypatch.setattr(CausalTransformer, "forward", spy)
    engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, train_overrides={"steps": 1})
    monkeypatch.undo()
    assert len(calls) == 1 and calls[0][1] is not None  # one training forward, given the targets
    x, y, denominator, loss = calls[0]
    cfg, tc = prepared.cfg, prepared.cfg.train
    # the loss divides by the expected count of scored positions in a batch, not this batch's count
    fd = engine.fold_data(prepared, 1)
    lo, hi = fit_pieces(engine.contiguous_runs(fd.fit_idx), prepared.segments, 32)
    assert denominator == pytest.approx(x.shape[0] * BalancedWindows(lo, hi, 32).scored_per_window(), rel=1e-12)
    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=x.shape[-1], **dataclasses.asdict(cfg.model)))
    _, ref = model(x, y, denominator)
    assert torch.equal(ref, loss.detach()) and bool((y >= 0).any())
    ref.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": tc.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    lr = engine.lr_at(0, 1, tc.lr, tc.warmup_steps, tc.min_lr_ratio)
    torch.optim.AdamW(groups, lr=lr, betas=tuple(tc.betas)).step()
    saved = torch.load(tmp_path / "fold1-n32-seed0.pt", weights_only=True)["model"]
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[k]), k


def test_each_cell_records_the_kernel_the_profiler_saw(prepared, results):
    cost = results[32].cost
    assert cost["backend"] == "flash" and cost["backend_observed"] == "flash CPU"
    assert cost["kernels_observed"] == ["aten::_scaled_dot_product_flash_attention_for_cpu",
                                        "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]
    # observed, not derived from the forced name: the MATH kernel shows up as itself
    math_cell = engine.run_fold(prepared, 32, 1, 0, train_overrides={"steps": 1},
                                model_overrides={"attention_backend": "math"})
    assert math_cell.cost["backend"] == "math" and math_cell.cost["backend_observed"] == "MATH"
    assert math_cell.cost["kernels_observed"] == ["aten::_scaled_dot_product_attention_math"]


def test_model_path_saves_the_trained_model(prepared, results, tmp_path):
    from tsflash.model.transformer import CausalTransformer

    r = engine.run_fold(prepared, 32, 1, 0, model_path=tmp_path / "models" / "n32.pt")
    np.testing.assert_array_equal(r.y_prob, results[32].y_prob)
    model = CausalTransformer.load(tmp_path / "models" / "n32.pt").eval()
    fd = engine.fold_data(prepared, 1)
    _, _, probs = engine.predict_range(model, fd.features, fd.test_lo, fd.test_hi, 32, 4096, "cpu")
    np.testing.assert_array_equal(probs.numpy(), r.y_prob)  # the saved weights are the ones that were scored


def test_bad_context_length_and_budget_are_user_errors(prepared):
    with pytest.raises(UserError, match="tokens_per_step=2048 must be a positive multiple of the context length n=48"):
        engine.run_fold(prepared, 48, 1, 0)
    with pytest.raises(UserError, match="context length n must be an even integer >= 2, got 7"):
        engine.run_fold(prepared, 7, 1, 0)
    with pytest.raises(UserError, match=r"unknown train override\(s\) \['stpes'\]"):
        engine.run_fold(prepared, 32, 1, 0, train_overrides={"stpes": 3})
    with pytest.raises(UserError, match=r"unknown model override\(s\) \['width'\]"):
        engine.run_fold(prepared, 32, 1, 0, model_overrides={"width": 3})
    with pytest.raises(UserError, match=r"fold must be in \[0, 2\), got 5"):
        engine.run_fold(prepared, 32, 5, 0)


# ---- evaluation: every test bar once, context in [N/2, N] -------------------------------------------


def test_every_test_bar_scored_exactly_once(prepared, results):
    test_idx = prepared.folds[1][1]
    for r in results.values():
        np.testing.assert_array_equal(r.test_time, prepared.open_time[test_idx])
        assert len(np.unique(r.test_time)) == len(test_idx)
        assert r.y_prob.dtype == np.float32 and r.y_prob.shape == (len(test_idx), 3)
        np.testing.assert_allclose(r.y_prob.sum(1), 1, atol=1e-5)
        np.testing.assert_array_equal(r.position, r.y_prob.argmax(1) - 1)
        next_ret = prepared.next_ret[torch.as_tensor(test_idx)].numpy()
        np.testing.assert_allclose(r.gross_returns, r.position * next_ret)
        assert r.metrics["n_scored"] == int((r.y_true >= 0).sum()) > 0


class _Probe(torch.nn.Module):
    """Logits that encode the bar index of position 0 of the window (feature 0 carries the index)."""

    def forward(self, x):
        start = x[:, :1, 0:1]  # (B, 1, 1)
        return torch.cat([start.expand(-1, x.shape[1], 1), torch.zeros(*x.shape[:2], 2)], -1), None


@pytest.mark.parametrize("n,lo,hi", [(32, 16, 100), (64, 200, 201), (64, 40, 1000), (8, 4, 12)])
def test_predict_range_context_within_half_to_full_window(n, lo, hi):
    series = torch.arange(hi + 5, dtype=torch.float32)[:, None] / 1000  # (T, 1): feature = bar index / 1000
    bars, ctx, probs = engine.predict_range(_Probe(), series, lo, hi, n, batch_tokens=3 * n, device="cpu")
    assert torch.equal(bars, torch.arange(lo, hi))
    assert bool(((ctx >= n // 2) & (ctx <= n)).all())
    # the window really ends at the scored bar: start = bar - context + 1 (recovered from the probe)
    start = 1000 * torch.log(probs[:, 0] / probs[:, 1])  # softmax(s, 0, 0): log-odds = s
    torch.testing.assert_close(start, (bars - ctx + 1).float(), rtol=0, atol=0.05)


# ---- resume ----------------------------------------------------------------------------------------



def test_a_checkpoint_from_before_model_residual_still_belongs_to_its_run(prepared):
    """Checkpoints written before model.residual existed hashed model settings without it; at its
    old value ("param") the identity is theirs, at another it is another run's."""
    from tsflash.engine._checkpoint import checkpoint_identity as identity
    from tsflash.engine._train import _model_config

    settings, _ = _model_config(prepared.cfg, 5, None)
    tc = prepared.cfg.train
    before = {k: v for k, v in settings.items() if k != "residual"}
    assert settings["residual"] == "param"
    old = identity(prepared, 32, 1, 0, before, tc)
    assert identity(prepared, 32, 1, 0, settings, tc) == old
    assert identity(prepared, 32, 1, 0, settings | {"residual": "compute"}, tc) != old


def test_resume_after_kill_gives_identical_results(prepared, results, tmp_path):
    run_fold_killed_at(engine.run_fold, 5, prepared, 32, 1, 0, checkpoint_dir=tmp_path)
    blob = torch.load(tmp_path / "fold1-n32-seed0.pt", weights_only=True)
    assert blob["state"]["step"] == 5
    seen = []
    resumed = engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, on_step=seen.append)
    assert seen == list(range(6, 13))  # continued at step 6, did not restart
    full = results[32]
    np.testing.assert_array_equal(resumed.y_prob, full.y_prob)
    assert resumed.metrics == full.metrics and resumed.cost["steps"] == 12
    again = engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, on_step=seen.append)
    assert seen == list(range(6, 13))  # finished checkpoint: evaluation only
    np.testing.assert_array_equal(again.y_prob, full.y_prob)
    for r in (resumed, again):  # observed on step 1 of the first session; the checkpoint carries it
        assert r.cost["kernels_observed"] == full.cost["kernels_observed"]
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_checkpoint_keeps_the_training_state_as_the_dict_older_checkpoints_hold(prepared, tmp_path):
    """On disk the state stays the dict of every tsflash-fold-checkpoint-2 file (so those resume);
    TrainingState converts both ways."""
    engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, train_overrides={"steps": 2})
    saved = torch.load(tmp_path / "fold1-n32-seed0.pt", weights_only=True)["state"]
    assert list(saved) == ["step", "train_seconds", "val_seconds", "best_loss", "best_step", "bad_evals", "stopped",
                           "best_model", "kernels_observed", "loss_sum", "curve"]
    state = engine.TrainingState.from_dict(saved)
    assert state.step == 2 and not state.stopped and state.to_dict() == saved
    fresh = engine.TrainingState()
    assert fresh.curve == {"step": [], "train_loss": [], "val_loss": []} and fresh.curve is not engine.TrainingState().curve
    older = {k: v for k, v in fresh.to_dict().items() if k != "val_seconds"}  # written before validation was timed
    assert engine.TrainingState.from_dict(older).val_seconds is None


def test_checkpoint_of_another_run_is_refused(prepared, tmp_path):
    engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, train_overrides={"steps": 2})
    with pytest.raises(UserError, match="checkpoint .*fold1-n32-seed0.pt belongs to a different run"):
        engine.run_fold(prepared, 32, 1, 0, checkpoint_dir=tmp_path, train_overrides={"steps": 3})


VALIDATED = {"splits": {"val_days": 1}, "train": {"steps": 40, "eval_every": 3, "patience": 2, "lr": 3e-2}}


@pytest.fixture(scope="module")
def validated(bars):
    """A validation tail of one day, validation every 3 steps, patience 2, a high lr: it stops early."""
    return engine.prepare(tiny_cfg(**VALIDATED), bars, "cpu")


def test_validation_tail_is_purged_from_the_fit_range(validated):
    fd = engine.fold_data(validated, 1)
    lo, hi = fd.val
    assert hi == fd.train_idx[-1] + 1 and hi - lo == 1440  # one day of 1-minute bars
    assert fd.fit_idx.max() + validated.cfg.purge < lo  # no fit label's horizon reaches the tail
    assert fd.fit_idx.max() == lo - validated.cfg.purge - 1  # ... and nothing more is dropped
    with pytest.raises(UserError, match=r"fold 0: a validation tail of 8000 bars \(splits.val_days\) and its purge"):
        engine.split_validation(fd.train_idx[:100], 8000, 15, "fold 0")


def test_early_stopping_restores_the_best_weights(validated, tmp_path):
    r = engine.run_fold(validated, 32, 1, 0, model_path=tmp_path / "best.pt")
    c = r.cost
    curve = c["curve"]
    assert curve["step"] == list(range(3, c["stop_step"] + 1, 3)) or curve["step"][-1] == c["stop_step"] == 40
    assert c["stop_step"] < 40, "the high learning rate should overfit and stop early"
    best = int(np.argmin(curve["val_loss"]))
    assert c["best_step"] == curve["step"][best] and c["best_val_loss"] == curve["val_loss"][best]
    assert c["stop_step"] == c["best_step"] + 2 * 3  # two evaluations without improvement
    assert len(curve["train_loss"]) == len(curve["step"]) and all(np.isfinite(curve["train_loss"]))
    assert c["steps"] == c["stop_step"] and c["max_steps"] == 40 and (c["eval_every"], c["patience"]) == (3, 2)
    assert c["val_seconds"] > 0  # the validation passes' own wall-clock, apart from train_seconds
    # the scored model is the best one: its validation loss is the best, recomputed from the saved weights
    from tsflash.model.transformer import CausalTransformer

    model = CausalTransformer.load(tmp_path / "best.pt").eval()
    fd = engine.fold_data(validated, 1)
    again = engine.validation_loss(model, fd, fd.features, fd.labels, 32, 4096, "cpu")
    assert again == c["best_val_loss"]
    # the validation tail's probabilities (the trading rule's threshold is fitted on them) come from
    # the same best weights, bar for bar
    lo, hi = fd.val
    assert r.val_prob.shape == (hi - lo, 3) and np.array_equal(r.val_time, validated.open_time[lo:hi])
    expected = engine.predict_range(model, fd.features, lo, hi, 32, validated.cfg.eval.batch_tokens, "cpu")[2].numpy()
    assert np.array_equal(r.val_prob, expected)
    from tsflash.scoring.strategy import Strategy, horizon_path

    scored = horizon_path(Strategy(kind="horizon", horizon=15), r.y_prob, r.next_ret, 5.0, r.val_prob, r.val_next_ret)
    assert scored.threshold_source == "validation"


def test_resume_after_kill_mid_validation_interval_is_identical(validated, tmp_path):
    """Killed between two evaluations (step 7) and after the early stop: same curve, best step and scores."""
    full = engine.run_fold(validated, 32, 1, 0)

    run_fold_killed_at(engine.run_fold, 7, validated, 32, 1, 0, checkpoint_dir=tmp_path)
    seen = []
    resumed = engine.run_fold(validated, 32, 1, 0, checkpoint_dir=tmp_path, on_step=seen.append)
    assert seen[0] == 8 and seen[-1] == full.cost["stop_step"]
    again = engine.run_fold(validated, 32, 1, 0, checkpoint_dir=tmp_path, on_step=seen.append)  # stopped: scores only
    assert seen[-1] == full.cost["stop_step"]
    for r in (resumed, again):
        np.testing.assert_array_equal(r.y_prob, full.y_prob)
        for k in ("curve", "best_step", "best_val_loss", "stop_step", "steps"):
            assert r.cost[k] == full.cost[k], k


def test_validation_seconds_of_a_cell_resumed_from_an_older_checkpoint_are_unknown(validated, tmp_path):
    """A checkpoint written before validation was timed has no val_seconds: the resumed cell says
    None (n/a in the report), not the part after the resume as if it were all."""
    first = engine.run_fold(validated, 32, 1, 0, checkpoint_dir=tmp_path)
    assert first.cost["val_seconds"] > 0
    (path,) = tmp_path.glob("*.pt")
    blob = torch.load(path, weights_only=True)
    del blob["state"]["val_seconds"]
    blob["state"]["stopped"] = False  # so that the resumed cell trains and validates again
    torch.save(blob, path)
    again = engine.run_fold(validated, 32, 1, 0, checkpoint_dir=tmp_path)
    assert again.cost["steps"] > first.cost["steps"]  # it did validate after the resume
    assert again.cost["val_seconds"] is None


def test_a_fixed_budget_without_a_validation_tail(results):
    c = results[32].cost
    assert c["curve"] == {"step": [], "train_loss": [], "val_loss": []}
    assert c["best_step"] is None and c["stop_step"] == c["steps"] == c["max_steps"] == 12
    assert c["val_seconds"] == 0.0


# ---- far context: the same test bars with the context cut ----------------------------------------------


def test_truncated_scoring_scores_exactly_the_bars_of_the_full_scoring(prepared, tmp_path):
    from tsflash.model.transformer import CausalTransformer

    cfg = dataclasses.replace(prepared.cfg, eval=dataclasses.replace(prepared.cfg.eval, context_cuts=[16, 32, 64]))
    p = dataclasses.replace(prepared, cfg=cfg)
    r = engine.run_fold(p, 64, 1, 0, train_overrides={"steps": 3}, model_path=tmp_path / "m.pt")
    assert sorted(r.y_prob_cut) == [16, 32]  # only cuts below N
    model = CausalTransformer.load(tmp_path / "m.pt").eval()
    fd = engine.fold_data(p, 1)
    full_bars, full_ctx, full = engine.predict_range(model, fd.features, fd.test_lo, fd.test_hi, 64, 4096, "cpu")
    np.testing.assert_array_equal(full.numpy(), r.y_prob)
    for m, probs in r.y_prob_cut.items():
        bars, ctx, cut = engine.predict_range(model, fd.features, fd.test_lo, fd.test_hi, m, 4096, "cpu")
        assert torch.equal(bars, full_bars)  # the same bars, each once, in the same order
        assert bool((ctx <= m).all()) and bool((full_ctx > m // 2).all())
        np.testing.assert_array_equal(cut.numpy(), probs)
        assert not np.array_equal(probs, r.y_prob)  # a shorter context does change the forecast
        expected = classification_metrics(r.y_true, probs) | direction_metrics(r.y_true, probs)
        # the cut scoring's log-loss parts too, so the nesting check can split it from summaries alone
        keys = ("log_loss", "accuracy", "balanced_accuracy", "mcc", "move_log_loss", "direction_log_loss_moves",
                "moves_fraction")
        assert r.far_context[str(m)] == {k: expected[k] for k in keys}
    # saved and loaded with the cell; a cell saved before cuts existed still loads
    back = engine.FoldResult.load(r.save(tmp_path / "cell")[0])
    assert back.far_context == r.far_context and sorted(back.y_prob_cut) == [16, 32]
    np.testing.assert_array_equal(back.y_prob_cut[16], r.y_prob_cut[16].astype(np.float16).astype(np.float32))  # float16 on disk
    old = dataclasses.replace(r, far_context={}, y_prob_cut={})
    old.save(tmp_path / "old")
    js = tmp_path / "old.json"
    meta = __import__("json").loads(js.read_text())
    del meta["far_context"]
    js.write_text(__import__("json").dumps(meta))
    again = engine.FoldResult.load(tmp_path / "old")
    assert again.far_context == {} and again.y_prob_cut == {}


# ---- leak canary -----------------------------------------------------------------------------------


def test_leak_canary(prepared, results):
    """The future return as a feature must make accuracy jump; the pipeline's own features on a random
    walk must not (they may beat 1/3 a little: volatility clustering makes 'flat' partly predictable)."""
    leak_col = torch.nan_to_num(prepared.fwd, nan=0.0).float()[:, None]  # (T, 1): the label's own return
    leaky = dataclasses.replace(prepared, features=torch.cat([prepared.features, leak_col], 1))
    own = results[32].metrics["accuracy"]
    leaked = engine.run_fold(leaky, 32, 1, 0, train_overrides={"steps": 30}).metrics["accuracy"]
    assert own < 0.45, own
    assert leaked > 0.6 and leaked > own + 0.2, (own, leaked)


# ---- baselines ---------------------------------------------------------------------------------------


def test_baselines_same_bars_same_metrics(prepared, results):
    base = engine.run_baselines(prepared, 1)
    assert set(base) == {"prior", "logreg", "volatility", "probe-32", "probe-64"}  # the default has eval.probe
    fd = engine.fold_data(prepared, 1)
    y = fd.labels[torch.as_tensor(fd.train_idx)]
    prior = torch.bincount(y[y >= 0], minlength=3).double()
    prior = (prior / prior.sum()).float().numpy()
    np.testing.assert_allclose(base["prior"].y_prob, np.tile(prior, (len(fd.test_idx), 1)))
    assert len(np.unique(base["prior"].position)) == 1
    for r in base.values():
        np.testing.assert_array_equal(r.test_time, results[32].test_time)
        np.testing.assert_array_equal(r.y_true, results[32].y_true)
        assert set(r.metrics) == set(results[32].metrics)
    assert base["logreg"].n == 4 and base["logreg"].metrics["accuracy"] < 0.5


def test_probe_baselines_one_per_n_on_the_same_rows_and_bars(bars, results):
    """eval.probe adds probe-<N> per N: fitted on the same rows at every N (whole contexts of the
    longest N), scored on the transformer's test bars; each equals the dataset-level probe's fit."""
    from tsflash.dataset.probe import fit_probe, probe_features, subsample_rows

    prepared = engine.prepare(tiny_cfg(eval={"probe": True}), bars, "cpu")
    base = engine.run_baselines(prepared, 1)
    fd = engine.fold_data(prepared, 1)
    labels = fd.labels.numpy()
    train = fd.fit_idx[labels[fd.fit_idx] >= 0]
    rows = subsample_rows(train[train >= 63], engine.MAX_LOGREG_ROWS)
    for n in (32, 64):
        r = base[f"probe-{n}"]
        assert r.n == n and r.cost["n_fit"] == len(rows) and r.cost["probe_windows"] == ([1, 4, 16, 32] if n == 32 else [1, 4, 16, 64])
        np.testing.assert_array_equal(r.test_time, results[32].test_time)
        np.testing.assert_array_equal(r.y_true, results[32].y_true)
        reference = fit_probe(probe_features(bars.close, n), labels, rows, fd.test_idx, n)
        np.testing.assert_allclose(r.y_prob, reference.prob, atol=1e-6)
        assert r.metrics["log_loss"] == pytest.approx(reference.log_loss, abs=1e-6)
    with pytest.raises(UserError, match=r"fold 0: eval.probe needs labelled training rows with a whole context of the longest N=8192"):
        engine.run_baselines(engine.prepare(tiny_cfg(lengths=[32, 8192], train={"tokens_per_step": 8192}, eval={"probe": True}), bars, "cpu"), 0)
    off = engine.run_baselines(engine.prepare(tiny_cfg(eval={"probe": False}), bars, "cpu"), 1)
    assert set(off) == {"prior", "logreg", "volatility"}


# ---- results and metrics ----------------------------------------------------------------------------


def test_fold_result_round_trip(results, tmp_path):
    r = results[64]
    npz, js = r.save(tmp_path / "fold1-n64")
    assert npz.name == "fold1-n64.npz" and js.name == "fold1-n64.json"
    back = engine.FoldResult.load(tmp_path / "fold1-n64")
    for f in dataclasses.fields(r):
        a, b = getattr(r, f.name), getattr(back, f.name)
        if isinstance(a, np.ndarray) and f.name in ("y_prob", "val_prob"):  # stored as float16 on disk
            np.testing.assert_array_equal(a.astype(np.float16).astype(np.float32), b)
        elif isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b, f.name
    assert not list(tmp_path.glob("*.tmp-*"))
    with pytest.raises(UserError, match="fold result not found"):
        engine.FoldResult.load(tmp_path / "nope")


def test_pooled_metrics(results):
    a, b = results[32], results[64]
    pooled = pooled_metrics([a, b])
    assert pooled["n_scored"] == a.metrics["n_scored"] + b.metrics["n_scored"]
    assert pooled["mean_net_return"] == pytest.approx(np.mean(np.concatenate([a.net_returns, b.net_returns])))
    with pytest.raises(UserError, match="at least one fold result"):
        pooled_metrics([])


def test_strategy_returns_worked_example():
    pos = np.array([1, 1, -1, 0, 0], dtype=np.int8)
    nxt = np.array([0.01, -0.02, 0.03, 0.5, -0.01])
    gross, net = strategy_returns(pos, nxt, fee_bps=10)
    np.testing.assert_allclose(gross, [0.01, -0.02, -0.03, 0, 0])
    np.testing.assert_allclose(net, [0.01 - 0.001, -0.02, -0.03 - 0.002, -0.001, 0])
    with pytest.raises(UserError, match="positions must be -1, 0 or \\+1, got \\[0 2\\]"):
        strategy_returns(np.array([2, 0]), np.zeros(2), 5)
    with pytest.raises(UserError, match="fee_bps must be >= 0, got -1"):
        strategy_returns(pos, nxt, -1)


def test_classification_metrics_worked_example():
    y_true = np.array([0, 0, 1, 2, 2, -1])
    pred = np.array([0, 1, 1, 2, 0, 2])
    prob = np.full((6, 3), 0.2, dtype=np.float32)
    prob[np.arange(6), pred] = 0.6
    m = classification_metrics(y_true, prob)
    assert m["n_scored"] == 5 and m["accuracy"] == pytest.approx(3 / 5)
    assert m["balanced_accuracy"] == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    assert m["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    assert m["log_loss"] == pytest.approx(-(3 * math.log(0.6) + 2 * math.log(0.2)) / 5, rel=1e-6)
    assert m["macro_f1"] == pytest.approx((0.5 + 2 / 3 + 2 / 3) / 3)
    assert -1 <= m["mcc"] <= 1
    assert list(positions_from_probs(prob)) == [-1, 0, 0, 1, -1, 1]
    assert math.isnan(classification_metrics(np.array([-1]), prob[:1])["accuracy"])
    with pytest.raises(UserError, match=r"y_prob must have shape \(len\(y_true\), 3\), got \(6, 2\)"):
        classification_metrics(y_true, prob[:, :2])


# ---- real data --------------------------------------------------------------------------------------


def test_real_slice_with_a_long_gap(shared_store):
    """A week of real bars around the 80-minute outage of 2023-03-24: prepare, train, score."""
    from tsflash.data.store import load_bars

    bars = load_bars(shared_store, start="2023-03-19", end="2023-03-26")
    cfg = tiny_cfg(train={"steps": 3})
    p = engine.prepare(cfg, bars, "cpu")
    assert int(p.segments.max()) == 1  # the 80-minute gap > max_gap_bars = 60 splits the series
    r = engine.run_fold(p, 64, 0, 0)
    assert len(r.test_time) == 1440 and r.cost["steps"] == 3
    assert np.isfinite(r.net_returns).all()
