"""FoldResult on disk: probabilities stored as float16, the optional arrays of the horizon
strategy and the validation tail, and cells saved before those arrays existed."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.engine import FoldResult


def _result(**kw) -> FoldResult:
    rng = np.random.default_rng(0)
    m = 7
    probs = rng.dirichlet([1, 1, 1], m).astype(np.float32)
    base = dict(fold=0, n=64, seed=0, train_start=0, train_end=1, test_start=2, test_end=3, metrics={"accuracy": 0.5},
                test_time=np.arange(m, dtype=np.int64), y_true=np.zeros(m, np.int8), y_prob=probs,
                position=(probs.argmax(1) - 1).astype(np.int8), gross_returns=np.zeros(m), net_returns=np.zeros(m),
                cost={}, flat_threshold=1e-3)
    return FoldResult(**(base | kw))


def test_probabilities_are_stored_as_float16_and_loaded_as_float32(tmp_path):
    r = _result(next_ret=np.linspace(-1e-3, 1e-3, 7), val_time=np.arange(3, dtype=np.int64),
                val_prob=np.full((3, 3), 1 / 3, np.float32), val_next_ret=np.ones(3))
    npz, _ = r.save(tmp_path / "cell")
    with np.load(npz) as z:
        assert z["y_prob"].dtype == np.float16 and z["val_prob"].dtype == np.float16
    back = FoldResult.load(tmp_path / "cell")
    assert back.y_prob.dtype == np.float32
    assert np.array_equal(back.y_prob, r.y_prob.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(back.y_prob, r.y_prob, atol=5e-4)
    assert np.array_equal(back.next_ret, r.next_ret) and np.array_equal(back.val_time, r.val_time)
    assert back.val_prob.shape == (3, 3) and np.array_equal(back.val_next_ret, np.ones(3))
    assert np.array_equal(back.position, r.position)  # the one-bar positions as the engine computed them


def test_a_cell_saved_before_the_optional_arrays_still_loads(tmp_path):
    r = _result()
    npz, _ = r.save(tmp_path / "cell")
    with np.load(npz) as z:  # rewrite it as an older version wrote it: only the six first arrays
        old = {k: z[k] for k in ("test_time", "y_true", "y_prob", "position", "gross_returns", "net_returns")}
    np.savez(npz, **old)
    back = FoldResult.load(tmp_path / "cell")
    assert back.next_ret.shape == (0,) and back.val_prob.shape == (0, 3) and back.val_time.dtype == np.int64
    assert back.metrics == {"accuracy": 0.5}


@pytest.mark.parametrize("field", ["next_ret", "val_prob"])
def test_the_optional_arrays_default_to_empty(field):
    assert len(getattr(_result(), field)) == 0
