"""The report's four figures (matplotlib, Agg, PNG written atomically): cost and benefit against N,
equity curves before and after fees, and the CSCV diagnostics of PBO."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from tsflash import atomic
from tsflash.report.compute import METRICS, Numbers
from tsflash.report.rundata import RunData
from tsflash.report.wording import label
from tsflash.runfolder import is_baseline, probe_n

# name -> caption, in the order the report shows them
CAPTIONS = {
    "cost_vs_n": "Cost against N (log2 x-axis)",
    "benefit_vs_n": "Benefit against N, with fold spread and baselines (log2 x-axis)",
    "equity": "Equity curves before and after fees per N and for the baselines",
    "pbo": "CSCV logits and out-of-sample rank of the in-sample winner",
}


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display); for figures beside the report's too."""
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


def save_figure(fig, path: Path) -> Path:
    """Write `fig` as a PNG atomically (a temporary name, then rename) and close it."""
    with atomic.atomic_path(path, keep_suffix=True) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    pyplot().close(fig)
    return path


COST_PANELS = (  # measure, panel title, y-axis label, scale
    ("epoch_seconds", "Time per epoch", "seconds per epoch", 1),
    ("tokens_per_s", "Training throughput", "tokens per second", 1),
    ("peak_memory_bytes", "Peak memory", "MiB", 2**-20),
    ("tflops", "Achieved compute", "TFLOP/s", 1),
)


def plot_cost(per_n: list[dict], path: Path, memory_kind: str) -> Path:
    """A 2 x 2 grid, one panel per measure, each point labelled with its value: readable at the
    width of a report page."""
    plt = pyplot()
    ns = [s["n"] for s in per_n]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (m, title, unit, scale) in zip(axes.flat, COST_PANELS, strict=True):
        ys = np.array([s[m] * scale for s in per_n], dtype=float)
        ax.plot(ns, ys, "o-", markersize=7, linewidth=2)
        for n, y in zip(ns, ys, strict=True):
            if np.isfinite(y):
                ax.annotate(f"{y:,.3g}", (n, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=10)
        ax.set_title(title + (f" ({memory_kind})" if m == "peak_memory_bytes" else ""), fontsize=13)
        ax.set_ylabel(unit, fontsize=11)
        _log2_axis(ax, ns)
        ax.tick_params(labelsize=10)
        pos = ys[np.isfinite(ys) & (ys > 0)]
        if len(pos) > 1 and pos.max() / pos.min() > 20:  # spans decades: log scale
            ax.set_yscale("log")
        else:
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
            ax.set_ylim(bottom=0, top=1.15 * pos.max() if len(pos) else None)  # room for the labels; from 0, so
            # a 0.4 % change does not look like a cliff
    fig.suptitle("Cost against context length N (means over folds and seeds)", fontsize=14)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_benefit(rows: list[dict], per_n: list[dict], baselines: dict[str, dict], path: Path) -> Path:
    plt = pyplot()
    ns = [s["n"] for s in per_n]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (m, title, better) in zip(axes, METRICS, strict=True):
        mean = [s[m] for s in per_n]
        std = [s[f"{m}_std"] for s in per_n]
        ax.errorbar(ns, mean, yerr=std, fmt="o-", capsize=4, label="transformer (mean ± fold s.d.)")
        pts = [(r["n"], r[m]) for r in rows if r["kind"] == "model"]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, color="gray", alpha=0.6, label="single folds")
        fixed = sorted((name, b) for name, b in baselines.items() if probe_n(name) is None)
        for (name, b), style in zip(fixed, itertools.cycle(("--", ":", "-.")), strict=False):
            ax.axhline(b[m], linestyle=style, color="C3" if "logreg" in name else "C2", label=f"{label(name)} baseline")
        probes = sorted((probe_n(name), b[m]) for name, b in baselines.items() if probe_n(name) is not None)
        if probes:  # a line against N, like the transformer's: what a linear reader gets from N bars
            ax.plot([p[0] for p in probes], [p[1] for p in probes], "s--", color="C4", label="linear probe (fold mean)")
        ax.set_ylabel(title)
        ax.set_title(f"{title} ({better} is better)")
        _log2_axis(ax, ns)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle("Out-of-sample benefit against context length (test blocks of every fold)")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_equity(rd: RunData, keys: list[str], path: Path) -> Path:
    """Two panels: before fees (does the forecast carry any edge?) and after fees (can it be traded?).

    Wealth is drawn on a log axis: a strategy that loses most of its capital to fees would
    otherwise be a flat line at -100 % after a few weeks, hiding how fast it got there.
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.4), sharex=True)
    for ax, field, title in ((axes[0], "gross", "before fees"), (axes[1], "net", "after fees")):
        for key in keys:
            s = rd.series[key]
            wealth = np.cumprod(1 + np.asarray(getattr(s, field), dtype=float))
            ax.plot(
                s.days.astype("datetime64[D]"),
                np.maximum(wealth, 1e-12),
                "--" if is_baseline(key) else "-",
                label=label(key),
            )
        ax.axhline(1, color="black", linewidth=0.6)
        ax.set_yscale("log")
        ax.set_ylabel(f"wealth {title} (start = 1, log scale)")
        ax.set_xlabel("UTC day (out-of-sample test blocks)")
        ax.set_title(f"Equity curves {title}, compounded daily")
        ax.grid(True, alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return save_figure(fig, path)


def plot_pbo(pbo, path: Path) -> Path:
    """`pbo`: a `tsflash.stats.pbo.PBOResult`."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    logits = np.asarray(pbo.logits, dtype=float)
    finite = logits[np.isfinite(logits)]
    axes[0].hist(finite, bins=min(30, max(5, len(np.unique(finite)))), color="C0", alpha=0.8)
    axes[0].axvline(0, color="C3", linestyle="--", label="logit 0 (OOS median)")
    axes[0].set_xlabel("logit of the IS winner's OOS relative rank")
    axes[0].set_ylabel("CSCV splits")
    axes[0].set_title(f"CSCV logits: PBO = {pbo.pbo:.2f} ({pbo.n_splits:,} splits)")
    axes[0].legend(fontsize=8)
    hist = np.asarray(pbo.rank_histogram)
    axes[1].bar(np.arange(1, len(hist) + 1), hist, color="C1")
    axes[1].set_xticks(np.arange(1, len(hist) + 1))
    axes[1].set_xlabel(f"OOS rank of the IS winner (1 = worst, {len(hist)} = best)")
    axes[1].set_ylabel("CSCV splits")
    axes[1].set_title("Out-of-sample rank of the in-sample winner")
    fig.tight_layout()
    return save_figure(fig, path)


def draw_intervals(ax, x, tests: list[tuple[float, float, float]], name: str, fmt: str) -> None:
    """Estimates with their intervals, (estimate, low, high) each, at positions x."""
    y = np.array([t[0] for t in tests])
    err = np.array([[t[0] - t[1] for t in tests], [t[2] - t[0] for t in tests]])
    ax.errorbar(x, y, yerr=err, fmt=fmt, capsize=4, label=name)


def difference_axes(ax, ns, ylabel: str, title: str) -> None:
    """A panel of differences against N: the zero line, labels, the log2 N axis, the legend."""
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ns:
        _log2_axis(ax, ns)
    ax.legend(fontsize=8)


def plot_paired(comparisons: list, n_of: dict[str, int], path: Path) -> Path:
    """Question 1: each N's per-bar loss difference (N minus reference) with its 95 % interval,
    one panel per score, one line per reference; below 0 the longer context forecasts better.
    `comparisons`: `tsflash.report.questions.Paired`; `n_of`: trial key -> N."""
    plt = pyplot()
    scores = [("log_loss", "log-loss"), ("direction", "direction score (up-vs-down log-loss)")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    ns = sorted({n_of[p.series] for p in comparisons if p.series in n_of})
    for ax, (score, title) in zip(axes, scores, strict=True):
        refs = list(dict.fromkeys(p.reference for p in comparisons))
        for i, ref in enumerate(refs):
            ps = sorted(
                (p for p in comparisons if p.score == score and p.reference == ref and p.series in n_of),
                key=lambda p: n_of[p.series],
            )
            if not ps:
                continue
            x = np.array([n_of[p.series] for p in ps], dtype=float) * 2 ** (0.08 * (i - (len(refs) - 1) / 2))
            draw_intervals(ax, x, [(p.mean_diff, p.lo, p.hi) for p in ps], f"minus {label(ref)}", "o-")
        difference_axes(ax, ns, f"Δ {title} per bar", f"{title}: N minus reference (< 0: N better)")
    fig.suptitle("Paired differences of the seed-ensemble forecasts, 95 % intervals (Diebold-Mariano, daily HAC)")
    fig.tight_layout()
    return save_figure(fig, path)


def draw(rd: RunData, nums: Numbers, fig_dir: Path, memory_kind: str) -> dict[str, Path]:
    """Every figure the numbers allow, as {name: path} (names as in CAPTIONS)."""
    out = {}
    if nums.primary:
        out["cost_vs_n"] = plot_cost(nums.primary, fig_dir / "cost_vs_n.png", memory_kind)
        out["benefit_vs_n"] = plot_benefit(nums.rows, nums.primary, nums.baselines, fig_dir / "benefit_vs_n.png")
    eq_keys = rd.trial_keys + [k for k in nums.baselines if k in rd.series]
    if eq_keys:
        out["equity"] = plot_equity(rd, eq_keys, fig_dir / "equity.png")
    pbo = nums.selection.verdict.pbo_result
    if pbo is not None:
        out["pbo"] = plot_pbo(pbo, fig_dir / "pbo.png")
    return out
