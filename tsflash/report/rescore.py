"""Re-scoring a finished run at other scoring settings (fee, trading rule) without retraining.

Fees and the trading rule are applied at scoring time: every cell saved its per-bar positions
and gross returns under the one-bar rule, and its probabilities and next-bar returns
(cells/**/*.npz, the engine's FoldResult arrays), so a new fee or rule gives new net returns by
`tsflash.scoring.daily` (the same functions the sweep scores with: the rule by `tsflash.scoring.strategy`,
net returns by `apply_fees`, seeds as an equal-weight portfolio, folds compounded to daily
series, the trial's value), then new trial values for the DSR's ledger and a new verdict. Only
keys that change the scoring, not the trained models, may be overridden (`RESCORE_KEYS`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import numpy as np

from tsflash.errors import UserError
from tsflash.report.rundata import RunData, Series
from tsflash.runfolder import baseline_series_name
from tsflash.scoring.daily import BarReturns, cell_scored, daily_series, objective_value, seed_portfolio
from tsflash.scoring.strategy import Strategy, check_strategy
from tsflash.stats.runs import SEED_TESTS

# Overridable at report time, with why: each changes only how saved predictions are scored.
RESCORE_KEYS = {
    "eval.fee_bps": "the fee per unit of turnover, charged on the saved positions",
    "eval.strategy": "the trading rule built from the saved probabilities (one-bar or horizon)",
    "eval.entry_threshold": "the horizon rule's entry threshold (-1: fitted on each cell's validation tail)",
    "eval.seed_inference": "how question 1 and the nesting check treat seeds (fold or crossed): the same losses, "
    "another test",
}
# Keys that change the tests only: no cell is re-scored (the per-bar cell files are not needed).
INFERENCE_KEYS = ("eval.seed_inference",)


def rescores_cells(overrides: dict) -> bool:
    """Do these (flat) overrides change how the saved predictions are scored, not only the tests?"""
    return any(k not in INFERENCE_KEYS for k in overrides)


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
    for key in flat:
        if key not in RESCORE_KEYS:
            raise UserError(
                f"report --set {key}: only scoring keys can change without retraining "
                f"({', '.join(sorted(RESCORE_KEYS))}); {key} changes the trained models: run `tsflash sweep` with it"
            )
    fee = flat.get("eval.fee_bps", 0)
    if isinstance(fee, bool) or not isinstance(fee, (int, float)) or not math.isfinite(fee) or fee < 0:
        raise UserError(f"report --set eval.fee_bps: must be a number >= 0 (basis points), got {fee!r}")
    try:
        check_strategy(flat.get("eval.strategy", "horizon"), flat.get("eval.entry_threshold", -1.0))
    except UserError as exc:
        raise UserError(f"report --set {exc}") from None
    if (how := flat.get("eval.seed_inference", "fold")) not in SEED_TESTS:
        raise UserError(f"report --set eval.seed_inference: must be one of {', '.join(SEED_TESTS)}, got {how!r}")
    return flat


def default_out_dir(run_dir: Path, overrides: dict) -> Path:
    """<run>/rescored/<setting> (one folder per setting; never the run's own report), e.g.
    fee-2bps, or fee-2bps-horizon-t0.4 with a rule and a threshold."""
    flat = flat_overrides(overrides)
    parts = [f"fee-{float(flat['eval.fee_bps']):g}bps"] if "eval.fee_bps" in flat else []
    parts += [flat["eval.strategy"]] if "eval.strategy" in flat else []
    parts += [f"t{float(flat['eval.entry_threshold']):g}"] if "eval.entry_threshold" in flat else []
    parts += [f"seeds-{flat['eval.seed_inference']}"] if "eval.seed_inference" in flat else []
    return Path(run_dir) / "rescored" / "-".join(parts)


def _rescored_cell(
    rd: RunData, summary: dict, stem: Path, fee_bps: float, strategy: Strategy
) -> tuple[dict, BarReturns]:
    """(the summary with its net-return mean and rule record re-scored, its per-bar returns)."""
    try:
        bars, record = cell_scored(stem, fee_bps, strategy)
    except UserError as exc:
        raise UserError(f"report --set: {exc} (run folder {rd.run_dir})") from None
    metrics = dict(summary["metrics"], mean_net_return=float(np.mean(bars.net)) if len(bars.net) else math.nan)
    return summary | {"metrics": metrics, "strategy": record, "fee_bps": fee_bps}, bars


def _as_tuple(daily: dict) -> tuple:
    return daily["days"], daily["net"], daily["gross"]


def _model_series(rd: RunData, fee_bps: float, strategy: Strategy) -> tuple[list[dict], dict[str, tuple]]:
    """Re-scored model cells and each trial's daily (days, net, gross); several seeds are summed
    in the order of the config's seeds, as the sweep sums them."""
    seeds = list(rd.config["train"]["seeds"])
    cells: list[dict] = []
    parts: dict[str, list] = {}
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c)
    for (key, fold), cs in sorted(groups.items()):
        cs = sorted(cs, key=lambda c: seeds.index(c["seed"]) if c["seed"] in seeds else len(seeds))
        paths = []
        for c in cs:
            cell, path = _rescored_cell(rd, c, rd.folder.cell_stem(key, fold, c["seed"]), fee_bps, strategy)
            cells.append(cell)
            paths.append(path)
        parts.setdefault(key, []).append(seed_portfolio(paths))
    return cells, {key: _as_tuple(daily_series(p)) for key, p in parts.items()}


def _baseline_series(rd: RunData, fee_bps: float, strategy: Strategy) -> tuple[list[dict], dict[str, tuple]]:
    baselines: list[dict] = []
    parts: dict[str, list] = {}
    for b in rd.baselines:
        cell, path = _rescored_cell(rd, b, rd.folder.baseline_stem(b["fold"], b["name"]), fee_bps, strategy)
        baselines.append(cell)
        parts.setdefault(baseline_series_name(b["name"]), []).append(path)
    return baselines, {name: _as_tuple(daily_series(p)) for name, p in parts.items()}


def rescore(rd: RunData, overrides: dict) -> RunData:
    """A copy of `rd` scored with `overrides` (see RESCORE_KEYS): cells, daily series, the
    ledger's trial values and the config as if the sweep had run with them."""
    flat = check_overrides(overrides)
    config = copy.deepcopy(rd.config)
    for key in INFERENCE_KEYS:
        if key in flat:
            config["eval"][key.split(".", 1)[1]] = flat[key]
    if not rescores_cells(flat):  # the tests only: the saved scoring stands
        return dataclasses.replace(
            rd, config=config, rescored_from={"overrides": flat, "run_fee_bps": config["eval"]["fee_bps"]}
        )
    run_fee = config["eval"]["fee_bps"]
    fee = float(flat.get("eval.fee_bps", run_fee))
    config["eval"]["fee_bps"] = fee
    strategy = Strategy.from_config(config)  # the run's rule (one-bar for runs saved before the choice)
    config["eval"]["strategy"] = flat.get("eval.strategy", strategy.kind)
    config["eval"]["entry_threshold"] = float(flat.get("eval.entry_threshold", strategy.threshold))
    strategy = Strategy.from_config(config)
    cells, model = _model_series(rd, fee, strategy)
    baselines, base = _baseline_series(rd, fee, strategy)
    series = {name: Series(name, d, n, g) for name, (d, n, g) in (model | base).items()}
    values = {key: objective_value(series[key].net) for key in model}
    trials = []
    for t in rd.ledger.get("trials", []):
        if t.get("state") == "COMPLETE" and t.get("key") in values:
            t = t | {"value": values[t["key"]]}
        trials.append(t)
    return dataclasses.replace(
        rd,
        config=config,
        cells=cells,
        baselines=baselines,
        series=series,
        ledger=rd.ledger | {"trials": trials},
        rescored_from={"overrides": flat, "run_fee_bps": run_fee},
    )
