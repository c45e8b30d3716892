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

Screened (``train.restart_screen`` = S > 0): the k restarts train to step S only (`train_until`,
each checkpointed there), the one with the lowest validation loss measured by then is continued
alone to its end (`run_fold` from its checkpoint: on CPU the very run it would have been
unpaused), and only it is scored. Who finds the echo is decided by about step 300 of 600 (the
recipes' "screened restarts" table, simulated from full runs by the same rule): 3 restarts
screened at 300 kept a finder in as many independent cells as 3 full ones for about 2.3 instead
of 3 runs' steps. The paused restarts' checkpoints stay in the cell's checkpoint folder (the sweep
removes it when the cell is saved), so a killed cell resumes without training a screened restart
again; without a folder the cell uses a temporary one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from tsflash.config import TrainConfig
from tsflash.engine._evaluate import FoldResult
from tsflash.engine._prepare import Prepared
from tsflash.engine._train import run_fold, train_until

log = logging.getLogger(__name__)

# The cost columns that add up over the restarts: the cell's cost is all of its trainings.
SUMMED_COST = ("train_seconds", "val_seconds", "eval_seconds")


def restart_seeds(seed: int, restarts: int) -> list[int]:
    """The training seeds of the cell of `seed`: k*seed .. k*seed + k - 1."""
    return [restarts * seed + r for r in range(restarts)]


def _with_others(kept: dict, others: list[dict]) -> dict:
    """The kept training's cost with the other trainings' SUMMED_COST columns added: a cell costs all
    of its trainings (`others`: their cost records, or a screened restart's `train_until` record)."""
    return dict(kept) | {c: (kept.get(c) or 0.0) + sum(o.get(c) or 0.0 for o in others) for c in SUMMED_COST if c in kept}


def cell_steps(tc: TrainConfig) -> int:
    """The most optimizer steps one cell trains over its restarts: k x train.steps, or screened
    (k - 1) x S + train.steps (each restart to S, the kept one on to the end)."""
    if tc.restart_screen:
        return (tc.restarts - 1) * tc.restart_screen + tc.steps
    return tc.restarts * tc.steps


def run_cell(prepared: Prepared, n: int, fold: int, seed: int, device=None, checkpoint_dir: Path | None = None,
             *, on_step: Callable[[int], None] | None = None, model_path: Path | None = None, **fold_kwargs) -> FoldResult:
    """`run_fold` for `prepared.cfg.train.restarts` == 1; else the validated best of the cell's
    restarts (module doc). `on_step` counts the steps of all restarts, one after another."""
    restarts = prepared.cfg.train.restarts
    if restarts == 1:
        return run_fold(prepared, n, fold, seed, device, checkpoint_dir, on_step=on_step, model_path=model_path,
                        **fold_kwargs)
    if prepared.cfg.train.restart_screen:
        return _screened_cell(prepared, n, fold, seed, device, checkpoint_dir, on_step, model_path, fold_kwargs)
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
    cost = _with_others(best.cost, [res.cost for r, res in enumerate(results) if r != kept])
    cost["restarts"] = {"count": restarts, "kept": kept, "seeds": restart_seeds(seed, restarts),
                        "best_val_loss": losses, "best_step": [res.cost.get("best_step") for res in results],
                        "train_seconds": [res.cost.get("train_seconds") for res in results]}
    return dataclasses.replace(best, seed=seed, cost=cost)


def _screened_cell(prepared: Prepared, n: int, fold: int, seed: int, device, checkpoint_dir: Path | None,
                   on_step: Callable[[int], None] | None, model_path: Path | None, fold_kwargs: dict) -> FoldResult:
    """`run_cell` with train.restart_screen = S (module doc): every restart to S, the validated best
    of them by then on to its end, alone scored. `on_step` counts the screening steps, then the kept
    restart's from S on."""
    k, screen = prepared.cfg.train.restarts, prepared.cfg.train.restart_screen
    seeds = restart_seeds(seed, k)
    with contextlib.ExitStack() as stack:
        folder = checkpoint_dir
        if folder is None:  # the paused restarts need their checkpoints until the choice is made
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tsflash-screen-")))
        screened = []
        for r, sub in enumerate(seeds):
            hook = None if on_step is None else (lambda step, done=r * screen: on_step(done + step))
            screened.append(train_until(prepared, n, fold, sub, screen, device, folder, on_step=hook, **fold_kwargs))
        losses = [s["best_val_loss"] for s in screened]
        kept = min(range(k), key=lambda r: losses[r])  # the first of equals
        hook = None if on_step is None else (lambda step, done=(k - 1) * screen: on_step(done + step))
        best = run_fold(prepared, n, fold, seeds[kept], device, folder, on_step=hook, model_path=model_path,
                        **fold_kwargs)
    log.debug("fold %d n=%d seed=%d: restart %d of %d kept at step %d (validation losses %s)", fold, n, seed, kept, k,
              screen, ", ".join(f"{v:.5f}" for v in losses))
    others = [s for r, s in enumerate(screened) if r != kept]  # the kept one's screening is in its own cost
    cost = _with_others(best.cost, others)
    cost["restarts"] = {"count": k, "kept": kept, "seeds": seeds, "screen": screen, "best_val_loss": losses,
                        "steps": [s["steps"] for s in screened],
                        "train_seconds": [s["train_seconds"] for s in screened]}
    return dataclasses.replace(best, seed=seed, cost=cost)
