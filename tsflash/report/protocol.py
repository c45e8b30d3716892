"""The report's training-protocol section: how every N was trained, and whether that was enough.

`build(rd, nums, out_dir)` returns the section's context (rendered by protocol.md.j2 and
protocol.html.j2) and draws its figure; `setup_rows(rd)` are the rows it adds to the Setup table.
It reads only the cell summaries and config.json:

* learning curves: one panel per N, the validation loss (and the training loss) against the
  step for every fold and seed, the restored best step marked;
* stopping steps per N and fold (best / last step trained, per seed), and the convergence
  criterion: a fold is late when its best validation step falls within the last patience window
  of the maximum budget (a fold counts when any of its seeds does); for every N at most one fold
  in five (n_folds // 5, rounded down) may be late; else the budget is too short and the section
  and the first screen say so (`short_budget`);
* the seed-to-seed spread next to the differences between N;
* the benefit of the far context: each N scored with its context cut to fewer bars on the same
  test bars, full minus cut.

Runs made before validated stopping (no curves, no far-context scores) get the sentences that
say so instead of empty tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tsflash import atomic
from tsflash.model.rotary import rotary_base, rotary_wavelength
from tsflash.report.compute import Numbers
from tsflash.report.markdown import table as _table
from tsflash.report.rundata import RunData
from tsflash.report.wording import fmt, plural

HEADING = "Training protocol"
CAPTION = (
    "Learning curves per N: validation loss (solid) and training loss (dashed) against the step, every fold "
    "(colour) and seed; dots mark the restored best step"
)
LEGACY_ROTARY_BASE = 10000.0  # the fixed base of runs made before the rotary cover rule
# How every N gets the same training signal (tsflash.engine._train's module doc; the measurement
# behind it: benchmarks/bench_signal.py).
SIGNAL = (
    "one learning rate and schedule for every N (a per-N rate chosen on the validation tail moved the "
    "plateau by no more than the evaluation noise at toy size), each N trained to its own validated optimum "
    "(the same patience on the same validation tail, best weights restored), coverage-balanced windows, and a "
    "loss divided by the expected, not the drawn, number of scored positions"
)


def _model_cells(rd: RunData, nums: Numbers) -> dict[int, list[dict]]:
    """The default configuration's cells per N (trials searched with --trials are left out)."""
    keys = {s["series"]: s["n"] for s in nums.primary}
    out: dict[int, list[dict]] = {}
    for c in rd.cells:
        if c["key"] in keys:
            out.setdefault(keys[c["key"]], []).append(c)
    return dict(sorted(out.items()))


def _validated(cfg: dict) -> bool:
    return bool(cfg["splits"].get("val_days", 0))


def setup_rows(rd: RunData) -> list[list]:
    """Rows for the Setup table: validation and stopping, training signal, sampling, positions,
    seeds and the forecast per N, far context."""
    cfg = rd.config
    sp, tr = cfg["splits"], cfg["train"]
    purge = sp["purge"] if sp["purge"] >= 0 else cfg["labels"]["horizon"]
    if _validated(cfg):
        tail = (
            f"the last {plural(sp['val_days'], 'day')} of each fold's training range, purged by "
            f"{plural(purge, 'bar')} from the bars trained on (and by the fold's purge from the test block)"
        )
        patience = tr.get("patience", 0)
        stop = (
            f"validation loss every {plural(tr['eval_every'], 'step')} and at the last; stop after "
            f"{plural(patience, 'evaluation')} without improvement"
            if patience
            else f"validation loss every {plural(tr['eval_every'], 'step')}; no early stop"
        )
        stopping = f"{stop}, at most {plural(tr['steps'], 'step')}; best weights restored; the same rule for every N"
    else:
        tail = "none"
        stopping = f"a fixed budget of {plural(tr['steps'], 'step')} for every N (no validation tail)"
    cells = [c for c in rd.cells if c.get("cost")]
    recorded = next((c["cost"] for c in cells if "rotary_base" in c["cost"]), None)
    head_dim = cfg["model"]["d_model"] // cfg["model"]["n_heads"]
    if recorded is not None:
        base, wave = recorded["rotary_base"], recorded["rotary_wavelength"]
    else:  # cells from before the base was recorded used the fixed base of that code
        base = LEGACY_ROTARY_BASE if cells else rotary_base(head_dim, cfg["model"].get("rope_base", 0.0))
        wave = rotary_wavelength(head_dim, base)
    cover = "covers" if wave >= 4 * max(cfg["lengths"]) else "does NOT cover"
    cuts = cfg["eval"].get("context_cuts", [])
    seeds = tr["seeds"]
    return [
        ["validation tail", tail],
        ["stopping", stopping],
        ["training signal", SIGNAL if _validated(cfg) else "one learning rate, schedule and step count for every N"],
        [
            "sampling",
            "coverage-balanced windows: every training bar equally likely to be scored at every N"
            if any("curve" in c["cost"] for c in cells)
            else "uniform window starts (runs before balancing)",
        ],
        ["positions", f"rotary, base {base:,.0f}, slowest wavelength {wave:,.0f} bars: {cover} 4 × the longest N"],
        [
            "forecast per N",
            (
                f"each of {plural(len(seeds), 'seed')} separately: classification metrics are means over "
                "folds and seeds (spread in Training protocol); the trading series is the equal-weight "
                "portfolio of the seeds' positions per fold"
            )
            if len(seeds) > 1
            else "one seed: classification metrics are means over folds; the trading series is its positions",
        ],
        [
            "far context",
            f"each N > cut also scored with its context cut to the last {', '.join(map(str, cuts))} bars "
            "(the evaluation windows of that length) on the same test bars"
            if cuts
            else "not scored",
        ],
    ]


# ---- the section ---------------------------------------------------------------------------------


def _window(tr: dict) -> int:
    """The last patience window of the budget, in steps (one evaluation when patience is 0)."""
    return max(int(tr.get("patience", 0)), 1) * int(tr["eval_every"])


def late_folds(per_n: dict[int, list[dict]], cfg: dict) -> dict[int, list[int]]:
    """{N: the folds whose best validation step is late, after the start of the budget's last
    patience window (a fold counts when any of its seeds is)}."""
    limit = int(cfg["train"]["steps"]) - _window(cfg["train"])
    return {n: sorted({c["fold"] for c in cs if (c["cost"].get("best_step") or 0) > limit}) for n, cs in per_n.items()}


def short_budget(per_n: dict[int, list[dict]], cfg: dict) -> list[int]:
    """The N for which the convergence criterion fails: more late folds than one in five allows."""
    if not _validated(cfg):
        return []
    allowed = cfg["splits"]["n_folds"] // 5
    return [n for n, late in late_folds(per_n, cfg).items() if len(late) > allowed]


def stopping(per_n: dict[int, list[dict]], cfg: dict) -> tuple[dict, list[str]]:
    """(table of best/stop steps per N and fold, convergence sentences)."""
    tr, n_folds = cfg["train"], cfg["splits"]["n_folds"]
    limit = int(tr["steps"]) - _window(tr)
    allowed = n_folds // 5
    folds = sorted({c["fold"] for cs in per_n.values() for c in cs})
    late = late_folds(per_n, cfg)
    rows = []
    for n, cs in per_n.items():
        cells = {
            k: ", ".join(
                f"{c['cost'].get('best_step')}/{c['cost'].get('stop_step')}"
                for c in sorted(cs, key=lambda c: c["seed"])
                if c["fold"] == k
            )
            for k in folds
        }
        rows.append([n] + [cells[k] or "-" for k in folds] + [f"{len(late[n])} of {len(folds)}"])
    short = short_budget(per_n, cfg)
    # One wording, the table's: a late fold is counted in the last column, and at most `allowed` may be late.
    rule = (
        f"Convergence criterion: a fold is late when its best validation step comes after step {limit} of "
        f"{tr['steps']} (inside the last patience window; a fold counts when any of its seeds does); for every "
        f"N at most {allowed} of the {plural(n_folds, 'fold')} may be late (one in five, rounded down). The "
        "table's last column counts the late folds."
    )
    if short:
        verdict = (
            f"Not met for N = {', '.join(map(str, short))} (late folds: "
            f"{', '.join(f'{len(late[n])} of {len(folds)}' for n in short)}, more than {allowed}): the budget "
            f"train.steps = {tr['steps']} is too short for these N (their validation loss was still falling); "
            "their results are not at a validated optimum. Raise train.steps."
        )
    else:
        verdict = f"Met for every N: at most {allowed} late folds each, so each N stopped at a validated optimum."
    header = ["N"] + [f"fold {k}: best/last step" for k in folds] + ["late folds"]
    return _table(header, rows), [rule, verdict]


def largest_gap(per_n: dict[int, list[dict]]) -> tuple[float | None, float | None]:
    """(the largest |log-loss difference| of an N from the shortest, the largest seed sd), means
    over folds and seeds; the sd is None with one seed."""
    means = {}
    for n, cs in per_n.items():
        seeds = sorted({c["seed"] for c in cs})
        means[n] = np.array([np.mean([c["metrics"]["log_loss"] for c in cs if c["seed"] == s]) for s in seeds])
    if not means:
        return None, None
    first = next(iter(means))
    gap = max(abs(float(v.mean() - means[first].mean())) for v in means.values())
    sds = [float(np.std(v, ddof=1)) for v in means.values() if len(v) > 1]
    return gap, (max(sds) if sds else None)


def seed_spread(per_n: dict[int, list[dict]]) -> tuple[dict, str]:
    """Per N: mean test log-loss and accuracy, the spread between seeds (sd of the seeds' fold means)
    and the difference to the shortest N."""
    stats = {}
    for n, cs in per_n.items():
        seeds = sorted({c["seed"] for c in cs})
        stats[n] = {
            m: np.array([np.mean([c["metrics"][m] for c in cs if c["seed"] == s]) for s in seeds])
            for m in ("log_loss", "accuracy")
        }
    first: Any = next(iter(stats), None)  # a key of stats (None without any N)
    rows = []
    for n, st in stats.items():
        row: list[Any] = [n, len(st["log_loss"])]
        for m, spec in (("log_loss", ".4f"), ("accuracy", ".4f")):
            v = st[m]
            sd = float(np.std(v, ddof=1)) if len(v) > 1 else None
            row += [fmt(float(v.mean()), spec), fmt(sd, spec), fmt(float(v.mean() - stats[first][m].mean()), "+.4f")]
        rows.append(row)
    header = [
        "N",
        "seeds",
        "log-loss",
        "seed sd",
        f"log-loss − N={first}",
        "accuracy",
        "seed sd",
        f"accuracy − N={first}",
    ]
    gap, sd = largest_gap(per_n)
    if sd is None:
        note = (
            "One seed per N: the seed-to-seed spread is unknown, so differences between N cannot be judged against it."
        )
    else:
        note = (
            f"Means over folds and seeds; seed sd = standard deviation between the seeds' means over folds. The "
            f"largest log-loss difference from N={first} is {gap:.4f}, against a seed sd of up to {sd:.4f}."
        )
    return _table(header, rows), note


def far_context(per_n: dict[int, list[dict]]) -> dict | None:
    """Per N and cut: full and cut log-loss and accuracy, full − cut (mean ± sd over folds and seeds),
    and the paired test of the log-loss difference (`fold_t_test`)."""
    rows = []
    for n, cs in per_n.items():
        cuts = sorted({int(m) for c in cs for m in c.get("far_context") or {}})
        for m in cuts:
            scored = [c for c in cs if str(m) in (c.get("far_context") or {})]
            row: list[Any] = [n, m]
            for k in ("log_loss", "accuracy"):
                full = np.array([c["metrics"][k] for c in scored])
                cut = np.array([c["far_context"][str(m)][k] for c in scored])
                diff = full - cut
                sd = float(diff.std(ddof=1)) if len(diff) > 1 else 0.0
                row += [
                    fmt(float(full.mean())),
                    fmt(float(cut.mean())),
                    f"{fmt(float(diff.mean()), '+.4f')} ± {fmt(sd)}",
                ]
            test = fold_t_test(
                [(int(c["fold"]), c["metrics"]["log_loss"] - c["far_context"][str(m)]["log_loss"]) for c in scored]
            )
            rows.append(
                row + [len(scored), f"{test['better']}/{test['folds']}", fmt(test["t"], ".2f"), fmt(test["p"], ".3g")]
            )
    if not rows:
        return None
    header = [
        "N",
        "context cut to",
        "log-loss full",
        "log-loss cut",
        "full − cut",
        "accuracy full",
        "accuracy cut",
        "full − cut",
        "cells",
        "folds where far context helps",
        "t (folds)",
        "p",
    ]
    return _table(header, rows)


def fold_t_test(diffs: list[tuple[int, float]]) -> dict:
    """Paired test of full − cut log-loss: the seeds of a fold share its test bars, so they are
    averaged first and the test is a two-sided one-sample t over the fold means (k − 1 degrees of
    freedom). t and p are NaN with fewer than 2 folds or no spread between them."""
    folds: dict[int, list[float]] = {}
    for fold, d in diffs:
        folds.setdefault(fold, []).append(float(d))
    means = np.array([np.mean(v) for _, v in sorted(folds.items())])
    out = {"folds": len(means), "better": int((means < 0).sum()), "t": float("nan"), "p": float("nan")}
    if len(means) > 1 and np.ptp(means) > 0:
        from scipy import stats  # the t distribution (scipy comes with scikit-learn)

        res = stats.ttest_1samp(means, 0.0)
        out.update(t=float(res.statistic), p=float(res.pvalue))
    return out


def plot_curves(per_n: dict[int, list[dict]], path: Path) -> Path | None:
    """One panel per N: validation (solid) and training (dashed) loss against the step."""
    curves = {n: [c for c in cs if (c["cost"].get("curve") or {}).get("step")] for n, cs in per_n.items()}
    curves = {n: cs for n, cs in curves.items() if cs}
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.8), squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (n, cs) in zip(axes[0], curves.items(), strict=True):
        for c in cs:
            cv, colour = c["cost"]["curve"], colours[c["fold"] % len(colours)]
            ax.plot(
                cv["step"],
                cv["val_loss"],
                "-",
                color=colour,
                lw=1.2,
                label=f"fold {c['fold']}" if c["seed"] == min(x["seed"] for x in cs) else None,
            )
            ax.plot(cv["step"], cv["train_loss"], "--", color=colour, lw=0.7, alpha=0.6)
            ax.plot([c["cost"]["best_step"]], [c["cost"]["best_val_loss"]], "o", color=colour, ms=4)
        ax.set_title(f"N = {n}")
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("cross-entropy (nats)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    with atomic.atomic_path(path, keep_suffix=True) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    return path


def build(rd: RunData, nums: Numbers, out_dir: Path) -> dict:
    """The section's context: intro, figure, stopping table and criterion, seed spread, far context."""
    cfg = rd.config
    per_n = _model_cells(rd, nums)
    out: dict[str, Any]  # text, the figure's dict and the tables
    out = {
        "heading": HEADING,
        "figure": None,
        "stopping": None,
        "criterion": [],
        "far": None,
        "far_note": (
            "Full minus cut, mean ± sd over folds and seeds: a negative log-loss difference (positive for "
            "accuracy) means the bars beyond the cut improved the forecast. The cut scoring uses the "
            "evaluation windows of the cut's length, so a cut bar sees cut/2..cut bars of context. "
            "Paired test of the log-loss difference: the seeds of a fold share its test bars, so they "
            "are averaged per fold, and t is the two-sided one-sample t over the fold means (folds "
            "where far context helps: fold means below 0). Two cautions: the log-loss includes the "
            "flat-vs-move part, which a longer window can improve through volatility alone, with no "
            "direction skill; and a cut model sees less context than it was trained with."
        ),
    }
    if _validated(cfg) and any((c["cost"].get("curve") or {}).get("step") for cs in per_n.values() for c in cs):
        out["intro"] = (
            f"Every N was trained under one rule: {SIGNAL}. The curves show where each N's validation "
            "loss stopped improving; the table gives the restored best step and the last step trained."
        )
        path = plot_curves(per_n, out_dir / "figures" / "learning_curves.png")
        assert path is not None  # some N has a curve (checked above)
        out["figure"] = {"src": path.relative_to(out_dir).as_posix(), "file": path, "caption": CAPTION}
        out["stopping"], out["criterion"] = stopping(per_n, cfg)
    else:
        out["intro"] = (
            f"No validation tail: every N was trained for a fixed {plural(cfg['train']['steps'], 'step')} "
            "(a run made before validated stopping, or splits.val_days = 0). Nothing shows where each N "
            "stood on its learning curve, and the convergence criterion cannot be checked."
        )
    out["seeds"], out["seeds_note"] = seed_spread(per_n) if per_n else (None, "")
    out["far"] = far_context(per_n)
    return out
