"""Data-layer benchmark (figures for the README / closing notes, not a test).

    python benchmarks/bench_data.py --store STORE_ROOT [--repeat 5]

1. load_bars of every bar in a store holding all of 2017-08..2025-06 (4,131,128 1-minute bars): target <= 1.5 s.
2. import of one year of daily Binance archive zips (365 files, generated from the shared 2023
   bars, millisecond timestamps as Binance wrote them then) into an empty store: <= 10 s.
3. a second import of the same 365 files (idempotent: nothing written).
Reports min and median wall time over --repeat runs. The memory of importing a month of 1-second
bars (2.6 M rows, streamed) is measured by `benchmarks/bench_1s.py import`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from tsflash.data import ingest, store

REPO = Path(__file__).resolve().parent.parent


def timed(fn, repeat: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), out


def make_daily_zips(bars: store.Bars, folder: Path, unit: str) -> list[Path]:
    day = bars.open_time // store.US_PER_DAY
    bounds = np.flatnonzero(np.diff(day)) + 1
    paths = []
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(day)], strict=True):
        d = dt.date(1970, 1, 1) + dt.timedelta(days=int(day[lo]))
        name = f"{bars.symbol}-{bars.interval}-{d.isoformat()}"
        path = folder / f"{name}.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{name}.csv", ingest.binance_csv(bars.slice(int(lo), int(hi)), unit))
        paths.append(path)
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="store root holding all 2017-2025 BTCUSDT 1m bars")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not (args.store / "btcusdt-1m").is_dir():
        print(f"no btcusdt-1m bars under {args.store}", file=sys.stderr)
        return 1

    store.load_bars(args.store)  # warm the page cache
    mn, med, bars = timed(lambda: store.load_bars(args.store), args.repeat)
    print(f"load_bars all: {len(bars):,} bars, min {mn:.3f} s, median {med:.3f} s (target <= 1.5 s)")
    mn, med, gaps = timed(lambda: store.gap_table(args.store), args.repeat)
    print(f"gap_table all: {len(gaps)} gaps, min {mn:.3f} s, median {med:.3f} s")
    mn, med, day = timed(lambda: store.load_bars(args.store, start="2023-03-24", end="2023-03-24"), args.repeat)
    print(f"load_bars one day: {len(day):,} bars, min {mn * 1e3:.1f} ms, median {med * 1e3:.1f} ms")

    year = store.load_bars(args.store, start="2023-01-01", end="2023-12-31")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "zips"
        src.mkdir()
        zips = make_daily_zips(year, src, "ms")
        roots = iter(range(10**6))

        def fresh_import():
            return ingest.import_paths(zips, Path(tmp) / f"store{next(roots)}")

        repeat = max(1, min(args.repeat, 3))
        mn, med, rep = timed(fresh_import, repeat)
        print(f"import {len(zips)} daily zips ({rep.rows:,} rows) into an empty store: min {mn:.2f} s, median {med:.2f} s (target <= 10 s)")
        root = Path(tmp) / "store0"
        mn, med, rep = timed(lambda: ingest.import_paths(zips, root), repeat)
        print(f"re-import the same {len(zips)} zips (no change, {rep.duplicates:,} duplicates): min {mn:.2f} s, median {med:.2f} s")
        loaded = store.load_bars(root)
        assert store.fingerprint(loaded) == store.fingerprint(year), "imported year differs from the shared Parquet"
    return 0


if __name__ == "__main__":
    sys.exit(main())
