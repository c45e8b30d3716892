"""A new user's first hour (issue 31): `tsflash --version`, `tsflash runs`, `sweep --symbol`, and a
sweep's console log: one INFO line per finished cell, no per-step lines, no raw profiler lines,
the job's peak memory in run.json and in the report."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import tsflash
from tests.test_cli import REPO, TINY_SWEEP
from tsflash import cli
from tsflash.commands.options import check_pair
from tsflash.errors import UserError


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"tsflash {tsflash.__version__}\n"


def test_runs_on_an_empty_folder_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["runs"]) == 0
    assert "no runs under runs/ yet" in capsys.readouterr().out


def test_runs_lists_the_published_runs(capsys):
    assert cli.main(["runs", "--root", str(REPO / "reports")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run", "created", "(UTC)", "config", "lengths", "status", "answer"]
    second = next(line for line in lines if line.startswith("h200-btcusdt-1m-second-edition"))
    assert "2026-12-01 05:43" in second and "512,4096,32768" in second and "finished" in second
    assert second.endswith("forecast: worse; trading: no")


@pytest.mark.parametrize("given, pair", [("ethusdt", "ETHUSDT"), ("BTCUSDT", "BTCUSDT"), ("solFDUSD", "SOLFDUSD")])
def test_a_symbol_is_upper_cased_as_given(given, pair):
    assert check_pair(given) == pair


@pytest.mark.parametrize("bad", ["eth", "ETH", "USDT", "BTC-USDT", "btc/usdt", "x" * 30 + "USDT"])
def test_a_symbol_that_is_no_spot_pair_is_one_line(bad, tmp_path, monkeypatch, capsys):
    with pytest.raises(UserError):
        check_pair(bad)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "--symbol", bad, "--data", "synthetic:random-walk"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tsflash sweep: error: argument --symbol: ")
    assert list(tmp_path.iterdir()) == []


def test_sweep_symbol_sets_data_symbol():
    args = cli.build_parser().parse_args(["sweep", "--symbol", "ethusdt", "--set", "train.steps=2"])
    from tsflash.commands.sweep import _command_line, with_symbol
    from tsflash.config import parse_overrides

    assert with_symbol(parse_overrides(args.overrides), args.symbol) == {"data": {"symbol": "ETHUSDT"},
                                                                          "train": {"steps": 2}}
    assert "--symbol ETHUSDT" in _command_line(args)


def test_a_sweeps_console_is_quiet_and_records_the_jobs_peak_memory(tmp_path):
    argv = ["sweep", "--lengths", "32,64", "--data", "synthetic:random-walk", "--out", "run", "--preset", "cpu",
            "--device", "cpu", "--seed", "0"]  # with the precision check: the profiler runs in every cell
    for item in TINY_SWEEP:
        argv += ["--set", item]
    proc = subprocess.run([sys.executable, "-m", "tsflash.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    assert "profiler_start" not in log and "SyncActivityProfilerHandler" not in log
    assert not re.search(r"step \d+ of \d+|val loss", log)  # per-step lines are DEBUG
    run = tmp_path / "run"
    cells = len(list((run / "cells").rglob("*.cell.json")))
    assert len(re.findall(r"progress: \[\d+/\d+\] ", log)) == cells  # one INFO line per finished cell
    assert (run / "sweep.log").read_text().count("profiler_start") == 0
    peak = json.loads((run / "run.json").read_text())["peak_memory"]
    assert peak["bytes"] > 100 * 2**20 and peak["through"].endswith("report") and "VmHWM" in peak["rule"]
    assert "Peak memory of the whole job: " in (run / "report.md").read_text()
    assert "peak memory of the job: " in log
