"""The nesting check over training runs (issue 29, `tsflash.stats.runs.nesting_tests`) on simulated
runs: a planted loss of short-range skill is flagged, equal skill is rejected at about the test's
level over many simulated datasets (and fails the check at about half of it: only a worse cut fails), per-run means give the same test as per-day sums, and bad input is
refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.stats.runs import (
    FAILS,
    NOT_MEASURED,
    PASSES,
    RunNoise,
    Runs,
    RunTestInputError,
    binomial_interval,
    nesting_tests,
    nesting_verdict,
    run_level_test,
    run_means,
    runs_from_means,
    simulate_runs,
)

# The second edition's sizes (seed sd 0.0027 per bar) without the fold's and the day's market: they
# are common to every run of a fold and cancel in its difference, so arms drawn apart stay paired.
NOISE = RunNoise(fold=0.0, day=0.0)


def _check(rng, differences: dict[int, float], n_days: int = 8):
    """nesting_tests with one short arm and a cut arm per long N, `differences[N]` per bar worse on
    the log-loss; the short runs are shared, as in a report."""
    short, cut = None, {}
    for n, d in differences.items():
        a, b = simulate_runs(rng, difference=d, noise=NOISE, n_days=n_days, labels=("N=512", f"N={n} cut"))
        short = short or a
        cut[n] = {"log_loss": b}
    return nesting_tests({"log_loss": short}, cut, cut_length=512)


def test_a_planted_loss_of_short_range_skill_fails_the_check():
    rng = np.random.default_rng(1)
    tests = _check(rng, {4096: 0.0, 32768: 0.02})  # 0.02 per bar: about 7 seed sds
    by = {t.n: t for t in tests}
    assert by[32768].lost_skill and by[32768].parts["log_loss"].estimate > 0.01
    assert by[32768].parts["log_loss"].p_holm <= 0.05 and by[32768].parts["log_loss"].verdict == "worse"
    assert nesting_verdict(tests) == FAILS and nesting_verdict([]) == NOT_MEASURED


def test_a_cut_model_better_than_the_short_one_passes():
    tests = _check(np.random.default_rng(2), {4096: -0.02})
    assert tests[0].parts["log_loss"].verdict == "better" and not tests[0].lost_skill
    assert nesting_verdict(tests) == PASSES


def test_equal_skill_passes_at_about_the_tests_level_over_simulated_datasets():
    """400 datasets, one long N of equal skill: the two-sided test rejects in about alpha of them and
    the check fails (rejects with the cut model worse) in about alpha / 2."""
    rng = np.random.default_rng(3)
    n = 400
    tests = [_check(rng, {4096: 0.0}, n_days=4)[0] for _ in range(n)]
    rejected = sum(t.parts["log_loss"].p <= 0.05 for t in tests)
    lo, hi = binomial_interval(rejected, n, level=0.99)
    assert lo <= 0.05 <= hi, (rejected, lo, hi)
    fails = sum(t.lost_skill for t in tests)
    lo, hi = binomial_interval(fails, n, level=0.99)
    assert lo <= 0.025 <= hi, (fails, lo, hi)


def test_the_false_positive_rate_of_the_check_is_half_alpha_with_holm_over_two_long_ns():
    rng = np.random.default_rng(4)
    n = 300
    fails = sum(nesting_verdict(_check(rng, {4096: 0.0, 32768: 0.0}, n_days=4)) == FAILS for _ in range(n))
    lo, hi = binomial_interval(fails, n, level=0.99)
    assert lo <= 0.025 and fails / n <= 0.05, (fails, lo, hi)


def test_per_run_means_give_the_same_test_as_per_day_sums():
    a, b = simulate_runs(np.random.default_rng(5), difference=0.003, n_days=6)
    means = {}
    for runs in (a, b):
        m = run_means(runs)
        keys = [(f, s) for f in m for s in m[f]]
        count = [runs.count[(runs.fold == f) & (runs.seed == s)].sum() for f, s in keys]
        means[runs.label] = runs_from_means(runs.label, [f for f, _ in keys], [s for _, s in keys],
                                            [m[f][s] for f, s in keys], count)
    direct, via = run_level_test(a, b), run_level_test(means["A"], means["B"])
    assert via.estimate == pytest.approx(direct.estimate, rel=1e-12) and via.p == pytest.approx(direct.p, rel=1e-9)


def test_the_parts_add_up_to_the_log_loss_in_the_tests():
    """The run-level estimate is linear in the runs' means, so parts that add up run by run give
    estimates and fold differences that add up (float64)."""
    rng = np.random.default_rng(6)
    fold, seed = np.repeat(np.arange(5), 3), np.tile(np.arange(3), 5)
    count = np.full(15, 1000.0)
    arms = {}
    for arm in ("short", "cut"):
        move, direction = rng.normal(0.6, 0.003, 15), rng.normal(0.4, 0.003, 15)
        arms[arm] = {"move": runs_from_means(arm, fold, seed, move, count),
                     "direction": runs_from_means(arm, fold, seed, direction, count),
                     "log_loss": runs_from_means(arm, fold, seed, move + direction, count)}
    t = nesting_tests(arms["short"], {4096: arms["cut"]}, cut_length=512)[0]
    assert set(t.parts) == {"log_loss", "move", "direction"}
    total, move, direction = (t.parts[p] for p in ("log_loss", "move", "direction"))
    assert total.estimate == pytest.approx(move.estimate + direction.estimate, abs=1e-15)
    np.testing.assert_allclose(total.fold_differences, np.add(move.fold_differences, direction.fold_differences),
                               atol=1e-15)


def test_only_the_parts_every_arm_has_are_tested():
    a, b = simulate_runs(np.random.default_rng(7), n_days=4)
    t = nesting_tests({"log_loss": a, "move": a}, {4096: {"log_loss": b}}, cut_length=512)[0]
    assert set(t.parts) == {"log_loss"}


@pytest.mark.parametrize("case, match", [
    ("unknown part", r"nesting parts must be among \('log_loss', 'move', 'direction'\), got \['volatility'\]"),
    ("no long N", "needs at least one N longer than 512, got none"),
    ("not longer", r"every nested N must be longer than the cut 512, got N = \[512\]"),
    ("no log-loss", "needs the log-loss of every arm"),
    ("NaN", "losses and bar counts must be finite"),
    ("other folds", "both arms need runs on the same folds"),
])
def test_bad_input_is_refused_in_one_line(case, match):
    a, b = simulate_runs(np.random.default_rng(8), n_days=4)
    short, cut = {"log_loss": a}, {4096: {"log_loss": b}}
    if case == "unknown part":
        short["volatility"] = a
    elif case == "no long N":
        cut = {}
    elif case == "not longer":
        cut = {512: {"log_loss": b}}
    elif case == "no log-loss":
        cut = {4096: {"move": b}}
    elif case == "NaN":
        b.loss[3] = np.nan
    elif case == "other folds":
        cut = {4096: {"log_loss": Runs(b.label, b.fold + 1, b.seed, b.day, b.loss, b.count)}}
    with pytest.raises(RunTestInputError, match=match) as err:
        nesting_tests(short, cut, cut_length=512)
    assert "\n" not in str(err.value)
