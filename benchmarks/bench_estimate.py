"""The start-up estimate against the measured wall-clock of the README's main command (issue 31,
item 1; a benchmark, not a test).

    python benchmarks/bench_estimate.py                       # run `tsflash -v sweep --lengths 512,4096,32768`
    python benchmarks/bench_estimate.py --data path/to/store --out runs/bench-estimate
    python benchmarks/bench_estimate.py --measured runs/calib  # an earlier run of the same command: no training

Prints JSON (and writes it to <out>/estimate.json): the estimate the sweep logs before its first
cell (the calibrated cost model, `tsflash.sweep.progress`, for a new run of that command on this
machine), the measured wall-clock of the whole command (every phase: data, cells, precision
check, report), their ratio (target: within a factor 1.5), the ETA lines logged within the first
model cell (they must move) and the job's peak memory (the child's ru_maxrss, what
`/usr/bin/time -v` reports, beside run.json's `peak_memory`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

LENGTHS = "512,4096,32768"
TIME_RE = re.compile(r"(?:(?P<h>[\d.]+) h|(?P<d>[\d.]+) days|(?:(?P<m>\d+)m )?(?P<s>\d+)s)")


def parse_seconds(text: str) -> float:
    """The inverse of tsflash.sweep.progress.format_seconds: "5m 11s" -> 311, "2.5 h" -> 9000."""
    m = TIME_RE.search(text)
    if m is None:
        raise ValueError(f"not a duration: {text!r}")
    if m["h"]:
        return float(m["h"]) * 3600
    if m["d"]:
        return float(m["d"]) * 86400
    return int(m["m"] or 0) * 60 + int(m["s"])


def estimate_now(lengths: str, data: str) -> float:
    """The estimate a new run of the command gets on this machine, from the code as it is."""
    from tsflash.api import sweep_options
    from tsflash.sweep.plan import resolve_config
    from tsflash.sweep.progress import CostModel, fresh_works, prior_rates

    opts = sweep_options(lengths, data=data)
    cfg, _, _ = resolve_config(opts, "cpu")
    cost = CostModel(prior_rates("cpu"))
    return sum(cost.seconds(w) for w in fresh_works(cfg))


def first_cell_etas(log_text: str) -> list[str]:
    """The sweep ETAs of the step lines of the first model cell (DEBUG lines: the command runs with -v)."""
    etas, first = [], None
    for m in re.finditer(r"  (n\d+ fold \d+ seed \d+): step \d+ of \d+ .*sweep ETA (.+)", log_text):
        first = first or m[1]
        if m[1] == first:
            etas.append(m[2].strip())
    return etas


def wall_clock_of(run: Path) -> float:
    """created -> finished of run.json (one uninterrupted invocation)."""
    meta = json.loads((run / "run.json").read_text())
    t = [dt.datetime.fromisoformat(meta[k]) for k in ("created", "finished")]
    return (t[1] - t[0]).total_seconds()


def run_command(lengths: str, data: str, out: Path) -> tuple[float, str, int]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "tsflash.cli", "-v", "sweep", "--lengths", lengths, "--data", data, "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"the sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    (out / "bench-estimate.stderr").write_text(proc.stderr)
    return seconds, proc.stderr, peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default=LENGTHS)
    ap.add_argument("--data", default="data", help="bar store (default: data)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-estimate"), help="the run folder (a new one)")
    ap.add_argument("--measured", type=Path, help="a finished run of the same command: read its wall-clock, train nothing")
    args = ap.parse_args()
    estimate = estimate_now(args.lengths, args.data)
    if args.measured:
        run, measured, log_text, peak = args.measured, wall_clock_of(args.measured), "", None
    else:
        run = args.out
        measured, log_text, peak = run_command(args.lengths, args.data, run)
    peak_json = json.loads((run / "run.json").read_text()).get("peak_memory", {})
    result = {
        "command": f"tsflash sweep --lengths {args.lengths} --data {args.data}",
        "estimate_s": round(estimate, 1), "measured_s": round(measured, 1),
        "ratio_estimate_over_measured": round(estimate / measured, 3),
        "within_1.5x": 1 / 1.5 <= estimate / measured <= 1.5,
        "logged_estimate": (re.findall(r"estimated time for the remaining work: about ([^(]+)", log_text) or [None])[0],
        "first_cell_etas": first_cell_etas(log_text),
        "peak_rss_bytes_child": peak, "run_json_peak_memory_bytes": peak_json.get("bytes"),
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
    }
    text = json.dumps(result, indent=2)
    print(text)
    (run / "estimate.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
