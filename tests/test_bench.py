"""tsflash.bench and `tsflash bench ...` on tiny CPU sizes: outputs, formulas, OOM handling."""

from __future__ import annotations

import json
import re

import pytest
import torch

from tsflash import attention as attn
from tsflash import bench, device, engine, flops
from tsflash.cli import main
from tsflash.config import parse_lengths
from tsflash.errors import UserError

CPU = torch.device("cpu")


def test_lengths_follow_the_one_rule():
    """`tsflash bench --lengths` goes through config.parse_lengths: a repeated length is refused
    (bench once dropped it silently), and bench functions check the lengths they are given."""
    assert parse_lengths("512,64") == [64, 512]
    with pytest.raises(UserError, match=r"^--lengths: lengths must be distinct, got '512,64, 64'$"):
        parse_lengths("512,64, 64")
    with pytest.raises(UserError, match=r"^--lengths: every length must be a power of two >= 2, got 100$"):
        parse_lengths("64,100")
    with pytest.raises(UserError, match=r"^--lengths: every length must be an integer \(a power of two >= 2\), got 'x'$"):
        parse_lengths("64,x")
    with pytest.raises(UserError, match=r"^bench precision: lengths: every length must be a power of two >= 2, got 48$"):
        bench.bench_precision([48], CPU)
    with pytest.raises(UserError, match=r"^bench attention: give at least one length, got none$"):
        bench.bench_attention([], CPU)


@pytest.mark.parametrize("call, message", [
    (lambda: bench.bench_train([16], CPU, steps=0), "bench train: steps must be a number >= 1, got 0"),
    (lambda: bench.bench_train([16], CPU, warmup=-1), "bench train: warmup must be a number >= 0, got -1"),
    (lambda: bench.bench_train([16], CPU, n_layers=0), "bench train: n_layers must be a number >= 1, got 0"),
    (lambda: bench.bench_attention([16], CPU, min_time=-0.5), "bench attention: min_time must be a number >= 0, got -0.5"),
    (lambda: bench.bench_attention([16], CPU, batch=0), "bench attention: batch must be a number >= 1, got 0"),
    (lambda: bench.bench_precision([16], CPU, heads=True), "bench precision: heads must be a number >= 1, got True"),
])
def test_bad_benchmark_arguments_are_user_errors(call, message):
    with pytest.raises(UserError, match="^" + re.escape(message) + "$"):
        call()


def test_chunked_float64_reference_equals_plain_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 50, 8, generator=g, dtype=torch.float64) for _ in range(3))
    chunked = attn.reference_attention(q, k, v, chunk_bytes=2 * 3 * 50 * 8 * 7)  # 7 query rows a chunk
    torch.testing.assert_close(chunked, attn.materialized_attention(q, k, v), rtol=0, atol=1e-14)


def test_relative_errors():
    ref = torch.tensor([3.0, -4.0], dtype=torch.float64)
    out = torch.tensor([3.0, -3.5])
    errors = bench.relative_errors(out, ref)
    assert errors["max_rel"] == pytest.approx(0.5 / 4.0)
    assert errors["fro_rel"] == pytest.approx(0.5 / 5.0)


def test_one_flop_rule_for_the_engine_and_the_bench():
    # gpu.md: 3.16 M parameters, N=32768, batch 4, 88.9 ms a step, ceiling 787 TFLOP/s. Counted with
    # fwd+bwd = 3.5 x forward attention (hardware FLOPs) that was 47.6 % MFU; model FLOPs (3 x) give 41.3 %.
    per_step = flops.flops_per_token(3_160_000, 4, 256, 32768) * 131072
    assert per_step == 6 * 3_160_000 * 131072 + 6 * 4 * 256 * 32768 * 131072
    assert per_step / 0.0889 / 787e12 == pytest.approx(0.413, abs=0.001)
    assert flops.attention_forward_flops(1, 4, 1024, 64) == 2 * 4 * 1024**2 * 64
    # per layer and token, causal forward attention is 4 * d * (N / 2); fwd+bwd is 3 x that
    assert flops.FWD_BWD * flops.attention_forward_flops(1, 1, 512, 16) / 512 == 12 * 16 * 512 / 2
    assert engine.flops_per_token is flops.flops_per_token


def test_crossover_is_the_first_n_from_which_fused_always_wins():
    def row(b, n, t, status="ok"):
        return {"backend": b, "n": n, "fwdbwd_s": t, "status": status}

    rows = [row("flash", 64, 2.0), row("flash", 128, 1.0), row("flash", 256, 3.0), row("flash", 512, 9.0),
            row(bench.PLAIN, 64, 1.0), row(bench.PLAIN, 128, 2.0), row(bench.PLAIN, 256, 2.5),
            row(bench.PLAIN, 512, None, "oom")]
    assert bench.crossover(rows, "flash") == 512  # loses at 256, so the win at 128 does not count
    rows[2]["fwdbwd_s"] = 2.0
    assert bench.crossover(rows, "flash") == 128
    rows[3]["status"] = "oom"  # fused failing at the largest N: it never reliably wins
    assert bench.crossover(rows, "flash") is None


def test_cpu_peak_memory_sees_a_transient_allocation():
    with device.PeakMemory(CPU) as mem:
        t = torch.ones(16 * 2**20)  # 64 MiB, freed before the block ends
        del t
    assert mem.peak_extra_bytes >= 60 * 2**20 and mem.peak_bytes is None
    with device.PeakMemory(CPU) as idle:
        pass
    assert idle.peak_extra_bytes < 8 * 2**20


def test_out_of_memory_is_recorded_not_raised(monkeypatch):
    def oom(*_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(attn, "materialized_attention", oom)
    row = bench.measure_attention(bench.PLAIN, 32, 1, 1, 8, torch.float32, CPU, min_time=0.0)
    assert row["status"] == "oom" and "Tried to allocate" in row["error"]


def test_unsupported_backend_is_recorded():
    row = bench.measure_attention("cudnn", 32, 1, 1, 8, torch.float32, CPU, min_time=0.0)
    assert row["status"] == "unsupported" and "exists only on CUDA" in row["error"]


def test_bench_precision_cli_writes_json_and_table(tmp_path, capsys):
    rc = main(["bench", "precision", "--lengths", "16,64", "--heads", "2", "--head-dim", "16", "--features", "3",
               "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "precision.json").read_text())
    assert [r["n"] for r in result["rows"]] == [16, 64]
    for r in result["rows"]:
        assert r["status"] == "ok" and r["backend"] == "flash" and r["model_backend"] == "flash"
        assert 1e-4 < r["attn_fro_rel"] < 2e-2  # bf16 rounding: not zero, not garbage
        assert r["attn_fro_rel"] <= r["attn_max_rel"] * 10
        assert 0.0 <= r["flip_fraction"] <= 1.0
    assert "max|err|/max|ref|" in capsys.readouterr().out


def test_bench_precision_with_a_saved_model(tmp_path):
    from tsflash import CausalTransformer, ModelConfig

    path = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2)).save(tmp_path / "m.pt")
    result = bench.bench_precision([32], CPU, model_path=path, heads=2, head_dim=8)
    assert result["settings"]["n_params"] == CausalTransformer.load(path).n_params()
    assert result["rows"][0]["status"] == "ok"


def test_bench_attention_cli_writes_json_png_and_records_skips(tmp_path, capsys):
    rc = main(["bench", "attention", "--lengths", "16,64,256", "--tokens", "512", "--heads", "2", "--head-dim", "8",
               "--min-time", "0", "--cpu-memory-cap-gib", "0.0001", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "attention.json").read_text())
    png = (tmp_path / "attention.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    rows = {(r["backend"], r["n"]): r for r in result["rows"]}
    assert set(rows) == {(b, n) for b in ("flash", bench.PLAIN) for n in (16, 64, 256)}
    assert rows[("flash", 64)]["batch"] == 8
    # 256 x 256 scores x batch 2 x 2 heads x 4 bytes = 1 MiB > the 0.0001 GiB cap
    assert rows[(bench.PLAIN, 256)]["status"] == "skipped" and "cap" in rows[(bench.PLAIN, 256)]["error"]
    ok = rows[("flash", 256)]
    assert ok["status"] == "ok" and ok["fwd_s"] > 0 and ok["fwdbwd_s"] > 0 and ok["peak_extra_bytes"] >= 0
    assert ok["fwdbwd_tflops"] == pytest.approx(3 * flops.attention_forward_flops(2, 2, 256, 8) / ok["fwdbwd_s"] / 1e12)
    assert result["crossover"]["flash"]["fwdbwd_time"] in (16, 64, 256, None)
    assert "crossover flash vs materialised" in capsys.readouterr().out


def test_bench_attention_rejects_unknown_backends(tmp_path, capsys):
    assert main(["bench", "attention", "--backends", "flash,turbo", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "--backends: a comma-separated subset of cudnn, flash, efficient, got 'flash,turbo'" in capsys.readouterr().err


def test_bench_train_cli_writes_json(tmp_path, capsys):
    rc = main(["bench", "train", "--lengths", "16,64", "--tokens-per-step", "128", "--d-model", "16", "--layers", "1",
               "--heads", "2", "--features", "3", "--steps", "1", "--warmup", "1", "--ceiling-size", "64",
               "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "train.json").read_text())
    assert [(r["n"], r["batch"]) for r in result["rows"]] == [(16, 8), (64, 2)]
    assert len({r["n_params"] for r in result["rows"]}) == 1  # same model at every N
    for r in result["rows"]:
        assert r["status"] == "ok" and r["backend"] == "flash"
        assert r["step_s"] > 0 and r["tokens_per_s"] == pytest.approx(128 / r["step_s"]) and r["mfu"] > 0
        # the engine's FLOPs rule: (6 P + 6 L d N) * tokens
        step_flops = flops.flops_per_token(r["n_params"], 1, 16, r["n"]) * 128
        assert r["model_tflops"] == pytest.approx(step_flops / r["step_s"] / 1e12)
    assert result["ceiling"]["tflops"] > 0
    assert "MFU" in capsys.readouterr().out


def test_bench_train_rejects_lengths_that_do_not_divide_the_tokens(tmp_path, capsys):
    rc = main(["bench", "train", "--lengths", "64", "--tokens-per-step", "96", "--d-model", "16", "--layers", "1",
               "--heads", "2", "--ceiling-size", "32", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 2
    assert "--tokens-per-step=96 must be a multiple of every length, got N=64" in capsys.readouterr().err


def test_cuda_request_without_a_gpu_is_a_user_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(UserError, match=r"^--device cuda: CUDA is not available on this machine \(use --device cpu\)$"):
        device.resolve_device("cuda")
