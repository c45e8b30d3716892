"""tsflash.sweep.progress: cost estimates per cell, the cost-weighted ETA on a fake clock, step lines,
the warning before a run this machine cannot finish in reasonable time."""

from __future__ import annotations

import logging
import re

import pytest

from tsflash import engine
from tsflash.config import load_config
from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.model import flops
from tsflash.sweep import progress as progress_module
from tsflash.sweep.progress import (
    CALIBRATION_SIZE, LONG_RUN_S, TRAIN_EFFICIENCY, CostModel, Progress, Work, format_seconds, model_work, n_params,
    precision_work, prior_rates, warn_if_long,
)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SMALL, LARGE = Work("model", "n32", 1.0), Work("model", "n64", 4.0)  # the N=64 cell costs 4 times more


def eta_of(caplog) -> str:
    return re.findall(r"ETA ([^)]+)\)", caplog.records[-1].getMessage())[-1]


def test_eta_is_weighted_by_cost_and_refined_by_finished_cells(caplog):
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    clock = FakeClock()
    cost = CostModel({"model": 2.0, "baseline": 1.0, "precision": 1.0})  # prior: 2 s per unit
    progress = Progress([SMALL, SMALL, LARGE, LARGE], cost, clock=clock, bar=False)
    assert progress.remaining_seconds() == pytest.approx(2 * 2 + 2 * 8)  # before any measurement: the prior
    progress.start(SMALL, "n32 fold 0")
    clock.advance(10.0)
    progress.finish("n32 fold 0")
    # measured 10 s for 1 unit: the other N=32 cell takes 10 s, each N=64 cell 4 units x 10 s
    assert progress.remaining_seconds() == pytest.approx(10 + 2 * 40)
    assert eta_of(caplog) == "1m 30s"  # a count-based ETA would say 30 s
    assert caplog.records[-1].getMessage().startswith("[1/4] n32 fold 0 (elapsed 10s")
    progress.start(LARGE, "n64 fold 0")
    clock.advance(50.0)
    progress.finish("n64 fold 0")
    # N=64 now measured itself (50 s), N=32 too (10 s)
    assert progress.remaining_seconds() == pytest.approx(10 + 50)
    assert eta_of(caplog) == "1m 00s"


def test_progress_within_a_cell(caplog):
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    clock = FakeClock()
    progress = Progress([LARGE, LARGE], CostModel({"model": 100.0}), clock=clock, bar=False)
    progress.start(LARGE, "n64 fold 0 seed 0")
    for step in range(1, 21):
        clock.advance(1.0)
        progress.step(step, 20)
        if step == 5:  # 5 s for a quarter of the steps: 15 s left here, then the other cell's 400 s estimate
            assert progress.remaining_seconds() == pytest.approx(15 + 400)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 9 and lines[0].startswith("  n64 fold 0 seed 0: step 2 of 20 (10 %)")  # every 10 %, not at 100 %
    assert lines[-1].startswith("  n64 fold 0 seed 0: step 18 of 20 (90 %)")
    progress.finish("n64 fold 0 seed 0")
    assert progress.remaining_seconds() == pytest.approx(20)  # the measured 20 s replace the estimate


def test_a_cell_resumed_mid_way_does_not_set_the_rate():
    clock = FakeClock()
    progress = Progress([SMALL, SMALL], CostModel({"model": 3.0}), clock=clock, bar=False)
    progress.start(SMALL, "n32 fold 0")
    for step in (8, 9, 10):  # resumed from a checkpoint at step 7
        clock.advance(0.1)
        progress.step(step, 10)
    progress.finish("n32 fold 0")
    assert progress.remaining_seconds() == pytest.approx(3.0)  # still the prior


def test_model_cost_follows_the_flops_rule():
    cfg = load_config("default")
    p = n_params(cfg)
    assert 3_000_000 < p < 3_500_000  # "~3.2 M parameters" (tsflash/presets/default.toml)
    small, large = model_work(cfg, 512, p), model_work(cfg, 131072, p)
    train = cfg.train.steps * cfg.train.tokens_per_step
    assert small.units > train * engine.flops_per_token(p, 4, 256, 512)
    assert large.units / small.units == pytest.approx(engine.flops_per_token(p, 4, 256, 131072)
                                                      / engine.flops_per_token(p, 4, 256, 512), rel=0.05)
    assert precision_work(cfg).units > 0
    rates = prior_rates("cpu", flops_per_s=1e10)
    assert rates["model"] == pytest.approx(1 / (1e10 * TRAIN_EFFICIENCY["cpu"]))


def test_cell_costs_count_flops_by_the_one_rule():
    """Training + the test block's forward passes by tsflash.model.flops; the precision check's float64
    reference materialises the dense N x N scores: twice the causal count, 4 N^2 d per layer and the oracle."""
    cfg = load_config("default")
    p = n_params(cfg)
    fpt = flops.flops_per_token(p, cfg.model.n_layers, cfg.model.d_model, 4096)
    test_bars = cfg.splits.test_days * bars_per_day(INTERVAL_US[cfg.data.interval])
    forward = (2 * test_bars + 4096) * fpt / flops.FWD_BWD
    assert model_work(cfg, 4096, p).units == cfg.train.steps * cfg.train.tokens_per_step * fpt + forward
    dense = sum(4.0 * n * n * cfg.model.d_model for n in cfg.lengths)
    assert precision_work(cfg).units == (1 + cfg.model.n_layers) * dense


def test_the_prior_rate_is_calibrated_by_the_benchs_matmul_ceiling(monkeypatch):
    calls = []

    def ceiling(device, size, min_time):
        calls.append((device.type, size, min_time))
        return 2e10

    monkeypatch.setattr(progress_module, "matmul_ceiling", ceiling)
    assert prior_rates("cpu")["model"] == pytest.approx(1 / (2e10 * TRAIN_EFFICIENCY["cpu"]))
    assert calls == [("cpu", CALIBRATION_SIZE["cpu"], 0.2)]


def test_a_run_this_machine_cannot_finish_gets_a_warning(caplog):
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    cfg = load_config("default")  # --preset full on a CPU
    p = n_params(cfg)
    cost = CostModel(prior_rates("cpu", flops_per_s=50e9))  # a fast CPU
    works = [model_work(cfg, n, p) for n in cfg.lengths for _ in range(cfg.splits.n_folds)]
    total = warn_if_long(works, cost, "cpu", "15 cells to do")
    assert total > LONG_RUN_S
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "days on cpu" in record.getMessage()
    caplog.clear()
    warn_if_long([SMALL], CostModel({"model": 1.0}), "cpu", "1 cell to do")
    assert caplog.records[0].levelno == logging.INFO and "about 1s" in caplog.records[0].getMessage()


@pytest.mark.parametrize("seconds, text", [(42, "42s"), (311, "5m 11s"), (9000, "2.5 h"), (3e5, "3.5 days"),
                                           (float("nan"), "?")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_several_workers_share_the_eta_and_count_each_others_cells(caplog):
    """With K workers the cells left are shared: the ETA divides their time by K; cells finished by
    other workers (seen in the run folder) are counted before the next job."""
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    clock = FakeClock()
    cost = CostModel({"model": 2.0})
    progress = Progress([SMALL, SMALL, LARGE, LARGE], cost, clock=clock, bar=False, workers=2)
    assert progress.remaining_seconds() == pytest.approx((2 * 2 + 2 * 8) / 2)
    progress.set_remaining([SMALL, LARGE], done=2)  # the other worker finished one of each meanwhile
    progress.start(LARGE, "n64 fold 1")
    clock.advance(8.0)
    progress.finish("n64 fold 1")
    assert caplog.records[-1].getMessage().startswith("[3/4] n64 fold 1")
    assert progress.remaining_seconds() == pytest.approx(2 / 2)  # the N=32 cell left, shared by 2 workers
    warn_if_long([LARGE, LARGE], CostModel({"model": 1.0}), "cpu", "2 cells", workers=2)
    assert "about 4s" in caplog.records[-1].getMessage()
