"""lab/carry_state.py: a device call's state is what a resume and the ladder's summary read,
no more, and a carry over the device's limit is refused before the call with the old state kept."""

from __future__ import annotations

import json
import subprocess
import tarfile

import pytest

from lab import power_ladder
from tests.conftest import load_experiment
from tsflash.runfolder import write_json
from tsflash.sweep import preregister
from tsflash.sweep.plan import SweepOptions

carry = load_experiment("carry_state")


def _run(root, status: str, config: dict):
    """A run folder with a sweep's kinds of files: summaries, per-bar files, checkpoints, scores, figures."""
    write_json(root / "run.json", {"status": status})
    write_json(root / "config.json", config)
    for name in ("data.json", "results.json", "cells/n512/fold0-seed0.cell.json"):
        write_json(root / name, {})
    for name in ("optuna.db", "cells/n512/fold0-seed0.npz", "checkpoints/n512/last.pt", "scores/n512/fold0.npz",
                 "forecasts/n512.npz", "figures/cost.png", "report.html"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * 100)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "code.py").write_text("print()\n")
    subprocess.run(["git", "add", "code.py"], cwd=tmp_path, check=True)
    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), [("per-bar", [])],
                                 ladder=power_ladder.plan_entry)
    out = tmp_path / "reports" / "third-edition"
    preregister.write_plan(plan, out)
    config = plan["arms"][0]["config"]
    _run(out / "per-bar", "running", config)
    _run(out / "ladder" / "strength-0.02" / "rep00" / "long-memory", "complete", config)
    _run(out / "ladder" / "iid" / "rep00" / "iid", "running", config)
    write_json(out / "ladder" / "summary.json", {"complete": False, "replicates_done": 1, "replicates_planned": 27,
                                                 "rungs": []})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_state_holds_what_a_resume_and_the_ladders_summary_read(repo, capsys):
    assert carry.main(["reports/third-edition"]) == 0  # the plan's next runs: its one stage, the arm and the ladder
    printed = capsys.readouterr().out
    assert "files of per-bar, ladder" in printed and "of 64 MiB (checkout without reports/ 0.0 MiB" in printed
    with tarfile.open(repo / ".carry" / "state-third.tar") as tar:
        names = set(tar.getnames())
    plan = "reports/third-edition"
    done, running = f"{plan}/ladder/strength-0.02/rep00/long-memory", f"{plan}/ladder/iid/rep00/iid"
    assert {f"{plan}/PLAN.json", f"{plan}/PLAN.md", f"{plan}/ladder/summary.json"} <= names
    for run in (f"{plan}/per-bar", running):  # a resume's files, not per-bar files, checkpoints, figures, HTML
        assert {f"{run}/{n}" for n in ("run.json", "optuna.db", "cells/n512/fold0-seed0.cell.json",
                                       "scores/n512/fold0.npz", "forecasts/n512.npz", "results.json")} <= names
        assert not {f"{run}/{n}" for n in ("cells/n512/fold0-seed0.npz", "checkpoints/n512/last.pt",
                                           "figures/cost.png", "report.html")} & names
    # a finished replicate: what skipping and reading it needs
    assert {n.removeprefix(done + "/") for n in names if n.startswith(done)} == {
        "run.json", "config.json", "data.json", "cells/n512/fold0-seed0.cell.json", "forecasts/n512.npz"}


def test_a_carry_over_the_limit_or_a_run_not_planned_is_refused_and_the_old_state_kept(repo, capsys):
    assert carry.main(["reports/third-edition", "per-bar"]) == 0
    before = (repo / ".carry" / "state-third.tar").read_bytes()
    capsys.readouterr()
    assert carry.main(["reports/third-edition", "ladder", "--limit-mib", "0.001"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the carry would be") and "over the device's 0.001 MiB" in err and len(err.splitlines()) == 1
    assert (repo / ".carry" / "state-third.tar").read_bytes() == before
    assert sorted(p.name for p in (repo / ".carry").iterdir()) == ["state-third.tar"]  # no partial left
    assert carry.main(["reports/third-edition", "perbar"]) == 2
    assert "run perbar is not in reports/third-edition/PLAN.json" in capsys.readouterr().err
    assert carry.main(["reports/third-edition", "--out", "state.tar"]) == 2
    assert "--out must lie in .carry/" in capsys.readouterr().err
    out = repo / "reports" / "third-edition"
    write_json(out / "per-bar" / "run.json", {"status": "complete"})
    write_json(out / "ladder" / "summary.json", {"complete": True, "replicates_done": 27, "replicates_planned": 27,
                                                 "rungs": []})
    assert carry.main(["reports/third-edition"]) == 2
    assert "every stage of the plan is complete" in capsys.readouterr().err


def test_the_state_carries_the_plans_amendments_and_names_the_runs_as_amended(repo, capsys):
    """The device reads the plan as amended: AMENDMENT.md travels with PLAN.json, and the runs named
    are those of the amended plan (the ladder taken out of the edition is refused)."""
    out = repo / "reports" / "third-edition"
    plan = json.loads((out / "PLAN.json").read_text())
    block = {"amendment": 1, "date": "2026-12-06", "plan_hash": plan["plan_hash"],
             "order": [{"stage": "all", "runs": ["per-bar"]}], "not_run": {"ladder": "too dear"}}
    (out / "AMENDMENT.md").write_text(f"# Amendment 1\n\n```json\n{json.dumps(block)}\n```\n")
    assert carry.main(["reports/third-edition"]) == 0
    assert "files of per-bar," in capsys.readouterr().out  # the next runs as amended: the arm alone
    with tarfile.open(repo / ".carry" / "state-third.tar") as tar:
        names = set(tar.getnames())
    assert "reports/third-edition/AMENDMENT.md" in names and not any("/ladder/" in n for n in names)
    assert carry.main(["reports/third-edition", "ladder"]) == 2
    assert capsys.readouterr().err == ("error: run ladder is not in reports/third-edition/PLAN.json as amended "
                                       "(AMENDMENT.md); its runs: per-bar\n")
