"""Experiment-engine benchmark (figures for notes and reports, not a test).

    python benchmarks/bench_engine.py --data STORE_ROOT|synthetic:random-walk [--config first-edition]
        [--lengths 32768] [--device cuda] [--folds 0,1,2,3,4] [--set KEY=VALUE ...] [--out runs/bench]

Times, for the chosen config and each N, (1) data preparation: load, features, labels, folds,
per-fold normalisation and windows for all folds; (2) `run_fold` over the folds (training plus
scored-once evaluation), and writes `engine-<device>.json`. The issue-4 target on the H200: one
configuration at N = 32768 over all five folds in <= 120 s, preparation in <= 10 s, under the
first edition's fixed 200-step budget (`--config first-edition`, the default here: the protocol's
validated stopping makes the step count, hence the time, depend on the data). Each row keeps the
steps trained and the compile outcome, so `--set train.compile=true` beside a plain run gives
the compiled cell's cost, compiling included (`lab/h200.sh compile`). Results go to
runs/bench unless --out names reports/bench deliberately (lab/h200.sh bench does).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from tsflash.atomic import write_json
from tsflash.config import load_config, parse_lengths, parse_overrides
from tsflash.data.store import load_bars
from tsflash.device import device_name, resolve_device, sync
from tsflash.engine import fold_data, prepare, run_fold
from tsflash.sweep.source import load_data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="store root, or synthetic:KIND[:SEED[:PARAMS]] (tsflash.sweep.source)")
    ap.add_argument("--config", default="first-edition")
    ap.add_argument("--lengths", default="32768")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:K")
    ap.add_argument("--folds", default=None, help="comma-separated fold indices (default: all)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. train.compile=true (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = ap.parse_args(argv)

    cfg = load_config(args.config, parse_overrides(args.overrides))
    device = resolve_device(args.device)
    lengths = parse_lengths(args.lengths)

    t0 = time.perf_counter()
    if args.data.startswith("synthetic:"):
        bars, _ = load_data(cfg, args.data, cfg.train.seeds[0])
    else:  # a store: read, never fetched (a lent GPU has no network, and a download is not loading)
        bars = load_bars(Path(args.data), cfg.data.symbol, cfg.data.interval, cfg.data.start, cfg.data.end)
    t_load = time.perf_counter() - t0
    prepared = prepare(cfg, bars, device)
    folds = [int(f) for f in args.folds.split(",")] if args.folds else list(range(len(prepared.folds)))
    inputs = {f: fold_data(prepared, f) for f in folds}
    sync(device)
    t_prep = time.perf_counter() - t0
    print(f"data preparation: {t_prep:.2f} s (load {t_load:.2f} s) for {len(bars):,} bars, {len(folds)} folds", flush=True)

    rows = []
    for n in lengths:
        sync(device)
        t1 = time.perf_counter()
        for f in folds:
            r = run_fold(prepared, n, f, cfg.train.seeds[0], device, fold_inputs=inputs[f])
            rows.append({"n": n, "fold": f, **{k: r.cost[k] for k in ("train_seconds", "epoch_seconds", "val_seconds", "eval_seconds",
                         "tokens_per_s", "peak_memory_bytes", "backend", "backend_observed", "tflops", "n_params",
                         "compile")}, "steps": r.cost["stop_step"],
                         **{k: r.metrics[k] for k in ("accuracy", "log_loss", "direction_hit_rate", "direction_log_loss")}})
            c = r.cost
            print(f"N={n:>6} fold {f}: train {c['train_seconds']:.1f} s ({c['stop_step']} steps), "
                  f"eval {c['eval_seconds']:.1f} s, "
                  f"{c['tokens_per_s'] / 1e6:.2f} M tok/s, {c['tflops']:.0f} TFLOP/s, peak {c['peak_memory_bytes'] / 2**30:.2f} GiB, "
                  f"{c['backend_observed']}, acc {r.metrics['accuracy']:.4f}, hit rate {r.metrics['direction_hit_rate']:.4f}, "
                  f"log-loss {r.metrics['log_loss']:.4f}", flush=True)
        sync(device)
        wall = time.perf_counter() - t1
        rows.append({"n": n, "all_folds_wall_seconds": wall})
        print(f"N={n}: {len(folds)} folds in {wall:.1f} s wall-clock", flush=True)

    result = {
        "config": cfg.name, "config_hash": cfg.hash(), "overrides": args.overrides, "seed": cfg.train.seeds[0],
        "data": args.data, "device": str(device),
        "device_name": device_name(device),
        "torch": torch.__version__, "bars": len(bars), "prep_seconds": t_prep, "load_seconds": t_load,
        "prepare_timings": prepared.timings, "rows": rows, "command": " ".join(sys.argv),
    }
    path = write_json(args.out / f"engine-{device.type}.json", result, indent=2, default=str)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
