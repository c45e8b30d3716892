"""Validated restarts: one cell (N, fold, seed) as the validated best of `train.restarts` trainings.

Why (reports/recipes/README.md): on the positive control, whether an N=32768 run learns the
one-week echo is decided early in the run (never stopping early changed no run's outcome, 8 of 8
pairs), and in every pair of one fold's cells in which one found it and the other did not, the
finder had the lower validation loss (18 of 18). So k trainings from k seeds, the one with the
lowest validation loss kept, keep a finder whenever one of the k found it; the choice reads the
validation tail only, and the rule is the same at every N.

Seeds: restart r of the cell of seed s trains with seed k*s + r (r = 0 .. k-1), so with k=2 the
seeds [0, 1, 2] train exactly what the seeds 0..5 train one by one: a six-seed run read two by two
and a restart run agree (tested on CPU), and two restart runs of disjoint seeds share no training.
Each restart is an ordinary `run_fold` (its own checkpoint, so a killed cell resumes at the restart
it was in); the test block is scored for each, and the kept one's result is the cell's, under the
cell's own seed, with every restart's validation loss, seed and time in `cost["restarts"]`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from tsflash.engine._evaluate import FoldResult
from tsflash.engine._prepare import Prepared
from tsflash.engine._train import run_fold

log = logging.getLogger(__name__)

# The cost columns that add up over the restarts: the cell's cost is all of its trainings.
SUMMED_COST = ("train_seconds", "val_seconds", "eval_seconds")


def restart_seeds(seed: int, restarts: int) -> list[int]:
    """The training seeds of the cell of `seed`: k*seed .. k*seed + k - 1."""
    return [restarts * seed + r for r in range(restarts)]


def run_cell(prepared: Prepared, n: int, fold: int, seed: int, device=None, checkpoint_dir: Path | None = None,
             *, on_step: Callable[[int], None] | None = None, model_path: Path | None = None, **fold_kwargs) -> FoldResult:
    """`run_fold` for `prepared.cfg.train.restarts` == 1; else the validated best of the cell's
    restarts (module doc). `on_step` counts the steps of all restarts, one after another."""
    restarts = prepared.cfg.train.restarts
    if restarts == 1:
        return run_fold(prepared, n, fold, seed, device, checkpoint_dir, on_step=on_step, model_path=model_path,
                        **fold_kwargs)
    steps = prepared.cfg.train.steps
    paths = [None if model_path is None else model_path.with_name(f"{model_path.name}.restart{r}")
             for r in range(restarts)]
    results: list[FoldResult] = []
    for r, sub in enumerate(restart_seeds(seed, restarts)):
        hook = None if on_step is None else (lambda step, done=r * steps: on_step(done + step))
        results.append(run_fold(prepared, n, fold, sub, device, checkpoint_dir, on_step=hook, model_path=paths[r],
                                **fold_kwargs))
    losses = [res.cost["best_val_loss"] for res in results]
    kept = min(range(restarts), key=lambda r: losses[r])  # the first of equals
    if model_path is not None:
        for r, path in enumerate(paths):
            if r == kept:
                os.replace(path, model_path)
            else:
                path.unlink(missing_ok=True)
    log.debug("fold %d n=%d seed=%d: restart %d of %d kept (validation losses %s)", fold, n, seed, kept, restarts,
              ", ".join(f"{v:.5f}" for v in losses))
    best = results[kept]
    cost = dict(best.cost) | {k: sum(res.cost.get(k) or 0.0 for res in results) for k in SUMMED_COST if k in best.cost}
    cost["restarts"] = {"count": restarts, "kept": kept, "seeds": restart_seeds(seed, restarts),
                        "best_val_loss": losses, "best_step": [res.cost.get("best_step") for res in results],
                        "train_seconds": [res.cost.get("train_seconds") for res in results]}
    return dataclasses.replace(best, seed=seed, cost=cost)
