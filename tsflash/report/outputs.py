"""The report's machine-readable outputs: results.json (strict JSON: non-finite floats as null,
tsflash.atomic's NaN policy), fold_metrics.parquet, daily_returns.parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tsflash import atomic
from tsflash.report.compute import Numbers
from tsflash.report.diagnostics import DIAGNOSTICS
from tsflash.report.rundata import RunData
from tsflash.report.wording import label
from tsflash.runfolder import is_baseline
from tsflash.stats.sharpe import PERIODS_PER_YEAR

# results.json's name for each field of a `select_run` candidate row
_CANDIDATE_FIELDS = {
    "key": "key",
    "n_periods": "n_days",
    "mean": "mean_daily_net",
    "total": "total_net",
    "sharpe": "sharpe",
    "sharpe_annual": "sharpe_annual",
    "skew": "skew",
    "kurtosis": "kurtosis",
    "psr": "psr",
    "dsr": "dsr",
    "sr0": "sr0",
    "error": "error",
}
_REPRODUCIBILITY = (
    "command",
    "git_commit",
    "packages",
    "device",
    "device_name",
    "seeds",
    "config_hash",
    "run_key",
    "study_name",
    "storage",
)


def selection_results(rd: RunData, nums: Numbers, notes: list[str]) -> dict:
    s = nums.selection
    out: dict[str, Any]  # numbers, lists and the PBO's dict
    out = {
        "candidates": [],
        "n_trials": s.n_trials,
        "min_dsr": s.verdict.min_dsr,
        "max_pbo": s.verdict.max_pbo,
        "periods_per_year": PERIODS_PER_YEAR,
        "notes": notes,
        "sr_variance": s.sr_variance,
        "n_days": int(len(s.days)),
        "first_day": str(s.days[0]) if len(s.days) else None,
        "last_day": str(s.days[-1]) if len(s.days) else None,
        "pbo": None,
    }
    for r in s.candidates:
        row = {new: r[old] for old, new in _CANDIDATE_FIELDS.items() if old in r}
        out["candidates"].append(row | {"label": label(r["key"]), "n": rd.n_of(r["key"])})
    v = s.verdict
    if v.pbo_result is not None:
        p = v.pbo_result
        usable = [r["name"] for r in v.table]
        out["pbo"] = {
            **p.to_dict(),
            "logits": p.logits.tolist(),
            "oos_rank": p.oos_rank.tolist(),
            "columns": [label(k) for k in usable],
        }
        assert v.dsr_result is not None  # Gate.evaluate sets it with pbo_result
        out["dsr_detail"] = v.dsr_result.to_dict()
    return out


def verdict_results(nums: Numbers, reasons: list[str]) -> dict:
    v = nums.selection.verdict
    return {
        "selected": v.selected,
        "selected_label": label(v.selected) if v.selected else None,
        "passed": v.passed,
        "passes_dsr": v.passes_dsr,
        "passes_pbo": v.passes_pbo,
        "dsr": v.dsr,
        "pbo": v.pbo,
        "sharpe": v.sharpe,
        "sr0": v.sr0,
        "n_trials": v.n_trials,
        "reasons": reasons,
        "reason_codes": [str(r) for r in v.reasons],
        "min_dsr": v.min_dsr,
        "max_pbo": v.max_pbo,
        "error": v.error,
    }


def results(rd: RunData, nums: Numbers, words: dict) -> dict:
    """results.json: everything the report shows, as numbers (and its sentences)."""
    out = {
        "question": "does a longer context help?",
        "verdict_sentence": words["sentence"],
        "verdict": verdict_results(nums, words["reasons"]),
        "selection": selection_results(rd, nums, words["notes"]),
        "per_configuration": nums.per_n,
        "baselines": nums.baselines,
        "precision": rd.precision,
        "setup": {
            "config": rd.config,
            "data": rd.data,
            "preset": rd.run.get("preset"),
            "preset_note": rd.run.get("preset_note"),
        },
        "reproducibility": {k: rd.run.get(k) for k in _REPRODUCIBILITY}
        | {"data_fingerprint": rd.data.get("fingerprint", {})},
    }
    for d in DIAGNOSTICS:  # the nesting check, the probe, an A/A replicate's reading: what each gives
        if (found := d.to_json(nums.diagnostics[d.name])) is not None:
            out[d.name] = found
    if rd.rescored_from:
        out["rescored"] = {"run": rd.run_dir.name, **rd.rescored_from}
    return out


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic.atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp)


def write_daily(rd: RunData, path: Path) -> None:
    """One row per (series, day): daily net and gross returns of every trial and baseline."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]]
    cols = {"series": [], "kind": [], "n": [], "day": [], "net_return": [], "gross_return": []}
    for name, s in sorted(rd.series.items()):
        k = len(s.days)
        cols["series"] += [name] * k
        cols["kind"] += ["baseline" if is_baseline(name) else "model"] * k
        cols["n"] += [rd.n_of(name)] * k
        cols["day"] += s.days.astype("datetime64[D]").tolist()
        cols["net_return"] += s.net.tolist()
        cols["gross_return"] += s.gross.tolist()
    schema = pa.schema(
        [
            ("series", pa.string()),
            ("kind", pa.string()),
            ("n", pa.int64()),
            ("day", pa.date32()),
            ("net_return", pa.float64()),
            ("gross_return", pa.float64()),
        ]
    )
    with atomic.atomic_path(path) as tmp:
        pq.write_table(pa.table(cols, schema=schema), tmp)


def write_all(rd: RunData, nums: Numbers, words: dict, out_dir: Path) -> None:
    atomic.write_json(out_dir / "results.json", results(rd, nums, words), strict=True)
    write_parquet(atomic.json_safe(nums.rows), out_dir / "fold_metrics.parquet")
    write_daily(rd, out_dir / "daily_returns.parquet")
