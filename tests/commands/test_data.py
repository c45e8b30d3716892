"""`tsflash data import|info|fetch` through the real CLI entry point."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tsflash import cli
from tsflash.data import ingest, store

MIN_US = store.INTERVAL_US["1m"]


def bars_with_gap() -> store.Bars:
    """2024-01-01 00:00 .. 01:59 minus 00:30..00:44 (a 15-minute gap), two zero-volume bars."""
    t = store.to_us("2024-01-01") + MIN_US * np.r_[0:30, 45:120].astype(np.int64)
    n = len(t)
    p = np.full(n, 42000.0)
    vol = np.full(n, 1.5)
    vol[[3, 7]] = 0.0
    return store.Bars(t, p, p + 2, p - 2, p + 1, vol, np.where(vol > 0, 5, 0).astype(np.int64), vol / 2)


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def archive(tmp_path):
    p = tmp_path / "BTCUSDT-1m-2024-01-01.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("BTCUSDT-1m-2024-01-01.csv", ingest.binance_csv(bars_with_gap(), "us"))
    return p


@pytest.mark.parametrize("argv", [["data", "--help"], ["data", "import", "--help"], ["data", "info", "--help"], ["data", "fetch", "--help"]])
def test_help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    assert "usage: tsflash data" in capsys.readouterr().out


def test_import_then_info(capsys, tmp_path, archive):
    root = tmp_path / "store"
    rc, out, _ = run(capsys, "data", "import", str(archive), "--root", str(root))
    assert rc == 0
    assert "read 1 files (1 us), 105 rows; 0 identical duplicates dropped" in out
    assert "BTCUSDT 1m 2024: +105 bars" in out
    rc, out, _ = run(capsys, "data", "import", str(archive), "--root", str(root))
    assert rc == 0 and "105 identical duplicates dropped" in out and "store unchanged" in out

    rc, out, _ = run(capsys, "data", "info", "--root", str(root))
    assert rc == 0
    assert "105 bars, 2024-01-01 00:00:00 .. 2024-01-01 01:59:00 UTC; 15 missing, 2 with zero volume" in out
    assert "gaps: 1; nothing is filled" in out
    assert "2024-01-01 00:30:00" in out and "15m" in out
    assert "87.500%" in out  # 105 of 120 minutes

    rc, out, _ = run(capsys, "data", "info", "--root", str(root), "--json")
    s = json.loads(out)
    assert s["bars"] == 105 and s["n_gaps"] == 1 and s["zero_volume_bars"] == 2
    assert s["gaps"] == [{"start": "2024-01-01 00:30:00", "before": "2024-01-01 00:29:00", "after": "2024-01-01 00:45:00", "missing": 15, "hours": 0.25}]
    assert s["years"][0] | {} == {
        "year": 2024, "first": "2024-01-01 00:00:00", "last": "2024-01-01 01:59:00", "bars": 105, "missing": 15,
        "coverage_pct": 87.5, "zero_volume_bars": 2, "zero_trade_bars": 2,
    }  # fmt: skip
    rc, out, _ = run(capsys, "data", "info", "--root", str(root), "--json", "--min-gap", "16")
    assert json.loads(out)["gaps"] == [] and json.loads(out)["n_gaps"] == 1
    rc, out, _ = run(capsys, "data", "info", "--root", str(root), "--start", "2025-01-01")
    assert rc == 0 and out == f"BTCUSDT 1m in {root}: 0 bars (none in this range; the store's year files cover 2024)\n"


def test_import_then_info_at_one_second(capsys, tmp_path):
    """A 1-second archive: gaps in seconds, lengths said in time, a 1s dataset beside the 1m one."""
    bars = bars_with_gap()
    bars.open_time = store.to_us("2025-01-01") + 1_000_000 * np.r_[0:30, 45:120].astype(np.int64)  # 15 s missing
    p = tmp_path / "BTCUSDT-1s-2025-01-01.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr(p.with_suffix(".csv").name, ingest.binance_csv(store.Bars(**{c: getattr(bars, c) for c in store.COLUMNS},
                                                                             interval="1s"), "us"))
    root = tmp_path / "store"
    rc, out, _ = run(capsys, "data", "import", str(p), "--root", str(root))
    assert rc == 0 and "BTCUSDT 1s 2025: +105 bars" in out
    rc, out, _ = run(capsys, "data", "info", "--root", str(root), "--interval", "1s")
    assert rc == 0
    assert "105 bars, 2025-01-01 00:00:00 .. 2025-01-01 00:01:59 UTC; 15 missing" in out
    assert "2025-01-01 00:00:30" in out and "15s" in out and "87.500%" in out
    rc, out, err = run(capsys, "data", "info", "--root", str(root))  # the 1m dataset is not there
    assert rc == 2 and "no bars for BTCUSDT 1m" in err and "datasets there: BTCUSDT 1s" in err


def test_user_errors_are_one_line_exit_2(capsys, tmp_path, archive):
    bad = tmp_path / "BTCUSDT-1m-2024-01-02.csv"
    bad.write_bytes(b"1704153600000,1,2,0.5,1.5,-3,1704153659999,1,1,0,0,0\n")
    rc, out, err = run(capsys, "data", "import", str(archive), str(bad), "--root", str(tmp_path / "s"))
    assert rc == 2
    assert err == "tsflash: error: BTCUSDT-1m-2024-01-02.csv line 1: volume must be finite and >= 0, got -3.0\n"
    assert not (tmp_path / "s").exists()
    rc, _, err = run(capsys, "data", "info", "--root", str(tmp_path / "nowhere"))
    assert rc == 2 and err.startswith("tsflash: error: bar store root") and err.count("\n") == 1
    rc, _, err = run(capsys, "data", "info", "--root", str(tmp_path), "--min-gap", "0")
    assert rc == 2 and err == "tsflash data info: error: argument --min-gap: must be an integer >= 1, got 0\n"


def test_no_traceback_from_the_console(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tsflash.cli", "data", "info", "--root", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr


def test_fetch_from_local_mirror(capsys, tmp_path):
    mirror = tmp_path / "mirror"
    folder = mirror / "data/spot/daily/klines/BTCUSDT/1m"
    folder.mkdir(parents=True)
    for d in (1, 2):  # two daily archives of 60 bars each, as Binance lays them out
        name = f"BTCUSDT-1m-{dt.date(2024, 1, d)}"
        bars = bars_with_gap().slice(0, 30)
        bars.open_time = store.to_us(f"2024-01-0{d}") + MIN_US * np.arange(60, dtype=np.int64)
        for c in store.COLUMNS[1:]:
            setattr(bars, c, np.tile(getattr(bars, c), 2))
        with zipfile.ZipFile(folder / f"{name}.zip", "w") as zf:
            zf.writestr(f"{name}.csv", ingest.binance_csv(bars))
        digest = hashlib.sha256((folder / f"{name}.zip").read_bytes()).hexdigest()
        (folder / f"{name}.zip.CHECKSUM").write_text(f"{digest}  {name}.zip\n")
    root = tmp_path / "store"
    argv = ["data", "fetch", "--start", "2024-01-01", "--end", "2024-01-02", "--base-url", str(mirror), "--root", str(root), "--no-progress"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    assert "archive files: 2 downloaded, 0 already verified, 0 not published" in out
    assert "BTCUSDT 1m 2024: +120 bars" in out
    rc, out, _ = run(capsys, *argv)
    assert "0 downloaded, 2 already verified" in out and "store unchanged" in out
    assert len(store.load_bars(root)) == 120


def test_info_on_shared_store(capsys, shared_store):
    rc, out, _ = run(capsys, "data", "info", "--root", str(shared_store), "--json")
    s = json.loads(out)
    assert rc == 0
    assert s["bars"] == 4_131_128 and s["n_gaps"] == 35 and len(s["gaps"]) == 35
    assert s["zero_volume_bars"] == 23_863
    assert max(g["missing"] for g in s["gaps"]) == 2011
    assert [y["year"] for y in s["years"]] == list(range(2017, 2026))
    assert sum(y["bars"] for y in s["years"]) == 4_131_128
    assert sum(y["missing"] for y in s["years"]) == s["missing"] == sum(g["missing"] for g in s["gaps"])
