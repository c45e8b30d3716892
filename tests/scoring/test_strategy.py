"""tsflash.scoring.strategy: the horizon rule, its entry threshold and the break-even fee, on cases small
enough to compute by hand; the config rules of eval.strategy and eval.entry_threshold."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.config import load_config
from tsflash.errors import UserError
from tsflash.scoring.metrics import apply_fees, positions_from_probs
from tsflash.scoring.strategy import (
    FIT,
    Strategy,
    break_even_fee,
    fit_threshold,
    hold,
    horizon_path,
    path,
    signals,
    threshold_candidates,
    turnover,
)

UP, FLAT, DOWN = [0.125, 0.25, 0.625], [0.25, 0.5, 0.25], [0.625, 0.25, 0.125]  # exact in float16


def test_hold_is_the_mean_of_the_last_h_decisions():
    pos = hold([1, 1, 0, -1, -1, 0], 3)  # the module docstring's example
    assert pos == pytest.approx([1 / 3, 2 / 3, 2 / 3, 0, -2 / 3, -2 / 3])
    # only the deciding sub-portfolio trades: |signal[t] - signal[t-h]| / h
    assert turnover(pos) == pytest.approx([1 / 3, 1 / 3, 0, 2 / 3, 2 / 3, 0])
    assert hold([1, -1, 0], 1).tolist() == [1, -1, 0]


def test_signals_enter_on_the_argmax_direction_above_the_threshold():
    probs = np.array([UP, FLAT, DOWN, [0.1, 0.45, 0.45], [0.3, 0.3, 0.4]])
    assert signals(probs, 0.0).tolist() == [1, 0, -1, 0, 1]  # argmax; ties go to the first class (flat)
    assert signals(probs, 0.5).tolist() == [1, 0, -1, 0, 0]  # 0.4 < 0.5: stays out
    assert signals(probs, 0.7).tolist() == [0, 0, 0, 0, 0]


def test_one_bar_is_the_horizon_rule_with_h1_and_threshold_0():
    rng = np.random.default_rng(0)
    p = rng.dirichlet([1, 1, 1], 500).astype(np.float16).astype(np.float32)
    r = rng.normal(0, 1e-3, 500)
    position, gross = path(p, r, 1, 0.0)
    assert np.array_equal(position, positions_from_probs(p)) and np.array_equal(gross, position * r)


def test_break_even_fee_by_hand():
    """h = 2, always long: positions 0.5, 1, 1, 1; turnover 0.5, 0.5, 0, 0 (one unit in all).
    gross = 0.5 * 0.001 + 0.002 - 0.001 + 0.0005 = 0.002, so the fee that eats it is
    0.002 per unit of turnover = 20 bps."""
    probs = np.array([UP] * 4)
    next_ret = np.array([0.001, 0.002, -0.001, 0.0005])
    position, gross = path(probs, next_ret, 2, 0.0)
    assert position.tolist() == [0.5, 1, 1, 1] and gross == pytest.approx([0.0005, 0.002, -0.001, 0.0005])
    fee = break_even_fee(gross, turnover(position))
    assert fee == pytest.approx(20.0)
    assert np.mean(apply_fees(position, gross, fee)) == pytest.approx(0.0, abs=1e-18)
    assert np.mean(apply_fees(position, gross, fee + 1)) < 0 < np.mean(apply_fees(position, gross, fee - 1))
    assert break_even_fee(-gross, turnover(position)) == pytest.approx(-20.0)  # loses before fees
    assert np.isnan(break_even_fee(np.zeros(3), np.zeros(3)))  # never trades


def test_the_threshold_is_fitted_on_validation_bars_only():
    """Validation: confident forecasts (0.625) are right, hesitant ones (0.45) wrong. At a high fee
    only the confident ones pay, so the fit keeps them; the test bars never enter the fit."""
    hesitant_up = [0.3, 0.25, 0.45]
    val_prob = np.array([UP, hesitant_up] * 50)
    val_ret = np.array([0.002, -0.002] * 50)
    # 0 and the 50/75/90/95 % quantiles of max(p_up, p_down) (half 0.45, half 0.625): 0.5375, then 0.625
    assert threshold_candidates(val_prob) == pytest.approx([0.0, 0.5375, 0.625], abs=1e-4)
    assert fit_threshold(val_prob, val_ret, 1, fee_bps=0.0) > 0.45  # hesitant entries lose even without fees
    s = Strategy(kind="horizon", horizon=1)
    test_prob = np.array([hesitant_up, UP, hesitant_up])
    a = horizon_path(s, test_prob, [0.01, 0.01, 0.01], 1.0, val_prob, val_ret)
    b = horizon_path(s, test_prob, [-0.01, -0.01, -0.01], 1.0, val_prob, val_ret)
    assert a.threshold == b.threshold > 0.45 and a.threshold_source == "validation"
    assert a.position.tolist() == [0, 1, 0]
    fixed = horizon_path(Strategy(kind="horizon", horizon=1, threshold=0.3), test_prob, [0.0] * 3, 1.0, val_prob, val_ret)
    assert fixed.threshold == 0.3 and fixed.threshold_source == "fixed" and fixed.position.tolist() == [1, 1, 1]
    none = horizon_path(s, test_prob, [0.0] * 3, 1.0, None, None)
    assert none.threshold == 0.0 and none.threshold_source == "argmax (no validation predictions)"


def test_strategy_from_a_saved_config():
    assert Strategy.from_config({"labels": {"horizon": 15}, "eval": {"fee_bps": 5.0}}) == Strategy("one-bar", 15, FIT)
    cfg = load_config("default")
    s = Strategy.from_config(cfg.to_dict())
    assert (s.kind, s.horizon, s.threshold) == ("horizon", 15, -1.0)
    assert "15 overlapping sub-portfolios" in s.describe()


@pytest.mark.parametrize("override, message", [
    ({"eval": {"strategy": "daily"}}, "eval.strategy must be one of one-bar, horizon, got 'daily'"),
    ({"eval": {"entry_threshold": 1.0}},
     r"eval.entry_threshold must be -1 \(fitted on the validation tail\) or in \[0, 1\), got 1.0"),
    ({"eval": {"entry_threshold": -0.5}},
     r"eval.entry_threshold must be -1 \(fitted on the validation tail\) or in \[0, 1\), got -0.5"),
])
def test_config_rules_name_the_key(override, message):
    with pytest.raises(UserError, match=message):
        load_config("default", override)
    assert load_config("default", {"eval": {"strategy": "one-bar", "entry_threshold": 0.4}}).eval.strategy == "one-bar"
