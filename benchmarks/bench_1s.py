"""1-second bars at scale (figures for the README, not a test; issue 18, items 2 and 4).

    python benchmarks/bench_1s.py import [--max-rss-mb 1024] [--days 31]
    python benchmarks/bench_1s.py year [--device cpu|cuda] [--days 365] [--store DIR]

import: writes three synthetic monthly Binance archives of 1-second bars (2024-12 with millisecond
    timestamps, 2025-01 and 2025-02 with microseconds, as Binance wrote them: 2.68 M, 2.68 M and
    2.42 M rows, ~500 MB of CSV each), imports them one after another into one store, each in a
    fresh process, and asserts that every import's peak RSS stays under --max-rss-mb (the last
    one merges into the 2025 year file the second one wrote). The import streams: the bound does
    not grow with the month or the year.
year: builds (or reuses, with --store) a store of --days days of synthetic 1-second bars from
    2024-07-01 (365 days = 31,536,000 bars), month by month through tsflash.data.store.merge_parts,
    then in a fresh process loads them (load_bars) and runs each stage of the pipeline with
    tsflash/presets/btc-1s.toml on --device, synchronised: features, forward returns, segments and
    gaps, flat band and labels, then engine.prepare + fold_data as the sweep calls them. Peak
    RSS, and CUDA's peak allocation on cuda.
Both print JSON and write it to runs/bench/1s/ (--out); never into reports/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tsflash.atomic import write_json  # noqa: E402
from tsflash.data import ingest, store  # noqa: E402
from tsflash.data.synthetic import random_walk_bars  # noqa: E402

SYMBOL, INTERVAL = "BTCUSDT", "1s"
MONTHS = (("2024-12", "ms"), ("2025-01", "us"), ("2025-02", "us"))


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB: VmHWM (Linux; reset by exec, unlike ru_maxrss,
    which a child started from a big parent inherits), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def synthetic_bars(first_day: dt.date, days: int, seed: int) -> store.Bars:
    """`days` whole UTC days of 1-second bars from `first_day`, with three gaps (dropped bars)."""
    n = days * 86_400
    bars = random_walk_bars(n, seed=seed, start=first_day.isoformat(), interval=INTERVAL, n_gaps=0)
    keep = np.ones(n, bool)
    rng = np.random.default_rng(seed)
    for lo in rng.integers(n // 10, 9 * n // 10, 3):
        keep[lo : lo + rng.integers(5, 121)] = False  # a gap never moves a bar off its day
    return store.Bars(**{c: getattr(bars, c)[keep] for c in store.COLUMNS}, symbol=SYMBOL, interval=INTERVAL)


def month_days(month: str) -> tuple[dt.date, int]:
    first = dt.date.fromisoformat(f"{month}-01")
    nxt = dt.date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return first, (nxt - first).days


def run_child(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"child {args[0]} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# import: a month's peak RSS


def cmd_import(args) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-1s-") as tmp:
        root = Path(tmp) / "store"
        for i, (month, unit) in enumerate(MONTHS):
            first, days = month_days(month)
            bars = synthetic_bars(first, min(days, args.days), seed=i)
            path = Path(tmp) / f"{SYMBOL}-{INTERVAL}-{month}.zip"
            csv = ingest.binance_csv(bars, unit)
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
                zf.writestr(path.with_suffix(".csv").name, csv)
            del bars
            row = run_child("_import", str(path), str(root))
            row |= {"month": month, "unit": unit, "csv_mb": round(len(csv) / 2**20, 1),
                    "zip_mb": round(path.stat().st_size / 2**20, 1)}
            del csv
            path.unlink()
            rows.append(row)
            print(json.dumps(row), flush=True)
        total = len(store.load_bars(root, SYMBOL, INTERVAL))
    worst = max(r["peak_rss_mb"] for r in rows)
    out = {"imports": rows, "stored_bars": total, "max_rss_mb": args.max_rss_mb, "worst_peak_rss_mb": worst,
           "within_bound": worst <= args.max_rss_mb}
    assert total == sum(r["bars_added"] for r in rows), (total, rows)
    assert out["within_bound"], f"a month's import peaked at {worst:.0f} MB RSS > --max-rss-mb {args.max_rss_mb}"
    return out


def child_import(zip_path: str, root: str) -> dict:
    base = peak_rss_mb()
    t0 = time.perf_counter()
    report = ingest.import_paths([Path(zip_path)], Path(root))
    return {"seconds": round(time.perf_counter() - t0, 2), "rows": report.rows, "bars_added": report.bars_added,
            "units": report.units, "peak_rss_mb": round(peak_rss_mb(), 1), "rss_after_imports_mb": round(base, 1)}


# ---------------------------------------------------------------------------------------------
# year: loading, features and labels of 31.5 M bars


def build_year_store(root: Path, days: int) -> None:
    """`days` days of 1-second bars from 2024-07-01, one month per Part (never the year in memory)."""
    parts, day, left, seed = [], dt.date(2024, 7, 1), days, 0
    while left > 0:
        first, in_month = day, month_days(day.strftime("%Y-%m"))[1] - day.day + 1
        n_days = min(left, in_month)

        def chunks(first=first, n_days=n_days, seed=seed):
            table = synthetic_bars(first, n_days, seed).to_table()
            table = table.append_column(store.ORIGIN, pa.array(np.arange(table.num_rows, dtype=np.int64)))
            for lo in range(0, table.num_rows, store.ROW_GROUP_SIZE):
                yield table.slice(lo, store.ROW_GROUP_SIZE)

        lo_us = store.to_us(first.isoformat())
        parts.append(store.Part(chunks, lo_us, lo_us + n_days * store.US_PER_DAY - 1,
                                lambda i, first=first: f"synthetic {first} row {i}"))
        day, left, seed = first + dt.timedelta(days=n_days), left - n_days, seed + 1
    store.merge_parts(root, {(SYMBOL, INTERVAL): parts})


def cmd_year(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-1s-") as tmp:
        root = args.store or Path(tmp) / "store"
        t0 = time.perf_counter()
        if not store.year_files(root, SYMBOL, INTERVAL):
            build_year_store(root, args.days)
        build_s = time.perf_counter() - t0
        out = run_child("_year", str(root), args.device, str(args.days))
    out["build_store_s"] = round(build_s, 1)
    return out


def segments_and_gaps(t_us, bars, max_gap_bars: int) -> tuple:
    from tsflash.dataset.windows import segment_ids  # imports torch: in the child only, as child_year does

    return segment_ids(t_us, bars.interval_us, max_gap_bars), store.find_gaps(bars.open_time, bars.interval_us)


def child_year(root: str, device: str, days: int) -> dict:
    import torch

    from tsflash.config import load_config
    from tsflash.dataset.features import as_tensor, compute_features
    from tsflash.dataset.labels import fit_flat_band, forward_log_returns, make_labels
    from tsflash.device import device_name, peak_memory_bytes, reset_peak_memory, resolve_device, sync
    from tsflash.engine import fold_data, prepare

    dev = resolve_device(device)
    end = (dt.date(2024, 7, 1) + dt.timedelta(days=days - 1)).isoformat()
    overrides = {"data": {"start": "2024-07-01", "end": end}}
    if days < 5 * 28 + 1:  # a short run for a quick look: two folds of a quarter of the days
        overrides["splits"] = {"n_folds": 2, "test_days": max(1, days // 4)}
    cfg = load_config("btc-1s", overrides)
    timings = {}

    def timed(name, fn):
        sync(dev)
        t = time.perf_counter()
        result = fn()
        sync(dev)
        timings[name] = round(time.perf_counter() - t, 3)
        return result

    bars = timed("load_bars_s", lambda: store.load_bars(root, SYMBOL, INTERVAL, "2024-07-01", end))
    rss_loaded = peak_rss_mb()
    reset_peak_memory(dev)
    feats = timed("features_s", lambda: compute_features(bars, device=dev))
    del feats
    close = as_tensor(bars.close, torch.float64, dev)
    t_us = as_tensor(bars.open_time, torch.int64, dev)
    # partials, not lambdas: the tensors are deleted below, before the run is prepared
    fwd = timed("forward_returns_s", partial(forward_log_returns, close, t_us, cfg.labels.horizon, bars.interval_us))
    timed("segments_and_gaps_s", partial(segments_and_gaps, t_us, bars, cfg.data.max_gap_bars))
    train = torch.arange(int(0.8 * len(bars)), device=dev)
    thr = timed("flat_band_s", partial(fit_flat_band, fwd, train, cfg.labels.flat_fraction))
    timed("labels_s", partial(make_labels, fwd, thr))
    del close, t_us, fwd, train
    prepared = timed("prepare_s", lambda: prepare(cfg, bars, device=dev))
    timed("fold_data_s", lambda: fold_data(prepared, 0))
    return {"device": str(dev), "device_name": device_name(dev), "bars": len(bars), "days": days,
            "features": list(prepared.features.shape), "timings": timings,
            "rss_after_load_mb": round(rss_loaded, 1), "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_device_memory_mb": round(peak_memory_bytes(dev) / 2**20, 1) if dev.type == "cuda" else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("import", help="peak RSS of importing synthetic 1-second months")
    q.add_argument("--max-rss-mb", type=float, default=1024.0, help="bound on each import's peak RSS (default: %(default)s)")
    q.add_argument("--days", type=int, default=31, help="days per month at most (default: whole months)")
    q = sub.add_parser("year", help="load, features and labels of a year of 1-second bars")
    q.add_argument("--device", default="cpu", help="cpu | cuda | cuda:K (default: cpu)")
    q.add_argument("--days", type=int, default=365, help="days of bars from 2024-07-01 (default: %(default)s)")
    q.add_argument("--store", type=Path, default=None, help="store root to build once and reuse (default: a temp folder)")
    for name in ("import", "year"):
        sub.choices[name].add_argument("--out", type=Path, default=REPO / "runs" / "bench" / "1s",
                                       help="folder for the JSON results (default: runs/bench/1s)")
    q = sub.add_parser("_import")  # internal: one import in a fresh process
    q.add_argument("zip")
    q.add_argument("root")
    q = sub.add_parser("_year")  # internal: loading and stages in a fresh process
    q.add_argument("root")
    q.add_argument("device")
    q.add_argument("days", type=int)
    args = ap.parse_args(argv)
    if args.cmd == "_import":
        print(json.dumps(child_import(args.zip, args.root)))
        return 0
    if args.cmd == "_year":
        print(json.dumps(child_year(args.root, args.device, args.days)))
        return 0
    out = cmd_import(args) if args.cmd == "import" else cmd_year(args)
    name = "import.json" if args.cmd == "import" else f"year-{args.days}d-{out['device'].split(':')[0]}.json"
    write_json(args.out / name, out)
    print(json.dumps(out, indent=1))
    print(f"written: {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
