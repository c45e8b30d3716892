"""Pre-registration (issue 33, deliverable 1): a plan resolves each arm's config as the sweep on a GPU
would, is written once, states the reading rules in the report's own words, and a run's departures
from it are listed, by `tsflash preregister --check` and in the run's report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lab import plan_state as lab_plan
from lab import power_ladder
from lab.plan import main as plan_main
from lab.preregister import main as preregister_main
from tsflash.cli import main
from tsflash.config import config_from_dict
from tsflash.errors import UserError
from tsflash.report import build_report, registration, wording
from tsflash.runfolder import RunFolder, write_json
from tsflash.sweep import preregister
from tsflash.sweep.plan import SweepOptions, resolve_config, run_hash

ARMS = [("per-bar", []), ("patch16", ["model.patch=16"])]


@pytest.fixture(scope="module")
def plan():
    opts = SweepOptions(lengths=[512, 4096], preset="full", overrides={"train": {"ema_decay": 0.995}})
    return preregister.build_plan(opts, ARMS, base=("train.ema_decay=0.995",), note="A test plan.")


def _run_of(plan, out, arm: str, **changes):
    """A run folder as the sweep leaves it for one arm (config.json, run.json), with `changes` to its config."""
    cfg = config_from_dict(next(a for a in plan["arms"] if a["name"] == arm)["config"])
    for key, value in changes.items():
        section, name = key.split(".")
        setattr(getattr(cfg, section), name, value)
    run = out / arm
    write_json(run / "config.json", cfg.to_dict())
    write_json(run / "run.json", {"config_hash": run_hash(cfg), "status": "complete", "data": plan["data"],
                                  "trials_per_length": 1})
    return run


def test_each_arm_is_resolved_as_the_gpu_sweep_would_resolve_it(plan):
    per_bar, patch = plan["arms"]
    full = resolve_config(SweepOptions(lengths=[512, 4096], preset="full",
                                       overrides={"train": {"ema_decay": 0.995}}), "cuda")[0]
    assert per_bar["config_hash"] == run_hash(full) and per_bar["config"] == json.loads(json.dumps(full.to_dict()))
    assert patch["config"]["model"]["patch"] == 16 and patch["config_hash"] != per_bar["config_hash"]
    assert per_bar["seeds"] == full.train.seeds and per_bar["folds"] == full.splits.n_folds
    assert per_bar["model_cells"] == 2 * full.splits.n_folds * len(full.train.seeds)
    assert 0 < per_bar["gpu_seconds"] < per_bar["gpu_seconds_worst"]
    assert "decay 0.995" in per_bar["recipe"]
    # the trial ledger's BTC period, with the plan's four configurations added
    btc = next(row for row in plan["ledger"] if row["period"].startswith("BTCUSDT"))
    assert btc["with_plan"] == btc["now"] + 4


def test_the_plan_states_the_reports_own_sentences(plan):
    leads = [o["sentence"] for o in plan["outcomes"]]
    for lead in (*wording.RUN_ANSWER_LEADS.values(), wording.NESTING_FAILS, wording.QUESTION2_LEADS["none passes"]):
        assert any(lead in s for s in leads), lead
    assert plan["primary"]["alpha"] == 0.05 and plan["primary"]["test"] == ["fold"]
    # the default preset's probe is on in both arms, read by the report's rule
    assert plan["probe"] == {"arms": ["per-bar", "patch16"], "rule": wording.PROBE_RULE}


def test_a_plan_is_written_once(plan, tmp_path):
    plan_json, plan_md = preregister.write_plan(plan, tmp_path)
    text = plan_md.read_text()
    assert plan["plan_hash"] in text and "patch16" in text and "`model.patch=16`" in text
    assert f"**Linear information probe** (`eval.probe`, per N): on in per-bar, patch16. {wording.PROBE_RULE}" in text
    assert f"--out {tmp_path / 'patch16'}" in text and "--set train.ema_decay=0.995 --set model.patch=16" in text
    before = plan_json.read_text()
    with pytest.raises(UserError, match="written once"):
        preregister.write_plan(plan | {"note": "changed after the fact"}, tmp_path)
    assert plan_json.read_text() == before


def test_a_run_as_planned_has_no_departure_and_each_change_is_named(plan, tmp_path):
    preregister.write_plan(plan, tmp_path)
    same = _run_of(plan, tmp_path, "per-bar")
    assert registration.deviations(plan, same) == ("per-bar", [])
    changed = _run_of(plan, tmp_path, "patch16", **{"train.steps": 1200})
    arm, found = registration.deviations(plan, changed)
    assert arm == "patch16" and found == [f"train.steps: planned {plan['arms'][1]['config']['train']['steps']}, ran 1200"]
    stray = _run_of(plan, tmp_path, "per-bar")
    stray = stray.rename(tmp_path / "other")
    write_json(stray / "run.json", {"config_hash": "00000000", "status": "complete"})
    arm, found = registration.deviations(plan, stray)
    assert arm is None and "none of the plan's arms" in found[0]


def test_check_exits_one_on_a_departure_and_the_report_lists_it(plan, tmp_path, capsys):
    from tests.report.test_report import make_run

    preregister.write_plan(plan, tmp_path)
    assert main(["preregister", "--check", str(_run_of(plan, tmp_path, "per-bar"))]) == 0
    assert "deviations from it: none." in capsys.readouterr().out
    # a report-ready run folder (the report tests' fixture) inside the plan's folder: another design
    run = make_run(tmp_path, drift=0.0)
    assert main(["preregister", "--check", str(run)]) == 1
    assert "none of the plan's arms" in capsys.readouterr().out
    md, _ = build_report(run)
    assert f"Pre-registered: plan {plan['plan_hash']}" in md.read_text()
    # the report still loads neither torch nor optuna for it
    code = (f"import sys; from tsflash.report import build_report; build_report({str(run)!r}); "
            "bad = [m for m in ('torch', 'optuna') if m in sys.modules]; assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_command_writes_a_plan_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["preregister", "--lengths", "512,4096", "--arm", "per-bar=", "--arm", "patch16=model.patch=16",
                 "--out", str(out)]) == 0
    assert (out / "PLAN.json").exists() and (out / "PLAN.md").exists()
    capsys.readouterr()
    assert main(["preregister", "--lengths", "512,4096", "--out", str(out)]) == 2
    assert "written once" in capsys.readouterr().err
    assert main(["preregister", "--arm", "bad name=model.patch=16", "--out", str(tmp_path / "x")]) == 2
    assert main(["preregister", "--arm", "a=model.nonsense=1", "--out", str(tmp_path / "y")]) == 2
    assert main(["preregister", "--arm", "a=", "--arm", "a=model.patch=16", "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert "--arm" in err and "must differ" in err and len(err.strip().splitlines()) == 3
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()
    assert main(["preregister", "--check", str(tmp_path / "nowhere" / "run")]) == 2


def test_controls_run_every_arm_on_their_market_and_are_checked_against_it(tmp_path, capsys):
    """--control: each arm's config on a synthetic market, its expected answer and cost in the plan,
    its commands into OUT/controls/<control>/<arm>, and its runs checked against the control's source."""
    opts = SweepOptions(lengths=[512, 4096], preset="full")
    source = "synthetic:long-memory:0:strength=0.2"
    plan = preregister.build_plan(opts, ARMS, controls=[("echo", source), ("null", "synthetic:iid:0")])
    echo = plan["controls"][0]
    assert (echo["name"], echo["kind"], echo["expect"]) == ("echo", "long-memory", wording.CONTROL_EXPECTATIONS["long-memory"])
    assert echo["gpu_seconds"] == sum(a["gpu_seconds"] for a in plan["arms"])
    _, md = preregister.write_plan(plan, tmp_path)
    text = md.read_text()
    assert f"| echo | `{source}` |" in text and "GPU time, all arms and controls:" in text
    assert f"--data {source}" in text and f"--out {tmp_path / 'controls' / 'echo' / 'patch16'}" in text
    run = _run_of(plan, tmp_path / "controls" / "echo", "per-bar")
    write_json(run / "run.json", {"config_hash": plan["arms"][0]["config_hash"], "status": "complete", "data": source,
                                  "trials_per_length": 1})
    assert registration.plan_for(run) == tmp_path / "PLAN.json"
    assert registration.deviations(plan, run) == ("per-bar", [])
    write_json(run / "run.json", {"config_hash": plan["arms"][0]["config_hash"], "status": "complete",
                                  "data": "synthetic:iid:0", "trials_per_length": 1})
    assert registration.deviations(plan, run)[1] == [f"data: planned {source!r}, ran 'synthetic:iid:0'"]
    with pytest.raises(UserError, match="--control names must differ"):
        preregister.build_plan(opts, ARMS, controls=[("a", source), ("a", source)])
    assert main(["preregister", "--control", "echo=data/store", "--out", str(tmp_path / "x")]) == 2
    assert "argument --control: expects NAME=synthetic:KIND" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_commands_lists_every_planned_run_with_the_command_the_plan_shows(tmp_path, capsys):
    """--commands PLAN: each planned run's folder and its sweep command, tab-separated, in the plan's
    order (the arms, then each control's arms), the same commands as PLAN.md's; no plan: one line, exit 2."""
    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), ARMS,
                                  controls=[("null", "synthetic:iid:0")])
    preregister.write_plan(plan, tmp_path)
    assert plan_main(["--commands", str(tmp_path)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [folder for folder, _ in lines] == [str(tmp_path / "per-bar"), str(tmp_path / "patch16"),
                                               str(tmp_path / "controls" / "null" / "per-bar"),
                                               str(tmp_path / "controls" / "null" / "patch16")]
    md = (tmp_path / "PLAN.md").read_text()
    assert all(f"{command} --time-budget 400" in md and f"--out {folder}" in command for folder, command in lines)
    assert plan_main(["--commands", str(tmp_path / "nowhere")]) == 2
    assert "no PLAN.json there" in capsys.readouterr().err
    laddered = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), ARMS, ladder=power_ladder.plan_entry)
    preregister.write_plan(laddered, tmp_path / "laddered")
    assert plan_main(["--commands", str(tmp_path / "laddered")]) == 0
    folder, command = capsys.readouterr().out.splitlines()[-1].split("\t")  # the ladder last, as in PLAN.md
    assert folder == str(tmp_path / "laddered" / "ladder") and command.startswith("python lab/power_ladder.py")
    assert f"\n{command}\n" in (tmp_path / "laddered" / "PLAN.md").read_text()


def test_a_control_with_settings_of_its_own_is_resolved_costed_run_and_checked_with_them(tmp_path, capsys):
    """--control-set: a control on more folds of the same size over a longer synthetic market (the
    slow regime, which five folds cannot resolve even for the linear probe): each arm's config is
    resolved again with the control's settings (its hash, folds, range and cost), its command gives
    them (the range as --start/--end), and a run of it departs from the plan only where it differs
    from the control's own config."""
    opts = SweepOptions(lengths=[512, 4096], preset="full", start="2021-01-01", end="2025-06-30")
    source = "synthetic:regime:0:tilt=0.0375"
    plan = preregister.build_plan(opts, ARMS, controls=[("regime", source), ("null", "synthetic:iid:0")],
                                  control_sets=[("regime", "splits.n_folds=10"), ("regime", "data.start=2018-07-06")])
    regime, null = plan["controls"]
    assert "arms" not in null and null["gpu_seconds"] == sum(a["gpu_seconds"] for a in plan["arms"])
    per_bar = registration.control_arm(regime, "per-bar")
    assert (per_bar["folds"], per_bar["range"]) == (10, ["2018-07-06", "2025-06-30"])
    assert per_bar["config_hash"] != plan["arms"][0]["config_hash"]
    assert regime["gpu_seconds"] > 1.5 * null["gpu_seconds"]  # twice the folds
    command = preregister.sweep_command(plan, plan["arms"][0], tmp_path, regime)
    assert "--start 2018-07-06 --end 2025-06-30" in command and command.endswith("--set splits.n_folds=10")
    assert "data.start" not in command
    _, md = preregister.write_plan(plan, tmp_path)
    assert f"| regime | `{source}` | `splits.n_folds=10` `data.start=2018-07-06` |" in md.read_text()
    # the run of the control as its command would make it: no departure; with five folds: one
    cfg = resolve_config(SweepOptions(lengths=[512, 4096], preset="full", start="2018-07-06", end="2025-06-30",
                                      overrides={"splits": {"n_folds": 10}}), "cuda")[0]
    assert run_hash(cfg) == per_bar["config_hash"]
    run = tmp_path / "controls" / "regime" / "per-bar"
    write_json(run / "config.json", cfg.to_dict())
    write_json(run / "run.json", {"config_hash": run_hash(cfg), "status": "complete", "data": source,
                                  "trials_per_length": 1})
    assert registration.deviations(plan, run) == ("per-bar", [])
    cfg.splits.n_folds = 5
    write_json(run / "config.json", cfg.to_dict())
    assert registration.deviations(plan, run)[1] == ["splits.n_folds: planned 10, ran 5"]
    with pytest.raises(UserError, match="--control-set echo: no --control of that name"):
        preregister.build_plan(opts, ARMS, controls=[("regime", source)], control_sets=[("echo", "splits.n_folds=10")])
    assert main(["preregister", "--control-set", "regime", "--out", str(tmp_path / "x")]) == 2
    assert "argument --control-set: expects NAME=KEY=VALUE" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_the_ladder_states_what_no_rules_out_at_the_plans_rule(tmp_path, capsys):
    """--ladder: the strength ladder at the plan's shared overrides (the arms' training rule), its
    command beside the arms', and the sentence each of its outcomes will produce (the ladder's own)."""
    out = tmp_path / "plan"
    assert preregister_main(["--lengths", "512,4096,32768", "--set", "train.restarts=4", "--ladder", "--out", str(out)]) == 0
    plan = json.loads((out / "PLAN.json").read_text())
    command = plan["ladder"]["command"]
    assert command.startswith("python lab/power_ladder.py") and "--lengths 512,32768" in command
    assert "--set train.restarts=4" in command and "--set train.restarts=4" in plan["ladder"]["cost"]
    text = (out / "PLAN.md").read_text()
    assert wording.LADDER_RULE in text and f"{command} --runs {out / 'ladder'}" in text
    leads = [o["sentence"] for o in plan["outcomes"]]
    assert all(any(lead.split("{effect}")[0] in s for s in leads) for lead in wording.LADDER_LEADS.values())
    # without --ladder the plan has no ladder section
    assert main(["preregister", "--lengths", "512,4096", "--out", str(tmp_path / "plain")]) == 0
    assert "ladder" not in json.loads((tmp_path / "plain" / "PLAN.json").read_text())
    # the package's command has no ladder (a study of the lab): one line, nothing written
    capsys.readouterr()
    assert main(["preregister", "--lengths", "512,4096", "--ladder", "--out", str(tmp_path / "pkg")]) == 2
    assert capsys.readouterr().err == ("tsflash: error: preregister --ladder: the strength ladder is a study of the lab: "
                                       "run `python -m lab.preregister` with the same options in a checkout\n")
    assert not (tmp_path / "pkg").exists()
    assert preregister_main(["--lengths", "512,4096", "--trials", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "tsflash preregister: error: argument --trials" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_the_ladder_sentence_says_where_the_80_percent_point_lies():
    within = {"effect": 0.0123, "ci": [0.005, 0.04], "how": "within the ladder"}
    assert wording.ladder_sentence(within) == ("A far-context effect of at least 0.012 nats per moved bar would have "
                                               "been found with 80 % probability (95 % interval 0.005 to 0.04).")
    beyond = {"effect": 0.8, "ci": [0.12, 15.0], "how": "beyond the strongest rung"}
    assert wording.ladder_sentence(beyond, strongest=0.104, weakest=0.001).startswith(
        "Not even the strongest planted far-context effect (0.1 nats per moved bar)")
    below = {"effect": 0.0003, "ci": [0.0001, 0.001], "how": "at most the weakest rung"}
    assert "down to 0.001 nats" in wording.ladder_sentence(below, strongest=0.104, weakest=0.001)
    assert "not measured" in wording.ladder_sentence(None)


def test_the_aa_replicate_is_every_arm_on_the_plans_bars_with_other_seeds(tmp_path, capsys):
    """--aa-seeds (issue 33, deliverable 3: the A/A comparison on BTC): a control named aa that runs
    every arm's config on the plan's own bars with the given seeds, costed like the arms (the seeds
    change no cost), its command the arm's with --set train.seeds, its run checked against it; seeds
    shared with an arm, or a --control named aa beside it, are refused in one line."""
    out, bars = tmp_path / "plan", tmp_path / "bars"
    bars.mkdir()  # the store is not read: a plan resolves configs only
    assert main(["preregister", "--lengths", "512,4096", "--data", str(bars), "--aa-seeds", "3,4,5",
                 "--out", str(out)]) == 0
    plan = json.loads((out / "PLAN.json").read_text())
    (aa,) = plan["controls"]
    assert (aa["name"], aa["kind"], aa["source"]) == ("aa", "aa", str(bars))
    assert aa["expect"] == wording.CONTROL_EXPECTATIONS["aa"]
    own = registration.control_arm(aa, "per-bar")
    assert own["config"]["train"]["seeds"] == [3, 4, 5] and plan["arms"][0]["seeds"] == [0, 1, 2]
    assert aa["gpu_seconds"] == pytest.approx(plan["arms"][0]["gpu_seconds"])
    command = preregister.sweep_command(plan, plan["arms"][0], out, aa)
    assert f"--data {bars}" in command and command.endswith("--set 'train.seeds=[3, 4, 5]'")
    assert f"--out {out / 'controls' / 'aa' / 'per-bar'}" in command and command in (out / "PLAN.md").read_text()
    # its run as the command makes it: no departure
    cfg = config_from_dict(own["config"])
    run = out / "controls" / "aa" / "per-bar"
    write_json(run / "config.json", cfg.to_dict())
    write_json(run / "run.json", {"config_hash": run_hash(cfg), "status": "complete", "data": str(bars),
                                  "trials_per_length": 1})
    assert registration.deviations(plan, run) == ("per-bar", [])
    capsys.readouterr()
    assert main(["preregister", "--lengths", "512", "--aa-seeds", "2,3,4", "--out", str(tmp_path / "x")]) == 2
    assert "--aa-seeds must differ from every arm's seeds: per-bar trains seeds 0, 1, 2, --aa-seeds repeats 2" \
        in capsys.readouterr().err
    assert main(["preregister", "--lengths", "512", "--aa-seeds", "3,3", "--out", str(tmp_path / "x")]) == 2
    assert "argument --aa-seeds: expects distinct non-negative integers" in capsys.readouterr().err
    assert main(["preregister", "--lengths", "512", "--aa-seeds", "3,4,5", "--control", "aa=synthetic:iid:0",
                 "--out", str(tmp_path / "x")]) == 2
    assert "--aa-seeds is the control aa" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_stages_fix_the_order_the_runs_go_in_and_what_a_plan_cut_short_says(tmp_path, capsys):
    """--stage (issue 33, deliverable 1, where device time is scarce): the runs go stage by stage in the
    order the plan states, each stage with its H200 time (the ladder's by its own cost plan); --next
    names the next stage's runs not complete, --commands lists them in that order, --check counts the
    stages complete; a stage that names no run left for it is refused in one line, nothing written."""
    out = tmp_path / "plan"
    assert preregister_main(["--lengths", "512,4096", "--arm", "per-bar=", "--arm", "patch16=model.patch=16",
                 "--control", "iid=synthetic:iid:0", "--ladder", "--stage", "first=per-bar,iid/per-bar",
                 "--stage", "power=ladder", "--out", str(out)]) == 0
    plan = json.loads((out / "PLAN.json").read_text())
    first, power, rest = plan["order"]
    assert [(st["stage"], st["runs"]) for st in plan["order"]] == [
        ("first", ["per-bar", "iid/per-bar"]), ("power", ["ladder"]), ("rest", ["patch16", "iid/patch16"])]
    assert first["gpu_seconds"] == 2 * plan["arms"][0]["gpu_seconds"]  # the iid null costs the arm again
    assert power["gpu_seconds"] == plan["ladder"]["gpu_seconds"] > first["gpu_seconds"]
    assert plan["ladder"]["replicates"] == 27 and rest["gpu_seconds_worst"] > rest["gpu_seconds"]
    md = (out / "PLAN.md").read_text()
    assert wording.ORDER_RULE in md and "| first | per-bar, iid/per-bar |" in md and "# stage power" in md
    capsys.readouterr()
    assert plan_main(["--commands", str(out)]) == 0
    folders = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert folders == [str(out / f) for f in ("per-bar", "controls/iid/per-bar", "ladder", "patch16", "controls/iid/patch16")]
    assert plan_main(["--next", str(out)]) == 0
    assert capsys.readouterr().out == "per-bar controls/iid/per-bar\n"
    _run_of(plan, out, "per-bar")  # complete
    assert lab_plan.next_runs(out) == ("first", ["controls/iid/per-bar"])
    run = _run_of(plan, out / "controls" / "iid", "per-bar")
    write_json(run / "run.json", {"config_hash": plan["arms"][0]["config_hash"], "status": "running",
                                  "data": "synthetic:iid:0", "trials_per_length": 1})
    assert lab_plan.next_runs(out) == ("first", ["controls/iid/per-bar"])  # begun is not complete
    write_json(run / "run.json", {"config_hash": plan["arms"][0]["config_hash"], "status": "complete",
                                  "data": "synthetic:iid:0", "trials_per_length": 1})
    assert lab_plan.next_runs(out) == ("power", ["ladder"])
    plan_main(["--check", str(out)])
    text = capsys.readouterr().out
    assert "2 of 5 planned runs complete; stages complete: 1 of 3 (first); next: stage power, runs ladder" in text
    assert text.index("| first | iid/per-bar |") < text.index("| power | ladder |") < text.index("| rest | patch16 |")
    # without stages: one stage, every run in the plan's order
    plain = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), ARMS)
    assert [(st["stage"], st["runs"]) for st in plain["order"]] == [("all", ["per-bar", "patch16"])]
    with pytest.raises(UserError, match="--stage late: 'per-bar' names no planned run left for it"):
        preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), ARMS,
                               stages=[("early", ["*"]), ("late", ["per-bar"])])
    for bad in ("first", "first=", "bad name=per-bar"):
        assert main(["preregister", "--stage", bad, "--out", str(tmp_path / "x")]) == 2
        assert "argument --stage: expects NAME=RUN[,RUN...]" in capsys.readouterr().err
    assert main(["preregister", "--stage", "a=echo/*", "--out", str(tmp_path / "x")]) == 2
    assert "--stage a: 'echo/*' names no planned run" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert plan_main(["--next", str(tmp_path / "nowhere")]) == 2


def test_the_plan_gives_the_ledger_lines_its_runs_will_be_counted_by(tmp_path):
    """PLAN.md's TOML lines, pasted into the period of the plan's bars, make each arm's run count the
    period's trials with the plan's configurations (the plan's "with this plan" figure), and the A/A
    replicate's runs count them as not new."""
    import tomllib

    import numpy as np

    from tsflash.stats.gate import TRIALS_FILE, TrialLedger

    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096, 32768], preset="full"), ARMS, aa_seeds=[3, 4, 5])
    _, md = preregister.write_plan(plan, tmp_path / "plan")
    block = md.read_text().split("```toml\n")[1].split("```")[0]
    trial = [line.rstrip(",") for line in block.splitlines() if "# not_counted" not in line]
    skipped = [line.split("},")[0] + "}" for line in block.splitlines() if "# not_counted" in line]
    assert len(trial) == 6 and len(skipped) == 2
    ledger = TrialLedger.read(TRIALS_FILE)
    period = dict(ledger.periods[0])
    added = tomllib.loads("a = [" + ",".join(trial) + "]\nb = [" + ",".join(skipped) + "]")
    period["trial"] = [*period["trial"], *added["a"]]
    period["not_counted"] = [*period.get("not_counted", []), *added["b"]]
    grown = TrialLedger((period,), TRIALS_FILE)
    days = np.arange(np.datetime64(period["first_day"]), np.datetime64(period["last_day"]) + 1)
    (row,) = plan["ledger"]
    for arm in [*plan["arms"], *plan["controls"][0]["arms"]]:  # the arms, then the A/A replicate's
        count = grown.count_for(period["fingerprint"], days, arm["config_hash"], own=3)
        assert count.n_trials == row["with_plan"] == row["now"] + 6, arm["name"]  # 7 + 6 before the third edition's


def test_an_unfinished_runs_state_counts_cells_whose_files_stayed_behind_apart(tmp_path):
    """A cell with its summary but neither its per-bar file nor its fold's scores (a device's state
    archive left the file behind) is trained again: not saved, and said so."""
    folder = RunFolder(tmp_path / "run")
    for seed, npz in ((0, True), (1, False)):
        stem = folder.cell_stem("n16", 0, seed)
        stem.parent.mkdir(parents=True, exist_ok=True)
        folder.cell_marker("n16", 0, seed).write_text("{}")
        if npz:
            folder.cell_npz(stem).write_bytes(b"")
    assert lab_plan._cells_state(folder, 4) == (
        "1 of 4 cells saved (1 more trained but lost: their per-bar files stayed on the device before their fold "
        "was scored; trained again)")
    folder.cell_npz(folder.cell_stem("n16", 0, 1)).write_bytes(b"")
    assert lab_plan._cells_state(folder, 4) == "2 of 4 cells saved"


def test_check_prices_what_is_left_at_todays_table_and_the_runs_saved_cells(tmp_path, capsys):
    """--check says how much device time the runs not complete still need, priced as a sweep would
    price them now: a plan just written at today's table needs what it says; a run's saved cell counts
    no more, and its measured seconds against its price scale the rest of that run's GPU work (a sweep
    reads the machine's speed so); a complete run needs nothing."""
    from tsflash.sweep.progress import CostModel, format_seconds, fresh_works, model_work, n_params, prior_rates

    out = tmp_path / "plan"
    opts = SweepOptions(lengths=[512, 4096], preset="full")
    plan = preregister.build_plan(opts, [("per-bar", [])], aa_seeds=[3, 4, 5])
    preregister.write_plan(plan, out)
    arm, aa = plan["arms"][0], plan["controls"][0]["arms"][0]
    left = lab_plan.time_left(out, lab_plan.plan_state(out))
    assert set(left) == {"per-bar", "aa/per-bar"}
    expected, worst = (sum(v[i] for v in left.values()) for i in (0, 1))
    assert expected == pytest.approx(arm["gpu_seconds"] + aa["gpu_seconds"], abs=1.0)
    assert worst == pytest.approx(arm["gpu_seconds_worst"] + aa["gpu_seconds_worst"], abs=1.0)
    plan_main(["--check", str(out)])
    assert (f"left: about {format_seconds(expected)} of one H200 expected ({format_seconds(worst)} if every model cell "
            f"runs its most steps), {format_seconds(expected)} of it stage all's") in capsys.readouterr().out

    cfg = config_from_dict(arm["config"])
    cost = CostModel(prior_rates("cuda"))
    price = cost.seconds(model_work(cfg, 512, n_params(cfg)))
    baselines = sum(cost.seconds(w) for w in fresh_works(cfg) if w.kind == "baseline")
    run = _run_of(plan, out, "per-bar")  # the arm begun: one N=512 cell saved
    write_json(run / "run.json", {"config_hash": arm["config_hash"], "status": "running", "data": plan["data"],
                                  "trials_per_length": 1})
    folder = RunFolder(run)
    folder.cell_stem("n512", 0, 0).parent.mkdir(parents=True)
    folder.cell_npz(folder.cell_stem("n512", 0, 0)).write_bytes(b"")
    for speed in (1.0, 2.0):
        write_json(folder.cell_marker("n512", 0, 0), {"key": "n512", "n": 512, "fold": 0, "seed": 0,
                                                      "seconds": speed * price, "cost": {}})
        begun, _ = lab_plan.time_left(out, lab_plan.plan_state(out))["per-bar"]
        # (PLAN.json's seconds are whole: up to half a second off, doubled at twice the speed)
        assert begun == pytest.approx(baselines + speed * (arm["gpu_seconds"] - baselines - price), abs=2.0)
    write_json(run / "run.json", {"config_hash": arm["config_hash"], "status": "complete", "data": plan["data"],
                                  "trials_per_length": 1})
    assert set(lab_plan.time_left(out, lab_plan.plan_state(out))) == {"aa/per-bar"}


def test_the_ladders_time_left_is_its_replicates_not_done_at_its_scripts_price(tmp_path):
    out = tmp_path / "plan"
    plan = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), [("per-bar", [])], ladder=power_ladder.plan_entry)
    preregister.write_plan(plan, out)
    _run_of(plan, out, "per-bar")  # the arm complete: what is left is the ladder's
    left = lab_plan.time_left(out, lab_plan.plan_state(out))
    assert left == {"ladder": (plan["ladder"]["gpu_seconds"], plan["ladder"]["gpu_seconds_worst"])}
    fresh, fresh_worst = left["ladder"]
    write_json(out / registration.LADDER_DIR / "summary.json", {"complete": False, "replicates_done": 9,
                                                                "replicates_planned": 27, "rungs": []})
    left = lab_plan.time_left(out, lab_plan.plan_state(out))["ladder"]
    assert left == pytest.approx((fresh * 2 / 3, fresh_worst * 2 / 3))
