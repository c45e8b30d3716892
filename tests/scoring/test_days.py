"""Tests for tsflash.scoring.days: the UTC day of a bar time, the grouping of bars by day, and the
compounded daily returns the statistics are applied to."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.scoring.days import daily_returns, day_growth, day_runs, day_sums, utc_days
from tsflash.stats import SelectionInputError

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


def test_utc_days_floor_to_the_utc_day():
    t0 = 1_704_067_200 * 1_000_000  # 2024-01-01T00:00:00Z
    times = [t0 - 1, t0, t0 + DAY - 1, t0 + DAY, -1, 0, -DAY, -DAY - 1]
    assert utc_days(times).tolist() == [19722, 19723, 19723, 19724, -1, 0, -1, -2]
    assert utc_days(times).dtype == np.int64
    assert (utc_days(times).astype("datetime64[D]").astype(str)[:2] == ["2023-12-31", "2024-01-01"]).all()


def test_day_runs_sums_and_growth_match_a_naive_grouping():
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.integers(1, 6 * 3600 * 10**6, size=400)) - 5 * DAY  # crosses 1970 too
    x, r = rng.standard_normal(400), rng.normal(0, 1e-3, 400)
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(times.tolist()):
        groups.setdefault(t // DAY, []).append(i)  # Python's // floors, as the UTC day does
    runs = day_runs(times)
    assert runs.days.dtype == np.dtype("datetime64[D]")
    assert runs.days.astype(np.int64).tolist() == sorted(groups)
    assert runs.starts.tolist() == [ix[0] for _, ix in sorted(groups.items())]
    np.testing.assert_allclose(day_sums(runs, x), [x[ix].sum() for _, ix in sorted(groups.items())], rtol=1e-12)
    growth = day_growth(runs, r)
    np.testing.assert_allclose(growth, [np.prod(1 + r[ix]) for _, ix in sorted(groups.items())], rtol=1e-14)
    days, daily = daily_returns(times, r)
    assert np.array_equal(days, runs.days) and np.array_equal(daily, growth - 1.0)  # bit for bit


def test_day_grouping_of_no_bars_is_empty():
    runs = day_runs(np.empty(0, np.int64))
    assert runs.days.dtype == np.dtype("datetime64[D]") and len(runs.days) == 0 and runs.starts.dtype == np.int64
    assert day_sums(runs, np.empty(0)).shape == (0,) and day_growth(runs, np.empty(0)).shape == (0,)


def test_the_scoring_groups_by_the_same_days():
    """The per-day loss sums and a fold's daily series use the one grouping (`day_runs`)."""
    from tsflash.scoring.daily import BarReturns, fold_daily
    from tsflash.scoring.metrics import daily_loss_sums

    rng = np.random.default_rng(4)
    t0 = 1_704_067_200 * 1_000_000
    times = t0 + np.sort(rng.choice(3 * 1440, size=500, replace=False)).astype(np.int64) * MIN + 7 * 3600 * 10**6
    runs = day_runs(times)
    y = rng.integers(-1, 3, size=500)
    p = rng.dirichlet(np.ones(3), size=500)
    sums = daily_loss_sums(times, y, p)
    assert np.array_equal(sums["days"], runs.days)
    np.testing.assert_array_equal(sums["n_labelled"], day_sums(runs, (y >= 0).astype(np.float64)))
    net = rng.normal(0, 1e-3, 500)
    f = fold_daily(BarReturns(times, net, net, np.zeros(500)))
    assert np.array_equal(f.days, runs.days) and f.growth[0] == day_growth(runs, net)[-1]
    assert np.array_equal(f.head_net, net[: runs.starts[1]])
