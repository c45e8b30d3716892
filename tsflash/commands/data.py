"""`tsflash data import|info|fetch|verify|pack|unpack`: build, inspect and carry the canonical bar store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tsflash.commands import options
from tsflash.data import store
from tsflash.errors import UserError


def register(sub) -> None:  # long: the subcommand's options, one call each
    p = sub.add_parser(
        "data",
        help="import, fetch and inspect BTC bars (the canonical Parquet store)",
        description="Build and inspect the bar store: <root>/<symbol>-<interval>/<symbol>-<interval>-<YYYY>.parquet.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", parser_class=type(p))
    dsub.required = True

    def common(q):
        q.add_argument("--root", type=Path, default=store.DEFAULT_ROOT, help="store root folder (default: %(default)s)")

    def dataset(q):  # info and fetch name one dataset
        common(q)
        q.add_argument("--symbol", type=options.symbol_type, default="BTCUSDT", help="(default: %(default)s)")
        q.add_argument(
            "--interval",
            type=options.interval_type,
            default="1m",
            help="bar interval: 1s, 1m, 5m, 1h, ... (default: %(default)s)",
        )

    q = dsub.add_parser(
        "import",
        help="import Binance kline archives (.zip/.csv) or canonical .parquet files",
        description="Validate and merge Binance kline archives (zip or csv, ms or us timestamps, with or "
        "without header) and canonical Parquet files into the store. Every file is checked before "
        "anything is written; identical duplicates are dropped; importing twice changes nothing.",
    )
    q.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="files, or folders searched for .zip/.csv/.parquet"
    )
    common(q)
    q.add_argument(
        "--symbol",
        type=options.symbol_type,
        default=None,
        help="symbol (default: from each file name, e.g. BTCUSDT-1m-2024-01.zip)",
    )
    q.add_argument(
        "--interval", type=options.interval_type, default=None, help="interval (default: from each file name)"
    )
    q.set_defaults(func=cmd_import)

    q = dsub.add_parser(
        "info",
        help="coverage per year, the gap table and zero-volume bar counts",
        description="Coverage per year, every gap (start, length) and zero-volume bars of one dataset.",
    )
    dataset(q)
    q.add_argument("--start", type=options.date_type, default=None, help="first day YYYY-MM-DD (default: first bar)")
    q.add_argument(
        "--end", type=options.date_type, default=None, help="last day YYYY-MM-DD, inclusive (default: last bar)"
    )
    q.add_argument(
        "--min-gap",
        type=options.positive_int,
        default=1,
        help="list gaps of at least this many missing bars (default: %(default)s)",
    )
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    q.set_defaults(func=cmd_info)

    q = dsub.add_parser(
        "fetch",
        help="download Binance public archives (SHA-256 verified), then import them",
        description="Download monthly archives (daily ones for the current month) from the Binance public "
        "data archive or a mirror, verify each against its .CHECKSUM, cache them in <root>/_archive and "
        "import them. Nothing is imported unless every downloaded file verified. 1-second bars "
        "(--interval 1s) come as ~90 MB a month; the import streams them.",
    )
    dataset(q)
    q.add_argument("--start", type=options.date_type, required=True, help="first day YYYY-MM-DD")
    q.add_argument(
        "--end", type=options.date_type, default=None, help="last day YYYY-MM-DD, inclusive (default: yesterday, UTC)"
    )
    q.add_argument(
        "--base-url",
        default=None,
        help="archive base: http(s)://..., file://... or a local folder (default: https://data.binance.vision)",
    )
    q.add_argument(
        "--retries",
        type=options.non_negative_int,
        default=4,
        help="retries per file, with exponential backoff (default: %(default)s)",
    )
    q.add_argument(
        "--backoff",
        type=options.non_negative_float,
        default=1.0,
        help="first retry delay in seconds, doubling (default: %(default)s)",
    )
    q.add_argument(
        "--timeout", type=options.positive_float, default=60.0, help="seconds per request (default: %(default)s)"
    )
    q.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    q.set_defaults(func=cmd_fetch)

    q = dsub.add_parser(
        "verify",
        help="check every year file of a store against its manifest, read it in full and check its bars",
        description="Check each year file's SHA-256 and row count against the store's manifest.json, read every "
        "column and check the bar rules; print one line a file. Exit status 2 when any file fails. --write "
        "records the files as they are (after they read and their bars pass) in the manifest.",
    )
    q.add_argument(
        "path",
        type=Path,
        nargs="?",
        default=store.DEFAULT_ROOT,
        metavar="PATH",
        help="store root or one dataset folder (default: %(default)s)",
    )
    q.add_argument(
        "--write",
        action="store_true",
        help="record the files as they are now (a store made before manifests, or a change that is yours)",
    )
    q.set_defaults(func=cmd_verify)
    _register_transport(dsub, common, dataset)


def _register_transport(dsub, common, dataset) -> None:
    """`data pack` and `data unpack` (tsflash.data.transport)."""
    q = dsub.add_parser(
        "pack",
        help="pack year files losslessly for transport (about 35%% smaller)",
        description="Write one compact Parquet a year (<out>/<symbol>-<interval>-<YYYY>.packed.parquet): prices "
        "and volumes as exact integers, checksummed. Refuses, writing nothing, when a value would not "
        "round-trip bit for bit. `tsflash data unpack` rebuilds the store files.",
    )
    dataset(q)
    q.add_argument("--out", type=Path, required=True, help="folder for the packed files")
    q.add_argument(
        "--start",
        type=options.int_type(1970),
        default=None,
        metavar="YYYY",
        help="first year (default: the first stored)",
    )
    q.add_argument(
        "--end",
        type=options.int_type(1970),
        default=None,
        metavar="YYYY",
        help="last year, inclusive (default: the last stored)",
    )
    q.set_defaults(func=cmd_pack)

    q = dsub.add_parser(
        "unpack",
        help="rebuild store year files from packed files, verified against their checksums",
        description="Decode packed files (a folder of *.packed.parquet, or files) into the store at --root; "
        "refuses, writing nothing, when a year file is already there or a checksum does not match.",
    )
    q.add_argument("src", type=Path, nargs="+", metavar="SRC", help="a folder of packed files, or packed files")
    common(q)
    q.set_defaults(func=cmd_unpack)


def _print_import(report) -> None:
    units = ", ".join(f"{n} {u}" for u, n in sorted(report.units.items()))
    print(f"read {report.files} files ({units}), {report.rows} rows; {report.duplicates} identical duplicates dropped")
    if not report.added:
        print("store unchanged: every bar was already there")
    for (sym, ivl, year), n in sorted(report.added.items()):
        print(f"  {sym} {ivl} {year}: +{n} bars")


def cmd_import(args: argparse.Namespace) -> int:
    from tsflash.data.ingest import import_paths

    report = import_paths(args.paths, args.root, args.symbol, args.interval)
    _print_import(report)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from tsflash.data.fetch import ARCHIVE_URL, fetch

    report = fetch(
        args.symbol, args.interval, args.start, args.end, args.root, args.base_url or ARCHIVE_URL,
        retries=args.retries, backoff=args.backoff, timeout=args.timeout, progress=not args.no_progress,
    )  # fmt: skip
    print(
        f"archive files: {len(report.downloaded)} downloaded, {len(report.cached)} already verified, "
        f"{len(report.missing)} not published, {report.retries} retries"
    )
    for rel in report.missing:
        print(f"  not in the archive: {rel}")
    _print_import(report.imported)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from tsflash.data._verify import verify_store

    checks = verify_store(args.path, write=args.write)
    for c in checks:
        rows = f"{c.rows:>10,} rows" if c.rows is not None else " " * 15
        detail = f"  {c.detail}" if c.detail else ""
        print(f"{c.status.upper():<12} {c.path.name:<28} {rows} {c.seconds:6.2f} s{detail}")
    failed = [c for c in checks if c.failed]
    unrecorded = [c for c in checks if c.status == "unrecorded"]
    if unrecorded:
        print(
            f"{len(unrecorded)} year files have no recorded checksum (bars checked only): "
            f"`tsflash data verify --write {args.path}` records them"
        )
    if failed:
        raise UserError(
            f"verify: {len(failed)} of {len(checks)} files failed in {args.path}: "
            + "; ".join(f"{c.path.name} {c.status}" for c in failed)
        )
    print(f"verified {len(checks)} files in {args.path}: all good")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from tsflash.data import transport

    if args.start is not None and args.end is not None and args.end < args.start:
        raise UserError(f"--end {args.end} is before --start {args.start}")
    years = None
    if args.start is not None or args.end is not None:
        stored = store.year_files(args.root, args.symbol, args.interval)
        years = [y for y in stored if (args.start or y) <= y <= (args.end or y)]
        if stored and not years:
            raise UserError(
                f"no {args.symbol} {args.interval} year in {args.start}..{args.end} in {args.root}; "
                f"years there: {', '.join(map(str, stored))}"
            )
    written = transport.pack_store(args.root, args.out, args.symbol, args.interval, years)
    total = sum(p.stat().st_size for p in written)
    print(f"packed {len(written)} year files into {args.out}: {total / 1e6:.1f} MB")
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    from tsflash.data import transport

    src = args.src[0] if len(args.src) == 1 and args.src[0].is_dir() else args.src
    written = transport.unpack(src, args.root)
    print(f"unpacked {len(written)} year files into {args.root} (checksums verified)")
    return 0


def summarize(root, symbol="BTCUSDT", interval="1m", start=None, end=None, min_gap=1) -> dict:
    """Coverage per year, gaps and zero-volume counts of one dataset, as a JSON-ready dict.

    Coverage of a year = bars / grid points between the dataset's first and last bar within that
    year (so a series that starts in August is not "missing" January..July). The bars are read as
    the sweep reads them, checked year by year: a damaged file is a UserError, not a summary.
    """
    parts: dict[str, list[np.ndarray]] = {"open_time": [], "volume": [], "trades": []}
    for bars in store.year_bars(root, symbol, interval, start, end):
        for name, kept in parts.items():
            kept.append(getattr(bars, name).copy())  # a copy lets the year's other columns go
    ot, volume, trades = (np.concatenate(kept) if kept else np.empty(0) for kept in parts.values())
    ivl = store.INTERVAL_US[interval]
    out = {"root": str(root), "symbol": store.check_symbol(symbol), "interval": interval, "bars": int(len(ot))}
    if len(ot) == 0:
        out.update(first=None, last=None, years=[], gaps=[], zero_volume_bars=0)
        return out
    gaps = store.find_gaps(ot, ivl)
    years = store.year_of(ot)
    rows = []
    for y in np.unique(years).tolist():
        sel = years == y
        lo = max(store.year_start_us(y), int(ot[0]))
        hi = min(store.year_start_us(y + 1) - ivl, int(ot[-1]))
        lo = -(-lo // ivl) * ivl  # first grid point >= lo
        expected = (hi - lo) // ivl + 1
        n = int(sel.sum())
        rows.append(
            {
                "year": y,
                "first": store.iso(ot[sel][0]),
                "last": store.iso(ot[sel][-1]),
                "bars": n,
                "missing": int(expected - n),
                "coverage_pct": round(100 * n / expected, 4),
                "zero_volume_bars": int((volume[sel] == 0).sum()),
                "zero_trade_bars": int((trades[sel] == 0).sum()),
            }
        )
    shown = gaps.filter(min_gap)
    out.update(
        first=store.iso(ot[0]),
        last=store.iso(ot[-1]),
        missing=int(gaps.missing.sum()),
        zero_volume_bars=int((volume == 0).sum()),
        years=rows,
        n_gaps=len(gaps),
        min_gap=min_gap,
        gaps=shown.to_records(),
    )
    return out


def _duration(bars_missing: int, ivl_us: int) -> str:
    s = bars_missing * ivl_us // 1_000_000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return " ".join(f"{v}{u}" for v, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def cmd_info(args: argparse.Namespace) -> int:
    if args.start and args.end and args.end < args.start:
        raise UserError(f"--end {args.end} is before --start {args.start}")
    s = summarize(args.root, args.symbol, args.interval, args.start, args.end, args.min_gap)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{s['symbol']} {s['interval']} in {s['root']}: {s['bars']:,} bars", end="")
    if not s["bars"]:
        years = sorted(store.year_files(args.root, args.symbol, args.interval))
        span = str(years[0]) if years[0] == years[-1] else f"{years[0]}-{years[-1]}"
        print(f" (none in this range; the store's year files cover {span})")
        return 0
    print(f", {s['first']} .. {s['last']} UTC; {s['missing']:,} missing, {s['zero_volume_bars']:,} with zero volume")
    print()
    print(f"{'year':>4}  {'first':19}  {'last':19}  {'bars':>10}  {'missing':>8}  {'coverage':>9}  {'zero-vol':>8}")
    for r in s["years"]:
        print(
            f"{r['year']:>4}  {r['first']:19}  {r['last']:19}  {r['bars']:>10,}  {r['missing']:>8,}  "
            f"{r['coverage_pct']:>8.3f}%  {r['zero_volume_bars']:>8,}"
        )
    print()
    ivl = store.INTERVAL_US[s["interval"]]
    shown = f" ({len(s['gaps'])} with >= {s['min_gap']} missing bars)" if s["min_gap"] > 1 else ""
    print(f"gaps: {s['n_gaps']}{shown}; nothing is filled")
    if s["gaps"]:
        print(f"  {'start (first missing bar)':25}  {'missing bars':>12}  length")
        for g in s["gaps"]:
            print(f"  {g['start']:25}  {g['missing']:>12,}  {_duration(g['missing'], ivl)}")
    return 0
