"""Tests for tsflash.stats.selection: published worked examples, parity with a naive CSCV written from the
paper (scipy as an independent reference), conventions, properties and every error message."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsflash.errors import UserError
from tsflash.stats.selection import (
    Gate,
    Reason,
    SelectionInputError,
    annualize_sharpe,
    daily_returns,
    deannualize_sharpe,
    deflated_sharpe,
    expected_max_sharpe,
    min_track_record_length,
    pbo_cscv,
    psr,
    sharpe,
    skew_kurtosis,
)

scipy_stats = pytest.importorskip("scipy.stats")

# Bailey & Lopez de Prado (2014), "The Deflated Sharpe Ratio", worked example.
EX_DAYS_PER_YEAR = 250
EX_SR = 2.5 / math.sqrt(EX_DAYS_PER_YEAR)  # per day
EX_T = 1250
EX_SKEW = -3.0
EX_KURT = 10.0  # raw
EX_N = 100
EX_VAR = 0.5 / EX_DAYS_PER_YEAR  # variance of per-day Sharpe ratios (annual variance 0.5)


# ------------------------------------------------------------------------------ Sharpe, moments


def test_sharpe_is_mean_over_sample_std_per_period():
    x = np.array([0.01, -0.01, 0.02, 0.0])
    assert sharpe(x) == pytest.approx(x.mean() / x.std(ddof=1), rel=1e-15)
    assert sharpe(x, ddof=0) == pytest.approx(x.mean() / x.std(ddof=0), rel=1e-15)
    m = np.column_stack([x, 2 * x + 0.001])
    np.testing.assert_allclose(sharpe(m), m.mean(0) / m.std(0, ddof=1), rtol=1e-15)


def test_annualisation_is_explicit_and_invertible():
    assert annualize_sharpe(0.1, 365) == pytest.approx(0.1 * math.sqrt(365))
    assert deannualize_sharpe(annualize_sharpe(0.05, 252), 252) == pytest.approx(0.05)
    with pytest.raises(SelectionInputError, match=r"periods_per_year must be a positive number, got 0"):
        annualize_sharpe(0.1, 0)


def test_skew_kurtosis_are_biased_moments_with_raw_kurtosis():
    rng = np.random.default_rng(1)
    x = rng.standard_t(5, size=2000)
    sk, ku = skew_kurtosis(x)
    assert sk == pytest.approx(scipy_stats.skew(x), rel=1e-12)
    assert ku == pytest.approx(scipy_stats.kurtosis(x, fisher=False), rel=1e-12)  # raw, normal = 3
    _, ku_normal = skew_kurtosis(rng.standard_normal(200_000))
    assert ku_normal == pytest.approx(3.0, abs=0.05)


def test_sharpe_errors_name_the_problem():
    with pytest.raises(SelectionInputError, match=r"non-zero variance, got a constant series"):
        sharpe(np.full(10, 0.01))
    with pytest.raises(SelectionInputError, match=r"constant series in column\(s\) \[1\]"):
        sharpe(np.column_stack([np.arange(5.0), np.zeros(5)]))
    with pytest.raises(SelectionInputError, match=r"must be finite \(no NaN or inf\), got 1 non-finite value\(s\), first at index 2"):
        sharpe([0.1, 0.2, np.nan, 0.3])
    with pytest.raises(SelectionInputError, match=r"needs at least 2 periods, got 1"):
        sharpe([0.1])
    with pytest.raises(SelectionInputError, match=r"ddof must be 0 or 1, got 2"):
        sharpe([0.1, 0.2, 0.3], ddof=2)


def test_docstring_examples_run():
    import doctest

    import tsflash.stats.selection

    failed, attempted = doctest.testmod(tsflash.stats.selection)
    assert attempted >= 4 and failed == 0


def test_selection_input_error_is_value_error_and_user_error():
    with pytest.raises(ValueError):
        sharpe([np.nan, 1.0])
    with pytest.raises(UserError):
        sharpe([np.nan, 1.0])


# ------------------------------------------------------------------------------ PSR


def test_psr_matches_the_formula_with_raw_kurtosis():
    sr, t, sk, ku, star = 0.08, 500, -0.7, 6.0, 0.02
    z = (sr - star) * math.sqrt(t - 1) / math.sqrt(1 - sk * sr + (ku - 1) / 4 * sr**2)
    assert psr(sr, star, t=t, skew=sk, kurtosis=ku) == pytest.approx(scipy_stats.norm.cdf(z), rel=1e-12)
    # excess kurtosis goes through its own keyword and is converted explicitly (+3)
    assert psr(sr, star, t=t, skew=sk, excess_kurtosis=ku - 3) == psr(sr, star, t=t, skew=sk, kurtosis=ku)
    # defaults are the normal distribution: skew 0, raw kurtosis 3
    assert psr(sr, star, t=t) == psr(sr, star, t=t, skew=0.0, kurtosis=3.0)
    assert psr(sr, sr, t=t) == pytest.approx(0.5)


def test_psr_from_returns_uses_sample_sharpe_and_biased_moments():
    rng = np.random.default_rng(2)
    x = 0.001 + 0.01 * rng.standard_t(6, size=800)
    sr = x.mean() / x.std(ddof=1)
    expected = psr(sr, 0.01, t=len(x), skew=scipy_stats.skew(x), kurtosis=scipy_stats.kurtosis(x, fisher=False))
    assert psr(x, 0.01) == pytest.approx(expected, rel=1e-12)


def test_psr_rejects_ambiguous_or_impossible_moment_inputs():
    with pytest.raises(SelectionInputError, match=r"either kurtosis= \(raw, normal = 3\) or excess_kurtosis="):
        psr(0.1, t=100, kurtosis=3, excess_kurtosis=0)
    # the classic mistake: an excess kurtosis (7) passed as raw with skew -3 is impossible
    with pytest.raises(SelectionInputError, match=r"raw kurtosis must be >= 1 \+ skew\*\*2 .*got kurtosis=7.0 with skew=-3.0"):
        psr(0.1, t=100, skew=-3, kurtosis=7)
    with pytest.raises(SelectionInputError, match=r"needs t="):
        psr(0.1)
    with pytest.raises(SelectionInputError, match=r"t \(number of returns\) must be > 1, got 1"):
        psr(0.1, t=1)
    with pytest.raises(SelectionInputError, match=r"do not pass them, got \{'t': 10\}"):
        psr(np.array([0.1, -0.2, 0.3]), t=10)
    # the variance term is (1 - skew*SR/2)**2 >= 0 at the kurtosis bound; exactly 0 there at SR = 2/skew
    with pytest.raises(SelectionInputError, match=r"must be > 0 \(it reaches 0 only at the bound .*got 0.0 \(SR=1.0, skew=2.0, kurtosis=5.0\)"):
        psr(1.0, t=100, skew=2.0, kurtosis=5.0)


@settings(max_examples=60, deadline=None)
@given(
    sr=st.floats(0.01, 0.5),
    star=st.floats(-0.2, 0.0),
    t=st.integers(10, 5000),
    dt=st.integers(1, 5000),
    sk=st.floats(-1.0, 1.0),
    ex=st.floats(0.0, 10.0),
)
def test_psr_increases_with_track_record_length(sr, star, t, dt, sk, ex):
    ku = 3.0 + ex + sk * sk
    if 1 - sk * sr + (ku - 1) / 4 * sr * sr <= 0:
        return
    a = psr(sr, star, t=t, skew=sk, kurtosis=ku)
    b = psr(sr, star, t=t + dt, skew=sk, kurtosis=ku)
    assert b >= a
    if a < 1 - 1e-12:
        assert b > a


# ------------------------------------------------------------------------------ expected max, DSR


def test_expected_max_sharpe_published_threshold():
    sr0 = expected_max_sharpe(EX_N, EX_VAR)
    assert sr0 == pytest.approx(0.1132, abs=5e-5)  # per day
    assert annualize_sharpe(sr0, EX_DAYS_PER_YEAR) == pytest.approx(1.7894, abs=5e-5)
    # the same call in annual units gives the annual threshold directly (scale-equivariant)
    assert expected_max_sharpe(EX_N, 0.5) == pytest.approx(1.7894, abs=5e-5)


def test_expected_max_sharpe_edge_cases_and_accuracy():
    assert expected_max_sharpe(1, 0.3) == 0.0
    values = [expected_max_sharpe(n, 1.0) for n in (2, 3, 10, 100, 1000, 10**6)]
    assert all(b > a for a, b in zip(values, values[1:]))
    # close to the Monte Carlo mean of the max of N standard normals (the approximation is ~1% high)
    rng = np.random.default_rng(3)
    mc = rng.standard_normal((20_000, 100)).max(axis=1).mean()
    assert expected_max_sharpe(100, 1.0) == pytest.approx(mc, rel=0.02)
    with pytest.raises(SelectionInputError, match=r"n_trials must be an integer >= 1, got 0"):
        expected_max_sharpe(0, 1.0)
    with pytest.raises(SelectionInputError, match=r"n_trials must be an integer >= 1, got 2.5"):
        expected_max_sharpe(2.5, 1.0)
    with pytest.raises(SelectionInputError, match=r"sr_variance must be a finite number >= 0, got -1"):
        expected_max_sharpe(5, -1)


def test_deflated_sharpe_published_worked_example():
    r = deflated_sharpe(EX_SR, EX_N, EX_VAR, t=EX_T, skew=EX_SKEW, kurtosis=EX_KURT)
    assert r.sr0 == pytest.approx(0.1132, abs=5e-5)
    assert annualize_sharpe(r.sr0, EX_DAYS_PER_YEAR) == pytest.approx(1.7894, abs=5e-5)
    assert r.dsr == pytest.approx(0.9004, abs=5e-5)
    assert (r.n_trials, r.t, r.skew, r.kurtosis) == (EX_N, EX_T, EX_SKEW, EX_KURT)
    # excess kurtosis 7 is converted to raw 10 explicitly
    r2 = deflated_sharpe(EX_SR, EX_N, EX_VAR, t=EX_T, skew=EX_SKEW, excess_kurtosis=7.0)
    assert r2.dsr == r.dsr and r2.kurtosis == 10.0
    # feeding excess kurtosis where raw is meant would be wrong (and here is even impossible)
    with pytest.raises(SelectionInputError, match=r"raw kurtosis must be >= 1 \+ skew\*\*2"):
        deflated_sharpe(EX_SR, EX_N, EX_VAR, t=EX_T, skew=EX_SKEW, kurtosis=7.0)
    # annualised Sharpe ratios inside the formula give a different (wrong) answer: per-period pinned
    assert psr(EX_SR, r.sr0, t=EX_T, skew=EX_SKEW, kurtosis=EX_KURT) == r.dsr


def test_deflated_sharpe_from_trial_ledger_uses_sample_variance():
    rng = np.random.default_rng(4)
    trials = rng.normal(0.0, 0.05, size=30)
    x = 0.002 + 0.01 * rng.standard_normal(400)
    r = deflated_sharpe(x, trial_sharpes=trials)
    assert r.n_trials == 30 and r.sr_variance == pytest.approx(trials.var(ddof=1), rel=1e-14)
    assert r.dsr == deflated_sharpe(x, 30, trials.var(ddof=1)).dsr
    # more trials run than Sharpe ratios kept: allowed, and deflates more
    r_more = deflated_sharpe(x, n_trials=300, trial_sharpes=trials)
    assert r_more.n_trials == 300 and r_more.dsr < r.dsr
    # one trial: SR0 = 0, DSR = PSR(0)
    assert deflated_sharpe(x, 1).dsr == psr(x, 0.0)


def test_deflated_sharpe_errors():
    x = np.random.default_rng(5).standard_normal(100)
    with pytest.raises(SelectionInputError, match=r"needs at least two trials, got 1"):
        deflated_sharpe(x, trial_sharpes=[0.1])
    with pytest.raises(SelectionInputError, match=r"must be > 0 with n_trials=5 >= 2 .*got sr_variance=0"):
        deflated_sharpe(x, 5, 0.0)
    with pytest.raises(SelectionInputError, match=r"n_trials=5 >= 2 needs sr_variance= or trial_sharpes="):
        deflated_sharpe(x, 5)
    with pytest.raises(SelectionInputError, match=r"n_trials must be >= the number of trial Sharpe ratios given, got n_trials=2 < 3"):
        deflated_sharpe(x, n_trials=2, trial_sharpes=[0.1, 0.2, 0.3])
    with pytest.raises(SelectionInputError, match=r"either trial_sharpes= or sr_variance="):
        deflated_sharpe(x, sr_variance=0.1, trial_sharpes=[0.1, 0.2])
    with pytest.raises(SelectionInputError, match=r"trial_sharpes must be finite"):
        deflated_sharpe(x, trial_sharpes=[0.1, np.nan])
    with pytest.raises(SelectionInputError, match=r"needs n_trials="):
        deflated_sharpe(x)


@settings(max_examples=60, deadline=None)
@given(
    sr=st.floats(-0.1, 0.4),
    var=st.floats(1e-5, 0.05),
    n=st.integers(1, 10_000),
    dn=st.integers(1, 10_000),
    t=st.integers(20, 3000),
)
def test_dsr_falls_as_trials_rise(sr, var, n, dn, t):
    a = deflated_sharpe(sr, n, var, t=t).dsr
    b = deflated_sharpe(sr, n + dn, var, t=t).dsr
    assert b <= a
    if 1e-12 < a < 1 - 1e-12 and b > 1e-12:
        assert b < a


# ------------------------------------------------------------------------------ MinTRL


def test_min_track_record_length_inverts_psr():
    sr, star, sk, ku = 0.1, 0.02, -0.5, 5.0
    mtrl = min_track_record_length(sr, star, confidence=0.95, skew=sk, kurtosis=ku)
    assert psr(sr, star, t=mtrl, skew=sk, kurtosis=ku) == pytest.approx(0.95, abs=1e-12)
    # normal returns: 1 + (1 + SR^2/2) (z / SR)^2
    z = scipy_stats.norm.ppf(0.95)
    assert min_track_record_length(0.1) == pytest.approx(1 + (1 + 0.005) * (z / 0.1) ** 2, rel=1e-12)
    assert min_track_record_length(0.1, excess_kurtosis=2.0) == min_track_record_length(0.1, kurtosis=5.0)
    # fatter tails and negative skew need a longer record
    assert min_track_record_length(0.1, skew=-1, kurtosis=8) > min_track_record_length(0.1)


def test_min_track_record_length_errors():
    with pytest.raises(SelectionInputError, match=r"needs SR > sr_star, got SR=0.05 <= sr_star=0.1"):
        min_track_record_length(0.05, 0.1)
    with pytest.raises(SelectionInputError, match=r"confidence must be in \(0, 1\), got 1.0"):
        min_track_record_length(0.1, confidence=1.0)


# ------------------------------------------------------------------------------ PBO / CSCV


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


# ------------------------------------------------------------------------------ daily returns

DAY = 86_400_000_000
MIN = 60_000_000


def test_daily_returns_compound_per_utc_day():
    t0 = 1_704_067_200 * 1_000_000  # 2024-01-01T00:00:00Z
    times = np.array([t0, t0 + MIN, t0 + DAY - MIN, t0 + DAY, t0 + 3 * DAY + 5 * MIN], dtype=np.int64)
    r = np.array([0.01, -0.02, 0.03, 0.05, -0.01])
    days, daily = daily_returns(times, r)
    assert days.dtype == np.dtype("datetime64[D]")
    assert days.tolist() == np.array(["2024-01-01", "2024-01-02", "2024-01-04"], dtype="datetime64[D]").tolist()
    np.testing.assert_allclose(daily, [1.01 * 0.98 * 1.03 - 1, 0.05, -0.01], rtol=1e-14)


def test_daily_returns_before_epoch_and_large_inputs():
    times = np.array([-MIN, 0], dtype=np.int64)  # 1969-12-31T23:59 and 1970-01-01T00:00
    days, daily = daily_returns(times, [0.1, 0.2])
    assert days.astype(str).tolist() == ["1969-12-31", "1970-01-01"]
    n = 3 * 1440
    times = np.arange(n, dtype=np.int64) * MIN
    r = np.random.default_rng(11).normal(0, 1e-3, n)
    days, daily = daily_returns(times, r)
    np.testing.assert_allclose(daily, np.prod(1 + r.reshape(3, 1440), axis=1) - 1, rtol=1e-12)


def test_daily_returns_errors():
    t = np.array([0, MIN, 2 * MIN], dtype=np.int64)
    with pytest.raises(SelectionInputError, match=r"strictly increasing, got 60000000 then 60000000 at index 1"):
        daily_returns(np.array([0, MIN, MIN]), [0.1, 0.1, 0.1])
    with pytest.raises(SelectionInputError, match=r"same length, got 3 and \(2,\)"):
        daily_returns(t, [0.1, 0.2])
    with pytest.raises(SelectionInputError, match=r"per_bar_returns must be finite"):
        daily_returns(t, [0.1, np.nan, 0.2])
    with pytest.raises(SelectionInputError, match=r"1-D integer array \(microseconds UTC\), got dtype float64"):
        daily_returns(t.astype(float), [0.1, 0.2, 0.3])


# ------------------------------------------------------------------------------ gate


def _noise_candidates(rng, k, t, scale=0.01):
    return {f"n={2**(i + 6)}": scale * rng.standard_normal(t) for i in range(k)}


def test_gate_passes_a_real_edge():
    rng = np.random.default_rng(12)
    cands = _noise_candidates(rng, 6, 400)
    cands["n=edge"] = 0.004 + 0.01 * rng.standard_normal(400)  # SR 0.4 per day
    v = Gate(n_blocks=8).evaluate(cands)
    assert v.selected == "n=edge" and v.passed and v.passes_dsr and v.passes_pbo
    assert v.dsr >= 0.95 and v.pbo <= 0.5
    assert v.reasons == (Reason.DSR_MET, Reason.PBO_MET, Reason.PASSED)
    assert v.sharpe == pytest.approx(v.table[-1]["sharpe"]) and v.n_trials == 7
    assert len(v.table) == 7 and [row["selected"] for row in v.table].count(True) == 1
    row = next(r for r in v.table if r["selected"])
    assert row["sharpe_annual"] == pytest.approx(row["sharpe"] * math.sqrt(365))
    json.dumps(v.to_dict())  # a verdict is JSON-serialisable for the report


def test_gate_no_candidate_passes_is_a_normal_verdict():
    rng = np.random.default_rng(13)
    v = Gate(n_blocks=8).evaluate(_noise_candidates(rng, 8, 200))
    assert not v.passed
    assert v.reasons[-1] == Reason.NOT_PASSED
    assert v.reasons[0] == (Reason.DSR_MET if v.passes_dsr else Reason.DSR_BELOW_MIN)
    assert v.reasons[1] == (Reason.PBO_MET if v.passes_pbo else Reason.PBO_ABOVE_MAX)
    assert all(isinstance(r, str) and " " not in r for r in v.reasons)  # codes, not sentences
    assert v.selected == max(v.table, key=lambda r: r["sharpe"])["name"]


def test_gate_uses_the_full_trial_ledger():
    rng = np.random.default_rng(14)
    cands = _noise_candidates(rng, 4, 300)
    cands["n=edge"] = 0.002 + 0.01 * rng.standard_normal(300)
    gate = Gate(n_blocks=6)
    base = gate.evaluate(cands)
    more = gate.evaluate(cands, n_trials=200)
    assert more.dsr_result.n_trials == 200 and more.dsr < base.dsr
    ledger = rng.normal(0, 0.08, size=40)
    v = gate.evaluate(cands, trial_sharpes=ledger)
    assert v.dsr_result.n_trials == 40
    assert v.dsr_result.sr_variance == pytest.approx(ledger.var(ddof=1))
    assert base.dsr_result.sr_variance == pytest.approx(np.var([r["sharpe"] for r in base.table], ddof=1))


def test_gate_from_config_uses_the_selection_settings():
    from tsflash.config import SelectionConfig

    gate = Gate.from_config(SelectionConfig(min_dsr=0.9, max_pbo=0.4, cscv_blocks=8))
    assert (gate.min_dsr, gate.max_pbo, gate.n_blocks) == (0.9, 0.4, 8)
    assert Gate.from_config(SelectionConfig()) == Gate()


def test_gate_errors():
    rng = np.random.default_rng(15)
    with pytest.raises(SelectionInputError, match=r"aligned \(same number of periods\), got lengths \{'a': 50, 'b': 49\}"):
        Gate(n_blocks=4).evaluate({"a": rng.standard_normal(50), "b": rng.standard_normal(49)})
    with pytest.raises(SelectionInputError, match=r"at least 2 candidates .*got 1: \['a'\]"):
        Gate().evaluate({"a": rng.standard_normal(50)})
    with pytest.raises(SelectionInputError, match=r"candidate 'b': the Sharpe ratio needs returns with non-zero variance"):
        Gate(n_blocks=4).evaluate({"a": rng.standard_normal(50), "b": np.zeros(50)})
    with pytest.raises(SelectionInputError, match=r"candidate 'a' must be finite"):
        Gate(n_blocks=4).evaluate({"a": np.r_[np.nan, rng.standard_normal(49)], "b": rng.standard_normal(50)})
    with pytest.raises(SelectionInputError, match=r"n_trials=2 < 3"):
        Gate(n_blocks=4).evaluate({c: rng.standard_normal(50) for c in "abc"}, n_trials=2)
    with pytest.raises(SelectionInputError, match=r"Gate thresholds must be probabilities in \[0, 1\], got min_dsr=95"):
        Gate(min_dsr=95).evaluate({c: rng.standard_normal(50) for c in "ab"})


def test_gate_noise_control_rarely_passes():
    """Zero-mean random-walk returns: the deflated gate passes rarely, the undeflated one often."""
    k, t, runs = 8, 128, 100
    gate = Gate(n_blocks=8)
    passed = naive = 0
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        cands = _noise_candidates(rng, k, t)
        v = gate.evaluate(cands)
        passed += v.passed
        naive += max(r["psr"] for r in v.table) >= 0.95  # best-of-K PSR(0), no deflation, no PBO
    assert passed / runs <= 0.06, passed
    assert naive / runs >= 0.2, naive  # the control is not vacuous: picking the best does fool PSR


# ------------------------------------------------------------------------------ a run's selection


def test_complete_trials_counts_a_slot_once():
    from tsflash.stats.selection import complete_trials

    trials = [{"state": "COMPLETE", "slot": "n32/0", "value": 0.1}, {"state": "FAIL", "slot": "n64/0", "value": None},
              {"state": "COMPLETE", "slot": "n32/0", "value": 0.2}, {"state": "COMPLETE", "key": "n64", "value": 0.3}]
    assert [t["value"] for t in complete_trials(trials)] == [0.1, 0.3]


def _days(t):
    return np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-01") + t)


def test_select_run_is_the_gate_with_the_ledger():
    from tsflash.stats.selection import select_run

    rng = np.random.default_rng(21)
    series = {f"n{2 ** (5 + i)}": (_days(120), 0.01 * rng.standard_normal(120)) for i in range(4)}
    ledger = [{"state": "COMPLETE", "key": k, "slot": f"{k}/0", "value": float(sharpe(r))} for k, (_, r) in series.items()]
    ledger.append({"state": "COMPLETE", "key": "n32", "slot": "n32/1", "value": 0.3})  # a 5th trial, not a candidate
    out = select_run(series, ledger, n_blocks=8)
    v = Gate(n_blocks=8).evaluate({k: r for k, (_, r) in series.items()}, n_trials=5,
                                  trial_sharpes=[t["value"] for t in ledger])
    assert out.n_trials == 5 and out.verdict.dsr == v.dsr and out.verdict.pbo == v.pbo
    assert out.sr_variance == pytest.approx(np.var([t["value"] for t in ledger], ddof=1))
    assert [c["dsr"] for c in out.candidates] == [r["dsr"] for r in v.table]  # every candidate against one ledger
    assert out.n_blocks_used == 8 and out.dropped == [] and len(out.days) == 120


def test_select_run_aligns_drops_and_reduces_blocks():
    from tsflash.stats.selection import select_run

    rng = np.random.default_rng(22)
    series = {"n32": (_days(12), 0.01 * rng.standard_normal(12)), "n64": (_days(10)[1:], 0.01 * rng.standard_normal(9)),
              "n128": (_days(12), np.zeros(12)), "n256": (_days(12), 0.01 * rng.standard_normal(12))}
    out = select_run(series, [], n_blocks=16)
    assert len(out.days) == 9 and out.n_blocks == 16 and out.n_blocks_used == 8  # 9 common days: 8 blocks
    assert out.dropped == ["n128"] and "error" in out.candidates[2] and math.isnan(out.candidates[2]["dsr"])
    assert out.n_trials == 4 and out.sr_variance is None  # no ledger: the candidates' Sharpe ratios
    assert out.verdict.reasons[-1] in (Reason.PASSED, Reason.NOT_PASSED)
    few = select_run({"n32": series["n32"], "n128": series["n128"]}, [])
    assert few.verdict.reasons == (Reason.TOO_FEW_CANDIDATES, Reason.NOT_PASSED) and few.verdict.selected == "n32"
    assert select_run({}, []).verdict.reasons == (Reason.NO_CANDIDATE, Reason.NOT_PASSED)


# --------------------------------------------------------------------------------------------
# paired forecast tests: Diebold-Mariano and Holm

from tsflash.stats.selection import (  # noqa: E402
    DMResult,
    diebold_mariano,
    effective_trials,
    holm,
    min_passing_sharpe,
    newey_west_variance,
    select_run,
)


def _dm_naive(a, b, lag):
    """The statistic as the issue writes it, one Python loop per term (the O(T * lag) reference)."""
    d = [x - y for x, y in zip(a, b)]
    t = len(d)
    mean = sum(d) / t

    def g(k):
        return sum((d[i] - mean) * (d[i - k] - mean) for i in range(k, t)) / t

    s = g(0) + 2 * sum((1 - k / (lag + 1)) * g(k) for k in range(1, lag + 1))
    stat = mean / math.sqrt(s / t)
    return stat, 2 * (1 - scipy_stats.norm.cdf(abs(stat))), mean, math.sqrt(s / t)


@pytest.mark.parametrize("lag", [0, 1, 5, 17])
def test_diebold_mariano_matches_a_naive_loop(lag):
    rng = np.random.default_rng(lag)
    a = rng.normal(1.0, 0.3, 300) + 0.3 * np.sin(np.arange(300) / 7)  # autocorrelated losses
    b = a + rng.normal(0.02, 0.2, 300)
    r = diebold_mariano(a, b, lag)
    stat, p, mean, se = _dm_naive(a.tolist(), b.tolist(), lag)
    assert isinstance(r, DMResult)
    assert r.statistic == pytest.approx(stat, rel=1e-10) and r.pvalue == pytest.approx(p, rel=1e-8, abs=1e-15)
    assert r.mean_diff == pytest.approx(mean, rel=1e-12) and r.se == pytest.approx(se, rel=1e-10)
    swapped = diebold_mariano(b, a, lag)
    assert swapped.statistic == pytest.approx(-r.statistic) and swapped.pvalue == pytest.approx(r.pvalue)


def test_diebold_mariano_worked_example_by_hand():
    """d = [1, 3, 2, 4, 0]: mean 2, e = [-1, 1, 0, 2, -2], T = 5.
    g0 = (1 + 1 + 0 + 4 + 4) / 5 = 2; g1 = (-1 + 0 + 0 - 4) / 5 = -1; g2 = (0 + 2 + 0) / 5 = 0.4.
    lag 0: S = 2, se = sqrt(2/5), stat = sqrt(10).
    lag 1: S = 2 + 2 * (1/2) * (-1) = 1, se = sqrt(1/5), stat = sqrt(20).
    lag 2: S = 2 + 2 * ((2/3) * (-1) + (1/3) * 0.4) = 14/15, stat = 2 / sqrt(14/75)."""
    a, b = [1, 3, 2, 4, 0], [0, 0, 0, 0, 0]
    for lag, s in [(0, 2.0), (1, 1.0), (2, 14 / 15)]:
        r = diebold_mariano(a, b, lag)
        assert newey_west_variance(np.array(a, float), lag) == pytest.approx(s, rel=1e-14)
        assert r.mean_diff == 2.0 and r.se == pytest.approx(math.sqrt(s / 5), rel=1e-14)
        assert r.statistic == pytest.approx(2 / math.sqrt(s / 5), rel=1e-14)
        assert r.pvalue == pytest.approx(2 * scipy_stats.norm.sf(2 / math.sqrt(s / 5)), rel=1e-9)
    assert diebold_mariano(a, b, 0).statistic == pytest.approx(math.sqrt(10))
    assert diebold_mariano(a, b, 1).pvalue == pytest.approx(7.744216e-06, rel=1e-5)  # 2 * (1 - Phi(sqrt(20)))


def test_diebold_mariano_hln_correction():
    """HLN (1997): statistic * sqrt((T + 1 - 2h + h(h-1)/T) / T), h = lag + 1, p from t(T - 1).
    Worked example above, lag 1 (h = 2): factor sqrt((5 + 1 - 4 + 2/5) / 5) = sqrt(0.48), so the
    statistic is sqrt(20 * 0.48) = sqrt(9.6)."""
    r = diebold_mariano([1, 3, 2, 4, 0], [0] * 5, 1, hln=True)
    assert r.statistic == pytest.approx(math.sqrt(9.6), rel=1e-14)
    assert r.pvalue == pytest.approx(2 * scipy_stats.t.sf(math.sqrt(9.6), 4), rel=1e-12)
    assert r.se == diebold_mariano([1, 3, 2, 4, 0], [0] * 5, 1).se  # the correction leaves se alone
    plain = diebold_mariano([1, 3, 2, 4, 0], [0] * 5, 1)
    assert r.pvalue > plain.pvalue  # smaller statistic, heavier tails: more conservative


def test_diebold_mariano_size_on_equal_forecasts():
    """Two equally good forecasts whose loss difference is MA(h-1) (overlapping h-bar sums):
    rejections at 5 % near 5 % once the lag is a few times h; with lag = h exactly, the Bartlett
    weights under-count the overlap and the test rejects about twice as often (measured: 10 %),
    which is why the report tests daily aggregates, where the horizon is a fraction of a day."""
    rng = np.random.default_rng(11)
    h, t = 5, 2000
    rejections = {h: 0, 3 * h: 0}
    for _ in range(400):
        eps = rng.standard_normal(t + h)
        d = np.convolve(eps, np.ones(h), "valid")[:t]
        for lag in rejections:
            rejections[lag] += diebold_mariano(d, np.zeros(t), lag).pvalue < 0.05
    assert 0.02 <= rejections[3 * h] / 400 <= 0.085
    assert rejections[h] > rejections[3 * h]


def test_diebold_mariano_identical_and_constant_differences():
    same = diebold_mariano([0.3, 0.5, 0.1], [0.3, 0.5, 0.1], 1)
    assert (same.statistic, same.pvalue, same.mean_diff, same.se) == (0.0, 1.0, 0.0, 0.0)
    const = diebold_mariano([1.1, 1.2, 1.3], [1.0, 1.1, 1.2], 0)
    assert const.statistic == math.inf and const.pvalue == 0.0


def test_diebold_mariano_bad_inputs_raise_one_clear_error():
    with pytest.raises(SelectionInputError, match=r"loss_a and loss_b must have the same length, got 3 and 2"):
        diebold_mariano([1, 2, 3], [1, 2], 0)
    with pytest.raises(SelectionInputError, match=r"losses must be finite \(no NaN or inf\), got 1 non-finite pair\(s\), "
                                                  r"first at index 1"):
        diebold_mariano([1, float("nan"), 3], [1, 2, 3], 0)
    with pytest.raises(SelectionInputError, match=r"lag must be an integer with 0 <= lag < T=3, got lag=-1"):
        diebold_mariano([1, 2, 3], [3, 2, 1], -1)
    with pytest.raises(SelectionInputError, match=r"lag must be an integer with 0 <= lag < T=3, got lag=3"):
        diebold_mariano([1, 2, 3], [3, 2, 1], 3)
    with pytest.raises(SelectionInputError, match=r"lag must be an integer .* got lag=1.5"):
        diebold_mariano([1, 2, 3], [3, 2, 1], 1.5)
    with pytest.raises(SelectionInputError, match=r"needs at least 2 paired losses, got 1"):
        diebold_mariano([1], [2], 0)
    with pytest.raises(SelectionInputError, match=r"must be 1-D"):
        diebold_mariano([[1, 2]], [[1, 2]], 0)
    with pytest.raises(UserError):  # the CLI prints it as one line
        diebold_mariano([1, 2], [1], 0)


def test_holm_textbook_cases():
    # Wikipedia's Holm-Bonferroni example: p = 0.01, 0.04, 0.03, 0.005 at alpha 0.05 rejects H1 and H4.
    adj = holm([0.01, 0.04, 0.03, 0.005])
    assert adj == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert (adj <= 0.05).tolist() == [True, False, False, True]
    # step-down monotonicity: 4 * 0.01 = 0.04 > 3 * 0.012 = 0.036 is raised to 0.04
    assert holm([0.01, 0.012, 0.5]) == pytest.approx([0.03, 0.03, 0.5])
    assert holm([0.01, 0.011, 0.02, 0.9]) == pytest.approx([0.04, 0.04, 0.04, 0.9])
    assert holm([0.4, 0.6]) == pytest.approx([0.8, 0.8])  # 2 * 0.4, then max(0.8, 0.6)
    assert holm([0.3, 0.9]).tolist() == [0.6, 0.9]
    assert holm([0.7, 0.8]).tolist() == [1.0, 1.0]  # capped at 1
    assert holm([0.02]).tolist() == [0.02] and holm([]).size == 0
    assert holm([0.05, 0.05]).tolist() == [0.1, 0.1]  # ties


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_properties(ps):
    p = np.array(ps)
    adj = holm(p)
    order = np.argsort(p, kind="stable")
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1.0)
    assert np.all(np.diff(adj[order]) >= -1e-15)  # monotone in the raw p-values
    assert np.all(adj <= np.minimum(1, len(p) * p) + 1e-15)  # never above Bonferroni


def test_holm_bad_inputs():
    with pytest.raises(SelectionInputError, match=r"p-values must be in \[0, 1\], got \[1.5\]"):
        holm([0.1, 1.5])
    with pytest.raises(SelectionInputError, match=r"p-values must be in \[0, 1\], got \[nan\]"):
        holm([float("nan")])


# --------------------------------------------------------------------------------------------
# effective number of trials and power


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


@pytest.mark.parametrize("t, sr0, skew, kurt", [(100, 0.0, 0.0, 3.0), (911, 0.1013, -0.5, 6.0), (50, -0.2, 0.3, 4.0)])
def test_min_passing_sharpe_inverts_psr(t, sr0, skew, kurt):
    sr = min_passing_sharpe(t, sr0, confidence=0.95, skew=skew, kurtosis=kurt)
    assert sr > sr0
    assert psr(sr, sr0, t=t, skew=skew, kurtosis=kurt) == pytest.approx(0.95, abs=1e-10)
    assert psr(sr * 0.99 if sr > 0 else sr * 1.01, sr0, t=t, skew=skew, kurtosis=kurt) < 0.95
    with pytest.raises(SelectionInputError, match=r"confidence must be in \(0.5, 1\), got 0.4"):
        min_passing_sharpe(t, sr0, confidence=0.4)


def test_select_run_reports_effective_trials_power_and_profitable_candidates():
    rng = np.random.default_rng(5)
    days = np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-01") + 400)
    common = rng.normal(0, 0.01, 400)
    series = {f"n{2 ** (5 + i)}": (days, common + rng.normal(0.0002 * i, 0.002, 400)) for i in range(4)}
    trials = [{"state": "COMPLETE", "slot": f"{k}/0", "key": k, "value": sharpe(r)} for k, (_, r) in series.items()]
    out = select_run(series, trials, n_blocks=8)
    d = out.deflation
    assert out.n_profitable == sum(r.mean() > 0 for _, r in series.values())
    assert 1.0 <= d.effective.n_effective < 1.5  # one common factor dominates
    assert d.n_trials_effective == 1 and d.dsr_effective.n_trials == 1 and d.dsr_effective.sr0 == 0.0
    assert d.dsr_effective.dsr >= out.verdict.dsr  # fewer trials, a lower bar
    assert d.t == 400 and psr(d.min_sharpe, out.verdict.sr0, t=400) == pytest.approx(0.95)
    assert d.min_sharpe_effective < d.min_sharpe
    sel_x = series[out.verdict.selected][1]
    if sharpe(sel_x) > out.verdict.sr0:
        assert psr(sel_x, out.verdict.sr0) < 0.95 or d.min_trl <= 400
    else:
        assert d.min_trl == math.inf
