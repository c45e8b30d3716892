"""`tsflash data verify`, and damaged files through the data commands: one line, exit 2, store unchanged."""

from __future__ import annotations

import errno
import os
import zipfile

import numpy as np
import pyarrow.parquet as pq
import pytest

from tsflash import atomic, cli
from tsflash.data import _manifest as manifest
from tsflash.data import ingest, store

MIN_US = store.INTERVAL_US["1m"]


def bars(n: int, start: str, seed: int = 0) -> store.Bars:
    rng = np.random.default_rng(seed)
    t = store.to_us(start) + MIN_US * np.arange(n, dtype=np.int64)
    close = np.round(30000 * np.exp(np.cumsum(rng.normal(0, 1e-3, n))), 2)
    open_ = np.r_[30000.0, close[:-1]]
    vol = np.round(rng.uniform(0, 2, n), 3)
    return store.Bars(t, open_, np.maximum(open_, close) + 1, np.minimum(open_, close) - 1, close, vol,
                      np.full(n, 3, np.int64), np.round(vol / 2, 4))


@pytest.fixture
def root(tmp_path, capsys):
    """A store of 2023-12-31 23:00 .. 2024-01-01 00:59 (two year files) imported from an archive."""
    zp = tmp_path / "BTCUSDT-1m-2023-12.zip"
    with zipfile.ZipFile(zp, "w") as zf:
        zf.writestr("BTCUSDT-1m-2023-12.csv", ingest.binance_csv(bars(120, "2023-12-31T23:00")))
    r = tmp_path / "store"
    assert cli.main(["data", "import", str(zp), "--root", str(r)]) == 0
    capsys.readouterr()
    return r


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str, pattern: str) -> None:
    import re

    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert re.search(pattern, err), err


def snapshot(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- verify


def test_verify_a_sound_store(capsys, root):
    rc, out, err = run(capsys, "data", "verify", root)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("OK ") and "btcusdt-1m-2023.parquet" in lines[0] and " 60 rows" in lines[0]
    assert lines[1].startswith("OK ") and "btcusdt-1m-2024.parquet" in lines[1]
    assert lines[-1] == f"verified 2 files in {root}: all good"
    # one dataset folder works as well as the root
    assert run(capsys, "data", "verify", root / "btcusdt-1m")[0] == 0


def test_verify_names_what_differs_and_exits_2(capsys, root):
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    pq.write_table(pq.read_table(p).slice(0, 50), p)  # replaced by another file
    store.year_path(root, "BTCUSDT", "1m", 2023).write_bytes(b"PAR1 not really")  # damaged
    rc, out, err = run(capsys, "data", "verify", root)
    assert rc == 2
    one_line(err, r"^tsflash: error: verify: 2 of 2 files failed in .*: btcusdt-1m-2023\.parquet unreadable; "
                  r"btcusdt-1m-2024\.parquet changed$")
    lines = out.splitlines()
    assert lines[0].startswith("UNREADABLE") and "unreadable Parquet file" in lines[0]
    assert lines[1].startswith("CHANGED") and "sha256 expected" in lines[1] and "rows expected 60, found 50" in lines[1]
    # --write refuses to record an unreadable file, and writes nothing
    before = (root / "btcusdt-1m" / "manifest.json").read_bytes()
    assert run(capsys, "data", "verify", "--write", root)[0] == 2
    assert (root / "btcusdt-1m" / "manifest.json").read_bytes() == before


def test_verify_write_records_a_change_that_is_yours(capsys, root):
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    pq.write_table(pq.read_table(p).slice(0, 50), p)
    rc, out, _ = run(capsys, "data", "verify", "--write", root)
    assert rc == 0 and out.splitlines()[1].startswith("RECORDED")
    assert manifest.read(root / "btcusdt-1m")[p.name]["rows"] == 50
    assert run(capsys, "data", "verify", root)[0] == 0
    assert len(store.load_bars(root)) == 110


def test_verify_a_store_without_manifest(capsys, root):
    (root / "btcusdt-1m" / "manifest.json").unlink()
    rc, out, _ = run(capsys, "data", "verify", root)
    assert rc == 0
    assert out.splitlines()[0].startswith("UNRECORDED")
    assert f"2 year files have no recorded checksum (bars checked only): `tsflash data verify --write {root}` records them" in out
    assert run(capsys, "data", "verify", "--write", root)[0] == 0
    assert sorted(manifest.read(root / "btcusdt-1m")) == ["btcusdt-1m-2023.parquet", "btcusdt-1m-2024.parquet"]


def test_verify_finds_a_bad_bar_and_a_missing_file(capsys, root):
    b = store.load_bars(root, start="2024-01-01")
    b.high = b.high.copy()
    b.high[5] = b.low[5] * 20
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    pq.write_table(b.to_table(), p)
    store.year_path(root, "BTCUSDT", "1m", 2023).unlink()
    rc, out, err = run(capsys, "data", "verify", root)
    assert rc == 2
    assert "BAD BARS" in out and "bar 2024-01-01 00:05:00: high must be at most 10 times low" in out
    assert "MISSING" in out and "listed in the manifest, but the file is gone" in out
    one_line(err, r"btcusdt-1m-2024\.parquet bad bars; btcusdt-1m-2023\.parquet missing$")


def test_verify_of_a_folder_that_is_no_store(capsys, tmp_path):
    rc, _, err = run(capsys, "data", "verify", tmp_path / "nope")
    assert rc == 2
    one_line(err, r"verify: store folder not found: .*nope$")
    rc, _, err = run(capsys, "data", "verify", tmp_path)
    one_line(err, r"verify: .* holds no store year files")


# --------------------------------------------------------------------------- every reader refuses a changed file


@pytest.mark.parametrize("argv", [
    ["data", "info"],
    ["data", "pack", "--out", "PACKED"],
])  # fmt: skip
def test_readers_refuse_a_changed_file_in_one_line(capsys, root, tmp_path, argv):
    p = store.year_path(root, "BTCUSDT", "1m", 2024)
    data = bytearray(p.read_bytes())
    data[100] ^= 0xFF
    p.write_bytes(bytes(data))
    argv = [a.replace("PACKED", str(tmp_path / "packed")) for a in argv]
    rc, out, err = run(capsys, *argv, "--root", root)
    assert rc == 2 and out == ""
    one_line(err, r"btcusdt-1m-2024\.parquet differs from the store manifest \(sha256 expected [0-9a-f]{16}\.\., "
                  r"found [0-9a-f]{16}\.\.\): .*re-import the file to change it")
    assert not (tmp_path / "packed").exists()


# --------------------------------------------------------------------------- damaged inputs to import


def _zip(tmp_path, name="BTCUSDT-1m-2024-01-02"):
    zp = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(zp, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{name}.csv", ingest.binance_csv(bars(200, "2024-01-02", seed=3)))
    return zp


def _damage_zip_body(p):
    data = bytearray(p.read_bytes())
    for i in range(60, 90):  # inside the compressed CSV: the CRC (or inflate) fails
        data[i] ^= 0x5A
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("kind, pattern", [
    ("truncated zip", r"BTCUSDT-1m-2024-01-02\.zip: unreadable zip"),
    ("damaged zip", r"BTCUSDT-1m-2024-01-02\.zip: unreadable zip"),
    ("binary csv", r"BTCUSDT-1m-2024-01-02\.csv line 1: a Binance kline row must have 12 columns, got 1"),
    ("non-utf8 csv", r"BTCUSDT-1m-2024-01-02\.csv line 3: column open must be a number, got '.*'"),
    ("truncated parquet", r"btcusdt-1m-2024\.parquet: unreadable Parquet file \(.*\)"),
    ("damaged parquet", r"btcusdt-1m-2024\.parquet: unreadable Parquet file \(.*\)"),
])  # fmt: skip
def test_a_damaged_input_file_is_one_line_and_the_store_unchanged(capsys, root, tmp_path, kind, pattern):
    src = tmp_path / "in"
    src.mkdir()
    if kind.endswith("zip"):
        p = _zip(src)
        if kind == "truncated zip":
            p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
        else:
            _damage_zip_body(p)
    elif kind == "binary csv":
        p = src / "BTCUSDT-1m-2024-01-02.csv"
        p.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8)))
    elif kind == "non-utf8 csv":  # twelve columns, one field of bytes that are not text
        p = src / "BTCUSDT-1m-2024-01-02.csv"
        lines = ingest.binance_csv(bars(5, "2024-01-02")).splitlines(keepends=True)
        fields = lines[2].split(b",")
        fields[1] = b"\xff\xfe1"
        p.write_bytes(b"".join(lines[:2]) + b",".join(fields) + b"".join(lines[3:]))
    else:
        p = src / "btcusdt-1m-2024.parquet"
        pq.write_table(bars(300, "2024-01-02").to_table(), p, write_page_checksum=True)
        data = p.read_bytes()
        if kind == "truncated parquet":
            p.write_bytes(data[: len(data) - 100])
        else:
            p.write_bytes(data[:200] + bytes(64) + data[264:])
    before = snapshot(root)
    rc, out, err = run(capsys, "data", "import", p, "--root", root)
    assert rc == 2 and out == ""
    one_line(err, pattern)
    assert snapshot(root) == before


@pytest.mark.parametrize("which", ["manifest.json", "btcusdt-1m-2024.parquet"])
def test_a_full_disk_during_import_is_one_line_and_leaves_nothing(capsys, root, tmp_path, monkeypatch, which):
    real = os.replace

    def full(src, dst):  # the disk fills up as this file is written
        if str(dst).endswith(which):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(src, dst)

    before = snapshot(root)
    monkeypatch.setattr(atomic.os, "replace", full)
    rc, out, err = run(capsys, "data", "import", _zip(tmp_path), "--root", root)
    monkeypatch.undo()
    assert rc == 2 and out == ""
    one_line(err, rf"^tsflash: error: .*btcusdt-1m/{which}: No space left on device \(the disk is full: free some space "
                  r"and run the command again; nothing half-written was kept\)$")
    assert snapshot(root) == before  # no temporary file, no changed year file or manifest
    assert run(capsys, "data", "verify", root)[0] == 0
