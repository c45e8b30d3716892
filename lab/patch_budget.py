"""Patch tokens and their label budget, at toy size on the CPU (issue 29, deliverables 3 and 5).

A patch model's window is scored at its patch ends only, and the batch is `tokens_per_step / N`
windows of bars whatever the patch, so at the same `tokens_per_step` a patch of P bars trains on
1/P of the per-bar model's labels per step. Is the patch model's weak showing on the echo control
(reports/recipes: 0 of 5 runs found it) about patch tokens or about that budget? Four arms on the
toy positive control of tests/lab/test_controls.py (an echo at lag 48 that N=128 sees and
N=16 cannot), the same steps, optimiser and stopping:

    bar            per-bar tokens, 2048 bars a step (2048 labels)
    bar-x4         per-bar tokens, 8192 bars a step (8192 labels)
    patch4         patches of 4 bars, 2048 bars a step (512 labels: the published arm's budget)
    patch4-x4      patches of 4 bars, 8192 bars a step (2048 labels: the per-bar model's)

Per arm the far-context gain, N=16 minus N=128 test log-loss per bar, over training runs (the
fold means over seeds, a t over the folds: the run-level test). A toy says what to measure at full
size, not what full size will show.

    python lab/patch_budget.py --out runs/patch-budget          # about 3 minutes on 2 cores
    python lab/patch_budget.py --out reports/recipes/patch-budget-toy --summary-only
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash.atomic import write_text  # noqa: E402
from tsflash.config import parse_overrides  # noqa: E402
from tsflash.runfolder import RunFolder  # noqa: E402
from tsflash.stats.runs import run_level_test, runs_from_means  # noqa: E402

log = logging.getLogger("patch_budget")

DATA = "synthetic:long-memory:1:lag=48,strength=0.3"  # the toy positive control of test_controls.py
LENGTHS = (16, 128)
TOY = ['data.start="2024-01-01"', 'data.end="2024-04-30"', "splits.n_folds=3", "splits.test_days=10",
       "splits.val_days=0", "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "train.seeds=[0,1,2]",
       "train.steps=100", "train.warmup_steps=10", "train.lr=3e-3", "eval.baseline_lags=1", "eval.context_cuts=[16]"]
ARMS: dict[str, tuple[str, ...]] = {
    "bar": ("model.patch=1", "train.tokens_per_step=2048"),
    "bar-x4": ("model.patch=1", "train.tokens_per_step=8192"),
    "patch4": ("model.patch=4", "train.tokens_per_step=2048"),
    "patch4-x4": ("model.patch=4", "train.tokens_per_step=8192"),
}


def labels_per_step(overrides: tuple[str, ...]) -> int:
    """Scored bars a step: tokens_per_step bars, of which one in `patch` ends a patch."""
    values = dict(o.split("=", 1) for o in overrides)
    return int(values["train.tokens_per_step"]) // int(values["model.patch"])


def run_arms(out: Path) -> None:
    from tsflash.sweep.run import SweepOptions, run_sweep

    for name, extra in ARMS.items():
        folder = RunFolder(out / name)
        if folder.exists() and folder.is_complete():
            continue
        log.info("arm %s: %s", name, " ".join(extra))
        run_sweep(SweepOptions(lengths=list(LENGTHS), data=DATA, out=out / name, device="cpu", preset="cpu",
                               precision=False, overrides=parse_overrides([*TOY, *extra])))


def arm_summary(root: Path) -> dict:
    """Mean test log-loss per N over runs, and the far-context gain over training runs."""
    cells, _ = RunFolder(root).cell_summaries()
    metrics = {(int(c["n"]), int(c["fold"]), int(c["seed"])): c["metrics"] for c in cells}
    short, long_ = LENGTHS
    runs = sorted((f, s) for n, f, s in metrics if n == long_ and (short, f, s) in metrics)

    def arm(n: int):
        return runs_from_means(f"N={n}", [f for f, _ in runs], [s for _, s in runs],
                               [metrics[n, f, s]["log_loss"] for f, s in runs],
                               [metrics[n, f, s]["n_scored"] for f, s in runs])

    r = run_level_test(arm(long_), arm(short), min_seeds_per_fold=1)  # short minus long: the far context's gain
    return {"log_loss": {n: float(np.mean([m["log_loss"] for (k, _, _), m in metrics.items() if k == n]))
                         for n in LENGTHS},
            "runs": len(runs), "folds": len(r.folds), "gain": r.estimate, "se": r.se, "df": r.df, "p": r.p,
            "ci": list(r.ci)}


def summarize(out: Path) -> dict:
    return {name: arm_summary(out / name) | {"labels_per_step": labels_per_step(extra), "overrides": list(extra)}
            for name, extra in ARMS.items() if RunFolder(out / name).exists()}


def render(summary: dict) -> str:
    short, long_ = LENGTHS
    lines = ["# Patch tokens and their label budget (toy positive control, CPU)", "",
             f"`{DATA}`, lengths {short} and {long_}, {' '.join(TOY)}. Gain: N={short} minus N={long_} test "
             "log-loss per bar (> 0: the far context helps), fold means over seeds, t over folds. "
             "From `python lab/patch_budget.py`.", "",
             f"| arm | overrides | labels a step | N={short} log-loss | N={long_} log-loss | gain | 95 % interval "
             "| p | runs, folds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        lines.append(f"| {name} | {' '.join(f'`{o}`' for o in row['overrides'])} | {row['labels_per_step']} | "
                     f"{row['log_loss'][short]:.4f} | {row['log_loss'][long_]:.4f} | {row['gain']:+.4f} | "
                     f"[{row['ci'][0]:+.4f}, {row['ci'][1]:+.4f}] | {row['p']:.3g} | {row['runs']}, {row['folds']} |")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/patch-budget"), help="folder of the arms' run folders")
    ap.add_argument("--summary-only", action="store_true", help="only (re)write OUT/summary.md from the runs in OUT")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.summary_only:
        run_arms(args.out)
    summary = summarize(args.out)
    write_text(args.out / "summary.md", render(summary))
    print(json.dumps({name: round(row["gain"], 5) for name, row in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
