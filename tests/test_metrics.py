"""tsflash.metrics: fees applied at scoring time."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.errors import UserError
from tsflash.metrics import apply_fees, strategy_returns


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
