"""The sweep's report: report.md, a self-contained report.html, results.json and Parquet tables.

`build_report(run_dir)` reads only what the sweep saved (run.json, config.json, data.json,
ledger.json, precision.json, cells/**/*.cell.json, series/*.npz), so `tsflash report RUN_DIR`
rebuilds it without training, torch or optuna. Sections, in order:

    1. the question and the verdict (one sentence, key numbers first)
    2. setup            data range, bars, folds with dates, horizon, flat band, fees, model, budget
    3. cost vs N        epoch time, tokens/s, peak memory, backend, TFLOP/s (table + plot)
    4. benefit vs N     accuracy, balanced accuracy, log-loss, MCC with fold spread, baselines
                        alongside (table + plot); net-of-fee equity curves
    5. selection        per candidate daily Sharpe, PSR, DSR (trial count, Sharpe variance);
                        PBO with the CSCV logit and out-of-sample rank histograms; the gates
    6. precision        the bf16-vs-float64 oracle at each N
    7. reproducibility  command, git commit, packages, device, seed, config hash, data fingerprint

Statistics are computed on DAILY net returns (see `tsflash.selection.daily_returns` for why);
Sharpe ratios are per day and annualised with 365 (BTC trades every day). The candidates are the
sweep's completed trials; the DSR's trial count is the number of COMPLETE trials in the optuna
study (ledger.json), and its Sharpe variance is the sample variance of their values (per-day
Sharpe ratios; a trial whose daily returns are constant, i.e. that never trades, enters with 0).
PBO uses CSCV on the candidates' daily net returns aligned on their common days; with fewer
common days than `selection.cscv_blocks` the block count is reduced (and the report says so).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tsflash import atomic
from tsflash.errors import UserError

log = logging.getLogger(__name__)

PERIODS_PER_YEAR = 365.0  # daily returns; BTC trades every day
METRICS = (
    ("accuracy", "accuracy", "higher"),
    ("balanced_accuracy", "balanced accuracy", "higher"),
    ("log_loss", "log-loss", "lower"),
    ("mcc", "MCC", "higher"),
)
SECTIONS = (
    "The question and the verdict",
    "Setup",
    "Cost against N",
    "Benefit against N",
    "Selection",
    "Precision",
    "Reproducibility",
)


# ---------------------------------------------------------------------------------------------
# Loading the run folder


@dataclass
class Series:
    name: str  # trial key ("n512") or "baseline-prior"
    days: np.ndarray  # datetime64[D] (D,)
    net: np.ndarray  # (D,) daily net returns
    gross: np.ndarray  # (D,)


@dataclass
class RunData:
    run_dir: Path
    run: dict
    config: dict
    data: dict
    ledger: dict
    precision: dict
    cells: list[dict]  # model cells
    baselines: list[dict]  # baseline cells (one per fold and baseline)
    series: dict[str, Series] = field(default_factory=dict)

    @property
    def trial_keys(self) -> list[str]:
        """The sweep's trials in order of N then key (only those with saved daily series)."""
        keys = {c["key"]: c["n"] for c in self.cells if c["key"] in self.series}
        return sorted(keys, key=lambda k: (keys[k], k))

    @property
    def baseline_names(self) -> list[str]:
        return sorted({c["name"] for c in self.baselines})


def _read_json(path: Path, default=None):
    if not path.exists():
        if default is not None:
            return default
        raise UserError(f"report: {path} not found; is {path.parent} a finished `tsflash sweep` run folder?")
    return json.loads(path.read_text())


def load_run(run_dir: Path | str) -> RunData:
    """Everything the report needs from a run folder; UserError naming what is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"report: run folder not found: {run_dir}")
    run = _read_json(run_dir / "run.json")
    config = _read_json(run_dir / "config.json")
    data = _read_json(run_dir / "data.json")
    ledger = _read_json(run_dir / "ledger.json", default={"trials": [], "n_complete": 0})
    precision = _read_json(run_dir / "precision.json", default={"available": False, "reason": "not run"})
    cells, baselines = [], []
    for p in sorted((run_dir / "cells").rglob("*.cell.json")):
        c = json.loads(p.read_text())
        if "baselines" in c:
            baselines.extend(c["baselines"].values())
        else:
            cells.append(c)
    if not cells:
        raise UserError(f"report: no finished cells under {run_dir / 'cells'}; run `tsflash sweep` first")
    rd = RunData(run_dir, run, config, data, ledger, precision, cells, baselines)
    for p in sorted((run_dir / "series").glob("*.npz")):
        with np.load(p) as z:
            rd.series[p.stem] = Series(p.stem, z["days"].astype("datetime64[D]"), z["net"], z["gross"])
    return rd


# ---------------------------------------------------------------------------------------------
# Numbers


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def label(key: str) -> str:
    """"n512" -> "N=512"; "n512-lr0.001-wd0.1" -> "N=512 lr=0.001 wd=0.1"; baselines by name."""
    if key.startswith("baseline-"):
        return key[len("baseline-"):]
    head, *rest = key.split("-")
    out = f"N={head[1:]}"
    for r in rest:
        i = next((j for j, ch in enumerate(r) if ch.isdigit() or ch == "."), len(r))
        out += f" {r[:i]}={r[i:]}"
    return out


def fold_table(rd: RunData) -> list[dict]:
    """One row per (series, fold): metrics averaged over seeds, cost summed where additive."""
    rows = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c)
    for (key, fold), cs in sorted(groups.items(), key=lambda kv: (kv[1][0]["n"], kv[0])):
        row = {"series": key, "kind": "model", "n": cs[0]["n"], "fold": fold, "n_seeds": len(cs)}
        for m in ("accuracy", "balanced_accuracy", "log_loss", "macro_f1", "mcc", "mean_net_return", "turnover"):
            row[m] = float(np.mean([_nan(c["metrics"].get(m)) for c in cs]))
        row["n_scored"] = int(cs[0]["metrics"].get("n_scored", 0))
        for m in ("epoch_seconds", "train_seconds", "eval_seconds", "tokens_per_s", "tflops", "peak_memory_bytes"):
            row[m] = float(np.mean([_nan(c["cost"].get(m)) for c in cs]))
        for m in ("backend", "n_params", "batch_size", "steps", "tokens_per_step", "device"):
            row[m] = cs[0]["cost"].get(m)
        row["flat_threshold"] = cs[0]["flat_threshold"]
        row.update({k: cs[0][k] for k in ("train_start", "train_end", "test_start", "test_end")})
        rows.append(row)
    for c in sorted(rd.baselines, key=lambda c: (c["name"], c["fold"])):
        row = {"series": f"baseline-{c['name']}", "kind": "baseline", "n": None, "fold": c["fold"], "n_seeds": 1}
        for m in ("accuracy", "balanced_accuracy", "log_loss", "macro_f1", "mcc", "mean_net_return", "turnover"):
            row[m] = _nan(c["metrics"].get(m))
        row["n_scored"] = int(c["metrics"].get("n_scored", 0))
        row.update({k: c[k] for k in ("train_start", "train_end", "test_start", "test_end")})
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
        for m in ("backend", "n_params", "batch_size", "steps", "tokens_per_step", "device"):
            out[m] = rs[0][m]
    return out


def _aligned(rd: RunData, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(days (T,), matrix (T, K)) of daily net returns on the days common to every key."""
    common = None
    for k in keys:
        d = rd.series[k].days
        common = d if common is None else np.intersect1d(common, d)
    cols = []
    for k in keys:
        s = rd.series[k]
        cols.append(s.net[np.isin(s.days, common)])
    return common, np.stack(cols, axis=1)


def selection(rd: RunData) -> dict:
    """Candidates' daily statistics, DSR against the study's ledger, PBO via CSCV, the gates."""
    from tsflash import selection as sel

    cfg_sel = rd.config["selection"]
    keys = rd.trial_keys
    complete, seen = [], set()
    for t in rd.ledger.get("trials", []):
        # One trial per configuration slot: two workers of a shared study can both run a slot
        # (they enqueue it before either sees the other's), and a repeat is not a new trial.
        slot = t.get("slot") or t.get("key") or t.get("number")
        if t["state"] == "COMPLETE" and t.get("value") is not None and slot not in seen:
            seen.add(slot)
            complete.append(t)
    n_trials = max(len(complete), len(keys))
    trial_sharpes = np.array([t["value"] for t in complete], dtype=float)
    if len(trial_sharpes) < len(keys):  # ledger missing (should not happen): use the candidates
        trial_sharpes = None
    out = {"candidates": [], "n_trials": n_trials, "min_dsr": cfg_sel["min_dsr"], "max_pbo": cfg_sel["max_pbo"],
           "periods_per_year": PERIODS_PER_YEAR, "notes": []}
    if not keys:
        out.update(verdict=_no_verdict("no trial finished"), pbo=None)
        return out
    days, mat = _aligned(rd, keys)
    out["n_days"] = int(len(days))
    out["first_day"], out["last_day"] = (str(days[0]), str(days[-1])) if len(days) else (None, None)
    srs = {}
    sr_var = None
    if trial_sharpes is not None and len(trial_sharpes) >= 2:
        sr_var = float(np.var(trial_sharpes, ddof=1))
    elif trial_sharpes is None and len(keys) >= 2:
        sr_var = None
    out["sr_variance"] = sr_var
    for j, key in enumerate(keys):
        r = mat[:, j]
        row = {"key": key, "label": label(key), "n": next(c["n"] for c in rd.cells if c["key"] == key),
               "n_days": int(len(r)), "mean_daily_net": float(np.mean(r)) if len(r) else float("nan"),
               "total_net": float(np.prod(1 + r) - 1) if len(r) else float("nan")}
        try:
            sr = sel.sharpe(r)
            sk, ku = sel.skew_kurtosis(r)
            row.update(sharpe=sr, sharpe_annual=sel.annualize_sharpe(sr, PERIODS_PER_YEAR), skew=sk, kurtosis=ku,
                       psr=sel.psr(sr, 0.0, t=len(r), skew=sk, kurtosis=ku))
            if n_trials >= 2 and sr_var is not None and sr_var > 0:
                d = sel.deflated_sharpe(r, n_trials=n_trials, sr_variance=sr_var)
            else:
                d = sel.deflated_sharpe(r, n_trials=1)
            row.update(dsr=d.dsr, sr0=d.sr0)
            srs[key] = sr
        except sel.SelectionInputError as exc:
            row.update(sharpe=float("nan"), sharpe_annual=float("nan"), psr=float("nan"), dsr=float("nan"),
                       sr0=float("nan"), error=str(exc))
        out["candidates"].append(row)

    usable = [k for k in keys if k in srs]
    dropped = [k for k in keys if k not in srs]
    if dropped:
        out["notes"].append(f"left out of the gates (no daily Sharpe ratio: constant or too short series): "
                            f"{', '.join(label(k) for k in dropped)}")
    if len(usable) < 2:
        best = usable[0] if usable else keys[0]
        out["pbo"] = None
        out["verdict"] = _no_verdict(
            f"the gates need at least 2 candidates with a daily Sharpe ratio (PBO ranks them), got {len(usable)}",
            selected=best, row=next(r for r in out["candidates"] if r["key"] == best), cfg_sel=cfg_sel)
        return out
    t = mat.shape[0]
    s_blocks = int(cfg_sel.get("cscv_blocks", 16))
    s_used = min(s_blocks, t - t % 2)
    if s_used != s_blocks:
        out["notes"].append(f"CSCV blocks reduced from {s_blocks} to {s_used}: only {t} common days")
    gate = sel.Gate(min_dsr=cfg_sel["min_dsr"], max_pbo=cfg_sel["max_pbo"], n_blocks=s_used,
                    periods_per_year=PERIODS_PER_YEAR)
    cands = {k: mat[:, keys.index(k)] for k in usable}
    try:
        v = gate.evaluate(cands, n_trials=max(n_trials, len(usable)),
                          trial_sharpes=trial_sharpes if trial_sharpes is not None and len(trial_sharpes) >= 2 else None)
    except sel.SelectionInputError as exc:
        best = max(usable, key=lambda k: srs[k])
        out["pbo"] = None
        out["verdict"] = _no_verdict(f"the gates could not be evaluated: {exc}", selected=best,
                                     row=next(r for r in out["candidates"] if r["key"] == best), cfg_sel=cfg_sel)
        return out
    p = v.pbo_result
    out["pbo"] = {**p.to_dict(), "logits": p.logits.tolist(), "oos_rank": p.oos_rank.tolist(),
                  "columns": [label(k) for k in usable]}
    out["dsr_detail"] = v.dsr_result.to_dict()
    out["verdict"] = {"selected": v.selected, "selected_label": label(v.selected), "passed": v.passed,
                      "passes_dsr": v.passes_dsr, "passes_pbo": v.passes_pbo, "dsr": v.dsr, "pbo": v.pbo,
                      "reasons": v.reasons, "min_dsr": v.min_dsr, "max_pbo": v.max_pbo}
    return out


def _no_verdict(reason: str, selected: str | None = None, row: dict | None = None, cfg_sel: dict | None = None) -> dict:
    out = {"selected": selected, "selected_label": label(selected) if selected else None, "passed": False,
           "passes_dsr": False, "passes_pbo": False, "dsr": (row or {}).get("dsr"), "pbo": None,
           "reasons": [reason, "No candidate passes."]}
    if cfg_sel:
        out.update(min_dsr=cfg_sel["min_dsr"], max_pbo=cfg_sel["max_pbo"])
    return out


def verdict_sentence(sel_out: dict, summaries: dict[str, dict], baselines: dict[str, dict]) -> str:
    """One sentence answering the question, with the key numbers."""
    v = sel_out["verdict"]
    rows = {r["key"]: r for r in sel_out["candidates"]}
    n_trials = sel_out["n_trials"]
    if v.get("selected") is None:
        return f"No context length can be judged: {v['reasons'][0]}."
    r = rows[v["selected"]]
    dsr = v.get("dsr")
    pbo = v.get("pbo")
    dsr_s = "n/a" if dsr is None or not np.isfinite(dsr) else f"{dsr:.3f}"
    pbo_s = "n/a" if pbo is None else f"{pbo:.2f}"
    sr_s = "n/a" if not np.isfinite(r["sharpe"]) else f"{r['sharpe']:.3f}/day ({r['sharpe_annual']:.2f} annualised)"
    acc = summaries.get(v["selected"], {}).get("accuracy", float("nan"))
    best_base = max(baselines.values(), key=lambda b: b["accuracy"]) if baselines else None
    base_s = (f" vs {best_base['series'].removeprefix('baseline-')} baseline {best_base['accuracy']:.4f}"
              if best_base else "")
    if v["passed"]:
        return (f"Yes: {label(v['selected'])} passes both gates, with a daily net Sharpe of {sr_s}, "
                f"DSR {dsr_s} >= {v['min_dsr']} over {n_trials} trials and PBO {pbo_s} <= {v['max_pbo']} "
                f"(out-of-sample accuracy {acc:.4f}{base_s}).")
    why = []
    if not v.get("passes_dsr"):
        why.append(f"DSR {dsr_s} < {v.get('min_dsr')}")
    if not v.get("passes_pbo"):
        why.append(f"PBO {pbo_s} > {v.get('max_pbo')}" if pbo is not None else "PBO not computable")
    return (f"No: no context length passes both gates; the best candidate, {label(v['selected'])} "
            f"(daily net Sharpe {sr_s}, accuracy {acc:.4f}{base_s}), fails with {' and '.join(why)} "
            f"over {n_trials} trials.")


# ---------------------------------------------------------------------------------------------
# Figures (matplotlib, Agg)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _log2_axis(ax, ns):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_xlabel("context length N (bars, log2 scale)")
    ax.grid(True, alpha=0.3)


def _save(fig, path: Path) -> Path:
    with atomic.atomic_path(path, keep_suffix=True) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")  # PNG whatever the suffix, as before
    _plt().close(fig)
    return path


def plot_cost(per_n: list[dict], path: Path) -> Path:
    plt = _plt()
    ns = [s["n"] for s in per_n]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    panels = (("epoch_seconds", "wall-clock per epoch (s)", 1), ("tokens_per_s", "training throughput (tokens/s)", 1),
              ("peak_memory_bytes", "peak memory (MiB)", 2**-20), ("tflops", "achieved TFLOP/s", 1))
    for ax, (m, title, scale) in zip(axes, panels):
        ys = np.array([s[m] * scale for s in per_n], dtype=float)
        ax.plot(ns, ys, "o-")
        ax.set_ylabel(title)
        ax.set_title(title)
        _log2_axis(ax, ns)
        pos = ys[np.isfinite(ys) & (ys > 0)]
        if len(pos) > 1 and pos.max() / pos.min() > 20:  # spans decades: log scale
            ax.set_yscale("log")
        else:
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
            ax.set_ylim(bottom=0)  # a zoomed axis would turn a 0.4 % change into a cliff
    fig.suptitle("Cost against context length (mean over folds)")
    fig.tight_layout()
    return _save(fig, path)


def plot_benefit(rows: list[dict], per_n: list[dict], baselines: dict[str, dict], path: Path) -> Path:
    plt = _plt()
    ns = [s["n"] for s in per_n]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (m, title, better) in zip(axes, METRICS):
        mean = [s[m] for s in per_n]
        std = [s[f"{m}_std"] for s in per_n]
        ax.errorbar(ns, mean, yerr=std, fmt="o-", capsize=4, label="transformer (mean ± fold s.d.)")
        pts = [(r["n"], r[m]) for r in rows if r["kind"] == "model"]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, color="gray", alpha=0.6, label="single folds")
        for (name, b), style in zip(sorted(baselines.items()), ("--", ":", "-.")):
            ax.axhline(b[m], linestyle=style, color="C3" if "logreg" in name else "C2",
                       label=f"{name.removeprefix('baseline-')} baseline")
        ax.set_ylabel(title)
        ax.set_title(f"{title} ({better} is better)")
        _log2_axis(ax, ns)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle("Out-of-sample benefit against context length (test blocks of every fold)")
    fig.tight_layout()
    return _save(fig, path)


def plot_equity(rd: RunData, keys: list[str], path: Path) -> Path:
    """Two panels: before fees (does the forecast carry any edge?) and after fees (can it be traded?).

    Wealth is drawn on a log axis: a strategy that loses most of its capital to fees would
    otherwise be a flat line at -100 % after a few weeks, hiding how fast it got there.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.4), sharex=True)
    for ax, field, title in ((axes[0], "gross", "before fees"), (axes[1], "net", "after fees")):
        for key in keys:
            s = rd.series[key]
            style = "--" if key.startswith("baseline-") else "-"
            wealth = np.cumprod(1 + np.asarray(getattr(s, field), dtype=float))
            ax.plot(s.days.astype("datetime64[D]"), np.maximum(wealth, 1e-12), style, label=label(key))
        ax.axhline(1, color="black", linewidth=0.6)
        ax.set_yscale("log")
        ax.set_ylabel(f"wealth {title} (start = 1, log scale)")
        ax.set_xlabel("UTC day (out-of-sample test blocks)")
        ax.set_title(f"Equity curves {title}, compounded daily")
        ax.grid(True, alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return _save(fig, path)


def plot_pbo(pbo: dict, path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    logits = np.asarray(pbo["logits"], dtype=float)
    finite = logits[np.isfinite(logits)]
    axes[0].hist(finite, bins=min(30, max(5, len(np.unique(finite)))), color="C0", alpha=0.8)
    axes[0].axvline(0, color="C3", linestyle="--", label="logit 0 (OOS median)")
    axes[0].set_xlabel("logit of the IS winner's OOS relative rank")
    axes[0].set_ylabel("CSCV splits")
    axes[0].set_title(f"CSCV logits: PBO = {pbo['pbo']:.2f} ({pbo['n_splits']} splits)")
    axes[0].legend(fontsize=8)
    hist = np.asarray(pbo["rank_histogram"])
    axes[1].bar(np.arange(1, len(hist) + 1), hist, color="C1")
    axes[1].set_xticks(np.arange(1, len(hist) + 1))
    axes[1].set_xlabel(f"OOS rank of the IS winner (1 = worst, {len(hist)} = best)")
    axes[1].set_ylabel("CSCV splits")
    axes[1].set_title("Out-of-sample rank of the in-sample winner")
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------
# Document: a list of blocks rendered to Markdown and to HTML


def _fmt(v, spec: str = ".4f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return "n/a" if not math.isfinite(v) else format(float(v), spec)
    return str(v)


def _pm(mean, std, spec=".4f") -> str:
    return f"{_fmt(mean, spec)} ± {_fmt(std, spec)}"


class Doc:
    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def p(self, text: str, strong: bool = False):
        self.blocks.append(("p", text, strong))

    def ul(self, items: list[str]):
        self.blocks.append(("ul", items))

    def table(self, header: list[str], rows: list[list]):
        self.blocks.append(("table", header, [[str(c) for c in r] for r in rows]))

    def img(self, path: Path, alt: str):
        self.blocks.append(("img", path, alt))

    def code(self, text: str):
        self.blocks.append(("code", text))

    def markdown(self, run_dir: Path) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"{'#' * b[1]} {b[2]}\n")
            elif b[0] == "p":
                out.append(f"**{b[1]}**\n" if b[2] else f"{b[1]}\n")
            elif b[0] == "ul":
                out.append("\n".join(f"- {i}" for i in b[1]) + "\n")
            elif b[0] == "table":
                esc = lambda c: c.replace("|", "\\|")  # noqa: E731
                lines = ["| " + " | ".join(esc(c) for c in b[1]) + " |", "|" + "---|" * len(b[1])]
                lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in b[2]]
                out.append("\n".join(lines) + "\n")
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1].relative_to(run_dir).as_posix()})\n")
            elif b[0] == "code":
                out.append(f"```\n{b[1]}\n```\n")
        return "\n".join(out)

    def html(self, title: str) -> str:
        e = html.escape
        body = []
        for b in self.blocks:
            if b[0] == "h":
                body.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                body.append(f"<p class='verdict'><strong>{e(b[1])}</strong></p>" if b[2] else f"<p>{e(b[1])}</p>")
            elif b[0] == "ul":
                body.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b[1]) + "</ul>")
            elif b[0] == "table":
                head = "".join(f"<th>{e(c)}</th>" for c in b[1])
                rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in b[2])
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif b[0] == "img":
                data = base64.b64encode(Path(b[1]).read_bytes()).decode("ascii")
                body.append(f"<figure><img alt='{e(b[2])}' src='data:image/png;base64,{data}'/>"
                            f"<figcaption>{e(b[2])}</figcaption></figure>")
            elif b[0] == "code":
                body.append(f"<pre>{e(b[1])}</pre>")
        style = (
            "body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;"
            "padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;margin:0.8em 0;font-size:0.9em}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
            "td:first-child,th:first-child{text-align:left}img{max-width:100%}figure{margin:1em 0}"
            "figcaption{font-size:0.85em;color:#555}pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;"
            "white-space:pre-wrap}.verdict{font-size:1.15em;background:#fff8e0;padding:0.6em;border-left:4px solid #e0a000}"
        )
        return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>"
                f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---------------------------------------------------------------------------------------------
# Writing tables


def _write_parquet(rows: list[dict], path: Path, schema=None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=schema)
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _daily_table(rd: RunData, path: Path) -> None:
    import pyarrow as pa

    cols = {"series": [], "kind": [], "n": [], "day": [], "net_return": [], "gross_return": []}
    n_of = {c["key"]: c["n"] for c in rd.cells}
    for name, s in sorted(rd.series.items()):
        k = len(s.days)
        cols["series"] += [name] * k
        cols["kind"] += ["baseline" if name.startswith("baseline-") else "model"] * k
        cols["n"] += [n_of.get(name)] * k
        cols["day"] += s.days.astype("datetime64[D]").tolist()
        cols["net_return"] += s.net.tolist()
        cols["gross_return"] += s.gross.tolist()
    schema = pa.schema([("series", pa.string()), ("kind", pa.string()), ("n", pa.int64()), ("day", pa.date32()),
                        ("net_return", pa.float64()), ("gross_return", pa.float64())])
    table = pa.table(cols, schema=schema)
    import pyarrow.parquet as pq

    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _clean(o):
    """JSON-safe: NaN/inf -> None, numpy -> Python."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    return o


def _atomic_text(path: Path, text: str) -> None:
    atomic.write_text(path, text)


# ---------------------------------------------------------------------------------------------
# The report


def build_report(run_dir: Path | str) -> tuple[Path, Path]:
    """Write report.md, report.html, results.json, fold_metrics.parquet, daily_returns.parquet
    and figures/*.png into `run_dir` from its saved results; returns (report.md, report.html)."""
    rd = load_run(run_dir)
    run_dir = rd.run_dir
    fig_dir = run_dir / "figures"
    cfg = rd.config
    rows = fold_table(rd)
    keys = rd.trial_keys
    per_n = [summarize(rows, k) for k in keys]
    baselines = {f"baseline-{b}": summarize(rows, f"baseline-{b}") for b in rd.baseline_names}
    sel_out = selection(rd)
    sentence = verdict_sentence(sel_out, {s["series"]: s for s in per_n}, baselines)
    # The primary configuration per N is the enqueued default (slot "n<N>/0"); trials searched with
    # --trials appear as extra table rows, not in the plots against N.
    default_keys = {t.get("key") for t in rd.ledger.get("trials", []) if str(t.get("slot", "")).endswith("/0")}
    primary = [s for s in per_n if s["series"] in default_keys] or [s for s in per_n if "-" not in s["series"]]

    doc = Doc()
    doc.h(1, f"Does a longer context help? {rd.config.get('name', '')} sweep, N = {', '.join(map(str, cfg['lengths']))}")

    # 1. question and verdict
    doc.h(2, SECTIONS[0])
    doc.p(f"Question: does a causal transformer that sees a longer context (N past 1-minute bars) forecast the "
          f"{cfg['labels']['horizon']}-bar up/flat/down direction of {rd.data.get('symbol', 'BTCUSDT')} better out of "
          f"sample, at what cost, and does the winner survive the multiple-testing gates "
          f"(Deflated Sharpe Ratio >= {cfg['selection']['min_dsr']}, PBO <= {cfg['selection']['max_pbo']})?")
    doc.p(f"Verdict: {sentence}", strong=True)
    doc.ul(sel_out["verdict"]["reasons"])
    if rd.run.get("preset") == "cpu":
        doc.p(f"Note: {rd.run.get('preset_note') or 'reduced CPU preset'}")
    if rd.data.get("kind") == "synthetic":
        doc.p(f"Note: the data is a synthetic random walk ({rd.data.get('source')}), the noise control: "
              "nothing is predictable, and a pass here would be a false positive.")

    # 2. setup
    doc.h(2, SECTIONS[1])
    fp = rd.data.get("fingerprint", {})
    first_cost = next((c["cost"] for c in rd.cells if c.get("cost")), {})
    doc.table(["item", "value"], [
        ["data", f"{rd.data.get('symbol')} {rd.data.get('interval')} from {rd.data.get('source')}"],
        ["range (configured)", f"{cfg['data']['start']} .. {cfg['data']['end']} (UTC, end inclusive)"],
        ["bars", f"{_fmt(fp.get('count'))} ({fp.get('first')} .. {fp.get('last')}); {rd.data.get('n_gaps', 0)} gaps, "
                 f"{_fmt(rd.data.get('missing_bars', 0))} missing bars; windows never bridge a gap > "
                 f"{cfg['data']['max_gap_bars']} bars"],
        ["target", f"sign of the {cfg['labels']['horizon']}-bar forward log return: up / flat / down"],
        ["flat band", f"symmetric |return| quantile giving {cfg['labels']['flat_fraction']:.1%} flat labels, "
                      "fitted on each fold's training bars only"],
        ["folds", f"{cfg['splits']['n_folds']} {cfg['splits']['scheme']} walk-forward folds, test blocks of "
                  f"{cfg['splits']['test_days']} days, purge {cfg['splits']['purge'] if cfg['splits']['purge'] >= 0 else cfg['labels']['horizon']} bars, "
                  f"embargo {cfg['splits']['embargo']}"],
        ["fees", f"{cfg['eval']['fee_bps']} bps per unit of turnover; position +1/0/-1 from the predicted class, held one bar"],
        ["model", f"causal transformer, d_model {cfg['model']['d_model']}, {cfg['model']['n_layers']} layers, "
                  f"{cfg['model']['n_heads']} heads, rotary positions; {_fmt(first_cost.get('n_params'))} parameters (same for every N)"],
        ["budget", f"{cfg['train']['steps']} AdamW steps of {_fmt(cfg['train']['tokens_per_step'])} tokens "
                   f"(batch = tokens / N), lr {cfg['train']['lr']}, warm-up {cfg['train']['warmup_steps']}, "
                   f"weight decay {cfg['train']['weight_decay']}"],
        ["seeds", ", ".join(map(str, cfg["train"]["seeds"]))],
        ["trials", f"{rd.run.get('trials_per_length', 1)} per N"
                   + (f" (searched: {rd.run.get('search_space')})" if rd.run.get("search_space") else "")
                   + f"; {sel_out['n_trials']} complete trials in the study"],
        ["evaluation", "every test bar scored once, with a context of N/2..N bars ending at it (stride N/2); "
                       "baselines (class prior, logistic regression on the last "
                       f"{cfg['eval']['baseline_lags']} bars) on the same folds; statistics on daily net returns"],
        ["preset", f"{rd.run.get('preset')}" + (" (reduced CPU preset)" if rd.run.get("preset") == "cpu" else "")],
    ])
    thresholds = {r["fold"]: r["flat_threshold"] for r in rows if r["kind"] == "model"}
    doc.table(["fold", "train start", "train end", "test start", "test end", "train bars", "test bars", "flat band |r|"], [
        [f["fold"], f["train_start"], f["train_end"], f["test_start"], f["test_end"], _fmt(f["n_train"]),
         _fmt(f["n_test"]), _fmt(thresholds.get(f["fold"]), ".2e")] for f in rd.data.get("folds", [])
    ])

    # 3. cost
    doc.h(2, SECTIONS[2])
    doc.table(["configuration", "batch", "steps", "epoch (s)", "train (s)", "tokens/s", "peak memory (MiB)", "backend",
               "TFLOP/s", "device"], [
        [label(s["series"]), _fmt(s["batch_size"]), _fmt(s["steps"]), _fmt(s["epoch_seconds"], ".2f"),
         _fmt(s["train_seconds"], ".2f"), _fmt(s["tokens_per_s"], ",.0f"), _fmt(s["peak_memory_bytes"] / 2**20, ",.0f"),
         s["backend"], _fmt(s["tflops"], ".3g"), s["device"]] for s in per_n
    ])
    doc.p("Means over folds (and seeds). An epoch is as many tokens as the fold has training bars. Peak memory is "
          "torch.cuda.max_memory_allocated on CUDA, the process's peak RSS on CPU (an upper bound).")
    if primary:
        doc.img(plot_cost(primary, fig_dir / "cost_vs_n.png"), "Cost against N (log2 x-axis)")

    # 4. benefit
    doc.h(2, SECTIONS[3])
    head = ["configuration"] + [t for _, t, _ in METRICS] + ["folds"]
    body = [[label(s["series"])] + [_pm(s[m], s[f"{m}_std"]) for m, _, _ in METRICS] + [s["n_folds"]] for s in per_n]
    body += [[f"baseline: {label(k)}"] + [_pm(b[m], b[f"{m}_std"]) for m, _, _ in METRICS] + [b["n_folds"]]
             for k, b in baselines.items()]
    doc.table(head, body)
    doc.p("Mean ± fold-to-fold standard deviation over the test blocks; log-loss in nats (lower is better; "
          "a uniform guess scores ln 3 = 1.0986).")
    if primary:
        doc.img(plot_benefit(rows, primary, baselines, fig_dir / "benefit_vs_n.png"),
                "Benefit against N, with fold spread and baselines (log2 x-axis)")
    eq_keys = keys + [k for k in baselines if k in rd.series]
    if eq_keys:
        doc.img(plot_equity(rd, eq_keys, fig_dir / "equity.png"), "Net-of-fee equity curves per N and for the baselines")

    # 5. selection
    doc.h(2, SECTIONS[4])
    sr_var = sel_out.get("sr_variance")
    doc.p(f"Daily net returns of {len(keys)} candidates on {sel_out.get('n_days', 0)} common days "
          f"({sel_out.get('first_day')} .. {sel_out.get('last_day')}). DSR trial count = {sel_out['n_trials']} complete "
          f"trials in the optuna study; Sharpe variance across trials = {_fmt(sr_var, '.3g')} (per-day Sharpe, ddof 1). "
          "Sharpe ratios per day; annualised with 365.")
    def gross_sharpe(key: str) -> str:
        """Per-day Sharpe before fees: whether the forecast has an edge at all, fees aside."""
        s = rd.series.get(key)
        g = np.asarray(s.gross, dtype=float) if s is not None else np.empty(0)
        return _fmt(float(g.mean() / g.std(ddof=1))) if len(g) > 1 and g.std(ddof=1) > 0 else "n/a"

    cand_rows = []
    for r in sel_out["candidates"]:
        cand_rows.append([r["label"], _fmt(r["n_days"]), _fmt(r["mean_daily_net"], ".2e"), _fmt(r["total_net"], ".2%"),
                          gross_sharpe(r["key"]),
                          _fmt(r["sharpe"]), _fmt(r["sharpe_annual"], ".2f"), _fmt(r["psr"], ".3f"), _fmt(r["dsr"], ".3f"),
                          _fmt(r.get("sr0")), _fmt(sel_out["n_trials"]), _fmt(sr_var, ".3g"),
                          "selected" if r["key"] == sel_out["verdict"].get("selected") else ""])
    for k in baselines:
        if k in rd.series:
            s = rd.series[k]
            try:
                from tsflash import selection as sel

                sr = sel.sharpe(s.net)
                sr_s, ann = _fmt(sr), _fmt(sel.annualize_sharpe(sr, PERIODS_PER_YEAR), ".2f")
            except Exception:
                sr_s, ann = "n/a", "n/a"
            cand_rows.append([f"baseline: {label(k)}", _fmt(len(s.net)), _fmt(float(np.mean(s.net)), ".2e"),
                              _fmt(float(np.prod(1 + s.net) - 1), ".2%"), gross_sharpe(k), sr_s, ann, "", "", "", "", "", "not a candidate"])
    doc.table(["candidate", "days", "mean daily net", "total net", "gross Sharpe/day", "Sharpe/day", "Sharpe/yr", "PSR(0)", "DSR",
               "SR0/day", "trials", "V[SR]", ""], cand_rows)
    pbo = sel_out.get("pbo")
    if pbo:
        doc.p(f"PBO (CSCV, {pbo['n_blocks']} blocks of {pbo['block_size']} days, {pbo['n_splits']} splits, "
              f"{pbo['n_dropped']} oldest days dropped): {pbo['pbo']:.3f}; probability of an out-of-sample loss "
              f"{pbo['prob_oos_loss']:.3f}; degradation OOS = {_fmt(pbo['intercept'], '.3f')} + "
              f"{_fmt(pbo['slope'], '.3f')} x IS (R^2 {_fmt(pbo['r2'], '.2f')}).")
        doc.img(plot_pbo(pbo, fig_dir / "pbo.png"), "CSCV logits and out-of-sample rank of the in-sample winner")
    else:
        doc.p("PBO: not computable (see the reasons above).")
    for note in sel_out["notes"]:
        doc.p(f"Note: {note}")
    doc.ul([f"gate: {r}" for r in sel_out["verdict"]["reasons"]])

    # 6. precision
    doc.h(2, SECTIONS[5])
    prec = rd.precision
    if prec.get("available") and prec.get("rows"):
        st = prec.get("settings", {})
        doc.p(f"bf16 fused attention against a float64 reference on identical inputs (q, k, v ~ N(0, 1), "
              f"{st.get('heads')} heads of {st.get('head_dim')}), and the up/flat/down decisions of a "
              f"{st.get('model', 'fresh model')} on the same random inputs: bf16 autocast + fused kernel vs float64.")
        doc.table(["N", "kernel", "max|err|/max|ref|", "||err||/||ref||", "decision flips", "max |d logit|", "status"], [
            [r.get("n"), r.get("backend"), _fmt(r.get("attn_max_rel"), ".2e"), _fmt(r.get("attn_fro_rel"), ".2e"),
             _fmt(r.get("flip_fraction"), ".4%"), _fmt(r.get("logit_max_abs_err"), ".2e"), r.get("status")]
            for r in prec["rows"]
        ])
    else:
        doc.p(f"The precision oracle was not run: {prec.get('reason', 'unavailable')}.")

    # 7. reproducibility
    doc.h(2, SECTIONS[6])
    pk = rd.run.get("packages", {})
    doc.code(rd.run.get("command") or "tsflash sweep")
    doc.table(["item", "value"], [
        ["git commit", rd.run.get("git_commit") or "n/a (not a git checkout, or no commit yet)"],
        ["packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)],
        ["device", f"{rd.run.get('device')}: {rd.run.get('device_name')}"],
        ["seed(s)", ", ".join(map(str, rd.run.get("seeds", cfg["train"]["seeds"])))],
        ["config hash", rd.run.get("config_hash")],
        ["run key", f"{rd.run.get('run_key')} (config + data source + trials + device type)"],
        ["optuna study", f"{rd.run.get('study_name')} in {rd.run.get('storage')}"],
        ["data fingerprint", f"first {fp.get('first')}, last {fp.get('last')}, count {_fmt(fp.get('count'))}, "
                             f"sha256 {fp.get('sha256')}"],
        ["invocations", f"{len(rd.run.get('invocations', []))} (the sweep was resumed "
                        f"{max(0, len(rd.run.get('invocations', [])) - 1)} times)"],
        ["resolved config", "config.json in this folder"],
    ])

    # machine-readable outputs
    results = {
        "question": "does a longer context help?",
        "verdict_sentence": sentence,
        "verdict": sel_out["verdict"],
        "selection": {k: v for k, v in sel_out.items() if k != "verdict"},
        "per_configuration": per_n,
        "baselines": baselines,
        "precision": prec,
        "setup": {"config": cfg, "data": rd.data, "preset": rd.run.get("preset"), "preset_note": rd.run.get("preset_note")},
        "reproducibility": {k: rd.run.get(k) for k in ("command", "git_commit", "packages", "device", "device_name",
                                                       "seeds", "config_hash", "run_key", "study_name", "storage")}
        | {"data_fingerprint": fp},
    }
    _atomic_text(run_dir / "results.json", json.dumps(_clean(results), indent=1, sort_keys=True))
    _write_parquet(_clean(rows), run_dir / "fold_metrics.parquet")
    _daily_table(rd, run_dir / "daily_returns.parquet")
    md_path, html_path = run_dir / "report.md", run_dir / "report.html"
    _atomic_text(md_path, doc.markdown(run_dir))
    _atomic_text(html_path, doc.html(f"tsflash report: {run_dir.name}"))
    log.info("report written: %s", md_path)
    return md_path, html_path
