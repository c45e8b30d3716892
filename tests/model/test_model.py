"""CausalTransformer: shapes, causality, N-independent parameters, loss, checkpoints."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tsflash import CausalTransformer, ModelConfig
from tsflash.errors import UserError
from tsflash.model.transformer import masked_cross_entropy, rotary_tables

SMALL = dict(n_features=5, d_model=32, n_layers=2, n_heads=4)


def small_model(**overrides) -> CausalTransformer:
    torch.manual_seed(0)
    return CausalTransformer(ModelConfig(**{**SMALL, **overrides})).eval()


def test_shapes_dtype_and_backend_recorded():
    model = small_model()
    assert model.attention_backend_used is None
    logits, loss = model(torch.randn(3, 16, 5))
    assert logits.shape == (3, 16, 3) and logits.dtype == torch.float32 and loss is None
    assert model.attention_backend_used == "flash"  # the CPU fused kernel, forced


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_causality_future_bars_do_not_change_past_logits(dtype, norm):
    model = small_model(norm=norm).to(dtype)
    x = torch.randn(2, 48, 5, dtype=dtype)
    t = 20
    y = x.clone()
    y[:, t + 1 :] = torch.randn(2, 48 - t - 1, 5, dtype=dtype) * 100  # wildly different future
    a, _ = model(x)
    b, _ = model(y)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])  # exactly, not approximately
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])  # and the future does matter


def test_parameter_count_does_not_depend_on_n():
    model = small_model()
    before = model.n_params()
    for n in (8, 64, 512):
        model(torch.randn(1, n, 5))
        assert model.n_params() == before
    # the default config is the ~3.2 M parameter model of the benchmarks
    assert 3.0e6 < CausalTransformer(ModelConfig(n_features=12)).n_params() < 3.3e6


def test_loss_is_mean_cross_entropy_over_labelled_positions():
    model = small_model()
    x = torch.randn(2, 16, 5)
    targets = torch.randint(0, 3, (2, 16))
    targets[0, :5] = -1
    logits, loss = model(x, targets)
    keep = targets != -1
    expected = torch.nn.functional.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, expected)
    _, none_labelled = model(x, torch.full((2, 16), -1))
    assert none_labelled.item() == 0.0 and none_labelled.requires_grad


def test_masked_cross_entropy_ignores_unlabelled_and_empty_batches():
    from tsflash.model.transformer import masked_cross_entropy

    logits = torch.zeros(1, 4, 3)
    assert masked_cross_entropy(logits, torch.full((1, 4), -1)).item() == 0.0
    y = torch.tensor([[0, -1, 2, -1]])
    assert masked_cross_entropy(logits, y).item() == pytest.approx(math.log(3))


def test_loss_backward_reaches_every_parameter():
    model = small_model().train()
    _, loss = model(torch.randn(2, 16, 5), torch.randint(0, 3, (2, 16)))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_bf16_autocast_runs_fused_and_returns_float32_logits():
    model = small_model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = model(torch.randn(2, 32, 5), torch.randint(0, 3, (2, 32)))
    assert logits.dtype == torch.float32 and loss.dtype == torch.float32
    assert model.attention_backend_used == "flash"


def _residual_dtypes(model, x):
    """The dtype of the residual stream entering each block and the final norm."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].dtype)) for m in (*model.blocks, model.norm)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(x)
    for h in hooks:
        h.remove()
    return seen, logits


# The CPU's rms_norm has no fused kernel for bf16 inputs with float32 weights and warns; this test
# reads dtypes, not speed.
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")
def test_the_residual_stream_dtype_follows_the_config_under_autocast():
    x = torch.randn(2, 32, 5)
    param, compute = small_model(residual="param"), small_model(residual="compute")
    seen_param, logits_param = _residual_dtypes(param, x)
    seen_compute, logits_compute = _residual_dtypes(compute, x)
    assert set(seen_param) == {torch.float32} and len(seen_param) == 3  # two blocks and the final norm
    assert set(seen_compute) == {torch.bfloat16} and len(seen_compute) == 3
    assert logits_compute.dtype == torch.float32  # logits stay float32 either way
    assert not torch.equal(logits_param, logits_compute)  # other numerics ...
    assert torch.allclose(logits_param, logits_compute, atol=0.05)  # ... of the same model
    # Outside autocast the compute dtype is the parameters': the two are the same model, bit for bit
    assert torch.equal(param(x)[0], compute(x)[0])
    assert set(param.state_dict()) == set(compute.state_dict())  # the same parameters: checkpoints interchange


def test_a_checkpoint_keeps_the_residual_dtype(tmp_path):
    model = small_model(residual="compute")
    loaded = CausalTransformer.load(model.save(tmp_path / "model.pt"))
    assert loaded.config.residual == "compute"


def test_a_checkpoint_from_before_model_residual_loads_as_param(tmp_path):
    model = small_model()
    path = model.save(tmp_path / "model.pt")
    blob = torch.load(path, weights_only=True)
    del blob["config"]["residual"]  # as every checkpoint written before the field existed
    torch.save(blob, path)
    loaded = CausalTransformer.load(path, expect_config=model.config)
    assert loaded.config.residual == "param"
    x = torch.randn(2, 16, 5)
    assert torch.equal(loaded.eval()(x)[0], model(x)[0])


def test_wrong_feature_count_is_a_clear_error():
    with pytest.raises(UserError, match=r"n_features=5 per bar, got shape \(1, 8, 4\)"):
        small_model()(torch.randn(1, 8, 4))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=30), r"d_model=30 must be divisible by n_heads=4"),
        (dict(attention_backend="fast"), r"attention_backend must be one of .*got 'fast'"),
        (dict(norm="batch"), r"norm must be one of rmsnorm, layernorm, got 'batch'"),
        (dict(d_model=12, n_heads=4), r"d_model / n_heads must be even \(rotary positions\), got 12/4"),
        (dict(residual="half"), r"residual must be one of param, compute, got 'half'"),
    ],
)
def test_bad_config_is_a_clear_error(overrides, message):
    with pytest.raises(UserError, match=message):
        small_model(**overrides)


def test_save_load_round_trip(tmp_path):
    model = small_model()
    path = model.save(tmp_path / "sub" / "model.pt")
    assert not list(path.parent.glob("*.tmp-*"))  # atomic write leaves no temp file
    loaded = CausalTransformer.load(path, expect_config=model.config)
    assert loaded.config == model.config
    x = torch.randn(2, 16, 5)
    assert torch.equal(loaded.eval()(x)[0], model(x)[0])


def test_load_into_mismatched_config_is_a_clear_error(tmp_path):
    path = small_model().save(tmp_path / "model.pt")
    other = ModelConfig(**{**SMALL, "d_model": 64})
    with pytest.raises(UserError, match=r"different config.*'d_model': \(32, 64\)"):
        CausalTransformer.load(path, expect_config=other)


def test_load_rejects_weights_that_do_not_fit_the_stored_config(tmp_path):
    path = small_model().save(tmp_path / "model.pt")
    blob = torch.load(path, weights_only=True)
    blob["config"]["n_layers"] = 3  # stored config claims more layers than the weights have
    torch.save(blob, path)
    with pytest.raises(UserError, match=r"does not match its config: missing \['blocks\.2\."):
        CausalTransformer.load(path)
    blob["config"]["n_layers"] = 2
    blob["config"]["d_model"] = 64
    torch.save(blob, path)
    with pytest.raises(UserError, match=r"shape mismatches"):
        CausalTransformer.load(path)


def test_load_rejects_foreign_files(tmp_path):
    with pytest.raises(UserError, match=r"checkpoint not found"):
        CausalTransformer.load(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(UserError, match=r"must have format 'tsflash.model/1', got None"):
        CausalTransformer.load(tmp_path / "foreign.pt")
    blob = {"format": "tsflash.model/1", "config": {**dataclasses.asdict(ModelConfig(**SMALL)), "extra": 1}, "state_dict": {}}
    torch.save(blob, tmp_path / "extra.pt")
    with pytest.raises(UserError, match=r"config keys this ModelConfig lacks: \['extra'\]"):
        CausalTransformer.load(tmp_path / "extra.pt")


class Evil:  # module level so that it pickles
    pass


def test_load_refuses_arbitrary_pickles(tmp_path):
    torch.save({"format": "tsflash.model/1", "obj": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(UserError, match=r"cannot be loaded with weights_only=True"):
        CausalTransformer.load(tmp_path / "evil.pt")


def test_prove_kernel_reports_the_forced_and_observed_kernel():
    model = small_model()
    assert model.prove_kernel(torch.randn(1, 16, 5)) == {"forced": "flash", "observed": ["flash"]}
    model = small_model(attention_backend="math")
    assert model.prove_kernel(torch.randn(1, 16, 5)) == {"forced": "math", "observed": ["math"]}


def test_first_forward_under_no_grad_and_autocast_resolves_auto():
    from tsflash.model import attention

    attention.clear_cache()
    model = small_model()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(1, 16, 5))
    assert model.attention_backend_used == "flash"
    # decided at the forward's real shape (batch 1, 4 heads, N = 16), not at a probe shape
    record = attention.auto_report()["cpu|0|torch.bfloat16|8|n16|b1|h4"]
    assert record["chosen"] == "flash" and record["timing"]["shape"] == {"batch": 1, "heads": 4, "n": 16}
    assert len(attention.auto_report()) == 1


# ---- rotary positions cover the longest N -----------------------------------------------------------


def _slowest_wavelength(model: CausalTransformer) -> float:
    """From the model's own tables: the slowest pair's rotation from position 0 to 1, in bars per turn."""
    cos, sin = model.rotary(2, torch.device("cpu"))  # (2, hd/2) each
    angle = math.atan2(float(sin[1, -1]), float(cos[1, -1]))
    return 2 * math.pi / angle


@pytest.mark.parametrize("head_dim", [4, 8, 16, 64, 128])
def test_rotary_wavelength_covers_four_times_every_n_up_to_131072(head_dim):
    from tsflash.model.rotary import rotary_base_for, rotary_wavelength

    model = CausalTransformer(ModelConfig(n_features=3, d_model=2 * head_dim, n_layers=1, n_heads=2))
    wave = _slowest_wavelength(model)
    for n in (512, 4096, 32768, 131072):
        assert wave >= 4 * n, (head_dim, n, wave)
    assert wave == pytest.approx(rotary_wavelength(head_dim, model.config.rotary_base), rel=1e-5)
    # the automatic base is the smallest 2-digit base that covers: one step below does not
    base = rotary_base_for(head_dim)
    step = 10 ** (math.floor(math.log10(base)) - 1)
    assert rotary_wavelength(head_dim, base - step) < 4 * 131072 <= rotary_wavelength(head_dim, base)


def test_the_old_fixed_base_aliased_within_131072_and_an_explicit_base_is_kept():
    old = CausalTransformer(ModelConfig(n_features=3, d_model=256, n_layers=1, n_heads=4, rope_base=10000.0))
    assert 47_000 < _slowest_wavelength(old) < 47_200 < 4 * 131072
    assert old.config.rotary_base == 10000.0


def test_loss_denominator_weighs_every_scored_position_the_same():
    model = small_model()
    x = torch.randn(2, 16, 5)
    targets = torch.randint(0, 3, (2, 16))
    targets[0, :12] = -1  # few scored positions in the first window
    logits, mean = model(x, targets)
    _, fixed = model(x, targets, loss_denominator=32.0)
    total = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), targets.reshape(-1), ignore_index=-1,
                                              reduction="sum")
    torch.testing.assert_close(fixed, total / 32)
    torch.testing.assert_close(mean, total / 20)


# ---- CUDA-graph safety: the rotary tables are buffers that forward only reads -----------------------


def direct_rotary_forward(model: CausalTransformer, x: torch.Tensor, targets: torch.Tensor | None = None):
    """The forward as it was when forward made its own tables: cos, sin for exactly T positions."""
    cos, sin = rotary_tables(x.shape[1], model.config.head_dim, model.config.rotary_base, x.device)  # (T, hd/2)
    h = model.inp(x).to(model.inp.weight.dtype)  # (B, T, C)
    for block in model.blocks:
        h = block(h, cos, sin)
    logits = model.head(model.norm(h))  # (B, T, 3)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return logits, None if targets is None else masked_cross_entropy(logits, targets)


@pytest.mark.parametrize("head_dim", [8, 64])
def test_a_rotary_table_row_does_not_depend_on_the_tables_length(head_dim):
    """What makes slicing the reserved tables bit-identical to computing them per call."""
    base = ModelConfig(n_features=1, d_model=2 * head_dim, n_heads=2).rotary_base
    long_cos, long_sin = rotary_tables(131075, head_dim, base, "cpu")  # (131075, hd/2) each
    for T in (1, 2, 7, 16, 100, 513, 4096, 32768, 131072):
        cos, sin = rotary_tables(T, head_dim, base, "cpu")
        assert torch.equal(cos, long_cos[:T]) and torch.equal(sin, long_sin[:T]), T


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_equals_the_per_call_rotary_tables_bit_for_bit(dtype):
    """Growing and shrinking windows (the tables grow once, then are sliced): logits, loss and
    gradients are those of tables made for exactly T positions, as before they became buffers."""
    model = small_model().train().to(dtype)
    for T in (64, 16, 100, 64):
        g = torch.Generator().manual_seed(T)
        x, y = torch.randn(3, T, 5, generator=g, dtype=dtype), torch.randint(0, 3, (3, T), generator=g)
        logits, loss = model(x, y)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        ref_logits, ref_loss = direct_rotary_forward(model, x, y)
        ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()))
        assert torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss), T
        assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True)), T
        if dtype == torch.float32:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                assert torch.equal(model(x)[0], direct_rotary_forward(model, x)[0]), T
    assert model.rope_cos.shape == (100, 4) and model.rope_cos.dtype == torch.float32


def test_rotary_tables_are_buffers_outside_the_checkpoint(tmp_path):
    import copy

    model = small_model()
    x = torch.randn(1, 40, 5)
    logits, _ = model(x)
    assert model.rope_cos.shape == model.rope_sin.shape == (40, 4)
    assert {"rope_cos", "rope_sin"} <= dict(model.named_buffers()).keys()
    assert not [k for k in model.state_dict() if "rope" in k]  # a function of the config: not saved
    loaded = CausalTransformer.load(model.save(tmp_path / "model.pt")).eval()
    assert loaded.rope_cos.shape == (0, 4) and torch.equal(loaded(x)[0], logits)
    double = copy.deepcopy(model).double()  # a float64 model rotates with the float32 tables, as before
    assert double.rope_cos.dtype == torch.float64
    double(x.double())
    assert double.rope_cos.dtype == torch.float32
    with torch.device("meta"):  # counting parameters builds the model on the meta device
        assert CausalTransformer(ModelConfig(**SMALL)).n_params() == model.n_params()


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


ROTARY_OPS = ("cos", "sin", "arange", "pow")  # what making the tables would put in a graph


def traced_ops(explanation) -> set[str]:
    return {str(node.target) for graph in explanation.graphs for node in graph.graph.nodes
            if node.op in ("call_function", "call_method")}


def test_a_compiled_forward_only_reads_the_reserved_rotary_tables(fresh_dynamo):
    """What CUDA graphs need (cudagraphs run on CUDA only; the graph dynamo captures is the same on
    CPU): after `reserve_positions`, one graph, no graph break, no rotary table made in it, and the
    buffers neither replaced nor written by compiled forward and backward passes."""
    model = small_model(attention_backend="flash").train()  # pinned, as tsflash.model.fastpath.prepare does
    model.reserve_positions(32)
    x, y = torch.randn(2, 32, 5), torch.randint(0, 3, (2, 32))
    explained = torch._dynamo.explain(model)(x, y)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    ops = traced_ops(explained)
    assert not [op for op in ops if any(name in op for name in ROTARY_OPS)], ops
    tables = [(t.data_ptr(), t.clone()) for t in (model.rope_cos, model.rope_sin)]
    compiled = torch.compile(model, backend="aot_eager")
    for T in (32, 16, 32):  # the training window, a shorter one (a context cut), the training window again
        logits, loss = compiled(x[:, :T], y[:, :T])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        ref_logits, ref_loss = model(x[:, :T], y[:, :T])
        ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()))
        torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for t, (ptr, values) in zip((model.rope_cos, model.rope_sin), tables, strict=True):
        assert t.data_ptr() == ptr and torch.equal(t, values)


def test_a_compiled_forward_past_the_reserved_tables_fills_them_outside_the_graph(fresh_dynamo):
    model = small_model(attention_backend="flash")
    explained = torch._dynamo.explain(model)(torch.randn(2, 24, 5))  # nothing reserved yet
    assert explained.graph_break_count == 1  # reserve_positions ran eagerly between two graphs
    ops = traced_ops(explained)
    assert not [op for op in ops if any(name in op for name in ROTARY_OPS)], ops
    assert model.rope_cos.shape == (24, 4)
