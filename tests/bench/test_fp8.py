"""FP8 precision oracle (tsflash.bench.fp8): rotation, quantisation, the bench end to end on CPU."""

from __future__ import annotations

import json

import pytest
import torch

from tsflash import CausalTransformer, ModelConfig, atomic
from tsflash.bench import fp8
from tsflash.errors import UserError
from tsflash.model import attention as attn

CPU = torch.device("cpu")


def finite_values(fmt: str) -> torch.Tensor:
    """Every finite value of the 8-bit format, as float64."""
    every = torch.arange(256, dtype=torch.uint8).view(fp8.FORMATS[fmt]).double()
    return every[every.isfinite()]


def test_hadamard_rotation_is_orthogonal_and_preserves_scores():
    r = fp8.random_hadamard(64, seed=3)
    assert torch.allclose(r @ r.T, torch.eye(64, dtype=torch.float64), atol=1e-15, rtol=0)
    assert set(r.abs().unique().tolist()) == {1 / 8}  # a Hadamard pattern, normalised by sqrt(64)
    assert not torch.equal(r, fp8.random_hadamard(64, seed=4))  # the signs are random
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 128, 64, generator=g, dtype=torch.float64) * 30 for _ in range(2))
    scores = q @ k.transpose(-2, -1)  # (B, H, N, N)
    rotated = (q @ r) @ (k @ r).transpose(-2, -1)
    assert float((rotated - scores).abs().max() / scores.abs().max()) < 1e-12


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("exponent", [-20, -3, 0, 5])
def test_quantise_round_trips_representable_values_exactly(fmt, exponent):
    values = finite_values(fmt)  # each block below holds +-fmax, so its scale is 2^-exponent
    fmax = torch.finfo(fp8.FORMATS[fmt]).max
    g = torch.Generator().manual_seed(exponent + 100)
    x = values[torch.randint(len(values), (1, 2, 128, 16), generator=g)]  # (B, H, N, d)
    x[..., ::32, 0] = fmax  # one fmax in each block of 32 tokens
    x = x * 2.0**exponent
    x8, scale = fp8.quantise(x, fmt, block=32)
    assert x8.dtype == fp8.FORMATS[fmt] and scale.shape == (1, 2, 4)
    assert torch.equal(scale, torch.full_like(scale, 2.0**-exponent))
    back = fp8.dequantise(x8, scale, torch.float64)
    assert torch.equal(back, x)
    assert torch.equal(fp8.dequantise(x8, scale), x.bfloat16())  # exact into bf16 too: 4 significant bits at most


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_quantise_scales_each_block_to_the_format_maximum(fmt):
    g = torch.Generator().manual_seed(0)
    magnitude = torch.logspace(-6, 6, 4, dtype=torch.float64).repeat_interleave(64)[:, None]  # (N, 1): one per block
    x = torch.randn(2, 1, 256, 8, generator=g, dtype=torch.float64) * magnitude  # (B, H, N, d)
    x[0, 0, 64:128] = 0.0  # an all-zero block
    x8, scale = fp8.quantise(x, fmt, block=64)
    fmax = torch.finfo(fp8.FORMATS[fmt]).max
    peak = x8.double().abs().reshape(2, 1, 4, 64 * 8).amax(-1)  # (B, H, blocks)
    nonzero = peak > 0
    assert ((peak[nonzero] >= fmax / 2) & (peak[nonzero] <= fmax)).all()  # (fmax/2, fmax] before rounding
    amax = x.abs().reshape(2, 1, 4, 64 * 8).amax(-1)  # (B, H, blocks)
    assert (((amax * scale)[nonzero] > fmax / 2) & ((amax * scale)[nonzero] <= fmax)).all()
    assert scale[0, 0, 1] == 1.0 and not nonzero[0, 0, 1]
    assert torch.equal(torch.exp2(torch.log2(scale).round()), scale)  # powers of two
    normal = x8.double().abs() >= torch.finfo(fp8.FORMATS[fmt]).smallest_normal
    rel = ((fp8.dequantise(x8, scale, torch.float64) - x).abs() / x.abs())[normal]
    unit = {"e4m3": 2.0**-4, "e5m2": 2.0**-3}[fmt]  # half an ulp of a 3- or 2-bit significand
    assert normal.float().mean() > 0.5 and 0 < float(rel.max()) <= unit


def test_bf16_format_is_the_bf16_oracles_path():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=g, dtype=torch.float64) for _ in range(3))
    out = fp8.fp8_attention(q, k, v, "bf16", "naive", "flash")
    assert torch.equal(out, attn.sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), "flash"))


def outlier_errors(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    q, k, v = fp8.synthetic_qkv("outliers", (1, 2, 256, 64), g)
    ref = attn.reference_attention(q, k, v)
    return fp8.attention_errors(q, k, v, ref, ["e4m3", "e5m2"], ["naive", "rotated"], "flash", 64,
                                fp8.random_hadamard(64, seed))


@pytest.mark.parametrize("seed", [0, 1])
def test_rotation_lowers_the_error_on_outlier_channels(seed):
    errors = outlier_errors(seed)
    for fmt in ("e4m3", "e5m2"):
        naive, rotated = errors[fmt, "naive"]["fro_rel"], errors[fmt, "rotated"]["fro_rel"]
        assert rotated < 0.75 * naive, (fmt, naive, rotated)  # measured: 2-3x lower
        assert 0.05 < naive < 1.0  # outliers hurt FP8 for real: not a vacuous comparison


def test_gaussian_errors_are_of_the_formats_precision():
    g = torch.Generator().manual_seed(0)
    q, k, v = fp8.synthetic_qkv("gaussian", (1, 2, 256, 64), g)
    ref = attn.reference_attention(q, k, v)
    e = fp8.attention_errors(q, k, v, ref, list(fp8.FORMATS), ["naive"], "flash", 64, None)
    assert 1e-3 < e["bf16", "naive"]["fro_rel"] < 1e-2
    assert 2e-2 < e["e4m3", "naive"]["fro_rel"] < 8e-2  # 3 mantissa bits
    assert e["e4m3", "naive"]["fro_rel"] < e["e5m2", "naive"]["fro_rel"] < 0.16  # 2 mantissa bits


def tiny_model(tmp_path, n_features=3):
    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=n_features, d_model=32, n_layers=2, n_heads=2))
    return model.save(tmp_path / "tiny.pt")


def test_capture_and_override_leave_the_model_unchanged(tmp_path):
    from tsflash.bench.precision import float64_reference_copy

    model = CausalTransformer.load(tiny_model(tmp_path)).eval()
    x = torch.randn(2, 32, 3)
    exact = float64_reference_copy(model)
    logits, (q, k, v, out) = fp8.capture_attention(exact, x.double())
    with torch.no_grad():
        assert torch.equal(logits, exact(x.double())[0])
    assert q.shape == (2 * 2, 2, 32, 16) and q.dtype == torch.float64  # (layers*B, H, N, hd)
    assert torch.equal(out, attn.reference_attention(q, k, v))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = model(x)  # the bf16 oracle's model path; resolves the kernel before any override

        def bf16_path(q, k, v, backend, dropout_p=0.0):
            return fp8.fp8_attention(q, k, v, "bf16", "naive", backend)

        with fp8.attention_override(bf16_path):
            assert torch.equal(model(x)[0], plain)  # format bf16 = the oracle's own path, bit for bit
    assert attn.sdpa is fp8.fused_sdpa  # restored
    flips = fp8.decision_flips(model, x, logits, "bf16", "naive", 64, None)
    expected = (plain.argmax(-1) != logits.argmax(-1)).sum()
    assert flips["flips"] == expected and flips["flip_fraction"] == expected / 64
    assert flips["logit_max_abs_err"] == float((plain.double() - logits).abs().max())


def test_bench_runs_end_to_end_on_cpu(tmp_path):
    path = tiny_model(tmp_path)
    settings = fp8.Fp8Settings(heads=2, head_dim=16, modes=fp8.MODES)
    result = fp8.bench_precision_fp8([16, 64], CPU, settings, model=path)
    assert result["kind"] == "precision-fp8" and result["settings"]["model_head_dim"] == 16
    assert result["settings"]["model"] == str(path) and result["settings"]["modes"] == fp8.MODES
    rows = {(r["n"], r["input"], r["format"]): r for r in result["rows"]}
    assert set(rows) == {(n, i, f) for n in (16, 64) for i in fp8.INPUTS for f in fp8.FORMATS}
    for (_n, kind, _fmt), r in rows.items():
        assert r["status"] == "ok"
        for mode in fp8.MODES:
            assert 0 < r[f"{mode}_fro_rel"] < 1 and 0 < r[f"{mode}_max_rel"] < 2
            assert (f"{mode}_flip_fraction" in r) == (kind == "model")
        assert r["rotation_helped"] == (r["rotated_fro_rel"] < r["naive_fro_rel"])
        assert r["rotation_gain"] == pytest.approx(r["naive_fro_rel"] / r["rotated_fro_rel"])
    assert rows[64, "model", "e4m3"]["naive_fro_rel"] > 3 * rows[64, "model", "bf16"]["naive_fro_rel"]
    atomic.write_json(tmp_path / "r.json", result)
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["n"] == 16
    text, md = fp8.fp8_table(result), fp8.markdown_table(result)
    assert "rotated fro" in text and "rotation helped" in text
    assert md.splitlines()[0].startswith("| N | input | format |") and len(md.splitlines()) == 2 + len(rows)


def test_bench_with_real_shaped_features_and_a_fresh_model():
    features = torch.randn(100, 5)
    settings = fp8.Fp8Settings(inputs=("model",), formats=("e4m3",), head_dim=48)  # head_dim unused: model rows only
    result = fp8.bench_precision_fp8([32, 128], CPU, settings, features=features, n_features=5)
    ok, skipped = result["rows"]
    assert ok["input"] == "model" and ok["status"] == "ok" and "naive_flips" in ok
    assert skipped == {"n": 128, "status": "skipped", "error": "features have 100 rows < N=128"}
    assert result["settings"]["model"] == "fresh" and result["settings"]["model_inputs"].startswith("features")


def test_a_failing_length_is_recorded_and_the_next_one_runs():
    settings = fp8.Fp8Settings(inputs=("gaussian",), formats=("e4m3",), heads=1, head_dim=16)
    rows = fp8.bench_precision_fp8([16, 96, 32], CPU, settings, record_errors=True)["rows"]
    assert [(r["n"], r["status"]) for r in rows] == [(16, "ok"), (96, "error"), (32, "ok")]
    assert rows[1]["error"] == "UserError: the quantisation block must be >= 1 and divide N, got block=64, N=96"
    with pytest.raises(UserError, match="divide N, got block=64, N=96"):
        fp8.bench_precision_fp8([16, 96], CPU, settings)


def test_native_probe_records_why_cpu_cannot():
    probe = fp8.native_fp8_probe(CPU, n=32, heads=1, head_dim=16)
    assert probe["runs"] == [] and "timing" not in probe
    assert set(probe["attempts"]) >= {"sdpa flash e4m3", "sdpa math e5m2"}
    assert all(a["status"] in ("unsupported", "absent") and a["error"] for a in probe["attempts"].values())
    assert "\n" not in probe["reason"] and "Float8_e4m3fn" in probe["reason"]


@pytest.mark.parametrize("call, message", [
    (lambda: fp8.random_hadamard(48), r"Hadamard rotation needs head_dim a power of two, got head_dim=48"),
    (lambda: fp8.quantise(torch.ones(1, 8, 4), "e3m4"), r"format must be one of bf16, e4m3, e5m2, got 'e3m4'"),
    (lambda: fp8.quantise(torch.ones(1, 8, 4), "bf16"), r"quantise needs an 8-bit format"),
    (lambda: fp8.quantise(torch.ones(1, 96, 4), "e4m3", block=64), r"block must be >= 1 and divide N, got block=64, N=96"),
    (lambda: fp8.quantise(torch.ones(1, 96, 4), "e4m3", block=0), r"block must be >= 1 and divide N, got block=0, N=96"),
    (lambda: fp8.parse_formats("bf16,fp8"), r"--formats must be a non-empty subset of bf16, e4m3, e5m2, got \['bf16', 'fp8'\]"),
    (lambda: fp8.parse_formats(","), r"--formats must be a non-empty subset"),
    (lambda: fp8.Fp8Settings(formats=("e4m3", "int8")).validate(), r"formats must be a non-empty subset .* got \['e4m3', 'int8'\]"),
    (lambda: fp8.Fp8Settings(modes=("hadamard",)).validate(), r"modes must be a non-empty subset of naive, rotated, rotated_qkv"),
    (lambda: fp8.Fp8Settings(inputs=()).validate(), r"inputs must be a non-empty subset of gaussian, outliers, model, got \[\]"),
    (lambda: fp8.bench_precision_fp8([16], CPU, fp8.Fp8Settings(block=48)), r"block must be a power of two >= 1 .* got block=48"),
    (lambda: fp8.bench_precision_fp8([16], CPU, fp8.Fp8Settings(head_dim=48)), r"head_dim a power of two, got head_dim=48"),
    (lambda: fp8.bench_precision_fp8([16], CPU, model=CausalTransformer(ModelConfig(n_features=2, d_model=96, n_heads=2))),
     r"head_dim a power of two, got head_dim=48"),
    (lambda: fp8.bench_precision_fp8([16], CPU, features=torch.zeros(20, 3)), r"features must have shape \(T, n_features=16\)"),
])
def test_bad_inputs_are_one_line_user_errors(call, message):
    with pytest.raises(UserError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
