"""Import rules (issue item 4) on tiny generated files, and the two real archives."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tsflash.data import ingest, store
from tsflash.errors import UserError

MIN_US = 60_000_000
T0 = 1_704_067_200_000_000  # 2024-01-01 00:00 UTC in microseconds
HEADER = b"open_time,open,high,low,close,volume,close_time,quote_volume,count,taker_buy_volume,taker_buy_quote_volume,ignore\n"


def tiny_bars(n: int = 8, t0: int = T0, seed: int = 0) -> store.Bars:
    """n valid consecutive 1-minute bars with a few zero-volume ones."""
    rng = np.random.default_rng(seed)
    close = np.round(40000 + np.cumsum(rng.normal(0, 10, n)), 2)
    open_ = np.round(np.r_[close[0] - 1.5, close[:-1]], 2)
    high = np.round(np.maximum(open_, close) + rng.uniform(0, 5, n), 2)
    low = np.round(np.minimum(open_, close) - rng.uniform(0, 5, n), 2)
    volume = np.round(rng.uniform(0, 3, n), 5)
    volume[::5] = 0.0
    trades = np.where(volume > 0, rng.integers(1, 500, n), 0)
    return store.Bars(
        open_time=t0 + MIN_US * np.arange(n, dtype=np.int64),
        open=open_, high=high, low=low, close=close, volume=volume,
        trades=trades.astype(np.int64), taker_buy_base=np.round(volume * 0.4, 5),
    )  # fmt: skip


def lines_of(bars, unit="ms") -> list[bytes]:
    return ingest.binance_csv(bars, unit).splitlines()


def write_csv(folder: Path, lines: list[bytes], name="BTCUSDT-1m-2024-01-01.csv", header=False) -> Path:
    p = folder / name
    p.write_bytes((HEADER if header else b"") + b"\n".join(lines) + b"\n")
    return p


def write_zip(folder: Path, lines: list[bytes], name="BTCUSDT-1m-2024-01-01", entry=None) -> Path:
    p = folder / f"{name}.zip"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(entry or f"{name}.csv", b"\n".join(lines) + b"\n")
    return p


def set_field(line: bytes, col: str, value) -> bytes:
    f = line.split(b",")
    f[ingest.BINANCE_COLUMNS.index(col)] = str(value).encode()
    return b",".join(f)


def stored(root) -> store.Bars:
    return store.load_bars(root)


def assert_same(a: store.Bars, b: store.Bars) -> None:
    assert store.fingerprint(a) == store.fingerprint(b)


# --------------------------------------------------------------------------- happy paths


@pytest.mark.parametrize("unit", ["ms", "us"])
@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("container", ["csv", "zip"])
def test_round_trip_units_header_container(tmp_path, unit, header, container):
    bars = tiny_bars(12)
    lines = lines_of(bars, unit)
    if container == "csv":
        path = write_csv(tmp_path, lines, header=header)
    else:
        path = write_zip(tmp_path, ([HEADER.strip()] if header else []) + lines)
    report = ingest.import_paths([path], tmp_path / "store")
    assert report.units == {unit: 1}
    assert report.added == {("BTCUSDT", "1m", 2024): 12}
    assert_same(stored(tmp_path / "store"), bars)


def test_unit_is_detected_per_file(tmp_path):
    a, b = tiny_bars(5), tiny_bars(5, t0=T0 + 10 * MIN_US, seed=1)
    pa_ = write_csv(tmp_path, lines_of(a, "ms"), "BTCUSDT-1m-2024-01-01.csv")
    pb = write_zip(tmp_path, lines_of(b, "us"), "BTCUSDT-1m-2024-01-02")
    report = ingest.import_paths([pa_, pb], tmp_path / "s")
    assert report.units == {"ms": 1, "us": 1}
    got = stored(tmp_path / "s")
    assert len(got) == 10
    np.testing.assert_array_equal(got.open_time, np.r_[a.open_time, b.open_time])


def test_crlf_and_bom_are_accepted(tmp_path):
    bars = tiny_bars(4)
    p = tmp_path / "BTCUSDT-1m-2024-01-01.csv"
    p.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines_of(bars)) + b"\r\n")
    ingest.import_paths([p], tmp_path / "s")
    assert_same(stored(tmp_path / "s"), bars)


def test_canonical_parquet_import(tmp_path):
    bars = tiny_bars(10)
    src = tmp_path / "btcusdt-1m-2024.parquet"
    pq.write_table(bars.to_table(), src)
    report = ingest.import_paths([src], tmp_path / "s")
    assert report.units == {"parquet": 1}
    assert_same(stored(tmp_path / "s"), bars)


def test_folder_import_spans_years_and_symbol_from_name(tmp_path):
    # bars across the 2023/2024 boundary land in two year files
    bars = tiny_bars(6, t0=T0 - 3 * MIN_US)
    src = tmp_path / "in"
    src.mkdir()
    write_csv(src, lines_of(bars), "ETHBTC-1m-2023-12-31.csv")
    (src / "notes.txt").write_text("ignored")
    report = ingest.import_paths([src], tmp_path / "s")
    assert report.added == {("ETHBTC", "1m", 2023): 3, ("ETHBTC", "1m", 2024): 3}
    assert sorted(store.year_files(tmp_path / "s", "ETHBTC", "1m")) == [2023, 2024]
    assert_same(store.load_bars(tmp_path / "s", "ETHBTC"), store.Bars(**{c: getattr(bars, c) for c in store.COLUMNS}, symbol="ETHBTC"))


def test_symbol_and_interval_must_be_known(tmp_path):
    p = write_csv(tmp_path, lines_of(tiny_bars(3)), "bars.csv")
    with pytest.raises(UserError, match=r"cannot tell symbol and interval from the file name bars\.csv"):
        ingest.import_paths([p], tmp_path / "s")
    ingest.import_paths([p], tmp_path / "s", symbol="BTCUSDT", interval="1m")
    with pytest.raises(UserError, match=r"interval must be one of .*got '7x'"):
        ingest.import_paths([p], tmp_path / "s", symbol="BTCUSDT", interval="7x")
    with pytest.raises(UserError, match=r"import path does not exist: .*nope\.csv"):
        ingest.import_paths([tmp_path / "nope.csv"], tmp_path / "s")


def test_import_twice_changes_nothing(tmp_path):
    p = write_zip(tmp_path, lines_of(tiny_bars(20)))
    root = tmp_path / "s"
    ingest.import_paths([p], root)
    f = store.year_path(root, "BTCUSDT", "1m", 2024)
    before = (f.read_bytes(), f.stat().st_mtime_ns)
    report = ingest.import_paths([p], root)
    assert report.added == {} and report.duplicates == 20
    assert (f.read_bytes(), f.stat().st_mtime_ns) == before
    assert sorted(os.listdir(f.parent)) == [f.name, "manifest.json"]  # no temp files left behind


def test_identical_duplicates_dropped_and_counted(tmp_path):
    bars = tiny_bars(6)
    lines = lines_of(bars)
    within = lines[:3] + [lines[2]] + lines[3:]  # repeated row inside one file
    p1 = write_csv(tmp_path, within, "BTCUSDT-1m-2024-01-01.csv")
    p2 = write_csv(tmp_path, lines[4:] + lines_of(tiny_bars(8))[6:], "BTCUSDT-1m-2024-01-02.csv")  # overlaps p1
    report = ingest.import_paths([p1, p2], tmp_path / "s")
    assert report.duplicates == 1 + 2
    assert report.rows == 7 + 4
    assert report.bars_added == 8
    got = stored(tmp_path / "s")
    assert len(got) == 8 and (np.diff(got.open_time) == MIN_US).all()


def test_range_trim(tmp_path):
    bars = tiny_bars(3 * 1440 // 60, t0=T0)  # 72 minutes
    p = write_csv(tmp_path, lines_of(bars))
    report = ingest.import_paths([p], tmp_path / "s", start="2024-01-01", end="2024-01-01")
    assert report.bars_added == 72
    report = ingest.import_paths([p], tmp_path / "t", start=T0 + 10 * MIN_US, end=T0 + 19 * MIN_US)
    assert report.bars_added == 10


# --------------------------------------------------------------------------- every rule of item 4


def _bad(tmp_path, mutate, container="csv"):
    lines = lines_of(tiny_bars(8))
    lines = mutate(lines)
    if container == "csv":
        return write_csv(tmp_path, lines)
    return write_zip(tmp_path, lines)


BAD_CASES = {
    "too few columns": (lambda L: L[:3] + [b",".join(L[3].split(b",")[:11])] + L[4:], r"line 4: a Binance kline row must have 12 columns, got 11"),
    "too many columns": (lambda L: L[:1] + [L[1] + b",7"] + L[2:], r"line 2: a Binance kline row must have 12 columns, got 13"),
    "blank line": (lambda L: L[:2] + [b""] + L[2:], r"line 3: a Binance kline row must have 12 columns, got 0"),
    "non-numeric price": (lambda L: L[:5] + [set_field(L[5], "high", "abc")] + L[6:], r"line 6: column high must be a number, got 'abc'"),
    "empty field": (lambda L: L[:2] + [set_field(L[2], "volume", "")] + L[3:], r"line 3: column volume must be a number, got ''"),
    "fractional trades": (lambda L: L[:1] + [set_field(L[1], "trades", "1.5")] + L[2:], r"line 2: column trades must be an integer, got '1.5'"),
    "nan price": (lambda L: L[:4] + [set_field(L[4], "open", "nan")] + L[5:], r"line 5: open must be a positive finite price, got nan"),
    "zero price": (lambda L: L[:4] + [set_field(set_field(L[4], "low", 0), "open", 0)] + L[5:], r"line 5: open must be a positive finite price, got 0\.0"),
    "negative price": (lambda L: [set_field(L[0], "low", -1)] + L[1:], r"line 1: low must be a positive finite price, got -1\.0"),
    "inf price": (lambda L: [set_field(L[0], "high", "inf")] + L[1:], r"line 1: high must be a positive finite price, got inf"),
    "high below open/close": (lambda L: L[:6] + [set_field(L[6], "high", 100)] + L[7:], r"line 7: high must be >= max\(open, close\), got high=100\.0"),
    "low above open/close": (lambda L: L[:6] + [set_field(L[6], "low", 99999)] + L[7:], r"line 7: low must be <= min\(open, close\), got low=99999\.0"),
    "negative volume": (lambda L: L[:3] + [set_field(L[3], "volume", -0.5)] + L[4:], r"line 4: volume must be finite and >= 0, got -0\.5"),
    "negative taker volume": (lambda L: L[:3] + [set_field(L[3], "taker_buy_base", -1)] + L[4:], r"line 4: taker_buy_base must be finite and >= 0, got -1\.0"),
    "negative trades": (lambda L: L[:3] + [set_field(L[3], "trades", -2)] + L[4:], r"line 4: trades must be >= 0, got -2"),
    "non-monotonic": (lambda L: L[:3] + [L[4], L[3]] + L[5:], r"line 5: timestamps must not decrease, got 2024-01-01 00:03:00 after 2024-01-01 00:04:00"),
    "conflicting duplicate": (lambda L: L[:3] + [set_field(L[2], "close_time", 1)] + [set_field(set_field(L[2], "volume", 9.5), "taker_buy_base", 0)] + L[3:], r"line 5: conflicting duplicate of .* line 4: same open_time 2024-01-01 00:02:00"),
    "off grid": (lambda L: L[:2] + [set_field(L[2], "open_time", 1_704_067_200_000 + 2 * 60_000 + 30_000)] + L[3:], r"line 3: open_time must be on the 1m grid \(a multiple of 60 s\), got 2024-01-01 00:02:30"),
    "unit neither ms nor us": (lambda L: [set_field(L[0], "open_time", 1_704_067_200)] + L[1:], r"line 1: open_time must be epoch milliseconds \(13 digits\) or microseconds \(16 digits\)"),
    "mixed units": (lambda L: L[:2] + [set_field(L[2], "open_time", 1_704_067_320_000_000)] + L[3:], r"line 3: open_time must be .* the same unit for the whole file; got 1704067320000000 after 1704067200000"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
@pytest.mark.parametrize("container", ["csv", "zip"])
def test_bad_input_names_file_and_line_and_imports_nothing(tmp_path, case, container):
    mutate, pattern = BAD_CASES[case]
    path = _bad(tmp_path, mutate, container)
    good = write_csv(tmp_path, lines_of(tiny_bars(3, t0=T0 + 3600 * 10**6)), "BTCUSDT-1m-2024-01-02.csv")
    name = r"BTCUSDT-1m-2024-01-01\.zip:BTCUSDT-1m-2024-01-01\.csv" if container == "zip" else r"BTCUSDT-1m-2024-01-01\.csv"
    with pytest.raises(UserError, match=name + " " + pattern):
        ingest.import_paths([good, path], tmp_path / "s")
    assert not (tmp_path / "s").exists()  # the good file was not imported either


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Parse CSVs a line or two at a time, so that every rule meets a block edge."""
    monkeypatch.setattr(ingest, "CSV_BLOCK_BYTES", 150)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_every_rule_holds_across_block_edges(tmp_path, tiny_blocks, case):
    mutate, pattern = BAD_CASES[case]
    path = _bad(tmp_path, mutate, "zip")
    with pytest.raises(UserError, match=r"BTCUSDT-1m-2024-01-01\.zip:BTCUSDT-1m-2024-01-01\.csv " + pattern):
        ingest.import_paths([path], tmp_path / "s")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_streamed_import_equals_the_file(tmp_path, tiny_blocks, unit):
    bars = tiny_bars(40)
    lines = lines_of(bars, unit)
    with_dups = lines[:7] + [lines[6], lines[6]] + lines[7:20] + [lines[19]] + lines[20:]  # repeats at block edges
    report = ingest.import_paths([write_csv(tmp_path, with_dups, header=True)], tmp_path / "s")
    assert report.rows == 43 and report.duplicates == 3 and report.added == {("BTCUSDT", "1m", 2024): 40}
    assert_same(stored(tmp_path / "s"), bars)
    # a conflicting repeat right after a block edge names both lines of the file (header = line 1)
    clash = lines[:10] + [set_field(lines[9], "volume", 123)] + lines[10:]
    with pytest.raises(UserError, match=r"line 12: conflicting duplicate of .* line 11: same open_time 2024-01-01 00:09:00"):
        ingest.import_paths([write_csv(tmp_path, clash, "BTCUSDT-1m-2024-01-02.csv", header=True)], tmp_path / "t")


def test_a_large_file_is_staged_and_merged_with_the_store(tmp_path, monkeypatch):
    """Sources beyond the in-memory budget go through a staging Parquet file; the result is the
    same, and a later overlapping import merges with the stored year in row groups."""
    monkeypatch.setattr(ingest, "IN_MEMORY_ROWS", 10)
    monkeypatch.setattr(store, "ROW_GROUP_SIZE", 16)
    bars = tiny_bars(100)
    lines = lines_of(bars)
    ingest.import_paths([write_csv(tmp_path, lines[:60], "BTCUSDT-1m-2024-01-01.csv")], tmp_path / "s")
    report = ingest.import_paths([write_csv(tmp_path, lines[40:], "BTCUSDT-1m-2024-01-02.csv")], tmp_path / "s")
    assert report.duplicates == 20 and report.added == {("BTCUSDT", "1m", 2024): 40}
    assert_same(stored(tmp_path / "s"), bars)
    assert pq.ParquetFile(store.year_path(tmp_path / "s", "BTCUSDT", "1m", 2024)).metadata.num_row_groups == 7


def test_header_line_counts_in_line_numbers(tmp_path):
    lines = lines_of(tiny_bars(5))
    lines[2] = set_field(lines[2], "close", "x")
    p = write_csv(tmp_path, lines, header=True)
    with pytest.raises(UserError, match=r"line 4: column close must be a number, got 'x'"):
        ingest.import_paths([p], tmp_path / "s")


def test_header_only_and_empty_file(tmp_path):
    p = tmp_path / "BTCUSDT-1m-2024-01-01.csv"
    p.write_bytes(HEADER)
    with pytest.raises(UserError, match="holds a header but no rows"):
        ingest.import_paths([p], tmp_path / "s")
    p.write_bytes(b"")
    with pytest.raises(UserError, match="holds no rows"):
        ingest.import_paths([p], tmp_path / "s")


def test_conflict_across_files_and_with_store(tmp_path):
    bars = tiny_bars(6)
    lines = lines_of(bars)
    p1 = write_csv(tmp_path, lines, "BTCUSDT-1m-2024-01-01.csv")
    other = lines[:2] + [set_field(lines[2], "close", float(bars.close[2]) + 0.01)]
    p2 = write_csv(tmp_path, other, "BTCUSDT-1m-2024-01-02.csv")
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-01-01 00:02:00: BTCUSDT-1m-2024-01-01\.csv line 3 and BTCUSDT-1m-2024-01-02\.csv line 3"):
        ingest.import_paths([p1, p2], tmp_path / "s")
    assert not (tmp_path / "s").exists()
    ingest.import_paths([p1], tmp_path / "s")
    before = store.year_path(tmp_path / "s", "BTCUSDT", "1m", 2024).read_bytes()
    with pytest.raises(UserError, match=r"conflicting duplicate bar at 2024-01-01 00:02:00: stored file .*btcusdt-1m-2024\.parquet and BTCUSDT-1m-2024-01-02\.csv line 3"):
        ingest.import_paths([p2], tmp_path / "s")
    assert store.year_path(tmp_path / "s", "BTCUSDT", "1m", 2024).read_bytes() == before


def test_conflict_in_one_dataset_blocks_the_other(tmp_path):
    root = tmp_path / "s"
    lines = lines_of(tiny_bars(4))
    ingest.import_paths([write_csv(tmp_path, lines, "BTCUSDT-1m-2024-01-01.csv")], root)
    clash = write_csv(tmp_path, [set_field(lines[0], "volume", 7)], "BTCUSDT-1m-2024-01-03.csv")
    eth = write_csv(tmp_path, lines, "ETHUSDT-1m-2024-01-01.csv")
    with pytest.raises(UserError, match="conflicting duplicate"):
        ingest.import_paths([eth, clash], root)
    assert store.list_datasets(root) == [("BTCUSDT", "1m")]


def test_unreadable_zip(tmp_path):
    p = tmp_path / "BTCUSDT-1m-2024-01-01.zip"
    p.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(UserError, match=r"BTCUSDT-1m-2024-01-01\.zip: unreadable zip"):
        ingest.import_paths([p], tmp_path / "s")
    good = write_zip(tmp_path, lines_of(tiny_bars(3)), "BTCUSDT-1m-2024-01-02")
    p.write_bytes(good.read_bytes()[:-40])  # truncated central directory
    with pytest.raises(UserError, match="unreadable zip"):
        ingest.import_paths([p], tmp_path / "s")


def test_zip_without_csv(tmp_path):
    p = tmp_path / "BTCUSDT-1m-2024-01-01.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(UserError, match=r"zip must hold a \.csv file, holds readme\.txt"):
        ingest.import_paths([p], tmp_path / "s")


@pytest.mark.parametrize("entry", ["../evil.csv", "a/../../evil.csv", "/etc/evil.csv", "..\\evil.csv", "C:/evil.csv"])
def test_zip_slip_is_rejected(tmp_path, entry):
    p = write_zip(tmp_path, lines_of(tiny_bars(3)), entry=entry)
    with pytest.raises(UserError, match=r"zip entry .* would escape the target folder"):
        ingest.import_paths([p], tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_safe_member_names():
    assert ingest.safe_member_name("BTCUSDT-1m-2024-01-01.csv")
    assert ingest.safe_member_name("sub/dir/x.csv")
    assert not ingest.safe_member_name("../x.csv")
    assert not ingest.safe_member_name("")


def test_bad_parquet(tmp_path):
    bars = tiny_bars(5)
    t = bars.to_table().drop_columns(["trades"])
    p = tmp_path / "btcusdt-1m-2024.parquet"
    pq.write_table(t, p)
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.parquet: a canonical Parquet file needs columns .*missing trades"):
        ingest.import_paths([p], tmp_path / "s")
    bars.high[3] = 1.0
    pq.write_table(bars.to_table(), p)
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.parquet row 3: high must be >= max\(open, close\)"):
        ingest.import_paths([p], tmp_path / "s")
    p.write_bytes(b"not parquet")
    with pytest.raises(UserError, match=r"unreadable Parquet file"):
        ingest.import_paths([p], tmp_path / "s")


def test_killed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    root = tmp_path / "s"
    ingest.import_paths([write_csv(tmp_path, lines_of(tiny_bars(4)))], root)
    f = store.year_path(root, "BTCUSDT", "1m", 2024)
    before = f.read_bytes()

    def killed(src, dst):  # the process dies between writing the temp file and the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", killed)
    more = write_csv(tmp_path, lines_of(tiny_bars(4, t0=T0 + 3600 * 10**6)), "BTCUSDT-1m-2024-01-02.csv")
    with pytest.raises(KeyboardInterrupt):
        ingest.import_paths([more], root)
    monkeypatch.undo()
    assert f.read_bytes() == before
    assert sorted(p.name for p in f.parent.iterdir()) == [f.name, "manifest.json"]  # no visible partial file
    assert len(store.load_bars(root)) == 4


# --------------------------------------------------------------------------- the real archives


@pytest.mark.parametrize(
    "name, unit, n_bars",
    [("BTCUSDT-1m-2023-03-24", "ms", 1360), ("BTCUSDT-1m-2025-01-02", "us", 1440)],
)
def test_real_archives_equal_shared_parquet(shared_data, tmp_path, name, unit, n_bars):
    zpath = shared_data / "binance-raw" / f"{name}.zip"
    report = ingest.import_paths([zpath], tmp_path / "s")
    assert report.units == {unit: 1}
    day = name[-10:]
    got = store.load_bars(tmp_path / "s", start=day, end=day)
    want = store.load_bars(shared_data, start=day, end=day)
    assert len(got) == len(want) == n_bars
    for c in store.COLUMNS:
        np.testing.assert_array_equal(getattr(got, c), getattr(want, c), err_msg=c)
    assert got.open_time.dtype == want.open_time.dtype == np.int64


def test_real_archive_gap_and_header_variant(shared_data, tmp_path):
    # the 2023-03-24 file has its 80-minute gap; the same rows behind a header line import identically
    src = shared_data / "binance-raw" / "BTCUSDT-1m-2023-03-24.zip"
    ingest.import_paths([src], tmp_path / "a")
    gaps = store.gap_table(tmp_path / "a")
    assert gaps.missing.tolist() == [80]
    assert store.iso(gaps.start[0]) == "2023-03-24 12:40:00"
    with zipfile.ZipFile(src) as zf:
        body = zf.read(zf.namelist()[0])
    hdr = tmp_path / "BTCUSDT-1m-2023-03-24.csv"
    hdr.write_bytes(HEADER + body)
    ingest.import_paths([hdr], tmp_path / "b")
    assert_same(store.load_bars(tmp_path / "a"), store.load_bars(tmp_path / "b"))
    # the shared year file imported over the archive's day: no conflict, those 1,360 bars are duplicates
    report = ingest.import_paths([shared_data / "btcusdt-1m" / "btcusdt-1m-2023.parquet"], tmp_path / "a")
    assert report.duplicates == 1360
    assert report.added == {("BTCUSDT", "1m", 2023): 525_520 - 1360}
