"""tsflash.scoring.daily: the one home of scoring at a fee (seed portfolios, daily series, trial values)."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.errors import UserError
from tsflash.scoring.daily import BarReturns, bar_returns, cell_returns, daily_series, objective_value, seed_portfolio
from tsflash.stats.sharpe import sharpe

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


# ---------------------------------------------------------------------------------------------
# the trading rule at scoring time

from tsflash.scoring.daily import cell_scored, path_summary, scored_arrays  # noqa: E402
from tsflash.scoring.strategy import Strategy  # noqa: E402

UP, DOWN = [0.125, 0.25, 0.625], [0.625, 0.25, 0.125]


def _arrays(**kw) -> dict:
    probs = np.array([UP, UP, DOWN, DOWN])
    base = {"test_time": np.arange(4, dtype=np.int64) * 60_000_000, "y_true": np.array([2, 2, 0, 0], np.int8),
            "y_prob": probs, "position": np.array([1, 1, -1, -1], np.int8),
            "gross_returns": np.array([0.01, 0.02, 0.01, 0.0]), "next_ret": np.array([0.01, 0.02, -0.01, 0.0]),
            "val_prob": None, "val_next_ret": None}
    return base | kw


def test_scored_arrays_one_bar_uses_the_saved_path():
    bars, info = scored_arrays(_arrays(), Strategy("one-bar", 15), fee_bps=10.0)
    assert bars.gross.tolist() == [0.01, 0.02, 0.01, 0.0] and bars.turnover.tolist() == [1, 0, 2, 0]
    assert bars.net == pytest.approx([0.009, 0.02, 0.008, 0.0])
    assert info["strategy"] == "one-bar" and info["threshold_source"] == "one-bar"
    assert info["turnover"] == 0.75 and info["break_even_fee_bps"] == pytest.approx(1e4 * 0.04 / 3)


def test_scored_arrays_horizon_holds_h_bars():
    """h = 2: signals +1 +1 -1 -1 -> positions 0.5, 1, 0, -1; turnover 0.5, 0.5, 1, 1."""
    bars, info = scored_arrays(_arrays(), Strategy("horizon", 2), fee_bps=10.0)
    assert bars.gross == pytest.approx([0.005, 0.02, 0.0, 0.0])
    assert bars.turnover == pytest.approx([0.5, 0.5, 1.0, 1.0])
    assert bars.net == pytest.approx(bars.gross - 1e-3 * bars.turnover)
    assert info["mean_gross_return"] == pytest.approx(0.025 / 4) and info["turnover"] == pytest.approx(0.75)
    assert info["break_even_fee_bps"] == pytest.approx(1e4 * 0.025 / 3)
    assert info["threshold"] == 0.0 and info["threshold_source"] == "argmax (no validation predictions)"
    summary = path_summary([bars, bars])
    assert summary["n_bars"] == 8 and summary["break_even_fee_bps"] == pytest.approx(info["break_even_fee_bps"])


def test_a_cell_saved_before_next_returns_cannot_use_the_horizon_rule(tmp_path):
    old = {k: v for k, v in _arrays().items() if v is not None and k != "next_ret"}
    (tmp_path / "n64").mkdir()
    np.savez(tmp_path / "n64" / "fold0-seed0.npz", **old, net_returns=old["gross_returns"])
    bars, info = cell_scored(tmp_path / "n64" / "fold0-seed0", 5.0)  # the one-bar rule still works
    assert info["strategy"] == "one-bar" and len(bars.net) == 4
    with pytest.raises(UserError, match=r"fold0-seed0.npz has no per-bar next returns \(saved before the horizon "
                                        r"strategy existed\): score it with eval.strategy=one-bar, or rerun the sweep"):
        cell_scored(tmp_path / "n64" / "fold0-seed0", 5.0, Strategy("horizon", 15))
