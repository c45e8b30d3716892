"""lab/power_ladder.py: its statistics on hand-made rates, its schedule, the cost plan from
the calibrated table, and a tiny CPU ladder through the whole pipeline (under a minute): the
strongest planted strength is detected by the run-level test, the iid null is not."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from tests.conftest import load_experiment, one_thread
from tests.lab.test_controls import TOY


@pytest.fixture(scope="module")
def ladder():
    return load_experiment("power_ladder")


def test_detection_rate_is_the_exact_binomial_interval(ladder):
    d = ladder.detection_rate(9, 10)
    assert d["rate"] == 0.9 and d["ci"] == pytest.approx([0.5550, 0.9975], abs=1e-4)  # Clopper-Pearson
    assert ladder.detection_rate(0, 10)["ci"][0] == 0.0 and ladder.detection_rate(10, 10)["ci"][1] == 1.0
    assert np.isnan(ladder.detection_rate(0, 0)["rate"])


def test_effect_at_80_percent_power(ladder):
    effects = [0.001, 0.004, 0.016, 0.064]
    # crosses 0.8 half-way from 0.6 to 1.0 between 0.016 and 0.064: the geometric mean
    p = ladder.effect_at_power(effects, [0.0, 0.2, 0.6, 1.0], [10] * 4)
    assert p["how"] == "interpolated" and p["effect"] == pytest.approx(0.032)
    # a non-monotone pair is pooled first (1.0, 0.8 -> 0.9 at 0.004 and 0.016), then 0.8 is 4/5 of the way
    # from 0.4 at 0.001 to 0.9 at 0.004 in log(effect)
    p = ladder.effect_at_power(effects, [0.4, 1.0, 0.8, 1.0], [10] * 4)
    assert p["fitted"] == pytest.approx([0.4, 0.9, 0.9, 1.0]) and p["effect"] == pytest.approx(0.001 * 4 ** 0.8)
    assert ladder.effect_at_power(effects, [0.9, 1, 1, 1], [5] * 4)["how"] == "at most the weakest rung"
    assert ladder.effect_at_power(effects, [0, 0.1, 0.2, 0.5], [5] * 4) == {
        "effect": None, "how": "beyond the strongest rung", "fitted": [0, 0.1, 0.2, 0.5]}


def test_the_detection_curve_recovers_a_known_80_percent_point_from_its_expected_counts(ladder):
    """Counts at their expectation under a known curve (floor 0.025, slope 3, 80 % at 0.02 nats) with
    many replicates: the one-curve reading's interval holds the true point and is narrow."""
    from scipy.special import logit

    effects = np.array([0.001, 0.004, 0.016, 0.064])
    floor, slope, true = 0.025, 3.0, 0.02
    location = np.log(true) - logit((0.8 - floor) / (1 - floor)) / slope
    p = ladder._detection_probability(np.log(effects), location, slope, floor)
    n = 2000
    fit = ladder.detection_curve(effects, np.round(p * n), [n] * 4, (round(floor * n), n))
    assert fit["ci"][0] <= true <= fit["ci"][1] and fit["ci"][1] / fit["ci"][0] < 1.3
    # within the grid's resolution (its location step is 0.13 in log effect here)
    assert fit["effect"] == pytest.approx(true, rel=0.1) and fit["how"] == "within the ladder"


def test_the_detection_curve_says_where_the_ladder_cannot_place_the_point(ladder):
    effects = [0.001, 0.0063, 0.025, 0.1]
    # more detections at every rung: a smaller 80 % point
    few, many = (ladder.detection_curve(effects, k, [5] * 4, (0, 5)) for k in ([0, 1, 3, 4], [0, 3, 5, 5]))
    assert many["effect"] < few["effect"] and few["ci"][0] < few["effect"] < few["ci"][1]
    beyond = ladder.detection_curve(effects, [0, 0, 0, 1], [5] * 4, (0, 5))
    assert beyond["how"] == "beyond the strongest rung" and beyond["p_within"] < 0.05 and beyond["ci"][0] > 0.1
    below = ladder.detection_curve(effects, [5, 5, 5, 5], [5] * 4, (0, 5))
    assert below["how"] == "at most the weakest rung" and below["ci"][1] < 0.002
    assert ladder.detection_curve(effects, [0] * 4, [0] * 4) is None  # no replicate yet


def test_a_design_study_reads_simulated_ladders_and_counts_coverage(ladder):
    rows = ladder.design_study([0.001, 0.0063, 0.025, 0.1], [0.02], [3.0], [10], sims=40, seed=1)
    (row,) = rows
    assert (row["true_effect"], row["slope"], row["replicates"], row["sims"]) == (0.02, 3.0, 10, 40)
    assert 0.75 <= row["coverage"] <= 1 and 1 < row["median_width"] < 10 and row["within"] > 0.9
    # the same seed, the same ladders
    assert ladder.design_study([0.001, 0.0063, 0.025, 0.1], [0.02], [3.0], [10], sims=40, seed=1) == rows


def test_schedule_is_replicate_major_with_the_null_last(ladder, tmp_path):
    args = ladder.argparse.Namespace(strengths=[0.05, 0.2], no_null=False, replicates=2, runs=tmp_path, echo="lag=48",
                                     lengths="16,128", device="cpu", preset="cpu", config="default", seed=3,
                                     overrides=["train.seeds=[0]"])
    order = [(r.name, k) for r, k in ladder.schedule(args)]
    assert order == [("strength-0.05", 0), ("strength-0.2", 0), ("iid", 0),
                     ("strength-0.05", 1), ("strength-0.2", 1), ("iid", 1)]
    rep = ladder.replicate_args(args, ladder.Rung(0.2), 1)
    argv = ladder.controls.sweep_argv("long-memory", rep, None)
    assert argv[:3] == ["sweep", "--data", "synthetic:long-memory:4:lag=48,strength=0.2"]
    assert str(tmp_path / "strength-0.2" / "rep01" / "long-memory") in argv
    assert argv[-2:] == ["--set", "train.seeds=[0]"]  # the caller's settings after the ladder's design
    # each replicate its own initial weights: replicate 1 trains seeds 2 and 3 unless the caller says
    own = ladder.controls.sweep_argv("long-memory", ladder.replicate_args(
        ladder.argparse.Namespace(**{**vars(args), "overrides": []}), ladder.Rung(0.2), 1), None)
    assert own[-2:] == ["--set", "train.seeds=[2, 3]"]
    null = ladder.controls.sweep_argv("iid", ladder.replicate_args(args, ladder.Rung(None), 0), None)
    assert null[2] == "synthetic:iid:3"
    # --device all (a machine of several GPUs): each replicate's sweep takes one worker a GPU
    for device in ("all", "cuda:0,cuda:1"):
        several = ladder.replicate_args(ladder.argparse.Namespace(**{**vars(args), "device": device}), ladder.Rung(0.2), 1)
        argv = ladder.controls.sweep_argv("long-memory", several, None)
        assert argv[argv.index("--devices") + 1] == device and "--device" not in argv
    one = ladder.controls.sweep_argv("long-memory", rep, None)  # one device (cpu): the sweep's --device
    assert one[one.index("--device") + 1] == "cpu" and "--devices" not in one


def test_the_cost_plan_reads_the_calibrated_table(ladder):
    plan = ladder.cost_plan(ladder.parse_args([]))  # the script's defaults: 512 and 32768, 8 rungs and the null
    assert plan["cells"] == 12  # 2 lengths x 3 folds x 2 seeds
    # the cuda rows: about 8 s a cell at 512, 30 s at 32768, 7-8 s a fold's baselines
    assert 150 < plan["replicate_s"] < 400 and plan["replicate_s"] < plan["replicate_worst_s"] < 700, plan
    assert plan["replicates"] >= plan["replicates_worst"] >= 1
    assert plan["replicates_planned"] == 9 * 3 and plan["ladder_s"] == 27 * plan["replicate_s"]
    assert plan["ladder_worst_s"] == 27 * plan["replicate_worst_s"]


def test_a_tiny_ladder_detects_the_strongest_strength_and_not_the_null(ladder, tmp_path):
    t0 = time.process_time()
    argv = ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "power"), "--strengths", "0.6", "--echo", "lag=48",
            "--replicates", "1", "--lengths", "16,128", "--device", "cpu", "--preset", "cpu", "--seed", "1"]
    argv += [x for item in [*TOY, "splits.n_folds=3"] for x in ("--set", item)]
    with one_thread():  # faster on a small shared machine, and bit-identical
        assert ladder.main(argv) == 0
    seconds = time.process_time() - t0
    summary = json.loads((tmp_path / "power" / "summary.json").read_text())
    strong, null = summary["rungs"]
    print({r["rung"]: {s: r[s]["estimates"] + r[s]["p"] for s in ("log_loss", "direction")} for r in summary["rungs"]},
          f"{seconds:.0f} s CPU")
    assert summary["complete"] and strong["rung"] == "strength-0.6" and null["rung"] == "iid"
    assert strong["log_loss"]["detected"]["k"] == 1 and strong["direction"]["detected"]["k"] == 1
    assert strong["oracle_gain"] > 0.1
    assert null["log_loss"]["rejected"]["k"] == 0 and null["direction"]["rejected"]["k"] == 0
    assert null["oracle_gain"] is None
    md = (tmp_path / "power" / "summary.md").read_text()
    assert "| strength-0.6 |" in md and "| iid | 0 (null) | 1 |" in md
    assert not (tmp_path / "runs" / "summary.md").exists()  # the summary goes to --out only
    assert seconds < 60


def test_a_replicate_is_detected_by_the_crossed_test_not_the_fold_t(ladder):
    """The ladder bounds the third edition's primary (crossed) test: a replicate whose gain is one
    seed's luck (every fold of seed 0 better, seed 1 not) is "better" by the fold t, which ignores a
    seed's effect, and not by the crossed test; the rung counts it as not detected, with the fold t's
    count beside it."""
    from tsflash.stats.runs import crossed_seed_test, run_level_test, runs_from_means

    folds, seeds = [0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1]
    short = [1.0] * 6
    long = [1.0 - 0.02 + 0.0001 * f if s == 0 else 1.0 - 0.0001 * f for f, s in zip(folds, seeds, strict=True)]
    a, b = (runs_from_means(label, folds, seeds, m, [1000] * 6) for label, m in (("N=16", short), ("N=128", long)))
    reading = ladder.Reading(crossed_seed_test(a, b), run_level_test(a, b))
    assert reading.fold_t.verdict == "better" and not reading.detected
    rung = ladder.rung_summary([{"log_loss": reading, "direction": reading}], [0.01])
    assert rung["log_loss"]["detected"]["k"] == 0 and rung["log_loss"]["detected_fold_t"]["k"] == 1
    # beside the counts, the crossed test's model power at 5 folds x 3 seeds from the paired table's
    # components: no replicate's components, no model
    assert math.isnan(rung["log_loss"]["power_full_protocol"])
    from tsflash.stats.runs import CrossedComponents

    with_parts = reading._replace(components=CrossedComponents.from_runs(a, b))
    assert with_parts.components.seed > with_parts.components.residual  # the seed's luck, seen as such
    rung = ladder.rung_summary([{"log_loss": with_parts, "direction": with_parts}], [0.01], n_sims=500)
    assert 0.0 <= rung["log_loss"]["power_full_protocol"] <= 1.0
    assert rung["log_loss"]["detectable_full_protocol"] > abs(rung["log_loss"]["mean_estimate"])
