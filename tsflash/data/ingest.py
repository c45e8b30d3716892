"""Import Binance kline archives (zip or csv) and canonical Parquet files into the bar store.

Binance's archive CSV has 12 columns and (usually) no header:
    open_time, open, high, low, close, volume, close_time, quote_volume, trades,
    taker_buy_base, taker_buy_quote, ignore
Spot archives switched open_time from milliseconds to MICROseconds on 2025-01-01, so the unit is
detected per file: every timestamp of a file must have 13 digits (ms) or every one 16 (us).

Every file is checked in full before anything is written, and each error names the file and the
line (CSV, 1-based, counting a header line) or row (Parquet, 0-based):
    wrong column count; non-numeric or empty field; NaN, infinite or non-positive price;
    high below max(open, close) or low above min(open, close); negative or non-finite volume,
    taker_buy_base or trades; a high more than 10 times the low, or a close more than 10 times (or
    under a tenth of) the previous close (`store.MAX_LOG_MOVE`); decreasing timestamps; conflicting duplicates (same open_time,
    different values; identical duplicates are dropped and counted); timestamps off the interval
    grid; an unreadable zip; a zip entry whose name would escape the extraction folder.
The merge into the per-year files is `tsflash.data.store.merge_parts` (temp file + rename), so a
killed import never leaves a partial file and importing the same file twice changes nothing.

Streamed, so that a month of 1-second bars (2.6 M rows, ~500 MB of CSV) needs a few hundred MB,
not gigabytes: each CSV is decompressed, parsed and validated CSV_BLOCK_BYTES at a time (the rules
hold across block edges, with the same line numbers), staged sorted (small sources in memory,
large ones in a temporary Parquet file), and merged into the year files a row group at a time.

polars parses the CSVs; it is imported lazily, so `tsflash.data.store` stays polars-free.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tsflash.data import store
from tsflash.errors import UserError

log = logging.getLogger(__name__)

BINANCE_COLUMNS = (
    "open_time", "open", "high", "low", "close", "volume", "close_time",
    "quote_volume", "trades", "taker_buy_base", "taker_buy_quote", "ignore",
)  # fmt: skip
INT_COLUMNS = ("open_time", "close_time", "trades")
NUMERIC_COLUMNS = BINANCE_COLUMNS[:-1]  # "ignore" is not checked: Binance fills it with 0

# BTCUSDT-1m-2023-03-24.zip / BTCUSDT-1m-2024-01.csv (daily / monthly archives)
_ARCHIVE_NAME = re.compile(r"^(?P<symbol>[A-Za-z0-9]+)-(?P<interval>\d+[smhd])-\d{4}-\d{2}(-\d{2})?\.(zip|csv)$")
# btcusdt-1m-2023.parquet (canonical store files)
_STORE_NAME = re.compile(r"^(?P<symbol>[A-Za-z0-9]+)-(?P<interval>\d+[smhd])(-\d{4})?\.parquet$")

# A 1-second month is about 300 MB of CSV (2.6 M rows): it is parsed, validated and staged this many
# bytes at a time (~75,000 rows), so the memory of an import does not grow with the file.
CSV_BLOCK_BYTES = 8 << 20
# Small sources (a daily 1-minute archive has 1,440 rows) are kept in memory for the merge, up to
# this many rows in all (~70 MB); larger ones are staged in temporary Parquet files.
IN_MEMORY_ROWS = 1 << 20

MS_RANGE = (10**12, 10**13)  # 13-digit epoch milliseconds: 2001-09-09 .. 2286-11-20
US_RANGE = (10**15, 10**16)  # 16-digit epoch microseconds, same span


@dataclass
class Source:
    """One CSV or Parquet inside an import: its display name and where its rows came from."""

    name: str  # "BTCUSDT-1m-2023-03-24.zip:BTCUSDT-1m-2023-03-24.csv"
    kind: str  # "csv" | "parquet"
    lines: np.ndarray  # (n_rows,) line (csv, 1-based) or row (parquet, 0-based) of each row

    def where(self, i: int) -> str:
        return f"{self.name} {'line' if self.kind == 'csv' else 'row'} {int(self.lines[i])}"


@dataclass
class Parsed:
    """A validated chunk of one source (a CSV, or a Parquet file): canonical columns (sorted,
    unique) plus the source of each row."""

    table: pa.Table
    source: Source
    symbol: str
    interval: str
    unit: str  # "ms" | "us" | "parquet"
    duplicates: int  # identical duplicate rows dropped (repeats of the source's previous row)


@dataclass
class ImportReport:
    """Summary of one import: files, rows read, identical duplicates dropped, bars added."""

    files: int = 0
    rows: int = 0
    duplicates: int = 0
    added: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (symbol, interval, year) -> bars
    units: dict[str, int] = field(default_factory=dict)  # "ms"/"us"/"parquet" -> files

    @property
    def bars_added(self) -> int:
        return sum(self.added.values())


# ---------------------------------------------------------------------------------------------
# Finding the inputs


def expand_paths(paths) -> list[Path]:
    """Files to import: each path itself, or every .zip/.csv/.parquet under a folder (sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in (".zip", ".csv", ".parquet"))
            if not found:
                raise UserError(f"folder {p} holds no .zip, .csv or .parquet file to import")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"import path does not exist: {p}")
    return out


def infer_symbol_interval(path: Path, symbol: str | None, interval: str | None) -> tuple[str, str]:
    """Symbol and interval from the options, else from a Binance or store file name."""
    m = _ARCHIVE_NAME.match(path.name) or _STORE_NAME.match(path.name)
    if m is None and path.suffix == ".parquet":
        m = _STORE_NAME.match(path.parent.name + ".parquet")
    sym = symbol or (m["symbol"] if m else None)
    ivl = interval or (m["interval"] if m else None)
    if sym is None or ivl is None:
        raise UserError(
            f"cannot tell symbol and interval from the file name {path.name} (expected e.g. "
            f"BTCUSDT-1m-2024-01-02.zip or btcusdt-1m-2024.parquet); pass --symbol and --interval"
        )
    store.check_interval(ivl)
    return store.check_symbol(sym), ivl


# ---------------------------------------------------------------------------------------------
# Reading one file, chunk by chunk


def read_file(path: Path, symbol: str | None = None, interval: str | None = None) -> Iterator[Parsed]:
    """Parse and validate one .zip, .csv or .parquet file, a chunk at a time: validated chunks of
    each source (a zip may hold several CSVs) in file order. Memory: a chunk, not the file."""
    path = Path(path)
    sym, ivl = infer_symbol_interval(path, symbol, interval)
    if path.suffix == ".zip":
        yield from _zip_chunks(path, sym, ivl)
    elif path.suffix == ".csv":
        with open(path, "rb") as f:
            yield from csv_chunks(f, path.name, sym, ivl)
    elif path.suffix == ".parquet":
        yield from parquet_chunks(path, sym, ivl)
    else:
        raise UserError(f"can import .zip, .csv or .parquet files, got {path}")


def safe_member_name(name: str) -> bool:
    """True when a zip entry name stays inside the folder it would be extracted to."""
    if not name or "\x00" in name:
        return False
    for pure in (PurePosixPath(name), PureWindowsPath(name)):
        if pure.is_absolute() or pure.drive or pure.anchor or ".." in pure.parts:
            return False
    return True


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, zlib.error, NotImplementedError)


def _zip_chunks(path: Path, symbol: str, interval: str) -> Iterator[Parsed]:
    """Validated chunks of each CSV in the zip, decompressed as a stream (nothing is extracted to
    disk); UserError for an unreadable zip or an entry whose name would escape the extraction
    folder (zip-slip)."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            for info in infos:
                if not safe_member_name(info.filename):
                    raise UserError(
                        f"{path.name}: zip entry {info.filename!r} would escape the target folder "
                        f"(absolute path or '..'); refusing the archive"
                    )
            members = [i for i in infos if not i.is_dir() and i.filename.lower().endswith(".csv")]
            if not members:
                names = ", ".join(i.filename for i in infos) or "nothing"
                raise UserError(f"{path.name}: zip must hold a .csv file, holds {names}")
            for info in members:
                with zf.open(info) as stream:
                    yield from csv_chunks(stream, f"{path.name}:{info.filename}", symbol, interval)
    except _ZIP_ERRORS as exc:
        raise UserError(f"{path.name}: unreadable zip ({exc})") from None


def _blocks(stream, block_bytes: int) -> Iterator[bytes]:
    """Whole lines of a binary stream, about `block_bytes` at a time (the last block may lack
    its final newline)."""
    rest = b""
    while data := stream.read(block_bytes):
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        rest = data[cut:]
    if rest:
        yield rest


def _line_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end (exclusive, without the newline) and comma count of every line, vectorised."""
    buf = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(buf == 10)
    ends = nl if (len(buf) == 0 or buf[-1] == 10) else np.append(nl, len(buf))
    starts = np.concatenate([[0], nl + 1])[: len(ends)]
    commas = np.flatnonzero(buf == 44)  # positions of ","
    return starts, ends, np.searchsorted(commas, ends) - np.searchsorted(commas, starts)


def _is_header(line: bytes) -> bool:
    """Does the first line of a CSV name its columns (Binance's archives usually have no header)?"""
    first = line.split(b",", 1)[0].strip()
    return bool(first) and not first.lstrip(b"-+").isdigit() and re.fullmatch(rb"[A-Za-z_ ]+", first) is not None


def csv_chunks(stream, name: str, symbol: str, interval: str, block_bytes: int | None = None) -> Iterator[Parsed]:
    """Parse and validate one Binance kline CSV from a binary stream, `block_bytes` at a time.

    `name` is used in error messages; lines are numbered 1-based in the whole file, a header line
    included. The timestamp unit (ms or us) is detected on the first row and must hold for every
    row; order and duplicates are checked across block edges too. block_bytes: default
    CSV_BLOCK_BYTES.
    """
    check = _ChunkValidator(name, "csv", interval)
    next_line, header, first = 1, False, None
    for block in _blocks(stream, block_bytes or CSV_BLOCK_BYTES):
        if next_line == 1:
            block = block.removeprefix(b"\xef\xbb\xbf")  # UTF-8 BOM
            head, _, body = block.partition(b"\n")
            if _is_header(head):
                header, next_line, block = True, 2, body
        starts, ends, commas = _line_bounds(block)
        if len(starts) == 0:
            continue
        lines = np.arange(next_line, next_line + len(starts))
        next_line += len(starts)
        table, ot = _parse_block(block, name, lines, ends > starts, commas)
        if first is None:
            first = (int(ot[0]), int(lines[0]))
        unit = _detect_unit(ot, name, lines, first)
        scale = 1000 if unit == "ms" else 1
        table = table.set_column(
            0, "open_time", pa.array(ot * scale, pa.int64()).cast(store.SCHEMA.field("open_time").type)
        )
        yield check(table, lines, symbol, unit)
    if first is None:
        raise UserError(f"{name}: file holds a header but no rows" if header else f"{name}: file holds no rows")


def _parse_block(block: bytes, name: str, lines: np.ndarray, non_empty: np.ndarray, commas: np.ndarray):
    """One block of whole CSV lines -> (canonical table with open_time as parsed, raw open_time)."""
    import polars as pl

    n_fields = commas + 1
    bad = np.flatnonzero(n_fields != len(BINANCE_COLUMNS))
    if len(bad):
        i = int(bad[0])
        raise UserError(
            f"{name} line {int(lines[i])}: a Binance kline row must have {len(BINANCE_COLUMNS)} columns, "
            f"got {int(n_fields[i]) if non_empty[i] else 0}"
        )
    schema: dict[str, type[pl.DataType]] = {c: (pl.Int64 if c in INT_COLUMNS else pl.Float64) for c in BINANCE_COLUMNS}
    schema["ignore"] = pl.String
    try:
        df = pl.read_csv(block, has_header=False, new_columns=list(BINANCE_COLUMNS), schema=schema)
        failed = df.select(NUMERIC_COLUMNS).null_count().sum_horizontal().item() > 0
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError, pl.exceptions.NoDataError):
        failed = True
    if failed:
        _raise_non_numeric(block, name, lines)
    assert df.height == len(lines), (df.height, len(lines))
    ot = df["open_time"].to_numpy()
    table = pa.table({"open_time": pa.array(ot, pa.int64()), **{c: df[c].to_arrow() for c in store.COLUMNS[1:]}})
    return table, ot  # open_time still in the file's unit


def _raise_non_numeric(body: bytes, name: str, lines: np.ndarray):
    """Locate the first non-numeric or empty field (slow path, only after a failed parse)."""
    import polars as pl

    df = pl.read_csv(  # lossy: bytes that are not UTF-8 (a damaged file) are shown, not a crash
        body,
        has_header=False,
        new_columns=list(BINANCE_COLUMNS),
        schema={c: pl.String for c in BINANCE_COLUMNS},
        encoding="utf8-lossy",
    )
    first = None
    for c in NUMERIC_COLUMNS:
        s = df[c]
        parsed = s.str.strip_chars().cast(pl.Int64 if c in INT_COLUMNS else pl.Float64, strict=False)
        bad = (parsed.is_null()).arg_true()
        if len(bad) and (first is None or bad[0] < first[0]):
            first = (bad[0], c, s[bad[0]])
    assert first is not None, f"{name}: polars failed to parse but every field is numeric"
    i, c, value = first
    kind = "an integer" if c in INT_COLUMNS else "a number"
    raise UserError(
        f"{name} line {int(lines[i])}: column {c} must be {kind}, got {value if value is not None else ''!r}"
    )


def _detect_unit(ot: np.ndarray, name: str, lines: np.ndarray, first: tuple[int, int]) -> str:
    """\"ms" or "us" for a block of open_time values; every row of the file must share the unit of
    its first row, `first` = (open_time, line) of that row."""
    is_ms = (ot >= MS_RANGE[0]) & (ot < MS_RANGE[1])
    is_us = (ot >= US_RANGE[0]) & (ot < US_RANGE[1])
    unit = "ms" if MS_RANGE[0] <= first[0] < MS_RANGE[1] else "us" if US_RANGE[0] <= first[0] < US_RANGE[1] else None
    ok = is_ms if unit == "ms" else is_us
    if unit is None or not ok.all():
        i = 0 if unit is None else int(np.argmin(ok))
        after = int(ot[i]) != first[0] or int(lines[i]) != first[1]
        raise UserError(
            f"{name} line {int(lines[i])}: open_time must be epoch milliseconds (13 digits) or "
            f"microseconds (16 digits), the same unit for the whole file; got {int(ot[i])}"
            + (f" after {first[0]} on line {first[1]}" if unit is not None and after else "")
        )
    return unit


def parquet_chunks(path: Path, symbol: str, interval: str) -> Iterator[Parsed]:
    """Read and validate a canonical Parquet file (the `store.SCHEMA` columns), a row group at a time."""
    try:
        pf = pq.ParquetFile(path, **store.READ_OPTIONS)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable Parquet file ({' '.join(str(exc).split())})") from None
    missing = [c for c in store.COLUMNS if c not in pf.schema_arrow.names]
    if missing:
        raise UserError(
            f"{path.name}: a canonical Parquet file needs columns {', '.join(store.COLUMNS)}; missing {', '.join(missing)}"
        )
    check = _ChunkValidator(path.name, "parquet", interval)
    row = 0
    for batch in _batches(pf, path):
        table = pa.Table.from_batches([batch])
        lines = np.arange(row, row + table.num_rows)
        row += table.num_rows
        yield check(_canonical_columns(table, path.name, Source(path.name, "parquet", lines)), lines, symbol, "parquet")


def _batches(pf: pq.ParquetFile, path: Path) -> Iterator[pa.RecordBatch]:
    """The store columns of `pf` a row group's worth at a time; a damaged page is a UserError."""
    batches = pf.iter_batches(batch_size=store.ROW_GROUP_SIZE, columns=list(store.COLUMNS))
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise UserError(f"{path}: unreadable Parquet file ({' '.join(str(exc).split())})") from None
        yield batch


def _canonical_columns(table: pa.Table, name: str, source: Source) -> pa.Table:
    """A Parquet chunk cast to `store.SCHEMA`; nulls and uncastable types are UserErrors."""
    cols = []
    for f in store.SCHEMA:
        c = table.column(f.name)
        if c.null_count:
            i = int(np.flatnonzero(c.is_null().to_numpy(zero_copy_only=False))[0])
            raise UserError(f"{source.where(i)}: column {f.name} must not be null")
        try:
            if f.name == "open_time":
                if not pa.types.is_timestamp(c.type):
                    raise pa.ArrowInvalid(f"type {c.type}")
                c = c.cast(pa.timestamp("us", tz="UTC"))  # raises if ns would lose precision
            else:
                c = c.cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UserError(f"{name}: column {f.name} must be {f.type}, got {c.type} ({exc})") from None
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=store.SCHEMA)


class _ChunkValidator:
    """`validate` over one source's chunks in order, across chunk edges: the last row of the
    previous chunk (as read, kept or not) is checked again with the next chunk (order, repeats;
    the same comparisons as one whole-file `validate`), then left out of the result."""

    def __init__(self, name: str, kind: str, interval: str):
        self.name, self.kind, self.interval = name, kind, interval
        self.carry: tuple[pa.Table, int] | None = None  # (last row read, its line or row)

    def __call__(self, table: pa.Table, lines: np.ndarray, symbol: str, unit: str) -> Parsed:
        table = table.cast(store.SCHEMA)
        carry = self.carry
        if carry is not None:
            table = pa.concat_tables([carry[0], table])
            lines = np.r_[carry[1], lines]
        self.carry = (table.slice(table.num_rows - 1), int(lines[-1]))
        table, source, dups = validate(table, Source(self.name, self.kind, lines), self.interval)
        if carry is not None:  # the carried row went out (or was dropped) with the previous chunk; validate keeps row 0
            table, source = table.slice(1), Source(self.name, self.kind, source.lines[1:])
        return Parsed(table, source, symbol, self.interval, unit, dups)


# ---------------------------------------------------------------------------------------------
# Validation


def validate(table: pa.Table, source: Source, interval: str) -> tuple[pa.Table, Source, int]:
    """Check every bar rule on one file's canonical columns (in file order).

    Returns the table without identical duplicate rows, its Source and the number dropped.
    """
    interval_us = store.check_interval(interval)
    b = store.Bars.from_table(table, "X", interval)
    n = len(b)

    def fail(mask: np.ndarray, rule: Callable[[int], str]) -> None:
        bad = np.flatnonzero(mask)
        if len(bad):
            i = int(bad[0])
            raise UserError(f"{source.where(i)}: {rule(i)}")

    if (found := store.bar_problem(b)) is not None:  # the store's bar rules, one home (store.bar_problem)
        raise UserError(f"{source.where(found[0])}: {found[1]}")
    fail(
        b.open_time % interval_us != 0,
        lambda i: (
            f"open_time must be on the {interval} grid (a multiple of {interval_us // 1_000_000} s), "
            f"got {store.iso(b.open_time[i])}.{b.open_time[i] % 1_000_000:06d}"
        ),
    )
    if n > 1:
        d = np.diff(b.open_time)
        dec = np.flatnonzero(d < 0)
        if len(dec):
            i = int(dec[0]) + 1
            raise UserError(
                f"{source.where(i)}: timestamps must not decrease, got {store.iso(b.open_time[i])} after "
                f"{store.iso(b.open_time[i - 1])} ({source.where(i - 1)})"
            )
        dup = np.flatnonzero(d == 0) + 1
        if len(dup):
            j = store.first_conflicting_duplicate(b, dup)
            if j is not None:
                raise UserError(
                    f"{source.where(j)}: conflicting duplicate of {source.where(j - 1)}: same open_time "
                    f"{store.iso(b.open_time[j])}, different values (identical duplicates are dropped)"
                )
            _check_moves(b, source)
            keep = np.ones(n, bool)
            keep[dup] = False
            table = table.filter(pa.array(keep))
            source = Source(source.name, source.kind, source.lines[keep])
            return table, source, len(dup)
    _check_moves(b, source)
    return table, source, 0


def _check_moves(b: store.Bars, source: Source) -> None:
    """The one-bar move bound (store.move_problem) between rows in file order, once they are sorted."""
    if (found := store.move_problem(b.close)) is not None:
        i, rule = found
        raise UserError(f"{source.where(i)}: bar {store.iso(b.open_time[i])}: {rule}")


# ---------------------------------------------------------------------------------------------
# The import


def import_paths(
    paths,
    root: Path | str = store.DEFAULT_ROOT,
    symbol: str | None = None,
    interval: str | None = None,
    start=None,
    end=None,
) -> ImportReport:
    """Import files and folders into the store at `root`; see the module docstring for the rules.

    symbol/interval override what the file names say. start/end ("YYYY-MM-DD", end inclusive)
    keep only bars in that range (fetch uses it to trim whole-month archives). Every file is
    validated, and every conflict with the store checked, before the first write.

    Streamed: each source is validated a chunk at a time and staged, sorted, in a temporary
    Parquet file (in the system's temporary folder, TMPDIR); `tsflash.data.store.merge_parts` then
    merges the staged parts into the year files chunk by chunk.
    """
    files = expand_paths(paths)
    report = ImportReport(files=len(files))
    lo, hi = store.to_us(start), store.to_us(end, end=True)
    with tempfile.TemporaryDirectory(prefix="tsflash-import-") as tmp:
        datasets: dict[tuple[str, str], list[store.Part]] = {}
        names = (Path(tmp) / f"part-{i}.parquet" for i in itertools.count())
        budget = [IN_MEMORY_ROWS]
        for path in files:
            for key, part in _stage_file(path, names, budget, symbol, interval, lo, hi, report):
                datasets.setdefault(key, []).append(part)
        results = store.merge_parts(root, datasets)
    for (sym, ivl), result in results.items():
        report.duplicates += result.duplicates
        for year, n in result.added.items():
            report.added[(sym, ivl, year)] = n
    log.info(
        "imported %d files, %d rows, %d identical duplicates dropped, %d bars added",
        report.files, report.rows, report.duplicates, report.bars_added,
    )  # fmt: skip
    return report


def _stage_file(path: Path, names: Iterator[Path], budget: list[int], symbol, interval, lo, hi, report: ImportReport):
    """Validate one file chunk by chunk and stage each of its sources, trimmed to [lo, hi] (see
    `_StagedSource`; staging files are named by `names`); returns [((SYMBOL, interval), Part)],
    one per source with bars in the range."""
    writer = None
    staged: list[tuple[tuple[str, str], store.Part]] = []

    def close():
        part = writer.close() if writer is not None else None
        if part is not None:
            staged.append(((writer.symbol, writer.interval), part))

    for parsed in read_file(path, symbol, interval):
        if writer is None or parsed.source.name != writer.name:
            close()
            writer = _StagedSource(next(names), parsed, budget)
            report.units[parsed.unit] = report.units.get(parsed.unit, 0) + 1
        report.rows += parsed.table.num_rows + parsed.duplicates
        report.duplicates += parsed.duplicates
        writer.write(_trim(parsed, lo, hi))
    close()
    return staged


def _trim(parsed: Parsed, lo: int | None, hi: int | None) -> tuple[pa.Table, np.ndarray]:
    """The chunk's bars with lo <= open_time <= hi, and their lines."""
    table, lines = parsed.table, parsed.source.lines
    if lo is None and hi is None:
        return table, lines
    ot = table.column("open_time").cast(pa.int64()).to_numpy()
    a = 0 if lo is None else int(np.searchsorted(ot, lo, "left"))
    b = len(ot) if hi is None else int(np.searchsorted(ot, hi, "right"))
    return table.slice(a, b - a), lines[a:b]


class _StagedSource:
    """One source's validated bars (sorted, unique) with their lines, kept for the merge: in memory
    when small (a daily 1-minute archive; up to `budget[0]` rows for all such sources together),
    else in a staging Parquet file written chunk by chunk (a 1-second month)."""

    tables: list[pa.Table]
    writer: pq.ParquetWriter | None
    first: int | None  # open_time of the first and last bar written, None before any
    last: int | None

    def __init__(self, path: Path, first: Parsed, budget: list[int]):
        self.path, self.name, self.kind = path, first.source.name, first.source.kind
        self.symbol, self.interval = first.symbol, first.interval
        self.budget, self.tables, self.writer = budget, [], None
        self.rows, self.first, self.last = 0, None, None

    def write(self, chunk: tuple[pa.Table, np.ndarray]) -> None:
        table, lines = chunk
        if table.num_rows == 0:
            return
        ot = table.column("open_time").cast(pa.int64())
        self.first = ot[0].as_py() if self.first is None else self.first
        self.last = ot[-1].as_py()
        self.rows += table.num_rows
        self.tables.append(table.append_column(store.ORIGIN, pa.array(lines, pa.int64())))
        if self.writer is not None or self.rows > min(store.ROW_GROUP_SIZE, self.budget[0]):
            self._spill()

    def _spill(self) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.tables[0].schema, compression="lz4")
        for t in self.tables:
            self.writer.write_table(t)
        self.tables = []

    def close(self) -> store.Part | None:
        """The staged bars as a store.Part; None when the range kept none of them."""
        if not self.rows:
            return None
        if self.writer is None:
            self.budget[0] -= self.rows
            table = pa.concat_tables(self.tables)
            chunks = lambda: iter([table])  # noqa: E731
        else:
            self.writer.close()
            chunks = functools.partial(_parquet_tables, self.path)
        where, name = ("line" if self.kind == "csv" else "row"), self.name  # the Part keeps these, not self
        # rows > 0: a write set first and last
        return store.Part(chunks, cast(int, self.first), cast(int, self.last), lambda line: f"{name} {where} {line}")


def _parquet_tables(path: Path) -> Iterator[pa.Table]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=store.ROW_GROUP_SIZE):
        yield pa.Table.from_batches([batch])


# ---------------------------------------------------------------------------------------------
# Writing the archive format (the inverse of parse_csv: mirrors for tests, exports)


def binance_csv(bars: store.Bars, unit: str = "ms", header: bool = False) -> bytes:
    """`bars` as a Binance kline CSV: 12 columns, open_time/close_time in "ms" or "us".

    quote_volume and taker_buy_quote are volume * close and taker_buy_base * close (Binance's
    are sums over trades; nothing here reads them). Floats are written in their shortest
    round-trip form, so parse_csv(binance_csv(b)) gives back b exactly.
    """
    import polars as pl

    if unit not in ("ms", "us"):
        raise UserError(f"unit must be 'ms' or 'us', got {unit!r}")
    div = 1000 if unit == "ms" else 1
    ivl = store.INTERVAL_US[bars.interval] // div
    ot = bars.open_time // div
    df = pl.DataFrame(
        {
            "open_time": ot,
            "open": bars.open,
            "high": bars.high,
            "low": bars.low,
            "close": bars.close,
            "volume": bars.volume,
            "close_time": ot + ivl - 1,
            "quote_volume": bars.volume * bars.close,
            "trades": bars.trades,
            "taker_buy_base": bars.taker_buy_base,
            "taker_buy_quote": bars.taker_buy_base * bars.close,
            "ignore": np.zeros(len(bars), np.int64),
        }
    )
    return df.write_csv(include_header=header).encode()
