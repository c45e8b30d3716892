"""The report's training-protocol section (tsflash.report.protocol), from fake run folders: learning
curves, stopping steps and the convergence criterion, seeds against N, the benefit of the far
context, and the sentences a run made before validated stopping gets."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.report.test_report import make_run
from tsflash.report import SECTIONS, build_report, load_run
from tsflash.report.compute import compute
from tsflash.report.protocol import HEADING, build, setup_rows
from tsflash.runfolder import write_json

MAX_STEPS, EVERY, PATIENCE = 100, 10, 3  # the last patience window: steps 71..100


def _validated_run(tmp_path, best_steps: dict[int, list[int]]):
    """make_run's folder with the protocol on: val tail, early stopping, three seeds, cuts [32, 64];
    best_steps[n][fold] is the best validation step of every seed of that fold."""
    run = make_run(tmp_path, drift=0.0)
    cfg = json.loads((run / "config.json").read_text())
    cfg["splits"]["val_days"] = 2
    cfg["train"] |= {"steps": MAX_STEPS, "eval_every": EVERY, "patience": PATIENCE, "seeds": [0, 1, 2]}
    cfg["eval"]["context_cuts"] = [32, 64]
    write_json(run / "config.json", cfg)
    for path in sorted((run / "cells").glob("n*/fold*-seed0.cell.json")):
        cell = json.loads(path.read_text())
        n, fold = cell["n"], cell["fold"]
        for seed in range(3):
            best = best_steps[n][fold]
            stop = min(best + PATIENCE * EVERY, MAX_STEPS)
            steps = list(range(EVERY, stop + 1, EVERY))
            val = [1.1 - 0.001 * s if s <= best else 1.1 - 0.001 * best + 0.0005 * (s - best) for s in steps]
            c = json.loads(json.dumps(cell))
            c["seed"] = seed
            c["metrics"]["log_loss"] += 0.001 * seed
            c["cost"] |= {"curve": {"step": steps, "train_loss": [v - 0.01 for v in val], "val_loss": val},
                          "best_step": best, "best_val_loss": min(val), "stop_step": stop, "max_steps": MAX_STEPS,
                          "eval_every": EVERY, "patience": PATIENCE, "lr": 1e-3, "rotary_base": 3700000.0,
                          "rotary_wavelength": 530000.0}
            c["far_context"] = {str(m): {"log_loss": c["metrics"]["log_loss"] + 0.002, "accuracy": 0.3,
                                         "balanced_accuracy": 0.3, "mcc": 0.0} for m in (32, 64) if m < n}
            write_json(path.with_name(f"fold{fold}-seed{seed}.cell.json"), c)
    return run


def _section(run):
    rd = load_run(run)
    return build(rd, compute(rd), run), rd


def test_section_shows_curves_stopping_steps_seeds_and_far_context(tmp_path):
    run = _validated_run(tmp_path, {32: [40, 50], 64: [30, 60], 128: [20, 70], 256: [50, 40]})
    md, html = build_report(run)
    text = md.read_text()
    assert re.findall(r"^## (.+)$", text, flags=re.M) == list(SECTIONS) and HEADING in SECTIONS
    assert (run / "figures" / "learning_curves.png").stat().st_size > 5000
    assert "figures/learning_curves.png" in text and html.read_text().count("src='data:image/png;base64,") == 5
    sec, _ = _section(run)
    assert sec["stopping"]["header"][:3] == ["N", "fold 0: best/last step", "fold 1: best/last step"]
    assert sec["stopping"]["rows"][0] == ["32", "40/70, 40/70, 40/70", "50/80, 50/80, 50/80", "0 of 2"]
    assert sec["criterion"][1].startswith("Met for every N")
    assert "after step 70 of 100" in sec["criterion"][0]
    seeds = sec["seeds"]
    assert [r[:2] for r in seeds["rows"]] == [["32", "3"], ["64", "3"], ["128", "3"], ["256", "3"]]
    assert seeds["rows"][0][3] == "0.0010"  # seed sd of log-loss: seeds differ by 0.001
    far = sec["far"]["rows"]
    assert [(r[0], r[1]) for r in far] == [("64", "32"), ("128", "32"), ("128", "64"), ("256", "32"), ("256", "64")]
    # 2 folds x 3 seeds, full - cut; both folds helped, equally, so no spread for a t
    assert all(r[4] == "-0.0020 ± 0.0000" and r[8:] == ["6", "2/2", "n/a", "n/a"] for r in far)
    rows = dict(setup_rows(load_run(run)))
    assert rows["validation tail"].startswith("the last 2 days of each fold's training range, purged by 15 bars")
    assert rows["stopping"].startswith("validation loss every 10 steps and at the last; stop after 3 evaluations")
    assert "at most 100 steps" in rows["stopping"] and "best weights restored" in rows["stopping"]
    assert rows["positions"] == "rotary, base 3,700,000, slowest wavelength 530,000 bars: covers 4 × the longest N"
    assert "each of 3 seeds separately" in rows["forecast per N"]
    assert "last 32, 64 bars" in rows["far context"]
    for key in ("validation tail", "training signal", "sampling", "far context"):
        assert f"| {key} |" in text


def test_a_best_step_in_the_last_patience_window_of_two_folds_says_the_budget_is_too_short(tmp_path):
    run = _validated_run(tmp_path, {32: [40, 50], 64: [80, 90], 128: [75, 20], 256: [50, 40]})
    sec, _ = _section(run)
    assert sec["stopping"]["rows"][1][-1] == "2 of 2" and sec["stopping"]["rows"][2][-1] == "1 of 2"
    assert sec["criterion"][1].startswith("Not met for N = 64, 128 (late folds: 2 of 2, 1 of 2, more than 0): the "
                                          "budget train.steps = 100 is too short")
    assert "at most 0 of the 2 folds may be late" in sec["criterion"][0]  # the rule in the table's own terms


@pytest.mark.parametrize("published", [False, True])
def test_runs_before_validated_stopping_get_sentences_not_empty_tables(tmp_path, published):
    if published:
        from pathlib import Path

        run = Path(__file__).resolve().parents[2] / "reports" / "h200-btcusdt-1m"
        if not any(run.glob("cells/**/*.cell.json")):
            pytest.skip("the published run's cell summaries are absent")
    else:
        run = make_run(tmp_path, drift=0.0)
    sec, rd = _section(run)
    assert sec["intro"].startswith("No validation tail: every N was trained for a fixed")
    assert sec["figure"] is None and sec["stopping"] is None and sec["far"] is None
    assert sec["seeds_note"].startswith("One seed per N")
    rows = dict(setup_rows(rd))
    assert rows["validation tail"] == "none" and rows["far context"] == "not scored"
    if published:
        assert rows["positions"].startswith("rotary, base 10,000, slowest wavelength 47,117 bars: does NOT cover")
        assert rows["sampling"] == "uniform window starts (runs before balancing)"


def test_far_context_test_averages_seeds_per_fold_then_t_over_folds():
    """Hand-computed: fold means -0.002, -0.004, +0.001 -> mean -0.001667, sd 0.002517, t = -1.147."""
    from tsflash.report.protocol import fold_t_test

    diffs = [(0, -0.001), (0, -0.003), (1, -0.004), (1, -0.004), (1, -0.004), (2, 0.001)]
    out = fold_t_test(diffs)
    means = np.array([-0.002, -0.004, 0.001])
    t = means.mean() / (means.std(ddof=1) / np.sqrt(3))
    assert out["folds"] == 3 and out["better"] == 2
    assert out["t"] == pytest.approx(t, rel=1e-12) and out["t"] == pytest.approx(-1.1471, abs=1e-4)
    from scipy import stats
    assert out["p"] == pytest.approx(2 * stats.t.sf(abs(t), df=2), rel=1e-12)
    assert np.isnan(fold_t_test([(0, -0.001), (0, -0.002)])["t"])  # one fold: no test
