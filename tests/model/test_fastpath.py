"""tsflash.model.fastpath: the rotary tables reserved before compiling, a compiled cell in the real
training loop (CUDA-graph step marks included), and its record in the cell's cost.

CUDA graphs run on CUDA only; on CPU the compiled path runs with torch.compile's "aot_eager"
backend (the same dynamo graph and autograd split as inductor, without generating code), and the
test on a GPU runs the real mode "reduce-overhead".
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from tsflash import CausalTransformer, ModelConfig, engine
from tsflash.config import load_config
from tsflash.data.synthetic import random_walk_bars
from tsflash.model import fastpath
from tsflash.model.rotary import ROTARY_AUTO_LONGEST

TINY = {"lengths": [32], "splits": {"n_folds": 1, "test_days": 1, "val_days": 1},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 3, "tokens_per_step": 256, "warmup_steps": 1, "eval_every": 2},
        "eval": {"baseline_lags": 2, "context_cuts": [16]}}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def compile_on_cpu(monkeypatch, tmp_path, compile_cache_settings):
    """fastpath's compile branch on CPU: no eager reason, torch.compile through "aot_eager" (no
    compiled forward kept from before, the compile cache in tmp_path); counts the calls of the
    compiled forward and the CUDA-graph step marks, and what torch.compile was given:
    {"calls": [...], "marks": [...], "kwargs": [...]}."""
    real_compile = torch.compile
    seen = {"calls": [], "marks": [], "kwargs": []}

    def compile(model, mode=None, options=None, dynamic=None):
        seen["kwargs"].append({"mode": mode, "options": options, "dynamic": dynamic})
        compiled = real_compile(model, backend="aot_eager", dynamic=dynamic)

        def call(*args, **kwargs):
            seen["calls"].append(len(seen["marks"]))  # the marks made before this call
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(fastpath, "eager_reason", lambda device: None)
    monkeypatch.setattr(fastpath, "_COMPILED", {})
    monkeypatch.setenv(fastpath.CACHE_ENV, str(tmp_path / "compile-cache"))
    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: seen["marks"].append(1))
    return seen


def tiny_cell(compile, device="cpu"):
    cfg = load_config("default", {**TINY, "train": {**TINY["train"], "compile": compile}})
    prepared = engine.prepare(cfg, random_walk_bars(8000, seed=1), device)
    return engine.run_fold(prepared, 32, 0, 0)


def test_prepare_reserves_the_rotary_tables_before_any_forward(fresh_dynamo, compile_on_cpu):
    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    assert fastpath.prepare(model, "cpu", n=64, batch=2) is model
    assert model.rope_cos.shape == (64, 4)  # eager: the cell's N
    compiled = fastpath.prepare(model, "cpu", n=64, batch=2, compile="reduce-overhead")
    assert isinstance(compiled, fastpath.Compiled) and compiled.graphs
    # compiled: one length for every N, so the compiled forward's guards do not change with N
    assert model.rope_cos.shape == (ROTARY_AUTO_LONGEST, 4)
    big = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    fastpath.prepare(big, "cpu", n=2 * ROTARY_AUTO_LONGEST, batch=1, compile=True)
    assert big.rope_cos.shape == (2 * ROTARY_AUTO_LONGEST, 4)


def test_the_tuned_mode_passes_inductor_options_not_a_mode(fresh_dynamo, compile_on_cpu):
    """torch.compile takes a mode or options, not both: "tuned" (tsflash's) is "default" with
    inductor's Triton kernels tuned, so options only; torch's modes go through as modes."""
    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    tuned = fastpath.prepare(model, "cpu", n=64, batch=2, compile="tuned")
    assert isinstance(tuned, fastpath.Compiled) and not tuned.graphs and model.compile_info["mode"] == "tuned"
    fastpath.prepare(model, "cpu", n=64, batch=2, compile="reduce-overhead")
    assert compile_on_cpu["kwargs"] == [
        {"mode": None, "options": {"max_autotune_pointwise": True, "coordinate_descent_tuning": True}, "dynamic": False},
        {"mode": "reduce-overhead", "options": None, "dynamic": False}]
    with pytest.raises(ValueError, match="compile mode must be one of default, reduce-overhead, tuned.*got 'fast'"):
        fastpath.compile_kwargs("fast")


def test_a_compiled_cell_marks_each_step_and_matches_eager(fresh_dynamo, compile_on_cpu, caplog, monkeypatch):
    """Training (with validation) and scoring (with a context cut) through the Compiled wrapper in
    mode "reduce-overhead": a CUDA-graph step mark before every compiled call (the training steps;
    evaluation runs eager, fastpath.COMPILE_EVALUATION), the same forecasts as eager up to float
    rounding, and the compile outcome in the cell's cost."""
    caplog.set_level(logging.WARNING, logger="tsflash.model.fastpath")
    monkeypatch.setattr(fastpath, "COMPILE_MODE", "reduce-overhead")  # train.compile = true compiles in this mode
    eager = tiny_cell(False)
    compiled = tiny_cell(True)
    assert "running eager" not in caplog.text  # no compiler failure fell back
    np.testing.assert_allclose(compiled.y_prob, eager.y_prob, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled.y_prob_cut[16], eager.y_prob_cut[16], rtol=1e-4, atol=1e-5)
    info = compiled.cost["compile"]
    assert info["compiled"] is True and info["mode"] == "reduce-overhead" and info["reason"] is None
    # the first call of the training shape timed (8 windows of 32) and its backward; validation,
    # test and the cut run eager: no first call of theirs
    training = sorted(info["first_call_seconds"])
    assert len(training) == 2 and training[0].startswith("(8, 32, ") and training[1] == training[0] + " backward", training
    assert all(t > 0 for t in info["first_call_seconds"].values())
    # a CUDA-graph step begins before every compiled call: the 3 training steps
    assert compile_on_cpu["calls"] == [1, 2, 3]
    assert eager.cost["compile"] == {"compiled": False, "mode": None, "reason": "train.compile is off"}
    for cost in (eager.cost, compiled.cost):
        assert cost["kernel_choice"]["chosen"] == "flash"
        assert cost["kernel_choice"]["shape"] == {"batch": 8, "heads": 2, "n": 32}


def test_a_compiled_cell_observes_its_kernels_after_the_compiling_step(fresh_dynamo, compile_on_cpu, monkeypatch):
    """The profiler that proves which kernel ran would also record every op of compiling: a
    compiled cell is observed on its second step (one compiled call before), an eager one on its first."""
    from tsflash.model import attention

    real = attention.observe_kernel_ops
    calls_before = []

    def observe():
        calls_before.append(len(compile_on_cpu["calls"]))
        return real()

    monkeypatch.setattr(attention, "observe_kernel_ops", observe)
    compiled = tiny_cell(True)
    assert calls_before == [1]
    assert compiled.cost["backend_observed"] == "flash CPU"
    eager = tiny_cell(False)
    assert calls_before == [1, len(compile_on_cpu["calls"])]  # eager: before any call of its own
    assert eager.cost["kernels_observed"] == compiled.cost["kernels_observed"]
    # a compiled cell of one step has no later step: observed on the compiling one
    cfg = load_config("default", {**TINY, "train": {**TINY["train"], "compile": True, "steps": 1, "warmup_steps": 0,
                                                   "eval_every": 1}})
    one = engine.run_fold(engine.prepare(cfg, random_walk_bars(8000, seed=1), "cpu"), 32, 0, 0)
    assert one.cost["steps"] == 1 and one.cost["kernels_observed"] == eager.cost["kernels_observed"]


def test_the_chosen_rule_trains_compiled_as_eager_with_no_graph_per_restart(fresh_dynamo, compile_on_cpu, caplog):
    """The training rule of the third edition's plan (a weight average, short windows mixed into the
    long batch, screened restarts) through the compiled forward: the same forecasts as eager up to
    float rounding, and the restarts compile no graph of their own (a cell's graphs are its shapes':
    long windows, short windows, scoring), so compiling costs a cell what it costs without them."""
    from torch._dynamo.utils import counters

    caplog.set_level(logging.WARNING, logger="tsflash.model.fastpath")

    def cell(compile: bool, restarts: int):
        rule = {"ema_decay": 0.9, "short_fraction": 0.25, "short_length": 16, "restarts": restarts,
                "restart_screen": 4 if restarts > 1 else 0}
        cfg = load_config("default", {**TINY, "lengths": [64], "train": {**TINY["train"], "steps": 6, "eval_every": 2,
                                                                        "tokens_per_step": 512, "compile": compile, **rule}})
        counters.clear()
        torch._dynamo.reset()
        result = engine.run_fold(engine.prepare(cfg, random_walk_bars(12000, seed=1), "cpu"), 64, 0, 0)
        return result, counters["stats"]["unique_graphs"]

    eager, _ = cell(False, 3)
    compiled, graphs = cell(True, 3)
    _, graphs_one_training = cell(True, 1)
    assert "running eager" not in caplog.text  # no compiler failure fell back
    np.testing.assert_allclose(compiled.y_prob, eager.y_prob, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled.y_prob_cut[16], eager.y_prob_cut[16], rtol=1e-4, atol=1e-5)
    assert compiled.cost["compile"]["compiled"] is True and compiled.cost["best_step"] == eager.cost["best_step"]
    assert 0 < graphs == graphs_one_training
    shapes = {k.split(")")[0] + ")" for k in compiled.cost["compile"]["first_call_seconds"]}
    assert {tuple(map(int, k.strip("()").split(", ")))[1] for k in shapes} == {64, 16}  # long and short windows


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_reduce_overhead_runs_a_cell_on_cuda(fresh_dynamo, monkeypatch):
    """On a GPU: the real mode "reduce-overhead" (CUDA graphs) trains, validates and scores a
    cell; the forecasts agree with eager to bf16 rounding."""
    monkeypatch.setattr(fastpath, "COMPILE_MODE", "reduce-overhead")
    eager = tiny_cell(False, "cuda")
    compiled = tiny_cell(True, "cuda")
    info = compiled.cost["compile"]
    assert info["compiled"] is True and info["mode"] == "reduce-overhead", info
    np.testing.assert_allclose(compiled.y_prob, eager.y_prob, atol=2e-2)


def test_the_loss_denominator_is_not_compiled_into_the_graph(fresh_dynamo):
    """Each fold has its own float denominator; a constant of the graph would recompile it for every
    fold (62 s on the H200). One compilation serves every denominator, and the loss is the eager
    model's bit for bit."""
    from torch._dynamo.testing import CompileCounter

    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    model.reserve_positions(32)
    counter = CompileCounter()
    forward = fastpath.Compiled(model, torch.compile(model, backend=counter), "default")
    x, y = torch.randn(4, 32, 3), torch.randint(0, 3, (4, 32))
    y[:, :5] = -1
    frames = []
    for denominator in (100.0, 123.456, 7.0):
        _, loss = forward(x, y, denominator)
        _, eager = model(x, y, denominator)
        assert torch.equal(loss, eager), denominator
        frames.append(counter.frame_count)
    assert frames[0] > 0 and frames == [frames[0]] * 3  # compiled once, for the first denominator only
    _, mean = forward(x, y)  # no denominator: the mean over scored positions, as eager
    assert torch.equal(mean, model(x, y)[1])



def test_the_first_backward_of_a_shape_is_timed_once(fresh_dynamo):
    """The backward graph compiles at the first backward: its seconds join the shape's first call's,
    under "<shape> backward"; the hooks that time it are gone afterwards."""
    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    model.reserve_positions(32)
    forward = fastpath.Compiled(model, torch.compile(model, backend="aot_eager"), "default")
    x, y = torch.randn(4, 32, 3), torch.randint(0, 3, (4, 32))
    forward(x, y, 50.0)  # a first call whose loss is never backpropagated: nothing to time
    assert set(model.compile_info["first_call_seconds"]) == {"(4, 32, 3)"}
    forward(x[:2], y[:2], 50.0)[1].backward()
    firsts = model.compile_info["first_call_seconds"]
    assert set(firsts) == {"(4, 32, 3)", "(2, 32, 3)", "(2, 32, 3) backward"} and firsts["(2, 32, 3) backward"] > 0
    timed = dict(firsts)
    for _ in range(2):  # later calls and backwards of known shapes change nothing
        forward(x, y, 50.0)[1].backward()
        forward(x[:2], y[:2], 50.0)[1].backward()
    assert model.compile_info["first_call_seconds"] == timed
    assert not model.inp.weight._post_accumulate_grad_hooks  # removed once it ran
