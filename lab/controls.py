"""The positive and the noise control at full size (issue 17, item 7): can the default pipeline see
a long-context benefit when one exists, and does it see none when none exists?

Runs `tsflash sweep` (in this process, through the CLI, so the runs are ordinary resumable run
folders) on two synthetic markets with the bar count of the configured range (the default
2021-01-01..2025-06-30) and the default protocol:

    OUT/long-memory   --data synthetic:long-memory:SEED   a one-week echo (tsflash.data.synthetic.LongMemory):
                                                          only N=32768 reaches it; N=512, 4096 cannot
    OUT/random-walk   --data synthetic:random-walk:SEED   no N can beat another

then writes OUT/summary.md and OUT/summary.json: per N, the pooled test log-loss and the direction
hit rate (correct sign among bars both truly and predicted up/down, from each cell's confusion
matrix), and for every pair of lengths the paired difference over (fold, seed) cells with its t
statistic and two-sided p-value (scipy.stats.ttest_1samp), plus, on the long-memory market, the
oracle's hit rate on the same test bars (the sign of the planted drift, `echo_signal`): the best
any model can do.

    python lab/controls.py --out runs/controls --device cuda --time-budget 400   # rerun until done
    python lab/controls.py --out runs/controls --summary-only                    # just the summary
    python lab/controls.py --out runs/arm --against runs/controls                # an arm's cells beside the base run's

An ARM is the same control run with one knob changed (e.g. `--set train.patience=10 --set
train.steps=1200`, as many cells as the budget allowed): --against writes ARM/against.md and .json,
each of its cells beside the same (N, fold, seed) cell of the base run, to measure what the knob moves.

Resumable: each invocation continues both runs (long-memory first) where they stopped; with
--time-budget no new trial starts after that many seconds, counted over both sweeps. The summary
is written whenever both runs are complete. Only the cell summaries (*.cell.json) are read, not
the per-bar cells, so a run folder without its cells/*/*.npz (the device's state archive) still
gives the summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash import cli  # noqa: E402
from tsflash.atomic import write_json, write_text  # noqa: E402
from tsflash.data.synthetic import found_bar  # noqa: E402
from tsflash.runfolder import RunFolder, read_json  # noqa: E402

log = logging.getLogger("controls")

SOURCES = ("long-memory", "random-walk")
DEFAULT_LENGTHS = "512,4096,32768"
ALPHA = 0.05  # two-sided level of the paired tests
EXPECTED = {
    "long-memory": "the longest N beats every shorter N on log-loss (paired, p < 0.05)",
    "random-walk": "no N beats another on log-loss (no paired difference with p < 0.05)",
}


# ---------------------------------------------------------------------------------------------
# Reading cells (pure functions: tests/lab/test_controls.py checks them)


def direction_counts(confusion) -> tuple[int, int]:
    """(correct, total) among bars both truly and predicted up or down (rows true, columns
    predicted, order down/flat/up)."""
    c = np.asarray(confusion)
    return int(c[0, 0] + c[2, 2]), int(c[0, 0] + c[0, 2] + c[2, 0] + c[2, 2])


def cell_rows(cells: list[dict]) -> dict[int, dict[tuple[int, int], dict]]:
    """{N: {(fold, seed): {"log_loss", "n_scored", "hits", "directional"}}} from model cell summaries,
    plus, where the cell has them, "best_step", "stop_step" (validated stopping) and "cut" ({m: the
    test log-loss with the context cut to m bars})."""
    out: dict[int, dict] = {}
    for c in cells:
        m, cost = c["metrics"], c.get("cost") or {}
        hits, total = direction_counts(m["confusion"])
        row: dict[str, float | dict[int, float]] = {"log_loss": float(m["log_loss"]), "n_scored": int(m["n_scored"]),
                                                    "hits": hits, "directional": total}
        row |= {k: int(cost[k]) for k in ("best_step", "stop_step") if cost.get(k) is not None}
        if c.get("far_context"):
            row["cut"] = {int(k): float(v["log_loss"]) for k, v in sorted(c["far_context"].items(), key=lambda kv: int(kv[0]))}
        out.setdefault(int(c["n"]), {})[(int(c["fold"]), int(c["seed"]))] = row
    return dict(sorted(out.items()))


def found(rows: dict[tuple[int, int], dict], oracle_rate: float) -> int:
    """Cells that found the planted effect: a direction hit rate past half-way from a coin flip
    (0.5) to the oracle's."""
    bar = found_bar(oracle_rate)
    return sum(hit_rate(r) >= bar for r in rows.values())


def hit_rate(row: dict) -> float:
    return row["hits"] / row["directional"] if row["directional"] else math.nan


def pooled(rows: dict[tuple[int, int], dict]) -> dict:
    """Log-loss over every scored bar of every cell, and the direction hit rate over all cells."""
    n = sum(r["n_scored"] for r in rows.values())
    d = sum(r["directional"] for r in rows.values())
    return {"log_loss": sum(r["log_loss"] * r["n_scored"] for r in rows.values()) / n if n else math.nan,
            "hit_rate": sum(r["hits"] for r in rows.values()) / d if d else math.nan,
            "cells": len(rows)}


def paired(short: dict, long: dict, measure) -> dict:
    """Paired difference over the (fold, seed) cells both lengths have: measure(short) - measure(long)
    for log-loss (> 0: the longer is better), with the two-sided t test against 0 and the wins."""
    keys = sorted(set(short) & set(long))
    diffs = np.array([measure(short[k]) - measure(long[k]) for k in keys])
    out = {"pairs": len(keys), "mean": float(diffs.mean()) if len(keys) else math.nan,
           "sd": float(diffs.std(ddof=1)) if len(keys) > 1 else math.nan,
           "longer_better": int((diffs > 0).sum()), "t": math.nan, "p": math.nan}
    if len(keys) > 1 and np.ptp(diffs) > 0:
        res = stats.ttest_1samp(diffs, 0.0)
        out.update(t=float(res.statistic), p=float(res.pvalue))
    return out


def compare(by_n: dict[int, dict]) -> list[dict]:
    """Every pair of lengths (shorter, longer): paired differences of log-loss and hit rate."""
    rows = []
    for a, b in itertools.combinations(sorted(by_n), 2):
        rows.append({"short": a, "long": b,
                     "log_loss": paired(by_n[a], by_n[b], lambda r: r["log_loss"]),
                     "hit_rate": paired(by_n[b], by_n[a], hit_rate)})  # sign flipped: > 0 = the longer is better
    return rows


def verdict(source: str, pairs: list[dict]) -> dict:
    """Did the control come out as it must? long-memory: the longest N beats every shorter one
    (log-loss, paired, p < ALPHA); random-walk: no pair differs (p >= ALPHA or undefined)."""
    if not pairs:
        return {"expected": EXPECTED.get(source, ""), "as_expected": False}
    longest = max(p["long"] for p in pairs)
    if source == "long-memory":
        ok = all(p["log_loss"]["mean"] > 0 and p["log_loss"]["p"] < ALPHA for p in pairs if p["long"] == longest)
    else:
        ok = all(not (p["log_loss"]["p"] < ALPHA) for p in pairs)
    return {"expected": EXPECTED.get(source, ""), "as_expected": bool(ok)}


def oracle_hits(folder: RunFolder, cells: list[dict]) -> dict[int, dict] | None:
    """Per fold, the oracle's direction hit rate on the test bars of a long-memory run: the sign of
    the planted drift (`tsflash.data.synthetic.echo_signal`) against the true up/down labels (flat
    band of the fold's cells). Regenerates the bars from the run's config and source (seconds)."""
    import torch

    from tsflash.config import config_from_dict
    from tsflash.data.store import to_us
    from tsflash.data.synthetic import INTERVAL_US, LongMemory, echo_signal, grid_returns
    from tsflash.dataset.labels import forward_log_returns, make_labels
    from tsflash.sweep.source import load_data

    data = read_json(folder.data_json)
    if "params" not in data or not str(data["source"]).startswith("synthetic:long-memory"):
        return None  # the echo's oracle; other markets (synthetic:regime) have their own
    cfg = config_from_dict(read_json(folder.config_json))
    bars, _ = load_data(cfg, data["source"], default_seed=int(data["seed"]))
    step = INTERVAL_US[cfg.data.interval]
    g, slots = grid_returns(bars.open_time, bars.close, step)
    signal = echo_signal(g, LongMemory(**data["params"]), cfg.labels.horizon)[slots]
    fwd = forward_log_returns(torch.as_tensor(bars.close), torch.as_tensor(bars.open_time), cfg.labels.horizon, step)
    out = {}
    for c in cells:
        k = int(c["fold"])
        if k in out:
            continue
        test = (bars.open_time >= to_us(c["test_start"])) & (bars.open_time <= to_us(c["test_end"]))  # inclusive
        y = make_labels(fwd, float(c["flat_threshold"])).numpy()
        moving = test & ((y == 0) | (y == 2))
        hits = int((np.sign(signal[moving]) == np.where(y[moving] == 2, 1, -1)).sum())
        out[k] = {"hits": hits, "directional": int(moving.sum())}
    return dict(sorted(out.items()))


def summarize_run(root: Path, source: str, with_oracle: bool = True) -> dict:
    folder = RunFolder(root)
    cells, _ = folder.cell_summaries()
    by_n = cell_rows(cells)
    pairs = compare(by_n)
    data = read_json(folder.data_json) if folder.data_json.exists() else {}
    out = {"source": source, "run": str(root), "complete": folder.is_complete(), "data": data.get("source"),
           "description": data.get("description", "a seeded random walk, not market data"),
           "per_n": {n: pooled(rows) | {"per_cell": {f"fold{k}-seed{s}": r for (k, s), r in rows.items()}}
                     for n, rows in by_n.items()},
           "pairs": pairs, "verdict": verdict(source, pairs)}
    if with_oracle and source == "long-memory" and cells:
        hits = oracle_hits(folder, cells)
        if hits:
            total = sum(h["directional"] for h in hits.values())
            out["oracle"] = {"per_fold": hits, "hit_rate": sum(h["hits"] for h in hits.values()) / total}
            for n, rows in by_n.items():
                out["per_n"][n]["found"] = found(rows, out["oracle"]["hit_rate"])
    return out


# ---------------------------------------------------------------------------------------------
# summary.md


def _f(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def render_markdown(summary: dict) -> str:
    lines = ["# Controls: can the pipeline see a long-context benefit, and only when there is one?", "",
             "Two synthetic markets with the bar count of the configured range, run through the default sweep "
             "protocol (`lab/controls.py`). `long-memory`: the drift of each return echoes a move "
             "that ended `lag` bars earlier (`tsflash.data.synthetic.LongMemory`), so only a context that reaches back "
             "that far can use it; `random-walk`: the direction is unpredictable. "
             "Direction hit rate: correct sign among bars both truly and predicted up/down. "
             "Paired differences over the (fold, seed) cells that both lengths have; p: two-sided t test.", ""]
    for run in summary["runs"]:
        v = run["verdict"]
        lines += [f"## {run['source']} ({run['data'] or 'no data yet'})", "", f"The bars: {run['description']}.", "",
                  f"Expected: {v['expected']}. Outcome: **{'as expected' if v['as_expected'] else 'NOT as expected'}**"
                  + ("" if run["complete"] else " (the run is unfinished)") + ".", "",
                  "| N | cells | test log-loss (pooled) | direction hit rate |", "|---|---|---|---|"]
        for n, row in run["per_n"].items():
            lines.append(f"| {n} | {row['cells']} | {_f(row['log_loss'])} | {_f(row['hit_rate'])} |")
        if run.get("oracle"):
            rate = run["oracle"]["hit_rate"]
            lines.append(f"| oracle (sign of the planted drift) | | | {_f(rate)} |")
            counts = ", ".join(f"N={n}: {row['found']} of {row['cells']}" for n, row in run["per_n"].items())
            lines += ["", f"Cells that found the echo (direction hit rate >= {_f(found_bar(rate))}, half-way "
                      f"from a coin flip to the oracle): {counts}."]
        lines += ["", "| N | cell | test log-loss | direction hit rate | best step / stopped at | log-loss, context cut "
                  "to m bars |", "|---|---|---|---|---|---|"]
        for n, row in run["per_n"].items():
            for cell, r in row["per_cell"].items():
                steps = f"{r['best_step']} / {r['stop_step']}" if "best_step" in r else "n/a"
                cuts = ", ".join(f"{m}: {_f(v)}" for m, v in (r.get("cut") or {}).items()) or "-"
                lines.append(f"| {n} | {cell} | {_f(r['log_loss'])} | {_f(hit_rate(r))} | {steps} | {cuts} |")
        lines += ["", "| shorter vs longer N | pairs | log-loss shorter - longer (sd) | longer better | t | p "
                  "| hit rate longer - shorter | t | p |", "|---|---|---|---|---|---|---|---|---|"]
        for p in run["pairs"]:
            ll, hr = p["log_loss"], p["hit_rate"]
            lines.append(f"| {p['short']} vs {p['long']} | {ll['pairs']} | {_f(ll['mean'], '+.5f')} ({_f(ll['sd'], '.5f')}) "
                         f"| {ll['longer_better']}/{ll['pairs']} | {_f(ll['t'], '.2f')} | {_f(ll['p'], '.3g')} "
                         f"| {_f(hr['mean'], '+.4f')} | {_f(hr['t'], '.2f')} | {_f(hr['p'], '.3g')} |")
        lines.append("")
    if summary.get("commands"):
        lines += ["## How it was run", "", "```", *summary["commands"], "```", ""]
    return "\n".join(lines)


def against(arm: Path, base: Path, source: str) -> dict:
    """Each cell of the arm's run beside the same (N, fold, seed) cell of the base run: stopping,
    test log-loss and direction hit rate, and whether each found the echo (long-memory)."""
    arm_summary = summarize_run(arm / source, source, with_oracle=False)  # the same market: the base's oracle
    base_summary = summarize_run(base / source, source)
    oracle = (base_summary.get("oracle") or {}).get("hit_rate")
    bar = None if oracle is None else found_bar(oracle)
    rows = []
    for n, row in arm_summary["per_n"].items():
        base_cells = (base_summary["per_n"].get(n) or {}).get("per_cell", {})
        for cell, a in row["per_cell"].items():
            if (b := base_cells.get(cell)) is None:
                continue
            rows.append({"n": n, "cell": cell, **{f"{side}_{k}": r.get(k) for side, r in (("base", b), ("arm", a))
                                                   for k in ("best_step", "stop_step", "log_loss")},
                         "base_hit_rate": hit_rate(b), "arm_hit_rate": hit_rate(a),
                         "base_found": None if bar is None else hit_rate(b) >= bar,
                         "arm_found": None if bar is None else hit_rate(a) >= bar})
    arm_cfg, base_cfg = (read_json(RunFolder(r / source).config_json) for r in (arm, base))
    changed = {f"{sec}.{k}": (base_cfg[sec].get(k), v) for sec, d in arm_cfg.items() if isinstance(d, dict)
               for k, v in d.items() if base_cfg.get(sec, {}).get(k) != v}
    return {"source": source, "arm": str(arm / source), "base": str(base / source), "changed": changed,
            "oracle_hit_rate": oracle, "found_bar": bar, "cells": rows}


def render_against(result: dict) -> str:
    changed = ", ".join(f"`{k}` {a} -> {b}" for k, (a, b) in result["changed"].items()) or "nothing"
    lines = [f"# {result['source']}: an arm against its base run", "",
             f"Arm `{result['arm']}` against base `{result['base']}`: the same market, cells and seeds; changed: "
             f"{changed}. Only the cells the arm has are compared."
             + (" `train.steps` is also the length of the cosine learning-rate schedule, so the arm's rate decays "
                "more slowly too." if "train.steps" in result["changed"] else ""), ""]
    if not result["changed"]:
        lines += ["Nothing changed: the arm is a rerun of the same cells, so the differences are run-to-run noise "
                  "(on a GPU: kernels whose floating-point sums are not deterministic, such as the fused "
                  "attention's backward, or code changes that should not matter).", ""]
    if result["cells"]:
        d = np.array([r["arm_log_loss"] - r["base_log_loss"] for r in result["cells"]])
        moved = sum(r["arm_best_step"] != r["base_best_step"] for r in result["cells"])
        lines += [f"Test log-loss, arm minus base over {len(d)} cells: mean {_f(float(d.mean()), '+.5f')}, mean absolute "
                  f"{_f(float(np.abs(d).mean()), '.5f')}, largest absolute {_f(float(np.abs(d).max()), '.5f')}; the best "
                  f"step moved in {moved} of {len(d)}.", ""]
    if result["found_bar"] is not None:
        lines += [f"Found the echo: direction hit rate >= {_f(result['found_bar'])} (half-way from a coin flip to the "
                  f"oracle's {_f(result['oracle_hit_rate'])}).", ""]
    lines += ["| N | cell | best / stopped at (base) | best / stopped at (arm) | log-loss base | log-loss arm "
              "| hit rate base | hit rate arm | found: base, arm |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["cells"]:
        found = "n/a" if r["base_found"] is None else f"{'yes' if r['base_found'] else 'no'}, {'yes' if r['arm_found'] else 'no'}"
        lines.append(f"| {r['n']} | {r['cell']} | {r['base_best_step']} / {r['base_stop_step']} | {r['arm_best_step']} / "
                     f"{r['arm_stop_step']} | {_f(r['base_log_loss'])} | {_f(r['arm_log_loss'])} | "
                     f"{_f(r['base_hit_rate'])} | {_f(r['arm_hit_rate'])} | {found} |")
    return "\n".join(lines) + "\n"


def write_against(arm: Path, base: Path) -> list[dict]:
    results = [against(arm, base, s) for s in SOURCES
               if RunFolder(arm / s).exists() and RunFolder(base / s).exists()]
    if not results:
        raise SystemExit(f"--against: no control run in both {arm} and {base} (expected {' or '.join(SOURCES)})")
    write_json(arm / "against.json", results)
    write_text(arm / "against.md", "\n".join(render_against(r) for r in results))
    return results


def write_summary(out: Path, commands: list[str] | None = None) -> dict:
    runs = [summarize_run(out / s, s) for s in SOURCES if RunFolder(out / s).exists()]
    summary = {"runs": runs, "commands": commands or []}
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", render_markdown(summary))
    return summary


# ---------------------------------------------------------------------------------------------
# Running the sweeps


def data_arg(source: str, args) -> str:
    """synthetic:SOURCE:SEED, with --long-memory's parameters on the long-memory market."""
    extra = f":{args.long_memory}" if source == "long-memory" and args.long_memory else ""
    return f"synthetic:{source}:{args.seed}{extra}"


def sweep_argv(source: str, args, budget: float | None) -> list[str]:
    # --device all (or a comma list) is one sweep worker a device: the sweep's --devices
    several = args.device == "all" or "," in args.device
    argv = ["sweep", "--data", data_arg(source, args), "--lengths", args.lengths, "--out",
            str(args.out / source), "--devices" if several else "--device", args.device, "--preset", args.preset,
            "--config", args.config,
            "--no-precision"]  # the precision oracle checks the kernels, not the markets: the real run has it
    for item in args.overrides:
        argv += ["--set", item]
    if budget is not None:
        argv += ["--time-budget", f"{budget:.0f}"]
    return argv


def _order(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    if sorted(names) != sorted(SOURCES):
        raise argparse.ArgumentTypeError(f"name each of {', '.join(SOURCES)} once, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the two run folders and the summary")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS, help=f"context lengths (default {DEFAULT_LENGTHS})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic bars (default 0)")
    ap.add_argument("--long-memory", default="", metavar="KEY=VALUE,...",
                    help="parameters of the long-memory market, e.g. strength=0.1 (default: tsflash.data.synthetic.LongMemory)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:K; all or cuda:0,cuda:1: one sweep worker each")
    ap.add_argument("--preset", default="full", help="sweep preset (default full: the config as written)")
    ap.add_argument("--config", default="default", help="sweep config, a preset name or .toml path (default: default)")
    ap.add_argument("--order", default=",".join(SOURCES), type=_order,
                    help=f"which control runs first, both named (default {','.join(SOURCES)})")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override (repeatable)")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds after which no new trial starts")
    ap.add_argument("--summary-only", action="store_true", help="only (re)write the summary of the runs in --out")
    ap.add_argument("--against", type=Path, default=None, metavar="BASE",
                    help="only write --out/against.md: each cell of --out's runs beside the same cell of BASE's")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.against is not None:
        write_against(args.out, args.against)
        log.info("against: %s", args.out / "against.md")
        return 0
    commands = [shlex.join(["tsflash", *sweep_argv(s, args, None)]) for s in SOURCES]
    if not args.summary_only:
        t0 = time.monotonic()
        for source in args.order:
            left = None if args.time_budget is None else args.time_budget - (time.monotonic() - t0)
            if left is not None and left <= 0:
                log.info("time budget used before %s: run this command again to continue", source)
                break
            if RunFolder(args.out / source).exists() and RunFolder(args.out / source).is_complete():
                continue
            if (rc := cli.main(sweep_argv(source, args, left))) != 0:
                return rc
    done = all(RunFolder(args.out / s).exists() and RunFolder(args.out / s).is_complete() for s in SOURCES)
    if done or args.summary_only:
        summary = write_summary(args.out, commands)
        log.info("summary: %s (%s)", args.out / "summary.md",
                 ", ".join(f"{r['source']}: {'as expected' if r['verdict']['as_expected'] else 'NOT as expected'}"
                           for r in summary["runs"]))
    else:
        log.info("unfinished: run the same command again to continue")
    print(json.dumps({"complete": done, "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
