"""The same training signal for every N? Learning curves per N and learning rate (not a test).

    python benchmarks/bench_signal.py --data STORE_ROOT [--config default --preset-cpu]
        [--lengths 64,512,4096] [--lrs 3e-4,1e-3,3e-3] [--fold 1] [--steps 300] [--eval-every 10]
        [--tokens 4096] [--val-days 14] [--set KEY=VALUE ...] --out FILE.json

Trains each (N, lr) on one fold with a validation tail and NO early stop (patience 0: the whole
curve up to --steps, best weights restored), and records the curve, the best validation step
and loss, and the test log-loss of the restored model. The table printed answers: does the
best learning rate differ between N (then a per-N learning rate chosen on the validation tail
is needed), and where does each N's best validation step fall (then the maximum and the
patience of the default protocol must leave room for it)?
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from tsflash import atomic
from tsflash.config import merge_overrides, parse_lengths, parse_overrides
from tsflash.data.store import load_bars
from tsflash.engine import fold_data, prepare, run_fold
from tsflash.report.markdown import markdown_table
from tsflash.sweep.plan import SweepOptions, resolve_config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="store root")
    ap.add_argument("--config", default="default")
    ap.add_argument("--preset", default="cpu", help="cpu (tsflash/presets/cpu.toml on top) or full")
    ap.add_argument("--lengths", default="64,512,4096")
    ap.add_argument("--lrs", default="3e-4,1e-3,3e-3")
    ap.add_argument("--fold", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--val-days", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="extra config override KEY=VALUE")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    lengths = parse_lengths(args.lengths)
    over = {"lengths": lengths, "splits": {"val_days": args.val_days},
            "train": {"steps": args.steps, "eval_every": args.eval_every, "patience": 0,
                      "tokens_per_step": args.tokens, "warmup_steps": max(1, args.steps // 20)},
            "eval": {"context_cuts": []}}
    over = merge_overrides(over, parse_overrides(args.set))
    cfg, _, _ = resolve_config(SweepOptions(config=args.config, preset=args.preset, overrides=over), "cpu")
    bars = load_bars(args.data, start=cfg.data.start, end=cfg.data.end)
    prepared = prepare(cfg, bars, "cpu")
    fd = fold_data(prepared, args.fold)
    runs = json.loads(args.out.read_text()) if args.out.exists() else []
    done = {(r["n"], r["lr"]) for r in runs}
    for n in lengths:
        for lr in map(float, args.lrs.split(",")):
            if (n, lr) in done:
                continue
            t0 = time.perf_counter()
            r = run_fold(prepared, n, args.fold, args.seed, "cpu", fold_inputs=fd, train_overrides={"lr": lr})
            c = r.cost
            runs.append({"n": n, "lr": lr, "fold": args.fold, "seed": args.seed, "curve": c["curve"],
                         "best_step": c["best_step"], "best_val_loss": c["best_val_loss"],
                         "test_log_loss": r.metrics["log_loss"], "test_accuracy": r.metrics["accuracy"],
                         "seconds": time.perf_counter() - t0, "overrides": over})
            atomic.write_json(args.out, runs)
            print(f"N={n} lr={lr:g}: best val {c['best_val_loss']:.5f} at step {c['best_step']}, "
                  f"test log-loss {r.metrics['log_loss']:.5f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = [[r["n"], f"{r['lr']:g}", f"{r['best_val_loss']:.5f}", f"{r['best_step']}", f"{r['test_log_loss']:.5f}"]
            for r in sorted(runs, key=lambda r: (r["n"], r["lr"]))]
    print("\n" + markdown_table(["N", "lr", "best val loss", "best step", "test log-loss"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
