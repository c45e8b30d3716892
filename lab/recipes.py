"""Training recipes side by side (issue 29, deliverable 2): which recipe keeps short-range skill at
every N, chosen on the validation tails and the controls only, never on BTC test bars?

Each candidate is the default protocol with a few `--set` overrides (`CANDIDATES`), run as an
ordinary resumable sweep (in this process, through the CLI) into its own run folder,
OUT/<candidate>/<source>, by default on three sources (`DEFAULT_SOURCES`): the positive control (synthetic:long-memory,
a one-week echo only N=32768 reaches), the clean null (synthetic:iid) and BTC (the bar store);
`--sources regime,random-walk` adds the slow hidden regime (a second positive control) and the
random walk. Then
OUT/summary.md and summary.json, per candidate, source and N, from the cells' summaries:

* the validation loss at the kept step (of the kept weights: the average with train.ema_decay), the
  kept step and, where the recipe rewinds ("wsd"), the updates the kept weights had; the learning
  rate of the kept weights' last update over the peak (today 83-91 %); the validation noise (sd of
  the change between successive evaluations before any decay, the 2.4x of N=32768 over 512);
* on the controls only: the test log-loss per N and the nesting check, each N > 512 with its
  context cut to 512 bars against the N=512 model on the same test bars, over training runs (the
  run differences averaged over seeds within each fold, a t over the folds; "fails" = significantly
  worse, p < 0.05), on the log-loss and, where cells record them for the cut scoring, its
  flat-vs-move and up-vs-down parts; and on the positive control the cells that found the echo;
* at the longest N of a control: found against stopped, validated restarts (best of k seeds by
  validation, and the cells read as `train.restarts=k`), every N read as `train.restarts=k` with
  its nesting check (the rule itself), screened restarts simulated from the validation curves (the
  engine's rule, `train.restart_screen`), each run's nesting value against its kept step (within
  folds), and seeds as initial weights (found per seed, its spread against a within-fold
  permutation, the longest N minus 512 by the fold t and by `tsflash.stats.runs.crossed_seed_test`,
  and per set of three seeds the nesting check with its A/A between sets).

BTC test metrics are never read: a cell is reduced to `validation_view` as it is loaded, and only a
control source's cells also pass through `test_view`, which refuses any other source. The BTC sweeps
run with `--validation-only`: their logs show validation losses, never test scores, and they write
no report (the cell files still hold test metrics; nothing here reads them).

    python lab/recipes.py --out runs/recipes --device cuda --time-budget 500   # rerun until done
    python lab/recipes.py --out runs/recipes --summary-only
    python lab/recipes.py --plan                                               # the GPU cost plan

GPU cost plan (`cost_plan`, from the calibrated H200 cells of tsflash/sweep/progress.py CALIBRATION,
means of its two rows per N: 8.1 s a cell at N=512, 31.9 s at N=32768, 7.8 s a fold's baselines,
4.8 s a report), at the default lengths 512 and 32768 (the nesting check needs N=512 and the longest
N; 4096 adds 10.7 s a cell), five folds and three seeds (15 runs per N, the run-level test's unit):
a sweep is about 645 s; "wsd" runs its decay too, assumed +13 % of the model cells (a decay of 20 %
of the best step, 170 of ~270 steps run), about 723 s; the weight average costs a lerp per step;
the short windows of "short-mix" replace tokens (no more, and their attention is cheaper), taken as
the baseline's cost; "short-mix-restarts" trains each cell twice (its model cells doubled); the
"short-mix-half", "-most", "-ema" and "-ema-fast" variants cost what "short-mix" does, "short-mix-wsd"
what "wsd" does. Eleven candidates on three sources:

    candidate            per source   3 sources
    baseline                645 s      1935 s
    ema                     645 s      1935 s
    wsd                     723 s      2169 s
    wsd-ema                 723 s      2169 s
    short-mix               645 s      1935 s
    short-mix-restarts     1246 s      3737 s
    short-mix-half          645 s      1935 s
    short-mix-most          645 s      1935 s
    short-mix-ema           645 s      1935 s
    short-mix-ema-fast      645 s      1935 s
    short-mix-wsd           723 s      2169 s
    total                     23787 s = 6 h 36 min of one H200 (about 50 min on 8, cells in parallel)

The baseline on BTC is the published second edition's protocol: its cells
(reports/h200-btcusdt-1m-second-edition) give the same validation view for 645 s less
(`--baseline btc=FOLDER`; `--baseline long-memory=reports/controls/protocol/long-memory`
likewise for the positive control). One seed instead of three divides everything by three but leaves the
nesting check 5 folds (one run each).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from lab.bench_tables import control_found_bar  # noqa: E402
from tsflash import cli  # noqa: E402
from tsflash.atomic import write_json, write_text  # noqa: E402
from tsflash.config import parse_overrides  # noqa: E402
from tsflash.runfolder import RunFolder, read_json  # noqa: E402
from tsflash.scoring.metrics import hit_rate_from_confusion  # noqa: E402
from tsflash.stats.runs import Runs, crossed_seed_test, run_level_test, runs_from_means  # noqa: E402

log = logging.getLogger("recipes")

# name -> the --set overrides over the default protocol. An average over ~50 steps (decay 0.98,
# 2.5 evaluations of 20 steps) is short against best steps of 137-184; the decay is 20 % of the
# best step, the cooldown share of warmup-stable-decay schedules.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "ema": ("train.ema_decay=0.98",),
    "wsd": ("train.schedule=wsd", "train.decay_fraction=0.2"),
    "wsd-ema": ("train.schedule=wsd", "train.decay_fraction=0.2", "train.ema_decay=0.98"),
    # a quarter of each long-N batch's tokens as 512-bar windows: 1 of 4 windows at N=32768, 8 of 32 at 4096
    "short-mix": ("train.short_fraction=0.25",),
    # and each cell the validated best of two trainings (tsflash.engine._restarts): twice the cost
    "short-mix-restarts": ("train.short_fraction=0.25", "train.restarts=2"),
    # The third screen's next candidates (reports/recipes/README.md): the N=32768 runs that learn no
    # far signal stall by step ~200 with a worse volatility forecast; more of each batch as scattered
    # short windows (2 or 3 of 4 at N=32768), or the quarter with a ~200-step weight average.
    "short-mix-half": ("train.short_fraction=0.5",),
    "short-mix-most": ("train.short_fraction=0.75",),
    "short-mix-ema": ("train.short_fraction=0.25", "train.ema_decay=0.995"),
    # The fifth screen's next (reports/recipes/README.md): the ~200-step average lags the echo's late
    # finders (kept steps 520-600 without it) and its calm curve stops runs before they find it; the
    # ~50-step average of "ema", which found the echo, over the quarter of short windows.
    "short-mix-ema-fast": ("train.short_fraction=0.25", "train.ema_decay=0.98"),
    # ... and the annealed end at the validated step over the same short windows: validation and
    # stopping read the raw weights (which find the echo, 2 of 2 under "wsd"), the kept weights are
    # decayed from the best step (the regime's failure is unannealed noisy restores).
    "short-mix-wsd": ("train.short_fraction=0.25", "train.schedule=wsd", "train.decay_fraction=0.2"),
}
# Set for every candidate before --set: the screens compare training recipes, and runs pool with the
# committed screens only when their configs differ in train.seeds alone, which eval.probe (on in the
# default preset since the fifth screen; the screens ran without it) would break.
PROTOCOL = ("eval.probe=false",)
# The published positive control (reports/controls/protocol/long-memory: the one-week echo at strength
# 0.2, found by 5 of 15 N=32768 runs) and the clean null by default; the slow regime (a second
# positive control) and the random walk by name.
CONTROLS = {"long-memory": "synthetic:long-memory:{seed}:strength=0.2", "iid": "synthetic:iid:{seed}",
            "regime": "synthetic:regime:{seed}", "random-walk": "synthetic:random-walk:{seed}"}
SOURCES = (*CONTROLS, "btc")
DEFAULT_SOURCES = ("long-memory", "iid", "btc")
DEFAULT_LENGTHS = "512,32768"
SHORT = 512  # the nesting check's short context
ALPHA = 0.05
NESTING_PARTS = ("log_loss", "move_log_loss", "direction_log_loss")  # total, flat-vs-move, up-vs-down
# the validated restarts' tables (the rule, screened): k up to 5; screened at these steps of the 600-step limit
MAX_SCREENED_K = 5
SCREEN_STEPS = (100, 200, 300, 400)
# the rule's own table (nesting check and found at the rule): unscreened and the screens a plan would use
RULE_SCREENS = (None, 300, 400)
# deliverable 5's bar (the echo found in at least 12 of 15 N=32768 runs) and how surely the rule's
# restarts must clear it: the cheapest k (and screen) whose estimated chance is at least this
FOUND_BAR = (12, 15)
CHOICE_PROBABILITY = 0.9
# the decay's extra share of a "wsd" cell (module doc), for the plan
WSD_EXTRA = 0.13


# ---------------------------------------------------------------------------------------------
# Reading cells: validation for every source, test bars for the controls only


def validation_view(cell: dict, train: dict) -> dict:
    """What the summary may know of any cell: its identity and its training record (validation
    tail, kept step, learning rate at it). `train` is the run config's train table."""
    cost = cell.get("cost") or {}
    recipe = cost.get("recipe") or {}
    best = cost.get("best_step")
    ratio = recipe.get("kept_lr_ratio") if recipe else _cosine_lr_ratio(best, train)
    return {"n": int(cell["n"]), "fold": int(cell["fold"]), "seed": int(cell["seed"]),
            "best_val_loss": cost.get("best_val_loss"), "best_step": best, "stop_step": cost.get("stop_step"),
            "kept_updates": recipe.get("kept_updates", best), "kept_lr_ratio": ratio,
            "val_noise": _val_noise(cost.get("curve") or {}, recipe.get("decay")),
            "val_curve": list(zip((cost.get("curve") or {}).get("step", ()), (cost.get("curve") or {}).get("val_loss", ()), strict=True))}


def test_view(cell: dict, source: str) -> dict:
    """The test-bar numbers of a CONTROL's cell: its log-loss parts, and those of its context cuts."""
    if source not in CONTROLS:
        raise ValueError(f"test metrics are read for the controls only ({', '.join(CONTROLS)}), not {source!r}")
    metrics = cell["metrics"]
    cuts = {int(m): {k: v[k] for k in NESTING_PARTS if k in v} for m, v in (cell.get("far_context") or {}).items()}
    return {"test": {k: metrics[k] for k in NESTING_PARTS if k in metrics}, "cut": cuts,
            "n_scored": int(metrics["n_scored"]), "hit_rate": hit_rate_from_confusion(metrics["confusion"])}


def _cosine_lr_ratio(best: int | None, train: dict) -> float | None:
    """The published schedule's rate at the kept weights' last update, over the peak."""
    from tsflash.engine._train import lr_at

    if not best:
        return None
    return lr_at(best - 1, train["steps"], 1.0, train["warmup_steps"], train.get("min_lr_ratio", 0.1))


def _val_noise(curve: dict, decay: dict | None) -> float | None:
    """sd of the change of the validation loss between successive evaluations, before any decay."""
    steps, losses = curve.get("step", []), curve.get("val_loss", [])
    end = decay["start"] if decay and decay.get("from") is not None else math.inf
    kept = [v for s, v in zip(steps, losses, strict=True) if s <= end]
    return float(np.std(np.diff(kept), ddof=1)) if len(kept) > 2 else None


def read_run(root: Path, source: str) -> dict[int, dict[tuple[int, int], dict]]:
    """{N: {(fold, seed): row}}: every cell's `validation_view`, with `test_view` on a control."""
    folder = RunFolder(root)
    train = read_json(folder.config_json)["train"]
    cells, _ = folder.cell_summaries()
    out: dict[int, dict] = {}
    for cell in cells:
        row = validation_view(cell, train) | (test_view(cell, source) if source in CONTROLS else {})
        out.setdefault(row["n"], {})[(row["fold"], row["seed"])] = row
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------
# The summary


def _mean(values) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def per_n(rows: dict[tuple[int, int], dict]) -> dict:
    cells = list(rows.values())
    out = {"cells": len(cells)} | {k: _mean(r[k] for r in cells)
                                   for k in ("best_val_loss", "best_step", "kept_updates", "kept_lr_ratio", "val_noise")}
    if cells and "test" in cells[0]:
        scored = sum(r["n_scored"] for r in cells)
        out["test_log_loss"] = sum(r["test"]["log_loss"] * r["n_scored"] for r in cells) / scored
    return out


def nesting(by_n: dict[int, dict], short: int = SHORT) -> dict[int, dict]:
    """Each N > short cut to `short` bars minus the N=short model, per part, over training runs: the
    run-level test (`tsflash.stats.runs`: the fold means over seeds of the run differences, a t over
    the folds, df = folds - 1), so the seeds of one fold are not counted as independent."""
    out: dict[int, dict[str, dict]] = {}
    for n, rows in _longer(by_n, short):
        out[n] = {}
        for part in NESTING_PARTS:
            keys = sorted(k for k in set(rows) & set(by_n[short])
                          if part in rows[k]["cut"].get(short, {}) and part in by_n[short][k]["test"])
            # The lambdas are called within this iteration, so they read this loop's part and rows.
            r = _long_minus_short(keys, lambda k: by_n[short][k]["test"][part], lambda k: rows[k]["cut"][short][part],  # noqa: B023
                                  lambda k: by_n[short][k]["n_scored"], (f"N={short}", f"N={n} cut"))
            if r is not None:
                out[n][part] = {"runs": len(keys), "folds": len(r.folds), "mean": r.estimate, "p": r.p,
                                "fails": bool(r.estimate > 0 and r.p < ALPHA)}
    return out


def _longer(by_n: dict[int, dict], short: int):
    """(N, its cells) of every N above `short`, when the run has `short` to compare them with."""
    return [(n, rows) for n, rows in by_n.items() if n > short] if short in by_n else []


def _long_minus_short(keys: list[tuple[int, int]], short_loss, long_loss, weight, labels: tuple[str, str]):
    """The run-level test of long minus short over the (fold, seed) runs `keys` (fold means over seeds
    weighted by `weight`, a t over the folds); None with fewer than two folds (its df is folds - 1)."""
    if len({f for f, _ in keys}) < 2:
        return None

    def arm(label: str, loss) -> Runs:
        return runs_from_means(label, [f for f, _ in keys], [s for _, s in keys], [loss(k) for k in keys],
                               [weight(k) for k in keys])

    return run_level_test(arm(labels[0], short_loss), arm(labels[1], long_loss), min_seeds_per_fold=1)


def validation_gap(by_n: dict[int, dict], short: int = SHORT) -> dict[int, dict]:
    """Each N > short minus the N=short model of the same fold and seed, validation loss at the kept
    step, over training runs (the run-level test, as `nesting`; > 0: the long model validates worse).
    The one N-against-N reading of BTC the summary may give: its test bars are never read."""
    out = {}
    for n, rows in _longer(by_n, short):
        keys = sorted(k for k in set(rows) & set(by_n[short])
                      if rows[k]["best_val_loss"] is not None and by_n[short][k]["best_val_loss"] is not None)
        r = _long_minus_short(keys, lambda k: by_n[short][k]["best_val_loss"], lambda k: rows[k]["best_val_loss"],  # noqa: B023
                              lambda k: 1, (f"N={short}", f"N={n}"))
        if r is not None:
            out[n] = {"runs": len(keys), "folds": len(r.folds), "mean": r.estimate, "p": r.p, "ci": list(r.ci)}
    return out


def run_root(out: Path, name: str, source: str, baselines: dict[str, Path] | None = None) -> Path:
    """OUT/<candidate>/<source>; the baseline on a source may be an existing run of the default
    protocol (`baselines`: {source: folder}, read, never run)."""
    if name == "baseline" and baselines is not None and source in baselines:
        return baselines[source]
    return out / name / source


def found_rate(rows: dict[tuple[int, int], dict], bar: float | None) -> int | None:
    """Cells whose direction hit rate reaches `bar` (the control's found bar); None without one."""
    return None if bar is None else sum(r["hit_rate"] >= bar for r in rows.values())


def pooled_runs(roots: list[Path], source: str) -> tuple[dict, dict[int, dict[tuple[int, int], dict]]]:
    """The cells of run folders that differ only in their seeds, as one run: more training runs of
    one configuration (e.g. a one-seed screen later given seeds 1 and 2 in a second folder).
    Returns (what they share: the flattened config without seeds, the market, the preset, and the
    first run's command; the cells)."""
    def identity(root: Path) -> dict:
        """Everything that makes a run but its seeds: the config, the market and the preset."""
        folder = RunFolder(root)
        config, run = read_json(folder.config_json), read_json(folder.run_json)
        flat = {f"{table}.{k}": v for table, values in config.items() if isinstance(values, dict)
                for k, v in values.items()} | {k: v for k, v in config.items() if not isinstance(v, dict)}
        flat.pop("train.seeds", None)
        return flat | {"data": run.get("data"), "preset": run.get("preset"), "command": run.get("command", "")}

    first = identity(roots[0])
    by_n: dict[int, dict] = {}
    for root in roots:
        other = identity(root)
        # the commands differ in --out and the seeds at least: not part of a run's identity
        if differ := sorted(k for k in first.keys() | other.keys() if k != "command" and first.get(k) != other.get(k)):
            k = differ[0]
            raise SystemExit(f"runs are pooled only when they differ in train.seeds alone: {root} has {k}="
                             f"{other.get(k)!r}, {roots[0]} {k}={first.get(k)!r} ({len(differ)} keys differ)")
        for n, rows in read_run(root, source).items():
            if repeated := sorted(set(rows) & set(by_n.get(n, {}))):
                raise SystemExit(f"runs are pooled only over disjoint seeds: {root} repeats N={n} (fold, seed) "
                                 f"{repeated[0]} ({len(repeated)} runs repeated)")
            by_n.setdefault(n, {}).update(rows)
    return first, dict(sorted(by_n.items()))


def extra_overrides(command: str, name: str) -> list[str]:
    """The `--set` items a run had beyond its candidate's and its seeds (e.g. train.patience=0 for a
    screen of the stopping rule), from run.json's command: they belong in the row's label."""
    import shlex

    words = shlex.split(command)
    items = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
    return [i for i in items if not i.startswith("train.seeds=") and i not in CANDIDATES[name] and i not in PROTOCOL]


def stopping(rows: dict[tuple[int, int], dict], bar: float | None, max_steps: int) -> dict | None:
    """Found against stopped: the stop steps of the cells that found the planted effect and of those
    that did not, and how many of the latter the stopping rule ended before `max_steps` (a run
    stopped early cannot find what it would have found later)."""
    if bar is None or not rows:
        return None
    found = [r["stop_step"] for r in rows.values() if r["hit_rate"] >= bar and r.get("stop_step") is not None]
    missed = [r["stop_step"] for r in rows.values() if r["hit_rate"] < bar and r.get("stop_step") is not None]
    return {"found": len(found), "missed": len(missed), "max_steps": max_steps,
            "found_stop": [min(found), max(found)] if found else None,
            "missed_stop": [min(missed), max(missed)] if missed else None,
            "missed_early": sum(s < max_steps for s in missed)}


def validated_best(cells) -> dict:
    """Of cells of one fold and N, the one a validated restart keeps: the lowest validation loss."""
    return min(cells, key=lambda r: r["best_val_loss"])


def _kept_found(groups, bar: float, k: int) -> dict | None:
    """Of each group of cells, the one with the lowest validation loss; how many of those found the
    planted effect (a validated choice among seeds, validation only)."""
    kept = [validated_best(cells) for cells in groups]
    return {"k": k, "found": sum(r["hit_rate"] >= bar for r in kept), "of": len(kept)} if kept else None


def _by_fold(rows: dict[tuple[int, int], dict]) -> dict[int, dict[int, dict]]:
    folds: dict[int, dict[int, dict]] = {}
    for (fold, seed), row in sorted(rows.items()):
        folds.setdefault(fold, {})[seed] = row
    return folds


def best_of(rows: dict[tuple[int, int], dict], bar: float | None, k: int) -> dict | None:
    """Validated restarts over every k-subset of each fold's seeds (`_kept_found`). Subsets of one
    fold share seeds: they are not independent runs."""
    if bar is None:
        return None
    return _kept_found([combo for cells in _by_fold(rows).values()
                        for combo in itertools.combinations(cells.values(), k)], bar, k)


def _restart_groups(rows: dict[tuple[int, int], dict], k: int) -> dict[tuple[int, int], list[dict]]:
    """{(fold, s): the cells of seeds `tsflash.engine.restart_seeds(s, k)`}: the k restarts a
    `train.restarts=k` cell of seed s trains; complete groups only, so no seed is in two groups."""
    from tsflash.engine import restart_seeds

    return {(fold, s): [cells[t] for t in restart_seeds(s, k)] for fold, cells in _by_fold(rows).items()
            for s in range(max(cells) // k + 1) if all(t in cells for t in restart_seeds(s, k))}


def as_restarts(rows: dict[tuple[int, int], dict], bar: float | None, k: int) -> dict | None:
    """The cells read as `train.restarts=k` would make them (`_restart_groups`). Unlike `best_of`,
    the groups share no seed: independent runs."""
    if bar is None:
        return None
    return _kept_found(list(_restart_groups(rows, k).values()), bar, k)


def kept_by_restarts(by_n: dict[int, dict], k: int, screen: int | None = None) -> dict[int, dict[tuple[int, int], dict]]:
    """{N: {(fold, s): the kept cell}}: every N read as `train.restarts=k` (the lowest validation
    loss of each group kept, the same rule at every N), for the nesting check of the rule itself.
    With `screen`, the engine's screened restarts (`train.restart_screen`): the lowest validation
    loss seen by that step picks the restart, whose full run is the kept cell (a continued restart
    is its full run, bit for bit: tests/engine/test_restarts.py)."""
    pick = validated_best if screen is None else (lambda cells: screened_best(cells, screen))
    out = {}
    for n, rows in by_n.items():
        if groups := _restart_groups(rows, k):
            out[n] = {key: pick(cells) for key, cells in groups.items()}
    return out


def _seen_loss(row: dict, step: int) -> float:
    """The lowest validation loss a cell had shown by `step`: the engine's screening rule
    (`train.restart_screen`), on the row's curve."""
    from tsflash.engine import lowest_val_loss_by

    return lowest_val_loss_by({"step": [s for s, _ in row["val_curve"]], "val_loss": [v for _, v in row["val_curve"]]},
                              step)


def screened_best(cells, step: int) -> dict:
    """Of cells of one fold and N, the one screened restarts keep: the lowest validation loss by `step`."""
    return min(cells, key=lambda r: _seen_loss(r, step))


def screened(rows: dict[tuple[int, int], dict], bar: float | None, k: int, step: int) -> dict | None:
    """A cheaper validated restart, simulated from full runs: train k restarts to `step`, keep the
    one with the lowest validation loss so far and continue only it (a resumed run continues as the
    full run did). Of every k-subset of each fold's seeds and of the independent groups of
    `_restart_groups`: how many kept cells found the effect; cost: the steps trained (k runs to
    `step` or their stop, then the kept one to its stop) over one run's."""
    if bar is None:
        return None
    subsets = [c for cells in _by_fold(rows).values() for c in itertools.combinations(cells.values(), k)]
    if not subsets:
        return None
    groups = list(_restart_groups(rows, k).values())
    kept = [screened_best(c, step) for c in subsets]  # each subset's continued restart, once
    trained = sum(sum(min(step, r["stop_step"]) for r in c) + max(0, w["stop_step"] - step) for c, w in zip(subsets, kept, strict=True))
    one_run = sum(r["stop_step"] for c in subsets for r in c) / k
    return {"k": k, "step": step, "found": sum(w["hit_rate"] >= bar for w in kept), "of": len(subsets),
            "groups_found": sum(screened_best(g, step)["hit_rate"] >= bar for g in groups), "groups": len(groups),
            "cost": trained / one_run}


def validation_prefers_finders(rows: dict[tuple[int, int], dict], bar: float | None) -> dict | None:
    """Of the (found, missed) pairs of cells within one fold, those in which the finder has the lower
    validation loss: whether a validated choice among seeds can tell a finder from a miss."""
    if bar is None:
        return None
    pairs = [(a, b) for (fa, _), a in rows.items() for (fb, _), b in rows.items()
             if fa == fb and a["hit_rate"] >= bar > b["hit_rate"]]
    return {"pairs": len(pairs), "finder_lower": sum(a["best_val_loss"] < b["best_val_loss"] for a, b in pairs)}


def paired_outcomes(rows: dict[tuple[int, int], dict], other: dict[tuple[int, int], dict], bar: float | None) -> dict | None:
    """The same (fold, seed) under two rules: in how many pairs the found/missed outcome is the same."""
    keys = sorted(set(rows) & set(other))
    if bar is None or not keys:
        return None
    here = [rows[k]["hit_rate"] >= bar for k in keys]
    there = [other[k]["hit_rate"] >= bar for k in keys]
    return {"pairs": len(keys), "same": sum(a == b for a, b in zip(here, there, strict=True)),
            "found_here": sum(here), "found_there": sum(there)}


def restarts_choice(best: list[dict], screens: list[dict]) -> dict | None:
    """The restarts' options (every k-subset's found rate: `best_of` unscreened at a cost of k runs,
    `screened` at its simulated cost), each with its chance of clearing `FOUND_BAR` in independent
    cells (binomial at that rate), and the cheapest whose chance is at least `CHOICE_PROBABILITY`."""
    from scipy.stats import binom

    need, cells = FOUND_BAR
    options = sorted([{"k": b["k"], "screen": None, "rate": b["found"] / b["of"], "cost": float(b["k"])} for b in best]
                     + [{"k": x["k"], "screen": x["step"], "rate": x["found"] / x["of"], "cost": x["cost"]} for x in screens],
                     key=lambda o: (o["cost"], o["k"]))
    if not options:
        return None
    for o in options:
        o["p_bar"] = float(binom.sf(need - 1, cells, o["rate"]))
    chosen = next((o for o in options if o["p_bar"] >= CHOICE_PROBABILITY), None)
    return {"options": options, "chosen": chosen}


def who_found(rows: dict[tuple[int, int], dict], bar: float | None, max_steps: int) -> dict | None:
    """At the longest N: `stopping`, with the validated choices among seeds beside it (`best_of` and
    `as_restarts` for every k up to the seeds there are, `validation_prefers_finders`)."""
    if not (record := stopping(rows, bar, max_steps)):
        return None
    seeds = len({s for _f, s in rows})
    best = [b for k in range(2, seeds + 1) if (b := best_of(rows, bar, k))]
    screens = [r for k in range(2, min(seeds, MAX_SCREENED_K) + 1) for step in SCREEN_STEPS
               if seeds >= 3 and (r := screened(rows, bar, k, step))]
    return record | {"best_of": best, "validation": validation_prefers_finders(rows, bar),
                     "restarts": [r for k in range(2, seeds + 1) if (r := as_restarts(rows, bar, k)) and r["of"]],
                     "screened": screens, "choice": restarts_choice([b for b in best if b["k"] <= MAX_SCREENED_K], screens)}


PERMUTATIONS = 20000  # of the per-seed found counts, within folds (seeded: the summary recomputes)
SEED_SET = 3  # the seeds of one published run: the seed sets compared with each other


def _arm(label: str, rows: dict[tuple[int, int], dict], keys, loss) -> Runs:
    return runs_from_means(label, [f for f, _ in keys], [s for _, s in keys], [loss(rows[k]) for k in keys],
                           [rows[k]["n_scored"] for k in keys])


def seed_effects(by_n: dict[int, dict], bar: float | None, short: int = SHORT) -> dict | None:
    """Seeds as initial weights (the engine seeds the weights by the seed alone, the same in every
    fold): at the longest N, the cells that found the effect per seed and whether their spread over
    seeds exceeds chance (the found/missed outcomes permuted among the seeds within each fold); and
    the longest N minus `short` (test log-loss) and its nesting check by the fold t and by
    `tsflash.stats.runs.crossed_seed_test`, over the seeds that ran on every fold at both N."""
    longest = max(by_n)
    if longest <= short or short not in by_n:
        return None
    rows, base = by_n[longest], by_n[short]
    folds = sorted({f for f, _ in rows})
    seeds = [s for s in sorted({s for _, s in rows}) if all((f, s) in rows and (f, s) in base for f in folds)]
    if len(seeds) < 3:
        return None
    keys = [(f, s) for f in folds for s in seeds]
    out: dict = {"n": longest, "seeds": seeds}
    if bar is not None:
        found = np.array([[rows[(f, s)]["hit_rate"] >= bar for f in folds] for s in seeds], dtype=int)  # seeds x folds
        rng = np.random.default_rng(0)
        spread = found.sum(axis=1).var()
        null = np.array([np.column_stack([rng.permutation(found[:, j]) for j in range(len(folds))]).sum(axis=1).var()
                         for _ in range(PERMUTATIONS)])
        out |= {"found": found.sum(axis=1).tolist(), "folds": len(folds),
                "spread_p": float((1 + (null >= spread - 1e-12).sum()) / (1 + PERMUTATIONS))}
    tests = {"difference": (_arm(f"N={short}", base, keys, lambda r: r["test"]["log_loss"]),
                            _arm(f"N={longest}", rows, keys, lambda r: r["test"]["log_loss"]))}
    if all("log_loss" in rows[k]["cut"].get(short, {}) for k in keys):
        tests["nesting"] = (tests["difference"][0], _arm(f"N={longest} cut", rows, keys, lambda r: r["cut"][short]["log_loss"]))
    for name, (a, b) in tests.items():
        r = crossed_seed_test(a, b)
        out[name] = {"estimate": r.estimate, "fold_t_p": r.fold_t_p, "crossed_p": r.p, "crossed_df": r.df,
                     "crossed_ci": list(r.ci), "seed_main_sd": math.sqrt(r.seed_main[0])}
    # Seed sets of SEED_SET seeds (a published run's three): each one's longest N minus short, and
    # A/A at the longest N between sets (disjoint seeds, true difference 0), by both tests.
    sets = [seeds[i:i + SEED_SET] for i in range(0, len(seeds) - SEED_SET + 1, SEED_SET)]
    if len(sets) > 1:
        def loss(r):
            return r["test"]["log_loss"]

        def keyed(group):
            return [(f, s) for f in folds for s in group]
        out["sets"] = [{"seeds": g, **_both(_arm(f"N={short}", base, keyed(g), loss), _arm(f"N={longest}", rows, keyed(g), loss))}
                       for g in sets]
        out["aa"] = [{"seeds": [g, h], **_both(_arm("A", rows, keyed(g), loss), _arm("B", rows, keyed(h), loss))}
                     for g, h in itertools.combinations(sets, 2)]
        if "nesting" in tests:  # the check that decides a recipe, per set and A/A between sets: its own noise
            nest = {k: {"nest": nesting_value(rows[k], base[k], short), "n_scored": rows[k]["n_scored"]} for k in keys}

            def cut(r):
                return r["cut"][short]["log_loss"]
            for x, g in zip(out["sets"], sets, strict=True):
                x["nesting"] = _both(_arm(f"N={short}", base, keyed(g), loss), _arm(f"N={longest} cut", rows, keyed(g), cut))
            out["aa_nesting"] = [{"seeds": [g, h], **_both(_arm("A", nest, keyed(g), lambda r: r["nest"]),
                                                           _arm("B", nest, keyed(h), lambda r: r["nest"]))}
                                 for g, h in itertools.combinations(sets, 2)]
    return out


def nesting_cell(checks: dict[int, dict], part: str) -> str:
    """A table cell of `nesting`'s checks of one part: with one N above the short one its check alone,
    with several each N named, so no N's check hides another's; "-" where no N has one."""
    def one(check: dict | None) -> str:
        return "-" if check is None else (f"{_f(check['mean'], '+.5f')} (p {_f(check['p'], '.3g')}, "
                                          f"{check['runs']} runs){' FAILS' if check['fails'] else ''}")
    found = {n: parts[part] for n, parts in checks.items() if part in parts}
    if len(checks) <= 1 or not found:
        return one(next(iter(found.values()), None))
    return ", ".join(f"{n}: {one(parts.get(part))}" for n, parts in checks.items())


def nesting_value(long_row: dict, short_row: dict, short: int = SHORT) -> float:
    """One run's nesting value: its long-N model cut to `short` bars minus the N=`short` model of the
    same fold and seed, test log-loss per bar (> 0: short-range skill lost)."""
    return long_row["cut"][short]["log_loss"] - short_row["test"]["log_loss"]


def paired_nesting(by_n: dict[int, dict], theirs: dict[int, dict], short: int = SHORT) -> dict | None:
    """The nesting value at the longest N under this rule minus under another, on the same (fold, seed)
    runs, over training runs (the run-level test of the paired values: fold means, a t over the folds;
    < 0: this rule keeps more short-range skill). None without such pairs in two folds."""
    longest = max(by_n)
    if short not in by_n or short not in theirs or longest not in theirs:
        return None
    keys = sorted(set(by_n[longest]) & set(by_n[short]) & set(theirs[longest]) & set(theirs[short]))
    if len({f for f, _ in keys}) < 2:
        return None
    folds, seeds, ones = [f for f, _ in keys], [s for _, s in keys], [1] * len(keys)
    here = [nesting_value(by_n[longest][k], by_n[short][k], short) for k in keys]
    there = [nesting_value(theirs[longest][k], theirs[short][k], short) for k in keys]
    r = run_level_test(runs_from_means("other", folds, seeds, there, ones), runs_from_means("this", folds, seeds, here, ones),
                       min_seeds_per_fold=1)
    return {"n": longest, "runs": len(keys), "estimate": r.estimate, "p": r.p}


def skill_and_step(by_n: dict[int, dict], short: int = SHORT, min_runs: int = 10) -> dict | None:
    """At the longest N: are the runs that lost more short-range skill (the nesting check's value per
    run: the model cut to `short` bars minus the N=`short` model, test log-loss) the ones kept at an
    earlier step? Spearman's rho within folds (of the values and steps less their fold's means: runs
    of one fold share their bars); its p by permuting the kept steps among the runs of each fold,
    two-sided; and the mean value of the runs kept before the median kept step and at or after it."""
    longest = max(by_n)
    if longest <= short or short not in by_n:
        return None
    rows, base = by_n[longest], by_n[short]
    keys = sorted(k for k in set(rows) & set(base)
                  if "log_loss" in rows[k]["cut"].get(short, {}) and rows[k].get("best_step") is not None)
    if len(keys) < min_runs:
        return None
    value = np.array([nesting_value(rows[k], base[k], short) for k in keys])
    step = np.array([rows[k]["best_step"] for k in keys], dtype=np.float64)
    folds = np.array([f for f, _ in keys])

    def within(x):  # each fold's mean removed: the association within folds, not between them
        return x - np.array([x[folds == f].mean() for f in folds])

    value_within, step_within = within(value), within(step)
    if np.allclose(value_within, 0, atol=1e-12) or np.allclose(step_within, 0, atol=1e-9):
        return None  # nothing varies within a fold: nothing to read
    rv, rs = rankdata(value_within), rankdata(step_within)  # average ranks, as Spearman's rho takes them
    rng = np.random.default_rng(0)
    null_ranks = np.tile(rs, (PERMUTATIONS, 1))
    for f in np.unique(folds):  # the kept steps' ranks permuted within each fold
        idx = np.flatnonzero(folds == f)
        null_ranks[:, idx] = rng.permuted(null_ranks[:, idx], axis=1)

    def rho(a, b):
        a, b = a - a.mean(axis=-1, keepdims=True), b - b.mean(axis=-1, keepdims=True)
        return (a * b).sum(axis=-1) / np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))

    observed = float(rho(rv, rs))
    null = rho(rv[None, :], null_ranks)
    median = float(np.median(step))
    return {"n": longest, "runs": len(keys), "rho": observed,
            "p": float((1 + (np.abs(null) >= abs(observed) - 1e-12).sum()) / (1 + PERMUTATIONS)),
            "median_step": median, "early": float(value[step < median].mean()) if (step < median).any() else None,
            "late": float(value[step >= median].mean())}


def _both(a: Runs, b: Runs) -> dict:
    r = crossed_seed_test(a, b)
    return {"estimate": r.estimate, "fold_t_p": r.fold_t_p, "crossed_p": r.p}


def restarts_rule(by_n: dict[int, dict], bar: float | None, short: int = SHORT) -> list[dict]:
    """Per k >= 2 with complete groups at every N and per screen of `RULE_SCREENS`: the run read as
    `train.restarts=k` (`kept_by_restarts`), its test log-loss per N, found at the longest N, and its
    nesting check."""
    seeds = min(len({s for _f, s in rows}) for rows in by_n.values())
    out = []
    for k in range(2, min(seeds, MAX_SCREENED_K) + 1):
        for screen in RULE_SCREENS:
            kept = kept_by_restarts(by_n, k, screen)
            if set(kept) != set(by_n) or short not in kept:
                continue
            longest = max(kept)
            out.append({"k": k, "screen": screen, "cells": {n: len(r) for n, r in kept.items()},
                        "test_log_loss": {n: per_n(r).get("test_log_loss") for n, r in kept.items()},
                        "found": found_rate(kept[longest], bar), "nesting": nesting(kept, short)})
    return out


def summarize(out: Path, candidates=tuple(CANDIDATES), sources=DEFAULT_SOURCES, baselines: dict[str, Path] | None = None,
              short: int = SHORT, pools: tuple[Path, ...] = (), versus: tuple[Path, ...] = ()) -> dict:
    """Per candidate and source; the same candidate and source in each of `pools` (other recipe
    output folders, other seeds) is pooled with OUT's; in `versus` (other folders, another rule, e.g.
    another stopping rule) its cells are paired with OUT's by (fold, seed) at the longest N."""
    runs = []
    for name in candidates:
        for source in sources:
            root = run_root(out, name, source, baselines)
            roots = [r for r in (root, *(p / name / source for p in pools)) if RunFolder(r).exists()]
            if not roots:
                continue
            shared, by_n = pooled_runs(roots, source)
            run = {"candidate": name, "source": source, "run": ", ".join(map(str, roots)),
                   "overrides": list(CANDIDATES[name]), "complete": all(RunFolder(r).is_complete() for r in roots),
                   "per_n": {n: per_n(r) for n, r in by_n.items()}, "patch": int(shared.get("model.patch", 1)),
                   "extra": extra_overrides(shared["command"], name)}
            if source == "btc":
                run["validation_gap"] = validation_gap(by_n, short)
            if source in CONTROLS:
                run["nesting"] = nesting(by_n, short)
                bar = control_found_bar(shared["data"])
                for n, rows in by_n.items():
                    run["per_n"][n]["found"] = found_rate(rows, bar)
                if max(by_n) > short and (record := who_found(by_n[max(by_n)], bar, int(shared["train.steps"]))):
                    run["per_n"][max(by_n)]["stopping"] = record
                run["as_restarts"] = restarts_rule(by_n, bar, short)
                run["seed_effects"] = seed_effects(by_n, bar, short)
                run["skill_and_step"] = skill_and_step(by_n, short)
                others = [r for r in (v / name / source for v in versus) if RunFolder(r).exists()]
                if others and (longest := max(by_n)) in (theirs := pooled_runs(others, source)[1]):
                    run["versus"] = {"folders": list(map(str, others)), "n": longest,
                                     **(paired_outcomes(by_n[longest], theirs[longest], bar) or {}),
                                     "nesting": paired_nesting(by_n, theirs, short)}
            runs.append(run)
    return {"runs": runs}


def _f(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _label(run: dict) -> str:
    """The candidate, its patch size and any --set beyond the candidate's (a screen's own knob)."""
    extra = "".join(f" `{o}`" for o in run.get("extra", ()) if not o.startswith("model.patch="))
    return run["candidate"] + extra + (f" (patch tokens of {run['patch']} bars)" if run.get("patch", 1) > 1 else "")


def render(summary: dict) -> str:
    lines = ["# Training recipes side by side", "",
             "Validation tails for every source; test bars of the controls only (never of BTC). Kept step: the "
             "best validated step; updates: those the kept weights had (fewer after a rewind); lr: the rate of "
             "their last update over the peak; noise: sd of the validation loss's change between evaluations. "
             f"Nesting: each N cut to {summary.get('short', SHORT)} bars minus the N={summary.get('short', SHORT)} "
             "model on the same test bars, over training runs (fold means over seeds, t over folds) "
             "(> 0: the long model lost short-range skill; fails = p < 0.05). Found: control cells whose "
             "direction hit rate reaches half-way from a coin flip to the oracle's (the published controls' bar).",
             "", "| candidate | source | N | cells | val loss at kept step | kept step | updates | lr / peak | noise "
             "| test log-loss | found | nesting (log-loss) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        for n, row in run["per_n"].items():
            check = (run.get("nesting") or {}).get(n, {}).get("log_loss")
            found = "-" if row.get("found") is None else f"{row['found']} of {row['cells']}"
            nest = "-" if check is None else (f"{_f(check['mean'], '+.5f')} (p {_f(check['p'], '.3g')}, "
                                              f"{check['runs']} runs, {check['folds']} folds){' FAILS' if check['fails'] else ''}")
            label = _label(run)
            lines.append(f"| {label} | {run['source']}{'' if run['complete'] else ' (unfinished)'} | {n} "
                         f"| {row['cells']} | {_f(row['best_val_loss'], '.5f')} | {_f(row['best_step'], '.0f')} "
                         f"| {_f(row['kept_updates'], '.0f')} | {_f(row['kept_lr_ratio'], '.0%')} "
                         f"| {_f(row['val_noise'], '.5f')} | {_f(row.get('test_log_loss'), '.5f')} "
                         f"| {found} | {nest} |")
    stops = [(run, n, row["stopping"]) for run in summary["runs"] for n, row in run["per_n"].items() if row.get("stopping")]
    if stops:
        lines += ["", "## Found against stopped, and validated restarts", "",
                  "Stop step: where the stopping rule ended the cell (validated stopping: patience evaluations "
                  "without improvement) or the step limit; whether a miss is the stopping rule's doing is tested "
                  "by the same runs with `train.patience=0` (never stop early). Best of k: of k seeds of one fold, "
                  "the cell with the lowest validation loss is kept; over every k-subset of each fold's seeds "
                  "(subsets of one fold share seeds, so they are not independent runs). Finder's validation loss lower: "
                  "of the pairs of one fold's cells in which one found the effect and the other did not. As "
                  "train.restarts=k: seeds ks to ks+k-1 of a fold read as the k restarts of one cell "
                  "(`tsflash.engine.restart_seeds`), complete groups only: no seed shared.", "",
                  "| candidate | source | N | found | their stop steps | not found | their stop steps "
                  "| not found, stopped before the limit | found, best of k seeds by validation "
                  "| found, as train.restarts=k (independent cells) | finder's validation loss lower (within-fold pairs) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for run, n, st in stops:
            span = lambda r: "-" if r is None else (f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}")  # noqa: E731
            lines.append(f"| {_label(run)} | {run['source']} | {n} | {st['found']} | {span(st['found_stop'])} "
                         f"| {st['missed']} | {span(st['missed_stop'])} | {st['missed_early']} of {st['missed']} "
                         f"(limit {st['max_steps']}) | "
                         + ("; ".join(f"k={b['k']}: {b['found']} of {b['of']}" for b in st.get("best_of", ())) or "-")
                         + (" | " + ("; ".join(f"k={r['k']}: {r['found']} of {r['of']}" for r in st.get("restarts", ()))
                                          or "-"))
                         + (f" | {v['finder_lower']} of {v['pairs']} |" if (v := st.get("validation")) and v["pairs"]
                            else " | - |"))
    rules = [(run, r) for run in summary["runs"] for r in run.get("as_restarts", ())]
    if rules:
        lines += ["", "## Validated restarts as the rule: every N read as train.restarts=k", "",
                  "Each N's cells grouped as `train.restarts=k` would train them (seeds ks to ks+k-1 of a fold, "
                  "complete groups), the lowest validation loss of each group kept, the same rule at every N; "
                  "the kept cells' test log-loss, found and nesting check (over the kept cells as training runs). "
                  "Parts: total, flat-vs-move.", "",
                  "Screened at S: the restart with the lowest validation loss by step S kept "
                  "(`train.restart_screen=S`).", "",
                  "| candidate | source | k | screened at | kept cells per N | test log-loss per N | found at the longest N "
                  "| nesting (log-loss) | nesting (flat-vs-move) |", "|---|---|---|---|---|---|---|---|---|"]
        for run, r in rules:
            lines.append(f"| {_label(run)} | {run['source']} | {r['k']} | {r.get('screen') or '-'} | "
                         + ", ".join(f"{n}: {c}" for n, c in r["cells"].items()) + " | "
                         + ", ".join(f"{n}: {_f(v, '.5f')}" for n, v in r["test_log_loss"].items())
                         + f" | {'-' if r['found'] is None else str(r['found']) + ' of ' + str(r['cells'][max(r['cells'])])}"
                         f" | {nesting_cell(r['nesting'], 'log_loss')} | {nesting_cell(r['nesting'], 'move_log_loss')} |")
    screens = [(run, n, x) for run, n, st in stops for x in st.get("screened", ())]
    if screens:
        lines += ["", "## Screened restarts: keep the best at a step, continue only it", "",
                  "Simulated from the full runs: k restarts trained to the step, the one with the lowest validation "
                  "loss shown by then kept and continued (as its full run went on); found over every k-subset of "
                  "a fold's seeds and over the independent groups of train.restarts=k; cost: steps trained (k "
                  "restarts to the step or their stop, then the kept one to its stop) over one run's. At the step "
                  "limit this is the validated restart above.", "",
                  "| candidate | source | N | k | screened at step | found, every k-subset | found, independent groups "
                  "| steps trained over one run's |", "|---|---|---|---|---|---|---|---|"]
        for run, n, x in screens:
            lines.append(f"| {_label(run)} | {run['source']} | {n} | {x['k']} | {x['step']} | {x['found']} of {x['of']} "
                         f"({x['found'] / x['of']:.0%}) | {x['groups_found']} of {x['groups']} | {x['cost']:.2f}x |")
    choices = [(run, n, st["choice"]) for run, n, st in stops if st.get("choice") and len(st.get("best_of", ())) >= 3]
    if choices:
        need, cells = FOUND_BAR
        lines += ["", "## Restarts k: the cheapest that clears the bar", "",
                  f"Deliverable 5's bar: found in at least {need} of {cells} runs at the longest N. Each option's rate "
                  "is its found rate over every k-subset of a fold's seeds (above), its chance of clearing the bar "
                  f"the binomial's at that rate over {cells} independent runs, its cost in one run's steps; chosen: "
                  f"the cheapest with a chance of at least {CHOICE_PROBABILITY:g} (read where the fold has at least "
                  f"four seeds). Listed: unscreened and screened at {', '.join(map(str, RULE_SCREENS[1:]))} (every screen "
                  "in summary.json).", "",
                  "| candidate | source | N | k | screened at | found rate | chance of the bar | cost | chosen |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run, n, c in choices:
            for o in (o for o in c["options"] if o["screen"] in RULE_SCREENS or o is c["chosen"]):
                lines.append(f"| {_label(run)} | {run['source']} | {n} | {o['k']} | {o['screen'] or '-'} | "
                             f"{o['rate']:.3f} | {o['p_bar']:.3f} | {o['cost']:.2f}x | {'**yes**' if o is c['chosen'] else ''} |")
    steps = [(run, x) for run in summary["runs"] if (x := run.get("skill_and_step"))]
    if steps:
        lines += ["", "## Short-range skill and the kept step", "",
                  "At the longest N, each run's nesting value (its model cut to the short N minus the short-N "
                  "model, test log-loss; > 0: short-range skill lost) against the step its kept weights are from: "
                  "Spearman's rho within folds (each fold's means removed), its p by permuting the kept steps "
                  "among the runs of each fold "
                  f"({PERMUTATIONS:,} permutations, two-sided), and the mean value of the runs kept before the "
                  "median step and at or after it.", "",
                  "| candidate | source | N | runs | rho within folds (nesting value, kept step) | p | median kept step "
                  "| nesting, kept earlier | nesting, kept later |", "|---|---|---|---|---|---|---|---|---|"]
        for run, x in steps:
            lines.append(f"| {_label(run)} | {run['source']} | {x['n']} | {x['runs']} | {_f(x['rho'], '+.2f')} "
                         f"| {_f(x['p'], '.3g')} | {x['median_step']:g} | {_f(x['early'], '+.5f')} "
                         f"| {_f(x['late'], '+.5f')} |")
    effects = [(run, e) for run in summary["runs"] if (e := run.get("seed_effects"))]
    if effects:
        lines += ["", "## Seeds as initial weights", "",
                  "A run's initial weights are its seed's alone, the same in every fold (and at every N). Found per "
                  "seed: of the folds at the longest N; its spread over seeds against chance by permuting the "
                  f"found/missed outcomes among the seeds within each fold ({PERMUTATIONS:,} permutations). The "
                  "longest N minus the short N (test log-loss) and the nesting check, by the fold t (the run-level "
                  "test: generalises over folds for these seeds) and by the crossed test "
                  "(`tsflash.stats.runs.crossed_seed_test`: over folds and initial weights; its 95 % interval).", "",
                  "| candidate | source | N | seeds | found per seed | spread over seeds, p | longest N minus short, "
                  "fold t p | crossed p [95 %] | nesting, fold t p | crossed p |", "|---|---|---|---|---|---|---|---|---|---|"]
        for run, e in effects:
            found = "-" if "found" not in e else " ".join(map(str, e["found"])) + f" (of {e['folds']})"
            spread = "-" if "spread_p" not in e else _f(e["spread_p"], ".3g")
            d, n = e["difference"], e.get("nesting")
            lines.append(f"| {_label(run)} | {run['source']} | {e['n']} | {','.join(map(str, e['seeds']))} | {found} "
                         f"| {spread} | {_f(d['estimate'], '+.5f')}, p {_f(d['fold_t_p'], '.3g')} "
                         f"| {_f(d['crossed_p'], '.3g')} [{_f(d['crossed_ci'][0], '+.5f')}, {_f(d['crossed_ci'][1], '+.5f')}] "
                         + ("| - | - |" if n is None else
                            f"| {_f(n['estimate'], '+.5f')}, p {_f(n['fold_t_p'], '.3g')} | {_f(n['crossed_p'], '.3g')} |"))
        sets = [(run, e) for run, e in effects if e.get("sets")]
        if sets:
            lines += ["", f"By seed set ({SEED_SET} seeds, as one published run trains): the longest N minus the short N "
                      "per set, and A/A at the longest N between sets (disjoint seeds of one configuration: the true "
                      "difference is 0), test log-loss, by the fold t and the crossed test; then the nesting check per "
                      "set and its A/A between sets (the differences of the same check's values: how far one "
                      "recipe's check moves with the seed set alone).", "",
                      "| candidate | source | N | comparison | difference | fold t p | crossed p |", "|---|---|---|---|---|---|---|"]
            for run, e in sets:
                def seeds_of(g):
                    return ",".join(map(str, g))
                for x in e["sets"]:
                    lines.append(f"| {_label(run)} | {run['source']} | {e['n']} | seeds {seeds_of(x['seeds'])}: N={e['n']} "
                                 f"minus {summary.get('short', SHORT)} | {_f(x['estimate'], '+.5f')} "
                                 f"| {_f(x['fold_t_p'], '.3g')} | {_f(x['crossed_p'], '.3g')} |")
                for x in e["aa"]:
                    g, h = x["seeds"]
                    lines.append(f"| {_label(run)} | {run['source']} | {e['n']} | A/A: seeds {seeds_of(h)} minus "
                                 f"{seeds_of(g)} | {_f(x['estimate'], '+.5f')} | {_f(x['fold_t_p'], '.3g')} "
                                 f"| {_f(x['crossed_p'], '.3g')} |")
                short_n = summary.get("short", SHORT)
                for x in e["sets"]:
                    if (c := x.get("nesting")) is not None:
                        lines.append(f"| {_label(run)} | {run['source']} | {e['n']} | seeds {seeds_of(x['seeds'])}: "
                                     f"nesting (N={e['n']} cut to {short_n} minus {short_n}) | {_f(c['estimate'], '+.5f')} "
                                     f"| {_f(c['fold_t_p'], '.3g')} | {_f(c['crossed_p'], '.3g')} |")
                for x in e.get("aa_nesting", ()):
                    g, h = x["seeds"]
                    lines.append(f"| {_label(run)} | {run['source']} | {e['n']} | A/A of the nesting check: seeds "
                                 f"{seeds_of(h)} minus {seeds_of(g)} | {_f(x['estimate'], '+.5f')} "
                                 f"| {_f(x['fold_t_p'], '.3g')} | {_f(x['crossed_p'], '.3g')} |")
    gaps = [(run, n, g) for run in summary["runs"] for n, g in (run.get("validation_gap") or {}).items()]
    if gaps:
        short_n = summary.get("short", SHORT)
        lines += ["", f"## BTC's validation tails: each N against N={short_n}", "",
                  f"Validation loss at the kept step, each N minus the N={short_n} model of the same fold and seed "
                  "(> 0: the long model validates worse), over training runs (fold means over seeds, t over folds). "
                  "The validation tails are the only BTC bars the summary reads; a rule with validated restarts "
                  "keeps the lowest of its restarts at every N alike.", "",
                  f"| candidate | N | runs, folds | N minus {short_n} | 95 % interval | p |", "|---|---|---|---|---|---|"]
        for run, n, g in gaps:
            lines.append(f"| {_label(run)} | {n} | {g['runs']}, {g['folds']} | {_f(g['mean'], '+.5f')} "
                         f"| [{_f(g['ci'][0], '+.5f')}, {_f(g['ci'][1], '+.5f')}] | {_f(g['p'], '.3g')} |")
    for run in summary["runs"]:
        if (vs := run.get("versus")) and vs.get("pairs"):
            lines += ["", f"Paired with {', '.join(f'`{f}`' for f in vs['folders'])} at N={vs['n']} (the same fold "
                      f"and seed under the other rule): the same found/missed outcome in {vs['same']} of "
                      f"{vs['pairs']} pairs ({_label(run)} found {vs['found_here']}, the other {vs['found_there']})."]
        if vs and (x := vs.get("nesting")):
            lines += ["", f"Nesting check paired with {', '.join(f'`{f}`' for f in vs['folders'])} ({_label(run)}, "
                      f"{run['source']}): N={x['n']} cut to {summary.get('short', SHORT)} bars minus N="
                      f"{summary.get('short', SHORT)}, this rule minus the other, {_f(x['estimate'], '+.5f')} nats per "
                      f"bar (p {_f(x['p'], '.3g')}, {x['runs']} runs paired by fold and seed; < 0: this rule keeps "
                      "more short-range skill)."]
    lines += ["", "Candidates: " + "; ".join(f"`{r}` = " + (" ".join(f"`--set {o}`" for o in CANDIDATES[r]) or
                                                             "the default protocol") for r in CANDIDATES), ""]
    return "\n".join(lines)


def write_summary(out: Path, candidates=tuple(CANDIDATES), sources=DEFAULT_SOURCES, baselines: dict[str, Path] | None = None,
                  short: int = SHORT, pools: tuple[Path, ...] = (), versus: tuple[Path, ...] = ()) -> dict:
    summary = summarize(out, candidates, sources, baselines, short, pools, versus) | {"short": short}
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", render(summary))
    return summary


# ---------------------------------------------------------------------------------------------
# The cost plan


def cost_plan(candidates=tuple(CANDIDATES), n_sources: int = len(DEFAULT_SOURCES), lengths=(512, 32768), folds: int = 5,
              seeds: int = 3) -> dict[str, float]:
    """Seconds of one H200 per candidate over `n_sources` sweeps, from the calibrated H200 cells
    (means of CALIBRATION's rows per N) at the default protocol's size."""
    from tsflash.sweep.progress import CALIBRATION, CALIBRATION_OTHER

    def mean_of(rows) -> float:
        rows = list(rows)
        if not rows:
            raise SystemExit("no calibrated H200 cells for this length: lengths must be among 512, 4096, 32768")
        return sum(r.seconds for r in rows) / len(rows)

    cell = {n: mean_of(r for r in CALIBRATION if r.device == "cuda" and r.preset == "full" and not r.overrides
                       and r.n == n)  # the default protocol's rows
            for n in lengths}
    other = {k: mean_of(r for r in CALIBRATION_OTHER if r.device == "cuda" and r.kind == k)
             for k in ("baseline", "report")}
    models = folds * seeds * sum(cell.values())
    fixed = folds * other["baseline"] + other["report"]
    def restarts(name: str) -> int:
        return int(parse_overrides(list(CANDIDATES[name])).get("train", {}).get("restarts", 1))

    return {name: n_sources * (models * restarts(name) * (1 + WSD_EXTRA * any("wsd" in o for o in CANDIDATES[name]))
                               + fixed)
            for name in candidates}


# ---------------------------------------------------------------------------------------------
# Running the sweeps


def data_arg(source: str, args) -> str:
    return args.btc_data if source == "btc" else CONTROLS[source].format(seed=args.seed)


def sweep_argv(name: str, source: str, args, budget: float | None) -> list[str]:
    argv = ["sweep", "--data", data_arg(source, args), "--lengths", args.lengths, "--out", str(args.out / name / source),
            "--device", args.device, "--preset", args.preset, "--config", args.config, "--no-precision"]
    for item in (*PROTOCOL, *args.overrides, *CANDIDATES[name]):
        argv += ["--set", item]
    if budget is not None:
        argv += ["--time-budget", f"{budget:.0f}"]
    if source == "btc":  # the choice reads BTC's validation tails only: its test scores stay out of the log
        argv.append("--validation-only")
    return argv


def _names(text: str, known) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or any(n not in known for n in names):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(known)}, got {text!r}")
    return names


def _baseline(text: str) -> tuple[str, Path]:
    source, sep, folder = text.partition("=")
    if not sep or source not in SOURCES or not folder:
        raise argparse.ArgumentTypeError(f"--baseline is SOURCE=FOLDER with SOURCE one of {', '.join(SOURCES)}, "
                                         f"got {text!r}")
    if not RunFolder(Path(folder)).exists():
        raise argparse.ArgumentTypeError(f"--baseline {source}: {folder} is not a run folder (no run.json)")
    return source, Path(folder)


def run_all(args) -> bool:
    """Every (source, candidate) sweep not complete, within the time budget; True when all are."""
    t0 = time.monotonic()
    for source in args.sources:
        for name in args.candidates:
            folder = RunFolder(run_root(args.out, name, source, args.baselines))
            if (folder.exists() and folder.is_complete()) or folder.root in args.baselines.values():  # read, never run
                continue
            left = None if args.time_budget is None else args.time_budget - (time.monotonic() - t0)
            if left is not None and left <= 0:
                log.info("time budget used before %s on %s: run this command again to continue", name, source)
                return False
            if cli.main(sweep_argv(name, source, args, left)) != 0:
                raise SystemExit(f"the sweep of {name} on {source} failed")
    return all(RunFolder(args.out / n / s).is_complete() for n in args.candidates for s in args.sources
               if run_root(args.out, n, s, args.baselines) not in args.baselines.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/recipes"), help="folder of the run folders and the summary")
    ap.add_argument("--candidates", type=lambda t: _names(t, CANDIDATES), default=list(CANDIDATES),
                    help=f"comma-separated, from {', '.join(CANDIDATES)} (default: all)")
    ap.add_argument("--sources", type=lambda t: _names(t, SOURCES), default=list(DEFAULT_SOURCES),
                    help=f"comma-separated, from {', '.join(SOURCES)} (default: {','.join(DEFAULT_SOURCES)})")
    ap.add_argument("--btc-data", default="data", help="the bar store of the btc source (default: data)")
    ap.add_argument("--baseline", dest="baselines", type=_baseline, action="append", default=[],
                    metavar="SOURCE=FOLDER",
                    help="a finished run of the default protocol on SOURCE, read as the baseline's instead of "
                         "running it (BTC: validation view only), e.g. btc=reports/h200-btcusdt-1m-second-edition "
                         "or long-memory=reports/controls/protocol/long-memory; repeatable")
    ap.add_argument("--pool", type=Path, action="append", default=[], metavar="OUT2",
                    help="another recipes output folder whose runs of the same candidate and source differ only "
                         "in their seeds: pooled with --out's in the summary; repeatable")
    ap.add_argument("--versus", type=Path, action="append", default=[], metavar="OUT2",
                    help="recipes output folders of the same candidates under another rule (e.g. another "
                         "stopping rule): their cells are paired with --out's by fold and seed in the summary; "
                         "repeatable (pooled)")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS, help=f"context lengths (default {DEFAULT_LENGTHS})")
    ap.add_argument("--short", type=int, default=SHORT, help=f"the nesting check's short N (default {SHORT})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic bars (default 0)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--preset", default="full", help="sweep preset (default full: the config as written)")
    ap.add_argument("--config", default="default", help="sweep config, a preset name or .toml path")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="override for every candidate")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds after which no new sweep or trial starts")
    ap.add_argument("--summary-only", action="store_true", help="only (re)write the summary of the runs in --out")
    ap.add_argument("--plan", action="store_true", help="print the GPU cost plan and exit")
    args = ap.parse_args(argv)
    if args.plan and args.overrides:
        # the plan prices the candidates' own settings; restarts or steps set here would be left out
        ap.error(f"--plan prices the candidates' own settings, not --set {' '.join(args.overrides)}: for a plan "
                 "with them use tsflash preregister --lengths ... --set ... (its cost table applies every override)")
    args.baselines = dict(args.baselines)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.plan:
        lengths = tuple(int(n) for n in args.lengths.split(","))
        plan = cost_plan(args.candidates, len(args.sources), lengths)
        print(json.dumps({"seconds": plan, "total_s": sum(plan.values())}, indent=1))
        return 0
    done = args.summary_only or run_all(args)
    if done:
        write_summary(args.out, args.candidates, args.sources, args.baselines, args.short, tuple(args.pool),
                      tuple(args.versus))
        log.info("summary: %s", args.out / "summary.md")
    else:
        log.info("unfinished: run the same command again to continue")
    print(json.dumps({"complete": bool(done), "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
