"""tsflash.bench and `tsflash bench ...` on tiny CPU sizes: outputs, formulas, OOM handling."""

from __future__ import annotations

import json

import pytest
import torch

from tsflash import attention as attn
from tsflash import bench
from tsflash.cli import main
from tsflash.errors import UserError

CPU = torch.device("cpu")


def test_parse_lengths():
    assert bench.parse_lengths("512,64, 64") == [64, 512]
    with pytest.raises(UserError, match=r"--lengths: every length must be a power of two >= 2, got '64,100'"):
        bench.parse_lengths("64,100")
    with pytest.raises(UserError, match=r"--lengths: a comma-separated list of integers, got '64,x'"):
        bench.parse_lengths("64,x")


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


def test_flop_conventions_reproduce_the_documented_h200_step():
    # gpu.md: 3.16 M parameters, N=32768, batch 4, 88.9 ms a step, ceiling 787 TFLOP/s -> 48 % MFU
    flops = bench.model_flops_per_step(3_160_000, 131072, 4, 4, 32768, 256)
    assert flops / 0.0889 / 787e12 == pytest.approx(0.476, abs=0.005)
    assert bench.attention_flops(1, 4, 1024, 64) == 2 * 4 * 1024**2 * 64


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
    with bench.PeakMemory(CPU) as mem:
        t = torch.ones(16 * 2**20)  # 64 MiB, freed before the block ends
        del t
    assert mem.peak_extra_bytes >= 60 * 2**20
    with bench.PeakMemory(CPU) as idle:
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
    assert ok["fwdbwd_tflops"] == pytest.approx(3.5 * bench.attention_flops(2, 2, 256, 8) / ok["fwdbwd_s"] / 1e12)
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
    with pytest.raises(UserError, match=r"--device cuda: no CUDA device is available here"):
        bench.resolve_device("cuda")
