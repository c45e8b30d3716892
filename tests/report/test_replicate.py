"""The A/A reading of a pre-registered replicate (issue 33, deliverable 3; `tsflash.report.diagnostics.replicate`):
the replicate's seeds against the arm's at every N and score by question 1's primary test, its
false-positive rate measured on simulated A/A pairs, and the reading in the replicate's report."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from lab import plan_state as lab_plan
from lab.plan import main as plan_main
from tests.report.test_report import LENGTHS, make_run
from tsflash.cli import main
from tsflash.report import build_report, registration, wording
from tsflash.report.compute import LOSS_FILE, SCORES, write_table
from tsflash.report.diagnostics.power import crossed_power_sentence, with_power
from tsflash.report.diagnostics.replicate import aa_sentence, compare, pooled_sentence, pooled_table, replicate_check
from tsflash.report.rundata import load_run
from tsflash.report.runlevel import run_question, runs_results
from tsflash.runfolder import write_json
from tsflash.scoring.metrics import DAILY_SUMS
from tsflash.stats.runs import (
    CrossedComponents,
    RunNoise,
    binomial_interval,
    crossed_power,
    runs_from_table,
    simulate_runs,
)
from tsflash.sweep import preregister
from tsflash.sweep.plan import SweepOptions

KEYS = {n: f"n{n}" for n in LENGTHS}
NOISE = RunNoise()


def pair_tables(rng, difference: float = 0.0, n_folds: int = 5, replicate_seeds=(3, 4, 5),
                noise: RunNoise = NOISE) -> tuple[dict, dict]:
    """The loss tables of an arm's run (seeds 0-2) and its replicate (`replicate_seeds`) at every N
    of LENGTHS, on the same folds and days (their market shared), the replicate `difference` per bar
    above the run; both scores alike."""
    parts = ([], [])
    for n in LENGTHS:
        runs = simulate_runs(rng, difference=difference, noise=noise, n_folds=n_folds, n_seeds=3, n_days=30,
                             bars_per_day=96)
        for part, r, seeds in zip(parts, runs, ((0, 1, 2), replicate_seeds), strict=True):
            part.append((f"n{n}", np.array([f"seed{seeds[s]}" for s in r.seed], dtype=object), r.fold,
                         np.datetime64("2024-03-02") + r.day, r.loss, r.count))
    tables = []
    for part in parts:
        table = {k: [] for k in ("series", "member", "fold", "day", *DAILY_SUMS)}
        for series, member, fold, day, loss, count in part:
            table["series"].append(np.full(len(fold), series, dtype=object))
            table["member"].append(member)
            table["fold"].append(fold)
            table["day"].append(day)
            for k in DAILY_SUMS:
                table[k].append(np.zeros(len(fold)))
            for loss_col, count_col in SCORES.values():
                table[loss_col][-1] = loss
                table[count_col][-1] = count
        tables.append({k: np.concatenate(v) for k, v in table.items()})
    return tables[0], tables[1]


def test_each_n_and_score_is_compared_and_a_real_difference_reads_as_not_calibrated():
    run, rep = pair_tables(np.random.default_rng(0))
    check = compare(run, rep, KEYS, KEYS, arm="per-bar")
    assert check.available and len(check.rows) == len(LENGTHS) * len(SCORES)
    assert check.run_seeds == (0, 1, 2) and check.replicate_seeds == (3, 4, 5)
    assert all(r.p_holm >= r.result.p for r in check.rows)
    text = aa_sentence(check)
    assert text.startswith("A/A replicate of arm per-bar (seeds 3, 4, 5 against the arm's 0, 1, 2")
    assert f"{check.differ} of {len(check.rows)} comparisons say \"differ\" at alpha 0.05" in text
    # question 1 over both seed sets: six seeds per fold at every N (the plan's primary reading)
    pooled = check.pooled
    assert pooled.available and (pooled.seeds_per_fold, pooled.n_folds) == (6, 5)
    assert all((c.result.n_runs_a, c.result.n_runs_b) == (30, 30) for c in pooled.result.comparisons)
    assert pooled_sentence(check).startswith(f"{wording.POOLED_LEAD} (the arm's seeds and the replicate's, 6 seeds "
                                             "per fold): Longer context forecasts ")
    assert "against N=32" in pooled_sentence(check) or "from N=32" in pooled_sentence(check)
    # a replicate that trains differently is a difference the A/A must flag
    run, rep = pair_tables(np.random.default_rng(1), difference=0.05)
    bad = compare(run, rep, KEYS, KEYS, arm="per-bar")
    assert bad.differ == len(bad.rows) and not bad.calibrated and bad.tail < 1e-6
    assert aa_sentence(bad).endswith("so the primary test is not calibrated on these bars at this design, and a "
                                     "\"differ\" in question 1 of the arm's run is read with that.")
    # the crossed test (eval.seed_inference = "crossed") on the same runs: never narrower than the fold t
    crossed = compare(run, rep, KEYS, KEYS, inference="crossed", arm="per-bar")
    assert all(c.result.se >= f.result.se - 1e-12 for c, f in zip(crossed.rows, bad.rows, strict=True))
    assert "by question 1's primary test (the crossed test)" in aa_sentence(crossed)


def test_the_crossed_primary_test_says_what_a_no_rules_out_at_the_design_that_ran():
    """Question 1 over both seed sets by the crossed test: per longer N and score, the difference it
    detects with 80 % power at 5 folds x 6 seeds, at Holm's first step over the family's comparisons,
    from that comparison's paired table; the fold t gives none (its own figure is `power_80`)."""
    run, rep = pair_tables(np.random.default_rng(0), noise=RunNoise(init=0.002))
    pooled = compare(run, rep, KEYS, KEYS, inference="crossed", arm="per-bar").pooled
    m = len(pooled.result.comparisons)
    assert m == (len(LENGTHS) - 1) * len(SCORES) and pooled.crossed_alpha == pytest.approx(0.05 / m)
    assert set(pooled.crossed_power) == set(SCORES)
    assert all(set(by_key) == {KEYS[n] for n in LENGTHS[1:]} for by_key in pooled.crossed_power.values())
    table = pooled_table(run, rep, KEYS, KEYS)
    short, long = (runs_from_table(table, KEYS[n], loss=SCORES["log_loss"][0], count=SCORES["log_loss"][1])
                   for n in (LENGTHS[0], LENGTHS[-1]))
    c = CrossedComponents.from_runs(short, long)
    assert pooled.crossed_power["log_loss"][KEYS[LENGTHS[-1]]] == crossed_power(c, 5, 6, alpha=0.05 / m).detectable
    # at Holm's first step a "no" rules out less than the same test at the unadjusted level
    assert pooled.crossed_power["log_loss"][KEYS[LENGTHS[-1]]] > crossed_power(c, 5, 6).detectable
    # the arm's own run alone: its own design, three seeds a fold, its own table's components
    own = with_power(run_question(run, [KEYS[n] for n in LENGTHS], "crossed"))
    c3 = CrossedComponents.from_runs(*(runs_from_table(run, KEYS[n], loss=SCORES["log_loss"][0],
                                                       count=SCORES["log_loss"][1]) for n in (LENGTHS[0], LENGTHS[-1])))
    assert own.crossed_power["log_loss"][KEYS[LENGTHS[-1]]] == crossed_power(c3, 5, 3, alpha=0.05 / m).detectable
    words = crossed_power_sentence(pooled, wording.label)
    assert words.startswith("What a \"no\" rules out: at this design (5 folds, 6 seeds a fold), the crossed test "
                            "detects with 80 % power a true difference per bar (nats) of ")
    big = pooled.crossed_power["log_loss"][KEYS[LENGTHS[-1]]]
    assert f" and {big:.2g} at N={LENGTHS[-1]} on the log-loss; " in words
    assert f"It is two-sided at {0.05 / m:.3g}, Holm's first step over the {m} comparisons" in words
    js = runs_results(pooled)
    assert js["crossed_power_80"] == pooled.crossed_power and js["crossed_alpha"] == pooled.crossed_alpha
    # the fold t: no crossed figure, no sentence
    fold = compare(run, rep, KEYS, KEYS, arm="per-bar").pooled
    assert fold.crossed_power == {} and fold.crossed_alpha is None and crossed_power_sentence(fold, wording.label) == ""


def test_the_primary_tests_aa_rate_is_measured_within_its_level():
    """Disjoint seeds, no true difference, seeds' initial weights shared by their folds: the fold t
    and the crossed test each say "differ" in about 5 % of comparisons (measured on 150 pairs)."""
    rng = np.random.default_rng(7)
    noise = RunNoise(init=0.002)  # a seed's own effect: what makes the fold t too eager on disjoint seeds
    counts = {"fold": [0, 0], "crossed": [0, 0]}
    for _ in range(150):
        run, rep = pair_tables(rng, noise=noise)
        for inference, c in counts.items():
            check = compare(run, rep, {32: "n32"}, {32: "n32"}, inference=inference)
            c[0] += check.differ
            c[1] += len(check.rows)
    lo, hi = binomial_interval(*counts["crossed"])
    assert lo <= 0.05 <= hi, counts
    fold_rate = counts["fold"][0] / counts["fold"][1]
    assert fold_rate > counts["crossed"][0] / counts["crossed"][1]  # the fold t ignores the seeds' own effect


def test_a_replicate_that_repeats_the_arms_seeds_or_lacks_a_length_is_no_reading():
    run, rep = pair_tables(np.random.default_rng(0), replicate_seeds=(2, 3, 4))
    check = compare(run, rep, KEYS, KEYS, arm="per-bar")
    assert not check.available and check.reason == "the replicate repeats the arm's seeds [2]: not disjoint runs"
    assert aa_sentence(check) == ("A/A replicate of arm per-bar: no reading yet: the replicate repeats the arm's "
                                  "seeds [2]: not disjoint runs.")
    assert not compare(run, rep, {32: "n32"}, {64: "n64"}).available


@pytest.fixture(scope="module")
def aa_plan():
    opts = SweepOptions(lengths=[512, 4096], preset="full")
    return preregister.build_plan(opts, [("per-bar", [])], aa_seeds=[3, 4, 5])


def _report_ready(tmp_path, where, table):
    """make_run's report-ready folder moved to `where`, with `table` as its per-day loss sums."""
    run = make_run(tmp_path, drift=0.0)
    where.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run, where)
    write_table(table, where / LOSS_FILE)
    return where


def test_the_replicates_report_reads_it_against_the_arms_run(aa_plan, tmp_path, capsys):
    out = tmp_path / "plan"
    preregister.write_plan(aa_plan, out)
    run, rep = pair_tables(np.random.default_rng(3), n_folds=2)
    replicate = _report_ready(tmp_path, out / "controls" / "aa" / "per-bar", rep)
    md, _ = build_report(replicate)
    assert ("A/A replicate of arm per-bar: no reading yet: the arm's own run (per-bar, beside the plan) has no "
            "finished cell yet.") in md.read_text()
    write_json(out / "per-bar" / "run.json", {"status": "running"})  # begun, nothing saved: still no reading
    assert "has no finished cell yet" in build_report(replicate)[0].read_text()
    shutil.rmtree(out / "per-bar")
    _report_ready(tmp_path, out / "per-bar", run)
    md, html = build_report(replicate)
    text = md.read_text()
    assert "**A/A replicate of arm per-bar (seeds 3, 4, 5 against the arm's 0, 1, 2" in text
    assert "| N=32 | log-loss |" in text and "A/A replicate of arm per-bar" in html.read_text()
    saved = json.loads((replicate / "results.json").read_text())["aa"]
    assert saved["comparisons"] == len(LENGTHS) * len(SCORES) and saved["run_seeds"] == [0, 1, 2]
    # `tsflash preregister --check` of the replicate prints the reading after its departures (make_run's
    # config is not the plan's: exit 1)
    capsys.readouterr()
    assert main(["preregister", "--check", str(replicate)]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"Pre-registered: plan {aa_plan['plan_hash']}") and printed[1] == aa_sentence(
        replicate_check(load_run(replicate)))
    assert "**Over both seed sets (the arm's seeds and the replicate's, 6 seeds per fold): " in text
    assert saved["pooled"]["seeds_per_fold"] == 6 and saved["pooled"]["answer"] in ("better", "no better", "worse")
    # the arm's own report has no A/A reading: it is no replicate
    assert "A/A replicate" not in build_report(out / "per-bar")[0].read_text()


def test_check_of_the_plans_folder_lists_every_planned_run(aa_plan, tmp_path, capsys):
    """`tsflash preregister --check OUT`: one row per planned run (each arm, each control's arm), its
    state, departures, question 1's answer, nesting verdict and A/A reading from its report."""
    out = tmp_path / "plan"
    preregister.write_plan(aa_plan, out)
    assert plan_main(["--check", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Plan {aa_plan['plan_hash']} (PLAN.json of {out}): 0 of 2 planned runs complete; "
                           "stages complete: 0 of 1; next: stage all, runs per-bar controls/aa/per-bar")
    assert "| all | per-bar | per-bar | not started |" in text
    assert "| all | aa/per-bar | controls/aa/per-bar | not started |" in text and wording.CONTROL_EXPECTATIONS["aa"] in text
    run, rep = pair_tables(np.random.default_rng(3), n_folds=2)
    _report_ready(tmp_path, out / "per-bar", run)
    replicate = _report_ready(tmp_path, out / "controls" / "aa" / "per-bar", rep)
    build_report(out / "per-bar")
    build_report(replicate)
    rows = {r["run"]: r for r in lab_plan.plan_state(out)}
    assert rows["per-bar"]["state"] == "complete" and rows["per-bar"]["departures"]  # make_run's config is not the plan's
    assert rows["per-bar"]["question1"] == "no better" and rows["per-bar"]["aa"] == ""
    assert rows["per-bar"]["ranking"] == json.loads((out / "per-bar" / "questions.json").read_text())[
        "forecast"]["runs"]["ranking"]["verdict"]  # the ranking check's column, from the report
    aa = json.loads((replicate / "results.json").read_text())["aa"]
    assert rows["aa/per-bar"]["aa"] == (f"{aa['differ']} of 8 say \"differ\" (calibrated); question 1 over both seed "
                                        f"sets: {aa['pooled']['answer']}; their nesting check: not measured")
    assert plan_main(["--check", str(out)]) == 1  # departures
    text = capsys.readouterr().out
    assert "2 of 2 planned runs complete; stages complete: 1 of 1 (all)." in text
    assert "\nDepartures from the plan:\n- per-bar: " in text
    assert f"| all | per-bar | per-bar | complete | {len(rows['per-bar']['departures'])} | no better |" in text


def test_the_plans_ladder_is_a_row_of_its_state(tmp_path, capsys):
    """With --ladder the state has a ladder row: not started, then replicates done of planned and
    what "no" rules out from its summary.json (OUT/ladder, where PLAN.md's command writes it)."""
    out = tmp_path / "plan"
    from lab.preregister import main as preregister_main

    assert preregister_main(["--lengths", "512,4096", "--ladder", "--out", str(out)]) == 0
    ladder = lab_plan.plan_state(out)[-1]
    assert (ladder["run"], ladder["state"], ladder["question1"]) == ("ladder", "not started", "")
    write_json(out / registration.LADDER_DIR / "summary.json", {
        "complete": False, "replicates_done": 4, "replicates_planned": 27,
        "rungs": [{"strength": 0.05, "oracle_gain": 0.002}, {"strength": 0.2, "oracle_gain": 0.03},
                  {"strength": None, "oracle_gain": None}],
        "curve_80": {"log_loss": {"effect": 0.0123, "ci": [0.005, 0.04], "how": "within the ladder"}}})
    ladder = lab_plan.plan_state(out)[-1]
    assert ladder["state"] == "4 of 27 replicates"
    assert ladder["question1"] == wording.ladder_sentence({"effect": 0.0123, "ci": [0.005, 0.04],
                                                           "how": "within the ladder"}, 0.03, 0.002)
    capsys.readouterr()
    assert plan_main(["--check", str(out)]) == 0
    assert "| ladder | ladder | 4 of 27 replicates |" in capsys.readouterr().out


def test_a_plan_with_the_replicate_reads_question_1_over_both_seed_sets(aa_plan, tmp_path):
    """--aa-seeds makes question 1's primary reading the pooled one (six seeds), said in PLAN.md with
    why, and its outcomes' sentences; a plan without the replicate has neither."""
    assert aa_plan["primary"]["pooled"] == wording.POOLED_RULE
    preregister.write_plan(aa_plan, tmp_path / "plan")
    text = (tmp_path / "plan" / "PLAN.md").read_text()
    assert wording.POOLED_RULE in text and "question 1 over both seed sets (primary): no better" in text
    plain = preregister.build_plan(SweepOptions(lengths=[512, 4096], preset="full"), [("per-bar", [])])
    assert "pooled" not in plain["primary"] and not any("both seed sets" in o["outcome"] for o in plain["outcomes"])


def test_the_nesting_check_over_both_seed_sets(tmp_path):
    """The replicate's cells beside the arm's (renamed to its trial keys): six seeds per fold, read
    from the summaries; a long model that lost its volatility skill in both seed sets fails it."""
    from tests.report.test_nesting_report import PRIMARY, nested_run
    from tsflash.report.diagnostics.nesting import SUMMARIES, nesting_check
    from tsflash.report.diagnostics.replicate import pooled_nesting, pooled_nesting_sentence

    arm = nested_run(tmp_path / "arm", {64: 1.0})
    replicate = nested_run(tmp_path / "replicate", {64: 1.0})
    for path in sorted(replicate.glob("cells/n*/fold*-seed*.cell.json")):  # seeds 0-2 -> 3-5
        cell = json.loads(path.read_text())
        cell["seed"] += 3
        write_json(path.with_name(f"fold{cell['fold']}-seed{cell['seed']}.cell.json"), cell)
        path.unlink()
    check = pooled_nesting(load_run(arm), load_run(replicate))
    assert check.source == SUMMARIES and check.seeds_per_fold == 6 and check.verdict == "fails"
    alone = nesting_check(load_run(arm), PRIMARY)
    assert alone.seeds_per_fold == 3 and check.tests[0].parts["log_loss"].n_runs_a == 2 * alone.tests[0].parts[
        "log_loss"].n_runs_a
    assert pooled_nesting_sentence(SimpleNamespace(arm="per-bar", pooled_nesting=check)).startswith(
        f"{wording.POOLED_LEAD}: Nesting check (")
