"""A plan's answer from its runs' reports (issue 33, deliverable 4): `tsflash preregister --summary`
reads only the complete stages, lists the rest as not run, copies every figure from the reports
(nothing recomputed), and reads each control against the rule the plan stated for it."""

from __future__ import annotations

import json
import shlex

import pytest

from lab import edition, edition_figures
from lab import plan_state as lab_plan
from lab.plan import main as plan_main
from lab.preregister import main as preregister_main
from tests.conftest import REPO
from tests.sweep.test_sweep import TINY
from tsflash.cli import main
from tsflash.report import registration
from tsflash.report.wording import DOES_NOT_FOLLOW, FOLLOWS
from tsflash.runfolder import CELL_SUFFIX, RunFolder
from tsflash.sweep import preregister
from tsflash.sweep.progress import format_seconds

# A tiny plan that runs in seconds on the CPU: the sweep tests' tiny design with two seeds, the
# context cut the nesting check needs and the linear probe.
TINY_PLAN = [*TINY, "train.seeds=[0,1]", "eval.context_cuts=[16]", "eval.probe=true"]


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    """The plan's first two stages run (the arm with its A/A replicate; the iid null), the regime
    control's stage and the ladder's not: what a device time cut short leaves."""
    out = tmp_path_factory.mktemp("edition") / "plan"
    argv = ["--lengths", "16,32", "--data", "synthetic:random-walk:0", "--aa-seeds", "2,3",
            "--control", "iid=synthetic:iid:0", "--control", "regime=synthetic:regime:0", "--ladder",
            "--stage", "first=per-bar,aa/per-bar", "--stage", "second=iid/per-bar", "--out", str(out)]
    for item in TINY_PLAN:
        argv += ["--set", item]
    assert preregister_main(argv) == 0
    plan = json.loads((out / registration.PLAN_JSON).read_text())
    for stage, _run_dir, command in preregister.ordered_commands(plan, out):
        if stage in ("first", "second"):
            assert main(shlex.split(command.replace("--device cuda", "--device cpu"))[1:]) == 0, command
    return out


def test_the_summary_reads_the_complete_stages_and_copies_every_figure(plan_dir, capsys):
    calls = plan_dir / lab_plan.CALLS_DIR  # two device calls' records, as lab/third_edition_h200.sh writes them
    calls.mkdir()
    for i, seconds in enumerate((540, 312)):
        (calls / f"2026-12-0{i + 6}T010000Z.json").write_text(json.dumps(
            {"started": f"2026-12-0{i + 6}T01:00:00Z", "seconds": seconds, "runs": ["per-bar"], "exit_codes": [124],
             "budget_s": 520, "limit_s": 570, "gpu": "NVIDIA H200"}))
    assert plan_main(["--check", str(plan_dir)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "; device calls so far: 2, 852 s of wall-clock (calls/); left: about " in first
    # how long a call must be to finish a fold of the next run: its seeds at the cost table's price per N
    folds = lab_plan.fold_seconds(plan_dir, "regime/per-bar")
    assert list(folds) == [16, 32] and all(v > 0 for v in folds.values()) and folds[32] >= folds[16]
    assert (f" A whole fold of regime/per-bar takes about {format_seconds(folds[32])} at N=32, "
            f"{format_seconds(folds[16])} at N=16 (its seeds at the longest cell the run trained") in first
    assert lab_plan.fold_seconds(plan_dir, "per-bar") == {}  # complete: nothing left to train
    assert lab_plan.fold_seconds(plan_dir, "ladder") == {}  # its script's replicates, not one sweep's folds
    assert plan_main(["--summary", str(plan_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 of 3 stages read; not run: regime/per-bar, ladder"
    s = json.loads((plan_dir / edition.SUMMARY_JSON).read_text())
    assert [st["complete"] for st in s["stages"]] == [True, True, False]
    assert s["not_run"] == ["regime/per-bar", "ladder"] and s["ladder"] == {"read": False, "state": "not started",
                                                                          "sentence": ""}
    (arm,) = s["arms"]
    assert arm["arm"] == "per-bar" and [r["n"] for r in arm["lengths"]] == [16, 32]
    # every figure is the report's own
    questions = json.loads((plan_dir / "per-bar" / "questions.json").read_text())
    results = json.loads((plan_dir / "per-bar" / "results.json").read_text())
    long = arm["lengths"][1]
    (comparison,) = [c for c in questions["forecast"]["runs"]["comparisons"]
                     if (c["series"], c["score"]) == ("n32", "log_loss")]
    assert long["question1"]["log_loss"] == {"estimate": comparison["estimate"], "ci": comparison["ci"],
                                             "p": comparison["p_holm"]}
    (test,) = questions["forecast"]["nesting"]["tests"]
    assert set(long["nesting"]) == {"log_loss", "move", "direction"}  # both parts measured
    assert long["nesting"]["move"]["estimate"] == test["cut_minus_shortest"]["move"]["estimate"]
    assert long["lost_skill"] == test["lost_skill"]
    probe = results["probe"]["rows"][1]["vs_shortest"]["log_loss"]
    row = results["probe"]["rows"][1]
    assert long["probe"] == {"estimate": probe["mean"], "ci": probe["ci"], "p": probe["p"], "p_holm": row["p_holm"],
                             "reads_more": row["reads_more"]}
    assert arm["gate"]["dsr"] == results["verdict"]["dsr"] and arm["gate"]["n_trials"] == results["verdict"]["n_trials"]
    assert arm["gate"]["pbo_null"] == [questions["trading"]["pbo_null"]["q05"], questions["trading"]["pbo_null"]["q95"]]
    assert arm["lengths"][0]["question1"] == {"log_loss": None, "direction": None}  # the reference
    assert arm["sentence"] == questions["forecast"]["sentence"] and arm["cell_seconds"] > 0
    # the controls, each against its rule
    controls = {c["run"]: c for c in s["controls"]}
    assert set(controls) == {"aa/per-bar", "iid/per-bar"}
    iid = controls["iid/per-bar"]
    assert iid["rule"] == edition.CONTROL_RULES["iid"]
    assert iid["met"] == (iid["question1"] != "better" and not iid["trading_passed"])
    aa = controls["aa/per-bar"]
    assert aa["aa_differ"][1] > 0 and aa["met"] == aa["aa_calibrated"]
    # a control's question 1 per N, as its report wrote it: the answer figure's rows
    iid_questions = json.loads((plan_dir / "controls" / "iid" / "per-bar" / "questions.json").read_text())
    (iid_long,) = [c for c in iid_questions["forecast"]["runs"]["comparisons"]
                   if (c["series"], c["score"]) == ("n32", "direction")]
    assert [r["n"] for r in iid["lengths"]] == [16, 32] and iid["lengths"][0]["question1"]["direction"] is None
    assert iid["lengths"][1]["question1"]["direction"] == {"estimate": iid_long["estimate"], "ci": iid_long["ci"],
                                                          "p": iid_long["p_holm"]}
    md = (plan_dir / edition.SUMMARY_MD).read_text()
    for png in (edition.SUMMARY_PNG, edition.ANSWER_PNG):
        assert (plan_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in md
    # the README's figure: the market beside its iid control; not the A/A replicate
    assert [name for name, _ in edition_figures.answer_series(s)] == ["per-bar (market, 4 seeds)", "iid control (per-bar)"]
    assert "**Not run** (their stage is not complete): regime/per-bar, ladder." in md
    assert "| N=32 | 3 (3..3) |" in md and "Not run: the strength ladder's stage is not complete (not started)." in md
    assert f"| iid | per-bar | {iid['question1']} |" in md and "- A/A (aa/per-bar): " in md
    assert s["device_calls"] == {"calls": 2, "seconds": 852, "gpu_seconds": 852, "gpus": ["NVIDIA H200"]}
    assert "Device calls recorded in `calls/`: 2, 0.24 h of their scripts' wall-clock (NVIDIA H200;" in md
    # the answer in brief, a paragraph per question for the README, from the same figures
    brief = md.split("## The answer in brief\n\n")[1].split("\n\n")[0].splitlines()
    assert [line.split("**")[1] for line in brief] == ["Forecasting", "Trading", "What \"no\" rules out",
                                                        "Controls", "Cost"]
    pooled = arm["pooled"]  # the plan's primary reading: the arm's seeds and its A/A replicate's together
    aa_pooled = json.loads((plan_dir / "controls" / "aa" / "per-bar" / "results.json").read_text())["aa"]["pooled"]
    (both,) = [c for c in aa_pooled["comparisons"] if (c["series"], c["score"]) == ("n32", "log_loss")]
    assert pooled["seeds_per_fold"] == 4 and pooled["question1"] == aa_pooled["answer"]
    assert pooled["lengths"][1]["question1"]["log_loss"] == {"estimate": both["estimate"], "ci": both["ci"],
                                                             "p": both["p_holm"]}
    assert "pooled" not in controls["aa/per-bar"]
    assert "**Question 1 over both seed sets** (4 seeds a fold, the plan's primary reading)" in md
    assert [rows for _, rows in edition_figures.answer_series(s)][0] == pooled["lengths"]
    assert brief[0].startswith(f"1. **Forecasting**: per-bar, over 4 seeds a fold: {pooled['question1']} "
                               f"(smallest Holm p: N=32 on the ")
    assert f"; the arm's own seeds alone: {arm['question1']}" in brief[0]
    assert f"nesting check {arm['nesting']} (N=32 cut to the shortest N " in brief[0]
    assert "not measured: the strength ladder's stage is not complete." in brief[2]
    assert "as expected" in brief[3] or "not as expected" in brief[3]
    assert brief[4].startswith("5. **Cost**: 0.2 h of device calls (2)")


def test_the_plan_states_how_each_control_is_read(plan_dir):
    plan = json.loads((plan_dir / registration.PLAN_JSON).read_text())
    assert {c["name"]: c["rule"] for c in plan["controls"]} == {
        "iid": edition.CONTROL_RULES["iid"], "regime": edition.CONTROL_RULES["regime"],
        "aa": edition.CONTROL_RULES["aa"]}
    assert f"| {edition.CONTROL_RULES['regime']} |" in (plan_dir / registration.PLAN_MD).read_text()


def test_a_complete_ladder_stage_is_read_before_the_arms(tmp_path, capsys):
    """A plan whose ladder stage is complete and whose arm's is not: the summary reads what "no"
    rules out from the ladder's summary.json in the report's own words, and says the arm is not run."""
    from tsflash.report import wording
    from tsflash.runfolder import write_json

    out = tmp_path / "plan"
    assert preregister_main(["--lengths", "512,4096", "--data", "synthetic:random-walk:0", "--ladder",
                 "--stage", "power=ladder", "--out", str(out)]) == 0
    curve = {"effect": 0.0123, "ci": [0.005, 0.04], "how": "within the ladder"}
    write_json(out / registration.LADDER_DIR / "summary.json", {
        "complete": True, "replicates_done": 27, "replicates_planned": 27, "curve_80": {"log_loss": curve},
        "rungs": [{"strength": 0.05, "oracle_gain": 0.002}, {"strength": 0.2, "oracle_gain": 0.03}]})
    assert plan_main(["--summary", str(out)]) == 0
    s = json.loads((out / edition.SUMMARY_JSON).read_text())
    assert s["ladder"] == {"read": True, "state": "complete", "sentence": wording.ladder_sentence(curve, 0.03, 0.002)}
    assert s["not_run"] == ["per-bar"] and s["arms"] == [] and not (out / edition.SUMMARY_PNG).exists()
    brief = (out / edition.SUMMARY_MD).read_text().split("## The answer in brief\n\n")[1].split("\n\n")[0]
    assert "1. **Forecasting**: not read: no arm's stage is complete." in brief
    assert f"3. **What \"no\" rules out**: {s['ladder']['sentence']}" in brief


def test_what_a_no_rules_out_is_the_primary_tests_power_at_the_design_that_ran(plan_dir, tmp_path):
    """The arm's primary reading (over both seed sets) states what its test detects with 80 % power at
    Holm's first step, as the A/A report gives it (`crossed_power_80`), before the ladder's words; a
    report written before that figure existed is named, with how to rebuild it."""
    import shutil

    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out)
    results = out / "controls" / "aa" / "per-bar" / "results.json"
    aa = json.loads(results.read_text())
    pooled = aa["aa"]["pooled"]
    assert pooled["crossed_power_80"] == {} and pooled["crossed_alpha"] is None  # the tiny plan's test is the fold t
    pooled |= {"crossed_power_80": {"log_loss": {"n32": 0.0061}, "direction": {"n32": 0.0042}}, "crossed_alpha": 0.0125}
    results.write_text(json.dumps(aa))
    s = edition.edition_summary(out)
    (arm,) = s["arms"]
    assert edition.primary_rules_out(arm) == {"detectable": pooled["crossed_power_80"], "alpha": 0.0125, "predates": False,
                                              "n_folds": pooled["n_folds"], "seeds_per_fold": 4,
                                              "comparisons": len(pooled["comparisons"])}
    words = edition.rules_out_words(arm)
    assert words == (f"per-bar: at the design that ran ({pooled['n_folds']} folds, 4 seeds a fold; Holm over "
                     f"{len(pooled['comparisons'])}), the primary test detects with 80 % power 0.0061 nats per bar on "
                     "the log-loss and 0.0042 on the direction score. Smaller effects are not ruled out.")
    brief = edition.answer_brief(s)
    assert brief[2].startswith(f"3. **What \"no\" rules out**: {words} Not measured: the strength ladder's stage")
    md = edition.render_summary(s)
    assert "| per-bar: comparison | score | detectable with 80 % power at 0.0125 (nats per bar) |" in md
    assert "| N=32 minus the shortest N | log-loss | 0.0061 |" in md
    del pooled["crossed_power_80"]  # an A/A report written before the figure
    results.write_text(json.dumps(aa))
    arm = edition.edition_summary(out)["arms"][0]
    assert edition.rules_out_words(arm) == ("per-bar: the report of controls/aa/per-bar predates the primary test's "
                                            "power; rebuild it (`tsflash report <plan>/controls/aa/per-bar`), then the "
                                            "summary.")


def test_the_summary_of_an_amended_plan_names_the_amendment_and_the_runs_not_run(plan_dir, tmp_path, capsys):
    """An amendment that keeps the two stages run and takes the rest out of the edition: the summary
    reads both stages, names the amendment, and lists each run not run with its reason; a power
    bracket's rung (an amendment's control with an oracle gain) reads found or missed, apart from
    the controls' rules."""
    import shutil

    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out)
    plan = json.loads((out / registration.PLAN_JSON).read_text())
    block = {"amendment": 1, "date": "2026-12-06", "plan_hash": plan["plan_hash"],
             "order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar"]}, {"stage": "second", "runs": ["iid/per-bar"]}],
             "not_run": {"regime/per-bar": "5 h of one H200", "ladder": "8 h of one H200; a bracket stands in"}}
    (out / "AMENDMENT.md").write_text(f"# Amendment 1\n\n## Machine-read\n\n```json\n{json.dumps(block)}\n```\n")
    assert plan_main(["--summary", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "2 of 2 stages read; not run in this edition: regime/per-bar, ladder"
    s = json.loads((out / edition.SUMMARY_JSON).read_text())
    assert s["not_run"] == [] and s["not_run_in_edition"] == block["not_run"]
    assert [a["file"] for a in s["amendments"]] == ["AMENDMENT.md"] and s["amended"] == "amended 2026-12-06 (AMENDMENT.md)"
    assert s["ladder"]["state"] == "not run in this edition: 8 h of one H200; a bracket stands in"
    md = (out / edition.SUMMARY_MD).read_text()
    assert "**Amended**: [AMENDMENT.md](AMENDMENT.md) of 2026-12-06." in md
    assert ("**Not run in this edition** (by the amendment), each with its reason:\n\n- regime/per-bar: 5 h of one "
            "H200\n- ladder: 8 h of one H200; a bracket stands in\n") in md
    assert ("3. **What \"no\" rules out**: not measured: the strength ladder is not run in this edition: 8 h of one "
            "H200; a bracket stands in.") in md
    # a bracket's rung: the iid run read as if it were one (its reading is the report's own)
    iid = next(c for c in s["controls"] if c["control"] == "iid")
    rung = iid | {"control": "bracket-0.1", "oracle_gain": 0.026, "met": iid["question1"] == "better"}
    text = edition.render_summary(s | {"controls": [*s["controls"], rung]})
    found = "found" if rung["met"] else "missed"
    assert (f"Power bracket: bracket-0.1 (per-bar, oracle gain 0.026 nats per moved bar) {found}. One run a strength "
            "says found or missed at this design; it is not a detection rate.") in text
    assert text.count("bracket-0.1 (per-bar") == 2  # in the brief's item 3 and its section, not among the controls' rules
    assert f"| bracket-0.1 | per-bar | {iid['question1']} " in text and f"| {found} |" in text


@pytest.mark.parametrize("kind, reading, met", [
    ("long-memory", {"question1": "better"}, True),
    ("long-memory", {"question1": "no better"}, False),
    ("long-memory", {"question1": ""}, None),
    ("regime", {"information_order": FOLLOWS}, True),
    ("regime", {"information_order": DOES_NOT_FOLLOW}, False),
    ("regime", {"information_order": ""}, None),  # no ranking: fewer than three lengths
    ("iid", {"question1": "no better", "trading_passed": False}, True),
    ("iid", {"question1": "better", "trading_passed": False}, False),
    ("random-walk", {"question1": "worse", "trading_passed": True}, False),
    ("random-walk", {"question1": "no better", "trading_passed": None}, None),
    ("aa", {"aa_calibrated": True}, True),
    ("aa", {"aa_calibrated": False}, False),
    ("aa", {"aa_calibrated": None}, None),
])
def test_each_control_rule_reads_met_not_met_or_no_reading(kind, reading, met):
    assert edition.control_met(kind, reading) is met


def test_no_summary_without_a_plan_or_before_a_stage_is_complete(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/ here: reading a plan needs no bar store
    assert plan_main(["--summary", str(tmp_path / "nowhere")]) == 2
    assert "--summary" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()
    out = tmp_path / "plan"
    assert main(["preregister", "--lengths", "16,32", "--data", "synthetic:random-walk:0", "--out", str(out)]) == 0
    assert plan_main(["--check", str(out)]) == 0
    capsys.readouterr()
    assert plan_main(["--summary", str(out)]) == 2
    assert "no stage of plan" in capsys.readouterr().err
    assert not (out / edition.SUMMARY_MD).exists() and not (out / edition.SUMMARY_JSON).exists()
    assert main(["preregister", "--lengths", "16", "--out", str(tmp_path / "x")]) == 2  # the default store: none here
    assert "argument --data: bar store folder not found: data" in capsys.readouterr().err


def test_a_fold_is_priced_at_the_longest_cell_the_run_trained_lost_cells_too(plan_dir, tmp_path, capsys):
    """A cell trained on a device whose per-bar file stayed there (its fold not scored) is not saved, so a
    sweep's cost model does not learn from it; the fold's price does: it ran on the card that trains the run.
    A saved cell's summary is not counted twice."""
    import shutil

    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out)
    before = lab_plan.fold_seconds(out, "regime/per-bar")
    folder = RunFolder(out / "controls" / "regime" / "per-bar")
    stem = folder.cell_stem("n32", 0, 0)
    stem.parent.mkdir(parents=True)
    lost = 1000.0
    assert 0 < before[32] < 3 * lost  # the cost table's price, below the lost cell's
    (stem.parent / f"{stem.name}{CELL_SUFFIX}").write_text(json.dumps(
        {"kind": "model", "key": "n32", "n": 32, "fold": 0, "seed": 0, "seconds": lost}))
    assert lab_plan.lost_cell_seconds(folder) == {32: [lost]}
    seeds = len(json.loads((out / registration.PLAN_JSON).read_text())["arms"][0]["seeds"])
    after = lab_plan.fold_seconds(out, "regime/per-bar")
    assert after == {16: before[16], 32: seeds * lost}  # N=16 keeps its price: no cell of it was trained
    assert plan_main(["--check", str(out)]) == 0
    assert (f" A whole fold of regime/per-bar takes about {format_seconds(seeds * lost)} at N=32, "
            f"{format_seconds(before[16])} at N=16 (its seeds at the longest cell the run trained at that N, saved or "
            "lost, on the card that trained it;") in capsys.readouterr().out.splitlines()[0]
    assert lab_plan.lost_cell_seconds(RunFolder(out / "per-bar")) == {}  # a complete run: every cell saved


def test_the_plans_state_piped_into_head_stops_quietly(plan_dir):
    """`python -m lab.plan --check PLAN | head -1`: exit 141 (128 + SIGPIPE) and no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "lab.plan", "--check", str(plan_dir)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the script has written a line: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err
