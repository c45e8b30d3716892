"""Eager against compiled training at the chosen rule: what does `train.compile=true` buy a cell of
the third edition, compile time included? (reports/recipes/README.md, "Its hours against the rule's
measured cells").

The compiled step is measured faster on the H200 (2.0x at N=512, 1.15x at 32768: reports/bench/mfu.md),
but a cell also compiles each of its shapes (long windows, the rule's short windows, scoring), and a
resumed slice compiles them again; whether the plan should set it is a whole cell's question. Two
sweeps, one after the other on one device (so neither shares it): the rule at N=512 and the longest
N, one fold, one seed, validation only on BTC (no test figure is printed or reported), eager then
compiled. Per N: training and scoring seconds, steps, the compile outcome and its first-call seconds,
and compiled over eager.

    python lab/compile_check.py --data .carry/data --out runs/compile-check      # on the H200
    python lab/compile_check.py --out runs/compile-check --summary-only

On the lent H200 (carry .whl and .carry with the packed BTC bars; about 8 minutes): `source
lab/device_env.sh && python3 lab/compile_check.py --data .carry/data && cp
runs/compile-check/summary.* "$OUT"/`.

On a machine without CUDA the compiled sweep runs eager (fastpath's rule: compiling a CPU cell costs
more than it saves) and the summary says so in its compile column.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash.atomic import write_json, write_text  # noqa: E402
from tsflash.config import parse_overrides  # noqa: E402
from tsflash.runfolder import RunFolder  # noqa: E402

log = logging.getLogger("compile_check")

RULE = ("train.short_fraction=0.25", "train.ema_decay=0.98", "train.restarts=4", "train.restart_screen=400")
ONE_CELL = ("splits.n_folds=1", "train.seeds=[0]")
MODES = ("eager", "compiled")


def run_sweeps(out: Path, variants: dict[str, list[str]], data: str, lengths: list[int], device: str, preset: str,
               validation_only: bool = False) -> None:
    """One sweep per variant (its folder under `out`, its overrides), one after the other on one
    device; a complete sweep is not run again."""
    from tsflash.sweep.run import SweepOptions, run_sweep

    for name, overrides in variants.items():
        folder = out / name
        if RunFolder(folder).exists() and RunFolder(folder).is_complete():
            continue
        log.info("%s: %s", name, " ".join(overrides))
        run_sweep(SweepOptions(lengths=lengths, data=data, out=folder, device=device, preset=preset, precision=False,
                               validation_only=validation_only, overrides=parse_overrides(overrides),
                               command=" ".join(sys.argv)))


def run_both(out: Path, data: str, lengths: list[int], device: str, preset: str, extra: list[str]) -> None:
    variants = {mode: [*RULE, *ONE_CELL, *extra, f"train.compile={'true' if mode == 'compiled' else 'false'}"]
                for mode in MODES}
    run_sweeps(out, variants, data, lengths, device, preset,
               validation_only=not data.startswith("synthetic:"))  # BTC: no test figure read


def cell_costs(root: Path) -> dict[int, dict]:
    """{N: the cell's timing record}: seconds training (all restarts) and scoring, steps trained, the
    compile outcome and the seconds of its first calls (compiling)."""
    cells, _ = RunFolder(root).cell_summaries()
    out = {}
    for cell in cells:
        cost = cell["cost"]
        compile_info = cost.get("compile") or {}
        out[int(cell["n"])] = {"train_seconds": cost["train_seconds"], "eval_seconds": cost.get("eval_seconds"),
                               "steps": cost.get("steps"), "stop_step": cost.get("stop_step"),
                               "compiled": bool(compile_info.get("compiled")), "reason": compile_info.get("reason"),
                               "first_call_seconds": sum((compile_info.get("first_call_seconds") or {}).values())}
    return dict(sorted(out.items()))


def summarize(out: Path) -> dict:
    """Per N both modes' records and compiled over eager (training, and training plus scoring)."""
    modes = {mode: cell_costs(out / mode) for mode in MODES if RunFolder(out / mode).exists()}
    rows = {}
    for n in sorted(set.intersection(*(set(m) for m in modes.values()))) if len(modes) == len(MODES) else []:
        eager, compiled = modes["eager"][n], modes["compiled"][n]

        def total(r):
            return r["train_seconds"] + (r["eval_seconds"] or 0.0)
        rows[n] = {"eager": eager, "compiled": compiled, "train_ratio": compiled["train_seconds"] / eager["train_seconds"],
                   "cell_ratio": total(compiled) / total(eager)}
    return {"modes": modes, "rows": rows}


def render(summary: dict) -> str:
    lines = ["# Eager against compiled training at the chosen rule", "",
             f"`{' '.join(RULE)}`, one fold and one seed (`{' '.join(ONE_CELL)}`), each sweep alone on the device. "
             "Seconds: training (all restarts, compiling included) and scoring; first calls: the seconds of the "
             "compiled forward's first call per shape (its compiling). Ratio: compiled over eager (< 1: compiling "
             "pays). From `python lab/compile_check.py`.", "",
             "| N | eager: train s | eager: score s | compiled: train s | compiled: score s | compiled? | first calls s "
             "| steps (eager, compiled) | train ratio | cell ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n, row in summary["rows"].items():
        e, c = row["eager"], row["compiled"]
        done = "yes" if c["compiled"] else f"no ({c['reason']})"
        lines.append(f"| {n} | {e['train_seconds']:.1f} | {e['eval_seconds'] or 0:.1f} | {c['train_seconds']:.1f} "
                     f"| {c['eval_seconds'] or 0:.1f} | {done} | {c['first_call_seconds']:.1f} | {e['steps']}, {c['steps']} "
                     f"| {row['train_ratio']:.2f} | {row['cell_ratio']:.2f} |")
    return "\n".join(lines + [""])


def parser(doc: str, out: str, lengths: str) -> argparse.ArgumentParser:
    """The options of a script that runs sweeps of one cell per N into OUT and summarizes them."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(out), help="folder of the sweeps and the summary")
    ap.add_argument("--data", default="data", help="bar store (default: data), or a synthetic: source")
    ap.add_argument("--lengths", default=lengths, help=f"context lengths (default {lengths})")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="full", help="sweep preset (default full)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="another override for every sweep")
    ap.add_argument("--summary-only", action="store_true", help="only (re)write the summary from the sweeps in OUT")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "runs/compile-check", "512,32768")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.summary_only:
        run_both(args.out, args.data, [int(n) for n in args.lengths.split(",")], args.device, args.preset, args.overrides)
    summary = summarize(args.out)
    write_json(args.out / "summary.json", summary)
    write_text(args.out / "summary.md", render(summary))
    print(json.dumps({n: round(r["cell_ratio"], 3) for n, r in summary["rows"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
