"""The published bench tables (reports/bench/*.md): MFU per compile mode (mfu.md), sweep cells
plain against compiled (compile-cells.md), other models against the experiment's on the positive
control (model-variants.md, which reads the published controls under the checkout's reports/),
and the scaling over GPUs (scaling.md with scaling.json). Each `*_markdown` function turns
results into Markdown (`tsflash.report.markdown.markdown_table`), each `write_*` reads the
results' folder and writes the file; lab/h200.sh calls them.
"""

from __future__ import annotations

from pathlib import Path

from tsflash import atomic
from tsflash.bench.common import write_json
from tsflash.bench.trainstep import bandwidth_markdown, compile_label, highest_ceiling, profile_markdown
from tsflash.data.synthetic import found_bar
from tsflash.errors import UserError
from tsflash.model import fastpath
from tsflash.report.markdown import format_cell, markdown_table

# What each variant folder of `lab/h200.sh mfu` ran (mfu.md says it under the table).
MFU_VARIANTS = {
    "eager": "no torch.compile",
    "default": 'torch.compile mode "default" (inductor fuses the element-wise work)',
    "reduce-overhead": 'torch.compile mode "reduce-overhead" (the same, replayed as CUDA graphs)',
    "tuned": '"default" with inductor\'s Triton kernels (fused element-wise work, norms) tuned block size by '
             "block size (tsflash.model.fastpath.COMPILE_OPTIONS; matmuls left to cuBLAS)",
    "max-autotune-no-cudagraphs": 'torch.compile mode "max-autotune-no-cudagraphs" (matmuls tuned, epilogues fused)',
    "default-head128": '"default" with 2 heads of 128 instead of 4 heads of 64: the same parameters and FLOPs, '
                       "but another model than the experiment's; it shows what the attention kernel does at head size 128",
    "default-bf16-residual": '"default" with the residual stream in bf16 (`--residual compute`) instead of float32: '
                             "the same parameters and FLOPs, fewer bytes for the norms and residual adds, other numerics",
    "default-head128-bf16-residual": '"default" with both: 2 heads of 128 and the residual stream in bf16',
    "reduce-overhead-head128-bf16-residual": '"reduce-overhead" (CUDA graphs) with both: 2 heads of 128 and the '
                                             "residual stream in bf16",
}


def mfu_markdown(results: dict[str, dict]) -> str:
    """One Markdown table from `bench_train` results keyed by variant ("eager", "default", ...):
    per N and variant the step time, MFU (one FLOPs rule) and compile outcome, then the kernel
    `auto` chose at each N with its margin over the runner-up (from the first variant).

    One denominator for every variant: the highest matmul ceiling measured by any of the
    variants' processes. Each process measures its own, and on the H200 they differ by up to 6 %
    within one call (753 to 799 TFLOP/s): per-process ceilings would rank two variants with the
    same step time apart. The highest is the most the chip showed, so the MFU is not flattered."""
    first = next(iter(results.values()))
    ceiling_tflops = highest_ceiling(results, "tflops")
    steps = []
    for n in [r["n"] for r in first["rows"]]:
        for variant, result in results.items():
            r: dict = next((r for r in result["rows"] if r["n"] == n), {})
            first_s = sum((r.get("compile") or {}).get("first_call_seconds", {}).values()) or None
            mfu = r["model_tflops"] / ceiling_tflops if r.get("model_tflops") else None
            steps.append([n, variant, format_cell(r.get("step_s"), ".1f", 1e3), format_cell(mfu, ".1%"),
                          compile_label(r.get("compile")) or "-", format_cell(first_s, ".1f")])
    choices = []
    for r in first["rows"]:
        c = r.get("kernel_choice") or {}
        medians = ", ".join(f"{b} {m:.3f}" for b, m in (c.get("median_ms") or {}).items()) or c.get("rule", "-")
        choices.append([r["n"], str(c.get("chosen", "-")), c.get("runner_up") or "-",
                        format_cell(c.get("margin"), "+.1%"), str(medians)])
    lines = [markdown_table(["N", "variant", "step ms", "MFU", "compiled", "first call s"], steps), "",
             markdown_table(["N", "kernel auto chose", "runner-up", "margin", "median ms per candidate"], choices)]
    env, ceiling = first["environment"], first["ceiling"]
    ceilings = ", ".join(f"{variant} {result['ceiling']['tflops']:.0f}" for variant, result in results.items())
    lines += ["", f"{env.get('gpu', env['device'])}, torch {env['torch']}; MFU = model FLOPs (tsflash.model.flops) per second "
              f"over {ceiling_tflops:.0f} TFLOP/s, the highest of the {ceiling['matmul_size']}^3 {ceiling['dtype']} "
              f"matmul ceilings measured by the variants' processes ({ceilings} TFLOP/s)."]
    described = [f"**{v}**: {MFU_VARIANTS[v]}" for v in results if v in MFU_VARIANTS]
    if described:
        lines += ["", "Variants: " + "; ".join(described) + "."]
    profiled = profile_markdown(results)
    if profiled:
        lines += ["", "Where a step's time goes, ms per step (torch.profiler over the steps after the timed ones: "
                  "device time of the kernels by kind; idle = the timed step minus the busy time, the device "
                  "waiting for the host):", "", profiled]
    moved = bandwidth_markdown(results)
    if moved:
        lines += ["", "The fused element-wise work against the memory bandwidth (how much of the step fusion alone "
                  "could still save):", "", moved]
    return "\n".join(lines) + "\n"


def write_mfu_markdown(folder: Path | str) -> Path:
    """<folder>/../mfu.md from the train.json of each variant folder in `folder` (eager first,
    then the compile modes in tsflash.model.fastpath.COMPILE_MODES order, then the other variants by name)."""
    import json

    folder = Path(folder)
    order = ["eager", *fastpath.COMPILE_MODES]
    found = {p.parent.name: json.loads(p.read_text()) for p in folder.glob("*/train.json")}
    results = {v: found[v] for v in sorted(found, key=lambda v: (order.index(v) if v in order else len(order), v))}
    if not results:
        raise UserError(f"no */train.json under {folder}")
    path = folder.parent / "mfu.md"
    atomic.write_text(path, mfu_markdown(results))
    return path


def training_compile_seconds(cell: dict) -> float:
    """The compiling inside an engine cell's train_seconds: the first call of each training shape
    and its first backward (no-grad shapes, compiled only with fastpath.COMPILE_EVALUATION, compile
    outside the training time; cells of earlier records may have them)."""
    firsts = (cell.get("compile") or {}).get("first_call_seconds", {})
    return sum(t for shape, t in firsts.items() if not shape.endswith("no_grad"))


def compile_cells_markdown(eager: dict, compiled: dict) -> str:
    """A Markdown table of what torch.compile does to a sweep's cells, from two
    `benchmarks/bench_engine.py` results of the same cells (same config, data, folds and seed),
    one plain and one with train.compile=true. Per cell (N, fold): the steps trained by each, the
    training milliseconds per step of each (the compiled cell's include its compiling: the first
    call of each shape is a training step), the compiling seconds among them and the compiled ms
    per step without them, training + validation + evaluation seconds of each, and the
    |difference| of the test log-loss; then the total over all cells."""
    def cells(result):
        return {(r["n"], r["fold"]): r for r in result["rows"] if "fold" in r}

    plain, fast = cells(eager), cells(compiled)
    rows, totals = [], [0.0, 0.0]
    for key in sorted(k for k in plain if k in fast):
        a, b = plain[key], fast[key]
        compiling = training_compile_seconds(b)
        seconds = [r["train_seconds"] + (r.get("val_seconds") or 0.0) + r["eval_seconds"] for r in (a, b)]
        totals = [t + x for t, x in zip(totals, seconds, strict=True)]
        rows.append([key[0], key[1], f"{a['steps']} / {b['steps']}", f"{a['train_seconds'] / a['steps'] * 1e3:.1f}",
                     f"{b['train_seconds'] / b['steps'] * 1e3:.1f}", f"{compiling:.1f}",
                     f"{(b['train_seconds'] - compiling) / b['steps'] * 1e3:.1f}", f"{seconds[0]:.1f}",
                     f"{seconds[1]:.1f}", f"{abs(a['log_loss'] - b['log_loss']):.4f}"])
    rows.append(["all", *[None] * 6, f"{totals[0]:.1f}", f"{totals[1]:.1f}", None])
    header = ["N", "fold", "steps eager / compiled", "eager ms/step", "compiled ms/step", "compiling s",
              "compiled ms/step without compiling", "eager s", "compiled s", "abs diff log-loss"]
    return "\n".join([markdown_table(header, rows), "", _compile_cells_note(compiled, plain, fast)]) + "\n"


def _compile_cells_note(compiled: dict, plain: dict, fast: dict) -> str:
    """What `compile_cells_markdown`'s table compares and how its compiling is counted."""
    modes = {str((r.get("compile") or {}).get("mode")) for r in fast.values() if (r.get("compile") or {}).get("compiled")}
    backward_untimed = any(  # a compiled cell with a training shape but no "<shape> backward"
        not any(k.endswith(" backward") for k in firsts) and any(not k.endswith("no_grad") for k in firsts)
        for firsts in ((r.get("compile") or {}).get("first_call_seconds", {}) for r in fast.values()))
    return (f"{compiled.get('device_name', compiled.get('device'))}, torch {compiled.get('torch')}; config "
            f"{compiled.get('config')} on {compiled.get('data')}, compiled with mode {', '.join(sorted(modes)) or '(none: eager)'}; "
            "one worker, one process per variant: each shape compiles once per process, so the first cell "
            "at an N pays for the graphs the later cells reuse. \"compiling s\" times the first call of each "
            "training shape and its first backward (where the backward graph compiles)"
            + ("" if not backward_untimed else "; cells recorded before the backward was timed count its "
               "compiling in the training time only: the first cell's higher ms per step without compiling")
            + ". No-grad shapes compile outside the training time: validation passes are not in it, test "
            "batches are in the evaluation time. The \"s\" columns: training + validation (where the cell "
            "recorded it) + evaluation."
            + ("" if all(r.get("val_seconds") is not None for r in (*plain.values(), *fast.values())) else
               " Some cells did not record their validation time: their columns leave it out.")
            + ("" if all(plain[k]["steps"] == fast[k]["steps"] for k in plain if k in fast) else
               " Where early stopping ended a cell at another step (GPU and compiled numerics differ in the last "
               "bits), the totals cover different numbers of steps: compare the ms per step."))


def write_compile_cells_markdown(folder: Path | str) -> Path:
    """<folder>.md from <folder>/eager and <folder>/compiled's engine-cuda.json (`compile_cells_markdown`)."""
    import json

    folder = Path(folder)
    eager, compiled = (json.loads((folder / v / "engine-cuda.json").read_text()) for v in ("eager", "compiled"))
    path = folder.with_suffix(".md")
    atomic.write_text(path, compile_cells_markdown(eager, compiled))
    return path


MODEL_REFERENCE = "experiment"  # lab/h200.sh model-variants: the experiment's model, the others' reference


def engine_seed(result: dict) -> int:
    """The seed a `benchmarks/bench_engine.py` result trained (the config's first, after its --set
    overrides; results written before it recorded "seed" say it through those)."""
    if "seed" in result:
        return result["seed"]
    from tsflash.config import load_config, parse_overrides

    seeds = parse_overrides(result.get("overrides", [])).get("train", {}).get("seeds")
    return (seeds if seeds is not None else load_config(result["config"]).train.seeds)[0]


def model_variants_markdown(results: dict[str, list[dict]], found_at: float | None = None) -> str:
    """Do other models learn what the experiment's learns? A Markdown table from
    `benchmarks/bench_engine.py` results of the same cells (config, data, folds, seeds) with other
    model settings (their `--set` overrides): `results` maps each variant to its results (one per
    seed), the first variant the reference. Per cell (N, fold, seed) and variant: steps trained,
    training ms per step outside compiling, test log-loss, its difference from the reference's and
    the direction hit rate; then per variant the mean difference over the cells both have and, with
    `found_at` (a hit rate: the positive control's half-way mark from a coin flip to its oracle),
    how many of the cells found the planted effect."""
    names = list(results)
    if len(names) < 2:
        raise ValueError(f"model_variants_markdown compares two or more variants, got {names}")
    cells: dict[str, dict[tuple, dict]] = {v: {} for v in names}
    for v in names:
        for res in results[v]:
            for r in (r for r in res["rows"] if "fold" in r):
                key = (r["n"], r["fold"], engine_seed(res))
                if key in cells[v]:
                    raise UserError(f"model variant {v}: cell N={key[0]} fold {key[1]} seed {key[2]} is in two results; "
                                    "keep one folder per seed and folds")
                cells[v][key] = r
    ref = names[0]

    def ms_per_step(r):
        return (r["train_seconds"] - training_compile_seconds(r)) / r["steps"] * 1e3

    rows: list[list] = []
    diffs: dict[str, list[float]] = {v: [] for v in names[1:]}
    for key in sorted(cells[ref]):
        for v in names:
            r = cells[v].get(key)
            if r is None:
                continue
            if v != ref:
                diffs[v].append(r["log_loss"] - cells[ref][key]["log_loss"])
            rows.append([*key, v, r["steps"], f"{ms_per_step(r):.1f}", f"{r['log_loss']:.4f}",
                         "" if v == ref else format(diffs[v][-1], "+.4f"), f"{r['direction_hit_rate']:.4f}"])
    lines = [markdown_table(["N", "fold", "seed", "variant", "steps", "ms/step", "test log-loss", f"minus {ref}",
                             "direction hit rate"], rows), "", _variant_summary(cells, diffs, ref, found_at)]
    r0 = results[ref][0]
    flags = {v: " ".join(f"`--set {o}`" for o in results[v][0].get("overrides", []) if not o.startswith("train.seeds="))
             for v in names}
    lines += ["", f"{r0.get('device_name', r0.get('device'))}, torch {r0.get('torch')}; config {r0.get('config')} on "
              f"{r0.get('data')}; " + "; ".join(f"**{v}**: {flags[v] or 'the config as it is'}" for v in names)
              + ". One process per variant and seed; ms per step leaves out the compiling of each training shape."]
    return "\n".join(lines) + "\n"


def _variant_summary(cells: dict[str, dict], diffs: dict[str, list[float]], ref: str, found_at: float | None) -> str:
    """`model_variants_markdown`'s second table: per variant the mean log-loss difference from
    `ref` and, with `found_at`, the cells of each that found the planted effect."""
    header = ["variant", "cells", f"mean log-loss minus {ref}", "cells with a higher log-loss"]
    if found_at is not None:
        header.append(f"found the effect (hit rate >= {found_at:.4f}): {ref}, variant")
    rows = []
    for v, d in diffs.items():
        row = [v, len(d), format_cell(sum(d) / len(d) if d else None, "+.4f"), sum(x > 0 for x in d)]
        if found_at is not None:
            shared = [k for k in cells[v] if k in cells[ref]]
            row.append(f"{sum(cells[ref][k]['direction_hit_rate'] >= found_at for k in shared)}, "
                       f"{sum(cells[v][k]['direction_hit_rate'] >= found_at for k in shared)}")
        rows.append(row)
    return markdown_table(header, rows)


# The published controls (lab/controls.py), in the checkout this package runs from
CONTROLS_SUMMARY = Path(__file__).resolve().parents[1] / "reports" / "controls" / "protocol" / "summary.json"


def control_found_bar(data: str, summary: Path | str = CONTROLS_SUMMARY) -> float | None:
    """The hit rate at which a cell has found the planted effect of the control market `data`:
    `tsflash.data.synthetic.found_bar` of the oracle's hit rate in the published controls' summary;
    None when the summary (or its oracle for `data`) is not there."""
    import json

    summary = Path(summary)
    if not summary.exists():
        return None
    runs = json.loads(summary.read_text())["runs"]
    rate = next((r["oracle"]["hit_rate"] for r in runs if r["data"] == data and (r.get("oracle") or {}).get("hit_rate")), None)
    return None if rate is None else found_bar(rate)


def write_model_variants_markdown(*folders: Path | str, out: Path | str | None = None,
                                  found_at: float | None = None) -> Path:
    """`out` (default: the first folder's name + .md) from <folder>/<variant>/engine-cuda.json in
    each folder (one folder per seed; `model_variants_markdown`), the experiment's model first."""
    import json

    results: dict[str, list[dict]] = {}
    for folder in map(Path, folders):
        for p in sorted(folder.glob("*/engine-cuda.json")):
            results.setdefault(p.parent.name, []).append(json.loads(p.read_text()))
    if MODEL_REFERENCE not in results:
        raise UserError(f"no {MODEL_REFERENCE}/engine-cuda.json under {', '.join(map(str, folders))}")
    results = {MODEL_REFERENCE: results.pop(MODEL_REFERENCE), **results}
    path = Path(out) if out is not None else Path(folders[0]).with_suffix(".md")
    atomic.write_text(path, model_variants_markdown(results, found_at))
    return path


def scaling_markdown(rows: list[dict]) -> str:
    """The scaling table from rows {"gpus", "seconds", "cells", "lengths", "complete"[, "invocations"]}:
    wall-clock, cells per minute, speed-up and efficiency (T1 / (K * TK)) against the 1-GPU row of
    the same lengths. A row measured over several invocations (a sweep resumed across device calls)
    sums their wall-clocks, each with its own start-up, and says how many."""
    table = []
    for r in sorted(rows, key=lambda r: (r["lengths"], r["gpus"])):
        one = next((o for o in rows if o["gpus"] == 1 and o["lengths"] == r["lengths"] and o["complete"]), None)
        speedup = one["seconds"] / r["seconds"] if one and r["complete"] else None
        table.append([r["gpus"], r["lengths"], f"{r['seconds']:.0f}{'' if r['complete'] else ' (unfinished)'}",
                      r.get("invocations", 1), r["cells"], f"{r['cells'] / r['seconds'] * 60:.1f}",
                      f"{format_cell(speedup, '.2f')}x", format_cell(None if speedup is None else speedup / r["gpus"], ".0%")])
    header = ["GPUs", "lengths", "wall-clock s", "invocations", "cells", "cells per minute", "speed-up", "efficiency"]
    return markdown_table(header, table) + "\n"


SCALING_TIMES = "scaling-seconds.json"  # in the run folder: the wall-clock of each invocation


def add_scaling_time(run_dir: Path, seconds: float) -> tuple[float, int]:
    """Append one invocation's wall-clock to the run folder's SCALING_TIMES; returns (total seconds,
    invocations) so far. A measurement that needs several device calls adds them up."""
    import json

    path = Path(run_dir) / SCALING_TIMES
    times = json.loads(path.read_text())["seconds"] if path.exists() else []
    times.append(float(seconds))
    write_json(path, {"seconds": times})
    return sum(times), len(times)


def record_scaling(path: Path, run_dir: Path, gpus: int, seconds: float, lengths: str, invocations: int = 1) -> Path:
    """Add (or replace) the row of `gpus` GPUs and these lengths in `path` (scaling.json beside
    scaling.md) from a sweep's folder (unfinished rows are marked), and rewrite scaling.md."""
    import json

    from tsflash.runfolder import RunFolder

    folder = RunFolder(run_dir)
    row = {"gpus": gpus, "seconds": seconds, "invocations": invocations, "cells": folder.n_finished_cells(),
           "lengths": lengths, "complete": folder.is_complete(), "run": str(run_dir)}
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if (r["gpus"], r["lengths"]) != (gpus, lengths)] + [row]
    write_json(path, {"rows": rows})
    atomic.write_text(path.with_suffix(".md"), scaling_markdown(rows))
    return path.with_suffix(".md")


def sweep_time_split(run_dir: Path | str) -> dict:
    """Where a finished sweep's cell time went, from its cell summaries: per N the model cells'
    count and seconds (wall-clock, training, scoring), and the baselines' seconds. What is left of
    the run's wall-clock is data, the precision check, the report and process starts."""
    from tsflash.runfolder import RunFolder, read_json

    folder = RunFolder(Path(run_dir))
    per_n: dict[int, dict[str, float]] = {}
    baselines = 0.0
    for path in sorted(folder.cells_dir.rglob("*.cell.json")):
        cell = read_json(path)
        if "baselines" in cell:
            baselines += cell["seconds"]
            continue
        row = per_n.setdefault(int(cell["n"]), {"cells": 0, "wall": 0.0, "train": 0.0, "score": 0.0})
        row["cells"] += 1
        row["wall"] += cell["seconds"]
        row["train"] += cell["cost"]["train_seconds"]
        row["score"] += cell["cost"].get("eval_seconds") or 0.0
    return {"per_n": dict(sorted(per_n.items())), "baselines": baselines}
