"""FP8 attention precision on the H200 (issue 14): train one cell on real bars, then measure.

    python lab/fp8_h200.py --data .carry/data --out OUT [--device cuda]
        [--lengths 512,1024,...,131072] [--train-n 4096] [--model CKPT] [--set key=value ...]

1. Train one cell: the default experiment restricted to 2024 (two expanding folds of 30 test
   days), `engine.run_fold` at N = --train-n on the last fold, seed 0, saving the trained model
   (`model_path=`). With --model an existing checkpoint is used instead. Without data, or if
   training fails, the failure is recorded and the bench runs on a freshly initialised model.
2. Ask torch whether it runs attention on float8 q, k, v natively (`fp8.native_fp8_probe`, N=32768;
   exact exception texts, and a timing against bf16 cuDNN if one runs).
3. `fp8.bench_precision_fp8` one N at a time (smallest first), model inputs = the last N rows of
   the fold's normalised real features; OUT/precision-fp8.json and OUT/precision-fp8.md are
   rewritten after every N, so a timeout or an out-of-memory at one N keeps everything before it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

from tsflash import atomic
from tsflash.bench import fp8
from tsflash.config import load_config, parse_lengths, parse_overrides
from tsflash.device import resolve_device

log = logging.getLogger("fp8_h200")

DEFAULT_LENGTHS = ",".join(str(2**k) for k in range(9, 18))  # 512 ... 131072
# The default experiment on one year: fits the 64 MiB a device run may carry (one Parquet file).
CELL_OVERRIDES = ["data.start=2024-01-01", "data.end=2024-12-31", "splits.n_folds=2", "splits.test_days=30"]


def train_cell(args, device) -> tuple[Path | None, torch.Tensor | None, dict]:
    """(model checkpoint, the fold's normalised features (T, F), what happened) -- never raises."""
    from tsflash.data.store import load_bars
    from tsflash.engine import fold_data, prepare, run_fold

    overrides = CELL_OVERRIDES + [f"lengths=[{args.train_n}]"] + args.set
    info: dict = {"overrides": overrides, "train_n": args.train_n, "seed": 0}
    try:
        cfg = load_config("default", parse_overrides(overrides))
        t0 = time.perf_counter()
        bars = load_bars(args.data, cfg.data.symbol, cfg.data.interval, cfg.data.start, cfg.data.end)
        prepared = prepare(cfg, bars, device)
        fold = len(prepared.folds) - 1
        fd = fold_data(prepared, fold)
        info.update(bars=len(bars), fold=fold, prepare_s=time.perf_counter() - t0)
        log.info("prepared %d bars, fold %d of %d in %.1f s", len(bars), fold, len(prepared.folds), info["prepare_s"])
    except Exception as exc:  # no data here: the bench still runs on gaussian model inputs
        info["error"] = f"data: {type(exc).__name__}: {exc}"
        log.warning("no real bars (%s); fresh model, gaussian inputs", info["error"])
        return args.model, None, info
    if args.model is not None:
        info["model"] = str(args.model)
        return args.model, fd.features, info
    path = args.out / f"cell-n{args.train_n}-fold{fold}-seed0.pt"
    try:
        t0 = time.perf_counter()
        result = run_fold(prepared, args.train_n, fold, 0, device, model_path=path, fold_inputs=fd)
        info.update(model=path.name, train_wall_s=time.perf_counter() - t0, accuracy=result.metrics.get("accuracy"),
                    backend=result.cost.get("backend"), train_seconds=result.cost.get("train_seconds"))
        log.info("trained N=%d fold %d in %.1f s: accuracy %.4f", args.train_n, fold, info["train_wall_s"], info["accuracy"])
        return path, fd.features, info
    except Exception as exc:  # record and go on with a fresh model on the real features
        info["error"] = f"training: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        log.warning("training failed (%s); fresh model", info["error"])
        return None, fd.features, info


def write(result: dict, out: Path) -> None:
    atomic.write_json(out / "precision-fp8.json", result)
    native = result.get("native_fp8") or {}
    text = ["# FP8 attention precision (tsflash.bench.fp8)", "",
            f"{result['environment'].get('gpu', result['environment']['device'])}, torch {result['environment']['torch']}; "
            f"block {result['settings']['block']} tokens x head_dim; model: {result['settings']['model']}", "",
            fp8.markdown_table(result), "",
            f"Native FP8 attention at N={native.get('n')}: "
            + (f"runs ({native['runs']}); timing {native.get('timing')}" if native.get("runs") else f"{native.get('reason')}"), ""]
    atomic.write_text(out / "precision-fp8.md", "\n".join(text))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(".carry/data"), help="bar store root (btcusdt-1m/*.parquet)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS)
    ap.add_argument("--train-n", type=int, default=4096)
    ap.add_argument("--model", type=Path, default=None, help="use this checkpoint instead of training one")
    ap.add_argument("--set", action="append", default=[], help="config override for the trained cell, key=value")
    ap.add_argument("--probe-n", type=int, default=32768)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    args.out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(args.device)
    lengths = parse_lengths(args.lengths)
    start = time.perf_counter()

    model_path, features, cell = train_cell(args, device)
    try:
        native = fp8.native_fp8_probe(device, n=args.probe_n)
    except Exception as exc:  # e.g. out of memory: the probe is a side question
        native = {"n": args.probe_n, "runs": [], "reason": f"probe failed: {type(exc).__name__}: {exc}"}
    log.info("native FP8 attention: %s", native.get("timing") or native["reason"])

    result = None
    for n in lengths:
        part = fp8.bench_precision_fp8([n], device, fp8.Fp8Settings(modes=fp8.MODES), model=model_path, features=features,
                                       n_features=16 if features is None else features.shape[1], record_errors=True)
        if result is None:  # no machine paths in what gets published: the checkpoint's name, $OUT
            command = ["$OUT" if a == str(args.out) else a for a in sys.argv[1:]]
            result = part | {"cell": cell, "native_fp8": native, "command": " ".join(["lab/fp8_h200.py", *command])}
            if model_path is not None:
                result["settings"]["model"] = Path(model_path).name
        else:
            result["rows"] += part["rows"]
        result["wall_s"] = time.perf_counter() - start
        write(result, args.out)
        done = [r for r in part["rows"] if r["status"] == "ok"]
        log.info("N=%d: %s (%.0f s so far)", n, ", ".join(
            f"{r['input']}/{r['format']} fro {r['naive_fro_rel']:.2e}->{r['rotated_fro_rel']:.2e}" for r in done)
            or part["rows"][0].get("error"), result["wall_s"])
    assert result is not None  # parse_lengths gives at least one N
    print(fp8.fp8_table(result))
    print(f"wrote {args.out / 'precision-fp8.json'} and {args.out / 'precision-fp8.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
