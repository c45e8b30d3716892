"""Tests for tsflash.stats.forecasts: Diebold-Mariano against a naive loop and a worked example by
hand, the HLN correction, its size on equal forecasts, Holm's textbook cases and properties, and
question 1's decision rule (better / no better / worse)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from tsflash.errors import UserError
from tsflash.stats import SelectionInputError
from tsflash.stats.forecasts import (
    ALPHA,
    DMResult,
    counts,
    diebold_mariano,
    forecast_answer,
    holm,
    newey_west_variance,
    significant,
    winner,
)


def _dm_naive(a, b, lag):
    """The statistic as the issue writes it, one Python loop per term (the O(T * lag) reference)."""
    d = [x - y for x, y in zip(a, b, strict=True)]
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


def test_docstring_examples_run():
    import doctest

    import tsflash.stats.forecasts

    failed, attempted = doctest.testmod(tsflash.stats.forecasts)
    assert attempted >= 3 and failed == 0


# --------------------------------------------------------------------------------------------
# question 1's decision rule


@dataclass
class _Comparison:
    series: str
    reference: str
    score: str
    mean_diff: float  # series minus reference, per bar
    p_holm: float


PRIOR = "baseline-prior"


def _skill(**mean_and_p) -> dict:
    """{(series, "log_loss"): series against the class prior} from series=(mean_diff, p_holm)."""
    return {(s, "log_loss"): _Comparison(s, PRIOR, "log_loss", d, p) for s, (d, p) in mean_and_p.items()}


def test_significant_is_the_holm_p_at_most_alpha():
    assert ALPHA == 0.05
    assert significant(0.05) and significant(0.0) and not significant(0.0501) and not significant(math.nan)


def test_winner_is_the_lower_loss():
    assert winner(_Comparison("n64", "n32", "log_loss", -0.1, 0.5)) == "n64"
    assert winner(_Comparison("n64", "n32", "log_loss", 0.1, 0.5)) == "n32"
    assert winner(_Comparison("n64", "n32", "log_loss", 0.0, 0.5)) == "n32"  # a tie goes to the reference


def test_a_difference_counts_only_when_its_winner_beats_the_prior():
    lower = _Comparison("n64", "n32", "log_loss", -0.01, 0.001)  # n64 significantly lower than n32
    assert counts(lower, _skill(n64=(-0.02, 0.01)))
    assert not counts(lower, {})  # no comparison of the winner with the prior
    assert not counts(lower, _skill(n64=(-0.02, 0.2)))  # the winner's skill is not significant
    assert not counts(lower, _skill(n64=(0.02, 0.01)))  # the winner is significantly WORSE than the prior
    assert not counts(lower, _skill(n32=(-0.02, 0.01)))  # the loser's skill does not help
    assert not counts(_Comparison("n64", "n32", "direction", -0.01, 0.001), _skill(n64=(-0.02, 0.01)))  # other score
    assert not counts(_Comparison("n64", "n32", "log_loss", -0.01, 0.06), _skill(n64=(-0.02, 0.01)))  # not significant
    higher = _Comparison("n64", "n32", "log_loss", 0.01, 0.001)  # the winner is the reference, n32
    assert counts(higher, _skill(n32=(-0.02, 0.01))) and not counts(higher, _skill(n64=(-0.02, 0.01)))


def test_forecast_answer_better_no_better_worse_and_mixed():
    skill = _skill(n64=(-0.02, 0.01), n32=(-0.01, 0.01))
    better = _Comparison("n64", "n32", "log_loss", -0.01, 0.001)
    worse = _Comparison("n128", "n32", "log_loss", 0.01, 0.001)
    unclear = _Comparison("n256", "n32", "log_loss", -0.01, 0.3)
    assert forecast_answer([], skill) == ("no better", False)
    assert forecast_answer([unclear], skill) == ("no better", False)
    assert forecast_answer([better, unclear], skill) == ("better", False)
    assert forecast_answer([worse, unclear], skill) == ("worse", False)
    assert forecast_answer([worse, better], skill) == ("better", True)  # a longer N can forecast better: mixed
    assert forecast_answer(iter([worse, better]), skill) == ("better", True)  # any iterable
    # significant, but the winner has no skill: it decides nothing
    assert forecast_answer([better], _skill(n64=(-0.02, 0.4))) == ("no better", False)
    assert forecast_answer([worse], _skill(n64=(-0.02, 0.01))) == ("no better", False)
