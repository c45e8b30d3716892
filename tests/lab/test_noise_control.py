"""lab/noise_control.py: the summarising functions on a tiny fake results list (no sweeps run)."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import load_experiment


@pytest.fixture(scope="module")
def nc():
    return load_experiment("noise_control")


def fake_results(selected: str, sharpes: dict, dsr, pbo, min_dsr=0.95, max_pbo=0.5) -> dict:
    """The parts of a run's results.json (tsflash.report) that the script reads."""
    passes_dsr = dsr is not None and dsr >= min_dsr
    passes_pbo = pbo is not None and pbo <= max_pbo
    return {
        "verdict": {"selected": selected, "selected_label": f"N={selected[1:]}", "dsr": dsr, "pbo": pbo,
                    "passes_dsr": passes_dsr, "passes_pbo": passes_pbo, "passed": passes_dsr and passes_pbo,
                    "min_dsr": min_dsr, "max_pbo": max_pbo, "reasons": ["r1", "r2", "r3"]},
        "selection": {"n_trials": len(sharpes), "n_days": 80, "min_dsr": min_dsr, "max_pbo": max_pbo,
                      "pbo": {"n_blocks": 16} if pbo is not None else None,
                      "candidates": [{"key": k, "sharpe": v, "sharpe_annual": v * math.sqrt(365),
                                      "dsr": dsr if k == selected else 0.1, "sr0": 0.05, "total_net": 0.0}
                                     for k, v in sharpes.items()]},
        "reproducibility": {"git_commit": "abc"},
    }


def test_row_from_results(nc):
    row = nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.97, 0.4), fee_bps=0, seed=3)
    assert row["seed"] == 3 and row["fee_bps"] == 0.0 and row["ok"]
    assert row["selected"] == "n64" and row["sharpe"] == pytest.approx(0.2)
    assert row["dsr"] == pytest.approx(0.97) and row["pbo"] == pytest.approx(0.4)
    assert row["passes_dsr"] and row["passes_pbo"] and row["passed"]
    assert row["candidate_sharpes"] == {"n32": 0.1, "n64": 0.2}
    # a run whose gates could not be evaluated (no PBO, NaN DSR) is a failing row, not an error
    bad = nc.row_from_results(fake_results("n32", {"n32": float("nan"), "n64": float("nan")}, float("nan"), None), 5, 0)
    assert bad["dsr"] is None and bad["pbo"] is None and not bad["passed"]


def test_summarize_pass_rates_and_markdown(nc):
    rows = []
    # 0 bps: 4 seeds; DSR passes on seeds 0 and 1, PBO passes on 0, 2, 3 -> both only on seed 0
    for seed, (dsr, pbo) in enumerate([(0.97, 0.3), (0.96, 0.7), (0.5, 0.2), (0.1, 0.4)]):
        rows.append(nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.3}, dsr, pbo), 0, seed))
    # 5 bps: 2 seeds that fail everything, and one failed run (excluded from the rates)
    for seed in range(2):
        rows.append(nc.row_from_results(fake_results("n32", {"n32": -0.5, "n64": -0.7}, 0.0, 0.9), 5, seed))
    rows.append({"fee_bps": 5.0, "seed": 2, "ok": False, "error": "exit 1: boom"})

    s = nc.summarize(rows)
    assert list(s["by_fee"]) == ["5", "0"]  # the default fee first
    z = s["by_fee"]["0"]
    assert z["runs_ok"] == 4 and z["runs_failed"] == []
    assert (z["dsr"]["passes"], z["dsr"]["rate"]) == (2, 0.5)
    assert (z["pbo"]["passes"], z["pbo"]["rate"]) == (3, 0.75)
    assert (z["both"]["passes"], z["both"]["rate"]) == (1, 0.25)
    assert z["dsr"]["nominal"] == pytest.approx(0.05) and z["pbo"]["nominal"] is None
    lo, hi = z["both"]["wilson95"]
    assert 0 < lo < 0.25 < hi < 1
    # P(X >= 1 | n = 4, p = 0.05) = 1 - 0.95^4
    assert z["both"]["p_value_at_nominal"] == pytest.approx(1 - 0.95**4)
    assert z["median_dsr"] == pytest.approx((0.5 + 0.96) / 2)
    assert z["mean_candidate_sharpe"] == pytest.approx(0.2)
    f = s["by_fee"]["5"]
    assert f["runs_ok"] == 2 and f["runs_failed"] == [2]
    assert f["dsr"]["passes"] == f["pbo"]["passes"] == f["both"]["passes"] == 0 and f["both"]["rate"] == 0.0
    assert f["both"]["p_value_at_nominal"] == 1.0
    json.dumps(s)  # JSON-serialisable as written

    md = nc.render_markdown(s, {"command": "python lab/noise_control.py --seeds 4", "runtime_s": 12.0})
    assert "| 0 | 4 | 2/4 = 50%" in md
    assert "3/4 = 75%" in md and "1/4 = 25%" in md
    assert "| 5 | 2 (1 failed) | 0/2 = 0%" in md
    assert "run failed: exit 1: boom" in md
    assert "DSR >= 0.95, PBO <= 0.5" in md and "python lab/noise_control.py --seeds 4" in md
    assert md.count("| 0 | ") >= 5  # the rate row and the 4 run rows


def _wilson_by_hand(k, n, z=1.959963984540054):
    """The score interval as the script used to write it (Wilson 1927), the reference for scipy's."""
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


@pytest.mark.parametrize("k, n", [(0, 10), (1, 4), (3, 10), (10, 10), (2, 37)])
def test_scipy_statistics_match_the_formulas(nc, k, n):
    assert nc.wilson_interval(k, n) == pytest.approx(_wilson_by_hand(k, n), abs=1e-12)
    tail = sum(math.comb(n, i) * 0.05**i * 0.95 ** (n - i) for i in range(k, n + 1))
    assert nc.binom_tail(k, n, 0.05) == pytest.approx(min(1.0, tail), rel=1e-9)
    assert nc.wilson_interval(0, 0) == (0.0, 1.0)


def test_t_statistic(nc):
    xs = [0.1, -0.05, 0.2, 0.03]
    m, s = sum(xs) / 4, math.sqrt(sum((x - sum(xs) / 4) ** 2 for x in xs) / 3)
    assert nc.t_statistic(xs) == pytest.approx(m / (s / 2), rel=1e-12)
    assert nc.t_statistic([0.1]) is None and nc.t_statistic([0.2, 0.2]) is None


# ---------------------------------------------------------------------------------------------
# the two questions


def fake_questions(answer, passed, none_profitable, available=True) -> dict:
    return {"forecast": {"available": available, "answer": answer if available else None, "shortest": "n32",
                         "comparisons": [{"reference": "n32", "score": "direction", "p_holm": 0.4},
                                         {"reference": "n32", "score": "log_loss", "p_holm": 0.03},
                                         {"reference": "baseline-logreg", "score": "direction", "p_holm": 0.001}]},
            "trading": {"strategy": "horizon", "none_profitable": none_profitable, "n_profitable": 0, "passed": passed,
                        "n_effective": 1.5, "dsr_effective": 0.2, "min_sharpe_annual": 3.1}}


def test_rows_carry_both_answers(nc):
    row = nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.5, 0.4), 0, 1,
                              fake_questions("better", False, True))
    assert row["q1_answer"] == "better" and row["q1_min_holm_p"] == 0.03  # against the shortest N only
    assert row["q1_direction_differs"] is False  # the direction comparison with the shortest N has Holm p 0.4
    assert row["q2_none_profitable"] is True and row["q2_strategy"] == "horizon" and row["q2_n_effective"] == 1.5
    # a significant direction difference whose lower loss has no skill is listed, not counted
    q = fake_questions("no better", False, True)
    q["forecast"]["comparisons"][0] |= {"p_holm": 0.009, "counts": False}
    row = nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.5, 0.4), 0, 1, q)
    assert row["q1_direction_differs"] is False and row["q1_direction_differs_unskilled"] == 1
    summary = nc.summarize([row | {"ok": True}])
    assert summary["questions"]["direction"]["unskilled"] == 1
    assert "was significant but its lower loss did not beat the no-skill forecast" in nc.render_markdown(summary)
    q["forecast"]["comparisons"][0].pop("counts")  # written before the rule: every significant difference counted
    assert nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.5, 0.4), 0, 1, q)["q1_direction_differs"]
    bare = nc.row_from_results(fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.5, 0.4), 0, 1)
    assert bare["q1_available"] is False and bare["q1_answer"] is None


def test_false_positive_bounds_with_exact_intervals(nc):
    rows = []
    answers = ["no better", "no better", "better", "worse", "no better"]
    for seed, answer in enumerate(answers):
        for fee in (5, 0):
            res = fake_results("n64", {"n32": 0.1, "n64": 0.2}, 0.97 if (fee == 0 and seed == 1) else 0.1, 0.3)
            rows.append(nc.row_from_results(res, fee, seed, fake_questions(answer, fee == 0 and seed == 1, fee == 5)))
    q = nc.summarize(rows)["questions"]
    f = q["forecast"]
    assert (f["false_positives"], f["runs"], f["not_tested"]) == (1, 5, 0)  # counted once per seed, not per fee
    assert f["answers"] == {"better": 1, "no better": 3, "worse": 1}  # "worse" is a "no"
    assert q["direction"]["false_positives"] == 0 and q["direction"]["bound95"] == pytest.approx(1 - 0.025 ** 0.2)
    lo, hi = f["exact95"]
    assert lo == pytest.approx(1 - 0.975 ** 0.2, rel=1e-9) and hi == pytest.approx(0.7164179, rel=1e-5)
    assert f["bound95"] == hi
    zero = q["trading"]["0"]
    assert zero["false_positives"] == 1 and zero["none_profitable"] == 0 and q["trading"]["5"]["none_profitable"] == 5
    # 0 of K: the exact upper bound is 1 - 0.025^(1/K)
    assert nc.exact_interval(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1), rel=1e-9)
    assert nc.exact_interval(0, 0) == (0.0, 1.0)
    md = nc.render_markdown(nc.summarize(rows))
    assert "## The two questions" in md
    assert ('Question 1 (forecasting): question 1 answers "better" (paired tests against the shortest N, Holm 5 %): '
            "1 of 5 runs, rate 20%, exact 95 % interval [0.5%, 71.6%]: the false-positive rate at this size is at most "
            "71.6%") in md
    assert "Question 1, the direction alone: a longer N differs from the shortest N on the direction score" in md
    assert "| 0 | 2 | better | no | 0.030 | fail | False | 1.50 | 3.10 |" in md


def test_the_full_size_arm_runs_the_default_protocol(nc, tmp_path):
    args = nc._parser().parse_args(["--full", "--device", "cuda", "--lengths", "512,4096,32768", "--time-budget", "420"])
    argv = nc.sweep_argv(3, 5.0, tmp_path / "seed3", args)
    assert argv[argv.index("--preset") + 1] == "full" and "--start" not in argv
    assert argv[argv.index("--time-budget") + 1] == "420" and argv[argv.index("--data") + 1] == "synthetic:random-walk:3"
    assert not set(nc.DEFAULT_OVERRIDES) & set(argv)
    small = nc.sweep_argv(3, 5.0, tmp_path / "seed3", nc._parser().parse_args([]))
    assert small[small.index("--preset") + 1] == "cpu" and "splits.n_folds=2" in small
    assert nc._parser().parse_args(nc.FULL_SIZE_COMMAND.split()[2:]).full  # the documented command parses
