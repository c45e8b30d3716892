"""`tsflash bench precision|attention|train`: the kernel's accuracy, its crossover, a training step.

Each writes a JSON file (and the attention benchmark a PNG) and prints a table. Without --out the
files go to a fresh folder runs/bench/<YYYYMMDD-HHMMSS>-<benchmark>/ (runs/ is git-ignored), so a
benchmark never replaces the published evidence in reports/bench; an --out whose files git tracks
is refused unless --force.
Examples:
    tsflash bench precision --lengths 512,4096,32768
    tsflash bench attention --lengths 256,512,1024,2048,4096,8192,16384,32768,65536,131072
    tsflash bench train --lengths 512,4096,32768,131072 --tokens-per-step 131072
    tsflash bench train --lengths 512,4096,32768 --compile reduce-overhead   # torch.compile with CUDA graphs
    tsflash bench train --lengths 512,4096,32768 --compile --profile         # and where each step's time goes
    tsflash bench train --lengths 512,4096,32768 --compile --profile --bandwidth  # and its bytes against the bandwidth
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
from pathlib import Path

from tsflash.commands import options
from tsflash.commands.options import non_negative_float, non_negative_int, positive_float, positive_int
from tsflash.errors import UserError
from tsflash.model.spec import ATTENTION_BACKENDS, FUSED_BACKENDS, RESIDUAL_DTYPES, check_shape

RUNS_BENCH = Path("runs/bench")
DTYPES = ("auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32")


def _out_option() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default: a new {RUNS_BENCH}/<YYYYMMDD-HHMMSS>-<benchmark>/)",
    )
    p.add_argument("--force", action="store_true", help="overwrite files in --out even where git tracks them")
    return p


def _backends_type(text: str) -> list[str] | None:
    """auto, or a comma-separated subset of the fused backends."""
    if text == "auto":
        return None
    backends = [b.strip() for b in text.split(",") if b.strip()]
    if not backends or any(b not in FUSED_BACKENDS for b in backends):
        raise argparse.ArgumentTypeError(f"a comma-separated subset of {', '.join(FUSED_BACKENDS)}, got {text!r}")
    return backends


def _compile_mode_type(text: str) -> str:
    """A torch.compile mode of tsflash.model.fastpath.COMPILE_MODES (torch loads only when --compile is given)."""
    from tsflash.model.fastpath import COMPILE_MODES

    return options.choice_type(COMPILE_MODES)(text)


def register(sub) -> None:  # long: the subcommand's options, one call each
    p = sub.add_parser("bench", help="benchmarks: attention precision, crossover, training step")
    group = p.add_subparsers(dest="bench_command", metavar="BENCH")
    group.required = True

    def add(name: str, lengths: str, help: str):
        return group.add_parser(
            name, help=help, parents=[options.lengths_option(lengths), options.device_option(), _out_option()]
        )

    backend = options.choice_type(ATTENTION_BACKENDS)
    pr = add("precision", "512,4096", "bf16 fused attention and decisions vs a float64 reference")
    pr.add_argument(
        "--model", type=options.existing_file, default=None, help="a saved model (default: freshly initialised)"
    )
    pr.add_argument("--features", type=positive_int, default=16, help="inputs of a fresh model")
    pr.add_argument("--heads", type=positive_int, default=4)
    pr.add_argument("--head-dim", type=positive_int, default=64)
    pr.add_argument("--backend", type=backend, default="auto", help=" | ".join(ATTENTION_BACKENDS))
    pr.add_argument("--batch", type=positive_int, default=1)
    pr.set_defaults(func=run_precision)

    at = add(
        "attention",
        "256,512,1024,2048,4096,8192,16384,32768,65536,131072",
        "time and memory of fused kernels vs materialised attention across N",
    )
    at.add_argument("--tokens", type=positive_int, default=131072, help="B * N held fixed (default)")
    at.add_argument("--batch", type=positive_int, default=None, help="hold the batch fixed instead of the tokens")
    at.add_argument("--heads", type=positive_int, default=4)
    at.add_argument("--head-dim", type=positive_int, default=64)
    at.add_argument(
        "--dtype",
        type=options.choice_type(DTYPES),
        default="auto",
        help="auto (bf16 on CUDA, float32 on CPU) | bfloat16 | float16 | float32",
    )
    at.add_argument(
        "--backends",
        type=_backends_type,
        default="auto",
        help="comma-separated fused backends (default: all on the device)",
    )
    at.add_argument(
        "--cpu-memory-cap-gib",
        type=positive_float,
        default=2.0,
        help="on CPU, skip the materialised path when its N x N scores exceed this (default 2)",
    )
    at.add_argument("--min-time", type=non_negative_float, default=0.2, help="seconds of repetitions per measurement")
    at.set_defaults(func=run_attention)

    tr = add("train", "512,4096,32768,131072", "training step time, tokens/s, peak memory and MFU across N")
    tr.add_argument("--tokens-per-step", type=positive_int, default=131072)
    tr.add_argument("--features", type=positive_int, default=16)
    tr.add_argument("--d-model", type=positive_int, default=256)
    tr.add_argument("--layers", type=positive_int, default=4)
    tr.add_argument("--heads", type=positive_int, default=4)
    tr.add_argument(
        "--residual",
        choices=RESIDUAL_DTYPES,
        default="param",
        help="the residual stream's dtype: param (float32 under bf16 autocast, the experiment's) or "
        "compute (bf16: fewer bytes, other numerics)",
    )
    tr.add_argument("--backend", type=backend, default="auto", help=" | ".join(ATTENTION_BACKENDS))
    tr.add_argument("--steps", type=positive_int, default=10, help="timed steps per N")
    tr.add_argument("--warmup", type=non_negative_int, default=3)
    tr.add_argument(
        "--ceiling-size",
        type=positive_int,
        default=None,
        help="matmul size of the measured ceiling (default 8192 on CUDA, 512 on CPU)",
    )
    tr.add_argument(
        "--compile",
        nargs="?",
        const="default",
        default=None,
        metavar="MODE",
        type=_compile_mode_type,
        help="torch.compile the model, in torch.compile's MODE (default: default; reduce-overhead adds "
        "CUDA graphs); eager, saying why, where it cannot",
    )
    tr.add_argument(
        "--profile",
        nargs="?",
        const=3,
        default=0,
        type=non_negative_int,
        metavar="STEPS",
        help="after the timed steps, STEPS more (default 3) under torch.profiler: where the step's time "
        "goes (attention, matmul, optimizer, element-wise, idle)",
    )
    tr.add_argument(
        "--bandwidth",
        action="store_true",
        help="with --compile: after the timed steps, the bytes inductor's kernels move per step (a separate "
        "compile per N under inductor's bandwidth profile), set against the measured copy ceiling; "
        "implies --profile",
    )
    tr.set_defaults(func=run_train)


# ---- where the results go ------------------------------------------------------------------------


def tracked_by_git(path: Path) -> bool | None:
    """True when git tracks `path` in the repository that holds it, False when not (or outside any
    repository), None when git cannot be run."""
    path = Path(path).resolve()
    try:
        done = subprocess.run(
            ["git", "-C", str(path.parent), "ls-files", "--error-unmatch", "--", path.name],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode == 0


def output_folder(out: Path | None, what: str, names: list[str], force: bool) -> Path:
    """The folder to write `names` into: --out, or a new runs/bench/<stamp>-<what>. A file there
    that git tracks (or, without git, any existing file) is published evidence: refused unless
    --force. Checked before anything is measured."""
    if out is None:
        return RUNS_BENCH / f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{what}"
    for name in names:
        path = out / name
        if not path.exists() or force:
            continue
        tracked = tracked_by_git(path)
        if tracked or tracked is None:
            why = "a file tracked by git (published evidence)" if tracked else "git cannot tell whether it is published"
            raise UserError(f"--out: refusing to overwrite {path}, {why}; choose another --out, or add --force")
    return out


def _device(args):
    from tsflash.device import resolve_device

    return resolve_device(args.device)


def _dtype(name: str):
    import torch

    table = {
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        "float32": torch.float32,
        "fp32": torch.float32,
    }
    return table.get(name)  # auto -> None: the benchmark's choice


# ---- the commands --------------------------------------------------------------------------------


def run_precision(args) -> int:
    from tsflash import bench

    out = output_folder(args.out, "precision", ["precision.json"], args.force)
    result = bench.bench_precision(
        args.lengths,
        _device(args),
        model_path=args.model,
        n_features=args.features,
        heads=args.heads,
        head_dim=args.head_dim,
        backend=args.backend,
        batch=args.batch,
    )
    path = bench.write_json(out / "precision.json", result)
    print(bench.format_table(result["rows"], bench.PRECISION_COLUMNS))
    print(f"wrote {path}")
    return 0


def run_attention(args) -> int:
    from tsflash import bench

    out = output_folder(args.out, "attention", ["attention.json", "attention.png"], args.force)
    result = bench.bench_attention(
        args.lengths,
        _device(args),
        tokens=args.tokens,
        heads=args.heads,
        head_dim=args.head_dim,
        dtype=_dtype(args.dtype),
        batch=args.batch,
        backends=args.backends,
        cpu_memory_cap=int(args.cpu_memory_cap_gib * 2**30),
        min_time=args.min_time,
    )
    path = bench.write_json(out / "attention.json", result)
    png = bench.plot_attention(result, out / "attention.png")
    print(bench.attention_table(result))
    print(f"wrote {path} and {png}")
    return 0


def run_train(args) -> int:
    from tsflash import bench

    check_shape(args.d_model, args.heads, ("--d-model", "--heads"))
    if args.bandwidth and not args.compile:
        raise UserError("--bandwidth counts the bytes of inductor's compiled kernels: give --compile too")
    if args.bandwidth and args.compile.startswith("max-autotune"):
        raise UserError(
            f"--bandwidth: mode {args.compile} compiles matmuls to Triton too, whose bytes would count as "
            "element-wise work; use default, reduce-overhead or tuned"
        )
    if args.bandwidth and not args.profile:
        args.profile = 3  # the bytes are set against the profiled time of the element-wise kernels
    out = output_folder(args.out, "train", ["train.json"], args.force)
    result = bench.bench_train(
        args.lengths,
        _device(args),
        tokens_per_step=args.tokens_per_step,
        n_features=args.features,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        residual=args.residual,
        backend=args.backend,
        steps=args.steps,
        warmup=args.warmup,
        ceiling_size=args.ceiling_size,
        compile=args.compile or False,
        profile=args.profile,
        bandwidth=args.bandwidth,
    )
    path = bench.write_json(out / "train.json", result)
    print(bench.train_table(result))
    print(f"wrote {path}")
    return 0
