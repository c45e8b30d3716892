"""The transport packing of the bar store: an exact round trip (bit for bit) or a refusal, never a
lossy pack; a tampered packed file is refused; the unpacked store is a store load_bars reads."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tsflash import cli
from tsflash.data import store, transport
from tsflash.errors import UserError


def _bars(n: int = 5000, seed: int = 0, start: str = "2023-12-31") -> store.Bars:
    """Random-walk 1m bars across a year boundary, in cents and 1e-5 BTC, with two gaps."""
    rng = np.random.default_rng(seed)
    t = store.to_us(start) + np.arange(n, dtype=np.int64) * 60_000_000
    t = np.delete(t, np.r_[n // 3 : n // 3 + 30, 2 * n // 3])  # gaps of 30 and 1 missing bars
    m = len(t)
    c = 4_200_000 + np.cumsum(rng.integers(-500, 501, m))
    o = np.r_[c[0], c[:-1]] + rng.integers(-2, 3, m)
    h = np.maximum(o, c) + rng.integers(0, 300, m)
    low = np.minimum(o, c) - rng.integers(0, 300, m)
    vol = rng.integers(0, 10**9, m)
    vol[::50] = 0  # zero-volume bars
    cols = dict(open=o / 100, high=h / 100, low=low / 100, close=c / 100, volume=vol / 1e5)
    return store.Bars(t, **cols, trades=rng.integers(0, 5000, m), taker_buy_base=(vol // 3) / 1e5)


def _store(root, bars: store.Bars):
    store.write_year_files(root, "BTCUSDT", "1m", bars.to_table())
    return root


def _tables_bitwise_equal(a: pa.Table, b: pa.Table) -> bool:
    return a.schema.equals(b.schema) and all(
        np.array_equal(a.column(n).to_numpy().view(np.int64), b.column(n).to_numpy().view(np.int64)) for n in store.COLUMNS
    )


def test_generated_bars_with_gaps_round_trip_bit_for_bit(tmp_path):
    src = _store(tmp_path / "src", _bars())
    packed = transport.pack_store(src, tmp_path / "packed", "BTCUSDT", "1m")
    assert [p.name for p in packed] == ["btcusdt-1m-2023.packed.parquet", "btcusdt-1m-2024.packed.parquet"]
    written = transport.unpack(tmp_path / "packed", tmp_path / "out")
    assert written == list(store.year_files(tmp_path / "out", "BTCUSDT", "1m").values())
    for year, path in store.year_files(src, "BTCUSDT", "1m").items():
        assert _tables_bitwise_equal(pq.read_table(path), pq.read_table(written[year - 2023]))
    meta = json.loads(pq.read_schema(packed[1]).metadata[transport.META_KEY])
    assert meta["codec"]["prices"]["scale"] == 2 and meta["codec"]["volume"] == 5
    a = store.load_bars(src, start="2023-12-31 12:00:00", end="2024-01-02")
    b = store.load_bars(tmp_path / "out", start="2023-12-31 12:00:00", end="2024-01-02")
    assert len(a) > 1000 and store.fingerprint(a) == store.fingerprint(b)
    assert store.find_gaps(store.load_bars(tmp_path / "out").open_time, 60_000_000).missing.tolist() == [30, 1]


def test_real_years_round_trip_and_load_the_same(shared_store, tmp_path):
    packed = transport.pack_store(shared_store, tmp_path / "packed", years=[2025])
    transport.unpack(packed, tmp_path / "out")
    src, out = store.year_path(shared_store, "BTCUSDT", "1m", 2025), store.year_path(tmp_path / "out", "BTCUSDT", "1m", 2025)
    assert _tables_bitwise_equal(pq.read_table(src), pq.read_table(out))
    assert packed[0].stat().st_size < 0.75 * src.stat().st_size
    a = store.load_bars(shared_store, start="2025-03-01", end="2025-03-31")
    b = store.load_bars(tmp_path / "out", start="2025-03-01", end="2025-03-31")
    assert len(a) == 31 * 1440 and store.fingerprint(a) == store.fingerprint(b)


@pytest.mark.parametrize("column, value, shown", [
    ("close", 0.1 + 0.2, "0.30000000000000004"),
    ("volume", 1 / 3, "0.3333333333333333"),
    ("high", float("nan"), "nan"),
])  # fmt: skip
def test_a_value_that_does_not_round_trip_is_refused_and_nothing_written(tmp_path, column, value, shown):
    bars = _bars(300, start="2024-06-01")
    getattr(bars, column)[123] = value
    src = _store(tmp_path / "src", bars)
    with pytest.raises(UserError, match=rf"btcusdt-1m-2024\.parquet column.*{column}.*{shown}") as e:
        transport.pack_store(src, tmp_path / "packed", "BTCUSDT", "1m")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "packed").exists() or list((tmp_path / "packed").iterdir()) == []


def test_decimals_is_the_smallest_exact_scale():
    assert transport.decimals(np.array([1.0, 2.0, -3.0]), "x") == 0
    assert transport.decimals(np.array([42000.01, 0.5]), "x") == 2
    assert transport.decimals(np.array([0.00000001, 1e-5]), "x") == 8
    with pytest.raises(UserError, match="x: value 1e-09 .*row 0"):
        transport.decimals(np.array([1e-9]), "x")


def test_a_tampered_packed_file_is_refused_and_nothing_written(tmp_path):
    src = _store(tmp_path / "src", _bars())
    packed = transport.pack_store(src, tmp_path / "packed", "BTCUSDT", "1m")
    t = pq.read_table(packed[1])
    trades = t.column("trades").to_numpy().copy()
    trades[7] += 1  # one trade more in one bar, same metadata
    tampered = t.set_column(t.column_names.index("trades"), "trades", pa.array(trades))
    pq.write_table(tampered.replace_schema_metadata(t.schema.metadata), packed[1])
    with pytest.raises(UserError, match=r"btcusdt-1m-2024\.packed\.parquet: decoded bars do not match the packed checksum"):
        transport.unpack(tmp_path / "packed", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))
    meta = dict(t.schema.metadata) | {transport.META_KEY: b'{"format": '}  # a damaged metadata block
    pq.write_table(t.replace_schema_metadata(meta), packed[1])
    with pytest.raises(UserError, match=r"2024\.packed\.parquet is not a tsflash packed bar file"):
        transport.unpack(packed[1], tmp_path / "out")
    packed[0].write_bytes(b"PAR1 not parquet")
    with pytest.raises(UserError, match="packed file .*2023.packed.parquet cannot be read"):
        transport.unpack(packed[0], tmp_path / "out")


def test_unpack_refuses_to_replace_a_store_file(tmp_path):
    src = _store(tmp_path / "src", _bars())
    transport.pack_store(src, tmp_path / "packed", "BTCUSDT", "1m")
    with pytest.raises(UserError, match="btcusdt-1m-2023.parquet already exists"):
        transport.unpack(tmp_path / "packed", src)


def test_cli_pack_then_unpack(tmp_path, capsys):
    src = _store(tmp_path / "src", _bars())
    assert cli.main(["data", "pack", "--root", str(src), "--out", str(tmp_path / "p"), "--start", "2024", "--end", "2024"]) == 0
    assert [p.name for p in (tmp_path / "p").iterdir()] == ["btcusdt-1m-2024.packed.parquet"]
    assert cli.main(["data", "unpack", str(tmp_path / "p"), "--root", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "packed 1 year files" in out and "unpacked 1 year files" in out
    a, b = (store.load_bars(r, start="2024-01-01") for r in (src, tmp_path / "out"))
    assert store.fingerprint(a) == store.fingerprint(b)
