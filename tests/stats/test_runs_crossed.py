"""tsflash.stats.runs.crossed_seed_test: fold and seed as crossed random effects (a seed is one set
of initial weights for every fold). Against a hand computation, its A/A false-positive rate measured
on simulated runs whose seeds carry an effect shared by their folds (where the fold t is not
calibrated), and its input rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tsflash.stats.runs import (
    CrossedComponents,
    RunNoise,
    Runs,
    RunTestInputError,
    VarianceComponents,
    crossed_power,
    crossed_seed_test,
    min_detectable_difference,
    paired_crossed_batch,
    simulate_runs,
)

NOISE = RunNoise()


def _runs(table: np.ndarray, label: str, seeds=None) -> Runs:
    """Runs of two days each (half the bars each) whose (fold, seed) mean loss per bar is table[f, s]."""
    seeds = list(range(table.shape[1])) if seeds is None else list(seeds)
    rows = [(f, seeds[j], d, table[f, j] * 100 + (1 if d else -1), 100.0)
            for f in range(table.shape[0]) for j in range(table.shape[1]) for d in (0, 1)]
    f, s, d, loss, count = map(np.array, zip(*rows, strict=True))
    return Runs(label, f, s, d, loss, count)


def _relabel(runs: Runs, offset: int) -> Runs:
    return Runs(runs.label, runs.fold, runs.seed + offset, runs.day, runs.loss, runs.count)


A = np.array([[1.00, 1.02, 0.99], [0.90, 0.93, 0.91], [1.10, 1.12, 1.08], [0.95, 0.99, 0.96]])
D = np.array([[0.010, -0.004, 0.002], [0.012, -0.001, 0.006], [0.008, -0.006, 0.001], [0.011, -0.002, 0.004]])


def test_paired_seeds_by_hand():
    r = crossed_seed_test(_runs(A, "A"), _runs(A + D, "B"))
    n_f, n_s = D.shape
    g = D.mean()
    ms_f = sum(n_s * (D[f].mean() - g) ** 2 for f in range(n_f)) / (n_f - 1)
    ms_s = sum(n_f * (D[:, s].mean() - g) ** 2 for s in range(n_s)) / (n_s - 1)
    ms_e = sum((D[f, s] - D[f].mean() - D[:, s].mean() + g) ** 2
               for f in range(n_f) for s in range(n_s)) / ((n_f - 1) * (n_s - 1))
    assert ms_s > ms_e  # the seeds differ: seed 0 is +0.010 in every fold, seed 1 below 0
    var = (ms_f + ms_s - ms_e) / (n_f * n_s)
    df = var ** 2 / ((ms_f / (n_f * n_s)) ** 2 / (n_f - 1) + (ms_s / (n_f * n_s)) ** 2 / (n_s - 1)
                     + (ms_e / (n_f * n_s)) ** 2 / ((n_f - 1) * (n_s - 1)))
    assert r.paired and r.seed_estimable
    assert r.estimate == pytest.approx(g)
    assert r.se == pytest.approx(math.sqrt(var))
    assert r.df == pytest.approx(df)
    assert r.p == pytest.approx(2 * stats.t.sf(abs(g / math.sqrt(var)), df))
    assert r.seed_main[0] == pytest.approx((ms_s - ms_e) / n_f)
    # the fold t sees four nearly equal fold differences and calls them an effect; over seeds it is not one
    assert r.fold_t_p < 0.05 and r.p > 0.3


def test_disjoint_seeds_add_each_arms_seed_main_effect():
    b = A + D.mean(axis=1, keepdims=True) + np.array([[0.004, -0.003, 0.0]])
    r = crossed_seed_test(_runs(A, "A"), _relabel(_runs(b, "B"), 10))
    assert not r.paired
    d_f = b.mean(axis=1) - A.mean(axis=1)
    var = d_f.var(ddof=1) / 4
    for t in (A, b):
        g, rows, cols = t.mean(), t.mean(axis=1), t.mean(axis=0)
        ms_s = 4 * ((cols - g) ** 2).sum() / 2
        ms_e = ((t - rows[:, None] - cols[None, :] + g) ** 2).sum() / 6
        var += max(0.0, ms_s - ms_e) / 12
    assert r.se == pytest.approx(math.sqrt(var))
    assert r.estimate == pytest.approx(d_f.mean())


def test_without_a_seed_main_effect_it_is_the_fold_t():
    no_seed = np.tile(np.array([[0.01], [0.02], [0.0], [0.015]]), (1, 3)) + np.array([[0.001, -0.001, 0.0]]) * \
        np.array([[1], [-1], [1], [-1]])  # seed deviations cancel over folds: MS_seed = 0 < MS_residual
    r = crossed_seed_test(_runs(A, "A"), _runs(A + no_seed, "B"))
    assert r.seed_main == (0.0,) and r.df == 3
    assert r.p == pytest.approx(r.fold_t_p)


def _aa_rates(rng, n: int, noise: RunNoise, disjoint: bool) -> tuple[int, int]:
    fold_t = crossed = 0
    for _ in range(n):
        a, b = simulate_runs(rng, noise=noise, n_days=20)
        r = crossed_seed_test(a, _relabel(b, 100) if disjoint else b)
        fold_t += r.fold_t_p <= 0.05
        crossed += r.p <= 0.05
    return fold_t, crossed


@pytest.mark.parametrize("disjoint", [True, False])
def test_aa_false_positive_rate_with_seed_effects_shared_by_folds(disjoint):
    # The echo's N=32768 runs: whether a seed finds it is the seed's (its initial weights), in every fold.
    rng = np.random.default_rng(29)
    n = 300
    fold_t, crossed = _aa_rates(rng, n, RunNoise(init=4 * NOISE.seed), disjoint)
    upper = stats.binom.ppf(0.99, n, 0.05) / n
    assert fold_t / n > 0.5, f"the fold t rejected {fold_t} of {n} A/A datasets"  # not calibrated here
    assert crossed / n <= upper, f"the crossed test rejected {crossed} of {n} A/A datasets"


def test_aa_false_positive_rate_without_seed_effects():
    rng = np.random.default_rng(30)
    n = 300
    fold_t, crossed = _aa_rates(rng, n, NOISE, True)
    upper = stats.binom.ppf(0.99, n, 0.05) / n
    assert fold_t / n <= upper and crossed / n <= upper


def test_input_rules():
    with pytest.raises(RunTestInputError, match="same seeds in both arms or disjoint ones"):
        crossed_seed_test(_runs(A, "A"), _runs(A, "B", seeds=[0, 7, 8]))
    ragged = _runs(A, "B")
    keep = ~((ragged.fold == 0) & (ragged.seed == 2))
    ragged = Runs("B", ragged.fold[keep], ragged.seed[keep], ragged.day[keep], ragged.loss[keep], ragged.count[keep])
    with pytest.raises(RunTestInputError, match="same seeds on every fold"):
        crossed_seed_test(_runs(A, "A"), ragged)


# ---- the crossed test's power (the third edition's choice of seeds) ------------------------------


def test_components_of_a_paired_table_recover_the_seed_effect():
    # many folds and seeds, so the mean squares are close to their expectations
    rng = np.random.default_rng(31)
    noise = RunNoise(init=3 * NOISE.seed)
    a, b = simulate_runs(rng, noise=noise, n_folds=40, n_seeds=40, n_days=20)
    c = CrossedComponents.from_runs(a, b)
    # the paired difference's seed part is the two arms' independent init draws: 2 init^2
    assert c.seed == pytest.approx(2 * noise.init ** 2, rel=0.35)
    assert c.fold == pytest.approx(0.0, abs=0.3 * noise.init ** 2)
    with pytest.raises(RunTestInputError, match="same seeds in both arms"):
        CrossedComponents.from_runs(_runs(A, "A"), _runs(A, "B", seeds=[5, 6, 7]))


def test_the_batch_of_paired_tables_is_the_crossed_test_table_by_table():
    """`crossed_power` simulates with `paired_crossed_batch`: on each table, the estimate, se and df
    `crossed_seed_test` gives on runs with those means, with and without a seed effect (a table
    whose seed mean square is below the residual's is the fold t)."""
    rng = np.random.default_rng(3)
    tables = np.concatenate([rng.normal(0, 0.004, (20, 4, 3)) + rng.normal(0, 0.004, (20, 1, 3)),
                             rng.normal(0, 0.004, (20, 4, 3)), D[None]])
    est, se, df = paired_crossed_batch(tables)
    no_seed_term = 0
    for i, d in enumerate(tables):
        r = crossed_seed_test(_runs(A, "A"), _runs(A + d, "B"))
        assert (est[i], se[i], df[i]) == pytest.approx((r.estimate, r.se, r.df), rel=1e-9)
        no_seed_term += r.df == pytest.approx(3) and r.seed_main == (0.0,)
    assert no_seed_term > 0  # some tables took the fold t's branch
    with pytest.raises(RunTestInputError, match="at least 2 folds and 2 seeds"):
        paired_crossed_batch(tables[:, :, :1])


def test_without_a_seed_effect_the_crossed_test_is_calibrated_and_pays_for_its_seed_term():
    c = CrossedComponents(fold=0.0, seed=0.0, residual=0.004 ** 2)
    r = crossed_power(c, 5, 3, n_sims=3000)
    mc = 3 * math.sqrt(0.05 * 0.95 / 3000)
    assert r.crossed_false_positive <= 0.05 + mc and abs(r.fold_t_false_positive - 0.05) <= mc
    # the fold t's analytic detectable difference on the same tables (a fold's mean over 3 seeds)
    fold_t = min_detectable_difference(VarianceComponents(0.0, 0.004 ** 2 / 2, 10), 5, 3)
    assert r.detectable > fold_t  # a seed term estimated on 2 df widens it, even when it is 0
    assert crossed_power(c, 5, 3, n_sims=3000) == r  # seeded: the same tables, the same answer


def test_with_a_seed_effect_six_seeds_more_than_halve_the_detectable_difference():
    c = CrossedComponents(fold=0.0, seed=0.002 ** 2, residual=0.002 ** 2)
    three, six = crossed_power(c, 5, 3, n_sims=3000), crossed_power(c, 5, 6, n_sims=3000)
    mc = 3 * math.sqrt(0.05 * 0.95 / 3000)
    assert three.fold_t_false_positive > 0.2  # the fold t is not calibrated here
    assert three.crossed_false_positive <= 0.05 + mc and six.crossed_false_positive <= 0.05 + mc
    assert six.detectable < three.detectable / 2
    with pytest.raises(RunTestInputError, match="at least 2 seeds"):
        crossed_power(c, 5, 1)


def test_the_ladders_small_design_is_calibrated_and_bounds_the_full_protocol_from_above():
    """The strength ladder reads each replicate (3 folds x 2 seeds) by the crossed test, the third
    edition's primary test at 5 x 3: on the small design the test keeps its level, and the difference
    it detects with 80 % power is larger than at 5 x 3 (3.5-5x here), so the ladder's 80 % point
    bounds the primary test's from above (conservatively). `at` reads the same curve at one point."""
    mc = 3 * math.sqrt(0.05 * 0.95 / 3000)
    for c in (CrossedComponents(fold=0.0, seed=0.0, residual=0.004 ** 2),
              CrossedComponents(fold=0.0, seed=0.002 ** 2, residual=0.002 ** 2),
              CrossedComponents(fold=0.001 ** 2, seed=0.004 ** 2, residual=0.002 ** 2)):
        small, full = crossed_power(c, 3, 2, n_sims=3000), crossed_power(c, 5, 3, n_sims=3000)
        assert small.crossed_false_positive <= 0.05 + mc
        assert small.detectable > 3 * full.detectable
        at = crossed_power(c, 5, 3, n_sims=3000, at=full.detectable)
        assert at.power_at >= 0.8 and at.detectable == full.detectable
        assert crossed_power(c, 5, 3, n_sims=3000, at=0.0).power_at == full.crossed_false_positive
