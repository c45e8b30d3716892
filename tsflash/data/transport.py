"""A lossless, compact transport form of the bar store: exact round trip, or a refusal.

For a machine whose inputs are capped in size: 2021..2025 of BTCUSDT 1m bars are 53.6 MB as store
files. `pack_store` writes one packed Parquet a year, `<dst>/<symbol>-<interval>-<YYYY>.packed.parquet`,
and `unpack` rebuilds the canonical year files (`store.atomic_write_parquet`, `store.SCHEMA`) that
`store.load_bars` reads.

Encoding (the scales are found per file, not assumed; all arithmetic is on integers):
- float columns become int64 counts of 10^-k, with k the smallest of 0..8 for which every value
  decodes back bit for bit (`ints / 10**k` is the float64 value itself); the four prices share one
  k. A value no k reproduces -- 1/3, 0.1 + 0.2, NaN, inf, -0.0 -- is a UserError naming the file,
  column and value: nothing is ever packed lossily. NaN is refused rather than masked: the store
  has none (checked on 2017..2025).
- open_time is stored as first differences (the first value in the metadata); the prices against
  each other, as small numbers: open - previous close, close - open, high - max(open, close) and
  min(open, close) - low (exact for any integers, whether or not the bar is well formed); volumes
  and trades as they are. Each column is narrowed to int32 where its values fit, then zstd 19.
  On BTCUSDT 1m 2021..2025 this is 42.6 MB -> about 35 MB against 53.6 MB of store files.

The key-value metadata (key `tsflash.data.transport`, JSON) holds the symbol, interval, year, the codec
of every column and `store.fingerprint` of the original bars (sha256 of every column's bytes);
`unpack` decodes, recomputes the fingerprint and refuses on any difference.

Every write is atomic, and a whole call is all or nothing: the year files are written to temporary
siblings and renamed over their names only once every year has been encoded (or decoded and
verified), so a refusal in the last year leaves no file of the earlier ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tsflash import atomic
from tsflash.data import _manifest as manifest
from tsflash.data import store
from tsflash.errors import UserError

log = logging.getLogger(__name__)

META_KEY = b"tsflash.transport"
FORMAT = 1
MAX_DECIMALS = 8
SUFFIX = ".packed.parquet"
PRICES = store.PRICE_COLUMNS  # open, high, low, close
VOLUMES = ("volume", "taker_buy_base")
_PACKED_RE = re.compile(r"^(?P<stem>[a-z0-9]+-[0-9a-z]+)-(?P<year>\d{4})\.packed\.parquet$")
_INT32 = np.iinfo(np.int32)


def packed_name(symbol: str, interval: str, year: int) -> str:
    """<symbol lower>-<interval>-<YYYY>.packed.parquet"""
    return f"{store.check_symbol(symbol).lower()}-{interval}-{year:04d}{SUFFIX}"


# ---- one column ----------------------------------------------------------------------------------


def decimals(x: np.ndarray, where: str) -> int:
    """The smallest k in 0..MAX_DECIMALS with `np.rint(x * 10**k).astype(int64) / 10**k` equal to x
    bit for bit; UserError naming `where` and the first value no k reproduces."""
    bad = ~np.isfinite(x)
    if bad.any():
        raise UserError(f"{where}: cannot pack a non-finite value losslessly, got {float(x[np.argmax(bad)])!r}")
    left = np.arange(len(x))  # the values not yet exact at any smaller k
    for k in range(MAX_DECIMALS + 1):
        v = x[left]
        with np.errstate(invalid="ignore"):  # a value too large for int64 turns to garbage, and fails
            back = np.rint(v * 10.0**k).astype(np.int64) / 10.0**k
        left = left[back.view(np.int64) != v.view(np.int64)]
        if len(left) == 0:
            return k
    raise UserError(
        f"{where}: value {float(x[left[0]])!r} (row {int(left[0])}) is not a decimal of at most {MAX_DECIMALS} "
        "places that float64 reproduces exactly; refusing a lossy pack"
    )


def _narrow(ints: np.ndarray) -> np.ndarray:
    """int32 where every value fits (a smaller column before compression), else int64."""
    if len(ints) == 0 or (ints.min() >= _INT32.min and ints.max() <= _INT32.max):
        return ints.astype(np.int32)
    return ints


def _scaled(values: np.ndarray, k: int) -> np.ndarray:
    return np.rint(values * 10.0**k).astype(np.int64)


def encode_columns(bars: store.Bars, where: str) -> tuple[dict[str, np.ndarray], dict]:
    """({column: stored integers}, the codec that `decode_columns` needs) of one year's bars."""
    t = bars.open_time
    base_t = int(t[0]) if len(t) else 0
    cols = {"open_time": np.diff(t, prepend=base_t), "trades": bars.trades}
    # one scale for the four prices, checked on all of them (they are encoded against each other)
    k = decimals(np.concatenate([getattr(bars, c) for c in PRICES]), f"{where} columns {'/'.join(PRICES)}")
    o, h, low, c = (_scaled(getattr(bars, name), k) for name in PRICES)
    base_p = int(o[0]) if len(o) else 0
    prev_close = np.concatenate([[base_p], c[:-1]])
    cols.update(open=o - prev_close, high=h - np.maximum(o, c), low=np.minimum(o, c) - low, close=c - o)
    codec: dict = {"open_time": base_t, "prices": {"scale": k, "base": base_p}}
    for name in VOLUMES:
        v = getattr(bars, name)
        codec[name] = decimals(v, f"{where} column {name}")
        cols[name] = _scaled(v, codec[name])
    return {name: _narrow(cols[name]) for name in store.COLUMNS}, codec


def decode_columns(stored: dict[str, np.ndarray], codec: dict) -> dict[str, np.ndarray]:
    """The store columns (int64 or float64, shape (n_bars,)) from their stored integers and codec."""
    ints = {name: v.astype(np.int64) for name, v in stored.items()}
    out = {"open_time": np.cumsum(ints["open_time"]) + codec["open_time"], "trades": ints["trades"]}
    # close[i] = open[i] + d_close[i] and open[i] = close[i-1] + d_open[i], so close is one cumsum
    c = np.cumsum(ints["open"] + ints["close"]) + codec["prices"]["base"]
    o = c - ints["close"]
    h, low = np.maximum(o, c) + ints["high"], np.minimum(o, c) - ints["low"]
    k = codec["prices"]["scale"]
    out.update(open=o / 10.0**k, high=h / 10.0**k, low=low / 10.0**k, close=c / 10.0**k)
    for name in VOLUMES:
        out[name] = ints[name] / 10.0 ** codec[name]  # one correctly rounded division: the value exactly
    return out


# ---- one year file ---------------------------------------------------------------------------------


def encode_table(table: pa.Table, symbol: str, interval: str, year: int, where: str) -> pa.Table:
    """A store year table (store.SCHEMA) as the packed table, metadata included."""
    bars = store.Bars.from_table(table, symbol, interval)
    cols, codec = encode_columns(bars, where)
    meta = {
        "format": FORMAT,
        "symbol": symbol,
        "interval": interval,
        "year": year,
        "codec": codec,
        "fingerprint": store.fingerprint(bars),
    }
    return pa.table(cols).replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})


def read_packed(path: Path) -> tuple[pa.Table, dict]:
    """(the packed table, its metadata); UserError for a file that is not a readable packed file."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"packed file {path} cannot be read: {' '.join(str(exc).split())}") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:  # a damaged metadata block reads as no tsflash format
        meta = {}
    if meta.get("format") != FORMAT or table.column_names != list(store.COLUMNS):
        raise UserError(f"{path} is not a tsflash packed bar file (format {FORMAT}); pack it with `tsflash data pack`")
    return table, meta


def decode_table(table: pa.Table, meta: dict, where: str) -> pa.Table:
    """The store year table (store.SCHEMA) of a packed table, verified against its fingerprint."""
    cols = decode_columns({name: table.column(name).to_numpy() for name in store.COLUMNS}, meta["codec"])
    bars = store.Bars(**cols, symbol=meta["symbol"], interval=meta["interval"])
    got, want = store.fingerprint(bars), meta["fingerprint"]
    if got != want:
        raise UserError(
            f"{where}: decoded bars do not match the packed checksum (sha256 {got['sha256'][:12]}.., "
            f"{got['count']} bars; packed {want['sha256'][:12]}.., {want['count']} bars); refusing to unpack"
        )
    return bars.to_table()


def _write_packed(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd", compression_level=19, use_dictionary=False)


# ---- whole stores ------------------------------------------------------------------------------------


def pack_store(
    src_root: Path | str, dst_dir: Path | str, symbol: str = "BTCUSDT", interval: str = "1m", years=None
) -> list[Path]:
    """Pack the year files of one dataset (all of them, or `years`) into `dst_dir`; the paths written.

    All or nothing: UserError (and no file written) when a year is missing or a value cannot be packed
    exactly."""
    symbol = store.check_symbol(symbol)
    store.check_interval(interval)
    files = store.year_files(src_root, symbol, interval)
    if not files:
        raise UserError(f"pack: no {symbol} {interval} year files in {store.dataset_dir(src_root, symbol, interval)}")
    if years is not None:
        years = sorted(set(years))
        missing = [y for y in years if y not in files]
        if missing or not years:
            have = ", ".join(map(str, files)) or "none"
            raise UserError(
                f"pack: no {symbol} {interval} year file for {missing or years} in {src_root}; years there: {have}"
            )
    files = store.verified_files(src_root, symbol, interval, lambda y: years is None or y in years)
    written = []
    with contextlib.ExitStack() as stack:  # the renames happen together, after the last year is encoded
        for year, path in files.items():
            dst = Path(dst_dir) / packed_name(symbol, interval, year)
            try:
                table = pq.read_table(path, **store.READ_OPTIONS)
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise store.unreadable(path, exc) from None
            packed = encode_table(table, symbol, interval, year, str(path))  # its own lossless rule first
            # check_bars calls `where` before it returns, so it names this iteration's path
            store.check_bars(store.Bars.from_table(table, symbol, interval), lambda i: str(path))  # noqa: B023
            _write_packed(packed, stack.enter_context(atomic.atomic_path(dst)))
            written.append(dst)
    for src, dst in zip(files.values(), written, strict=True):
        log.info("packed %s (%.1f MB) -> %s (%.1f MB)", src, src.stat().st_size / 1e6, dst, dst.stat().st_size / 1e6)
    return written


def packed_files(src) -> list[Path]:
    """The packed files named by `src`: a folder (its *.packed.parquet) or a list of files."""
    if isinstance(src, (str, Path)) and Path(src).is_dir():
        found = sorted(p for p in Path(src).iterdir() if _PACKED_RE.match(p.name))
        if not found:
            raise UserError(f"unpack: no *{SUFFIX} files in {src}")
        return found
    paths = [Path(src)] if isinstance(src, (str, Path)) else [Path(p) for p in src]
    for p in paths:
        if not p.is_file():
            raise UserError(f"unpack: packed file not found: {p}")
    return paths


def unpack(src, out_root: Path | str) -> list[Path]:
    """Rebuild the canonical year files of the packed files `src` (a folder or files) under `out_root`.

    Refuses (UserError, nothing written) when a target year file already exists, or when any file
    fails to decode to its checksum. Returns the year files written."""
    plan = []
    for path in packed_files(src):
        table, meta = read_packed(path)
        dst = store.year_path(out_root, meta["symbol"], meta["interval"], int(meta["year"]))
        if dst.exists():
            raise UserError(f"unpack: {dst} already exists; remove it or unpack into another --root")
        plan.append((path, table, meta, dst))
    with contextlib.ExitStack() as stack:  # every year is verified before any is renamed into the store
        for path, table, meta, dst in plan:
            store.atomic_write_parquet(
                decode_table(table, meta, str(path)), stack.enter_context(atomic.atomic_path(dst))
            )
    for folder in sorted({dst.parent for *_, dst in plan}):  # the store knows the files it now holds
        manifest.record(folder, {dst.name: manifest.file_entry(dst) for *_, dst in plan if dst.parent == folder})
    for path, _, meta, dst in plan:
        log.info("unpacked %s -> %s (%d bars)", path, dst, meta["fingerprint"]["count"])
    return [dst for *_, dst in plan]
