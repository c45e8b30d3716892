"""Amendments to a registered plan: AMENDMENT.md's JSON block applied over PLAN.json by every reader
(`amended_plan`), PLAN.json and its hash untouched; an amendment that is not to its plan, names a run
the plan lacks or is not JSON is refused in one line naming its file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab import plan_state as lab_plan
from lab.plan import main as plan_main
from tests.conftest import REPO
from tsflash.cli import main
from tsflash.config import config_from_dict
from tsflash.errors import UserError
from tsflash.report import registration
from tsflash.runfolder import write_json
from tsflash.sweep import preregister
from tsflash.sweep.plan import SweepOptions, resolve_config, run_hash

THIRD = REPO / "reports" / "third-edition"
NOT_RUN = ["patch4", "aa/patch4", "echo/patch4", "iid/patch4", "ladder", "regime/per-bar", "regime/patch4",
           "random-walk/per-bar", "random-walk/patch4"]
FIRST_STAGE = ["per-bar", "aa/per-bar", "echo/per-bar", "iid/per-bar"]
BRACKET = ["bracket-0.113/per-bar", "bracket-0.057/per-bar"]


def _third_edition(to: Path) -> Path:
    """The committed plan and its amendment, without any run: what the next device call starts from."""
    to.mkdir(parents=True)
    for name in ("PLAN.json", "PLAN.md", "AMENDMENT.md"):
        shutil.copy(THIRD / name, to / name)
    return to


def _complete(out: Path, run: str, plan: dict) -> None:
    """A run folder marked complete, as planned (its config and source), for the state readers."""
    name, _, arm = run.rpartition("/")
    control = next((c for c in plan["controls"] if c["name"] == name), None)
    resolved = (registration.control_arm(control, arm) if control else None) or \
        next(a for a in plan["arms"] if a["name"] == arm)
    cfg = config_from_dict(resolved["config"])
    folder = registration.run_dir_of(out, arm, control)
    write_json(folder / "config.json", cfg.to_dict())
    write_json(folder / "run.json", {"config_hash": run_hash(cfg), "status": "complete", "trials_per_length": 1,
                                     "data": control["source"] if control else plan["data"]})


@pytest.fixture(scope="module")
def third():
    """The committed plan as amended, resolved (the bracket's configs need torch, no GPU)."""
    return preregister.amended_plan(THIRD)


def test_the_committed_amendment_applies_to_the_committed_plan(third):
    registered = json.loads((THIRD / "PLAN.json").read_text())
    (block,) = registration.read_amendments(THIRD)
    assert (block["file"], block["amendment"], block["date"]) == ("AMENDMENT.md", 1, "2026-12-06")
    assert third["plan_hash"] == registered["plan_hash"] == "2983a47e5e3c"  # the registered hash stays
    assert [(st["stage"], st["runs"]) for st in third["order"]] == [("per-bar-answer", FIRST_STAGE),
                                                                     ("power-bracket", BRACKET)]
    first, bracket = third["order"]
    assert first["gpu_seconds"] == registered["order"][0]["gpu_seconds"]  # as registered
    controls = {c["name"]: c for c in third["controls"]}
    assert bracket["gpu_seconds"] == sum(controls[r.split("/")[0]]["gpu_seconds"] for r in BRACKET)
    assert 1.2 * 3600 < bracket["gpu_seconds"] < 1.6 * 3600  # AMENDMENT.md: "about 1.4 h expected"
    assert list(third["not_run"]) == NOT_RUN
    assert third["not_run"]["ladder"].endswith("the power bracket stands in for it")
    # the trial ledger enters only configurations that run: 13 registered, 10 as amended
    assert (registered["ledger"][0]["with_plan"], third["ledger"][0]["with_plan"]) == (13, 10)
    assert [e["arm"] for e in third["ledger_entries"]] == ["per-bar", "controls/aa/per-bar"]


def test_the_bracket_is_the_per_bar_arms_config_at_its_own_lengths_on_its_echo(third):
    """Resolved by `_arm`'s machinery: the registered arm again at N=512 and 32768 (the same machinery
    at the arm's own lengths gives back its registered hash), on the echo at the bracket's strength."""
    controls = {c["name"]: c for c in third["controls"]}
    per_bar = third["arms"][0]
    for name, strength, gain in (("bracket-0.113", 0.113, 0.033), ("bracket-0.057", 0.057, 0.0084)):
        c = controls[name]
        assert (c["source"], c["kind"], c["oracle_gain"]) == (f"synthetic:long-memory:1:strength={strength}",
                                                              "long-memory", gain)
        (own,) = c["arms"]
        assert own["name"] == "per-bar" and own["lengths"] == [512, 32768] and own["model_cells"] == 30
        assert own["config"] == per_bar["config"] | {"lengths": [512, 32768]}
        full = resolve_config(SweepOptions(lengths=[512, 32768], preset="full", start="2021-01-01", end="2025-06-30",
                                           overrides={"eval": {"seed_inference": "crossed"},
                                                      "train": {"short_fraction": 0.25, "ema_decay": 0.98,
                                                                "restarts": 4, "restart_screen": 400}}), "cuda")[0]
        assert own["config_hash"] == run_hash(full)
    again = json.loads(preregister.resolved_arm("per-bar", (), tuple(third["base_overrides"]), third["symbol"],
                                                 (512, 4096, 32768), third["data"], tuple(third["range"]), 1))
    assert (again["config_hash"], again["run_key"]) == (per_bar["config_hash"], per_bar["run_key"]) == \
        ("722795cd", "da662682f222")


def test_the_bracket_commands_are_the_amendments_own(third):
    """`--commands` (what the device script runs): the amended order only, the bracket's sweeps exactly
    as AMENDMENT.md's commands section gives them (the script adds --time-budget)."""
    lines = [line for line in (THIRD / "AMENDMENT.md").read_text().splitlines() if line.startswith("tsflash sweep")]
    out = Path("reports/third-edition")
    ordered = preregister.ordered_commands(third, out)
    assert [str(d.relative_to(out)) for _, d, _ in ordered] == [
        "per-bar", "controls/aa/per-bar", "controls/echo/per-bar", "controls/iid/per-bar",
        "controls/bracket-0.113/per-bar", "controls/bracket-0.057/per-bar"]
    assert [f"{command} --time-budget 400" for stage, _, command in ordered if stage == "power-bracket"] == lines
    assert len(lines) == 2
    # the registered runs' commands are PLAN.md's
    plan_md = (THIRD / "PLAN.md").read_text()
    assert all(f"{command} --time-budget 400" in plan_md for stage, _, command in ordered if stage != "power-bracket")


def test_next_check_and_commands_read_the_plan_as_amended(tmp_path, capsys):
    """From the committed plan and amendment with no run begun: --next names stage per-bar-answer's
    runs, then, those complete, the bracket's; --check names the amendment in its first line and lists
    the not-run runs last with their reasons; the time left leaves them out. PLAN.json is unchanged."""
    out = _third_edition(tmp_path / "third-edition")
    before = (out / "PLAN.json").read_bytes()
    assert plan_main(["--next", str(out)]) == 0
    assert capsys.readouterr().out == "per-bar controls/aa/per-bar controls/echo/per-bar controls/iid/per-bar\n"
    assert plan_main(["--check", str(out)]) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith(f"Plan 2983a47e5e3c (PLAN.json of {out}), amended 2026-12-06 (AMENDMENT.md): "
                            "0 of 6 planned runs complete, 9 not run in this edition; stages complete: 0 of 2; "
                            "next: stage per-bar-answer, runs per-bar controls/aa/per-bar")
    assert "PLAN.json and its amendments priced the amended order at 4.0 h" in first
    assert "| - | patch4 | patch4 | not run in this edition: 2.44 h of one H200 expected (3.06 h worst) |" in text
    assert ("| - | ladder | ladder | not run in this edition: 7.62 h of one H200 expected (8.85 h worst); the power "
            "bracket stands in for it |") in text
    assert text.index("| power-bracket | bracket-0.057/per-bar |") < text.index("| - | patch4 |")
    rows = lab_plan.plan_state(out)
    assert set(lab_plan.time_left(out, rows)) == {*FIRST_STAGE, *BRACKET}
    plan = preregister.amended_plan(out)
    for run in FIRST_STAGE:
        _complete(out, run, plan)
    assert lab_plan.next_runs(out) == ("power-bracket", ["controls/bracket-0.113/per-bar",
                                                            "controls/bracket-0.057/per-bar"])
    assert plan_main(["--check", str(out)]) == 0  # a bracket run as resolved: no departure
    _complete(out, BRACKET[0], plan)
    capsys.readouterr()
    assert main(["preregister", "--check", str(out / "controls" / "bracket-0.113" / "per-bar")]) == 0
    assert capsys.readouterr().out.startswith(
        "Pre-registered: plan 2983a47e5e3c (PLAN.json of this run's plan folder, amended 2026-12-06 (AMENDMENT.md)), "
        "arm per-bar; deviations from it: none.")
    assert (out / "PLAN.json").read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Small synthetic plans: every refusal, and amendments in sequence


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A plan of two arms, a null control and the A/A replicate, in two stages."""
    out = tmp_path_factory.mktemp("small") / "plan"
    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"),
                                  [("per-bar", []), ("patch16", ["model.patch=16"])],
                                  controls=[("iid", "synthetic:iid:0")], aa_seeds=[3, 4, 5],
                                  stages=[("first", ["per-bar", "aa/per-bar"])])
    preregister.write_plan(plan, out)
    return out


def _block(plan: dict, **changes) -> dict:
    """An amendment of `plan`: the per-bar arm's stage, then an echo at N=512 and 1024 on it; the rest not run."""
    block = {"amendment": 1, "date": "2026-12-06", "plan_hash": plan["plan_hash"],
             "order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar"]},
                       {"stage": "echo", "runs": ["echo/per-bar"]}],
             "add_controls": [{"name": "echo", "source": "synthetic:long-memory:1:strength=0.1", "arms": ["per-bar"],
                               "lengths": [512, 1024], "oracle_gain": 0.026, "expect": "found or missed"}],
             "not_run": {"patch16": "too dear", "aa/patch16": "too dear", "iid/per-bar": "not needed",
                         "iid/patch16": "not needed"},
             "ledger_removed": ["patch16", "aa/patch16"]}
    return block | changes


def _write(folder: Path, block: dict | str, name: str = "AMENDMENT.md") -> Path:
    body = block if isinstance(block, str) else json.dumps(block, indent=1)
    (folder / name).write_text(f"# Amendment\n\nWhy, in prose.\n\n```bash\ntsflash sweep ...\n```\n\n"
                               f"## Machine-read\n\n```json\n{body}\n```\n")
    return folder / name


@pytest.fixture
def plan_dir(small, tmp_path):
    out = tmp_path / "plan"
    out.mkdir()
    for name in ("PLAN.json", "PLAN.md"):
        shutil.copy(small / name, out / name)
    return out


def test_an_amended_small_plan_runs_its_order_and_its_added_control_at_its_own_lengths(plan_dir, capsys):
    plan = json.loads((plan_dir / "PLAN.json").read_text())
    _write(plan_dir, _block(plan))
    amended = preregister.amended_plan(plan_dir)
    assert [st["runs"] for st in amended["order"]] == [["per-bar", "aa/per-bar"], ["echo/per-bar"]]
    (echo,) = [c for c in amended["controls"] if c["name"] == "echo"]
    assert echo["arms"][0]["lengths"] == [512, 1024] and echo["amendment"] == "AMENDMENT.md"
    assert amended["order"][1]["gpu_seconds"] == echo["gpu_seconds"] == echo["arms"][0]["gpu_seconds"] > 0
    assert amended["order"][0]["gpu_seconds"] == plan["order"][0]["gpu_seconds"]
    assert amended["ledger"][0]["with_plan"] == plan["ledger"][0]["with_plan"] - 2  # patch16's two lengths
    assert plan_main(["--commands", str(plan_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(plan_dir / f) for f in
                                                       ("per-bar", "controls/aa/per-bar", "controls/echo/per-bar")]
    assert "--lengths 512,1024 " in lines[-1] and "--data synthetic:long-memory:1:strength=0.1 " in lines[-1]
    # the unresolved reading (no torch) gives the same names, folders and commands
    light = preregister.amended_plan(plan_dir, resolve=False)
    assert preregister.ordered_commands(light, plan_dir) == preregister.ordered_commands(amended, plan_dir)
    # a run the amendment does not run, yet ran, departs from the plan
    cfg = config_from_dict(plan["arms"][1]["config"])
    write_json(plan_dir / "patch16" / "config.json", cfg.to_dict())
    write_json(plan_dir / "patch16" / "run.json", {"config_hash": run_hash(cfg), "status": "complete",
                                                   "data": plan["data"], "trials_per_length": 1})
    assert main(["preregister", "--check", str(plan_dir / "patch16")]) == 1
    assert "run patch16: not run in this edition (AMENDMENT.md: too dear), yet it ran" in capsys.readouterr().out
    assert plan_main(["--check", str(plan_dir)]) == 1  # and so in the plan's table
    text = capsys.readouterr().out
    assert "| - | patch16 | patch16 | not run in this edition: too dear | 1 |" in text
    assert "- patch16: run patch16: not run in this edition (AMENDMENT.md: too dear), yet it ran" in text


def test_a_later_amendment_applies_over_the_earlier_and_check_names_both(plan_dir, capsys):
    plan = json.loads((plan_dir / "PLAN.json").read_text())
    _write(plan_dir, _block(plan))
    # the second orders iid/per-bar again (run after all) and takes the echo out
    _write(plan_dir, {"amendment": 2, "date": "2026-12-09", "plan_hash": plan["plan_hash"],
                      "order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar"]},
                                {"stage": "null", "runs": ["iid/per-bar"]}],
                      "not_run": {"echo/per-bar": "its strength is found elsewhere"}}, "AMENDMENT-2.md")
    amended = preregister.amended_plan(plan_dir)
    assert [a["file"] for a in registration.read_amendments(plan_dir)] == ["AMENDMENT.md", "AMENDMENT-2.md"]
    assert [st["stage"] for st in amended["order"]] == ["first", "null"]
    assert set(amended["not_run"]) == {"patch16", "aa/patch16", "iid/patch16", "echo/per-bar"}
    assert plan_main(["--check", str(plan_dir)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert ("amended 2026-12-06 (AMENDMENT.md) and 2026-12-09 (AMENDMENT-2.md): 0 of 3 planned runs complete, "
            "4 not run in this edition; stages complete: 0 of 2") in first


def _refused(plan_dir: Path, match: str, capsys) -> None:
    """Refused in one line naming the file, by the function and by --check (exit 2)."""
    with pytest.raises(UserError, match=match) as info:
        registration.read_amendments(plan_dir)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(plan_dir / "AMENDMENT"))
    assert plan_main(["--check", str(plan_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(plan_dir / "AMENDMENT") in err[0], err


@pytest.mark.parametrize("change, match", [
    ({"plan_hash": "deadbeef0000"}, r"AMENDMENT.md: plan_hash 'deadbeef0000' is not the plan's: PLAN.json beside it "
                                    r"is plan [0-9a-f]{12}$"),
    ({"order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar", "nope/per-bar"]}]},
     r"AMENDMENT.md: order, stage first, names run 'nope/per-bar', which is neither in plan [0-9a-f]{12} nor in its "
     r"add_controls \(runs: per-bar, patch16, iid/per-bar"),
    ({"not_run": {"patch32": "no such arm"}}, r"not_run names run 'patch32', which is neither in plan"),
    ({"ledger_removed": ["iid/per-bar"]}, r"ledger_removed names run 'iid/per-bar', which has no entry in the plan's "
                                          r"trial ledger lines \(per-bar, patch16, controls/aa/per-bar, "
                                          r"controls/aa/patch16\)"),
    ({"not_run": {"patch16": "too dear"}}, r"AMENDMENT.md: run 'iid/per-bar' is neither in the amended order nor in "
                                          r"not_run: an amendment says where every run goes"),
    ({"amendment": 2}, r"\"amendment\": 2, but the file is amendment 1"),
    ({"date": "6 Dec"}, r"\"date\" must be YYYY-MM-DD, got '6 Dec'"),
    ({"orders": []}, r"unknown key 'orders' in its JSON block \(known: amendment, date, plan_hash"),
    ({"add_controls": [{"name": "iid", "source": "synthetic:iid:2", "arms": ["per-bar"], "lengths": [512]}]},
     r"add_controls 'iid': the plan already has a control of that name \(iid, aa\)"),
    ({"add_controls": [{"name": "x", "source": "data", "arms": ["per-bar"], "lengths": [512]}]},
     r"add_controls 'x': source must be a synthetic market"),
    ({"add_controls": [{"name": "x", "source": "synthetic:iid:2", "arms": ["patch8"], "lengths": [512]}]},
     r"add_controls 'x': arms must name distinct arms of the plan \(per-bar, patch16\), got \['patch8'\]"),
    ({"order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar"]}, {"stage": "b", "runs": ["per-bar"]}]},
     r"order names run 'per-bar' twice"),
])
def test_an_amendment_that_does_not_fit_its_plan_is_refused_in_one_line(plan_dir, change, match, capsys):
    plan = json.loads((plan_dir / "PLAN.json").read_text())
    _write(plan_dir, _block(plan, **change))
    _refused(plan_dir, match, capsys)


def test_an_amendment_without_json_is_refused_in_one_line(plan_dir, capsys):
    _write(plan_dir, '{"amendment": 1, "date": "2026-12-06",, }')
    _refused(plan_dir, r"AMENDMENT.md: its ```json block is not JSON: Expecting property name enclosed in double "
                       r"quotes: line 1 column 39", capsys)
    (plan_dir / "AMENDMENT.md").write_text("# Amendment\n\nProse only.\n")
    _refused(plan_dir, r"AMENDMENT.md: no ```json block \(an amendment's machine-read part, its last section\)", capsys)
    _write(plan_dir, "[1, 2]")
    _refused(plan_dir, r"its ```json block must be an object \{...\}, got list", capsys)


def test_amendments_apply_in_order_and_none_is_skipped(plan_dir, capsys):
    plan = json.loads((plan_dir / "PLAN.json").read_text())
    _write(plan_dir, _block(plan))
    _write(plan_dir, _block(plan, amendment=3), "AMENDMENT-3.md")
    with pytest.raises(UserError, match=r"AMENDMENT-3.md: amendment 3 has no AMENDMENT-2.md before it$"):
        registration.read_amendments(plan_dir)
    (plan_dir / "AMENDMENT-3.md").rename(plan_dir / "AMENDMENT-b.md")
    with pytest.raises(UserError, match=r"AMENDMENT-b.md: an amendment's file is AMENDMENT.md, then AMENDMENT-2.md"):
        registration.read_amendments(plan_dir)
    (plan_dir / "AMENDMENT-b.md").unlink()
    (plan_dir / "AMENDMENT.md").unlink()
    assert registration.read_amendments(plan_dir) == [] and preregister.amended_plan(plan_dir) == plan


def test_a_report_of_an_arm_of_an_amended_plan_loads_neither_torch_nor_optuna(plan_dir):
    """The report's "pre-registered" line reads the plan as amended; only a run of an added control
    needs that control's config resolved (torch), so an arm's report stays light."""
    plan = json.loads((plan_dir / "PLAN.json").read_text())
    _write(plan_dir, _block(plan))
    cfg = config_from_dict(plan["arms"][0]["config"])
    write_json(plan_dir / "per-bar" / "config.json", cfg.to_dict())
    write_json(plan_dir / "per-bar" / "run.json", {"config_hash": run_hash(cfg), "status": "complete",
                                                   "data": plan["data"], "trials_per_length": 1})
    code = (f"import sys; from pathlib import Path; from tsflash.sweep.preregister import check_run; "
            f"run = Path({str(plan_dir / 'per-bar')!r}); print(check_run(run.parent / 'PLAN.json', run)[2]); "
            "bad = [m for m in ('torch', 'optuna') if m in sys.modules]; assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f"Pre-registered: plan {plan['plan_hash']} (PLAN.json of this run's plan folder, "
                                 "amended 2026-12-06 (AMENDMENT.md)), arm per-bar; deviations from it: none.")
