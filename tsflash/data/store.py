"""The canonical bar store: one Parquet file per symbol, interval and UTC year.

Layout (a folder of yearly Parquet files laid out so is a valid store root as it is):

    <root>/<symbol lower>-<interval>/<symbol lower>-<interval>-<YYYY>.parquet

Schema (`SCHEMA`): open_time timestamp[us, tz=UTC] (bar open), open/high/low/close/volume float64,
trades int64, taker_buy_base float64. Every file is sorted by open_time with unique timestamps on
the interval grid. Gaps (missing bars) are kept as gaps: nothing here fills them; `find_gaps` and
`gap_table` report them so later stages can decide (e.g. never let a window bridge a long gap).

Trust: every read first checks the year files it needs against the folder's `manifest.json`
(tsflash.data._manifest: SHA-256 and rows), then the bars against `check_bars` (the bar rules and the
one-bar move bound `MAX_LOG_MOVE`); store files carry a CRC32 per page, checked on read.

This module needs only numpy and pyarrow: the training machine has no polars.

Conventions: times are int64 microseconds since the Unix epoch, UTC. A date string "YYYY-MM-DD" as
`end` means the whole day (inclusive); as `start` it means 00:00 of that day.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import os  # noqa: F401 -- tests patch store.os.replace to simulate a killed write
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tsflash import atomic
from tsflash.data import _manifest as manifest
from tsflash.errors import UserError
from tsflash.intervals import INTERVAL_US, US_PER_DAY

log = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("open_time", pa.timestamp("us", tz="UTC")),
        ("open", pa.float64()),
        ("high", pa.float64()),
        ("low", pa.float64()),
        ("close", pa.float64()),
        ("volume", pa.float64()),
        ("trades", pa.int64()),
        ("taker_buy_base", pa.float64()),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
PRICE_COLUMNS = ("open", "high", "low", "close")

DEFAULT_ROOT = Path("data")  # relative to the CWD (the repository root)
# ~45 days of 1-minute bars: small enough that a short range skips most of a year, large enough
# that reading a whole year stays a handful of sequential reads.
ROW_GROUP_SIZE = 65_536

SYMBOL_RE = re.compile(r"^[A-Za-z0-9]+$")  # a symbol, as it becomes part of a store path (`check_symbol`)
_YEAR_FILE_RE = re.compile(r"^(?P<stem>[a-z0-9]+-[0-9a-z]+)-(?P<year>\d{4})\.parquet$")


@dataclass
class Bars:
    """Bars of one symbol and interval as numpy columns of shape (n_bars,), sorted by open_time.

    open_time is int64 microseconds UTC (bar open); prices and volumes float64; trades int64.
    """

    open_time: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    trades: np.ndarray
    taker_buy_base: np.ndarray
    symbol: str = "BTCUSDT"
    interval: str = "1m"

    def __len__(self) -> int:
        return len(self.open_time)

    @property
    def interval_us(self) -> int:
        return INTERVAL_US[self.interval]

    def to_table(self) -> pa.Table:
        """The bars as a pyarrow Table with `SCHEMA`."""
        arrays = [pa.array(self.open_time, pa.int64()).cast(SCHEMA.field("open_time").type)]
        arrays += [pa.array(getattr(self, name), SCHEMA.field(name).type) for name in COLUMNS[1:]]
        return pa.Table.from_arrays(arrays, schema=SCHEMA)

    @classmethod
    def from_table(cls, table: pa.Table, symbol: str, interval: str) -> Bars:
        """Bars from a Table with (at least) the `SCHEMA` columns; numeric columns are not copied."""
        cols = {}
        for name in COLUMNS:
            col = table.column(name)
            if name == "open_time":  # timestamp[us] -> its int64 microseconds, zero-copy
                col = pa.chunked_array([c.view(pa.int64()) for c in col.chunks], pa.int64())
            cols[name] = _column_numpy(col, SCHEMA.field(name).type if name != "open_time" else pa.int64())
        return cls(**cols, symbol=symbol, interval=interval)

    def slice(self, lo: int, hi: int) -> Bars:
        """Bars lo..hi-1 (numpy views, no copy)."""
        cols = {name: getattr(self, name)[lo:hi] for name in COLUMNS}
        return Bars(**cols, symbol=self.symbol, interval=self.interval)


def _column_numpy(col: pa.ChunkedArray, type_: pa.DataType) -> np.ndarray:
    if col.num_chunks == 0:
        return np.empty(0, dtype=type_.to_pandas_dtype())
    if col.num_chunks == 1:
        return col.chunk(0).to_numpy(zero_copy_only=False)
    return col.to_numpy()


# ---------------------------------------------------------------------------------------------
# Names, paths, times


def check_symbol(symbol: str, where: str = "symbol") -> str:
    """The one rule for a symbol (it becomes part of a store path): letters and digits; upper-cased.
    `where` names the user's key or flag in the message."""
    if not isinstance(symbol, str) or not SYMBOL_RE.match(symbol):
        raise UserError(f"{where} must be letters and digits only (e.g. BTCUSDT), got {symbol!r}")
    return symbol.upper()


SPOT_QUOTES = ("USDT", "USDC", "FDUSD", "BUSD", "TUSD", "DAI", "BTC", "ETH", "BNB", "EUR", "GBP", "TRY", "BRL", "JPY")
_PAIR_RE = re.compile(rf"^[A-Z0-9]{{2,12}}(?:{'|'.join(SPOT_QUOTES)})$")


def check_pair(text: str, where: str = "symbol") -> str:
    """A Binance spot pair such as BTCUSDT, upper-cased as given ('ethusdt' -> 'ETHUSDT'); a bare
    asset ('eth') or any other shape is refused in one line, before anything is fetched."""
    symbol = check_symbol(text, where)  # letters and digits (it becomes a store path)
    if not _PAIR_RE.match(symbol):
        raise UserError(
            f"{where} must be a Binance spot pair, a base asset then a quote asset such as BTCUSDT or "
            f"ETHUSDT (quotes: {', '.join(SPOT_QUOTES)}), got {text!r}"
        )
    return symbol


def check_interval(interval: str) -> int:
    """Microseconds per bar of `interval`; UserError for an unsupported one."""
    if interval not in INTERVAL_US:
        raise UserError(f"interval must be one of {', '.join(INTERVAL_US)}, got {interval!r}")
    return INTERVAL_US[interval]


def dataset_dir(root: Path | str, symbol: str, interval: str) -> Path:
    """<root>/<symbol lower>-<interval>"""
    return Path(root) / f"{check_symbol(symbol).lower()}-{interval}"


def year_path(root: Path | str, symbol: str, interval: str, year: int) -> Path:
    """<root>/<symbol lower>-<interval>/<symbol lower>-<interval>-<YYYY>.parquet"""
    d = dataset_dir(root, symbol, interval)
    return d / f"{d.name}-{year:04d}.parquet"


def year_files(root: Path | str, symbol: str, interval: str) -> dict[int, Path]:
    """Existing year files of one dataset, {year: path}, sorted by year."""
    d = dataset_dir(root, symbol, interval)
    out = {}
    if d.is_dir():
        for p in d.iterdir():
            m = _YEAR_FILE_RE.match(p.name)
            if m and m["stem"] == d.name:
                out[int(m["year"])] = p
    return dict(sorted(out.items()))


def list_datasets(root: Path | str) -> list[tuple[str, str]]:
    """(SYMBOL, interval) of every dataset folder under root that holds at least one year file."""
    root = Path(root)
    found = []
    if root.is_dir():
        for d in sorted(root.iterdir()):
            sym, sep, interval = d.name.partition("-")
            if d.is_dir() and sep and interval in INTERVAL_US and SYMBOL_RE.match(sym):
                if year_files(root, sym, interval):
                    found.append((sym.upper(), interval))
    return found


@overload
def to_us(value: None, *, end: bool = False) -> None: ...
@overload
def to_us(value: str | dt.datetime | dt.date | int | np.integer, *, end: bool = False) -> int: ...
def to_us(value, *, end: bool = False) -> int | None:
    """Microseconds UTC of a "YYYY-MM-DD" (or ISO datetime) string, datetime, date or int (us).

    With end=True a bare date means the whole day: the result is the last microsecond of that day.
    A naive datetime is taken as UTC.
    """
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    whole_day = False
    if isinstance(value, str):
        try:
            if len(value) == 10:
                value = dt.date.fromisoformat(value)
            else:
                value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise UserError(f"a time must be YYYY-MM-DD or an ISO datetime, got {value!r}") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        whole_day = True
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise UserError(f"a time must be a date string, datetime or int microseconds, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if end and whole_day:
        us += US_PER_DAY - 1
    return us


def iso(us: int) -> str:
    """ISO string (UTC, seconds precision) of microseconds since the epoch."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(us))
    return t.strftime("%Y-%m-%d %H:%M:%S")


def year_of(us: np.ndarray) -> np.ndarray:
    """UTC calendar year of each int64 microsecond timestamp."""
    return us.astype("datetime64[us]").astype("datetime64[Y]").astype(np.int64) + 1970


def year_start_us(year: int) -> int:
    return (np.datetime64(f"{year:04d}-01-01", "us") - np.datetime64(0, "us")).astype(np.int64).item()


# ---------------------------------------------------------------------------------------------
# Reading


def _open_dataset(root, symbol, interval) -> dict[int, Path]:
    root = Path(root)
    check_interval(interval)
    if not root.is_dir():
        raise UserError(
            f"bar store root {str(root)!r} does not exist; import data first "
            f"(tsflash data import PATH... or tsflash data fetch) or pass --root"
        )
    files = year_files(root, symbol, interval)
    if not files:
        have = ", ".join(f"{s} {i}" for s, i in list_datasets(root)) or "none"
        raise UserError(
            f"no bars for {check_symbol(symbol)} {interval} in store {str(root)!r} "
            f"(expected {dataset_dir(root, symbol, interval)}/*.parquet); datasets there: {have}"
        )
    return files


def unreadable(path: Path, exc: BaseException) -> UserError:
    """The one-line error for a year file that Parquet cannot read (truncated, damaged, not Parquet)."""
    return UserError(
        f"{path}: unreadable Parquet file ({' '.join(str(exc).split())}); the file is damaged or "
        "not a store file: delete it and re-import its bars"
    )


def _year_overlaps(year: int, lo: int | None, hi: int | None) -> bool:
    return not ((lo is not None and year_start_us(year + 1) - 1 < lo) or (hi is not None and year_start_us(year) > hi))


def verified_files(
    root, symbol: str, interval: str, keep: Callable[[int], bool] = lambda year: True
) -> dict[int, Path]:
    """{year: path} of the dataset's year files that `keep(year)` selects, each checked against the
    folder's manifest (tsflash.data._manifest) before anything reads it.

    UserError when the root or dataset is missing, when a selected file differs from the manifest,
    or when the manifest lists a selected year whose file is gone.
    """
    files = _open_dataset(root, symbol, interval)
    folder = dataset_dir(root, symbol, interval)
    gone = [
        n
        for n in manifest.missing_recorded(folder, {p.name for p in files.values()})
        if (m := _YEAR_FILE_RE.match(n)) is None or keep(int(m["year"]))
    ]
    if gone:
        raise UserError(
            f"{folder}: the store manifest lists {', '.join(gone)} but the file is missing (deleted after import); "
            f"re-import its bars, or drop it from the manifest with `tsflash data verify --write {root}`"
        )
    chosen = {y: p for y, p in files.items() if keep(y)}
    manifest.verify(folder, list(chosen.values()))
    return chosen


def read_table(
    root: Path | str = DEFAULT_ROOT,
    symbol: str = "BTCUSDT",
    interval: str = "1m",
    start=None,
    end=None,
    columns: tuple[str, ...] = COLUMNS,
) -> pa.Table:
    """The store's rows in [start, end] as one pyarrow Table (columns as asked, open_time first).

    Reads only the year files and, within them, only the row groups whose open_time statistics
    overlap the range; the rest is sliced by binary search on the sorted open_time. The files are
    checked against the manifest, the bars are not: `load_bars` and `year_bars` check them.
    """
    lo, hi = _time_range(start, end)
    files = verified_files(root, symbol, interval, lambda year: _year_overlaps(year, lo, hi))
    columns = ("open_time", *[c for c in columns if c != "open_time"])
    tables = [t for path in files.values() if (t := _read_file(path, lo, hi, columns)) is not None]
    if not tables:
        return SCHEMA.empty_table().select(list(columns))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _time_range(start, end) -> tuple[int | None, int | None]:
    """[start, end] as microseconds (a bare end date: the whole day); UserError when end is before start."""
    lo, hi = to_us(start), to_us(end, end=True)
    if lo is not None and hi is not None and hi < lo:
        raise UserError(f"time range: end {end} is before start {start}")
    return lo, hi


def _read_file(path: Path, lo: int | None, hi: int | None, columns: tuple[str, ...]) -> pa.Table | None:
    """One year file's rows in [lo, hi] (None when none of its row groups overlaps the range)."""
    try:
        pf = pq.ParquetFile(path, **READ_OPTIONS)
        groups = _overlapping_row_groups(pf, lo, hi)
        if not groups:
            return None
        t = pf.read_row_groups(groups, columns=list(columns), use_threads=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise unreadable(path, exc) from None
    return t if lo is None and hi is None else _slice_sorted(t, lo, hi)


def _overlapping_row_groups(pf: pq.ParquetFile, lo: int | None, hi: int | None) -> list[int]:
    md = pf.metadata
    if lo is None and hi is None:
        return list(range(md.num_row_groups))
    t_idx = pf.schema_arrow.get_field_index("open_time")
    keep = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(t_idx).statistics
        if st is None or not st.has_min_max:
            keep.append(i)
            continue
        mn, mx = _stat_us(st.min), _stat_us(st.max)
        if (lo is None or mx >= lo) and (hi is None or mn <= hi):
            keep.append(i)
    return keep


def _stat_us(v) -> int:
    if isinstance(v, dt.datetime):
        return to_us(v)
    return int(v)  # raw int64 microseconds


def _slice_sorted(t: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    ot = _column_numpy(t.column("open_time").cast(pa.int64()), pa.int64())
    a = 0 if lo is None else int(np.searchsorted(ot, lo, side="left"))
    b = len(ot) if hi is None else int(np.searchsorted(ot, hi, side="right"))
    return t.slice(a, b - a)


def load_bars(
    root: Path | str = DEFAULT_ROOT,
    symbol: str = "BTCUSDT",
    interval: str = "1m",
    start=None,
    end=None,
) -> Bars:
    """Bars of `symbol`/`interval` with start <= open_time <= end (end date inclusive: whole day).

    start/end: "YYYY-MM-DD", ISO datetime, datetime, int microseconds or None (unbounded).
    Gaps are kept as gaps. Raises UserError when the root or the dataset is missing, or when the
    store violates its invariants (unsorted or duplicate timestamps across files).
    """
    symbol = check_symbol(symbol)
    table = read_table(root, symbol, interval, start, end)
    bars = Bars.from_table(table, symbol, interval)
    del table  # the columns are copied out when the range spans several files or row groups:
    pa.default_memory_pool().release_unused()  # give the decoded table back (2 GB for a 1-second year)
    _check_order(bars.open_time, dataset_dir(root, symbol, interval))
    check_bars(bars, lambda i: str(year_path(root, symbol, interval, int(year_of(bars.open_time[i : i + 1])[0]))))
    log.debug("loaded %d %s %s bars from %s", len(bars), symbol, interval, root)
    return bars


def year_bars(
    root: Path | str = DEFAULT_ROOT,
    symbol: str = "BTCUSDT",
    interval: str = "1m",
    start=None,
    end=None,
) -> Iterator[Bars]:
    """The bars `load_bars` returns, one year file at a time: a pass over a whole store in one
    year's memory. Each is checked as `load_bars` checks them (the manifest before anything is read,
    then order and the bar rules, across the year boundaries too); the first break is a UserError."""
    symbol = check_symbol(symbol)
    lo, hi = _time_range(start, end)
    folder = dataset_dir(root, symbol, interval)
    before: tuple[int, float] | None = None  # open_time and close of the last bar yielded
    for path in verified_files(root, symbol, interval, lambda year: _year_overlaps(year, lo, hi)).values():
        table = _read_file(path, lo, hi, COLUMNS)
        if table is None or len(table) == 0:
            continue
        bars = Bars.from_table(table, symbol, interval)
        _check_order(bars.open_time, folder, None if before is None else before[0])
        # check_bars calls `where` before it returns, so it names this iteration's path
        check_bars(bars, lambda i: str(path), None if before is None else before[1])  # noqa: B023
        before = int(bars.open_time[-1]), float(bars.close[-1])
        yield bars


def _check_order(open_time: np.ndarray, folder: Path, prev_time: int | None = None) -> None:
    """UserError unless open_time (after `prev_time`, if given) is strictly increasing."""
    t = open_time if prev_time is None else np.concatenate([[prev_time], open_time])
    d = np.diff(t)
    if len(d) and not (d > 0).all():
        i = int(np.argmin(d > 0))
        raise UserError(
            f"bar store {folder} is corrupt: open_time must be strictly increasing, "
            f"got {iso(t[i])} then {iso(t[i + 1])}"
        )


# ---------------------------------------------------------------------------------------------
# Bar rules: what every stored bar obeys, checked at import and on every read


# A one-bar move bound that no market we know of breaks but that damaged bytes almost always do: a
# close within a factor of 10 of the previous close, a high within a factor of 10 of the low.
# BTCUSDT 1m 2017-2025 peaks at |log(close/previous close)| = 0.075 (2020-03) and log(high/low) =
# 0.117, 20 to 30 times below it (docs/data.md).
MAX_LOG_MOVE = math.log(10)


def bar_problem(b: Bars) -> tuple[int, str] | None:
    """The first bar that breaks a per-bar rule, as (index, rule and values), else None.

    Rules, in this order: finite positive prices; high >= max(open, close); low <= min(open, close);
    finite volume and taker_buy_base >= 0; trades >= 0; log(high / low) <= MAX_LOG_MOVE.
    Vectorised: about 10 ms for a year of 1-minute bars.
    """

    def first(mask: np.ndarray) -> int | None:
        return int(np.argmax(mask)) if mask.any() else None

    for c in PRICE_COLUMNS:
        v = getattr(b, c)
        if (i := first(~(np.isfinite(v) & (v > 0)))) is not None:
            return i, f"{c} must be a positive finite price, got {float(v[i])!r}"
    ohlc = lambda i: f"open={float(b.open[i])!r} close={float(b.close[i])!r}"  # noqa: E731
    if (i := first(b.high < np.maximum(b.open, b.close))) is not None:
        return i, f"high must be >= max(open, close), got high={float(b.high[i])!r} {ohlc(i)}"
    if (i := first(b.low > np.minimum(b.open, b.close))) is not None:
        return i, f"low must be <= min(open, close), got low={float(b.low[i])!r} {ohlc(i)}"
    for c in ("volume", "taker_buy_base"):
        v = getattr(b, c)
        if (i := first(~(np.isfinite(v) & (v >= 0)))) is not None:
            return i, f"{c} must be finite and >= 0, got {float(v[i])!r}"
    if (i := first(b.trades < 0)) is not None:
        return i, f"trades must be >= 0, got {int(b.trades[i])}"
    if (i := first(np.log(b.high / b.low) > MAX_LOG_MOVE)) is not None:
        return i, (
            f"high must be at most 10 times low (log(high/low) <= {MAX_LOG_MOVE:.3f}), got "
            f"high={float(b.high[i])!r} low={float(b.low[i])!r}"
        )
    return None


def move_problem(close: np.ndarray, prev_close: float | None = None) -> tuple[int, str] | None:
    """The first bar whose close moved more than MAX_LOG_MOVE (in log) from the previous bar's
    close, as (index, rule and values), else None. `prev_close`: the close before close[0], if any."""
    c = close if prev_close is None else np.concatenate([[prev_close], close])
    if len(c) < 2:
        return None
    move = np.abs(np.diff(np.log(c)))
    if not (move > MAX_LOG_MOVE).any():
        return None
    j = int(np.argmax(move > MAX_LOG_MOVE))
    i = j + 1 if prev_close is None else j
    return i, (
        f"close must stay within a factor of 10 of the previous close (|log(close/previous close)| <= "
        f"{MAX_LOG_MOVE:.3f}), got {float(c[j + 1])!r} after {float(c[j])!r}"
    )


def check_bars(b: Bars, where: Callable[[int], str], prev_close: float | None = None) -> None:
    """UserError naming where(i) (the file), the bar time and the values, for the first bar that
    breaks `bar_problem`'s or `move_problem`'s rules."""
    found = bar_problem(b) or move_problem(b.close, prev_close)
    if found is not None:
        i, rule = found
        raise UserError(f"{where(i)}: bar {iso(b.open_time[i])}: {rule}")


# ---------------------------------------------------------------------------------------------
# Gaps and fingerprints


@dataclass
class Gaps:
    """Gaps of a bar series, each of shape (n_gaps,): before = open_time of the last bar before
    the gap, after = open_time of the first bar after it (int64 us), missing = bars missing."""

    before: np.ndarray
    after: np.ndarray
    missing: np.ndarray
    interval_us: int = INTERVAL_US["1m"]

    def __len__(self) -> int:
        return len(self.before)

    @property
    def start(self) -> np.ndarray:
        """open_time of the first missing bar of each gap."""
        return self.before + self.interval_us

    def filter(self, min_missing: int) -> Gaps:
        """Only the gaps with at least `min_missing` missing bars."""
        keep = self.missing >= min_missing
        return Gaps(self.before[keep], self.after[keep], self.missing[keep], self.interval_us)

    def to_records(self) -> list[dict]:
        """One dict per gap: start (ISO, first missing bar), before, after, missing, hours."""
        return [
            {
                "start": iso(b + self.interval_us),
                "before": iso(b),
                "after": iso(a),
                "missing": int(m),
                "hours": round(int(m) * self.interval_us / 3.6e9, 3),
            }
            for b, a, m in zip(self.before.tolist(), self.after.tolist(), self.missing.tolist(), strict=True)
        ]


def find_gaps(open_time_us: np.ndarray, interval_us: int) -> Gaps:
    """Every place where consecutive bars are more than one interval apart.

    open_time_us: sorted int64 microseconds, shape (n_bars,). A gap of k missing bars has
    after - before == (k + 1) * interval_us. Nothing is filled.
    """
    t = np.asarray(open_time_us, dtype=np.int64)
    d = np.diff(t)
    idx = np.flatnonzero(d > interval_us)
    missing = d[idx] // interval_us - 1
    return Gaps(t[idx], t[idx + 1], missing.astype(np.int64), int(interval_us))


def gap_table(root=DEFAULT_ROOT, symbol="BTCUSDT", interval="1m", start=None, end=None, min_missing=1) -> Gaps:
    """The gaps of the stored series in [start, end] with at least `min_missing` missing bars.

    Reads the bars year by year, checked as `load_bars` checks them. Gaps are between stored bars:
    the edges of the range are not gaps.
    """
    parts = [b.open_time.copy() for b in year_bars(root, symbol, interval, start, end)]  # not the year's other columns
    ot = np.concatenate(parts) if parts else np.empty(0, np.int64)
    return find_gaps(ot, INTERVAL_US[interval]).filter(min_missing)


def fingerprint(bars: Bars) -> dict:
    """{"first", "last" (ISO), "count", "sha256" (hex of every column's bytes in SCHEMA order)}."""
    h = hashlib.sha256()
    for name in COLUMNS:
        h.update(np.ascontiguousarray(getattr(bars, name)).tobytes())
    return {
        "first": iso(bars.open_time[0]) if len(bars) else None,
        "last": iso(bars.open_time[-1]) if len(bars) else None,
        "count": len(bars),
        "sha256": h.hexdigest(),
    }


# ---------------------------------------------------------------------------------------------
# Writing
#
# New bars reach the year files as `Part`s: runs sorted by open_time, read chunk by chunk, so that
# merging a month of 1-second bars (2.6 M rows) into a year file (up to 31.5 M rows) holds a few
# chunks in memory, never the month or the year. Two passes: the first checks every conflict of
# every dataset and year (reading only the stored row groups the new bars overlap), the second
# streams the merged years into temporary files and renames each over its year file.

ORIGIN = "origin"  # int64 column of a Part's chunks: the row's line or row number in its source
_WRITE_OPTIONS = dict(
    compression="zstd",
    use_dictionary=False,
    # sorted minute timestamps delta-encode to almost nothing (~1.6 KB a year)
    column_encoding={"open_time": "DELTA_BINARY_PACKED", "trades": "DELTA_BINARY_PACKED"},
    write_statistics=True,
    # a CRC32 per page, checked on every read (READ_OPTIONS): a copy without its manifest still
    # refuses damaged pages rather than decoding them into other prices
    write_page_checksum=True,
)
READ_OPTIONS = dict(page_checksum_verification=True)  # files written without page CRCs read as before


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    """Write `table` to `path` atomically (tsflash.atomic): a killed write never leaves a partial
    file under the real name."""
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE, **_WRITE_OPTIONS)


def _conform(table: pa.Table) -> pa.Table:
    """`table` with exactly the SCHEMA columns and types (open_time cast to us UTC)."""
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise UserError(f"bars need columns {', '.join(COLUMNS)}; missing {', '.join(missing)}")
    cols = []
    for f in SCHEMA:
        c = table.column(f.name)
        if f.name == "open_time" and pa.types.is_integer(c.type):
            c = c.cast(pa.int64()).cast(f.type)
        cols.append(c.cast(f.type))
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def _times(table: pa.Table) -> np.ndarray:
    """open_time of a table as int64 microseconds (zero-copy for one chunk)."""
    return _column_numpy(table.column("open_time").cast(pa.int64()), pa.int64())


@dataclass
class Part:
    """New bars for one dataset: sorted by open_time (repeats allowed), read chunk by chunk.

    chunks() yields Tables of the SCHEMA columns plus ORIGIN; describe(origin) words where a row
    came from for error messages ("x.zip:x.csv line 12"). first/last: open_time of its first and
    last bar (us).
    """

    chunks: Callable[[], Iterator[pa.Table]]
    first: int
    last: int
    describe: Callable[[int], str]


@dataclass
class MergeResult:
    """What a merge did: bars added per year, identical duplicates dropped, files written."""

    added: dict[int, int]
    duplicates: int
    written: list[Path]


def table_part(table: pa.Table, origin: Callable[[int], str] | None = None) -> Part | None:
    """An in-memory table (SCHEMA columns, any order) as a Part; row i is described by origin(i)
    (default "row i"). None for an empty table."""
    table = _conform(table)
    if table.num_rows == 0:
        return None
    order = np.argsort(_times(table), kind="stable")
    table = table.take(order).append_column(ORIGIN, pa.array(order, pa.int64()))
    t = _times(table)

    def chunks():
        for lo in range(0, table.num_rows, ROW_GROUP_SIZE):
            yield table.slice(lo, ROW_GROUP_SIZE)

    return Part(chunks, int(t[0]), int(t[-1]), origin or (lambda i: f"row {i}"))


def write_year_files(
    root: Path | str,
    symbol: str,
    interval: str,
    table: pa.Table,
    origin: Callable[[int], str] | None = None,
) -> MergeResult:
    """Merge `table` (SCHEMA columns; need not be sorted) into the per-year files of the store.

    Bars whose open_time is already stored with identical values are dropped and counted; a bar
    whose open_time is stored (or repeated in `table`) with different values is a conflicting
    duplicate: UserError, and nothing is written. `origin(i)` describes row i of `table` for
    that message (e.g. "file.zip line 12"). See `merge_parts`.
    """
    part = table_part(table, origin)
    symbol = check_symbol(symbol)
    return merge_parts(root, {(symbol, interval): [part] if part else []})[(symbol, interval)]


def first_conflicting_duplicate(cols, dup: np.ndarray, order: np.ndarray | None = None) -> int | None:
    """The first position in `dup` whose bar repeats the previous one's open_time with different
    values, or None when every repeat is identical (identical duplicates are simply dropped).

    cols : an object with the COLUMNS as arrays (Bars, or a table's columns); order : the
    permutation that sorts them (None: already in order); dup : positions, in that order, whose
    open_time equals the previous position's.
    """
    same = np.ones(len(dup), bool)
    for name in COLUMNS[1:]:
        v = getattr(cols, name)
        v = v if order is None else v[order]
        same &= v[dup] == v[dup - 1]
    return None if same.all() else int(dup[np.argmin(same)])


def merge_parts(root: Path | str, datasets: dict[tuple[str, str], list[Part]]) -> dict[tuple[str, str], MergeResult]:
    """Merge new bars into the per-year files: {(SYMBOL, interval): parts} -> {same: MergeResult}.

    Every conflict check of every dataset and year runs before the first write; each year file is
    then replaced atomically (temp file + rename), and a year that gains no bars is not
    rewritten, so importing the same data twice changes nothing. Memory: a few chunks per Part
    that overlaps another in time, whatever the size of the parts and of the year files.
    """
    plans = {}
    for (symbol, interval), parts in datasets.items():
        check_interval(interval)
        by_year = _parts_by_year([p for p in parts if p is not None])
        if by_year and dataset_dir(root, symbol, interval).is_dir():
            # a damaged stored year would be merged into a new file under a fresh checksum: refuse it first
            # (keep is called within this iteration, so it reads this dataset's years)
            verified_files(root, symbol, interval, lambda year: year in by_year)  # noqa: B023
        checked = {y: _merge_year(root, symbol, interval, y, ps, write=False) for y, ps in by_year.items()}
        plans[(symbol, interval)] = (by_year, checked)
    results = {}
    for (symbol, interval), (by_year, checked) in plans.items():
        added, written = {}, []
        for year, (n_added, _) in checked.items():
            if n_added:
                n_written, _ = _merge_year(root, symbol, interval, year, by_year[year], write=True)
                assert n_written == n_added, (n_written, n_added)
                added[year] = n_added
                written.append(year_path(root, symbol, interval, year))
                log.info("wrote %s (+%d bars)", written[-1], n_added)
        results[(symbol, interval)] = MergeResult(added, sum(d for _, d in checked.values()), written)
    return results


def _parts_by_year(parts: list[Part]) -> dict[int, list[Part]]:
    """{year: the parts (clipped to that year) with bars in it}."""
    out: dict[int, list[Part]] = {}
    for p in parts:
        y0, y1 = (int(y) for y in year_of(np.array([p.first, p.last], np.int64)))
        for year in range(y0, y1 + 1):
            lo, hi = max(p.first, year_start_us(year)), min(p.last, year_start_us(year + 1) - 1)
            out.setdefault(year, []).append(_clip(p, lo, hi))
    return dict(sorted(out.items()))


def _clip(part: Part, lo: int, hi: int) -> Part:
    """The rows of `part` with lo <= open_time <= hi."""

    def chunks():
        for c in part.chunks():
            t = _times(c)
            if len(t) and t[-1] >= lo and t[0] <= hi:
                a, b = np.searchsorted(t, lo, "left"), np.searchsorted(t, hi, "right")
                yield c.slice(int(a), int(b - a))

    return Part(chunks, lo, hi, part.describe)


def _stored_part(path: Path, lo: int | None = None, hi: int | None = None) -> Part:
    """A stored year file as a Part (row groups overlapping [lo, hi] only, when given)."""

    def chunks():
        try:
            pf = pq.ParquetFile(path, **READ_OPTIONS)
            groups = _overlapping_row_groups(pf, lo, hi)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise unreadable(path, exc) from None
        for i in groups:
            try:
                t = _conform(pf.read_row_group(i))
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise unreadable(path, exc) from None
            yield t.append_column(ORIGIN, pa.array(np.full(t.num_rows, -1, np.int64)))

    return Part(chunks, 0, 0, lambda _: f"stored file {path}")


def _merge_year(root, symbol, interval, year, parts, write: bool) -> tuple[int, int]:
    """Merge `parts` (all inside `year`) with the stored year file: (bars added, identical duplicates).

    write=False checks only (the stored row groups the parts overlap are read); write=True streams
    the whole merged year into a temporary file renamed over the year file.
    """
    path = year_files(root, symbol, interval).get(year)
    sources = list(parts)
    if path is not None:
        lo, hi = (None, None) if write else (min(p.first for p in parts), max(p.last for p in parts))
        sources.insert(0, _stored_part(path, lo, hi))
    merged = _merge_sorted(sources, check_interval(interval), interval)
    if not write:
        added = dups = 0
        for table, src, n_dup in merged:
            added += int((src > 0).sum()) if path is not None else table.num_rows
            dups += n_dup
        return added, dups
    added = dups = 0
    target = year_path(root, symbol, interval, year)
    staged = []
    try:
        with atomic.atomic_path(target) as tmp:
            with pq.ParquetWriter(tmp, SCHEMA, **_WRITE_OPTIONS) as writer:
                pending: list[pa.Table] = []
                n_pending = 0
                for table, src, n_dup in merged:
                    added += int((src > 0).sum()) if path is not None else table.num_rows
                    dups += n_dup
                    pending.append(table.drop_columns([ORIGIN]))
                    n_pending += table.num_rows
                    if n_pending >= ROW_GROUP_SIZE:  # whole row groups only, so chunk sizes do not matter
                        n_pending = _write_groups(writer, pending, final=False)
                _write_groups(writer, pending, final=True)
            entry = manifest.file_entry(tmp)
            # killed after the rename below, the manifest already accepts the new bytes
            staged.append(manifest.stage(target.parent, target.name, entry))
    except Exception:
        if staged:  # the rename failed (a full disk): the old file stays, and so does its entry alone
            manifest.unstage(target.parent, target.name, staged[0])
        raise
    manifest.commit(target.parent, target.name, entry)
    return added, dups


def _write_groups(writer: pq.ParquetWriter, pending: list[pa.Table], final: bool) -> int:
    """Write the whole ROW_GROUP_SIZE groups of `pending` (everything when final); keep the rest in
    `pending` and return its row count."""
    if not pending:
        return 0
    table = pa.concat_tables(pending)
    n = table.num_rows if final else table.num_rows - table.num_rows % ROW_GROUP_SIZE
    if n:
        writer.write_table(table.slice(0, n), row_group_size=ROW_GROUP_SIZE)
    pending[:] = [table.slice(n)] if n < table.num_rows else []
    return table.num_rows - n


def _merge_sorted(parts: list[Part], interval_us: int, interval: str) -> Iterator[tuple[pa.Table, np.ndarray, int]]:
    """k-way merge of sorted parts: yields (chunk sorted by open_time without repeats, part index of
    each row, identical duplicates dropped), in time order.

    Each step takes every row up to the smallest last open_time among the buffered chunks, so
    equal timestamps always meet in one step and each step empties at least one buffer. A part is
    opened only when the merge reaches its first bar, so parts that follow one another (daily or
    monthly archives) hold one chunk at a time. On equal timestamps the earlier part wins (the
    stored file first); a different value is a conflict.
    """
    pending = sorted(range(len(parts)), key=lambda i: (parts[i].first, i))
    iters: dict[int, Iterator[pa.Table]] = {}
    bufs: dict[int, pa.Table] = {}
    takes, src = [], []  # steps gathered until a row group's worth (many small parts: few dedupes)
    while pending or bufs:
        if not bufs:
            _open(parts, pending.pop(0), iters, bufs)
            continue
        cut = min(int(_times(b)[-1]) for b in bufs.values())
        if pending and parts[pending[0]].first <= cut:
            _open(parts, pending.pop(0), iters, bufs)
            continue
        for i in sorted(bufs):
            while i in bufs:  # a part's next chunk may start with `cut` again: take those rows too
                k = int(np.searchsorted(_times(bufs[i]), cut, "right"))
                takes.append(bufs[i].slice(0, k))
                src.append(np.full(k, i, np.int64))
                if k < bufs[i].num_rows:
                    bufs[i] = bufs[i].slice(k)
                    break
                del bufs[i]
                _refill(i, iters, bufs)
        if sum(t.num_rows for t in takes) >= ROW_GROUP_SIZE:
            # steps are in time order, so repeats of one timestamp never straddle two yields
            yield _dedupe(pa.concat_tables(takes), np.concatenate(src), parts, interval_us, interval)
            takes, src = [], []
    if takes:
        yield _dedupe(pa.concat_tables(takes), np.concatenate(src), parts, interval_us, interval)


def _open(parts, i, iters, bufs) -> None:
    iters[i] = iter(parts[i].chunks())
    _refill(i, iters, bufs)


def _refill(i, iters, bufs) -> None:
    """Next non-empty chunk of part i into bufs[i], or drop the finished part."""
    for chunk in iters[i]:
        if chunk.num_rows:
            t = _times(chunk)
            assert (np.diff(t) >= 0).all(), "a Part's chunks must be sorted by open_time"
            bufs[i] = chunk
            return
    del iters[i]


def _dedupe(table: pa.Table, src: np.ndarray, parts: list[Part], interval_us: int, interval: str):
    """Sort one merge step by (open_time, part), drop identical repeats; a different repeat or a
    bar off the interval grid is a UserError naming the rows' origins."""
    cols = Bars.from_table(table, "X", interval)
    origin = _column_numpy(table.column(ORIGIN), pa.int64())

    def describe(j: int) -> str:
        return parts[int(src[j])].describe(int(origin[j]))

    off_grid = np.flatnonzero(cols.open_time % interval_us)
    if len(off_grid):
        j = int(off_grid[0])
        raise UserError(f"{describe(j)}: open_time must be on the {interval} grid, got {iso(cols.open_time[j])}")
    order = np.lexsort((src, cols.open_time))
    t = cols.open_time[order]
    dup = np.flatnonzero(t[1:] == t[:-1]) + 1  # positions (in sorted order) repeating the previous
    if len(dup):
        k = first_conflicting_duplicate(cols, dup, order)
        if k is not None:
            raise UserError(
                f"conflicting duplicate bar at {iso(t[k])}: {describe(order[k - 1])} and {describe(order[k])} "
                f"have different values (identical duplicates are dropped, different ones are an error)"
            )
    keep = np.ones(len(order), bool)
    keep[dup] = False
    return table.take(order[keep]), src[order[keep]], len(dup)


# Dataclass field names must match SCHEMA; a cheap import-time invariant.
assert tuple(f.name for f in fields(Bars))[: len(COLUMNS)] == COLUMNS
