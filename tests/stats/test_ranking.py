"""The ranking check (issue 29, deliverable 5): each N against the next shorter one over training
runs, Holm over the pairs; its three readings on simulated runs at three lengths, its rate of a false
"in order" when no length differs (measured), and its input rule."""

from __future__ import annotations

import numpy as np
import pytest

from tsflash.stats.runs import (
    IN_ORDER,
    ORDER_NOT_SHOWN,
    OUT_OF_ORDER,
    RunTestInputError,
    ranking_check,
    runs_from_means,
)

LENGTHS = (512, 4096, 32768)


def three(rng, shifts, n_folds: int = 5, n_seeds: int = 3, seed_sd: float = 0.0027, fold_sd: float = 0.05):
    """One arm's runs at three lengths, labelled by their trial keys ("n512"): a fold's market shared by
    every N, a run's own noise (the second edition's seed sd), N's true shift of the mean loss per bar."""
    fold = np.repeat(np.arange(n_folds), n_seeds)
    seed = np.tile(np.arange(n_seeds), n_folds)
    market = rng.normal(0, fold_sd, n_folds)[fold]
    return [runs_from_means(f"n{n}", fold, seed, 1.0 + market + shift + rng.normal(0, seed_sd, fold.size),
                            np.full(fold.size, 1e5)) for n, shift in zip(LENGTHS, shifts, strict=True)]


@pytest.mark.parametrize("seeds", ["fold", "crossed"])
def test_the_three_readings(seeds):
    rng = np.random.default_rng(0)
    ordered = ranking_check(three(rng, (0.0, -0.01, -0.02)), seeds=seeds)
    assert ordered.verdict == IN_ORDER and ordered.estimates_in_order
    assert [(r.arm_a, r.arm_b) for r in ordered.pairs] == [("n512", "n4096"), ("n4096", "n32768")]
    assert all(r.p_holm >= r.p for r in ordered.pairs)  # one Holm family
    reversed_ = ranking_check(three(rng, (0.0, -0.01, 0.01)), seeds=seeds)
    assert reversed_.verdict == OUT_OF_ORDER and not reversed_.estimates_in_order
    flat = ranking_check(three(rng, (0.0, 0.0, 0.0)), seeds=seeds)
    assert flat.verdict == ORDER_NOT_SHOWN


def test_in_order_is_rare_when_no_length_differs_and_found_when_each_step_is_large():
    rng = np.random.default_rng(1)
    null = sum(ranking_check(three(rng, (0.0, 0.0, 0.0))).verdict == IN_ORDER for _ in range(400))
    steps = sum(ranking_check(three(rng, (0.0, -0.004, -0.008))).verdict == IN_ORDER for _ in range(200))
    print(f"false 'in order' {null}/400, 'in order' at steps of 0.004 nats per bar {steps}/200")
    assert null <= 4  # both pairs must be significantly better: far below the 5 % of one test
    assert steps >= 100


def test_it_needs_three_lengths():
    a, b, _ = three(np.random.default_rng(2), (0.0, 0.0, 0.0))
    with pytest.raises(RunTestInputError, match="needs at least three lengths .* got 2: n512, n4096"):
        ranking_check([a, b])
