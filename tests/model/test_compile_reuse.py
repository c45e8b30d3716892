"""Compiled training paid once (issue 58): within a process every cell of a shape reuses the graph
its first cell compiled, a new N compiles exactly one, static; across processes inductor's caches
in `fastpath.compile_cache_dir()` serve the next run; with train.compile off nothing changes.

On CPU the compiled path runs through a counting backend over torch.compile's "aot_eager" (dynamo's
guards and recompiles, and the autograd split, are inductor's; only code generation is left out,
which would cost about 20 s per graph here). The cross-process test runs inductor itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from tests.conftest import REPO
from tsflash import engine
from tsflash.config import load_config
from tsflash.data.synthetic import random_walk_bars
from tsflash.model import fastpath

pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread

TINY = {"lengths": [32, 64, 128], "splits": {"n_folds": 2, "test_days": 1, "val_days": 1},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 3, "tokens_per_step": 512, "warmup_steps": 1, "eval_every": 2},
        "eval": {"baseline_lags": 2, "context_cuts": [16]}}


@pytest.fixture
def counted(monkeypatch, tmp_path, compile_cache_settings):
    """fastpath's compile branch on CPU through a counting "aot_eager" backend, with no compiled
    forward made before (`fastpath._COMPILED`) and dynamo's caches empty; the cache in tmp_path."""
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(fastpath, "eager_reason", lambda device: None)
    monkeypatch.setattr(fastpath, "compile_kwargs", lambda mode: {"backend": counter})
    monkeypatch.setattr(fastpath, "_COMPILED", {}, raising=False)
    monkeypatch.setenv(fastpath.CACHE_ENV, str(tmp_path / "cache"))
    torch._dynamo.reset()
    counters.clear()
    yield counter
    torch._dynamo.reset()


def tiny_prepared(compile: bool):
    cfg = load_config("default", {**TINY, "train": {**TINY["train"], "compile": compile}})
    return engine.prepare(cfg, random_walk_bars(12000, seed=1), "cpu")


def test_cells_of_one_shape_share_one_graph_and_each_new_n_compiles_one(counted):
    """Fresh models (other seeds, folds) at a shape compile nothing; every N compiles one static
    training graph (forward and backward); validation, test and context cuts run eager. Before
    issue 58 the first cell compiled 3 graphs (training, no-grad scoring, the cut of 16), the
    second N one with symbolic sizes, and the third N none: it ran the second N's graph."""
    prepared = tiny_prepared(True)
    graphs = []
    for n, fold, seed in [(32, 0, 0), (32, 0, 1), (32, 1, 0), (64, 0, 0), (64, 1, 1), (128, 0, 0), (32, 1, 2)]:
        result = engine.run_fold(prepared, n, fold, seed)
        assert result.cost["compile"]["compiled"] is True
        graphs.append(counted.frame_count)
    assert graphs == [1, 1, 1, 2, 2, 3, 3]
    assert counters["stats"]["unique_graphs"] == 3
    # static graphs: every input of every graph has its sizes as numbers (the batch: 512 / N windows)
    shapes = [{node.name: tuple(node.meta["example_value"].shape) for node in gm.graph.nodes
               if node.op == "placeholder" and isinstance(node.meta.get("example_value"), torch.Tensor)}
              for gm in counted.graphs]
    assert all(isinstance(d, int) for graph in shapes for shape in graph.values() for d in shape), shapes
    assert [graph["l_targets_"] for graph in shapes] == [(16, 32), (8, 64), (4, 128)], shapes


def test_a_compiled_cell_scores_eager_and_trains_compiled(counted):
    """Training calls go through the compiled forward (one first call and its backward timed),
    evaluation calls run the model itself; the process's compiled forward is one object per mode."""
    result = engine.run_fold(tiny_prepared(True), 32, 0, 0)
    firsts = result.cost["compile"]["first_call_seconds"]
    shape = min(firsts)
    assert shape.startswith("(16, 32, ") and sorted(firsts) == [shape, f"{shape} backward"]
    assert fastpath.compiled_forward("default") is fastpath.compiled_forward("default")
    assert torch._dynamo.config.recompile_limit >= fastpath.RECOMPILE_LIMIT


def test_the_compile_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(fastpath.CACHE_ENV, str(tmp_path / "mine"))
    assert fastpath.compile_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(fastpath.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fastpath.compile_cache_dir() == tmp_path / "xdg" / "tsflash" / "compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fastpath.compile_cache_dir() == tmp_path / "home" / ".cache" / "tsflash" / "compile"


def test_compiling_points_inductor_at_the_cache_and_eager_touches_nothing(counted, monkeypatch, tmp_path):
    import torch._inductor.config as inductor_config

    from tsflash import CausalTransformer, ModelConfig

    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    assert fastpath.prepare(model, "cpu", n=32, batch=2) is model  # train.compile off
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and not (tmp_path / "cache").exists()
    assert inductor_config.unsafe_marked_cacheable_functions == {}
    compiled = fastpath.prepare(model, "cpu", n=32, batch=2, compile=True)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache") and (tmp_path / "cache").is_dir()
    assert model.compile_info["cache_dir"] == str(tmp_path / "cache") and compiled.info is model.compile_info
    assert set(inductor_config.unsafe_marked_cacheable_functions) == set(fastpath.SDPA_GRAPH_FUNCTIONS)


# One process compiling a tiny model's training step with inductor, as a resumed run would.
_STEP = """
import json, sys, torch
from torch._dynamo.utils import counters
from tsflash import CausalTransformer, ModelConfig
from tsflash.model import fastpath
fastpath.eager_reason = lambda device: None  # compile on CPU
torch.set_num_threads(1)
torch.manual_seed(0)
model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
forward = fastpath.prepare(model, "cpu", n=32, batch=4, compile=True)
x, y = torch.randn(4, 32, 3), torch.randint(0, 3, (4, 32))
loss = forward(x, y, 100.0)[1]
loss.backward()
print(json.dumps({"loss": loss.item(), "aot": dict(counters["aot_autograd"]), "inductor": dict(counters["inductor"]),
                  "info": model.compile_info}))
"""


@pytest.mark.slow  # inductor compiling on 2 shared cores: about 20 s, then about 2 s from the cache
def test_a_second_process_loads_the_compiled_step_from_the_cache(tmp_path):
    env = {**os.environ, fastpath.CACHE_ENV: str(tmp_path / "cache"), "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", _STEP], check=False, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["info"]["compiled"] is True and first["info"]["cache_dir"] == str(tmp_path / "cache")
    assert first["inductor"].get("fxgraph_cache_miss", 0) >= 2 and first["aot"].get("autograd_cache_saved") == 1
    assert (tmp_path / "cache" / "fxgraph").is_dir() and any((tmp_path / "cache" / "aotautograd").iterdir())
    # the second process compiles nothing: forward and backward come from the cache, whole
    assert second["aot"].get("autograd_cache_hit") == 1 and "autograd_cache_miss" not in second["aot"]
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert second["loss"] == first["loss"]


def test_with_compile_off_the_engine_trains_as_a_hand_written_eager_loop(monkeypatch, tmp_path):
    """train.compile off (the default) leaves the eager path as it was: nothing is compiled, no
    cache is set up, and three steps of the engine equal, bit for bit, three steps of nanoGPT's loop
    written out here (forward with targets, backward, clip, AdamW at the scheduled rate) on the
    batches the engine drew: every step's loss and the checkpointed weights."""
    import dataclasses

    from tsflash.model.transformer import CausalTransformer, ModelConfig

    def refuse(*args, **kwargs):
        raise AssertionError("torch.compile called with train.compile off")

    monkeypatch.setattr(torch, "compile", refuse)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv(fastpath.CACHE_ENV, str(tmp_path / "cache"))
    calls = []
    forward = CausalTransformer.forward

    def spy(self, x, targets=None, loss_denominator=None):
        logits, loss = forward(self, x, targets, loss_denominator)
        if self.training:
            calls.append((x.clone(), targets.clone(), loss_denominator, loss.detach().clone()))
        return logits, loss

    monkeypatch.setattr(CausalTransformer, "forward", spy)
    cfg = load_config("default", {**TINY, "splits": {**TINY["splits"], "val_days": 0}})
    assert cfg.train.compile is False  # the default
    prepared = engine.prepare(cfg, random_walk_bars(12000, seed=1), "cpu")
    result = engine.run_fold(prepared, 32, 0, 0, checkpoint_dir=tmp_path)
    monkeypatch.undo()
    assert result.cost["compile"] == {"compiled": False, "mode": None, "reason": "train.compile is off"}
    # torch may set its own default folder (the profiler does); never ours
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(tmp_path / "cache") and not (tmp_path / "cache").exists()
    assert len(calls) == 3

    tc = cfg.train
    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=calls[0][0].shape[-1], **dataclasses.asdict(cfg.model)))
    model.train()
    optimizer = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": tc.weight_decay},
                                   {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=tc.lr, betas=tuple(tc.betas))
    for step, (x, y, denominator, engine_loss) in enumerate(calls):
        for group in optimizer.param_groups:
            group["lr"] = engine.lr_at(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_ratio)
        _, loss = model(x, y, denominator)
        assert torch.equal(loss.detach(), engine_loss), step
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    saved = torch.load(tmp_path / "fold0-n32-seed0.pt", weights_only=True)["model"]
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[k]), k
