"""The figures of a plan's summary (`python -m lab.plan --summary`): summary.png, per arm, the
transformer, the same model cut to the shortest N and the linear probe against N; answer.png, the
README's figure, each arm beside the controls that bracket it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tsflash.report.figures import difference_axes, draw_intervals, pyplot, save_figure
from tsflash.report.wording import SCORE_NAMES, label

EDITION_SERIES = (  # (key of a length row of `lab.edition`, its part, legend)
    ("question1", "log_loss", "transformer, whole context (question 1)"),
    ("nesting", "log_loss", "transformer cut to the shortest N (nesting check)"),
    ("probe", None, "linear probe (over folds)"),
)
ANSWER_CONTROLS = ("long-memory", "iid")  # the positive and the negative control beside the market


def plot_edition(arms: list[dict], path: Path) -> Path:
    """Per arm, each longer N's log-loss per bar minus the shortest N's with its 95 % interval, for
    the transformer with its whole context, the same model cut to the shortest N, and the linear
    probe; below 0 the longer N forecasts better, and a cut model above 0 has lost short-range skill."""
    plt = pyplot()
    fig, axes = plt.subplots(1, max(len(arms), 1), figsize=(6 * max(len(arms), 1), 3.8), squeeze=False)
    for ax, arm in zip(axes[0], arms, strict=False):  # no arm: one empty panel
        rows = arm["lengths"][1:]  # the shortest N is the reference
        ns = [r["n"] for r in rows]
        for i, (key, part, name) in enumerate(EDITION_SERIES):
            tests = [(r["n"], r[key] if part is None else r[key][part]) for r in rows]
            tests = [(n, t) for n, t in tests if t]
            if not tests:
                continue
            x = np.array([n for n, _ in tests], dtype=float) * 2 ** (0.1 * (i - 1))
            draw_intervals(ax, x, [(t["estimate"], *t["ci"]) for _, t in tests], name, "o")
        difference_axes(ax, ns, f"Δ log-loss per bar vs {label(arm['lengths'][0]['series'])}" if arm["lengths"]
                         else "Δ log-loss", f"{arm['arm']}: longer N minus the shortest (< 0: better)")
    fig.suptitle("Over training runs, 95 % intervals (the probe: over folds)")
    fig.tight_layout()
    return save_figure(fig, path)


def answer_series(summary: dict) -> list[tuple[str, list[dict]]]:
    """(legend, length rows) of every arm, over both seed sets where its A/A replicate was read (the
    plan's primary reading), and beside it its echo and iid controls (not a power bracket's rungs)."""
    out = [(f"{a['arm']} (market, {a['pooled']['seeds_per_fold']} seeds)", a["pooled"]["lengths"]) if a.get("pooled")
           else (f"{a['arm']} (market)", a["lengths"]) for a in summary["arms"]]
    out += [(f"{c['control']} control ({c['arm']})", c["lengths"]) for c in summary["controls"]
            if c["kind"] in ANSWER_CONTROLS and c.get("oracle_gain") is None and c.get("lengths")]
    return out


def plot_answer(summary: dict, path: Path) -> Path:
    """Question 1 at a glance: each longer N minus the shortest, on the log-loss and on the direction
    score, with 95 % intervals over training runs; the market beside its controls. Below 0 the longer
    context forecasts better."""
    plt = pyplot()
    series = answer_series(summary)
    fig, axes = plt.subplots(1, len(SCORE_NAMES), figsize=(6 * len(SCORE_NAMES), 3.8), squeeze=False)
    for ax, (score, name) in zip(axes[0], SCORE_NAMES.items(), strict=True):
        ns: set[int] = set()
        for i, (legend, rows) in enumerate(series):
            tests = [(r["n"], r["question1"][score]) for r in rows[1:] if r["question1"].get(score)]
            if not tests:
                continue
            ns.update(n for n, _ in tests)
            x = np.array([n for n, _ in tests], dtype=float) * 2 ** (0.1 * (i - (len(series) - 1) / 2))
            draw_intervals(ax, x, [(t["estimate"], *t["ci"]) for _, t in tests], legend, "o")
        shortest = label(series[0][1][0]["series"]) if series and series[0][1] else "the shortest N"
        difference_axes(ax, sorted(ns), f"Δ {name} per bar vs {shortest}", f"{name}: N minus {shortest} (< 0: better)")
    fig.suptitle("Question 1: paired differences over training runs, 95 % intervals")
    # one legend below both panels, where it hides no interval
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0]:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.07 if handles else 0, 1, 1))
    return save_figure(fig, path)
