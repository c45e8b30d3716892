"""The sweep end to end on CPU (tiny config), resume after SIGKILL, argument errors, synthetic bars."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import sigkill_when
from tests.sweep.test_workers import PYTHON_ENV
from tsflash import cli
from tsflash.config import config_from_dict, parse_lengths, parse_overrides
from tsflash.data.synthetic import parse_source
from tsflash.errors import UserError
from tsflash.identity import digest
from tsflash.report import SECTIONS
from tsflash.report.wording import NOT_EVIDENCE
from tsflash.runfolder import DEFAULT_RUNS_ROOT, RunFolder, find_unfinished_run, write_json
from tsflash.sweep.plan import folder_run_key, make_run_key, resolve_config, run_hash
from tsflash.sweep.run import SweepOptions, plan_sweep, run_sweep

REPO = Path(__file__).resolve().parents[2]

# Tiny but complete: 2 folds of 2 test days (5 UTC days of returns: PBO with 4 CSCV blocks),
# a 1-layer d_model-16 model, 3 steps, no validation tail (the default's 30-day tail needs a longer
# range). Applied on top of the CPU preset with --set.
TINY = [
    "data.start=\"2024-01-01\"", "data.end=\"2024-01-08\"", "splits.test_days=2", "splits.n_folds=2", "splits.val_days=0",
    "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=3", "train.tokens_per_step=256",
    "train.warmup_steps=1", "eval.baseline_lags=2", "eval.batch_tokens=4096", "selection.cscv_blocks=4",
]


@pytest.fixture(scope="module")
def data_arg(request) -> str:
    """The shared real store when present, else the synthetic random walk."""
    try:
        return str(request.getfixturevalue("shared_store"))
    except pytest.skip.Exception:
        return "synthetic:random-walk"


def sweep_argv(data: str, out: Path) -> list[str]:
    argv = ["sweep", "--lengths", "32,64", "--data", data, "--out", str(out), "--preset", "cpu", "--seed", "0"]
    for item in TINY:
        argv += ["--set", item]
    return argv


def cell_markers(run: Path) -> list[Path]:
    return sorted((run / "cells").rglob("*.cell.json"))


# The sweeps of this module at one thread, in this process and in subprocesses (PYTHON_ENV): the
# resumed run must equal the uninterrupted one bit for bit (tests.conftest.one_thread).
pytestmark = pytest.mark.usefixtures("single_thread")  # tests.conftest.one_thread


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_arg) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "run"
    assert cli.main(sweep_argv(data_arg, out)) == 0
    return out


# ---------------------------------------------------------------------------------------------
# end to end


def test_end_to_end_writes_every_file_and_section(finished_run):
    run = finished_run
    for name in ("run.json", "config.json", "data.json", "sweep.log", "optuna.db", "ledger.json", "precision.json",
                 "results.json", "report.md", "report.html", "fold_metrics.parquet", "daily_returns.parquet"):
        assert (run / name).is_file(), name
    for fig in ("cost_vs_n", "benefit_vs_n", "equity", "pbo"):
        assert (run / "figures" / f"{fig}.png").is_file()
    md = (run / "report.md").read_text()
    assert re.findall(r"^## (.+)$", md, flags=re.M) == list(SECTIONS)
    assert "reduced CPU preset" in md  # the CPU preset says so in the report
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
    # 2 folds x (baselines + 2 lengths x 1 seed)
    assert len(cell_markers(run)) == 6
    assert not (run / "checkpoints").exists()  # a finished run leaves no checkpoint, not even an empty folder
    # each fold of each trial scored on its own (what survives a state archive; tests/engine/test_resume.py)
    assert sorted(p.relative_to(run).as_posix() for p in (run / "scores").rglob("*")) == [
        "scores/n32", "scores/n32/fold0.npz", "scores/n32/fold1.npz", "scores/n64", "scores/n64/fold0.npz",
        "scores/n64/fold1.npz"]
    log = (run / "sweep.log").read_text()
    assert len(re.findall(r"\[\d/6\] .*elapsed", log)) == 6  # one line per finished cell
    fm = pq.read_table(run / "fold_metrics.parquet").to_pylist()
    assert {(r["series"], r["fold"]) for r in fm} >= {("n32", 0), ("n32", 1), ("n64", 0), ("n64", 1),
                                                       ("baseline-prior", 0), ("baseline-logreg", 1)}
    prec = json.loads((run / "precision.json").read_text())
    assert [r["n"] for r in prec["rows"]] == [32, 64] and all(r["status"] == "ok" for r in prec["rows"])
    # the default's eval.probe: the linear information probe is a baseline row per N, and has its section
    assert {("baseline-probe-32", 1), ("baseline-probe-64", 1)} <= {(r["series"], r["fold"]) for r in fm}
    assert "| baseline: linear probe N=64 |" in md and "**Linear information probe" in md and "| N=64 | " in md


def test_optuna_ledger_holds_trials_folds_and_paths(finished_run):
    import optuna

    run = finished_run
    meta = json.loads((run / "run.json").read_text())
    study = optuna.load_study(study_name=meta["study_name"], storage=f"sqlite:///{run / 'optuna.db'}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.params["n"] for t in done) == [32, 64]
    for t in done:
        assert set(t.intermediate_values) <= {0, 1}  # one per fold (a fold's Sharpe may be undefined)
        assert all((run / p).with_suffix(".npz").is_file() for p in t.user_attrs["result_paths"])
        series = np.load(run / t.user_attrs["daily_returns_path"])
        assert t.value == pytest.approx(series["net"].mean() / series["net"].std(ddof=1))
    results = json.loads((run / "results.json").read_text())
    assert results["selection"]["n_trials"] == len(done) == 2


def test_rerun_same_out_recomputes_nothing(finished_run, data_arg, monkeypatch, capsys):
    before = {p: p.stat().st_mtime_ns for p in cell_markers(finished_run)}
    monkeypatch.setenv("TSFLASH_GPU_JOBS", "3")  # as a device script that starts three jobs side by side says
    capsys.readouterr()
    assert cli.main(sweep_argv(data_arg, finished_run)) == 0
    # a finished sweep's last lines (issue 55; issue 57: the two lead sentences end it): the report's path,
    # then both leads as the report wrote them
    questions = json.loads((finished_run / "questions.json").read_text())
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"report: {finished_run / 'report.md'} (and report.html)",
        f"question 1 (forecasting): {questions['forecast']['lead']}",
        f"question 2 (trading): {questions['trading']['lead']}"]
    assert all(len(questions[q]["lead"].split()) <= 40 for q in ("forecast", "trading"))
    assert questions["trading"]["sentence"].startswith("No") and questions["trading"]["sentence"].endswith(NOT_EVIDENCE)
    assert {p: p.stat().st_mtime_ns for p in cell_markers(finished_run)} == before
    first, second = json.loads((finished_run / "run.json").read_text())["invocations"]
    assert "gpu_jobs" not in first and second["gpu_jobs"] == 3  # each slice says whether it shared the GPU
    monkeypatch.setenv("TSFLASH_GPU_JOBS", "0")
    assert cli.main(sweep_argv(data_arg, finished_run)) == 2
    assert "$TSFLASH_GPU_JOBS must be a whole number of jobs >= 1, got '0'" in capsys.readouterr().err
    assert len(json.loads((finished_run / "run.json").read_text())["invocations"]) == 2


def _comparable(run: Path) -> dict:
    """What must not depend on interruptions: per-cell metrics, daily series, verdict numbers."""
    cells = {}
    for p in cell_markers(run):
        c = json.loads(p.read_text())
        rows = c["baselines"].values() if "baselines" in c else [c]
        for r in rows:
            cells[(r["key"], r["fold"])] = r["metrics"]
    series = {p.stem: np.load(p)["net"].tolist() for p in sorted((run / "series").glob("*.npz"))}
    res = json.loads((run / "results.json").read_text())
    sel = [(c["key"], c["sharpe"], c["dsr"]) for c in res["selection"]["candidates"]]
    return {"cells": cells, "series": series, "selection": sel, "pbo": res["selection"]["pbo"]["pbo"]}


@pytest.mark.slow  # a second full tiny sweep in subprocesses (about 30 s on 2 shared cores)
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, finished_run, data_arg):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "tsflash.cli", *sweep_argv(data_arg, out)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=PYTHON_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # kill once a model cell is saved: baselines and at least one (trial, fold) are done, more remain
    sigkill_when(proc, lambda: bool(list(out.glob("cells/n*/*.cell.json"))), "the first model cell")
    assert proc.returncode == -signal.SIGKILL
    n_before = len(cell_markers(out))
    assert 3 <= n_before < 6 and not (out / "report.md").exists()
    rerun = subprocess.run(cmd, cwd=REPO, env=PYTHON_ENV, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert len(cell_markers(out)) == 6
    log = (out / "sweep.log").read_text()
    assert "run folder" in log and "(resuming)" in log
    # the rerun trained under the kernels the killed run had decided (attention.pin), not timed afresh
    assert "attention: kept the run's earlier kernel decisions" in log
    a, b = _comparable(finished_run), _comparable(out)
    assert b["cells"] == a["cells"]  # bit-identical metrics (deterministic on CPU)
    assert b["series"] == a["series"]
    assert b["selection"] == a["selection"] and b["pbo"] == a["pbo"]


def test_a_reduced_sweep_opens_with_one_smoke_test_line(finished_run):
    """The first line a reduced run logs (console and sweep.log) says it is a smoke test, not evidence;
    the report opens with the same line, after its title."""
    first = (finished_run / "sweep.log").read_text().splitlines()[0]
    note = json.loads((finished_run / "run.json").read_text())["preset_note"]
    assert first.endswith(f" WARNING tsflash.sweep.run: {note}")
    assert re.match(r"Smoke test of the method on the reduced CPU preset \((no CUDA device|--preset cpu)\), not "
                    r"evidence: tsflash/presets/cpu.toml applied -- d_model=16, ", note)
    md = (finished_run / "report.md").read_text()
    assert md.split("\n\n")[1] == note and "**Question" not in md


def test_every_long_step_logs_what_starts_and_its_seconds(finished_run):
    """Issue 55: the fold-0 logistic baseline ran 54 s on BTC with no line. Each step that can pass
    10 s (the baselines, the probe, scoring a cell's test bars, the report) logs a start line with
    what and how big, before an end line with its seconds."""
    log = (finished_run / "sweep.log").read_text()
    for start, end in (
        (r"fold 0: fitting the logistic baseline on [\d,]+ bars x 2 lags of \d+ features, then scoring [\d,]+ test bars",
         r"fold 0: logistic baseline fitted and scored in \d+\.\d s"),
        (r"fold 1: fitting the volatility \(direction-blind logistic\) baseline on [\d,]+ bars x 2 lags",
         r"fold 1: volatility \(direction-blind logistic\) baseline fitted and scored in \d+\.\d s"),
        (r"fold 0: fitting the linear probe N=64 \(\d+ windows\) on [\d,]+ bars, then scoring [\d,]+ bars",
         r"fold 0: linear probe N=64 fitted and scored in \d+\.\d s"),
        (r"fold 1 n=32 seed=0: scoring [\d,]+ test bars", r"fold 1 n=32 seed=0: scored in \d+\.\d s"),
        (r"writing the report of \S+: \d+ cells, \d+ daily series", r"report written in \d+\.\d s: \S+report\.md"),
    ):
        first, last = re.search(start, log), re.search(end, log)
        assert first and last and first.start() < last.start(), (start, end)


def test_an_unfinished_sweep_says_so_instead_of_answers(tmp_path, monkeypatch, capsys):
    from tsflash.sweep import run as sweep

    monkeypatch.setattr(sweep, "plan_sweep", lambda opts: opts)
    monkeypatch.setattr(sweep, "run_sweep", lambda plan: tmp_path)  # cells left: no report.md, no questions.json
    assert cli.main(["sweep", "--lengths", "32,64", "--data", "synthetic:random-walk", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"run folder: {tmp_path} (unfinished: trials left for another worker or a rerun of "
                                "this command)"]


def test_report_command_rebuilds_without_training(finished_run, capsys):
    (finished_run / "report.md").unlink()
    (finished_run / "report.html").unlink()
    assert cli.main(["report", str(finished_run)]) == 0
    assert (finished_run / "report.md").exists() and (finished_run / "report.html").exists()
    assert "report.md" in capsys.readouterr().out


def test_a_kept_record_leaves_out_per_bar_files_and_an_unfinished_one_still_resumes(finished_run, tmp_path):
    """RunFolder.copy_record, the one rule for what of a run is committed under reports/: a finished
    run keeps its summaries, tables and report but no per-bar file, checkpoint or fold score; an
    unfinished one keeps the fold scores and series a resume reads, so every finished cell stays done
    (cell_saved) without its per-bar arrays. The destination is never overwritten."""
    from tsflash.runfolder import RunFolder

    source = sorted(p.relative_to(finished_run) for p in finished_run.rglob("*"))
    kept = RunFolder(finished_run).copy_record(tmp_path / "kept")
    files = {p.relative_to(tmp_path / "kept").as_posix() for p in (tmp_path / "kept").rglob("*") if p.is_file()}
    assert kept["complete"] and kept["resumable_cells"] is None and kept["cells"] == 4  # 2 lengths x 2 folds
    assert {"run.json", "config.json", "optuna.db", "results.json", "report.md", "fold_metrics.parquet"} <= files
    assert not [f for f in files if f.endswith(".npz") or f.split("/")[0] in ("figures", "scores", "series", "forecasts")]
    assert "report.html" not in files and not list((tmp_path / "kept").glob(".*partial"))
    assert sorted(p.relative_to(finished_run) for p in finished_run.rglob("*")) == source  # the run is untouched
    with pytest.raises(UserError, match="exists; a kept record is never overwritten"):
        RunFolder(finished_run).copy_record(tmp_path / "kept")

    unfinished = tmp_path / "unfinished"
    shutil.copytree(finished_run, unfinished)
    run_json = json.loads((unfinished / "run.json").read_text())
    write_json(unfinished / "run.json", run_json | {"status": "running"})
    kept = RunFolder(unfinished).copy_record(tmp_path / "resumable")
    resumable = RunFolder(tmp_path / "resumable")
    assert not kept["complete"] and kept["resumable_cells"] == kept["cells"] == 4
    assert not list(resumable.cells_dir.rglob("*.npz")) and list(resumable.scores_dir.rglob("*.npz"))
    assert sorted(resumable.saved_cell_keys()) == sorted(RunFolder(finished_run).saved_cell_keys())
    with pytest.raises(UserError, match="not a tsflash run folder"):
        RunFolder(tmp_path / "nothing").copy_record(tmp_path / "elsewhere")


def test_keep_run_checks_every_pair_before_copying_any(finished_run, tmp_path, capsys):
    from tests.conftest import load_experiment

    keep_run = load_experiment("keep_run")
    (tmp_path / "taken").mkdir()
    assert keep_run.main([str(finished_run), str(tmp_path / "a"), str(finished_run), str(tmp_path / "taken")]) == 2
    assert "taken exists; a kept record is never overwritten" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()  # the first pair was not copied either
    assert keep_run.main([str(finished_run), str(tmp_path / "a")]) == 0 and (tmp_path / "a" / "report.md").exists()
    with pytest.raises(SystemExit):
        keep_run.main([str(finished_run)])


# ---------------------------------------------------------------------------------------------
# arguments


# Bad arguments of every subcommand, one line and exit 2 each: tests/test_cli.py.


def test_parse_lengths_and_overrides():
    assert parse_lengths("4096, 512,32768") == [512, 4096, 32768]
    with pytest.raises(UserError, match=r"--lengths: lengths must be distinct, got '64,64'"):
        parse_lengths("64,64")
    assert parse_overrides(["train.steps=3", "train.lr=1e-3", "data.start=\"2024-01-01\"", "name=x"]) == {
        "train": {"steps": 3, "lr": 1e-3}, "data": {"start": "2024-01-01"}, "name": "x"}
    with pytest.raises(UserError, match=r"--set: expected KEY=VALUE such as train.steps=3, got 'steps'"):
        parse_overrides(["steps"])


def test_storage_password_is_not_written():
    from tsflash.sweep.provenance import redact

    assert redact("postgresql://ann:s3cr:et@db.example:5432/tsflash") == "postgresql://ann:***@db.example:5432/tsflash"
    assert redact("sqlite:///runs/optuna.db") == "sqlite:///runs/optuna.db"


def test_presets_on_cpu():
    cfg, preset, note = resolve_config(SweepOptions(lengths=[512, 4096, 32768]), device="cpu")
    assert preset == "cpu" and "reduced CPU preset (no CUDA device)" in note and "--preset full" in note
    assert (cfg.model.d_model, cfg.train.steps, cfg.data.start) == (32, 12, "2024-07-01")
    assert cfg.lengths == [512, 4096, 32768]
    full, preset, note = resolve_config(SweepOptions(preset="full"), device="cpu")
    assert preset == "full" and note == "" and full.model.d_model == 256
    cuda, preset, _ = resolve_config(SweepOptions(), device="cuda")
    assert preset == "full" and cuda.hash() == full.hash()
    # command-line values and --set win over the preset
    cfg, _, _ = resolve_config(SweepOptions(start="2024-09-01", seed=7, overrides={"train": {"steps": 2}}), "cpu")
    assert (cfg.data.start, cfg.train.seeds, cfg.train.steps) == ("2024-09-01", [7], 2)


def test_same_command_finds_the_unfinished_run(tmp_path):
    assert SweepOptions().runs_root == DEFAULT_RUNS_ROOT == Path("runs")  # new runs out of reports/ by default
    opts = SweepOptions(lengths=[32, 64], data="synthetic:random-walk", runs_root=tmp_path, overrides={})
    plan = plan_sweep(opts)
    assert plan.run_dir.parent == tmp_path and plan.run_dir.name.endswith(f"-{run_hash(plan.cfg)}")
    assert not plan.resumed
    write_json(plan.run_dir / "run.json", {"run_key": plan.run_key, "status": "running"})
    again = plan_sweep(opts)
    assert again.run_dir == plan.run_dir and again.resumed
    # another fee is the same run (fees are applied at scoring time), scored at the run's own fee
    write_json(plan.run_dir / "config.json", plan.cfg.to_dict())
    cheaper = plan_sweep(dataclasses.replace(opts, overrides={"eval": {"fee_bps": 0.0}}))
    assert cheaper.run_dir == plan.run_dir and cheaper.resumed and cheaper.run_key == plan.run_key
    assert cheaper.cfg.eval.fee_bps == plan.cfg.eval.fee_bps == 5.0
    assert "scored at eval.fee_bps=5 (its config.json), not 0" in cheaper.fee_note
    # a different data source is a different run, even with the same config hash
    other = plan_sweep(SweepOptions(lengths=[32, 64], data="synthetic:random-walk:5", runs_root=tmp_path))
    assert other.run_key != plan.run_key and not other.resumed
    # a complete run is left alone: the next invocation starts a new folder
    write_json(plan.run_dir / "run.json", {"run_key": plan.run_key, "status": "complete"})
    assert find_unfinished_run(tmp_path, run_hash(plan.cfg), plan.run_key) is None
    # --out naming a folder of another configuration is refused
    with pytest.raises(UserError, match=r"--out .* holds a run of another configuration"):
        plan_sweep(SweepOptions(lengths=[32, 128], data="synthetic:random-walk", out=plan.run_dir))


def test_the_fee_is_left_out_of_the_run_key_and_folder_hash():
    cfg, _, _ = resolve_config(SweepOptions(), "cpu")
    free, _, _ = resolve_config(SweepOptions(overrides={"eval": {"fee_bps": 0.0}}), "cpu")
    steps, _, _ = resolve_config(SweepOptions(overrides={"train": {"steps": 2}}), "cpu")
    assert make_run_key(free, "data", 1, "cpu") == make_run_key(cfg, "data", 1, "cpu")
    assert run_hash(free) == run_hash(cfg) and free.hash() != cfg.hash()
    assert make_run_key(steps, "data", 1, "cpu") != make_run_key(cfg, "data", 1, "cpu") and run_hash(steps) != run_hash(cfg)
    assert make_run_key(cfg, "data", 1, "cuda:1") == make_run_key(cfg, "data", 1, "cuda")  # the device type only


def fee_in_key(cfg, data, trials, device):
    """The run key of folders made while the fee was part of the run (reports/h200-btcusdt-1m)."""
    return digest({"config": cfg.to_dict(), "data": data, "trials": trials, "device": device.split(":")[0]}, 12)


def test_published_run_keeps_its_key_and_out_accepts_it(tmp_path):
    published = REPO / "reports" / "h200-btcusdt-1m"
    meta = json.loads((published / "run.json").read_text())
    saved = json.loads((published / "config.json").read_text())
    cfg = config_from_dict(saved)
    args = (meta["data"], meta["trials_per_length"], meta["device"])
    assert fee_in_key(cfg, *args) == meta["run_key"] != make_run_key(cfg, *args)
    assert folder_run_key(RunFolder(published), cfg, *args) == meta["run_key"]
    # a folder made while the fee was in the key (a config.json without config_version): --out resumes
    # it, with its study, matched by its config
    opts = SweepOptions(lengths=[32, 64], data="synthetic:random-walk", out=tmp_path / "old")
    first = plan_sweep(opts)
    old_key = fee_in_key(first.cfg, opts.data, 1, "cpu")
    write_json(first.run_dir / "config.json", first.cfg.to_dict())
    write_json(first.run_dir / "run.json", {"run_key": old_key, "study_name": "tsflash-old", "status": "running",
                                            "data": opts.data, "trials_per_length": 1, "device": "cpu"})
    again = plan_sweep(opts)
    assert again.resumed and again.run_key == old_key and again.study_name == "tsflash-old"
    # at another fee too, scored at its own (the fee is not part of a run); another config is refused
    free = plan_sweep(replace(opts, overrides={"eval": {"fee_bps": 0.0}}))
    assert free.run_key == old_key and free.cfg.eval.fee_bps == first.cfg.eval.fee_bps and free.fee_note
    with pytest.raises(UserError, match=r"--out .* holds a run of another configuration \(run key " + old_key):
        plan_sweep(replace(opts, overrides={"train": {"steps": 3}}))


def test_another_fee_reuses_every_cell(finished_run, data_arg, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = json.loads((run / "run.json").read_text())
    cells = {p: p.stat().st_mtime_ns for p in cell_markers(run)}
    series = {p.name: p.read_bytes() for p in sorted((run / "series").glob("*.npz"))}
    assert cli.main(sweep_argv(data_arg, run) + ["--set", "eval.fee_bps=0"]) == 0
    assert {p: p.stat().st_mtime_ns for p in cell_markers(run)} == cells  # nothing trained again
    after = json.loads((run / "run.json").read_text())
    assert after["run_key"] == before["run_key"] and len(after["invocations"]) == len(before["invocations"]) + 1
    assert {p.name: p.read_bytes() for p in sorted((run / "series").glob("*.npz"))} == series  # at the run's fee
    assert "scored at eval.fee_bps=5 (its config.json), not 0" in (run / "sweep.log").read_text()


def test_cells_rescore_at_another_fee(finished_run):
    from tsflash.runfolder import RunFolder
    from tsflash.scoring.daily import series_from_cells

    folder = RunFolder(finished_run)
    for name in ("n32", "n64", "baseline-logreg"):
        saved = folder.read_series(name)
        at_run_fee = series_from_cells(folder, name, n_folds=2, seeds=[0], fee_bps=5.0)
        assert all(np.array_equal(at_run_fee[k], saved[k]) for k in ("days", "net", "gross"))  # bit-identical
        free = series_from_cells(folder, name, n_folds=2, seeds=[0], fee_bps=0.0)
        assert np.array_equal(free["net"], free["gross"]) and np.array_equal(free["gross"], saved["gross"])
        if name != "baseline-logreg":
            assert np.all(free["net"] >= saved["net"]) and np.any(free["net"] > saved["net"])  # fees cost


# ---------------------------------------------------------------------------------------------
# synthetic bars


def test_synthetic_source_parsing():
    assert parse_source("data") is None
    assert parse_source("synthetic:random-walk") == ("random-walk", None)
    assert parse_source("synthetic:random-walk:7") == ("random-walk", 7)
    with pytest.raises(UserError, match=r"the synthetic seed must be an integer, got 'x'"):
        parse_source("synthetic:random-walk:x")


# ---------------------------------------------------------------------------------------------
# ledger bookkeeping and data source


def test_planned_slots_and_trial_keys():
    from tsflash.config import ExperimentConfig
    from tsflash.runfolder import encode_trial_key
    from tsflash.sweep.ledger import Slot, plan_slots

    cfg = ExperimentConfig()
    lr, wd = cfg.train.lr, cfg.train.weight_decay
    assert plan_slots([512, 4096], 1, lr, wd) == [Slot("n512/0", {"n": 512}), Slot("n4096/0", {"n": 4096})]
    slots = plan_slots([512, 4096], 3, lr, wd)
    assert [s.id for s in slots] == ["n512/0", "n512/1", "n512/2", "n4096/0", "n4096/1", "n4096/2"]
    assert slots[0].params == {"n": 512, "lr": cfg.train.lr, "weight_decay": cfg.train.weight_decay}
    assert slots[1].params == {"n": 512}  # the sampler fills in the searched values
    assert encode_trial_key({"n": 512}) == "n512"
    assert encode_trial_key({"n": 64, "weight_decay": 0.05, "lr": 3e-4}) == "n64-lr0.0003-wd0.05"


def test_a_claims_era_run_folder_with_claims_left_is_refused(finished_run, data_arg, tmp_path, capsys):
    """Workers of the version that claimed cells with files (claims/<job>.claim under claims/.lock)
    may still run on such a folder: refused in one line saying how to finish it. Without claims
    left (only the lock file) it resumes, and the lock file goes."""
    run = tmp_path / "old"
    shutil.copytree(finished_run, run)
    claim = run / "claims" / "n32" / "fold0-seed0.claim"
    claim.parent.mkdir(parents=True)
    claim.write_text('{"worker": "other-host:1:1", "device": "cpu"}')
    (run / "claims" / ".lock").touch()
    before = (run / "run.json").read_bytes()
    assert cli.main(sweep_argv(data_arg, run)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 claim(s) remain" in err and "git checkout cb7b66d" in err
    assert f"delete {run / 'claims'}" in err and (run / "run.json").read_bytes() == before  # nothing written
    claim.unlink()
    assert cli.main(sweep_argv(data_arg, run)) == 0
    assert not (run / "claims").exists()


def test_offline_fetch_says_how_to_import(tmp_path, monkeypatch):
    from tsflash.config import ExperimentConfig
    from tsflash.data import fetch
    from tsflash.sweep.source import load_data

    calls = []

    def offline(**kw):
        calls.append(kw)
        raise UserError("network error for https://data.binance.vision/...: Name or service not known (after 5 attempts)")

    monkeypatch.setattr(fetch, "fetch", offline)
    cfg = ExperimentConfig()
    cfg.data.start, cfg.data.end = "2024-01-01", "2024-01-31"
    with pytest.raises(UserError, match=r"could not fetch BTCUSDT 1m 2024-01-01..2024-01-31 .*offline\? "
                                        r"import a local folder instead: tsflash data import FOLDER$") as exc:
        load_data(cfg, str(tmp_path), default_seed=0)
    assert "\n" not in str(exc.value)
    assert calls and calls[0]["root"] == tmp_path and calls[0]["start"] == "2024-01-01"


def test_synthetic_data_has_the_configured_bar_count():
    from tsflash.config import ExperimentConfig
    from tsflash.sweep.source import load_data

    cfg = ExperimentConfig()
    cfg.data.start, cfg.data.end = "2024-01-01", "2024-01-03"
    bars, source = load_data(cfg, "synthetic:random-walk", default_seed=5)
    assert len(bars) == 3 * 1440 and source["source"] == "synthetic:random-walk:5" and source["seed"] == 5
    again, _ = load_data(cfg, "synthetic:random-walk:5", default_seed=0)
    assert np.array_equal(again.close, bars.close)


def test_a_new_run_that_fails_before_any_cell_leaves_no_folder(tmp_path, monkeypatch):
    from tsflash.data import fetch

    def offline(**kw):
        raise UserError("network error (after 5 attempts)")

    monkeypatch.setattr(fetch, "fetch", offline)
    store = tmp_path / "store"
    store.mkdir()
    out = tmp_path / "runs" / "run"
    opts = SweepOptions(lengths=[32, 64], data=str(store), out=out, device="cpu", preset="cpu",
                        start="2024-01-01", end="2024-03-31", precision=False, runs_root=tmp_path / "runs")
    with pytest.raises(UserError, match="offline\\? import a local folder instead"):
        run_sweep(opts)
    assert not out.exists()


def test_a_sweep_whose_cuts_miss_the_shortest_length_is_told_the_nesting_check_cannot_run():
    from tsflash.sweep.plan import SweepOptions, nesting_unmeasured, resolve_config

    def cfg(lengths, cuts):
        return resolve_config(SweepOptions(lengths=lengths, overrides={"eval": {"context_cuts": cuts}}), "cpu")[0]

    assert nesting_unmeasured(cfg([512, 4096, 32768], [512, 4096])) is None  # the default's cuts
    assert nesting_unmeasured(cfg([1024], [])) is None  # one length: nothing is nested
    assert nesting_unmeasured(cfg([1024, 8192], [512])) == (
        "the report's nesting check needs the shortest length in eval.context_cuts: N=1024 is not in [512], so it "
        "will say 'not measured' (add --set 'eval.context_cuts=[512, 1024]')")


def test_a_sweep_with_restarts_keeps_each_cells_validated_best_and_says_so(tmp_path):
    """train.restarts=2 through the command line: every model cell records its two restarts (seeds
    2s, 2s+1) and which one validation kept, and the report's setup table states the rule."""
    run = tmp_path / "restarts"
    argv = sweep_argv("synthetic:random-walk", run) + [
        "--lengths", "32", "--set", "splits.val_days=1", "--set", "train.eval_every=1", "--set", "train.patience=1",
        "--set", "train.restarts=2", "--set", "train.seeds=[0, 1]"]
    assert cli.main(argv) == 0
    cells = [json.loads(p.read_text()) for p in cell_markers(run) if "/n32/" in p.as_posix()]
    assert len(cells) == 4  # 2 folds x 2 seeds, each of two trainings
    for cell in cells:
        record = cell["cost"]["restarts"]
        assert record["seeds"] == [2 * cell["seed"], 2 * cell["seed"] + 1]
        assert record["best_val_loss"][record["kept"]] == min(record["best_val_loss"])
        assert cell["cost"]["best_val_loss"] == min(record["best_val_loss"])
    assert "validated best of 2 trainings" in (run / "report.md").read_text()


def test_a_runs_kept_kernel_decisions_are_read_by_key_the_first_recorded_winning(tmp_path):
    from tsflash.runfolder import RunFolder
    from tsflash.sweep.provenance import kept_kernel_choices

    folder = RunFolder(tmp_path / "run")
    assert kept_kernel_choices(folder) == {}  # no run.json yet: nothing to keep
    folder.root.mkdir()
    key = "cuda|0|torch.bfloat16|64|n32768|b4|h4"
    write_json(folder.run_json, {"kernel_choices": {f"a {key}": {"chosen": "cudnn"}, f"b {key}": {"chosen": "flash"},
                                                    "a cpu|0|torch.float32|16|n32|b4|h2": {"chosen": "flash"}}})
    assert kept_kernel_choices(folder) == {key: {"chosen": "cudnn"}, "cpu|0|torch.float32|16|n32|b4|h2": {"chosen": "flash"}}


def test_a_validation_only_sweep_logs_no_test_score_and_writes_no_report(tmp_path, capsys):
    """--validation-only (a recipe screen on BTC): each cell's progress line gives its validation
    loss and kept step, no line gives a test figure, the run completes without report.md, and
    `tsflash report` writes the report when asked."""
    run = tmp_path / "blind"
    argv = sweep_argv("synthetic:random-walk", run) + [
        "--lengths", "32", "--set", "splits.val_days=1", "--set", "train.eval_every=1", "--validation-only"]
    assert cli.main(argv) == 0
    log = (run / "sweep.log").read_text()
    assert "validation loss" in log and "at step" in log
    for test_figure in ("logloss", " acc ", "daily net Sharpe", "report:"):
        assert test_figure not in log
    assert not (run / "report.md").exists() and "complete; no report" in capsys.readouterr().out
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
    assert cli.main(["report", str(run)]) == 0 and (run / "report.md").exists()
