"""The training-step benchmark and its profiler: seconds per full step (forward, loss, backward,
clip, AdamW) of a fresh model at fixed tokens per step across N, its model FLOP utilisation
(MFU: the one FLOPs rule of `tsflash.model.flops`, (6 P + 6 L d N) * tokens, the engine's
per-cell TFLOP/s too, over the matmul ceiling measured in the same run), where a step's device
time goes (torch.profiler, by kernel kind) and the bytes inductor's fused kernels move against
the copy ceiling. The tables of one result (the CLI's) are here; the published ones that put
several side by side are in `lab.bench_tables` (the published tables).

The steps are timed with the device synchronised around `steps` real steps (each changes the
model, so a library timer that repeats a call at will does not fit); peak memory and
out-of-memory rows as in `tsflash.bench.common`.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any, cast

import torch

from tsflash.bench.common import check_arguments, copy_ceiling, environment, format_table, matmul_ceiling
from tsflash.device import PeakMemory, autocast, free_memory, is_oom, sync
from tsflash.errors import UserError
from tsflash.model import attention as attn
from tsflash.model import fastpath
from tsflash.model.flops import flops_per_token
from tsflash.report.markdown import format_cell, markdown_table

log = logging.getLogger(__name__)


# Inductor's bandwidth profile (torch._inductor.config.profile_bandwidth): every Triton kernel it
# generated is timed alone at its first call, with the bytes it reads and writes (inductor's own
# count), and each compiled graph's call writes a block to profile_bandwidth_output:
#   TRITON KERNELS BANDWIDTH INFO (<the graph's wrapper file>)
#   0.193ms    \t0.537 GB \t 2780.12GB/s \t 12.34% \t triton_poi_fused_gelu_8
#   ...
#   SUMMARY (<file>)
_BANDWIDTH_BLOCK = re.compile(r"^TRITON KERNELS BANDWIDTH INFO \((?P<graph>.*)\)\s*$")
_BANDWIDTH_LINE = re.compile(
    r"^\s*(?P<ms>[0-9.eE+-]+)ms\s+(?P<gb>[0-9.eE+-]+) GB\s+(?P<gbs>[0-9.eE+-]+)GB/s\s+"
    r"[0-9.]+%\s+(?P<kernel>\S+)\s*$"
)


def parse_inductor_bandwidth(text: str) -> dict:
    """One training step's Triton kernels from inductor's bandwidth profile (the text above): the
    first block of each compiled graph (the step's first call of it; later calls repeat it) gives
    every kernel call of the step. Returns {"graphs": count, "gb": bytes/1e9 moved per step,
    "ms": the kernels' isolated times summed, "kernels": {name: {"calls", "gb", "ms"}} by ms}."""
    graphs: set[str] = set()
    kernels: dict[str, dict] = {}
    current = False  # inside the first block of a graph
    for line in text.splitlines():
        block = _BANDWIDTH_BLOCK.match(line.strip())
        if block:
            current = block["graph"] not in graphs
            graphs.add(block["graph"])
            continue
        if line.startswith("SUMMARY"):
            current = False
            continue
        call = _BANDWIDTH_LINE.match(line)
        if call and current:
            k = kernels.setdefault(call["kernel"], {"calls": 0, "gb": 0.0, "ms": 0.0})
            k["calls"] += 1
            k["gb"] += float(call["gb"])
            k["ms"] += float(call["ms"])
    kernels = dict(sorted(kernels.items(), key=lambda item: -item[1]["ms"]))
    return {
        "graphs": len(graphs),
        "gb": sum(k["gb"] for k in kernels.values()),
        "ms": sum(k["ms"] for k in kernels.values()),
        "kernels": kernels,
    }


def measure_inductor_bandwidth(config, n: int, batch: int, device: torch.device, seed: int) -> dict | None:
    """The bytes inductor's kernels move in one training step at (batch, n): a fresh model compiled
    ("default", for this shape alone) under inductor's bandwidth profile, one step, parsed by
    `parse_inductor_bandwidth`. None where nothing compiles to Triton (CPU, no Triton), and
    where the step did not run whole (out of memory; fewer than the forward and backward graphs).
    The fused kernels and their bytes are the same in every mode but max-autotune's (whose matmul
    templates are Triton kernels too), so "default" stands for them.

    A diagnostic, never a timing: under the profile a kernel runs only at its first call (later
    calls reuse its measurement), so the step computes garbage. Dynamo's caches are reset before
    and after, so no compiled graph of it is reused by anything else."""
    import tempfile

    import torch._inductor.config as inductor_config

    if fastpath.eager_reason(device) is not None:
        return None
    torch._dynamo.reset()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bandwidth.txt"
            # benchmark_harness off: with an output file inductor would also run each new graph on
            # random inputs at compile time (and torch 2.11 fails there: a missing argument)
            with inductor_config.patch(
                profile_bandwidth=True,
                profile_bandwidth_regex="",
                benchmark_harness=False,
                profile_bandwidth_output=str(out),
                force_disable_caches=True,
            ):
                row = measure_train_step(config, n, batch, device, steps=1, warmup=1, compile="default", seed=seed)
            parsed = parse_inductor_bandwidth(out.read_text() if out.exists() else "")
    finally:
        torch._dynamo.reset()
    if row["status"] != "ok" or parsed["graphs"] < 2:  # a step is a forward and a backward graph at least
        log.warning("inductor bandwidth N=%d: no whole step (%s, %d graphs)", n, row["status"], parsed["graphs"])
        return None
    return parsed


# Where a training step's device time goes. Kernels inductor generated go by their name's prefix
# (whatever ops their name lists after it: a layout copy for attention is named after attention):
# "triton_tem" matmul templates (max-autotune), every other "triton_" kernel fused element-wise.
# The rest go to the first kind whose name fragment the kernel's (on CPU: the operator's) name
# contains; attention before matmul, since FlashAttention's names carry "cutlass::" template types.
TRITON_KINDS = (("triton_tem", "matmul"), ("triton_", "fused element-wise"))
STEP_KINDS = (
    ("attention", ("sdpa", "fmha", "flash_", "attention", "cudnn::fusion")),  # cudnn::fusion: its backward's helpers
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear")),
    ("optimizer", ("multi_tensor", "adam", "foreach", "lpnorm")),
    ("fused element-wise", ()),
)
OTHER_KIND = "other"  # eager element-wise and reductions, copies, memsets


def kernel_kind(name: str) -> str:
    """The kind (TRITON_KINDS, STEP_KINDS) of a kernel or operator name; OTHER_KIND when none matches."""
    low = name.lower()
    prefixed = next((kind for prefix, kind in TRITON_KINDS if low.startswith(prefix)), None)
    return prefixed or next((kind for kind, parts in STEP_KINDS if any(p in low for p in parts)), OTHER_KIND)


def profile_step(step, device: torch.device, steps: int, step_s: float) -> dict:
    """Where `steps` calls of step() spend their time, per step, from torch.profiler.

    CUDA: the device time of every kernel (one stream, so kernels do not overlap); "idle" is the
    timed step (`step_s`, measured without the profiler) minus the busy time: the device waiting
    for the host, i.e. how launch-bound the step is. CPU: the operators' own (self) time instead
    of kernels. Returns {"kernels": {name: ms per step} (every kernel; names cut at 160
    characters), "ms": {kind: ms per step} (`step_kinds`), "busy_ms", "idle_ms", "source"}."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        sync(device)
    if cuda:
        timed = [
            (e.name, e.time_range.elapsed_us())
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
        ]
    else:
        timed = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    kernels: dict[str, float] = {}
    for name, us in timed:
        if us > 0:
            kernels[name[:160]] = kernels.get(name[:160], 0.0) + us / 1e3 / steps
    kernels = dict(sorted(kernels.items(), key=lambda item: -item[1]))
    by_kind = step_kinds(kernels)
    busy = sum(by_kind.values())
    return {
        "kernels": kernels,
        "ms": by_kind,
        "busy_ms": busy,
        "idle_ms": max(step_s * 1e3 - busy, 0.0) if cuda else None,
        "source": "CUDA kernels" if cuda else "CPU operators (self time)",
    }


def step_kinds(kernels: dict[str, float]) -> dict[str, float]:
    """{kind: ms} summed over {kernel name: ms} by `kernel_kind`, every kind present."""
    by_kind = {kind: 0.0 for kind, _ in STEP_KINDS} | {OTHER_KIND: 0.0}
    for name, ms in kernels.items():
        by_kind[kernel_kind(name)] += ms
    return by_kind


def measure_train_step(
    config,
    n: int,
    batch: int,
    device: torch.device,
    steps: int,
    warmup: int,
    compile: bool | str,
    seed: int,
    profile: int = 0,
) -> dict:
    """Seconds per full training step (forward, the model's loss, backward, clip, AdamW) of a fresh
    model with `config` (a ModelConfig) on random (batch, n) inputs: one row, OOM recorded.

    The model is made ready as a sweep cell's is (tsflash.model.fastpath.prepare): `auto` decides its
    kernel at this shape before the first step (the row keeps the decision: kernel, runner-up,
    margin, median times), and `compile` (False, True or a torch.compile mode) compiles it with
    the eager fallback. Warm-up steps absorb compiling; the row keeps the first call's seconds.
    `profile` > 0: that many more steps under torch.profiler (`profile_step`), after the timed ones."""
    from tsflash.model.transformer import CausalTransformer

    cuda = device.type == "cuda"
    torch.manual_seed(seed)
    model = CausalTransformer(config).to(device).train()
    step_model = fastpath.prepare(model, device, n=n, batch=batch, compile=compile)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    x = torch.randn(batch, n, config.n_features, device=device)
    y = torch.randint(0, 3, (batch, n), device=device)
    row: dict[str, Any]  # numbers, text and the kernel and compile records
    row = {
        "n": n,
        "batch": batch,
        "tokens_per_step": batch * n,
        "n_params": model.n_params(),
        "kernel_choice": model.kernel_choice,
    }

    # F821 in step(): the `del` at the end frees the closure's names, which ruff then reads as undefined;
    # step() is never called after it.
    def step():
        with autocast(device):
            _, loss = step_model(x, y)  # noqa: F821
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: F821
        opt.step()  # noqa: F821
        opt.zero_grad(set_to_none=True)  # noqa: F821

    try:
        for _ in range(max(warmup, 1 if compile else 0)):
            step()
        with PeakMemory(device) as mem:
            step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        seconds = (time.perf_counter() - start) / steps
        row.update(
            step_s=seconds,
            tokens_per_s=batch * n / seconds,
            peak_bytes=mem.peak_bytes,
            peak_extra_bytes=mem.peak_extra_bytes,
            backend=model.attention_backend_used,
            status="ok",
        )
        if profile:
            row["profile"] = profile_step(step, device, profile, seconds)
    except Exception as exc:
        if not is_oom(exc):
            raise
        row.update(status="oom", error=str(exc).splitlines()[0][:200])
    row["compile"] = dict(cast(dict, model.compile_info))  # a dict, set by fastpath.prepare
    del model, step_model, opt, x, y
    free_memory(device)
    return row


def bench_train(
    lengths: list[int],
    device: torch.device,
    tokens_per_step: int = 131072,
    n_features: int = 16,
    d_model: int = 256,
    n_layers: int = 4,
    n_heads: int = 4,
    residual: str = "param",
    backend: str = "auto",
    steps: int = 10,
    warmup: int = 3,
    ceiling_size: int | None = None,
    compile: bool | str = False,
    seed: int = 0,
    profile: int = 0,
    bandwidth: bool = False,
) -> dict:  # long: one argument a line and the method in its docstring; one straight pass
    """Time full training steps (forward, loss, backward, clip, AdamW) at fixed tokens per step.

    CUDA: bf16 autocast and fused AdamW; CPU: float32. Inputs are random (the data pipeline is not
    what is measured). MFU is against a matmul ceiling measured in the same run and dtype.
    `compile`: False (eager), True (tsflash.model.fastpath.COMPILE_MODE) or a mode of
    tsflash.model.fastpath.COMPILE_MODES. `profile` > 0: each row also says where its step's time goes
    (`profile_step`, that many steps).
    `bandwidth`: after every N is timed, each row that ran also gets the bytes inductor's kernels
    move per step (`measure_inductor_bandwidth`, a separate compile per N), to set against the copy
    ceiling measured beside the matmul ceiling (`bandwidth_markdown` needs `profile` too).
    """
    from tsflash.model.transformer import ModelConfig

    lengths = check_arguments(
        "train",
        lengths,
        {
            "tokens_per_step": (1, tokens_per_step),
            "n_features": (1, n_features),
            "d_model": (1, d_model),
            "n_layers": (1, n_layers),
            "n_heads": (1, n_heads),
            "steps": (1, steps),
            "warmup": (0, warmup),
            "ceiling_size": (1, ceiling_size),
            "profile": (0, profile),
        },
    )
    for n in lengths:
        if tokens_per_step % n:
            raise UserError(f"--tokens-per-step={tokens_per_step} must be a multiple of every length, got N={n}")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    ceiling_size = ceiling_size or (8192 if cuda else 512)
    ceiling = matmul_ceiling(device, ceiling_size, dtype)
    copy = copy_ceiling(device)
    log.info("matmul ceiling %d^3 %s: %.2f TFLOP/s; copy %.0f GB/s", ceiling_size, dtype, ceiling / 1e12, copy / 1e9)
    rows = []
    config = ModelConfig(
        n_features=n_features,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        attention_backend=backend,
        residual=residual,
    )
    for n in lengths:
        row = measure_train_step(config, n, tokens_per_step // n, device, steps, warmup, compile, seed, profile)
        if row["status"] == "ok":
            flops = flops_per_token(row["n_params"], n_layers, d_model, n) * tokens_per_step
            row.update(model_tflops=flops / row["step_s"] / 1e12, mfu=flops / row["step_s"] / ceiling)
        log.info("train %s", row)
        rows.append(row)
    if bandwidth:  # after every timed row: its compiles and dynamo resets touch none of them
        for row in (r for r in rows if r["status"] == "ok"):
            row["bandwidth"] = measure_inductor_bandwidth(config, row["n"], row["batch"], device, seed)
            log.info(
                "inductor bandwidth N=%d: %s",
                row["n"],
                None
                if row["bandwidth"] is None
                else f"{row['bandwidth']['gb']:.2f} GB in {row['bandwidth']['ms']:.2f} ms",
            )
    return {
        "kind": "train",
        "environment": environment(device),
        "settings": {
            "tokens_per_step": tokens_per_step,
            "d_model": d_model,
            "n_layers": n_layers,
            "n_heads": n_heads,
            "residual": residual,
            "n_features": n_features,
            "dtype": str(dtype),
            "backend": backend,
            "steps": steps,
            "warmup": warmup,
            "compile": (fastpath.COMPILE_MODE if compile is True else compile) or False,
            "optimizer": "AdamW" + (" (fused)" if cuda else ""),
            "flops": "(6*P + 6*L*d_model*N) * tokens (tsflash.model.flops)",
            "profiled_steps": profile,
            "bandwidth": bandwidth,
        },
        "ceiling": {"matmul_size": ceiling_size, "dtype": str(dtype), "tflops": ceiling / 1e12, "copy_gbs": copy / 1e9},
        "auto_choice": attn.auto_report(),
        "rows": rows,
    }


def train_table(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        r = dict(r)
        r["step_ms"] = r["step_s"] * 1e3 if r.get("step_s") else None
        peak = r.get("peak_bytes") or r.get("peak_extra_bytes")
        r["peak_mib"] = None if peak is None else peak / 2**20
        r["kernel_margin"] = kernel_margin(r.get("kernel_choice"))
        r["compiled"] = compile_label(r.get("compile"))
        rows.append(r)
    columns = [
        ("n", "N", ""),
        ("batch", "B", ""),
        ("step_ms", "step ms", ".1f"),
        ("tokens_per_s", "tokens/s", ".4g"),
        ("peak_mib", "peak MiB", ".0f"),
        ("model_tflops", "TFLOP/s", ".3g"),
        ("mfu", "MFU", ".1%"),
        ("backend", "kernel", ""),
        ("kernel_margin", "vs runner-up", ""),
        ("compiled", "compile", ""),
        ("status", "status", ""),
    ]
    c = result["ceiling"]
    reasons = dict.fromkeys(
        f"eager: {r['compile']['reason']}"
        for r in rows
        if r.get("compile") and r["compile"].get("mode") and not r["compile"].get("compiled")
    )
    profiled = profile_markdown({"": result})
    moved = bandwidth_markdown({"": result})
    copy = f"; copy {c['copy_gbs']:.0f} GB/s" if c.get("copy_gbs") else ""
    return "\n".join(
        [
            format_table(rows, columns),
            *reasons,
            f"ceiling: {c['matmul_size']}^3 {c['dtype']} matmul = {c['tflops']:.3g} TFLOP/s{copy}",
            *(["", "where a step's time goes (ms per step):", profiled] if profiled else []),
            *(["", "the element-wise work against the memory bandwidth:", moved] if moved else []),
        ]
    )


def profile_markdown(results: dict[str, dict]) -> str:
    """A Markdown table of where each profiled row's step goes: ms per step by kernel kind, idle
    (the device waiting for the host) and the step; "" when no row was profiled. `results` keyed
    by variant as in `mfu_markdown` (one unnamed result: no variant column)."""
    kinds = [kind for kind, _ in STEP_KINDS] + [OTHER_KIND]
    named = any(results)
    rows = []
    for variant, result in results.items():
        for r in result["rows"]:
            prof = r.get("profile")
            if not prof:
                continue
            by_kind = step_kinds(prof["kernels"])  # today's kinds, from the kernels' own times
            rows.append(
                [
                    *([variant] if named else []),
                    r["n"],
                    *(f"{by_kind.get(k, 0.0):.2f}" for k in kinds),
                    format_cell(prof.get("idle_ms"), ".2f"),
                    format_cell(r.get("step_s"), ".2f", 1e3),
                ]
            )
    header = [*(["variant"] if named else []), "N", *kinds, "idle", "step"]
    return markdown_table(header, rows) if rows else ""


def highest_ceiling(results: dict[str, dict], key: str) -> float:
    """The highest ceiling `key` ("tflops", "copy_gbs") that any of the results' processes measured
    (0.0 where none did): one denominator for every variant of a call (`mfu_markdown`)."""
    return max((result["ceiling"].get(key) or 0.0 for result in results.values()), default=0.0)


def bandwidth_markdown(results: dict[str, dict]) -> str:
    """A Markdown table setting the bytes inductor's kernels move per step (rows measured with
    `bandwidth`) against the memory bandwidth, "" when no row has them. Per variant and N: the GB
    per step, the profiled device time of the fused element-wise kernels and the bandwidth that
    makes, the time those bytes take at the copy ceiling, and the step (and its MFU) had the
    element-wise work run at that ceiling with everything else as profiled: how far fusion alone
    could go. One copy ceiling and one matmul ceiling for every row, the highest any of the
    variants' processes measured (as `mfu_markdown`)."""
    copy_gbs, tflops = highest_ceiling(results, "copy_gbs"), highest_ceiling(results, "tflops")
    named = any(results)
    rows = []
    for variant, result in results.items():
        for r in result["rows"]:
            bw, prof = r.get("bandwidth"), r.get("profile")
            if not bw or not prof or not copy_gbs or not r.get("step_s"):
                continue
            fused = step_kinds(prof["kernels"])["fused element-wise"]
            floor = element_wise_floor_ms(bw, copy_gbs)
            moved = floor * copy_gbs / 1e3  # GB: each kernel's count, capped as in the floor
            step = r["step_s"] * 1e3
            bound = step - fused + floor
            mfu = r["model_tflops"] * step / bound / tflops if r.get("model_tflops") and tflops else None
            rows.append(
                [
                    *([variant] if named else []),
                    r["n"],
                    f"{bw['gb']:.2f}",
                    f"{fused:.2f}",
                    format_cell(moved / fused if fused else None, ".2f"),
                    f"{floor:.2f}",
                    f"{step:.2f}",
                    f"{bound:.2f}",
                    format_cell(mfu, ".1%"),
                ]
            )
    if not rows:
        return ""
    header = [
        *(["variant"] if named else []),
        "N",
        "element-wise GB per step",
        "profiled ms",
        "TB/s achieved",
        "ms at the copy ceiling",
        "step ms",
        "step ms, element-wise at the ceiling",
        "MFU then",
    ]
    note = (
        f"Copy ceiling {copy_gbs / 1e3:.2f} TB/s (a 2 GiB device-to-device copy, bytes read + "
        "written); the GB are inductor's count of what its Triton kernels read and write in one "
        "training step (torch._inductor.config.profile_bandwidth, each N compiled for its own "
        'shape in a separate pass); "ms at the copy ceiling" takes each kernel\'s count at the '
        "ceiling, or the kernel's own time measured alone where that is less (its count is then "
        "more than it can have moved: inductor counts a whole buffer where a kernel reads a "
        'slice of it); "TB/s achieved" divides those bytes by the profiled time. The timed '
        "steps ran the graphs of the timed process (from the second N on, one graph for any "
        "shape, whose kernels are named apart), so bytes and times are matched per step, not "
        'per kernel. "MFU then" is how far fusion alone could go for these bytes; fewer '
        "bytes (another precision or kernels fused across matmuls) are not in it."
    )
    return "\n".join([markdown_table(header, rows), "", note])


def element_wise_floor_ms(bandwidth: dict, copy_gbs: float) -> float:  # GB/s -> ms
    """The milliseconds the kernels of `bandwidth` (`parse_inductor_bandwidth`) would take at the
    copy ceiling: per kernel its counted GB at `copy_gbs`, or its own time measured alone where
    that is less (a count implying more than the ceiling overstates what the kernel moves)."""
    return sum(min(k["gb"] / copy_gbs * 1e3, k["ms"]) for k in bandwidth["kernels"].values())


def kernel_margin(choice: dict | None) -> str | None:
    """\"+12.3% vs FLASH" (the chosen kernel's median lead over the runner-up; negative when the
    tie rule kept a preferred kernel), None when nothing was timed."""
    if not choice or choice.get("margin") is None:
        return None
    return f"{choice['margin']:+.1%} vs {choice['runner_up']}"


def compile_label(info: dict | None) -> str | None:
    """The torch.compile mode that ran, or "eager" (the reason is in info["reason"])."""
    if not info:
        return None
    return info.get("mode") if info.get("compiled") else "eager"
