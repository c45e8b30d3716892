"""tsflash.scoring.metrics: fees applied at scoring time."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.errors import UserError
from tsflash.scoring.metrics import apply_fees, strategy_returns


def test_apply_fees_worked_example():
    position = np.array([1, 1, -1, 0, 0], dtype=np.int8)
    gross = np.array([0.01, -0.02, 0.005, 0.0, 0.0])
    # turnover from flat: 1, 0, 2, 1, 0 units; 5 bps a unit
    assert apply_fees(position, gross, 5.0) == pytest.approx(gross - 5e-4 * np.array([1, 0, 2, 1, 0]), abs=1e-15)
    assert np.array_equal(apply_fees(position, gross, 0.0), gross)
    next_ret = np.array([0.01, -0.02, -0.005, 0.003, 0.001])
    g, net = strategy_returns(position, next_ret, 2.5)
    assert np.array_equal(net, apply_fees(position, g, 2.5))  # the engine's net is this function's
    with pytest.raises(UserError, match=r"fee_bps must be >= 0, got -1"):
        apply_fees(position, gross, -1)


# ---------------------------------------------------------------------------------------------
# direction apart from volatility

from tsflash.scoring.metrics import (  # noqa: E402
    DAILY_SUMS,
    bar_losses,
    classification_metrics,
    daily_loss_sums,
    direction_metrics,
    hit_rate_from_confusion,
)

#                     down  flat   up      truth   argmax
PROBS = np.array([[0.2, 0.3, 0.5],  # up      up    (hit)
                  [0.5, 0.3, 0.2],  # up      down  (miss)
                  [0.1, 0.6, 0.3],  # down    flat  (forecast flat: not in the "both" bars)
                  [0.4, 0.4, 0.2],  # flat    down
                  [0.3, 0.3, 0.4],  # -1      up    (unlabelled)
                  [0.6, 0.1, 0.3]])  # down   down  (hit)
TRUTH = np.array([2, 2, 0, 1, -1, 0])


def test_bar_losses_by_hand():
    b = bar_losses(TRUTH, PROBS)
    assert b["log_loss"][:4] == pytest.approx(-np.log([0.5, 0.2, 0.1, 0.4]))
    assert np.isnan(b["log_loss"][4])
    # moved bars: -log(p_up + p_down); the flat bar: -log p_flat
    assert b["move_loss"][[0, 1, 2, 3, 5]] == pytest.approx(-np.log([0.7, 0.7, 0.4, 0.4, 0.9]))
    # up-vs-down on moved bars: q_up = p_up / (p_up + p_down)
    assert b["direction_loss"][[0, 1, 2, 5]] == pytest.approx(-np.log([5 / 7, 2 / 7, 1 / 4, 6 / 9]))
    assert np.isnan(b["direction_loss"][[3, 4]]).all()
    assert b["direction_error"][[0, 1, 2, 5]].tolist() == [0.0, 1.0, 1.0, 0.0]  # bar 2: p_up > p_down, fell
    assert b["both"].tolist() == [1, 1, 0, 0, 0, 1]
    lab = TRUTH >= 0
    split = b["move_loss"] + np.nan_to_num(b["direction_loss"])  # the exact decomposition
    assert split[lab] == pytest.approx(b["log_loss"][lab], abs=1e-14)
    tie = bar_losses(np.array([2]), np.array([[0.3, 0.4, 0.3]]))
    assert tie["direction_error"].tolist() == [0.5] and tie["direction_loss"] == pytest.approx([np.log(2)])


def test_direction_metrics_by_hand_and_the_decomposition():
    m = direction_metrics(TRUTH, PROBS)
    assert m["n_direction"] == 3 and m["direction_hit_rate"] == pytest.approx(2 / 3)  # bars 0, 1, 5
    assert m["direction_log_loss"] == pytest.approx(-np.mean(np.log([5 / 7, 2 / 7, 6 / 9])))
    assert m["moves_fraction"] == pytest.approx(4 / 5)
    ll = classification_metrics(TRUTH, PROBS)["log_loss"]  # scikit-learn's
    assert m["move_log_loss"] + m["moves_fraction"] * m["direction_log_loss_moves"] == pytest.approx(ll, rel=1e-12)
    # the hit rate is the confusion matrix's: correct among both truly and predicted up or down
    assert hit_rate_from_confusion(classification_metrics(TRUTH, PROBS)["confusion"]) == pytest.approx(2 / 3)
    assert np.isnan(hit_rate_from_confusion(np.eye(3) * [0, 5, 0]))
    none = direction_metrics(np.array([1, -1]), PROBS[:2])
    assert none["n_direction"] == 0 and np.isnan(none["direction_hit_rate"]) and none["moves_fraction"] == 0.0


def test_a_direction_blind_forecast_scores_ln2_on_direction():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 5000)
    move = rng.uniform(0.3, 0.9, 5000)  # a volatility forecast: how likely a move is, never which way
    p = np.column_stack([move / 2, 1 - move, move / 2])
    m = direction_metrics(y, p)
    assert m["direction_log_loss_moves"] == pytest.approx(np.log(2), abs=1e-12)


def test_daily_loss_sums_add_up():
    day = 86_400_000_000
    t = np.array([0, 60_000_000, day, day + 60_000_000, 3 * day, 3 * day + 1])
    s = daily_loss_sums(t, TRUTH, PROBS)
    assert s["days"].astype(str).tolist() == ["1970-01-01", "1970-01-02", "1970-01-04"]
    assert set(s) == {"days", *DAILY_SUMS}
    b = bar_losses(TRUTH, PROBS)
    assert s["n_labelled"].tolist() == [2, 2, 1] and s["n_moves"].tolist() == [2, 1, 1]
    assert s["log_loss"] == pytest.approx([b["log_loss"][0] + b["log_loss"][1], b["log_loss"][2] + b["log_loss"][3],
                                           b["log_loss"][5]])
    assert s["n_both"].tolist() == [2, 0, 1] and s["both_hits"].tolist() == [1, 0, 1]
    assert s["direction_loss"].sum() == pytest.approx(np.nansum(b["direction_loss"]))
    with pytest.raises(UserError, match=r"times_us must be strictly increasing"):
        daily_loss_sums(t[::-1], TRUTH, PROBS)
