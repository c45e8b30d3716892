"""`tsflash confirm`: a finished sweep re-tested on a later hold-out, its refusals (one line, exit 2,
nothing written) and its resume after SIGKILL."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import sigkill_when
from tsflash import cli
from tsflash.data.store import atomic_write_parquet, to_us, year_path
from tsflash.data.synthetic import random_walk_bars
from tsflash.runfolder import read_json, write_json
from tsflash.sweep.confirm import holdout_fold, missing_days

REPO = Path(__file__).resolve().parents[2]
# A two-week sweep ending 2024-12-31 (2 folds of 3 test days), tiny model; confirmed on one week.
TINY = [
    "data.start=\"2024-12-18\"", "data.end=\"2024-12-31\"", "splits.test_days=3", "splits.n_folds=2", "splits.val_days=0",
    "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=3", "train.tokens_per_step=256",
    "train.warmup_steps=1", "eval.baseline_lags=2", "eval.batch_tokens=4096", "selection.cscv_blocks=4",
]
HOLD = ["--start", "2025-01-01", "--end", "2025-01-07"]


def sweep(data: str, out: Path) -> Path:
    argv = ["sweep", "--lengths", "32,64", "--data", data, "--out", str(out), "--preset", "cpu", "--seed", "0",
            "--device", "cpu", "--no-precision"]
    for item in TINY:
        argv += ["--set", item]
    assert cli.main(argv) == 0
    return out


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with its content hash."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def numbers(run: Path) -> dict:
    return read_json(run / "confirm.json")


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    return sweep("synthetic:random-walk", tmp_path_factory.mktemp("confirm") / "run")


@pytest.fixture(scope="module")
def confirmed(swept, tmp_path_factory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("confirmed") / "run"
    shutil.copytree(swept, run)
    before = snapshot(run)
    assert cli.main(["confirm", str(run), *HOLD]) == 0
    return run, before


# ---------------------------------------------------------------------------------------------
# end to end


def test_confirm_answers_both_questions_on_the_hold_out(confirmed):
    run, before = confirmed
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k in before} == before  # the run's own files untouched
    new = {k.split("/")[0] for k in after if k not in before}
    assert new == {"confirm.md", "confirm.html", "confirm.json", "confirm"}
    c = numbers(run)
    assert c["hold_out"]["start"] == "2025-01-01" and c["hold_out"]["end"] == "2025-01-07"
    assert c["n_bars"] == 7 * 1440  # the fresh walk has no gap: every minute of the week, scored once
    assert [x["key"] for x in c["candidates"]] == ["n32", "n64"]
    ledger = read_json(run / "ledger.json")
    assert c["questions"]["trading"]["n_trials"] == ledger["n_complete"] == 2  # the ORIGINAL run's trial count
    assert c["selection"]["first_day"] == "2025-01-01" and c["selection"]["n_days"] == 7
    comps = c["questions"]["forecast"]["comparisons"]
    assert {(p["series"], p["reference"]) for p in comps} >= {("n64", "n32"), ("n32", "baseline-logreg")}
    assert all(p["n_days"] == 7 for p in comps)
    orig = read_json(run / "results.json")["verdict"]
    assert c["original"]["passed"] == orig["passed"] and c["original"]["selected"] == orig["selected"]
    # the run did not pass; it holds exactly when the hold-out gates do not pass either
    assert c["holds"]["trading"] == (not c["questions"]["trading"]["passed"])
    md = (run / "confirm.md").read_text()
    assert "2025-01-01..2025-01-07" in md and ("The verdict holds." in md or "The verdict does NOT hold." in md)
    # one seed and a one-fold hold-out: no answer over training runs on either side, so question 1 is
    # compared at the forecast level, the run's ensembles' DM reading against the hold-out's
    q = read_json(run / "questions.json")["forecast"]
    assert q["answer"] is None and q["dm_answer"] in ("better", "no better", "worse")
    assert c["original"]["forecast_answer"] is None and c["original"]["forecast_dm_answer"] == q["dm_answer"]
    hold = c["questions"]["forecast"]
    assert hold["answer"] is None and c["holds"]["forecast_level"] == "forecast level"
    assert c["holds"]["forecast"] == (q["dm_answer"] == hold["dm_answer"])
    assert "Forecasting, at the forecast level (the seed ensembles' Diebold-Mariano tests, the same rule; the " \
           "hold-out is not tested over training runs: one seed per fold" in md
    assert "<table>" in (run / "confirm.html").read_text()
    # the work folder is a run folder of its own: one fold, every (N, seed) cell and the baselines
    cells = sorted(p.relative_to(run / "confirm").as_posix() for p in (run / "confirm").rglob("*.cell.json"))
    assert cells == ["cells/baselines/fold0.cell.json", "cells/n32/fold0-seed0.cell.json",
                     "cells/n64/fold0-seed0.cell.json"]
    cell = read_json(run / "confirm" / cells[1])
    assert cell["test_start"] == "2025-01-01 00:00:00" and cell["test_end"] == "2025-01-07 23:59:00"
    assert cell["train_start"].startswith("2024-12-18") and cell["train_end"] < "2025-01-01"


def test_rerun_is_a_no_op_with_the_same_numbers(confirmed):
    run, _ = confirmed
    first = numbers(run)
    cells = snapshot(run / "confirm" / "cells")
    assert cli.main(["confirm", str(run), *HOLD]) == 0
    assert snapshot(run / "confirm" / "cells") == cells and numbers(run) == first


def test_resume_after_sigkill_gives_identical_numbers(tmp_path, swept, confirmed):
    run = tmp_path / "run"
    shutil.copytree(swept, run)
    cmd = [sys.executable, "-m", "tsflash.cli", "confirm", str(run), *HOLD]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sigkill_when(proc, lambda: bool(list(run.glob("confirm/cells/n*/*.cell.json"))), "the first confirm cell",
                 poll=0.02)
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "confirm.json").exists()
    assert cli.main(["confirm", str(run), *HOLD]) == 0
    assert numbers(run) == numbers(confirmed[0])


def test_real_bars_confirmed_after_the_sweep(shared_store, tmp_path):
    run = sweep(str(shared_store), tmp_path / "run")
    assert cli.main(["confirm", str(run), *HOLD]) == 0
    c = numbers(run)
    assert c["source"]["kind"] == "store" and c["n_bars"] == 7 * 1440
    assert c["questions"]["trading"]["n_trials"] == 2


# ---------------------------------------------------------------------------------------------
# refusals: one line, exit 2, nothing written


def refused(capsys, run: Path, argv: list[str], pattern: str) -> None:
    before = snapshot(run)
    assert cli.main(["confirm", str(run), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and pattern in err, err
    assert snapshot(run) == before


def test_refuses_a_hold_out_that_overlaps_the_run(swept, capsys):
    refused(capsys, swept, ["--start", "2024-12-31"], "overlaps the run's data range 2024-12-18..2024-12-31")


def test_refuses_an_empty_or_reversed_hold_out(swept, capsys):
    refused(capsys, swept, ["--start", "2025-01-08", "--end", "2025-01-07"], "--end 2025-01-07 is before --start")


def test_refuses_a_hold_out_shorter_than_the_horizon(swept, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(swept, run)
    cfg = read_json(run / "config.json")
    cfg["labels"]["horizon"] = 2000  # longer than the one-day hold-out (1440 bars)
    write_json(run / "config.json", cfg)
    refused(capsys, run, ["--start", "2025-01-01", "--end", "2025-01-01"], "not more than the label horizon (2000 bars)")


def test_refuses_a_store_that_lacks_the_range(swept, tmp_path, capsys):
    store = tmp_path / "store"
    bars = random_walk_bars(17 * 1440, start="2024-12-18", n_gaps=0)  # 2024-12-18 .. 2025-01-03
    for year in (2024, 2025):
        t = bars.to_table()
        keep = (bars.open_time >= to_us(f"{year}-01-01")) & (bars.open_time <= to_us(f"{year}-12-31", end=True))
        atomic_write_parquet(t.filter(keep), year_path(store, "BTCUSDT", "1m", year))
    refused(capsys, swept, [*HOLD, "--data", str(store)], "lacks BTCUSDT 1m bars for 4 day(s) of 2025-01-01..2025-01-07: "
                                                          "2025-01-04..2025-01-07")


def test_refuses_a_run_that_is_not_finished(swept, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(swept, run)
    meta = read_json(run / "run.json")
    write_json(run / "run.json", meta | {"status": "running"})
    refused(capsys, run, HOLD, "is not finished")
    (run / "run.json").unlink()
    refused(capsys, run, HOLD, "is not a tsflash run folder")


def test_refuses_a_run_that_records_no_data_source_without_data(swept, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(swept, run)
    write_json(run / "run.json", {k: v for k, v in read_json(run / "run.json").items() if k != "data"})
    write_json(run / "data.json", {k: v for k, v in read_json(run / "data.json").items() if k != "source"})
    refused(capsys, run, HOLD, "records no data source (run.json's data, data.json's source); name the bars with --data")


# ---------------------------------------------------------------------------------------------
# helpers


def test_holdout_fold_purges_before_the_test_block():
    t = np.arange(100, dtype=np.int64) * 60_000_000
    train, test = holdout_fold(t, int(t[70]), purge=5, train_bars=None)
    assert test.tolist() == list(range(70, 100)) and train.tolist() == list(range(0, 65))
    train, _ = holdout_fold(t, int(t[70]), purge=5, train_bars=20)
    assert train.tolist() == list(range(45, 65))


def test_missing_days_lists_days_without_a_bar():
    t = np.array([to_us("2025-01-01"), to_us("2025-01-03") + 60_000_000])
    assert [str(d) for d in missing_days(t, "2025-01-01", "2025-01-04")] == ["2025-01-02", "2025-01-04"]


def test_question_1_is_compared_at_the_level_both_sides_answer(tmp_path):
    from types import SimpleNamespace

    from tsflash.runfolder import RunFolder
    from tsflash.sweep.confirm import forecast_level, original_verdict

    old = tmp_path / "old"  # a report from before the run-level rule: its "answer" is the forecast-level one
    old.mkdir()
    write_json(old / "questions.json", {"forecast": {"answer": "worse", "sentence": "Longer context forecasts worse."}})
    orig = original_verdict(RunFolder(old))
    assert (orig["forecast_answer"], orig["forecast_dm_answer"]) == (None, "worse")
    hold = SimpleNamespace(answer=None, dm_answer="no better")
    assert forecast_level(orig, hold) == ("forecast level", "worse", "no better")
    both = orig | {"forecast_answer": "no better"}  # both sides answered over training runs: that level
    assert forecast_level(both, SimpleNamespace(answer="no better", dm_answer="worse")) == (
        "over training runs", "no better", "no better")
