"""The published bench tables (lab/bench_tables.py): MFU per compile mode, sweep cells plain against
compiled, other models against the experiment's, the scaling over GPUs."""

from __future__ import annotations

import json

import pytest

from lab import bench_tables as tables
from tests.bench.test_bench import train_result
from tsflash.bench import common
from tsflash.errors import UserError

# ---- the published tables -----------------------------------------------------------------------------


def test_mfu_markdown_and_the_file_from_the_bench_folders(tmp_path):
    for variant, mfu in (("eager", {512: 0.15, 4096: 0.25}), ("default", {512: 0.36, 4096: 0.42})):
        common.write_json(tmp_path / "mfu" / variant / "train.json",
                         train_result(mfu, None if variant == "eager" else variant))
    text = tables.write_mfu_markdown(tmp_path / "mfu").read_text()
    assert (tmp_path / "mfu.md").exists()
    assert "| 512 | eager | 10.0 | 15.0% | eager | - |" in text and "| 512 | default | 10.0 | 36.0% | default | 30.0 |" in text
    assert "| 4096 | default | 20.0 | 42.0% | default | 30.0 |" in text
    assert "| 512 | cudnn | flash | +5.0% | cudnn 1.000, flash 1.050 |" in text
    with pytest.raises(UserError, match="no \\*/train.json under"):
        tables.write_mfu_markdown(tmp_path / "empty")


def test_mfu_markdown_divides_every_variant_by_the_highest_ceiling_of_the_call():
    """Two processes with the same step time but ceilings 5 % apart get the same MFU."""
    slow_ceiling = train_result({512: 0.30}, "default", ceiling=740.0)  # 222 TFLOP/s of model FLOPs
    fast_ceiling = train_result({512: 222.0 / 777.0}, "reduce-overhead", ceiling=777.0)  # the same 222
    text = tables.mfu_markdown({"default": slow_ceiling, "reduce-overhead": fast_ceiling})
    assert "| 512 | default | 10.0 | 28.6% | default | 30.0 |" in text  # 222 / 777, not 222 / 740
    assert "| 512 | reduce-overhead | 10.0 | 28.6% | reduce-overhead | 30.0 |" in text
    assert "over 777 TFLOP/s, the highest of the 8192^3 torch.bfloat16 matmul ceilings" in text


def test_compile_cells_markdown_pairs_the_cells_and_counts_compiling_in(tmp_path):
    def run(rows, **extra):
        return {"rows": rows, "device_name": "NVIDIA H200", "torch": "2.11", "config": "default",
                "data": "synthetic:random-walk", **extra}

    def cell(n, fold, seconds, steps, log_loss, compiling=None):
        info = {"compiled": True, "mode": "default",  # a no-grad shape's compiling is not in train_seconds
                "first_call_seconds": {"(2, 512, 14)": compiling, "(3, 512, 14) no_grad": 5.0}} if compiling else None
        return {"n": n, "fold": fold, "train_seconds": seconds, "eval_seconds": 0.5, "steps": steps,
                "log_loss": log_loss, "compile": info}

    eager = run([cell(512, 0, 8.0, 300, 1.0480), cell(512, 4, 9.0, 300, 1.0470), {"n": 512, "all_folds_wall_seconds": 20}])
    compiled = run([cell(512, 0, 34.0, 300, 1.0484, compiling=30.0), cell(512, 4, 4.0, 300, 1.0466, compiling=0.01)])
    text = tables.compile_cells_markdown(eager, compiled)
    assert "| 512 | 0 | 300 / 300 | 26.7 | 113.3 | 30.0 | 13.3 | 8.5 | 34.5 | 0.0004 |" in text  # 34 s, 30 compiling
    assert "| 512 | 4 | 300 / 300 | 30.0 | 13.3 | 0.0 | 13.3 | 9.5 | 4.5 | 0.0004 |" in text
    assert "| all | | | | | | | 18.0 | 39.0 | |" in text
    for variant, result in (("eager", eager), ("compiled", compiled)):
        common.write_json(tmp_path / "cells" / variant / "engine-cuda.json", result)
    assert tables.write_compile_cells_markdown(tmp_path / "cells").read_text() == text
    assert "compiled with mode default" in text
    # these cells recorded no "<shape> backward": the footnote says where its compiling went
    assert "cells recorded before the backward was timed" in text and "compare the ms per step" not in text
    for r in compiled["rows"]:
        r["compile"]["first_call_seconds"]["(2, 512, 14) backward"] = 0.5
    compiled["rows"][0]["steps"] = 160  # early stopping ended it elsewhere
    text = tables.compile_cells_markdown(eager, compiled)
    assert "cells recorded before the backward was timed" not in text and "compare the ms per step" in text


def test_scaling_rows_speed_up_and_efficiency(tmp_path):
    from tsflash.runfolder import write_json

    runs = {}
    for gpus, cells in ((1, 16), (2, 16)):
        run = tmp_path / f"run{gpus}"
        for k in range(cells):
            write_json(run / "cells" / "n512" / f"fold{k}-seed0.cell.json", {})
        write_json(run / "run.json", {"status": "complete"})
        runs[gpus] = run
    path = tmp_path / "bench" / "scaling.json"
    tables.record_scaling(path, runs[1], 1, 200.0, "512,4096,32768")
    tables.record_scaling(path, runs[2], 2, 110.0, "512,4096,32768")
    md = tables.record_scaling(path, runs[2], 2, 105.0, "512,4096,32768").read_text()  # a rerun replaces its row
    lines = md.splitlines()
    assert lines[2] == "| 1 | 512,4096,32768 | 200 | 1 | 16 | 4.8 | 1.00x | 100% |"
    assert lines[3] == "| 2 | 512,4096,32768 | 105 | 1 | 16 | 9.1 | 1.90x | 95% |" and len(lines) == 4
    # a 1-GPU sweep resumed over three device calls: their wall-clocks add up
    assert tables.add_scaling_time(runs[1], 120.0) == (120.0, 1)
    assert tables.add_scaling_time(runs[1], 60.5) == (180.5, 2)
    total, calls = tables.add_scaling_time(runs[1], 29.5)
    md = tables.record_scaling(path, runs[1], 1, total, "512,4096,32768", calls).read_text()
    assert md.splitlines()[2] == "| 1 | 512,4096,32768 | 210 | 3 | 16 | 4.6 | 1.00x | 100% |"
    assert md.splitlines()[3].startswith("| 2 | 512,4096,32768 | 105 | 1 | 16 | 9.1 | 2.00x | 100% |")


def test_model_variants_markdown_pairs_the_cells_by_seed_and_leaves_compiling_out(tmp_path):
    def run(rows, overrides, **extra):
        return {"rows": rows, "device_name": "NVIDIA H200", "torch": "2.11", "config": "default",
                "data": "synthetic:long-memory:0:strength=0.2", "overrides": overrides, **extra}

    def cell(n, fold, seconds, steps, log_loss, hit, compiling):
        return {"n": n, "fold": fold, "train_seconds": seconds, "steps": steps, "log_loss": log_loss,
                "direction_hit_rate": hit, "compile": {"compiled": True, "first_call_seconds": {
                    "(2, 512, 14)": compiling, "(2, 512, 14) backward": 1.0, "(3, 512, 14) no_grad": 5.0}}}

    fast_flags = ["train.compile=true", "model.n_heads=2", "model.residual=compute"]
    # seed 0: no "seed" field (results written before it): the config's first seed, 0
    experiment = [run([cell(512, 0, 24.0, 300, 1.0480, 0.5210, 20.0), cell(32768, 0, 50.0, 560, 0.9910, 0.6810, 0.0),
                       {"n": 512, "all_folds_wall_seconds": 30}], ["train.compile=true"]),
                  run([cell(512, 0, 24.0, 300, 1.0400, 0.6200, 20.0)], ["train.compile=true", "train.seeds=[1]"])]
    # "bf16-fast" sorts before "experiment": the reference still comes first
    fast = [run([cell(512, 0, 18.0, 280, 1.0470, 0.5230, 14.0), cell(32768, 0, 40.0, 500, 0.9950, 0.5700, 0.0)], fast_flags),
            run([cell(512, 0, 18.0, 280, 1.0500, 0.5230, 14.0)], [*fast_flags, "train.seeds=[1]"], seed=1)]
    text = tables.model_variants_markdown({"experiment": experiment, "bf16-fast": fast})
    lines = text.splitlines()
    assert lines[2:6] == [
        "| 512 | 0 | 0 | experiment | 300 | 10.0 | 1.0480 |  | 0.5210 |",  # (24 - 20 - 1) s / 300 steps
        "| 512 | 0 | 0 | bf16-fast | 280 | 10.7 | 1.0470 | -0.0010 | 0.5230 |",
        "| 512 | 0 | 1 | experiment | 300 | 10.0 | 1.0400 |  | 0.6200 |",
        "| 512 | 0 | 1 | bf16-fast | 280 | 10.7 | 1.0500 | +0.0100 | 0.5230 |"]
    assert "| 32768 | 0 | 0 | bf16-fast | 500 | 78.0 | 0.9950 | +0.0040 | 0.5700 |" in text
    assert "| bf16-fast | 3 | +0.0043 | 2 |" in text  # (-0.0010 + 0.0100 + 0.0040) / 3; two cells worse
    assert "**bf16-fast**: `--set train.compile=true` `--set model.n_heads=2` `--set model.residual=compute`" in text
    found = tables.model_variants_markdown({"experiment": experiment, "bf16-fast": fast}, found_at=0.6)
    assert "| bf16-fast | 3 | +0.0043 | 2 | 2, 0 |" in found  # the experiment found it twice (0.6810, 0.6200), fast never
    assert ("| variant | cells | mean log-loss minus experiment | cells with a higher log-loss | found the effect "
            "(hit rate >= 0.6000): experiment, variant |\n|---|---|---|---|---|\n") in found
    for seed in (0, 1):
        for variant, results in (("bf16-fast", fast), ("experiment", experiment)):
            common.write_json(tmp_path / f"seed{seed}" / variant / "engine-cuda.json", results[seed])
    path = tables.write_model_variants_markdown(tmp_path / "seed0", tmp_path / "seed1")
    assert path == tmp_path / "seed0.md" and path.read_text() == text  # the experiment first, whatever the names
    with pytest.raises(ValueError, match="compares two or more variants"):
        tables.model_variants_markdown({"experiment": experiment})
    with pytest.raises(UserError, match="no experiment/engine-cuda.json under"):
        tables.write_model_variants_markdown(tmp_path / "seed0" / "bf16-fast")
    with pytest.raises(UserError, match="model variant experiment: cell N=512 fold 0 seed 0 is in two results"):
        tables.write_model_variants_markdown(tmp_path / "seed0", tmp_path / "seed0")


def test_the_found_bar_is_half_way_to_the_published_controls_oracle(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"runs": [{"data": "synthetic:long-memory:0:strength=0.2", "oracle": {"hit_rate": 0.69}},
                                            {"data": "synthetic:random-walk:0"}]}))
    assert tables.control_found_bar("synthetic:long-memory:0:strength=0.2", summary) == pytest.approx(0.595)
    assert tables.control_found_bar("synthetic:random-walk:0", summary) is None  # no oracle: nothing planted
    assert tables.control_found_bar("synthetic:long-memory:1", summary) is None
    assert tables.control_found_bar("x", tmp_path / "absent.json") is None
    # the published summary's bar, as its report states it
    assert f"{tables.control_found_bar('synthetic:long-memory:0:strength=0.2'):.4f}" == "0.5947"


def test_where_the_published_default_sweeps_time_went_recomputes_as_docs_benchmarks_says():
    """docs/benchmarks.md, "Where the published default sweep's 13 min 23 s went": the cell summaries of
    reports/h200-btcusdt-1m-second-edition, and the compiled estimate scaled by the engine's steps."""
    from lab.bench_tables import sweep_time_split
    from tests.conftest import REPO

    split = sweep_time_split(REPO / "reports/h200-btcusdt-1m-second-edition")
    rows = split["per_n"]
    assert {n: r["cells"] for n, r in rows.items()} == {512: 15, 4096: 15, 32768: 15}
    assert [round(r["wall"], 1) for r in rows.values()] == [129.1, 147.2, 442.0]
    assert [round(r["train"], 1) for r in rows.values()] == [113.2, 124.5, 407.1]
    assert round(sum(r["wall"] for r in rows.values()), 1) == 718.3 and round(split["baselines"], 1) == 37.1
    step_ms = {512: (26.2, 13.1), 4096: (32.9, 20.6), 32768: (95, 82)}  # compile-cells.md, eager -> compiled
    compiled = {n: r["train"] * step_ms[n][1] / step_ms[n][0] for n, r in rows.items()}
    assert round(sum(compiled.values())) == 486 and round(compiled[32768]) == 351
    assert round(13 * 60 + 23 - sum(r["train"] for r in rows.values()) + sum(compiled.values())) == 644  # 10 min 44 s
    text = (REPO / "docs/benchmarks.md").read_text()
    assert "| 15 model cells, wall-clock | 129.1 s | 147.2 s | 442.0 s | 718.3 s |" in text
    assert "about 486 s instead of 645 s" in text and "about 10 min 44 s" in text
