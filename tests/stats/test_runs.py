"""Tests for tsflash.stats.runs: the run-level test's size and power on simulated runs, its p-value
against a hand computation, its input rules, A/A splits, the power formula against simulation
and PBO's null distribution with three candidates."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tsflash.errors import UserError
from tsflash.stats.forecasts import holm
from tsflash.stats.runs import (
    RunNoise,
    Runs,
    RunTestInputError,
    VarianceComponents,
    aa_tests,
    binomial_interval,
    holm_adjust,
    min_detectable_difference,
    pbo_null,
    power_of,
    run_level_test,
    run_means,
    runs_from_table,
    seed_splits,
    simulate_runs,
)

NOISE = RunNoise()  # the second edition's log-loss sizes
SECOND_EDITION = Path(__file__).resolve().parents[2] / "reports" / "h200-btcusdt-1m-second-edition"


def _rejections(n_datasets: int, difference: float, rng, **kw) -> int:
    return sum(run_level_test(*simulate_runs(rng, difference=difference, **kw)).p <= 0.05
               for _ in range(n_datasets))


def _upper(n: int, rate: float = 0.05) -> float:
    """The largest rejection rate an exact binomial test at 1 % leaves plausible for `rate`."""
    return stats.binom.ppf(0.99, n, rate) / n


def _tiny_runs(means: dict[tuple[int, int], float], label: str) -> Runs:
    """Runs with two days per run, each day half the bars, at the given (fold, seed) mean loss per bar."""
    rows = [(f, s, d, m * 100 + (1 if d else -1), 100.0) for (f, s), m in means.items() for d in (0, 1)]
    f, s, d, loss, count = map(np.array, zip(*rows, strict=True))
    return Runs(label, f, s, d, loss, count)


# ---------------------------------------------------------------------------------------------
# the primary test


def test_size_with_realistic_seed_effects_and_no_difference():
    rng = np.random.default_rng(11)
    n = 200
    k = _rejections(n, 0.0, rng, noise=RunNoise(interaction=0.001))
    assert k / n <= _upper(n), f"{k} of {n} A/B datasets rejected with no true difference"


def test_rejects_most_at_three_seed_sds():
    rng = np.random.default_rng(12)
    n = 100
    assert _rejections(n, 3 * NOISE.seed, rng) >= 0.8 * n


def test_p_value_by_hand():
    a_means = {(0, 0): 1.00, (0, 1): 1.02, (1, 0): 0.90, (1, 1): 0.93, (2, 0): 1.10, (2, 1): 1.12}
    b_means = {(0, 5): 1.03, (0, 6): 1.02, (1, 5): 0.95, (1, 6): 0.94, (2, 5): 1.11, (2, 6): 1.14}
    r = run_level_test(_tiny_runs(a_means, "A"), _tiny_runs(b_means, "B"))
    d = np.array([(1.03 + 1.02 - 1.00 - 1.02) / 2, (0.95 + 0.94 - 0.90 - 0.93) / 2, (1.11 + 1.14 - 1.10 - 1.12) / 2])
    t = d.mean() / (d.std(ddof=1) / np.sqrt(3))
    assert r.estimate == pytest.approx(d.mean())
    assert r.t == pytest.approx(t)
    assert r.df == 2
    assert r.p == pytest.approx(2 * stats.t.sf(abs(t), 2))
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert r.ci == pytest.approx((d.mean() - half, d.mean() + half))
    seed_var = np.mean([np.var(p, ddof=1) for p in ([1.00, 1.02], [0.90, 0.93], [1.10, 1.12],
                                                     [1.03, 1.02], [0.95, 0.94], [1.11, 1.14])])
    assert r.components.within_fold_seed == pytest.approx(seed_var)
    assert r.components.between_fold == pytest.approx(max(0.0, d.var(ddof=1) - seed_var))
    assert (r.n_runs_a, r.n_runs_b, r.folds) == (6, 6, (0, 1, 2))


def test_verdicts_and_holm():
    rng = np.random.default_rng(3)
    better = run_level_test(*simulate_runs(rng, difference=-10 * NOISE.seed))
    worse = run_level_test(*simulate_runs(rng, difference=10 * NOISE.seed))
    assert (better.verdict, worse.verdict) == ("better", "worse")
    same = run_level_test(*simulate_runs(rng, difference=0.0, noise=RunNoise(seed=1.0)))
    family = holm_adjust([better, worse, same])
    assert [r.p_holm for r in family] == pytest.approx(holm([better.p, worse.p, same.p]).tolist())
    assert all(r.p_holm >= r.p for r in family)
    assert family[2].verdict == "no better"


def test_runs_from_table_reads_seed_members_only():
    table = {"series": np.array(["n512"] * 4 + ["n4096"] * 2, dtype=object),
             "member": np.array(["seed0", "seed1", "ensemble", "seed0", "seed0", "seed1"], dtype=object),
             "fold": np.array([0, 0, 0, 1, 0, 0]), "day": np.array([1, 1, 1, 2, 1, 1]),
             "log_loss": np.array([10.0, 12.0, 11.0, 9.0, 1.0, 1.0]), "n_labelled": np.array([10.0, 10, 10, 10, 1, 1])}
    runs = runs_from_table(table, "n512", label="N=512")
    assert run_means(runs) == {0: {0: 1.0, 1: 1.2}, 1: {0: 0.9}}
    with pytest.raises(UserError, match="no single runs .* 'n32768'"):
        runs_from_table(table, "n32768")


def test_second_edition_as_the_issue_recomputed_it():
    """The committed second edition's per-day loss sums: the issue's figures (one-sample t over the
    5 fold means of 15 runs per N; smallest Holm p of the four 0.089)."""
    from tsflash.report.compute import SCORES, read_table

    table = read_table(SECOND_EDITION / "forecast_daily.parquet")
    results = []
    for score, expected in (("log_loss", ((0.00117, 0.14), (0.00352, 0.097))),
                            ("direction", ((0.00025, 0.48), (0.00147, 0.022)))):
        loss, count = SCORES[score]
        base = runs_from_table(table, "n512", loss=loss, count=count)
        for key, (estimate, p) in zip(("n4096", "n32768"), expected, strict=True):
            r = run_level_test(base, runs_from_table(table, key, loss=loss, count=count))
            assert r.estimate == pytest.approx(estimate, abs=5e-6) and r.p == pytest.approx(p, abs=0.005)
            results.append(r)
    family = holm_adjust(results)
    assert min(r.p_holm for r in family) == pytest.approx(0.089, abs=0.0005)
    assert {r.verdict for r in family} == {"no better"}


# ---------------------------------------------------------------------------------------------
# bad input


def test_fewer_than_two_runs_per_fold():
    a, b = simulate_runs(np.random.default_rng(0), n_folds=4)
    keep = ~((a.fold == 3) & (a.seed > 0))
    a = Runs("N=512", a.fold[keep], a.seed[keep], a.day[keep], a.loss[keep], a.count[keep])
    with pytest.raises(RunTestInputError, match="each arm needs at least 2 runs per fold: N=512 has 1 on fold 3"):
        run_level_test(a, b)


def test_runs_on_different_folds():
    a, b = simulate_runs(np.random.default_rng(0), n_folds=3, labels=("N=512", "N=4096"))
    b = Runs(b.label, np.where(b.fold == 2, 7, b.fold), b.seed, b.day, b.loss, b.count)
    with pytest.raises(RunTestInputError, match=r"same folds: N=512 has folds \[0, 1, 2\], N=4096 has \[0, 1, 7\]"):
        run_level_test(a, b)


def test_nan_losses():
    a, b = simulate_runs(np.random.default_rng(0), n_folds=3, labels=("N=512", "N=4096"))
    loss = b.loss.copy()
    loss[5] = np.nan
    b = Runs(b.label, b.fold, b.seed, b.day, loss, b.count)
    rule = "finite .no NaN.: N=4096 has 1 non-finite rows, the first on fold 0 seed 0 day 5"
    with pytest.raises(RunTestInputError, match=rule):
        run_level_test(a, b)


def test_runs_of_a_fold_on_different_days():
    a, b = simulate_runs(np.random.default_rng(0), n_folds=2, n_days=4, labels=("N=512", "N=4096"))
    b = Runs(b.label, b.fold, b.seed, b.day + 1, b.loss, b.count)
    with pytest.raises(RunTestInputError, match="same days"):
        run_level_test(a, b)


# ---------------------------------------------------------------------------------------------
# A/A


def test_seed_splits():
    assert seed_splits(range(6), "halves") == [((0, 1, 2), (3, 4, 5))]
    all6 = seed_splits(range(6), "all")
    assert len(all6) == 10 and all(set(x).isdisjoint(y) and len(x) == len(y) == 3 for x, y in all6)
    assert seed_splits([0, 1, 2], "all") == [((0,), (1, 2)), ((1,), (0, 2)), ((2,), (0, 1))]
    assert len(seed_splits(range(3), "pairs")) == 3
    with pytest.raises(RunTestInputError, match="how must be"):
        seed_splits(range(4), "thirds")


def test_aa_on_one_arm_rarely_rejects():
    rng = np.random.default_rng(5)
    n = 200  # independent datasets, one split each: a binomial count
    k = sum(aa_tests(simulate_runs(rng, n_seeds=6)[0], "halves")[0].result.p <= 0.05 for _ in range(n))
    assert k / n <= _upper(n)
    assert binomial_interval(k, n)[0] <= 0.05


def test_aa_all_splits_and_single_seeds():
    a = simulate_runs(np.random.default_rng(6), n_seeds=6)[0]
    results = aa_tests(a, "all")
    assert len(results) == 10 and all(c.result.n_runs_a == c.result.n_runs_b == 15 for c in results)
    assert results[0].seeds_a == (0, 1, 2) and results[0].result.arm_b == "A seeds 3,4,5"
    with pytest.raises(RunTestInputError, match="at least 2 runs per fold"):
        aa_tests(a, "pairs")
    singles = aa_tests(a, "pairs", min_seeds_per_fold=1)
    assert len(singles) == 15 and all(math.isnan(c.result.components.within_fold_seed) for c in singles)


def test_binomial_interval():
    lo, hi = binomial_interval(10, 200)
    assert lo == pytest.approx(stats.binomtest(10, 200).proportion_ci(method="exact").low)
    assert hi == pytest.approx(stats.binomtest(10, 200).proportion_ci(method="exact").high)
    assert binomial_interval(0, 20)[0] == 0.0 and binomial_interval(20, 20)[1] == 1.0


# ---------------------------------------------------------------------------------------------
# power


def test_min_detectable_difference_shrinks_with_seeds():
    c = VarianceComponents(between_fold=1e-6, within_fold_seed=7.2e-6, seed_df=20)
    mdd3, mdd6 = (min_detectable_difference(c, 5, s) for s in (3, 6))
    assert mdd6 < mdd3
    assert min_detectable_difference(c, 10, 3) < mdd3
    assert power_of(mdd3, c, 5, 3) == pytest.approx(0.8, abs=1e-6)
    # no between-fold part: sd of d_f sqrt(2 * 7.2e-6 / 3), se over 5 folds; the 80 % ncp at df 4
    ncp = mdd3 / (math.sqrt(2 * 7.2e-6 / 3 + 1e-6) / math.sqrt(5))
    assert 3.5 < ncp < 4.5
    with pytest.raises(RunTestInputError, match="alpha < power"):
        min_detectable_difference(c, 5, 3, power=0.01)


def test_simulated_power_at_the_min_detectable_difference():
    noise = RunNoise(interaction=0.001)
    mdd = min_detectable_difference(noise.components(182), 5, 3)
    n = 600
    k = _rejections(n, mdd, np.random.default_rng(8), noise=noise)
    lo, hi = binomial_interval(k, n, 0.99)
    assert lo <= 0.8 <= hi, f"power {k / n:.3f} at the min detectable difference {mdd:.5f}"


# ---------------------------------------------------------------------------------------------
# PBO's null with three candidates


def test_pbo_null_three_candidates():
    null = pbo_null(3, 911, 16, n_replicates=40, observed=0.793, rng=np.random.default_rng(1))
    assert null.values.shape == (40,)
    assert 0.6 < null.mean < 0.75  # the issue: about 0.675
    assert 0.2 < null.p_at_least < 0.6  # the issue: 0.40
    assert null.quantiles[0.05] <= null.quantiles[0.5] <= null.quantiles[0.95]


@pytest.mark.slow
def test_pbo_null_matches_the_issue():
    null = pbo_null(3, 911, 16, n_replicates=400, observed=0.793, rng=np.random.default_rng(2))
    assert null.mean == pytest.approx(0.675, abs=0.03)
    assert null.p_at_least == pytest.approx(0.40, abs=0.07)
