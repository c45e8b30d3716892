"""The store's manifest: recorded at import, checked before every read; the bar rules on read."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsflash.data import _manifest as manifest
from tsflash.data import store, transport
from tsflash.errors import UserError

MIN_US = store.INTERVAL_US["1m"]


def make_bars(n: int, start: str = "2023-12-31T22:00", seed: int = 0) -> store.Bars:
    """n minute bars of a random walk around 42,000 from `start` (well inside every bar rule)."""
    rng = np.random.default_rng(seed)
    t = store.to_us(start) + MIN_US * np.arange(n, dtype=np.int64)
    close = np.round(42000 * np.exp(np.cumsum(rng.normal(0, 1e-3, n))), 2)
    open_ = np.r_[42000.0, close[:-1]]
    high = np.maximum(open_, close) + 1.5
    low = np.minimum(open_, close) - 1.5
    vol = np.round(rng.uniform(0, 3, n), 4)
    return store.Bars(t, open_, high, low, close, vol, rng.integers(0, 50, n), np.round(vol / 2, 5))


@pytest.fixture
def two_years(tmp_path):
    """A store of 240 bars across 2023 and 2024, written by the store (so with its manifest)."""
    root = tmp_path / "store"
    bars = make_bars(240)
    store.write_year_files(root, "BTCUSDT", "1m", bars.to_table())
    return root, bars


def folder_of(root):
    return store.dataset_dir(root, "BTCUSDT", "1m")


def assert_same_bars(a: store.Bars, b: store.Bars) -> None:
    for name in store.COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# --------------------------------------------------------------------------- recording


def test_the_store_records_each_year_file(two_years):
    root, _ = two_years
    recorded = json.loads((folder_of(root) / "manifest.json").read_text())
    assert recorded["format"] == 1
    files = store.year_files(root, "BTCUSDT", "1m")
    assert sorted(recorded["files"]) == [p.name for p in files.values()]
    for p in files.values():
        entry = recorded["files"][p.name]
        assert entry == {"sha256": manifest.sha256_file(p), "rows": pq.read_metadata(p).num_rows, "bytes": p.stat().st_size}
    assert [recorded["files"][p.name]["rows"] for p in files.values()] == [120, 120]


def test_a_merge_updates_the_entry(two_years):
    root, _ = two_years
    store.write_year_files(root, "BTCUSDT", "1m", make_bars(10, start="2024-01-01T02:00", seed=1).to_table())
    entry = manifest.read(folder_of(root))["btcusdt-1m-2024.parquet"]
    assert entry["rows"] == 130 and "pending" not in entry
    assert len(store.load_bars(root)) == 250


def test_unpack_records_its_files(two_years, tmp_path):
    root, bars = two_years
    packed = transport.pack_store(root, tmp_path / "packed")
    out = tmp_path / "out"
    transport.unpack(packed, out)
    assert sorted(manifest.read(folder_of(out))) == ["btcusdt-1m-2023.parquet", "btcusdt-1m-2024.parquet"]
    assert_same_bars(store.load_bars(out), bars)


# --------------------------------------------------------------------------- refusing


def test_a_changed_file_is_refused_naming_file_and_checksums(two_years):
    root, _ = two_years
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    p.write_bytes(bytes(data))
    want = manifest.read(folder_of(root))[p.name]["sha256"][:16]
    with pytest.raises(UserError, match=rf"btcusdt-1m-2024\.parquet differs from the store manifest \(sha256 expected "
                                        rf"{want}\.\., found [0-9a-f]{{16}}\.\.\): .*re-import the file to change it") as e:
        store.load_bars(root)
    assert "\n" not in str(e.value)
    # a range that does not touch 2024 reads: only the files a read needs are checked
    assert len(store.load_bars(root, end="2023-12-31")) == 120


def test_a_replaced_file_names_the_rows(two_years):
    root, _ = two_years
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    pq.write_table(pq.read_table(p).slice(0, 100), p)
    with pytest.raises(UserError, match=r"rows expected 120, found 100"):
        store.read_table(root, columns=("open_time",))


def test_a_deleted_file_the_manifest_lists_is_refused(two_years):
    root, _ = two_years
    store.year_path(root, "BTCUSDT", "1m", 2023).unlink()
    with pytest.raises(UserError, match=r"the store manifest lists btcusdt-1m-2023\.parquet but the file is missing"):
        store.load_bars(root)
    assert len(store.load_bars(root, start="2024-01-01")) == 120  # 2024 alone is whole


def test_a_damaged_manifest_is_one_line(two_years):
    root, _ = two_years
    (folder_of(root) / "manifest.json").write_text('{"format": 1, "files": {"x": ')
    with pytest.raises(UserError, match=r"manifest\.json: damaged store manifest \(JSONDecodeError: .*\); record the files"):
        store.load_bars(root)


def test_import_refuses_to_merge_into_a_changed_file(two_years):
    root, _ = two_years
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    pq.write_table(pq.read_table(p).slice(0, 100), p)
    before = p.read_bytes()
    with pytest.raises(UserError, match=r"differs from the store manifest"):
        store.write_year_files(root, "BTCUSDT", "1m", make_bars(5, start="2024-01-01T03:00").to_table())
    assert p.read_bytes() == before


def test_a_store_without_manifest_is_read_with_one_warning(two_years, caplog):
    root, bars = two_years
    (folder_of(root) / "manifest.json").unlink()
    manifest._warned.discard(folder_of(root))
    with caplog.at_level(logging.WARNING, logger="tsflash.data._manifest"):
        assert_same_bars(store.load_bars(root), bars)
        store.load_bars(root)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1
    assert "has no manifest" in warned[0] and "tsflash data verify --write" in warned[0]


def test_killed_between_rename_and_manifest_both_files_verify(two_years, monkeypatch):
    """The manifest accepts the new bytes before the year file is renamed, and only them after."""
    root, _ = two_years
    calls = []
    real = store.os.replace

    def replace(src, dst):
        calls.append(str(dst))
        if len(calls) == 3:  # 1: manifest (pending), 2: the year file, 3: manifest (committed)
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(store.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        store.write_year_files(root, "BTCUSDT", "1m", make_bars(5, start="2024-01-01T02:00").to_table())
    monkeypatch.undo()
    assert calls[1].endswith("btcusdt-1m-2024.parquet")
    assert manifest.read(folder_of(root))["btcusdt-1m-2024.parquet"]["pending"]
    assert len(store.load_bars(root)) == 245  # the renamed file is accepted


# --------------------------------------------------------------------------- bar rules on read


def _write_raw(root, bars: store.Bars) -> None:
    """A year file written behind the store's back (no manifest): only the bar rules can catch it."""
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(bars.to_table(), p)


@pytest.mark.parametrize("column, value, rule", [
    ("close", float("nan"), r"close must be a positive finite price, got nan"),
    ("open", -1.0, r"open must be a positive finite price, got -1\.0"),
    ("high", 100.0, r"high must be >= max\(open, close\), got high=100\.0 open=.* close="),
    ("low", 99999.0, r"low must be <= min\(open, close\), got low=99999\.0"),
    ("volume", -0.5, r"volume must be finite and >= 0, got -0\.5"),
    ("high", 1e6, r"high must be at most 10 times low \(log\(high/low\) <= 2\.303\), got high=1000000\.0 low="),
])  # fmt: skip
def test_a_bad_bar_is_refused_naming_file_time_and_values(tmp_path, column, value, rule):
    bars = make_bars(50, start="2024-03-01")
    getattr(bars, column)[17] = value
    _write_raw(tmp_path, bars)
    with pytest.raises(UserError, match=rf"btcusdt-1m-2024\.parquet: bar 2024-03-01 00:17:00: {rule}") as e:
        store.load_bars(tmp_path)
    assert "\n" not in str(e.value)


def test_a_one_bar_move_beyond_the_bound_is_refused(tmp_path):
    bars = make_bars(50, start="2024-03-01")
    for c in store.PRICE_COLUMNS:  # a whole bar 11 times higher: each bar alone is sound
        getattr(bars, c)[30:] *= 11
    _write_raw(tmp_path, bars)
    with pytest.raises(UserError, match=r"bar 2024-03-01 00:30:00: close must stay within a factor of 10 of the previous "
                                        r"close \(\|log\(close/previous close\)\| <= 2\.303\), got .* after "):
        store.load_bars(tmp_path)
    # 9 times is a real (if wild) market: read
    bars = make_bars(50, start="2024-03-01")
    for c in store.PRICE_COLUMNS:
        getattr(bars, c)[30:] *= 9
    _write_raw(tmp_path, bars)
    assert len(store.load_bars(tmp_path)) == 50


def _write_raw_years(root, bars: store.Bars) -> None:
    """Year files written behind the store's back, one per UTC year of `bars` (no manifest)."""
    years = store.year_of(bars.open_time)
    for y in np.unique(years).tolist():
        p = store.year_path(root, "BTCUSDT", "1m", y)
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(bars.to_table().filter(years == y), p)


@pytest.mark.parametrize("start, end", [(None, None), ("2024-01-01", None), (None, "2023-12-31"), ("2023-12-31T23:30", "2024-01-01T00:10")])
def test_year_bars_are_load_bars_one_year_at_a_time(two_years, start, end):
    root, _ = two_years
    parts = list(store.year_bars(root, start=start, end=end))
    whole = store.load_bars(root, start=start, end=end)
    assert len(parts) == len(np.unique(store.year_of(whole.open_time)))
    for name in store.COLUMNS:
        np.testing.assert_array_equal(np.concatenate([getattr(b, name) for b in parts]), getattr(whole, name))


def test_year_bars_check_the_move_and_the_order_across_a_year_boundary(tmp_path):
    """Each year file alone is sound; only the step from one into the next breaks a rule."""
    bars = make_bars(240)  # 2023-12-31 22:00 .. 2024-01-01 01:59
    first_2024 = int(np.argmax(store.year_of(bars.open_time) == 2024))
    for c in store.PRICE_COLUMNS:
        getattr(bars, c)[first_2024:] *= 11
    _write_raw_years(tmp_path, bars)
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.parquet: bar 2024-01-01 00:00:00: close must stay within a factor of 10"):
        list(store.year_bars(tmp_path))
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.parquet: bar 2024-01-01 00:00:00: close must stay within a factor of 10"):
        store.gap_table(tmp_path)
    bars = make_bars(240)
    first_2024 = int(np.argmax(store.year_of(bars.open_time) == 2024))
    _write_raw_years(tmp_path, bars)
    bars.open_time[first_2024] = bars.open_time[first_2024 - 1]  # the 2024 file opens on 2023's last minute
    pq.write_table(bars.to_table().slice(first_2024), store.year_path(tmp_path, "BTCUSDT", "1m", 2024))
    with pytest.raises(UserError, match=r"open_time must be strictly increasing, got 2023-12-31 23:59:00 then 2023-12-31 23:59:00"):
        list(store.year_bars(tmp_path))


@pytest.mark.parametrize("column, value, rule", [
    ("close", float("nan"), r"close must be a positive finite price, got nan"),
    ("high", 100.0, r"high must be >= max\(open, close\), got high=100\.0"),
])  # fmt: skip
def test_a_bad_bar_is_refused_by_the_store_summaries_too(tmp_path, capsys, column, value, rule):
    """`gap_table` and `tsflash data info` read only a few columns, but check every one: a copy of the
    year files alone (no manifest) with one damaged bar is refused, not summarised."""
    from tsflash import cli

    bars = make_bars(50, start="2024-03-01")
    getattr(bars, column)[17] = value
    _write_raw(tmp_path, bars)
    message = rf"btcusdt-1m-2024\.parquet: bar 2024-03-01 00:17:00: {rule}"
    with pytest.raises(UserError, match=message):
        store.gap_table(tmp_path)
    for argv in (["data", "info", "--root", str(tmp_path)], ["data", "info", "--root", str(tmp_path), "--json"]):
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert re.fullmatch(rf"tsflash: error: .*{message}.*\n", err)


def test_the_real_bars_pass_every_rule_with_margin(shared_store):
    """BTCUSDT 1m 2017-2025: every rule holds, and the largest one-bar move is far inside the bound."""
    bars = store.load_bars(shared_store)  # raises on any broken rule
    assert len(bars) == 4_131_128
    move = np.abs(np.diff(np.log(bars.close))).max()
    spread = np.log(bars.high / bars.low).max()
    assert 0.07 < move < 0.08 and 0.11 < spread < 0.12  # 2020-03 (docs/data.md)
    assert max(move, spread) * 15 < store.MAX_LOG_MOVE


# --------------------------------------------------------------------------- damage, at random


@pytest.mark.parametrize("keep_manifest", [True, False])
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(["btcusdt-1m-2023.parquet", "btcusdt-1m-2024.parquet", "manifest.json"]),
       where=st.floats(0, 1, exclude_max=True), junk=st.binary(min_size=1, max_size=64))
def test_damaged_bytes_are_refused_in_one_line_or_read_identically(two_years, keep_manifest, target, where, junk):
    """With the manifest any changed year file is refused; without it (a copy of the year files
    alone) the page CRCs and the bar rules still never let a damaged file read as other bars."""
    root, bars = two_years
    saved = {p: p.read_bytes() for p in folder_of(root).iterdir()}
    if not keep_manifest:
        (folder_of(root) / "manifest.json").unlink()
        target = target if target != "manifest.json" else "btcusdt-1m-2023.parquet"
    p = folder_of(root) / target
    original = p.read_bytes()
    at = int(where * len(original))
    p.write_bytes(original[:at] + junk + original[at + len(junk):])
    changed = p.read_bytes() != original
    try:
        got = store.load_bars(root)
    except UserError as exc:
        assert "\n" not in str(exc)
        assert target.split(".")[0] in str(exc) or "manifest" in str(exc)
    else:
        assert not (keep_manifest and changed and target != "manifest.json"), "a changed year file was read"
        assert_same_bars(got, bars)
    finally:
        for q, data in saved.items():
            q.write_bytes(data)
