"""A published run re-reported with the linear information probe per N as baseline rows (issue 29,
deliverable 4), on CPU: the run's folds, labels and bars (checked against its fingerprint), the
probe baselines `probe-<N>` fitted as `tsflash sweep` fits them under `eval.probe`
(`tsflash.engine.run_probes`), saved into a scratch copy of the folder as the sweep saves its
baselines (cell files, summaries, daily series), and the report built from that copy into OUT.
Nothing of the published folder changes; the model cells are the run's own.

    python lab/probe_rereport.py reports/h200-btcusdt-1m-second-edition --root data \
        --out reports/h200-btcusdt-1m-second-edition/rereport-2026-12-probe
    python lab/probe_rereport.py reports/controls/protocol/long-memory --out runs/probe-rereport-echo

A synthetic run rebuilds its bars from the seeded source in its data.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from lab.probe import market_bars  # noqa: E402
from tsflash import engine  # noqa: E402
from tsflash.config import config_from_dict, merge_overrides  # noqa: E402
from tsflash.report import build_report  # noqa: E402
from tsflash.runfolder import RunFolder, baseline_series_name, probe_n, probe_name, read_json, write_json  # noqa: E402
from tsflash.scoring.daily import baseline_losses, cell_returns, daily_series, write_losses  # noqa: E402
from tsflash.scoring.strategy import Strategy  # noqa: E402
from tsflash.sweep.run import cell_summary  # noqa: E402

log = logging.getLogger("probe_rereport")

# a run folder's derived reports and re-scorings: not copied into the scratch folder
SKIP = ("rereport-*", "rescored", "figures", "report.md", "report.html")


def add_probes(folder: RunFolder, cfg, bars) -> dict[str, list[float]]:
    """Fit, save and summarise the probe baselines of every fold into `folder` (a run folder whose
    config is `cfg`); then each probe's daily series and loss table. Returns seconds per fold."""
    prepared = engine.prepare(cfg, bars, device="cpu")
    strategy, fee = Strategy.from_config(cfg.to_dict()), cfg.eval.fee_bps
    n_folds, seconds = len(prepared.folds), []
    names = [probe_name(n) for n in sorted(cfg.lengths)]
    for k in range(n_folds):
        t0 = time.perf_counter()
        marker = read_json(folder.baseline_marker(k))
        for name, res in engine.run_probes(prepared, k).items():
            stem = folder.baseline_stem(k, name)
            res.save(stem)
            marker["baselines"][name] = cell_summary(res, folder, strategy, fee, kind="baseline",
                                                     key=baseline_series_name(name), name=name, params={}, fold=k,
                                                     seed=None, stem=stem)
        write_json(folder.baseline_marker(k), marker)
        seconds.append(time.perf_counter() - t0)
        log.info("fold %d: %d probes in %.1f s", k, len(names), seconds[-1])
    for name in names:
        parts = [cell_returns(folder.baseline_stem(k, name), fee, strategy) for k in range(n_folds)]
        folder.write_series(baseline_series_name(name), **daily_series(parts))
        write_losses(folder, baseline_series_name(name), baseline_losses(folder, name, n_folds))
    return {"fold_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished run folder (its config.json, data.json and cells)")
    ap.add_argument("--root", type=Path, default=Path("data/store"), help="the bar store, for a run on real bars")
    ap.add_argument("--out", type=Path, required=True, help="where the report goes (refused when it exists)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not (args.run / "config.json").exists() or not (args.run / "cells" / "baselines").is_dir():
        raise SystemExit(f"error: {args.run} is not a finished run folder (config.json and cells/baselines/)")
    if args.out.exists():
        raise SystemExit(f"error: {args.out} exists; a re-report is written once (choose another --out)")
    held = {name for p in (args.run / "cells" / "baselines").glob("*.cell.json")
            for name in json.loads(p.read_text())["baselines"] if probe_n(name) is not None}
    if held:
        raise SystemExit(f"error: {args.run} already has probe baselines ({', '.join(sorted(held))}); its own report shows them")
    t0 = time.perf_counter()
    cfg, bars = market_bars(args.run, args.root)
    cfg = config_from_dict(merge_overrides(cfg.to_dict(), {"eval": {"probe": True}}))
    with tempfile.TemporaryDirectory(prefix="probe-rereport-") as tmp:
        scratch = Path(tmp) / args.run.name
        shutil.copytree(args.run, scratch, ignore=shutil.ignore_patterns(*SKIP))
        folder = RunFolder(scratch)
        timing = add_probes(folder, cfg, bars)
        out = args.out.parent / f".{args.out.name}.partial"  # the report appears whole or not at all
        shutil.rmtree(out, ignore_errors=True)
        build_report(scratch, out_dir=out)
        out.rename(args.out)
    log.info("probe re-report: %s (%.0f s; probes %s s a fold)", args.out / "report.md", time.perf_counter() - t0,
             ", ".join(f"{s:.1f}" for s in timing["fold_seconds"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
