"""tsflash.scoring: the one home of scoring at a fee (seed portfolios, daily series, trial values)."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.errors import UserError
from tsflash.scoring import BarReturns, bar_returns, cell_returns, daily_series, objective_value, seed_portfolio
from tsflash.selection import sharpe

DAY = 86_400_000_000


def test_seed_portfolio_is_the_equal_weight_portfolio():
    t = np.arange(4, dtype=np.int64)
    a = BarReturns(t, np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0, 1.0, 1.0, 1.0]), np.array([1.0, 0, 0, 0]))
    b = BarReturns(t, np.array([0.3, 0.0, -0.3, 0.0]), np.array([0.0, 2.0, 0.0, 2.0]), np.array([1.0, 2, 0, 1]))
    times, net, gross, turnover = seed_portfolio([a, b])
    assert times is t
    assert net == pytest.approx([0.2, 0.1, 0.0, 0.2]) and gross == pytest.approx([0.5, 1.5, 0.5, 1.5])
    assert turnover == pytest.approx([1.0, 1.0, 0.0, 0.5])  # each seed pays its own fees
    one = seed_portfolio([a])
    assert np.array_equal(one.net, a.net) and np.array_equal(one.gross, a.gross)
    with pytest.raises(UserError, match=r"at least one seed"):
        seed_portfolio([])


def test_daily_series_orders_folds_and_compounds():
    late = BarReturns(np.array([2 * DAY, 2 * DAY + 60_000_000]), np.array([0.1, 0.1]), np.array([0.2, 0.0]), np.zeros(2))
    early = BarReturns(np.array([0, DAY]), np.array([0.01, -0.02]), np.array([0.0, 0.0]), np.zeros(2))
    d = daily_series([late, early])
    assert d["days"].astype(str).tolist() == ["1970-01-01", "1970-01-02", "1970-01-03"]
    assert d["net"] == pytest.approx([0.01, -0.02, 1.1 * 1.1 - 1]) and d["gross"] == pytest.approx([0.0, 0.0, 0.2])


def test_objective_value_scores_a_strategy_that_never_trades_zero():
    assert objective_value(np.zeros(3)) == 0.0
    x = np.array([0.01, -0.01, 0.02, 0.0])
    assert objective_value(x) == pytest.approx(sharpe(x))


def test_bar_returns_apply_the_fee_to_saved_positions():
    r = bar_returns([0, 1, 2], np.array([1, -1, -1], dtype=np.int8), [0.01, 0.0, 0.02], fee_bps=10.0)
    assert r.net == pytest.approx([0.01 - 1e-3, 0.0 - 2e-3, 0.02])


def test_a_cell_without_per_bar_arrays_cannot_be_rescored(tmp_path):
    with pytest.raises(UserError, match=r"re-scoring needs the per-bar cell files .*fold0-seed0.npz is missing"):
        cell_returns(tmp_path / "n64" / "fold0-seed0", 5.0)
