"""`tsflash bench precision|attention|train`: the kernel's accuracy, its crossover, a training step.

Each writes a JSON file (and the attention benchmark a PNG) into --out and prints a table.
Examples:
    tsflash bench precision --lengths 512,4096,32768 --out reports/bench
    tsflash bench attention --lengths 256,512,1024,2048,4096,8192,16384,32768,65536,131072
    tsflash bench train --lengths 512,4096,32768,131072 --tokens-per-step 131072
"""

from __future__ import annotations

from pathlib import Path

from tsflash.errors import UserError

DEFAULT_OUT = Path("reports/bench")


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UserError(f"{name} must be a positive integer, got {text!r}") from None
        if value < 1:
            raise UserError(f"{name} must be a positive integer, got {value}")
        return value

    return parse


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: attention precision, crossover, training step")
    group = p.add_subparsers(dest="bench_command", metavar="BENCH")
    group.required = True

    common = dict(device=("--device", dict(default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")),
                  out=("--out", dict(type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")))

    pr = group.add_parser("precision", help="bf16 fused attention and decisions vs a float64 reference")
    pr.add_argument("--lengths", default="512,4096", help="comma-separated context lengths N")
    pr.add_argument("--model", type=Path, default=None, help="a saved model (default: freshly initialised)")
    pr.add_argument("--features", type=_positive("--features"), default=16, help="inputs of a fresh model")
    pr.add_argument("--heads", type=_positive("--heads"), default=4)
    pr.add_argument("--head-dim", type=_positive("--head-dim"), default=64)
    pr.add_argument("--backend", default="auto", help="auto | cudnn | flash | efficient | math")
    pr.add_argument("--batch", type=_positive("--batch"), default=1)
    for flag, kw in common.values():
        pr.add_argument(flag, **kw)
    pr.set_defaults(func=run_precision)

    at = group.add_parser("attention", help="time and memory of fused kernels vs materialised attention across N")
    at.add_argument("--lengths", default="256,512,1024,2048,4096,8192,16384,32768,65536,131072")
    at.add_argument("--tokens", type=_positive("--tokens"), default=131072, help="B * N held fixed (default)")
    at.add_argument("--batch", type=_positive("--batch"), default=None, help="hold the batch fixed instead of the tokens")
    at.add_argument("--heads", type=_positive("--heads"), default=4)
    at.add_argument("--head-dim", type=_positive("--head-dim"), default=64)
    at.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, float32 on CPU) | bfloat16 | float16 | float32")
    at.add_argument("--backends", default="auto", help="comma-separated fused backends (default: all on the device)")
    at.add_argument("--cpu-memory-cap-gib", type=float, default=2.0,
                    help="on CPU, skip the materialised path when its N x N scores exceed this (default 2)")
    at.add_argument("--min-time", type=float, default=0.2, help="seconds of repetitions per measurement")
    for flag, kw in common.values():
        at.add_argument(flag, **kw)
    at.set_defaults(func=run_attention)

    tr = group.add_parser("train", help="training step time, tokens/s, peak memory and MFU across N")
    tr.add_argument("--lengths", default="512,4096,32768,131072")
    tr.add_argument("--tokens-per-step", type=_positive("--tokens-per-step"), default=131072)
    tr.add_argument("--features", type=_positive("--features"), default=16)
    tr.add_argument("--d-model", type=_positive("--d-model"), default=256)
    tr.add_argument("--layers", type=_positive("--layers"), default=4)
    tr.add_argument("--heads", type=_positive("--heads"), default=4)
    tr.add_argument("--backend", default="auto")
    tr.add_argument("--steps", type=_positive("--steps"), default=10, help="timed steps per N")
    tr.add_argument("--warmup", type=int, default=3)
    tr.add_argument("--ceiling-size", type=_positive("--ceiling-size"), default=None,
                    help="matmul size of the measured ceiling (default 8192 on CUDA, 512 on CPU)")
    tr.add_argument("--compile", action="store_true", help="torch.compile the model")
    for flag, kw in common.values():
        tr.add_argument(flag, **kw)
    tr.set_defaults(func=run_train)


def _dtype(name: str):
    import torch

    if name == "auto":
        return None
    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
             "float32": torch.float32, "fp32": torch.float32}
    if name not in table:
        raise UserError(f"--dtype must be one of auto, {', '.join(table)}, got {name!r}")
    return table[name]


def run_precision(args) -> int:
    from tsflash import attention, bench

    attention.check_backend_name(args.backend)
    device = bench.resolve_device(args.device)
    result = bench.bench_precision(bench.parse_lengths(args.lengths), device, model_path=args.model, n_features=args.features,
                                   heads=args.heads, head_dim=args.head_dim, backend=args.backend, batch=args.batch)
    path = bench.write_json(args.out / "precision.json", result)
    print(bench.format_table(result["rows"], bench.PRECISION_COLUMNS))
    print(f"wrote {path}")
    return 0


def run_attention(args) -> int:
    from tsflash import attention, bench

    device = bench.resolve_device(args.device)
    backends = None
    if args.backends != "auto":
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        bad = [b for b in backends if b not in attention.FUSED_BACKENDS]
        if bad or not backends:
            raise UserError(f"--backends: a comma-separated subset of {', '.join(attention.FUSED_BACKENDS)}, got {args.backends!r}")
    if args.cpu_memory_cap_gib <= 0:
        raise UserError(f"--cpu-memory-cap-gib must be > 0, got {args.cpu_memory_cap_gib}")
    result = bench.bench_attention(bench.parse_lengths(args.lengths), device, tokens=args.tokens, heads=args.heads,
                                   head_dim=args.head_dim, dtype=_dtype(args.dtype), batch=args.batch, backends=backends,
                                   cpu_memory_cap=int(args.cpu_memory_cap_gib * 2**30), min_time=args.min_time)
    path = bench.write_json(args.out / "attention.json", result)
    png = bench.plot_attention(result, args.out / "attention.png")
    print(bench.attention_table(result))
    print(f"wrote {path} and {png}")
    return 0


def run_train(args) -> int:
    from tsflash import attention, bench

    attention.check_backend_name(args.backend)
    if args.d_model % args.heads:
        raise UserError(f"--d-model={args.d_model} must be divisible by --heads={args.heads}")
    device = bench.resolve_device(args.device)
    result = bench.bench_train(bench.parse_lengths(args.lengths), device, tokens_per_step=args.tokens_per_step,
                               n_features=args.features, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                               backend=args.backend, steps=args.steps, warmup=args.warmup,
                               ceiling_size=args.ceiling_size, compile=args.compile)
    path = bench.write_json(args.out / "train.json", result)
    print(bench.train_table(result))
    print(f"wrote {path}")
    return 0
