"""Re-scoring a finished run at other scoring settings (fees) without retraining.

Fees are applied at scoring time: every cell saved its per-bar positions and gross returns
(cells/**/*.npz, the engine's FoldResult arrays), so a new fee gives new net returns by
`tsflash.metrics.apply_fees`, then new daily series (seeds averaged as the sweep does, folds
compounded by `tsflash.selection.daily_series`), new trial values for the DSR's ledger
(`tsflash.selection.trial_value`) and a new verdict. Only keys that change the scoring, not the
trained models, may be overridden (`RESCORE_KEYS`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import numpy as np

from tsflash.errors import UserError
from tsflash.metrics import apply_fees, seed_average
from tsflash.report.rundata import RunData, Series
from tsflash.runfolder import BASELINE_DIR, baseline_series_name
from tsflash.selection import daily_series, trial_value

# Overridable at report time, with why: each changes only how saved predictions are scored.
RESCORE_KEYS = {"eval.fee_bps": "the fee per unit of turnover, charged on the saved positions"}


def flat_overrides(overrides: dict) -> dict:
    """{"eval": {"fee_bps": 2}} or {"eval.fee_bps": 2} -> {"eval.fee_bps": 2}."""
    out = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in flat_overrides(value).items()})
        else:
            out[key] = value
    return out


def check_overrides(overrides: dict) -> dict:
    """The flat overrides, or UserError naming a key that needs retraining or a bad value."""
    flat = flat_overrides(overrides)
    for key, value in flat.items():
        if key not in RESCORE_KEYS:
            raise UserError(
                f"report --set {key}: only scoring keys can change without retraining "
                f"({', '.join(sorted(RESCORE_KEYS))}); {key} changes the trained models: run `tsflash sweep` with it"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UserError(f"report --set {key}: must be a number >= 0 (basis points), got {value!r}")
    return flat


def default_out_dir(run_dir: Path, overrides: dict) -> Path:
    """<run>/rescored/fee-<x>bps (one folder per setting; never the run's own report)."""
    flat = flat_overrides(overrides)
    return Path(run_dir) / "rescored" / f"fee-{float(flat['eval.fee_bps']):g}bps"


def _per_bar(rd: RunData, stem: Path) -> dict:
    """test_time, position and gross_returns of one saved cell (the FoldResult arrays)."""
    npz = stem.with_name(stem.name + ".npz")
    if not npz.exists():
        raise UserError(
            f"report --set: re-scoring needs the per-bar cell files (cells/**/*.npz); "
            f"{rd.folder.relative(npz)} is missing in {rd.run_dir} (a published run does not commit them): "
            "rerun the sweep to make them"
        )
    with np.load(npz) as z:
        return {k: z[k] for k in ("test_time", "position", "gross_returns")}


def _rescored_cell(rd: RunData, summary: dict, stem: Path, fee_bps: float) -> tuple[dict, tuple]:
    """(the summary with its net-return mean re-scored, per-bar (time, net, gross))."""
    bars = _per_bar(rd, stem)
    net = apply_fees(bars["position"], bars["gross_returns"], fee_bps)
    metrics = dict(summary["metrics"], mean_net_return=float(np.mean(net)) if len(net) else math.nan)
    return summary | {"metrics": metrics}, (np.asarray(bars["test_time"], dtype=np.int64), net,
                                            np.asarray(bars["gross_returns"], dtype=np.float64))


def _model_series(rd: RunData, fee_bps: float) -> tuple[list[dict], dict[str, tuple]]:
    """Re-scored model cells and each trial's daily (days, net, gross).

    Several seeds are an equal-weight portfolio of the seeds' strategies, summed in the order of
    the config's seeds, as the sweep sums them, so the run's own fee reproduces its series exactly.
    """
    seeds = list(rd.config["train"]["seeds"])
    cells, parts = [], {}
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c)
    for (key, fold), cs in sorted(groups.items()):
        cs = sorted(cs, key=lambda c: seeds.index(c["seed"]) if c["seed"] in seeds else len(seeds))
        paths = []
        for c in cs:
            cell, path = _rescored_cell(rd, c, rd.folder.cell_stem(key, fold, c["seed"]), fee_bps)
            cells.append(cell)
            paths.append(path)
        parts.setdefault(key, []).append(seed_average(paths))
    return cells, {key: daily_series(p) for key, p in parts.items()}


def _baseline_series(rd: RunData, fee_bps: float) -> tuple[list[dict], dict[str, tuple]]:
    baselines, parts = [], {}
    for b in rd.baselines:
        stem = rd.folder.cells_dir / BASELINE_DIR / f"fold{b['fold']}-{b['name']}"
        cell, path = _rescored_cell(rd, b, stem, fee_bps)
        baselines.append(cell)
        parts.setdefault(baseline_series_name(b["name"]), []).append(path)
    return baselines, {name: daily_series(p) for name, p in parts.items()}


def rescore(rd: RunData, overrides: dict) -> RunData:
    """A copy of `rd` scored with `overrides` (see RESCORE_KEYS): cells, daily series, the
    ledger's trial values and the config as if the sweep had run with them."""
    flat = check_overrides(overrides)
    config = copy.deepcopy(rd.config)
    run_fee = config["eval"]["fee_bps"]
    fee = float(flat.get("eval.fee_bps", run_fee))
    config["eval"]["fee_bps"] = fee
    cells, model = _model_series(rd, fee)
    baselines, base = _baseline_series(rd, fee)
    series = {name: Series(name, d, n, g) for name, (d, n, g) in (model | base).items()}
    values = {key: trial_value(series[key].net) for key in model}
    trials = []
    for t in rd.ledger.get("trials", []):
        if t.get("state") == "COMPLETE" and t.get("key") in values:
            t = t | {"value": values[t["key"]]}
        trials.append(t)
    return dataclasses.replace(rd, config=config, cells=cells, baselines=baselines, series=series,
                               ledger=rd.ledger | {"trials": trials},
                               rescored_from={"overrides": flat, "run_fee_bps": run_fee})
