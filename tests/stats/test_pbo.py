"""Tests for tsflash.stats.pbo: parity of the vectorised CSCV with a naive one written from the
paper (scipy as the reference for ranks and the degradation fit), its conventions and bounds,
the effective number of trials, and every error message."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from tsflash.stats import SelectionInputError
from tsflash.stats.pbo import effective_trials, pbo_cscv


def naive_cscv(m: np.ndarray, s: int):
    """CSCV written directly from the paper, one split at a time (the reference for parity)."""
    t, k = m.shape
    m = m[t % s :]
    blocks = np.split(m, s)
    out = []
    for c in itertools.combinations(range(s), s // 2):
        j = np.concatenate([blocks[i] for i in c])
        jb = np.concatenate([blocks[i] for i in range(s) if i not in c])
        r = j.mean(0) / j.std(0, ddof=1)
        rb = jb.mean(0) / jb.std(0, ddof=1)
        n_star = int(np.argmax(r))
        rank = scipy_stats.rankdata(rb)[n_star]  # average ranks on ties
        w = rank / (k + 1)
        out.append((n_star, r[n_star], rb[n_star], rank, math.log(w / (1 - w))))
    return out


def test_pbo_matches_naive_cscv_including_dropped_rows():
    rng = np.random.default_rng(6)
    m = rng.standard_normal((53, 6)) * 0.01 + rng.normal(0, 0.002, size=6)
    res = pbo_cscv(m, n_blocks=6)
    ref = naive_cscv(m, 6)
    assert res.n_dropped == 53 % 6 and res.block_size == 53 // 6 and res.n_splits == math.comb(6, 3)
    np.testing.assert_array_equal(res.winner, [r[0] for r in ref])
    np.testing.assert_allclose(res.is_sharpe, [r[1] for r in ref], rtol=1e-10)
    np.testing.assert_allclose(res.oos_sharpe, [r[2] for r in ref], rtol=1e-10)
    np.testing.assert_array_equal(res.oos_rank, [r[3] for r in ref])
    np.testing.assert_allclose(res.logits, [r[4] for r in ref], rtol=1e-12)
    assert res.pbo == np.mean([r[4] <= 0 for r in ref])
    assert res.prob_oos_loss == np.mean([r[2] < 0 for r in ref])
    fit = scipy_stats.linregress([r[1] for r in ref], [r[2] for r in ref])
    assert (res.slope, res.intercept, res.r2) == pytest.approx((fit.slope, fit.intercept, fit.rvalue**2), rel=1e-9)
    assert res.rank_histogram.sum() == res.n_splits and res.rank_histogram.shape == (6,)
    np.testing.assert_array_equal(res.rank_histogram, np.bincount(res.oos_rank.astype(int) - 1, minlength=6))


def test_pbo_ties_get_average_rank_and_first_column_wins():
    rng = np.random.default_rng(7)
    # small integers keep every block sum exact, so duplicated columns tie exactly in both codes
    base = rng.integers(-5, 6, size=(40, 4)).astype(float)
    m = np.column_stack([base, base[:, 0]])  # column 4 duplicates column 0
    res = pbo_cscv(m, n_blocks=4)
    ref = naive_cscv(m, 4)
    np.testing.assert_array_equal(res.oos_rank, [r[3] for r in ref])
    assert np.any(res.winner == 0) and np.all(res.winner != 4)  # on an IS tie the first column wins
    assert np.any(res.oos_rank % 1 == 0.5)  # the tie shows up as a half rank


def test_pbo_blocks_are_contiguous_lexicographic_and_complete():
    m = np.random.default_rng(8).standard_normal((64, 4))
    res = pbo_cscv(m, n_blocks=8)
    assert res.is_blocks.shape == (70, 4)
    assert res.is_blocks[0].tolist() == [0, 1, 2, 3] and res.is_blocks[-1].tolist() == [4, 5, 6, 7]
    # every split's complement is also a split (combinatorial symmetry)
    sets = {tuple(r) for r in res.is_blocks.tolist()}
    assert all(tuple(sorted(set(range(8)) - set(r))) in sets for r in sets)
    # shifting a single row outside the kept range changes nothing: the oldest rows are dropped
    m2 = np.vstack([np.full((3, 4), 123.0), m])
    res2 = pbo_cscv(m2, n_blocks=8)
    assert res2.n_dropped == 3
    np.testing.assert_allclose(res2.logits, res.logits)


def test_pbo_near_half_on_noise_with_many_trials():
    pbos = [pbo_cscv(np.random.default_rng(100 + i).standard_normal((240, 64)), n_blocks=8).pbo for i in range(12)]
    mean = float(np.mean(pbos))
    assert 0.35 <= mean <= 0.8, pbos  # near 0.5, biased upward; never exactly demanded


def test_pbo_near_zero_with_one_drifting_column():
    rng = np.random.default_rng(9)
    m = rng.standard_normal((240, 32))
    m[:, 5] += 0.6  # a clear edge: SR 0.6 per period
    res = pbo_cscv(m, n_blocks=8)
    assert res.pbo <= 0.02
    assert np.mean(res.winner == 5) > 0.95
    assert res.prob_oos_loss == 0.0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 12), s=st.sampled_from([2, 4, 6, 8]), extra=st.integers(0, 7))
def test_pbo_property_parity_and_bounds(seed, k, s, extra):
    m = np.random.default_rng(seed).standard_normal((s * 4 + extra, k))
    res = pbo_cscv(m, n_blocks=s)
    ref = naive_cscv(m, s)
    np.testing.assert_allclose(res.logits, [r[4] for r in ref], rtol=1e-9, atol=1e-12)
    assert 0.0 <= res.pbo <= 1.0
    assert np.all((res.oos_rank >= 1) & (res.oos_rank <= k))


def test_pbo_errors_name_the_values():
    m = np.random.default_rng(10).standard_normal((40, 3))
    with pytest.raises(SelectionInputError, match=r"n_blocks \(S\) must be even and >= 2, got S=5"):
        pbo_cscv(m, n_blocks=5)
    with pytest.raises(SelectionInputError, match=r"must be <= the number of rows T, got S=50 > T=40"):
        pbo_cscv(m, n_blocks=50)
    with pytest.raises(SelectionInputError, match=r"needs at least 2 columns, got K=1"):
        pbo_cscv(m[:, :1], n_blocks=4)
    with pytest.raises(SelectionInputError, match=r"needs a 2-D \(T, K\) matrix of returns, got shape \(40,\)"):
        pbo_cscv(m[:, 0], n_blocks=4)
    bad = m.copy()
    bad[7, 2] = np.nan
    with pytest.raises(SelectionInputError, match=r"matrix must be finite .*first at index \(7, 2\)"):
        pbo_cscv(bad, n_blocks=4)
    const = m.copy()
    const[:, 1] = 0.0
    with pytest.raises(SelectionInputError, match=r"constant column\(s\) \[1\]"):
        pbo_cscv(const, n_blocks=4)
    half_const = m.copy()
    half_const[:20, 0] = 0.0  # flat for two of four blocks: one split's IS half is constant
    with pytest.raises(SelectionInputError, match=r"column 0 is constant inside one CSCV half"):
        pbo_cscv(half_const, n_blocks=4)
    with pytest.raises(SelectionInputError, match=r"each CSCV half needs more than ddof=1 rows, got 1"):
        pbo_cscv(m[:3], n_blocks=2)


def test_effective_trials_counts_groups_of_correlated_trials():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 3))
    assert effective_trials(z).n_effective == pytest.approx(3, abs=0.02)  # independent: K
    copies = np.column_stack([z[:, 0], z[:, 0] * 2 + 1, -z[:, 0], z[:, 0]])
    assert effective_trials(copies).n_effective == pytest.approx(1.0)  # copies and mirror images: 1
    groups = z[:, [0, 0, 1, 1, 2, 2]] + 1e-3 * rng.standard_normal((2000, 6))
    e = effective_trials(groups)
    assert e.n_effective == pytest.approx(3, abs=0.01) and e.n_columns == 6
    assert e.eigenvalues.sum() == pytest.approx(6) and np.all(np.diff(e.eigenvalues) <= 0)
    # participation ratio by hand: R = [[1, r], [r, 1]] -> 4 / (2 + 2 r^2)
    r = np.corrcoef(z[:, 0], z[:, 0] + z[:, 1])[0, 1]
    assert effective_trials(np.column_stack([z[:, 0], z[:, 0] + z[:, 1]])).n_effective == pytest.approx(
        4 / (2 + 2 * r * r))
    with pytest.raises(SelectionInputError, match=r"constant column\(s\) \[1\]"):
        effective_trials(np.column_stack([z[:, 0], np.ones(2000)]))


def test_docstring_examples_run():
    import doctest

    import tsflash.stats.pbo

    failed, attempted = doctest.testmod(tsflash.stats.pbo)
    assert attempted >= 2 and failed == 0


def test_degradation_fit_is_linregress_with_nan_where_undefined():
    from tsflash.stats.pbo import _degradation_fit

    rng = np.random.default_rng(12)
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    fit = scipy_stats.linregress(x, y)
    assert _degradation_fit(x, y) == (fit.slope, fit.intercept, fit.rvalue**2)
    slope, intercept, r2 = _degradation_fit(np.full(5, 0.3), y[:5])  # the IS Sharpe never varies: no slope
    assert math.isnan(slope) and math.isnan(r2) and intercept == pytest.approx(y[:5].mean())
    slope, intercept, r2 = _degradation_fit(x[:5], np.full(5, -0.1))  # the OOS Sharpe never varies: no R^2
    assert slope == pytest.approx(0.0, abs=1e-15) and intercept == pytest.approx(-0.1) and math.isnan(r2)
