"""The question at one second (issue 18): synthetic 1-second bars through every stage.

No real 1-second data exists offline, so everything here runs on the seeded random walk at
interval "1s" and on hand-made archives in Binance's 1-second format (ms and us timestamps).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tsflash import cli
from tsflash.config import load_config
from tsflash.data import ingest, store
from tsflash.data.synthetic import random_walk_bars
from tsflash.intervals import US_PER_DAY, bars_per_day
from tsflash.scoring.daily import BarReturns, daily_series
from tsflash.scoring.days import daily_returns
from tsflash.sweep.run import SweepOptions, run_sweep

SEC = 1_000_000
DAY0 = "2025-01-30"  # a 1-second month that straddles a month end, in the microsecond era


def second_bars(n: int, start: str = DAY0, seed: int = 0) -> store.Bars:
    return random_walk_bars(n, seed=seed, start=start, interval="1s", n_gaps=0)


def publish(mirror: Path, kind: str, name: str, csv: bytes) -> Path:
    """<mirror>/data/spot/<kind>/klines/BTCUSDT/1s/<name>.zip and its .CHECKSUM, as Binance lays them out."""
    d = mirror / "data" / "spot" / kind / "klines" / "BTCUSDT" / "1s"
    d.mkdir(parents=True, exist_ok=True)
    z = d / f"{name}.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{name}.csv", csv)
    (d / f"{name}.zip.CHECKSUM").write_text(f"{hashlib.sha256(z.read_bytes()).hexdigest()}  {name}.zip\n")
    return z


# --------------------------------------------------------------------------- the preset


def test_the_preset_asks_ten_minutes_against_a_day_and_a_half():
    cfg = load_config("btc-1s")
    assert cfg.data.interval == "1s" and cfg.lengths == [512, 4096, 32768, 131072]
    assert (cfg.labels.horizon, cfg.purge, cfg.data.max_gap_bars, cfg.splits.test_days) == (60, 60, 3600, 28)
    days = (dt.date.fromisoformat(cfg.data.end) - dt.date.fromisoformat(cfg.data.start)).days + 1
    assert days * bars_per_day(SEC) == 31_536_000  # a year of seconds
    assert cfg.splits.n_folds * cfg.splits.test_days % cfg.selection.cscv_blocks == 0  # whole blocks of days
    header = (Path(__file__).resolve().parents[2] / "tsflash" / "presets" / "btc-1s.toml").read_text()
    # the cost arithmetic in the header: 200 x 131,072 tokens per fold at the published tokens/s
    tokens = cfg.train.steps * cfg.train.tokens_per_step
    per_fold = sum(tokens / tps for tps in (4.58e6, 3.85e6, 1.37e6, 0.43e6))
    assert f"sum = {per_fold:.1f} s per fold x 5 folds = {5 * per_fold:.0f} s" in header
    assert f"{tokens:,} tokens" in header


# --------------------------------------------------------------------------- daily aggregation


def test_daily_aggregation_compounds_every_second_of_each_utc_day():
    t0 = 1_735_689_600 * SEC  # 2025-01-01 00:00 UTC
    times = t0 + SEC * np.arange(3 * 86_400, dtype=np.int64)
    rng = np.random.default_rng(0)
    r = rng.normal(0, 1e-5, len(times))
    days, daily = daily_returns(times, r)
    assert days.astype(str).tolist() == ["2025-01-01", "2025-01-02", "2025-01-03"]
    for k in range(3):
        want = np.prod(1 + r[k * 86_400:(k + 1) * 86_400]) - 1
        np.testing.assert_allclose(daily[k], want, rtol=1e-12)
    # the last second of a day and the first of the next fall on two days
    edge = np.array([t0 + US_PER_DAY - SEC, t0 + US_PER_DAY], np.int64)
    np.testing.assert_allclose(daily_returns(edge, np.array([0.01, 0.02]))[1], [0.01, 0.02], rtol=1e-12)
    # the same day's return from 1-second and 1-minute bars of the same path: interval-agnostic
    minute = (times - t0) // 60_000_000
    per_minute = np.array([np.prod(1 + r[minute == m]) - 1 for m in range(3 * 1440)])
    _, daily_1m = daily_returns(t0 + 60_000_000 * np.arange(3 * 1440, dtype=np.int64), per_minute)
    np.testing.assert_allclose(daily_1m, daily, rtol=1e-10)
    out = daily_series([BarReturns(times, r, 2 * r, np.zeros_like(r))])
    np.testing.assert_allclose(out["net"], daily, rtol=1e-12)
    assert len(out["days"]) == 3


# --------------------------------------------------------------------------- archives


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_a_hand_made_1s_archive_imports_exactly(tmp_path, unit):
    bars = second_bars(5000)
    name = "BTCUSDT-1s-2025-01-30"
    z = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{name}.csv", ingest.binance_csv(bars, unit))
    report = ingest.import_paths([z], tmp_path / "s")
    assert report.units == {unit: 1} and report.added == {("BTCUSDT", "1s", 2025): 5000}
    got = store.load_bars(tmp_path / "s", interval="1s")
    assert got.interval == "1s" and store.fingerprint(got) == store.fingerprint(bars)
    assert store.year_files(tmp_path / "s", "BTCUSDT", "1s")  # its own dataset beside any 1m one
    assert store.list_datasets(tmp_path / "s") == [("BTCUSDT", "1s")]


def test_a_binance_1s_line_by_hand(tmp_path):
    """Two rows exactly as Binance writes 1-second klines: microseconds (2025 on) and ms before."""
    us = b"1735689600000000,93576.00,93576.01,93576.00,93576.01,0.41,1735689600999999,38366.1,52,0.3,28073.9,0\n"
    ms = b"1735689599000,93575.99,93576.00,93575.99,93576.00,0.02,1735689599999,1871.5,4,0.01,935.7,0\n"
    (tmp_path / "BTCUSDT-1s-2025-01-01.csv").write_bytes(us)
    (tmp_path / "BTCUSDT-1s-2024-12-31.csv").write_bytes(ms)
    report = ingest.import_paths([tmp_path], tmp_path / "s")
    assert report.units == {"ms": 1, "us": 1}
    got = store.load_bars(tmp_path / "s", interval="1s")
    assert [store.iso(t) for t in got.open_time] == ["2024-12-31 23:59:59", "2025-01-01 00:00:00"]
    assert got.close.tolist() == [93576.0, 93576.01] and got.trades.tolist() == [4, 52]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "BTCUSDT-1s-2025-01-01.csv").write_bytes(us.replace(b"1735689600000000,", b"1735689600500000,", 1))
    with pytest.raises(Exception, match=r"line 1: open_time must be on the 1s grid \(a multiple of 1 s\), got 2025-01-01 00:00:00\.500000"):
        ingest.import_paths([bad], tmp_path / "s")


def test_fetch_1s_from_a_local_mirror_months_in_ms_and_us(tmp_path, capsys):
    """`tsflash data fetch --interval 1s --base-url FOLDER`: a past month as its monthly archive
    (ms, 2024-12), the next as a monthly archive in us (2025-01); verified, imported, trimmed."""
    mirror = tmp_path / "mirror"
    dec = second_bars(7200, start="2024-12-30T23:00:00", seed=1)  # the last hour of 2024-12-30, the first of -31
    jan = second_bars(3600, start="2025-01-01", seed=2)  # the first hour of 2025-01
    publish(mirror, "monthly", "BTCUSDT-1s-2024-12", ingest.binance_csv(dec, "ms"))
    publish(mirror, "monthly", "BTCUSDT-1s-2025-01", ingest.binance_csv(jan, "us"))
    root = tmp_path / "store"
    argv = ["data", "fetch", "--interval", "1s", "--start", "2024-12-31", "--end", "2025-01-01",
            "--base-url", str(mirror), "--root", str(root), "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "2 downloaded" in out and "read 2 files (1 ms, 1 us)" in out
    assert "BTCUSDT 1s 2024: +3600 bars" in out and "BTCUSDT 1s 2025: +3600 bars" in out  # 2024-12-30 trimmed
    got = store.load_bars(root, interval="1s")
    assert store.iso(got.open_time[0]) == "2024-12-31 00:00:00" and store.iso(got.open_time[-1]) == "2025-01-01 00:59:59"
    assert store.gap_table(root, interval="1s").missing.tolist() == [23 * 3600]  # 2024-12-31 01:00 .. 23:59:59
    np.testing.assert_array_equal(got.close[:3600], dec.close[3600:])
    np.testing.assert_array_equal(got.close[3600:], jan.close)
    assert cli.main(argv) == 0  # a second fetch: cached, nothing added
    assert "2 already verified" in capsys.readouterr().out


# --------------------------------------------------------------------------- end to end


def test_tiny_sweep_at_one_second(tmp_path):
    """The whole sweep on 1-second random-walk bars: durations as time, three days of 86,400 bars,
    test blocks of a day, N = 32 (32 s) and 64; the report says so."""
    overrides = {
        "data": {"start": "2024-01-01", "end": "2024-01-03", "max_gap_bars": "1m"},
        "labels": {"horizon": "15s"},
        "splits": {"n_folds": 2, "test_days": "1d", "embargo": "2s"},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 3, "tokens_per_step": 256, "warmup_steps": 1},
        "eval": {"baseline_lags": 2, "batch_tokens": 65536},
        "selection": {"cscv_blocks": 2},
    }
    run = run_sweep(SweepOptions(lengths=[32, 64], config="btc-1s", data="synthetic:random-walk:3", out=tmp_path / "run",
                                 device="cpu", preset="full", seed=0, precision=False, overrides=overrides,
                                 runs_root=tmp_path))
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["data"]["interval"] == "1s"
    assert (cfg["labels"]["horizon"], cfg["data"]["max_gap_bars"], cfg["splits"]["test_days"],
            cfg["splits"]["embargo"]) == (15, 60, 1, 2)  # converted to bars and days once, then saved
    data = json.loads((run / "data.json").read_text())
    assert data["fingerprint"]["count"] == 3 * 86_400
    assert [f["n_test"] for f in data["folds"]] == [86_400, 86_400]
    report = (run / "report.md").read_text()
    assert "N past 1-second bars: 32 = 32 s, 64 = 1.1 min" in report
    assert "| N=32 (32 s) |" in report and "| N=64 (1.1 min) |" in report
    assert "sign of the forward log return over 15 bars (15 s)" in report
    assert "windows never bridge a gap > 60 bars (1 min)" in report
    assert "test blocks of 1 day, purge 15 bars (15 s), embargo 2 bars" in report
    # daily aggregation: one row per UTC day that holds test bars, for every series
    rows = pq.read_table(run / "daily_returns.parquet").to_pylist()
    first, last = (dt.date.fromisoformat(data["folds"][k][f"test_{e}"][:10]) for k, e in ((0, "start"), (-1, "end")))
    want = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    assert sorted({r["day"] for r in rows if r["series"] == "n32"}) == want
