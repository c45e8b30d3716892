"""Question 1 over training runs in the report (issue 28): the decision rule on a fake run table,
the one-seed sentence, the trial ledger across runs, PBO's null sentence, the steps column and the
first screen's caveats (issue 31)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tsflash.report.compute import PRIOR, SCORES, run_question
from tsflash.report.context import steps_text, with_caveats
from tsflash.report.diagnostics.pbo_null import pbo_null_sentence
from tsflash.report.diagnostics.power import with_power
from tsflash.report.wording import NOT_EVIDENCE, run_sentence, support_sentences
from tsflash.scoring.daily import ENSEMBLE
from tsflash.stats.forecasts import ONE_SEED
from tsflash.stats.gate import TrialLedger
from tsflash.stats.runs import RunNoise, simulate_runs


def fake_table(difference: float, n_seeds: int = 3, seed: int = 0, prior_gap: float = 0.05) -> dict:
    """A loss table of single runs ("seed<k>") of "n1" and "n2" on the same folds and days (their
    market shared), n2 `difference` per bar above n1, both scores alike, and the class prior one
    run per fold, `prior_gap` per bar above n1's seed 0."""
    a, b = simulate_runs(np.random.default_rng(seed), difference=difference, noise=RunNoise(), n_seeds=n_seeds,
                         n_days=40)
    first = a.seed == 0
    parts = [("n1", np.array([f"seed{k}" for k in a.seed], dtype=object), a.fold, a.day, a.loss, a.count),
             ("n2", np.array([f"seed{k}" for k in b.seed], dtype=object), b.fold, b.day, b.loss, b.count),
             (PRIOR, np.full(int(first.sum()), ENSEMBLE, dtype=object), a.fold[first], a.day[first],
              a.loss[first] + prior_gap * a.count[first], a.count[first])]
    table = {k: [] for k in ("series", "member", "fold", "day", *{c for pair in SCORES.values() for c in pair})}
    for name, member, fold, day, loss, count in parts:
        table["series"].append(np.full(len(fold), name, dtype=object))
        table["member"].append(member)
        table["fold"].append(fold)
        table["day"].append(day)
        for loss_col, count_col in SCORES.values():
            table[loss_col].append(loss)
            table[count_col].append(count)
    return {k: np.concatenate(v) for k, v in table.items()}


def _fq(runs, shortest="n1"):
    return SimpleNamespace(runs=runs, shortest=shortest)


def test_no_difference_over_runs_answers_no_better():
    runs = with_power(run_question(fake_table(0.0), ["n1", "n2"]))  # the power is its diagnostic's number
    assert runs.available and runs.answer == "no better"
    assert len(runs.result.comparisons) == 2 and set(runs.power) == set(SCORES)
    assert runs.power["log_loss"][6] < runs.power["log_loss"][3]  # more seeds detect smaller differences
    assert run_sentence(_fq(runs)).startswith("Longer context forecasts no better, over training runs")


@pytest.mark.parametrize("difference, answer", [(0.05, "worse"), (-0.04, "better")])
def test_a_big_difference_over_runs_answers_worse_or_better(difference, answer):
    # the prior sits 0.05 above arm A, so the better arm beats it: the difference counts
    runs = run_question(fake_table(difference), ["n1", "n2"])
    assert runs.answer == answer and all(p.p_holm <= 0.05 for p in runs.result.comparisons)
    assert run_sentence(_fq(runs)).startswith(f"Longer context forecasts {answer}, over training runs")


def test_a_difference_over_runs_without_skill_decides_nothing():
    # the prior sits 0.1 below arm A: arm B's lower loss (0.04 below A) still loses to it, so B wins
    # against A without skill, and the answer is "no better" with that difference named
    runs = run_question(fake_table(-0.04, prior_gap=-0.1), ["n1", "n2"])
    p = next(p for p in runs.result.comparisons if p.score == "log_loss")
    assert p.significant and p.mean_diff < 0 and not runs.result.counts(p) and runs.answer == "no better"
    text = run_sentence(_fq(runs))
    assert text.startswith("Longer context forecasts no better, over training runs: N=2 on the log-loss (")
    assert "differs from N=1, but N=2, the lower loss, does not beat the no-skill forecast on the log-loss (" in text
    assert "a difference between forecasts without skill, not a better forecast" in text


def test_one_seed_per_fold_cannot_be_tested_over_runs():
    runs = run_question(fake_table(0.1, n_seeds=1), ["n1", "n2"])
    assert not runs.available and runs.answer is None and runs.reason == ONE_SEED
    assert run_sentence(_fq(runs)) == "No answer: one seed per fold: question 1 cannot be tested over training runs."
    caveats = support_sentences([], None, None, runs.reason)
    assert caveats == ["One seed per fold: question 1 cannot be tested over training runs."]


def test_the_ledger_counts_a_run_whose_test_days_match_and_no_other():
    ledger = TrialLedger.read()
    fingerprint = "4b38b3911d705c098c3185407ff8ee1f9873f8b73f373608c179e31ac54ae67d"
    days = np.arange(np.datetime64("2023-01-02"), np.datetime64("2025-07-01"))
    assert len(days) == 911
    count = ledger.count_for(fingerprint, days)
    assert count.n_trials == 10 and "trials.toml" in count.source and len(count.entries) == 10  # three editions
    assert ledger.count_for(fingerprint, days[1:]) is None  # other test days
    assert ledger.count_for("0" * 64, days) is None  # other bars


def test_select_run_reads_the_ledger_only_for_matching_days():
    from tsflash.stats.gate import select_run

    rng = np.random.default_rng(1)
    days = np.arange(np.datetime64("2023-01-02"), np.datetime64("2025-07-01"))
    series = {f"n{k}": (days, rng.normal(0, 0.01, len(days))) for k in (1, 2, 3)}
    trials = [{"state": "COMPLETE", "value": float(v), "slot": f"n{i}/0"} for i, v in enumerate([0.01, -0.02, 0.0])]
    fp = "4b38b3911d705c098c3185407ff8ee1f9873f8b73f373608c179e31ac54ae67d"
    matched = select_run(series, trials, ledger=TrialLedger.read(), fingerprint=fp)
    own = select_run(series, trials, ledger=TrialLedger.read(), fingerprint="f" * 64)
    assert (matched.n_trials, matched.verdict.n_trials, own.n_trials) == (10, 10, 3)
    assert own.trial_count.period is None and "own study" in own.trial_count.source
    d = matched.deflation  # the pass line with the null variance, and 80 % power above each line
    assert d.power_sharpe > d.min_sharpe and d.power_sharpe_null > d.min_sharpe_null


def _null(observed, informative):
    return {"n_candidates": 3, "n_days": 911, "n_blocks": 16, "replicates": 200, "observed": observed, "mean": 0.65,
            "q05": 0.11, "q95": 0.98, "p_at_least": 0.38, "p_above_max": 0.71, "informative": informative}


def test_the_pbo_null_sentence_says_when_pbo_is_not_informative():
    text = pbo_null_sentence(_null(0.793, False), 0.5)
    assert "PBO is not informative here" in text and "38%" in text and "3 candidates" in text
    assert "says more than noise" in pbo_null_sentence(_null(0.0, True), 0.5)


def test_pbo_informative_reads_the_null_range():
    from tsflash.stats.gate import pbo_informative
    from tsflash.stats.runs import pbo_null

    values = pbo_null(3, 200, 8, n_replicates=100, rng=np.random.default_rng(0)).values
    assert not pbo_informative(values, float(np.median(values)))
    assert pbo_informative(values, -1.0)


def test_the_steps_column_is_the_mean_and_range_over_cells():
    assert steps_text({"steps_mean": 412.4, "steps_min": 300.0, "steps_max": 600.0}) == "412 (300..600)"
    assert steps_text({"steps_mean": 600.0, "steps_min": 600.0, "steps_max": 600.0}) == "600"


def test_a_run_with_caveats_or_a_smoke_line_claims_nothing():
    caveats = support_sentences([32768], 0.002, 0.0029, None)
    assert caveats[0].startswith("The convergence criterion fails for N = 32768")
    assert any("inside the seed spread" in c for c in caveats)
    words = with_caveats({"forecast": "Longer context forecasts worse.", "sentence": "No."}, caveats)
    assert words["forecast"].endswith(NOT_EVIDENCE) and words["sentence"].endswith(NOT_EVIDENCE)
    assert with_caveats({"forecast": "x", "sentence": "y"}, [])["forecast"] == "x"
    smoke = with_caveats({"forecast": "x", "sentence": "y"}, [], "Smoke test of the method ...")
    assert smoke["forecast"] == "x" + NOT_EVIDENCE and smoke["smoke"] == "Smoke test of the method ..."


def test_a_budget_too_short_for_every_n_makes_the_run_a_smoke_test(tmp_path):
    """A full-preset run whose convergence criterion fails for every N (as `--set train.steps=12` on
    the full config does) opens with the smoke-test line, said once; failing for some N is a caveat."""
    from tests.report.test_report import make_run
    from tsflash.report import build_report
    from tsflash.report.compute import compute
    from tsflash.report.context import smoke_line
    from tsflash.report.rundata import load_run as read_run

    run = make_run(tmp_path, drift=0.0, preset="full")
    cfg = json.loads((run / "config.json").read_text())
    cfg["splits"]["val_days"] = 30
    cfg["train"] |= {"steps": 12, "eval_every": 3, "patience": 2}
    (run / "config.json").write_text(json.dumps(cfg))
    for path in run.glob("cells/n*/*.cell.json"):  # every fold's best step inside the last patience window
        cell = json.loads(path.read_text())
        cell["cost"] |= {"best_step": 12 if cell["n"] > 32 else 3, "stop_step": 12}
        path.write_text(json.dumps(cell))
    rd = read_run(run)
    assert smoke_line(rd, compute(rd)) is None  # N=32 stopped early: a caveat for the others
    assert "The convergence criterion fails for N = 64, 128, 256" in build_report(run)[0].read_text()
    for path in run.glob("cells/n32/*.cell.json"):
        cell = json.loads(path.read_text())
        cell["cost"]["best_step"] = 12
        path.write_text(json.dumps(cell))
    rd = read_run(run)
    line = smoke_line(rd, compute(rd))
    assert line == ("Smoke test of the method on a too-short budget, not evidence: train.steps = 12 leaves every N "
                    "(32, 64, 128, 256) short of a validated optimum (convergence criterion, Training protocol).")
    text = build_report(run)[0].read_text()
    assert text.split("\n\n")[1] == line and "**Question" not in text
    assert "The convergence criterion fails" not in text  # not repeated among the caveats


def test_the_crossed_test_decides_the_family_when_the_config_says_so():
    """eval.seed_inference = "crossed": question 1's family is `run_level_test(seeds="crossed")` (folds
    and initial weights); with a seed effect shared by the folds, the fold t calls a zero difference
    an effect and the crossed test does not."""
    from tsflash.stats.runs import run_level_test, runs_from_table

    a, b = simulate_runs(np.random.default_rng(7), noise=RunNoise(init=0.02), n_seeds=3, n_days=40)
    table = fake_table(0.0)
    for arm, name in ((a, "n1"), (b, "n2")):  # the fake table's runs replaced by ones whose seeds carry an effect
        m = table["series"] == name
        for loss_col, _ in SCORES.values():
            table[loss_col][m] = arm.loss
    fold, crossed = run_question(table, ["n1", "n2"]), run_question(table, ["n1", "n2"], "crossed")
    runs = {sc: [runs_from_table(table, k, loss=SCORES[sc][0], count=SCORES[sc][1]) for k in ("n1", "n2")] for sc in SCORES}
    for p in crossed.result.comparisons:
        assert p.result.p == pytest.approx(run_level_test(*runs[p.score], seeds="crossed").p, rel=1e-12)
    assert all(p.p_holm <= 0.05 for p in fold.result.comparisons) and fold.answer == "worse"
    assert all(p.p_holm > 0.3 for p in crossed.result.comparisons) and crossed.answer == "no better"


def test_a_run_the_ledger_does_not_list_adds_its_own_configurations():
    """A run on a ledger period whose config hash the period lists nowhere (a new configuration
    nobody added) counts its own trials on top of the period's, never fewer; a listed run, an A/A
    replicate listed as not counted, or a run without a hash counts the period's."""
    ledger = TrialLedger.read()
    fingerprint = "4b38b3911d705c098c3185407ff8ee1f9873f8b73f373608c179e31ac54ae67d"
    days = np.arange(np.datetime64("2023-01-02"), np.datetime64("2025-07-01"))
    new = ledger.count_for(fingerprint, days, "0badc0de", own=3)
    assert new.n_trials == 13 and "which it does not list" in new.source
    assert new.entries[-1] == "this run's 3 configurations (config hash 0badc0de, not in the ledger)"
    # the second edition; its A/A replicate; the third edition's per-bar arm and its A/A replicate; an older caller
    for listed in ("a28c6cfb", "163333fd", "722795cd", "f13c0970", None):
        assert ledger.count_for(fingerprint, days, listed, own=3).n_trials == 10
    from tsflash.stats.gate import select_run

    rng = np.random.default_rng(2)
    series = {f"n{k}": (days, rng.normal(0, 0.01, len(days))) for k in (1, 2, 3)}
    trials = [{"state": "COMPLETE", "value": float(v), "slot": f"n{i}/0"} for i, v in enumerate([0.01, -0.02, 0.0])]
    assert select_run(series, trials, ledger=ledger, fingerprint=fingerprint, config_hash="0badc0de").n_trials == 13


def test_each_ledger_entry_names_the_config_hash_of_its_committed_run():
    """The hash is what a report matches on: every entry whose run folder is committed carries that
    run's config hash (run.json)."""
    from tests.conftest import REPO

    checked = 0
    for period in TrialLedger.read().periods:
        for entry in [*period.get("trial", []), *period.get("not_counted", [])]:
            run = REPO / entry["run"] / "run.json"
            if run.is_file():
                assert entry.get("config_hash") == json.loads(run.read_text())["config_hash"], entry["run"]
                checked += 1
    # the first edition's 4 configurations, the second's 3 and its A/A replicate; the echo control's 3,
    # its sensitivity arm, its rerun and its A/A replicate; the third edition's runs begun so far (the
    # per-bar arm's 3 and its A/A replicate)
    assert checked == 4 + 3 + 1 + 3 + 1 + 1 + 1 + 3 + 1


def test_the_third_editions_plan_as_amended_is_in_the_ledger_before_its_first_report():
    """reports/third-edition/PLAN.md's TOML lines, less those its amendment removes (AMENDMENT.md: the
    ledger enters only configurations that run), are in trials.toml before the first report: the
    per-bar arm's three configurations as trials of BTC's period (10 with the two earlier editions',
    the amended plan's "with this plan" figure), its A/A replicate as not counted; the patch4 arm's
    lines are not."""
    from pathlib import Path

    from tests.conftest import REPO
    from tsflash.sweep import preregister

    plan_md = (REPO / "reports/third-edition/PLAN.md").read_text()
    registered = plan_md.split("```toml\n", 1)[1].split("```", 1)[0].splitlines()
    plan = preregister.amended_plan(REPO / "reports/third-edition", resolve=False)
    kept = preregister._ledger_lines(plan, Path("reports/third-edition"))
    assert len(registered) == 8 and len(kept) == 4 and set(kept) < set(registered)
    ledger_text = (REPO / "tsflash/stats/trials.toml").read_text()
    assert all(line.split("  # not_counted")[0] in ledger_text for line in kept)
    assert not any(line.split("  # not_counted")[0] in ledger_text for line in set(registered) - set(kept))
    (row,) = plan["ledger"]
    period = next(p for p in TrialLedger.read().periods if p["key"] == row["period"])
    assert len(period["trial"]) == row["with_plan"] == 10 and row["now"] == 7
    hashes = {t["config_hash"] for t in period["trial"]}
    per_bar, patch4 = plan["arms"]
    assert per_bar["config_hash"] in hashes and patch4["config_hash"] not in hashes
    assert plan["amendments"][0]["ledger_removed"] == ["patch4", "aa/patch4"]
