"""A sweep on bad data or into a folder it cannot use: one line, exit 2, and no run folder left
(no sweep.log, optuna.db or run.json for a later command to "resume"). A run folder's damaged file
(a cell summary, a daily series, the ledger) is one line naming it, for a resumed sweep, a report
and a re-scoring, and is left as found."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.test_cli import TINY_SWEEP
from tsflash import cli
from tsflash.data import store

MIN_US = store.INTERVAL_US["1m"]


@pytest.fixture
def bar_store(tmp_path):
    """2024-01-01..08 of 1-minute bars, written by the store (with its manifest)."""
    return write_bars(tmp_path)


def write_bars(tmp_path):
    n = 8 * 1440
    rng = np.random.default_rng(0)
    close = np.round(40000 * np.exp(np.cumsum(rng.normal(0, 1e-3, n))), 2)
    open_ = np.r_[40000.0, close[:-1]]
    bars = store.Bars(store.to_us("2024-01-01") + MIN_US * np.arange(n, dtype=np.int64), open_,
                      np.maximum(open_, close) + 1, np.minimum(open_, close) - 1, close, np.full(n, 1.0),
                      np.full(n, 4, np.int64), np.full(n, 0.5))
    root = tmp_path / "bars"
    store.write_year_files(root, "BTCUSDT", "1m", bars.to_table())
    return root


def sweep_argv(root, out) -> list[str]:
    argv = ["sweep", "--lengths", "32,64", "--data", str(root), "--out", str(out), "--preset", "cpu", "--device", "cpu",
            "--seed", "0", "--no-precision"]
    for item in TINY_SWEEP:
        argv += ["--set", item]
    return argv


def sweep(capsys, root, out) -> tuple[int, str]:
    rc = cli.main(sweep_argv(root, out))
    return rc, capsys.readouterr().err


def one_line(err: str, pattern: str) -> None:
    """The error is one line, the last; the lines before it are the sweep's own log (INFO)."""
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and err.rstrip("\n").endswith(errors[0]), err
    assert re.fullmatch(pattern, errors[0]), err


def test_a_changed_store_file_is_refused_before_the_run_folder_exists(bar_store, tmp_path, capsys):
    p = store.year_path(bar_store, "BTCUSDT", "1m", 2024)
    data = bytearray(p.read_bytes())
    data[len(data) // 3: len(data) // 3 + 4096] = np.random.default_rng(1).bytes(4096)  # the user's 4 KiB
    p.write_bytes(bytes(data))
    rc, err = sweep(capsys, bar_store, tmp_path / "run")
    assert rc == 2
    one_line(err, r"tsflash: error: .*btcusdt-1m-2024\.parquet differs from the store manifest .*re-import the file to change it.*")
    assert not (tmp_path / "run").exists()


def test_a_truncated_store_file_without_manifest_leaves_no_run_folder(bar_store, tmp_path, capsys):
    (bar_store / "btcusdt-1m" / "manifest.json").unlink()
    p = store.year_path(bar_store, "BTCUSDT", "1m", 2024)
    p.write_bytes(p.read_bytes()[:-1000])
    rc, err = sweep(capsys, bar_store, tmp_path / "run")
    assert rc == 2
    one_line(err, r"tsflash: error: .*btcusdt-1m-2024\.parquet: unreadable Parquet file \(.*\); the file is damaged "
                  r"or not a store file: delete it and re-import its bars")
    assert not (tmp_path / "run").exists()  # made, then removed with its sweep.log, optuna.db and run.json


def test_an_out_folder_that_cannot_be_created(bar_store, tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    rc, err = sweep(capsys, bar_store, tmp_path / "a-file" / "run")
    assert rc == 2
    one_line(err, r"tsflash: error: .*a-file/run: Not a directory \(a part of the path is a file, not a folder; "
                  r"nothing half-written was kept\)")
    rc, err = sweep(capsys, bar_store, tmp_path / "a-file")
    one_line(err, r"tsflash: error: --out .*a-file is a file: give a run folder \(new, or one to resume\)")


def test_a_run_folder_of_a_newer_version_is_not_resumed(bar_store, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"format": 2, "run_key": "x"}))
    rc, err = sweep(capsys, bar_store, out)
    assert rc == 2
    one_line(err, r"tsflash: error: .*run\.json was written by a newer tsflash \(run folder format 2; .*")
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]



@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(bar store, run folder) of a finished tiny sweep, made once; each test damages a copy."""
    tmp = tmp_path_factory.mktemp("finished")
    root = write_bars(tmp)
    assert cli.main(sweep_argv(root, tmp / "run")) == 0
    return root, tmp / "run"


def damaged_copy(run, tmp_path, name: str, how: str):
    """A copy of `run`, marked unfinished (so a sweep resumes it), with its file `name` cut in half
    ("cut") or eight of its bytes overwritten ("flip": a zip member's checksum no longer holds)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    meta = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps(meta | {"status": "running"}))
    data = bytearray((copy / name).read_bytes())
    if how == "cut":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3 : len(data) // 3 + 8] = b"\xff" * 8
    (copy / name).write_bytes(bytes(data))
    return copy


# How each kind of damage is worded (tsflash.runfolder.DamagedFile)
JSON, NPZ = r"not valid JSON \(JSONDecodeError: .*\)", r"not a readable \.npz archive \(BadZipFile: .*\)"


@pytest.mark.parametrize(("name", "how", "rule"), [
    ("cells/n32/fold0-seed0.cell.json", "cut", JSON), ("cells/baselines/fold1.cell.json", "cut", JSON),
    ("series/n64.npz", "cut", NPZ), ("optuna.db", "cut", r"not a readable SQLite database \(.*\)"),
])
def test_a_resumed_sweep_refuses_a_damaged_file_of_its_run_folder(finished, tmp_path, capsys, name, how, rule):
    root, run = finished
    copy = damaged_copy(run, tmp_path, name, how)
    damaged = (copy / name).read_bytes()
    rc, err = sweep(capsys, root, copy)
    assert rc == 2
    one_line(err, rf"tsflash: error: {re.escape(str(copy / name))} is damaged: {rule}")
    assert (copy / name).read_bytes() == damaged  # left as found, for the user to restore


@pytest.mark.parametrize(("name", "how", "rule"), [
    ("cells/n32/fold1-seed0.cell.json", "cut", JSON), ("series/n32.npz", "cut", NPZ),
    ("series/n32.npz", "flip", r"an array cannot be read \(BadZipFile: Bad CRC-32 .*\)"), ("ledger.json", "cut", JSON),
])
def test_a_report_refuses_a_damaged_file_of_its_run_folder(finished, tmp_path, capsys, name, how, rule):
    _, run = finished
    copy = damaged_copy(run, tmp_path, name, how)
    report = (copy / "report.md").read_bytes()
    assert cli.main(["report", str(copy)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert re.fullmatch(rf"tsflash: error: (report: )?{re.escape(str(copy / name))} is damaged: {rule}", err.strip()), err
    assert (copy / "report.md").read_bytes() == report  # the published report stays as it was


def test_rescoring_refuses_a_damaged_per_bar_cell_file(finished, tmp_path, capsys):
    _, run = finished
    copy = damaged_copy(run, tmp_path, "cells/n32/fold1-seed0.npz", "flip")
    assert cli.main(["report", str(copy), "--set", "eval.fee_bps=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cells/n32/fold1-seed0.npz is damaged: an array cannot be read" in err, err
    assert not (copy / "rescored").exists()


@pytest.mark.parametrize(("how", "rule"), [("cut", r"\(ArrowInvalid: .*\)"), ("flip", r"\(OSError: .*CRC.*\)")])
def test_a_report_refuses_a_damaged_loss_table_of_a_published_run(finished, tmp_path, capsys, how, rule):
    import shutil

    _, run = finished
    copy = tmp_path / "published"
    shutil.copytree(run, copy)
    for npz in [*copy.glob("cells/**/*.npz"), *copy.glob("forecasts/*.npz")]:  # as a published run keeps it
        npz.unlink()
    name = "forecast_daily.parquet"
    assert (copy / name).exists() and cli.main(["report", str(copy)]) == 0  # read back from the loss table
    capsys.readouterr()
    data = bytearray((copy / name).read_bytes())
    if how == "cut":
        data = data[: len(data) // 2]
    else:  # a value inside a page: only the page's CRC tells
        data[len(data) // 4 : len(data) // 4 + 8] = b"\x00" * 8
    (copy / name).write_bytes(bytes(data))
    report = (copy / "report.md").read_bytes()
    assert cli.main(["report", str(copy)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert re.fullmatch(rf"tsflash: error: (report: )?{re.escape(str(copy / name))} is damaged: not a readable "
                        rf"Parquet file {rule}", err.strip()), err
    assert (copy / "report.md").read_bytes() == report
