"""Tests for tsflash.stats.sharpe: the published DSR example (Bailey & Lopez de Prado 2014), the
PSR/MinTRL formulas with raw kurtosis, scipy as an independent reference for the moments,
properties, and every error message."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from tsflash.errors import UserError
from tsflash.stats import SelectionInputError
from tsflash.stats.sharpe import (
    annualize_sharpe,
    deannualize_sharpe,
    deflated_sharpe,
    expected_max_sharpe,
    min_passing_sharpe,
    min_track_record_length,
    psr,
    sharpe,
    skew_kurtosis,
)

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
    # the convention written out: 1/T central moments (bias=True), skew = m3 / m2**1.5, kurtosis = m4 / m2**2
    d = x - x.mean()
    m2, m3, m4 = (np.mean(d**k) for k in (2, 3, 4))
    assert sk == pytest.approx(m3 / m2**1.5, rel=1e-12) and ku == pytest.approx(m4 / m2**2, rel=1e-12)
    assert sk != pytest.approx(scipy_stats.skew(x, bias=False), rel=1e-6)  # not the sample-corrected one
    _, ku_normal = skew_kurtosis(rng.standard_normal(200_000))
    assert ku_normal == pytest.approx(3.0, abs=0.05)
    with pytest.raises(SelectionInputError, match=r"skewness and kurtosis need returns with non-zero variance"):
        skew_kurtosis(np.full(10, 0.01))


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

    import tsflash.stats.sharpe

    failed, attempted = doctest.testmod(tsflash.stats.sharpe)
    assert attempted >= 5 and failed == 0


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
    assert all(b > a for a, b in itertools.pairwise(values))
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


@pytest.mark.parametrize("t, sr0, skew, kurt", [(100, 0.0, 0.0, 3.0), (911, 0.1013, -0.5, 6.0), (50, -0.2, 0.3, 4.0)])
def test_min_passing_sharpe_inverts_psr(t, sr0, skew, kurt):
    sr = min_passing_sharpe(t, sr0, confidence=0.95, skew=skew, kurtosis=kurt)
    assert sr > sr0
    assert psr(sr, sr0, t=t, skew=skew, kurtosis=kurt) == pytest.approx(0.95, abs=1e-10)
    assert psr(sr * 0.99 if sr > 0 else sr * 1.01, sr0, t=t, skew=skew, kurtosis=kurt) < 0.95
    with pytest.raises(SelectionInputError, match=r"confidence must be in \(0.5, 1\), got 0.4"):
        min_passing_sharpe(t, sr0, confidence=0.4)


def test_the_package_re_exports_its_names_and_sharpe_is_the_module():
    """`tsflash.stats.sharpe` is the module (so `import tsflash.stats.sharpe` and patching its names
    work); the Sharpe ratio function is `tsflash.stats.sharpe.sharpe`, not re-exported over it."""
    import inspect

    import tsflash.stats

    assert inspect.ismodule(tsflash.stats.sharpe) and tsflash.stats.sharpe.sharpe is sharpe
    assert "sharpe" not in tsflash.stats.__all__ and all(hasattr(tsflash.stats, n) for n in tsflash.stats.__all__)
    assert tsflash.stats.SelectionInputError is SelectionInputError and tsflash.stats.psr is psr
