"""The benchmarks (tsflash.bench) and `tsflash bench ...` on tiny CPU sizes: outputs, formulas, OOM handling."""

from __future__ import annotations

import json
import logging
import re
import time

import numpy as np
import pytest
import torch

from lab import bench_tables as tables
from tsflash import device, engine
from tsflash.bench import attention as attention_bench
from tsflash.bench import common, precision, trainstep
from tsflash.cli import main
from tsflash.config import parse_lengths
from tsflash.errors import UserError
from tsflash.model import attention as attn
from tsflash.model import flops

CPU = torch.device("cpu")


def test_lengths_follow_the_one_rule():
    """`tsflash bench --lengths` goes through options.parse_lengths: a repeated length is refused
    (bench once dropped it silently), and bench functions check the lengths they are given."""
    assert parse_lengths("512,64") == [64, 512]
    with pytest.raises(UserError, match=r"^--lengths: lengths must be distinct, got '512,64, 64'$"):
        parse_lengths("512,64, 64")
    with pytest.raises(UserError, match=r"^--lengths: every length must be a power of two >= 2, got 100$"):
        parse_lengths("64,100")
    with pytest.raises(UserError, match=r"^--lengths: every length must be an integer \(a power of two >= 2\), got 'x'$"):
        parse_lengths("64,x")
    with pytest.raises(UserError, match=r"^bench precision: lengths: every length must be a power of two >= 2, got 48$"):
        precision.bench_precision([48], CPU)
    with pytest.raises(UserError, match=r"^bench attention: give at least one length, got none$"):
        attention_bench.bench_attention([], CPU)


@pytest.mark.parametrize("call, message", [
    (lambda: trainstep.bench_train([16], CPU, steps=0), "bench train: steps must be a number >= 1, got 0"),
    (lambda: trainstep.bench_train([16], CPU, warmup=-1), "bench train: warmup must be a number >= 0, got -1"),
    (lambda: trainstep.bench_train([16], CPU, n_layers=0), "bench train: n_layers must be a number >= 1, got 0"),
    (lambda: attention_bench.bench_attention([16], CPU, min_time=-0.5), "bench attention: min_time must be a number >= 0, got -0.5"),
    (lambda: attention_bench.bench_attention([16], CPU, batch=0), "bench attention: batch must be a number >= 1, got 0"),
    (lambda: precision.bench_precision([16], CPU, heads=True), "bench precision: heads must be a number >= 1, got True"),
])
def test_bad_benchmark_arguments_are_user_errors(call, message):
    with pytest.raises(UserError, match="^" + re.escape(message) + "$"):
        call()


def test_chunked_float64_reference_equals_plain_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 50, 8, generator=g, dtype=torch.float64) for _ in range(3))
    chunked = attn.reference_attention(q, k, v, chunk_bytes=2 * 3 * 50 * 8 * 7)  # 7 query rows a chunk
    torch.testing.assert_close(chunked, attn.materialised_attention(q, k, v), rtol=0, atol=1e-14)


def test_relative_errors():
    ref = torch.tensor([3.0, -4.0], dtype=torch.float64)
    out = torch.tensor([3.0, -3.5])
    errors = precision.relative_errors(out, ref)
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
            row(attention_bench.PLAIN, 64, 1.0), row(attention_bench.PLAIN, 128, 2.0), row(attention_bench.PLAIN, 256, 2.5),
            row(attention_bench.PLAIN, 512, None, "oom")]
    assert attention_bench.crossover(rows, "flash") == 512  # loses at 256, so the win at 128 does not count
    rows[2]["fwdbwd_s"] = 2.0
    assert attention_bench.crossover(rows, "flash") == 128
    rows[3]["status"] = "oom"  # fused failing at the largest N: it never reliably wins
    assert attention_bench.crossover(rows, "flash") is None


def test_time_call_is_the_median_of_a_library_timer():
    assert common.time_call(lambda: time.sleep(0.002), CPU, min_time=0.05) == pytest.approx(0.002, abs=0.0015)
    ceiling = common.matmul_ceiling(CPU, 64, min_time=0.01)  # FLOP/s of a 64^3 float32 product
    assert 1e6 < ceiling < 1e13


def test_out_of_memory_is_recorded_not_raised(monkeypatch):
    def oom(*_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(attn, "materialised_attention", oom)
    row = attention_bench.measure_attention(attention_bench.PLAIN, 32, 1, 1, 8, torch.float32, CPU, min_time=0.0)
    assert row["status"] == "oom" and "Tried to allocate" in row["error"]


def test_unsupported_backend_is_recorded():
    row = attention_bench.measure_attention("cudnn", 32, 1, 1, 8, torch.float32, CPU, min_time=0.0)
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
    result = precision.bench_precision([32], CPU, model_path=path, heads=2, head_dim=8)
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
    assert set(rows) == {(b, n) for b in ("flash", attention_bench.PLAIN) for n in (16, 64, 256)}
    assert rows[("flash", 64)]["batch"] == 8
    # 256 x 256 scores x batch 2 x 2 heads x 4 bytes = 1 MiB > the 0.0001 GiB cap
    assert rows[(attention_bench.PLAIN, 256)]["status"] == "skipped" and "cap" in rows[(attention_bench.PLAIN, 256)]["error"]
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


@pytest.mark.parametrize("name, kind", [
    # kernel names from a profiled training step on the H200 (torch 2.11, cuDNN attention, compiled)
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0", "attention"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*)", "attention"),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "attention"),
    ("nvjet_sm90_tst_128x128_64x6_1x2_h_bz_splitK_NTT", "matmul"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_tn_align1>(cutlass_75)", "matmul"),
    ("triton_tem_fused_mm_0", "matmul"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("triton_poi_fused__unsafe_view_gelu_gelu_backward_view_9", "fused element-wise"),
    ("triton_per_fused__fused_rms_norm_backward__to_copy_add_view_10", "fused element-wise"),
    ("triton_poi_fused__scaled_dot_product_cudnn_attention_clone_3", "fused element-wise"),  # a copy, named after its op
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t>>", "attention"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>", "other"),
    ("Memset (Device)", "other"),
    # CPU operators
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("aten::mm", "matmul"),
    ("aten::gelu_backward", "other"),
])
def test_kernel_kind(name, kind):
    assert trainstep.kernel_kind(name) == kind


def test_bench_train_profile_says_where_the_step_goes(tmp_path, capsys):
    rc = main(["bench", "train", "--lengths", "16", "--tokens-per-step", "64", "--d-model", "16", "--layers", "1",
               "--heads", "2", "--features", "3", "--steps", "1", "--warmup", "0", "--ceiling-size", "32",
               "--device", "cpu", "--profile", "2", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "train.json").read_text())
    assert result["settings"]["profiled_steps"] == 2
    prof = result["rows"][0]["profile"]
    assert set(prof["ms"]) == {"attention", "matmul", "optimizer", "fused element-wise", "other"}
    assert prof["ms"]["attention"] > 0 and prof["ms"]["matmul"] > 0 and prof["ms"]["optimizer"] > 0
    assert prof["busy_ms"] == pytest.approx(sum(prof["ms"].values())) == pytest.approx(sum(prof["kernels"].values()))
    assert prof["ms"] == trainstep.step_kinds(prof["kernels"])
    assert prof["idle_ms"] is None  # no device to wait: CPU operators' own time
    assert list(prof["kernels"].values()) == sorted(prof["kernels"].values(), reverse=True)
    out = capsys.readouterr().out
    assert "where a step's time goes (ms per step):" in out and "| N | attention | matmul |" in out


def test_inductor_bandwidth_profile_is_read_from_torchs_own_output(tmp_path):
    """The text comes from torch's own writer (triton_heuristics.end_graph, what a compiled graph
    calls under profile_bandwidth): the first block of each graph counts, each call of a kernel
    adds its bytes, and a graph's later calls (garbage under the profile) are left out."""
    from torch._inductor.runtime import triton_heuristics as th

    out = tmp_path / "bandwidth.txt"

    def graph(wrapper_file, calls):  # end_graph names the block after its caller's file
        th.start_graph()
        th.collected_calls.extend(calls)
        exec(compile("end_graph(out)", wrapper_file, "exec"), {"end_graph": th.end_graph, "out": str(out)})

    graph("forward.py", [(0.2, 0.5, 2500.0, "triton_poi_fused_gelu_8"), (0.1, 0.4, 4000.0, "triton_per_fused_rms_norm_1"),
                         (0.1, 0.4, 4000.0, "triton_per_fused_rms_norm_1")])
    graph("backward.py", [(0.3, 1.0, 3333.3, "triton_poi_fused_gelu_backward_9")])
    graph("forward.py", [(9.0, 9.0, 1000.0, "triton_poi_fused_gelu_8")])  # the next step: not counted
    th.start_graph()
    parsed = trainstep.parse_inductor_bandwidth(out.read_text())
    assert parsed["graphs"] == 2
    assert parsed["gb"] == pytest.approx(2.3) and parsed["ms"] == pytest.approx(0.7)
    assert parsed["kernels"] == {"triton_poi_fused_gelu_backward_9": {"calls": 1, "gb": 1.0, "ms": 0.3},
                                 "triton_poi_fused_gelu_8": {"calls": 1, "gb": 0.5, "ms": 0.2},
                                 "triton_per_fused_rms_norm_1": {"calls": 2, "gb": 0.8, "ms": 0.2}}
    assert list(parsed["kernels"])[0] == "triton_poi_fused_gelu_backward_9"  # the most time first
    assert trainstep.parse_inductor_bandwidth("") == {"graphs": 0, "gb": 0.0, "ms": 0.0, "kernels": {}}


def test_bandwidth_markdown_puts_the_element_wise_bytes_at_the_copy_ceiling():
    """A 10 ms step at 30 % MFU whose fused element-wise kernels took 4 ms for 8 GB: at a 4 TB/s
    copy ceiling 6 GB take 1.5 ms; the other 2 GB were counted for a kernel that ran alone in
    0.25 ms (8 TB/s: an overcount), so 0.25 ms. The step could be 7.75 ms, 38.7 % MFU."""
    result = train_result({512: 0.30}, "default", ceiling=800.0)
    row = result["rows"][0]
    row["profile"] = {"kernels": {"triton_poi_fused_gelu_8": 4.0, "nvjet_sm90_tst_128x128": 3.0, "cudnn_sdpa_fprop": 3.0}}
    row["bandwidth"] = {"graphs": 2, "gb": 8.0, "ms": 2.25, "kernels": {
        "triton_poi_fused_gelu_8": {"calls": 4, "gb": 6.0, "ms": 2.0},
        "triton_poi_fused_cat_mul_slice_4": {"calls": 4, "gb": 2.0, "ms": 0.25}}}
    result["ceiling"]["copy_gbs"] = 4000.0
    assert trainstep.element_wise_floor_ms(row["bandwidth"], 4000.0) == pytest.approx(1.75)
    text = trainstep.bandwidth_markdown({"default": result})
    assert "| default | 512 | 8.00 | 4.00 | 1.75 | 1.75 | 10.00 | 7.75 | 38.7% |" in text  # 7 GB counted, capped, in 4 ms
    assert "Copy ceiling 4.00 TB/s" in text
    assert "The fused element-wise work against the memory bandwidth" in tables.mfu_markdown({"default": result})
    del row["bandwidth"]
    assert trainstep.bandwidth_markdown({"default": result}) == ""


def test_bench_train_bandwidth_needs_compile_and_is_empty_where_nothing_compiles(tmp_path, capsys):
    args = ["bench", "train", "--lengths", "16", "--tokens-per-step", "32", "--d-model", "16", "--layers", "1",
            "--heads", "2", "--features", "3", "--steps", "1", "--warmup", "0", "--ceiling-size", "32",
            "--device", "cpu", "--bandwidth", "--out", str(tmp_path)]
    assert main(args) == 2
    assert "--bandwidth counts the bytes of inductor's compiled kernels: give --compile too" in capsys.readouterr().err
    assert not (tmp_path / "train.json").exists()
    assert main([*args, "--compile"]) == 0
    result = json.loads((tmp_path / "train.json").read_text())
    assert result["settings"]["bandwidth"] is True and result["ceiling"]["copy_gbs"] > 0
    assert result["rows"][0]["bandwidth"] is None  # CPU: eager, no Triton kernel to count
    assert re.search(r"; copy \d+ GB/s", capsys.readouterr().out)
    assert main([*args, "--compile", "max-autotune", "--force"]) == 2
    assert "--bandwidth: mode max-autotune" in capsys.readouterr().err


def test_the_bandwidth_pass_keeps_only_whole_steps_of_rows_that_ran(monkeypatch):
    """A shape out of memory gets no bandwidth pass; a pass whose step did not finish, or wrote
    fewer than a forward and a backward graph, gives None rather than a partial count."""
    import torch._inductor.config as inductor_config

    block = "TRITON KERNELS BANDWIDTH INFO ({})\n0.100ms    \t0.400 GB \t 4000.00GB/s \t 100.00% \t triton_poi_k\nSUMMARY\n"

    def fake_step(graphs, status):
        def step(*args, **kwargs):  # writes where the patched inductor config says, as compiled graphs do
            with open(inductor_config.profile_bandwidth_output, "a") as f:
                f.write("".join(block.format(g) for g in graphs))
            return {"status": status}
        return step

    monkeypatch.setattr(trainstep.fastpath, "eager_reason", lambda device: None)
    for graphs, status, gb in ((["fwd.py"], "ok", None), (["fwd.py", "bwd.py"], "oom", None), (["fwd.py", "bwd.py"], "ok", 0.8)):
        monkeypatch.setattr(trainstep, "measure_train_step", fake_step(graphs, status))
        got = trainstep.measure_inductor_bandwidth(None, 16, 2, CPU, 0)
        assert (got and got["gb"]) == (gb and pytest.approx(gb)), (graphs, status, got)

    passes = []
    monkeypatch.setattr(trainstep, "measure_train_step", lambda config, n, *a, **k: {
        "n": n, "batch": 128 // n, "status": "oom" if n == 64 else "ok", "step_s": 0.01, "n_params": 10})
    monkeypatch.setattr(trainstep, "measure_inductor_bandwidth", lambda config, n, *a: passes.append(n))
    result = trainstep.bench_train([16, 64], CPU, tokens_per_step=128, d_model=16, n_layers=1, n_heads=2,
                               ceiling_size=32, bandwidth=True)
    assert passes == [16] and "bandwidth" not in result["rows"][1]


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


# ---- the fast path: auto's decision per N, torch.compile with an eager fallback ---------------------


def test_bench_train_keeps_autos_decision_and_says_why_it_ran_eager(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="tsflash.model.fastpath")
    rc = main(["bench", "train", "--lengths", "16,64", "--tokens-per-step", "128", "--d-model", "16", "--layers", "1",
               "--heads", "2", "--features", "3", "--steps", "1", "--warmup", "0", "--ceiling-size", "64",
               "--compile", "reduce-overhead", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "train.json").read_text())
    assert result["settings"]["compile"] == "reduce-overhead"
    for r in result["rows"]:
        assert r["kernel_choice"]["chosen"] == "flash" == r["backend"]  # decided at this row's shape
        assert r["kernel_choice"]["shape"] == {"batch": 128 // r["n"], "heads": 2, "n": r["n"]}
        assert r["compile"] == {"compiled": False, "mode": "reduce-overhead",
                                "reason": "torch.compile is applied on CUDA only (a CPU cell is small: compiling "
                                          "costs more than it saves)"}
    out = capsys.readouterr().out
    assert "eager: torch.compile is applied on CUDA only" in out and "vs runner-up" in out
    assert "train.compile: running eager on cpu: torch.compile is applied on CUDA only" in caplog.text
    assert main(["bench", "train", "--compile", "turbo"]) == 2
    assert "argument --compile: must be one of default, reduce-overhead, tuned, max-autotune" in capsys.readouterr().err


def test_a_compiler_failure_falls_back_to_eager_and_says_why(caplog):
    from tsflash import CausalTransformer, ModelConfig
    from tsflash.model import fastpath

    caplog.set_level(logging.WARNING, logger="tsflash.model.fastpath")
    torch.manual_seed(0)
    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    calls = []

    def broken(*args, **kwargs):  # what torch.compile's module does when Triton or inductor fails
        calls.append(args)
        raise torch._dynamo.exc.TorchDynamoException("Cannot find a working triton installation")

    forward = fastpath.Compiled(model, broken, "default")
    x = torch.randn(2, 16, 3)
    logits, _ = forward(x)
    assert torch.equal(logits, model(x)[0]) and len(calls) == 1
    forward(x)
    assert len(calls) == 1  # eager from then on
    assert model.compile_info["compiled"] is False and "working triton" in model.compile_info["reason"]
    assert "torch.compile failed (TorchDynamoException: Cannot find a working triton installation); running eager" \
        in caplog.text
    assert forward.config is model.config  # the wrapper stands in for the model
    # a real error of the model is not hidden by the fallback: the eager call raises it again
    fresh = fastpath.Compiled(model, broken, "default")
    with pytest.raises(UserError, match="model input must have n_features=3"):
        fresh(torch.randn(2, 16, 4))


def test_compiled_forward_times_each_new_shape_once(monkeypatch):
    """No-grad calls (evaluation) run eager unless fastpath.COMPILE_EVALUATION: then they are timed too."""
    from tsflash import CausalTransformer, ModelConfig
    from tsflash.model import fastpath

    model = CausalTransformer(ModelConfig(n_features=3, d_model=16, n_layers=1, n_heads=2))
    calls = []

    def stand_in(*args):  # compiles nothing
        calls.append(args[0].shape)
        return model(*args)

    forward = fastpath.Compiled(model, stand_in, "default")
    forward(torch.randn(2, 16, 3))
    forward(torch.randn(2, 16, 3))
    with torch.no_grad():
        forward(torch.randn(4, 16, 3))
    assert sorted(model.compile_info["first_call_seconds"]) == ["(2, 16, 3)"] and len(calls) == 2
    monkeypatch.setattr(fastpath, "COMPILE_EVALUATION", True)
    with torch.no_grad():
        forward(torch.randn(4, 16, 3))
    assert sorted(model.compile_info["first_call_seconds"]) == ["(2, 16, 3)", "(4, 16, 3) no_grad"] and len(calls) == 3


def test_a_cell_with_train_compile_on_cpu_runs_eager_with_the_same_results(caplog):
    from tsflash.config import load_config
    from tsflash.data.synthetic import random_walk_bars

    caplog.set_level(logging.INFO, logger="tsflash.model.fastpath")
    over = {"lengths": [32], "splits": {"n_folds": 1, "test_days": 1, "val_days": 0}, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 2, "tokens_per_step": 256, "warmup_steps": 1}, "eval": {"baseline_lags": 2}}
    results = []
    for compile in (False, True):
        cfg = load_config("default", {**over, "train": {**over["train"], "compile": compile}})
        prepared = engine.prepare(cfg, random_walk_bars(4000, seed=1), "cpu")
        results.append(engine.run_fold(prepared, 32, 0, 0))
    assert np.array_equal(results[0].y_prob, results[1].y_prob)
    assert "train.compile: running eager on cpu" in caplog.text
    # the cell's cost says why it ran eager (tsflash.model.fastpath's record)
    assert results[1].cost["compile"]["mode"] == "default" and results[1].cost["compile"]["compiled"] is False
    assert results[1].cost["compile"]["reason"].startswith("torch.compile is applied on CUDA only")


def train_result(mfu: dict[int, float], compiled: str | None, margin=0.05, ceiling=760.0) -> dict:
    rows = [{"n": n, "step_s": 0.01 * (i + 1), "mfu": m, "model_tflops": m * ceiling, "status": "ok",
             "compile": {"compiled": bool(compiled), "mode": compiled, "reason": None,
                         "first_call_seconds": {"(2, 512, 16)": 30.0} if compiled else {}},
             "kernel_choice": {"chosen": "cudnn", "runner_up": "flash", "margin": margin,
                               "median_ms": {"cudnn": 1.0, "flash": 1.05}}} for i, (n, m) in enumerate(mfu.items())]
    return {"rows": rows, "environment": {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.11"},
            "ceiling": {"matmul_size": 8192, "dtype": "torch.bfloat16", "tflops": ceiling}}
