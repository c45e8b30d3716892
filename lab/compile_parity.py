"""Compiled against eager training: the same numbers? One cell per N of today's default config
(one fold, one seed), trained eager, eager again, compiled, and eager at a second seed.

The replicate (eager again, the same cell) is the noise a compiled cell is held to: its test
log-loss and learning curve should differ from eager's by no more than the replicate's do. A GPU
kernel that is deterministic makes that noise zero; the second seed then says how large a
difference matters beside the spread of training runs. Per N: each variant's test log-loss, steps
and training seconds, and the gaps to eager (test log-loss; learning curve: the largest validation-
loss gap at a step both evaluated). A figure draws the four learning curves per N.

    python lab/compile_parity.py --data .carry/data --out runs/compile-parity      # on the GPU
    python lab/compile_parity.py --out runs/compile-parity --summary-only

Off CUDA the compiled sweep runs eager (fastpath's rule: compiling a CPU cell costs more than it
saves) and the summary says so.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from lab.compile_check import parser, run_sweeps  # noqa: E402
from tsflash.atomic import write_json, write_text  # noqa: E402
from tsflash.runfolder import RunFolder  # noqa: E402

ONE_CELL = ("splits.n_folds=1",)
# variant: (train.compile, seed); "eager-again" is the same cell as "eager" in its own run folder
VARIANTS = {"eager": (False, 0), "eager-again": (False, 0), "compiled": (True, 0), "eager-seed1": (False, 1)}
REFERENCE = "eager"


def run_all(out: Path, data: str, lengths: list[int], device: str, preset: str, extra: list[str]) -> None:
    """One sweep per variant, one after the other on one device; a complete sweep is not run again."""
    variants = {name: [*ONE_CELL, f"train.seeds=[{seed}]", *extra, f"train.compile={'true' if compiled else 'false'}"]
                for name, (compiled, seed) in VARIANTS.items()}
    run_sweeps(out, variants, data, lengths, device, preset)


def cell_record(cell: dict) -> dict:
    """What parity reads of a model cell's summary: test log-loss, learning curve, steps, seconds and
    whether it compiled (and why not)."""
    cost = cell["cost"]
    compile_info = cost.get("compile") or {}
    return {"log_loss": cell["metrics"]["log_loss"], "curve": {k: cost["curve"][k] for k in ("step", "val_loss")},
            "steps": cost.get("steps"), "train_seconds": cost["train_seconds"],
            "compiled": bool(compile_info.get("compiled")), "reason": compile_info.get("reason")}


def curve_gap(a: dict, b: dict) -> float | None:
    """The largest |validation loss a - b| at a step both curves evaluated (None: no common step)."""
    b_at = dict(zip(b["step"], b["val_loss"], strict=True))
    gaps = [abs(v - b_at[s]) for s, v in zip(a["step"], a["val_loss"], strict=True) if s in b_at]
    return max(gaps) if gaps else None


def verdict(compiled: float | None, replicate: float | None, seed: float | None) -> str:
    """Where compiled's |gap| to eager sits against the replicate's and the second seed's."""
    if compiled is None or replicate is None or seed is None:
        return "not comparable (no step both curves evaluated)"
    if compiled <= replicate:
        return "within the replicate's noise"
    if compiled <= seed:
        return "outside the replicate's noise, within the seed spread"
    return "outside the seed spread"


def summarize(out: Path) -> dict:
    """{"variants": {name: {N: record}}, "rows": {N: gaps to eager and verdicts}} for the Ns every
    variant trained."""
    variants = {}
    for name in VARIANTS:
        if RunFolder(out / name).exists():
            cells, _ = RunFolder(out / name).cell_summaries()
            variants[name] = {int(c["n"]): cell_record(c) for c in cells}
    rows = {}
    if len(variants) == len(VARIANTS):
        for n in sorted(set.intersection(*(set(v) for v in variants.values()))):
            ref = variants[REFERENCE][n]
            gaps = {name: {"log_loss": abs(variants[name][n]["log_loss"] - ref["log_loss"]),
                           "curve": curve_gap(variants[name][n]["curve"], ref["curve"])}
                    for name in VARIANTS if name != REFERENCE}
            rows[n] = {"gaps": gaps, **{f"{score}_verdict": verdict(*(gaps[v][score] for v in
                                                                       ("compiled", "eager-again", "eager-seed1")))
                                        for score in ("log_loss", "curve")}}
    return {"variants": variants, "rows": rows}


def render(summary: dict) -> str:
    v, lines = summary["variants"], [
        "# Compiled against eager training: the same numbers?", "",
        f"Today's default config, one cell per N (`{' '.join(ONE_CELL)}`, seed 0): eager, eager again (the "
        "replicate: its gap to eager is the noise), compiled, and eager at seed 1 (the seed spread). Gaps are "
        "absolute, to eager: the test log-loss (nats per bar) and the learning curve's largest validation-loss "
        "gap at a step both evaluated. From `python lab/compile_parity.py`.", "",
        "| N | eager log-loss | compiled? | gap: again | gap: compiled | gap: seed 1 | test log-loss | "
        "curve gap: again | curve gap: compiled | curve gap: seed 1 | learning curve | training s (eager, compiled) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, row in summary["rows"].items():
        g, c = row["gaps"], v["compiled"][n]
        done = "yes" if c["compiled"] else f"no ({c['reason']})"

        def fmt(x):
            return "-" if x is None else f"{x:.5f}"
        lines.append(f"| {n} | {v[REFERENCE][n]['log_loss']:.5f} | {done} | {fmt(g['eager-again']['log_loss'])} "
                     f"| {fmt(g['compiled']['log_loss'])} | {fmt(g['eager-seed1']['log_loss'])} | {row['log_loss_verdict']} "
                     f"| {fmt(g['eager-again']['curve'])} | {fmt(g['compiled']['curve'])} | {fmt(g['eager-seed1']['curve'])} "
                     f"| {row['curve_verdict']} | {v[REFERENCE][n]['train_seconds']:.1f}, {c['train_seconds']:.1f} |")
    return "\n".join(lines + [""])


def plot(summary: dict, path: Path) -> Path | None:
    """The four variants' learning curves (validation loss against step), one panel per N."""
    from tsflash.report.figures import pyplot, save_figure

    ns = list(summary["rows"])
    if not ns:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.4), squeeze=False)
    for ax, n in zip(axes[0], ns, strict=True):
        for name, style in zip(VARIANTS, ("-", "--", ":", "-."), strict=True):
            curve = summary["variants"][name][n]["curve"]
            ax.plot(curve["step"], curve["val_loss"], style, label=name)
        ax.set_title(f"N={n}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation log-loss (nats per bar)")
    axes[0][-1].legend(fontsize=8)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "runs/compile-parity", "512,4096,32768")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.summary_only:
        run_all(args.out, args.data, [int(n) for n in args.lengths.split(",")], args.device, args.preset, args.overrides)
    summary = summarize(args.out)
    write_json(args.out / "summary.json", summary)
    write_text(args.out / "summary.md", render(summary))
    plot(summary, args.out / "curves.png")
    print(json.dumps({n: row["log_loss_verdict"] for n, row in summary["rows"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
