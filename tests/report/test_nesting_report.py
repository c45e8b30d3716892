"""The nesting check in the report (issue 29, `tsflash.report.diagnostics.nesting`), on fake run folders whose
long-N cells carry the cut scoring: the split adds up, a cut model that lost volatility skill fails
the check and question 1's answer says so, an equal one passes, a folder without the per-bar cells
is tested on the log-loss alone, runs without cut scoring say "not measured", and the published
second edition gives the issue's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.report.test_report import make_run
from tsflash.report import build_report, load_run
from tsflash.report.compute import compute
from tsflash.report.diagnostics.nesting import PER_BAR, SUMMARIES, nesting_check, nesting_sentence, part_means
from tsflash.report.wording import NESTING_FAILS, forecast_sentence
from tsflash.runfolder import write_json
from tsflash.scoring.metrics import classification_metrics, direction_metrics

CUT, BARS = 32, 3000  # the shortest N of make_run; test bars per fold
PRIMARY = ["n32", "n64", "n128", "n256"]
SECOND_EDITION = Path(__file__).resolve().parents[2] / "reports" / "h200-btcusdt-1m-second-edition"


def _world(rng):
    """Bars whose move probability and up-probability among moves are known (vol, q)."""
    vol, q = rng.uniform(0.3, 0.9, 2 * BARS), rng.uniform(0.4, 0.6, 2 * BARS)
    moved, up = rng.random(2 * BARS) < vol, rng.random(2 * BARS) < q
    return vol, q, np.where(moved, np.where(up, 2, 0), 1).astype(np.int8)


def _forecast(rng, vol, q, shrink: float) -> np.ndarray:
    """A forecast near the truth; `shrink` pulls its move probability to the mean: volatility skill lost."""
    pm = np.clip((1 - shrink) * vol + shrink * vol.mean() + rng.normal(0, 0.01, len(vol)), 0.05, 0.95)
    qq = np.clip(q + rng.normal(0, 0.01, len(q)), 0.05, 0.95)
    return np.column_stack([pm * (1 - qq), 1 - pm, pm * qq]).astype(np.float16).astype(np.float64)


def nested_run(tmp_path, shrink: dict[int, float], *, seeds: int = 3, cuts=(CUT,), per_bar: bool = True,
               cut_parts: bool = False):
    """make_run's folder with `seeds` seeds per fold, the long cells scored with their context cut to
    each of `cuts` (the cut forecast of N loses `shrink[N]` of the volatility skill), and, with
    `per_bar`, every cell's .npz (test bars, labels, probabilities, cut probabilities). `cut_parts`:
    the summaries' cut scorings hold their log-loss parts, as cells scored since the check do."""
    run = make_run(tmp_path, drift=0.0)
    cfg = json.loads((run / "config.json").read_text())
    cfg["train"]["seeds"], cfg["eval"]["context_cuts"] = list(range(seeds)), list(cuts)
    write_json(run / "config.json", cfg)
    rng = np.random.default_rng(0)
    vol, q, y = _world(rng)
    times = np.arange(2 * BARS, dtype=np.int64) * 60_000_000 + 1_700_006_400_000_000
    for path in sorted((run / "cells").glob("n*/fold*-seed0.cell.json")):
        cell = json.loads(path.read_text())
        n, fold = cell["n"], cell["fold"]
        sl = slice(fold * BARS, (fold + 1) * BARS)
        for seed in range(seeds):
            full = _forecast(rng, vol, q, 0.0)[sl]
            cut = {m: _forecast(rng, vol, q, shrink.get(n, 0.0))[sl] for m in cuts if m < n}
            c = json.loads(json.dumps(cell)) | {"seed": seed}
            c["metrics"] |= classification_metrics(y[sl], full) | direction_metrics(y[sl], full)
            c["far_context"] = {str(m): classification_metrics(y[sl], p) | (direction_metrics(y[sl], p) if cut_parts else {})
                                for m, p in cut.items()}
            stem = path.with_name(f"fold{fold}-seed{seed}")
            write_json(stem.with_name(stem.name + ".cell.json"), c)
            if per_bar:
                np.savez(stem.with_name(stem.name + ".npz"), test_time=times[sl], y_true=y[sl],
                         y_prob=full.astype(np.float16), **{f"y_prob_ctx{m}": p.astype(np.float16) for m, p in cut.items()})
    return run


def test_the_split_adds_up_to_the_log_loss_in_float64():
    rng = np.random.default_rng(1)
    vol, q, y = _world(rng)
    p = _forecast(rng, vol, q, 0.3)
    y = np.where(rng.random(len(y)) < 0.05, -1, y)  # some bars unlabelled
    parts, n, residual = part_means(y, p)
    assert n == int((y >= 0).sum())
    assert parts["log_loss"] == pytest.approx(parts["move"] + parts["direction"], rel=1e-15, abs=0)  # their sum
    assert parts["log_loss"] == pytest.approx(classification_metrics(y, p)["log_loss"], abs=1e-12)
    assert residual < 1e-12  # nothing floored


def test_a_cut_model_that_lost_volatility_skill_fails_and_the_answer_says_so(tmp_path):
    run = nested_run(tmp_path, {64: 1.0})
    check = nesting_check(load_run(run), PRIMARY)
    assert check.source == PER_BAR and check.verdict == "fails" and [t.n for t in check.failed] == [64]
    t = check.failed[0]
    total, move, direction = (t.parts[p] for p in ("log_loss", "move", "direction"))
    assert total.estimate > 0.01 and move.estimate > 0.01 and abs(direction.estimate) < 0.002
    assert total.estimate == pytest.approx(move.estimate + direction.estimate, abs=1e-15)
    assert check.residual < 1e-9 and check.seeds_per_fold == 3
    # gap = far context + (cut - shortest), on the same runs
    gap = check.gaps[64]["log_loss"].estimate
    assert abs(gap) < 0.003
    md, html = build_report(run)
    text, results = md.read_text(), json.loads((run / "results.json").read_text())
    sentence = nesting_sentence(check)
    assert sentence.startswith(f"Nesting check (each longer N scored with its context cut to the last {CUT} bars")
    assert f": {NESTING_FAILS}. N=64 cut to 32 bars +" in sentence and "; flat-vs-move part +" in sentence
    assert sentence in text and sentence in html.read_text()
    # the lead (a smoke run: not bold) says the check fails; the whole sentence says by how much
    answer = next(line for line in text.splitlines() if line.startswith("Question 1 (forecasting): "))
    assert "the nesting check fails" in answer and len(answer.split()) <= 43  # the lead's 40 and its prefix
    full = json.loads((run / "questions.json").read_text())["forecast"]["sentence"]
    assert f"The nesting check {NESTING_FAILS}: N=64 cut to 32 bars +" in full
    assert results["nesting"]["verdict"] == "fails" and results["nesting"]["tests"][0]["lost_skill"]
    assert results["nesting"]["tests"][0]["cut_minus_shortest"]["move"]["p_holm"] <= 0.05
    questions = json.loads((run / "questions.json").read_text())
    assert questions["forecast"]["nesting"] == results["nesting"]
    assert "| N=64 cut to 32 | flat-vs-move part | 6, 6 | +" in text


def test_an_equal_cut_model_passes_and_the_answer_says_nothing_of_it(tmp_path):
    run = nested_run(tmp_path, {})
    nums = compute(load_run(run))
    check = nums.forecast.nesting
    assert check.verdict == "passes" and not check.failed and len(check.tests) == 3
    assert all(abs(t.parts["log_loss"].estimate) < 0.003 for t in check.tests)
    assert nesting_sentence(check).split(": passes: ")[1].startswith(
        "no longer N cut to 32 bars forecasts significantly worse than N=32 (the largest difference: N=")
    assert "nesting" not in forecast_sentence(nums.forecast).lower()


def test_without_the_per_bar_cells_the_check_reads_the_summaries_log_loss(tmp_path):
    run = nested_run(tmp_path, {64: 1.0})
    per_bar = nesting_check(load_run(run), PRIMARY)
    for npz in run.glob("cells/n*/*.npz"):
        npz.unlink()
    check = nesting_check(load_run(run), PRIMARY)
    assert check.source == SUMMARIES and check.verdict == "fails" and "y_prob_ctx32" in check.parts_reason
    assert all(set(t.parts) == {"log_loss"} for t in check.tests)
    assert set(check.gaps[64]) == {"log_loss", "move", "direction"}  # the full models' parts are in the summaries
    # the same runs: float16 probabilities (per-bar) against float64 ones (summaries) move the estimate a hair
    assert check.tests[0].parts["log_loss"].estimate == pytest.approx(per_bar.tests[0].parts["log_loss"].estimate,
                                                                      abs=1e-4)
    text = build_report(run)[0].read_text()
    assert "| N=64 cut to 32 | flat-vs-move part | not measured |" in text
    assert "The split of the cut model's log-loss into its parts: not measured in this run" in text


def test_summaries_that_hold_the_cut_scorings_parts_give_the_split_without_the_per_bar_cells(tmp_path):
    run = nested_run(tmp_path, {64: 1.0}, cut_parts=True)
    per_bar = nesting_check(load_run(run), PRIMARY)
    for npz in run.glob("cells/n*/*.npz"):
        npz.unlink()
    check = nesting_check(load_run(run), PRIMARY)
    assert check.source == SUMMARIES and check.parts_reason == "" and check.verdict == "fails"
    assert all(set(t.parts) == {"log_loss", "move", "direction"} for t in check.tests)
    for t, ref in zip(check.tests, per_bar.tests, strict=True):  # float64 summaries against float16 per-bar probabilities
        for part in ("log_loss", "move", "direction"):
            assert t.parts[part].estimate == pytest.approx(ref.parts[part].estimate, abs=1e-4)
    text = build_report(run)[0].read_text()
    assert "| N=64 cut to 32 | flat-vs-move part | not measured |" not in text


@pytest.mark.parametrize("case, reason", [
    ("no cut scoring", "the cells of N = 64, 128, 256 were not scored with their context cut to 32 bars "
                       "(eval.context_cuts = [64]"),
    ("one seed", "the run-level test cannot run: each arm needs at least 2 runs per fold: N=32 has 1 on fold 0"),
    ("one length", "the run has one context length, so nothing is nested in it"),
])
def test_runs_the_check_cannot_measure_say_not_measured(tmp_path, case, reason):
    run = nested_run(tmp_path, {}, cuts=(64,) if case == "no cut scoring" else (CUT,),
                     seeds=1 if case == "one seed" else 3)
    check = nesting_check(load_run(run), PRIMARY[:1] if case == "one length" else PRIMARY)
    assert check.verdict == "not measured" and check.reason.startswith(reason) and not check.tests
    assert nesting_sentence(check) == f"Nesting check: not measured in this run ({check.reason})."
    assert "\n" not in check.reason


def test_the_plain_fake_run_says_not_measured_in_its_report(tmp_path):
    run = make_run(tmp_path, drift=0.0)
    text = build_report(run)[0].read_text()
    assert "**Nesting check: not measured in this run (the cells of N = 64, 128, 256 were not scored" in text
    assert json.loads((run / "results.json").read_text())["nesting"]["verdict"] == "not measured"


def test_a_nan_cut_log_loss_is_refused_in_one_line(tmp_path):
    run = nested_run(tmp_path, {}, per_bar=False)
    path = run / "cells" / "n64" / "fold1-seed2.cell.json"
    cell = json.loads(path.read_text())
    cell["far_context"]["32"]["log_loss"] = float("nan")
    write_json(path, cell)
    check = nesting_check(load_run(run), PRIMARY)
    assert check.verdict == "not measured"
    assert check.reason.startswith("the run-level test cannot run: losses and bar counts must be finite (no NaN): "
                                   "N=64 cut to 32 has 1 non-finite rows, the first on fold 1 seed 2")


def test_the_published_second_edition_fails_the_check_on_the_log_loss():
    """The issue's numbers, from the committed cell summaries: N=32768 cut to 512 is 0.0054 per bar
    worse than N=512 (p 0.056 over folds), N=4096 cut to 512 0.0022 (p 0.022, Holm p 0.044)."""
    if not any(SECOND_EDITION.glob("cells/n32768/*.cell.json")):
        pytest.skip("the second edition's cell summaries are absent")
    check = nesting_check(load_run(SECOND_EDITION), ["n512", "n4096", "n32768"])
    assert check.source == SUMMARIES and check.cut == 512 and check.verdict == "fails"
    by = {t.n: t.parts["log_loss"] for t in check.tests}
    assert by[32768].estimate == pytest.approx(0.0054247, abs=1e-6) and by[32768].p == pytest.approx(0.0561, abs=1e-3)
    assert by[4096].estimate == pytest.approx(0.0022130, abs=1e-6) and by[4096].p_holm == pytest.approx(0.0444, abs=1e-3)
    assert [t.n for t in check.failed] == [4096]
    assert check.gaps[32768]["log_loss"].estimate == pytest.approx(0.0035210, abs=1e-6)
