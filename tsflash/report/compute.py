"""The report's numbers, computed once from a `RunData`: fold table, per-configuration summaries,
the run's selection (through `tsflash.selection.select_run`, the one place the DSR and PBO of a
run are computed) and the baselines' daily statistics. No formatting here."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tsflash import selection as sel
from tsflash.report.rundata import RunData
from tsflash.runfolder import baseline_series_name

PERIODS_PER_YEAR = 365.0  # daily returns; BTC trades every day
METRICS = (
    ("accuracy", "accuracy", "higher"),
    ("balanced_accuracy", "balanced accuracy", "higher"),
    ("log_loss", "log-loss (nats)", "lower"),
    ("mcc", "MCC", "higher"),
)
_SCORES = ("accuracy", "balanced_accuracy", "log_loss", "macro_f1", "mcc", "mean_net_return", "turnover")
_COST_MEANS = ("epoch_seconds", "train_seconds", "eval_seconds", "tokens_per_s", "tflops", "peak_memory_bytes")
_COST_FIRST = ("backend", "backend_observed", "n_params", "batch_size", "steps", "tokens_per_step", "device")
_DATES = ("train_start", "train_end", "test_start", "test_end")


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def fold_table(rd: RunData) -> list[dict]:
    """One row per (series, fold): metrics averaged over seeds, cost summed where additive."""
    rows = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c)
    for (key, fold), cs in sorted(groups.items(), key=lambda kv: (kv[1][0]["n"], kv[0])):
        row = {"series": key, "kind": "model", "n": cs[0]["n"], "fold": fold, "n_seeds": len(cs)}
        row |= {m: float(np.mean([_nan(c["metrics"].get(m)) for c in cs])) for m in _SCORES}
        row["n_scored"] = int(cs[0]["metrics"].get("n_scored", 0))
        row |= {m: float(np.mean([_nan(c["cost"].get(m)) for c in cs])) for m in _COST_MEANS}
        row |= {m: cs[0]["cost"].get(m) for m in _COST_FIRST}
        row["flat_threshold"] = cs[0]["flat_threshold"]
        row |= {k: cs[0][k] for k in _DATES}
        rows.append(row)
    for c in sorted(rd.baselines, key=lambda c: (c["name"], c["fold"])):
        row = {"series": baseline_series_name(c["name"]), "kind": "baseline", "n": None, "fold": c["fold"],
               "n_seeds": 1}
        row |= {m: _nan(c["metrics"].get(m)) for m in _SCORES}
        row["n_scored"] = int(c["metrics"].get("n_scored", 0))
        row |= {k: c[k] for k in _DATES}
        row["flat_threshold"] = c["flat_threshold"]
        rows.append(row)
    return rows


def summarize(rows: list[dict], series: str) -> dict:
    """Mean and fold-to-fold standard deviation (ddof=1; 0 with one fold) of each metric."""
    rs = [r for r in rows if r["series"] == series]
    out = {"series": series, "n": rs[0]["n"], "n_folds": len(rs)}
    for m, _, _ in METRICS:
        v = np.array([r[m] for r in rs], dtype=float)
        out[m] = float(np.mean(v))
        out[f"{m}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    if rs[0]["kind"] == "model":
        for m in ("epoch_seconds", "train_seconds", "tokens_per_s", "tflops", "peak_memory_bytes"):
            out[m] = float(np.nanmean([r[m] for r in rs])) if any(np.isfinite(r[m]) for r in rs) else float("nan")
        for m in _COST_FIRST:
            out[m] = rs[0][m]
    return out


def run_selection(rd: RunData) -> sel.RunSelection:
    """The candidates (trials with daily series) against the study's ledger, through the gates."""
    cfg = rd.config["selection"]
    series = {k: (rd.series[k].days, rd.series[k].net) for k in rd.trial_keys}
    return sel.select_run(series, rd.ledger.get("trials", []), min_dsr=cfg["min_dsr"], max_pbo=cfg["max_pbo"],
                          n_blocks=int(cfg.get("cscv_blocks", 16)), periods_per_year=PERIODS_PER_YEAR)


def _sharpe_or_nan(x) -> float:
    try:
        return float(sel.sharpe(np.asarray(x, dtype=float)))
    except sel.SelectionInputError:
        return math.nan


def series_stats(rd: RunData, name: str) -> dict:
    """Daily statistics of one saved series (a baseline's, or a candidate's before fees)."""
    s = rd.series[name]
    net = np.asarray(s.net, dtype=float)
    sr = _sharpe_or_nan(net)
    return {"n_days": len(net), "mean_daily_net": float(np.mean(net)), "total_net": float(np.prod(1 + net) - 1),
            "sharpe": sr, "sharpe_annual": sr * math.sqrt(PERIODS_PER_YEAR), "gross_sharpe": _sharpe_or_nan(s.gross)}


@dataclass
class Numbers:
    """Every number the report shows, computed once."""

    rows: list[dict]  # fold table
    per_n: list[dict]  # one summary per trial key, in order of N
    baselines: dict[str, dict]  # "baseline-<name>" -> summary
    primary: list[dict]  # the default configuration per N (the plots against N)
    selection: sel.RunSelection
    series_stats: dict[str, dict]  # candidates' and baselines' daily statistics (gross Sharpe, ...)

    def candidate_row(self, key: str | None) -> dict | None:
        return next((r for r in self.selection.candidates if r["key"] == key), None)


def compute(rd: RunData) -> Numbers:
    rows = fold_table(rd)
    keys = rd.trial_keys
    per_n = [summarize(rows, k) for k in keys]
    baselines = {baseline_series_name(b): summarize(rows, baseline_series_name(b)) for b in rd.baseline_names}
    # The primary configuration per N is the enqueued default (slot "n<N>/0"); trials searched with
    # --trials appear as extra table rows, not in the plots against N.
    default_keys = {t.get("key") for t in rd.ledger.get("trials", []) if str(t.get("slot", "")).endswith("/0")}
    primary = [s for s in per_n if s["series"] in default_keys] or [s for s in per_n if "-" not in s["series"]]
    stats = {k: series_stats(rd, k) for k in [*keys, *baselines] if k in rd.series}
    return Numbers(rows, per_n, baselines, primary, run_selection(rd), stats)
