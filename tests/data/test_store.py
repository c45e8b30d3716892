"""The canonical store: layout, range loading, gaps, fingerprints, merging, and the shared data."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tsflash.data import store
from tsflash.errors import UserError

MIN_US = store.INTERVAL_US["1m"]


def make_bars(open_time_us: np.ndarray, symbol="BTCUSDT", interval="1m") -> store.Bars:
    n = len(open_time_us)
    price = 100.0 + np.arange(n, dtype=np.float64)
    return store.Bars(
        open_time=np.asarray(open_time_us, np.int64), open=price, high=price + 1, low=price - 1,
        close=price + 0.5, volume=np.where(np.arange(n) % 4 == 0, 0.0, 1.25), trades=np.arange(n, dtype=np.int64),
        taker_buy_base=np.full(n, 0.5), symbol=symbol, interval=interval,
    )  # fmt: skip


def minutes(start: str, n: int, skip: tuple[tuple[int, int], ...] = ()) -> np.ndarray:
    """n-plus-skipped minute timestamps from `start`, with [a, b) index ranges removed (gaps)."""
    t0 = store.to_us(start)
    total = n + sum(b - a for a, b in skip)
    keep = np.ones(total, bool)
    for a, b in skip:
        keep[a:b] = False
    return t0 + MIN_US * np.flatnonzero(keep).astype(np.int64)


@pytest.fixture
def small_store(tmp_path):
    """Bars from 2023-12-31 22:00 to 2024-01-01 02:00 with a 5-minute gap, across two year files."""
    t = minutes("2023-12-31T22:00", 235, skip=((30, 35),))
    store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t).to_table())
    return tmp_path, t


def test_layout_and_schema(small_store):
    root, t = small_store
    files = store.year_files(root, "BTCUSDT", "1m")
    assert list(files) == [2023, 2024]
    assert files[2023] == root / "btcusdt-1m" / "btcusdt-1m-2023.parquet"
    for p in files.values():
        assert pq.read_schema(p).remove_metadata() == store.SCHEMA
    assert store.list_datasets(root) == [("BTCUSDT", "1m")]


def test_load_all_and_ranges(small_store):
    root, t = small_store
    bars = store.load_bars(root)
    np.testing.assert_array_equal(bars.open_time, t)
    assert bars.open_time.dtype == np.int64 and bars.trades.dtype == np.int64 and bars.close.dtype == np.float64
    # a date end means the whole day; start is 00:00 of its day
    day = store.load_bars(root, start="2024-01-01", end="2024-01-01")
    assert store.iso(day.open_time[0]) == "2024-01-01 00:00:00" and store.iso(day.open_time[-1]) == "2024-01-01 01:59:00"
    assert len(day) == 120
    only_2023 = store.load_bars(root, end="2023-12-31")
    assert only_2023.open_time[-1] == store.to_us("2023-12-31T23:59")
    exact = store.load_bars(root, start=dt.datetime(2023, 12, 31, 22, 10), end=dt.datetime(2023, 12, 31, 22, 19))
    assert len(exact) == 10
    ints = store.load_bars(root, start=int(t[3]), end=int(t[7]))
    np.testing.assert_array_equal(ints.open_time, t[3:8])
    empty = store.load_bars(root, start="2030-01-01")
    assert len(empty) == 0 and empty.close.dtype == np.float64


def test_load_errors(tmp_path, small_store):
    root, _ = small_store
    with pytest.raises(UserError, match=r"bar store root '.*nowhere' does not exist"):
        store.load_bars(tmp_path / "nowhere")
    with pytest.raises(UserError, match=r"no bars for ETHUSDT 1m in store .*; datasets there: BTCUSDT 1m"):
        store.load_bars(root, "ETHUSDT")
    with pytest.raises(UserError, match=r"interval must be one of .*got '2m'"):
        store.load_bars(root, interval="2m")
    with pytest.raises(UserError, match=r"time range: end 2023-01-01 is before start 2024-01-01"):
        store.load_bars(root, start="2024-01-01", end="2023-01-01")
    with pytest.raises(UserError, match=r"a time must be YYYY-MM-DD or an ISO datetime, got '2024/01/01'"):
        store.load_bars(root, start="2024/01/01")
    with pytest.raises(UserError, match=r"symbol must be letters and digits only .*got '\.\./x'"):
        store.load_bars(root, symbol="../x")


def test_corrupt_store_is_detected(small_store):
    root, t = small_store
    # a 2024 file that also holds a 2023 bar already stored in the 2023 file
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    tbl = pq.read_table(p)
    bad = pa.concat_tables([make_bars(t[:1]).to_table(), tbl])
    pq.write_table(bad, p)
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.parquet differs from the store manifest \(sha256 expected .*; rows expected 120, found 121\)"):
        store.load_bars(root)
    # without the manifest (an older store) the invariant itself still refuses it
    (p.parent / "manifest.json").unlink()
    with pytest.raises(UserError, match=r"is corrupt: open_time must be strictly increasing, got 2023-12-31 23:59:00 then 2023-12-31 22:00:00"):
        store.load_bars(root)


def test_row_group_pruning_reads_less(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "ROW_GROUP_SIZE", 100)
    t = minutes("2024-03-01", 1000)
    store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t).to_table())
    pf = pq.ParquetFile(store.year_path(tmp_path, "BTCUSDT", "1m", 2024))
    assert pf.metadata.num_row_groups == 10
    assert store._overlapping_row_groups(pf, int(t[250]), int(t[260])) == [2]
    assert store._overlapping_row_groups(pf, int(t[199]), int(t[200])) == [1, 2]
    got = store.load_bars(tmp_path, start=int(t[250]), end=int(t[260]))
    np.testing.assert_array_equal(got.open_time, t[250:261])


def test_find_gaps():
    t = minutes("2024-01-01", 20, skip=((3, 4), (10, 15)))
    g = store.find_gaps(t, MIN_US)
    assert g.missing.tolist() == [1, 5]
    assert g.before.tolist() == [t[2], t[8]]
    assert g.after.tolist() == [t[3], t[9]]
    assert [store.iso(s) for s in g.start] == ["2024-01-01 00:03:00", "2024-01-01 00:10:00"]
    assert g.filter(2).missing.tolist() == [5]
    assert g.to_records()[1] == {
        "start": "2024-01-01 00:10:00", "before": "2024-01-01 00:09:00", "after": "2024-01-01 00:15:00",
        "missing": 5, "hours": round(5 / 60, 3),
    }  # fmt: skip
    assert len(store.find_gaps(t[:1], MIN_US)) == 0
    assert len(store.find_gaps(minutes("2024-01-01", 50), MIN_US)) == 0


def test_gap_table(small_store):
    root, _ = small_store
    g = store.gap_table(root)
    assert g.missing.tolist() == [5] and store.iso(g.start[0]) == "2023-12-31 22:30:00"
    assert len(store.gap_table(root, start="2024-01-01")) == 0
    assert len(store.gap_table(root, min_missing=6)) == 0


def test_fingerprint_changes_with_any_value(small_store):
    root, _ = small_store
    a = store.load_bars(root)
    fp = store.fingerprint(a)
    assert fp["count"] == len(a) and fp["first"] == "2023-12-31 22:00:00"
    b = store.load_bars(root)
    assert store.fingerprint(b) == fp
    b.taker_buy_base = b.taker_buy_base.copy()
    b.taker_buy_base[17] += 1e-9
    assert store.fingerprint(b)["sha256"] != fp["sha256"]


def test_write_year_files_merge_rules(tmp_path):
    t = minutes("2024-05-01", 10)
    r = store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t).slice(5, 10).to_table())
    assert r.added == {2024: 5}
    # unsorted input with an overlap: sorted union, identical overlap dropped and counted
    shuffled = make_bars(t).to_table().take(pa.array([9, 0, 3, 1, 2, 4, 8, 5, 6, 7]))
    r = store.write_year_files(tmp_path, "BTCUSDT", "1m", shuffled)
    assert r.added == {2024: 5} and r.duplicates == 5
    np.testing.assert_array_equal(store.load_bars(tmp_path).open_time, t)
    r = store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t).to_table())
    assert r.added == {} and r.written == []
    changed = make_bars(t).slice(2, 3)
    changed.volume = np.array([99.0])
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-05-01 00:02:00: stored file .* and row 0"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", changed.to_table())
    off = make_bars(t[:1] + 30_000_000)
    with pytest.raises(UserError, match=r"row 0: open_time must be on the 1m grid, got 2024-05-01 00:00:30"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", off.to_table())
    with pytest.raises(UserError, match=r"bars need columns .*; missing volume"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t).to_table().drop_columns(["volume"]))


def test_to_us_conventions():
    assert store.to_us("1970-01-02") == store.US_PER_DAY
    assert store.to_us("1970-01-02", end=True) == 2 * store.US_PER_DAY - 1
    assert store.to_us("1970-01-01T00:01") == MIN_US
    assert store.to_us(dt.datetime(1970, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == 0
    assert store.to_us(None) is None
    assert store.year_of(np.array([store.to_us("2024-12-31T23:59"), store.to_us("2025-01-01")])).tolist() == [2024, 2025]


def test_all_shared_bars(shared_store):
    """The whole shared dataset: 4,131,128 bars, 35 gaps (any missing minute counts), 23,863
    zero-volume bars, strictly increasing on the minute grid."""
    bars = store.load_bars(shared_store)
    assert len(bars) == 4_131_128
    assert store.iso(bars.open_time[0]) == "2017-08-17 04:00:00"
    assert store.iso(bars.open_time[-1]) == "2025-06-30 23:59:00"
    assert (np.diff(bars.open_time) > 0).all() and (bars.open_time % MIN_US == 0).all()
    gaps = store.find_gaps(bars.open_time, bars.interval_us)
    assert len(gaps) == 35
    longest = int(np.argmax(gaps.missing))
    assert store.iso(gaps.start[longest]).startswith("2018-02-08") and gaps.missing[longest] == 2011  # ~33.5 h
    assert int((bars.volume == 0).sum()) == 23_863
    assert len(store.gap_table(shared_store)) == 35
    assert store.gap_table(shared_store, start="2023-03-24", end="2023-03-24").missing.tolist() == [80]


def test_store_runs_without_polars(small_store):
    """The GPU machine has no polars: reading the store must not import it."""
    root, t = small_store
    code = (
        "import sys; sys.modules['polars'] = None\n"
        "from tsflash.data.store import load_bars, gap_table\n"
        f"b = load_bars({str(root)!r}); g = gap_table({str(root)!r})\n"
        "print(len(b), g.missing.tolist(), 'polars' in sys.modules and sys.modules['polars'] is not None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(len(t)), "[5]", "False"]


# ---------------------------------------------------------------------------------------------
# Streamed merges (Parts): what a 1-second month needs


def counting_part(bars: store.Bars, chunk: int, log: list, name: str) -> store.Part:
    """A Part over `bars` in chunks of `chunk` rows that records each chunk it hands out."""
    table = bars.to_table().append_column(store.ORIGIN, pa.array(np.arange(len(bars), dtype=np.int64)))

    def chunks():
        for lo in range(0, len(bars), chunk):
            log.append((name, lo))
            yield table.slice(lo, chunk)

    return store.Part(chunks, int(bars.open_time[0]), int(bars.open_time[-1]), lambda i: f"{name} row {i}")


def test_merge_parts_streams_and_opens_parts_only_when_reached(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "ROW_GROUP_SIZE", 10)
    t = minutes("2024-05-01", 100)
    every = make_bars(t)
    log: list = []
    parts = [counting_part(every.slice(60, 100), 7, log, "c"), counting_part(every.slice(0, 50), 7, log, "a"),
             counting_part(every.slice(40, 70), 7, log, "b")]  # out of order, overlapping
    res = store.merge_parts(tmp_path, {("BTCUSDT", "1m"): parts})[("BTCUSDT", "1m")]
    assert res.added == {2024: 100} and res.duplicates == 10 + 10
    assert store.fingerprint(store.load_bars(tmp_path)) == store.fingerprint(every)
    pf = pq.ParquetFile(store.year_path(tmp_path, "BTCUSDT", "1m", 2024))
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)] == [10] * 10
    # part "c" (first bar at minute 60) is opened only once "a" ended and "b" reached minute 60
    # (its third chunk, minutes 54..60): one chunk per part in memory, not whole parts
    first_c = next(i for i, (name, _) in enumerate(log) if name == "c")
    assert log.index(("a", 49)) < first_c and log.index(("b", 14)) < first_c < log.index(("b", 21))


def test_repeats_that_straddle_chunks_are_still_found(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "ROW_GROUP_SIZE", 4)
    t = minutes("2024-05-01", 6)
    doubled = make_bars(np.repeat(t, 2))  # each bar twice, identical: chunks of 4 cut some pairs apart
    doubled.volume, doubled.close = np.repeat(make_bars(t).volume, 2), np.repeat(make_bars(t).close, 2)
    for name in ("open", "high", "low", "trades", "taker_buy_base"):
        setattr(doubled, name, np.repeat(getattr(make_bars(t), name), 2))
    r = store.write_year_files(tmp_path, "BTCUSDT", "1m", doubled.slice(1, 12).to_table())
    assert r.added == {2024: 6} and r.duplicates == 5
    clash = make_bars(np.repeat(t, 2))  # the second copy of each bar differs (price + 1 each row)
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-05-01 00:00:00: row 0 and row 1 have"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", clash.to_table())  # row 0 equals the stored bar
    clash.close[0] += 0.5
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-05-01 00:00:00: stored file .* and row 0"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", clash.to_table())
    fresh = tmp_path / "fresh"
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-05-01 00:00:00: row 0 and row 1 have"):
        store.write_year_files(fresh, "BTCUSDT", "1m", clash.to_table())
    assert not fresh.exists()  # every check before the first write: not even the folder


def test_a_conflict_in_a_later_year_writes_no_earlier_year(tmp_path):
    t = minutes("2023-12-31T23:58", 4)  # two bars in 2023, two in 2024
    store.write_year_files(tmp_path, "BTCUSDT", "1m", make_bars(t[2:]).to_table())
    changed = make_bars(t)
    changed.volume = changed.volume + 7.0
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-01-01 00:00:00"):
        store.write_year_files(tmp_path, "BTCUSDT", "1m", changed.to_table())
    assert list(store.year_files(tmp_path, "BTCUSDT", "1m")) == [2024]


def test_a_part_that_turns_out_empty_ends_the_merge_cleanly(tmp_path):
    """A part opened last that yields no bar (its `first` is only a bound) loses none of the bars
    merged before it; one spanning a year without bars is handed that year and yields nothing."""
    t = minutes("2024-06-01", 5)
    empty = store.Part(lambda: iter([]), int(t[-1]) + 10 * MIN_US, int(t[-1]) + 20 * MIN_US, lambda i: f"row {i}")
    res = store.merge_parts(tmp_path / "a", {("BTCUSDT", "1m"): [store.table_part(make_bars(t).to_table()), empty]})
    assert res[("BTCUSDT", "1m")].added == {2024: 5} and len(store.load_bars(tmp_path / "a")) == 5
    across = store.table_part(make_bars(np.r_[minutes("2023-12-31T23:58", 2), minutes("2025-01-01", 2)]).to_table())
    res = store.merge_parts(tmp_path / "b", {("BTCUSDT", "1m"): [across]})[("BTCUSDT", "1m")]
    assert res.added == {2023: 2, 2025: 2} and sorted(store.year_files(tmp_path / "b", "BTCUSDT", "1m")) == [2023, 2025]
