"""WalkForward: sklearn shape, clear errors, and property tests that no training label reaches
into a test block."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsflash.dataset.splits
from tsflash.dataset.splits import WalkForward, draw_folds, min_samples
from tsflash.errors import UserError


def test_docstring_diagrams_and_examples_hold():
    result = doctest.testmod(tsflash.dataset.splits)
    assert result.attempted >= 3 and result.failed == 0


def test_expanding_folds_exact():
    folds = list(WalkForward(n_splits=3, test_size=10, purge=3).split(np.zeros((50, 2))))
    assert [(tr.min(), tr.max(), te.min(), te.max()) for tr, te in folds] == [
        (0, 16, 20, 29),
        (0, 26, 30, 39),
        (0, 36, 40, 49),
    ]
    for tr, te in folds:
        assert tr.dtype == np.int64 and te.dtype == np.int64
        np.testing.assert_array_equal(tr, np.arange(tr.max() + 1))  # expanding: everything before the purge


def test_rolling_keeps_train_size_and_embargo_drops_bars_after_earlier_blocks():
    folds = list(WalkForward(3, 10, train_size=12, purge=3, embargo=2).split(50))
    assert [len(tr) for tr, _ in folds] == [12, 12, 10]
    np.testing.assert_array_equal(folds[2][0], np.r_[25:30, 32:37])
    assert draw_folds(50, folds).splitlines()[2] == "-------------------------TTTTT..TTTTT...##########"


def test_default_test_size_matches_timeseriessplit():
    folds = list(WalkForward(n_splits=4).split(103))
    assert [len(te) for _, te in folds] == [103 // 5] * 4
    assert folds[-1][1][-1] == 102


def test_constructor_only_stores_and_sklearn_accepts_it():
    cv = WalkForward(n_splits=-1, test_size="x", purge=-3)  # no validation in __init__
    assert (cv.n_splits, cv.test_size, cv.purge) == (-1, "x", -3)
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] + 0.1 * rng.normal(size=120) > 0).astype(int)
    scores = cross_val_score(LogisticRegression(), X, y, cv=WalkForward(3, 20, purge=2))
    assert len(scores) == 3 and np.all(scores > 0.7)
    assert WalkForward(7).get_n_splits() == 7


@pytest.mark.parametrize(
    "kwargs, n, match",
    [
        (dict(n_splits=5, test_size=10, purge=2), 40, r"Too many splits=5 for number of samples=40 with test_size=10 and purge=2:"),
        (dict(n_splits=2, test_size=10, purge=5), 25, r"n_samples >= n_splits \* test_size \+ purge \+ 1 = 26"),
        (dict(n_splits=2, test_size=10, train_size=8, purge=1), 28, r"train_size=8 training samples.*= 29"),
        (dict(n_splits=10), 9, r"Too many splits=10 for number of samples=9: the default test_size"),
        (dict(n_splits=0, test_size=5), 50, r"n_splits must be an integer >= 1, got 0"),
        (dict(n_splits=2, test_size=0), 50, r"test_size must be an integer >= 1, got 0"),
        (dict(n_splits=2, test_size=5, purge=-1), 50, r"purge must be an integer >= 0, got -1"),
        (dict(n_splits=2, test_size=5, embargo=1.5), 50, r"embargo must be an integer >= 0, got 1.5"),
        (dict(n_splits=2, test_size=5, train_size=0), 50, r"train_size must be an integer >= 1, got 0"),
        (
            dict(n_splits=3, test_size=1, train_size=1, embargo=1),
            4,
            r"embargo=1 removes every training sample of fold 2 \(train_size=1, test_size=1\)",
        ),
    ],
)
def test_errors_name_rule_and_values(kwargs, n, match):
    with pytest.raises(UserError, match=match):
        list(WalkForward(**kwargs).split(n))


def test_smallest_valid_sizes_are_accepted():
    # exactly at the boundary of the error above: one training sample
    (tr, te), = WalkForward(1, 10, purge=5).split(16)
    np.testing.assert_array_equal(tr, [0])
    np.testing.assert_array_equal(te, np.arange(6, 16))


@settings(max_examples=200, deadline=None)
@given(n_splits=st.integers(1, 6), test_size=st.integers(1, 30), purge=st.integers(0, 20),
       train_size=st.one_of(st.none(), st.integers(1, 40)))
def test_min_samples_is_the_fewest_samples_the_splitter_takes(n_splits, test_size, purge, train_size):
    """The one feasibility rule (tsflash.config.validate applies it to the configured range)."""
    need = min_samples(n_splits, test_size, purge, 1 if train_size is None else train_size)
    cv = WalkForward(n_splits, test_size, train_size=train_size, purge=purge)
    assert len(list(cv.split(need))) == n_splits
    with pytest.raises(UserError, match=rf"Too many splits.*n_samples >= .* = {need}$"):
        list(cv.split(need - 1))


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 400),
    n_splits=st.integers(1, 8),
    test_size=st.integers(1, 60),
    purge=st.integers(0, 30),
    embargo=st.integers(0, 20),
    horizon=st.integers(1, 30),
    rolling=st.booleans(),
    train_size=st.integers(1, 100),
)
def test_property_no_training_label_reaches_a_test_block(
    n, n_splits, test_size, purge, embargo, horizon, rolling, train_size
):
    cv = WalkForward(n_splits, test_size, train_size=train_size if rolling else None, purge=purge, embargo=embargo)
    need = n_splits * test_size + purge + (train_size if rolling else 1)
    if n < need:
        with pytest.raises(UserError, match="Too many splits"):
            list(cv.split(n))
        return
    try:
        folds = list(cv.split(n))
    except UserError as exc:  # a rolling window can be embargoed away entirely
        assert rolling and embargo >= 1 and "removes every training sample" in str(exc)
        return
    assert len(folds) == n_splits == cv.get_n_splits()
    tests = np.concatenate([te for _, te in folds])
    # test blocks: contiguous, consecutive, non-overlapping, the last one ends at the end
    np.testing.assert_array_equal(tests, np.arange(n - n_splits * test_size, n))
    for k, (tr, te) in enumerate(folds):
        assert len(tr) >= 1 and np.all(np.diff(tr) > 0) and len(np.intersect1d(tr, tests[k * test_size :])) == 0
        assert tr.max() + purge < te.min()  # the guarantee
        if purge >= horizon:  # no training label's horizon reaches into ANY later test block
            label_end = tr + horizon
            assert label_end.max() < te.min()
        if rolling:
            assert tr.min() >= te.min() - purge - train_size
        else:
            assert tr.min() == 0
        # embargoed bars after each earlier test block are never trained on
        for j in range(k):
            end_j = folds[j][1].max() + 1
            assert len(np.intersect1d(tr, np.arange(end_j, end_j + embargo))) == 0
        # everything not purged/embargoed inside the window IS trained on (no silent loss of data)
        lo = 0 if not rolling else te.min() - purge - train_size
        expected = set(range(lo, te.min() - purge))
        for j in range(k):
            end_j = folds[j][1].max() + 1
            expected -= set(range(end_j, end_j + embargo))
        assert set(tr.tolist()) == expected


def test_purge_below_horizon_would_leak():
    """The property above is not vacuous: with purge < horizon a training label reads test bars."""
    horizon = 5
    tr, te = next(WalkForward(2, 10, purge=horizon - 1).split(40))
    assert tr.max() + horizon >= te.min()
