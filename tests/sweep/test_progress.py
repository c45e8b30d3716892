"""tsflash.sweep.progress: cost estimates per cell, the cost-weighted ETA on a fake clock, step lines,
the warning before a run this machine cannot finish in reasonable time."""

from __future__ import annotations

import glob
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from tsflash import engine
from tsflash.config import load_config
from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.model import flops
from tsflash.sweep.progress import (
    CALIBRATION,
    CALIBRATION_PATCH,
    LONG_RUN_S,
    Calibration,
    CostModel,
    Progress,
    Work,
    _log_interp,
    format_seconds,
    model_work,
    n_params,
    precision_work,
    preset_config,
    prior_rates,
    warn_if_long,
)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SMALL, LARGE = Work("model", "n32", 1.0), Work("model", "n64", 4.0)  # the N=64 cell costs 4 times more
# the third edition's training rule (reports/third-edition/PLAN.md)
RULE = ("train.short_fraction=0.25", "train.ema_decay=0.98", "train.restarts=4", "train.restart_screen=400")


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


def test_a_time_budget_plans_with_the_longest_cell_measured_at_each_n():
    """The ETA takes the mean of an N's finished cells; a sliced run's budget check the longest
    (tsflash.sweep.run._cell_time): early stopping makes cells of one N differ twofold, and a fold
    cut at a call's hard limit loses all its cells. Before any cell finishes, both are the prior."""
    cost = CostModel({"model": 2.0})
    assert cost.longest(SMALL) == cost.seconds(SMALL) == 2.0
    for seconds in (60.0, 140.0, 100.0):
        cost.observe(SMALL, seconds)
    assert cost.seconds(SMALL) == pytest.approx(100.0) and cost.longest(SMALL) == 140.0
    assert cost.longest(LARGE) == pytest.approx(cost.seconds(LARGE))  # no N=64 cell yet: the prior at this speed


def test_progress_within_a_cell(caplog):
    """The ETA moves within the first cell: its step rate (from the end of its first step) sets the
    speed of every cell of its kind until one finishes. Step lines are DEBUG, not INFO."""
    caplog.set_level(logging.DEBUG, logger="tsflash.sweep.progress")
    clock = FakeClock()
    progress = Progress([LARGE, LARGE], CostModel({"model": 100.0}), clock=clock, bar=False)
    progress.start(LARGE, "n64 fold 0 seed 0")
    for step in range(1, 21):
        clock.advance(1.0)
        progress.step(step, 20)
        if step == 5:  # 1 s a step: the cell takes 20 s, not the prior's 400; 15 s left here, 20 for the other
            assert progress.remaining_seconds() == pytest.approx(15 + 20)
    lines = [r.getMessage() for r in caplog.records]
    assert {r.levelno for r in caplog.records} == {logging.DEBUG}
    assert len(lines) == 9 and lines[0].startswith("  n64 fold 0 seed 0: step 2 of 20 (10 %)")  # every 10 %, not at 100 %
    assert lines[-1].startswith("  n64 fold 0 seed 0: step 18 of 20 (90 %)")
    progress.finish("n64 fold 0 seed 0")
    assert progress.remaining_seconds() == pytest.approx(20)  # the measured 20 s replace the estimate
    assert caplog.records[-1].levelno == logging.INFO  # one INFO line per finished cell


def test_the_log_at_info_has_one_line_per_cell_and_no_step_lines(caplog):
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    clock = FakeClock()
    progress = Progress([SMALL, SMALL], CostModel({"model": 1.0}), clock=clock, bar=False)
    for cell in range(2):
        progress.start(SMALL, f"n32 fold {cell}")
        for step in range(1, 11):
            clock.advance(0.1)
            progress.step(step, 10)
        progress.finish(f"n32 fold {cell}")
    assert [r.getMessage()[:5] for r in caplog.records] == ["[1/2]", "[2/2]"]


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


def test_a_patch_cell_is_priced_by_its_measured_seconds_a_step():
    """A patch cell counts the units of a per-bar cell at the same bars a step (its own FLOPs rule, the
    engine cost record's, is far below what it costs: the data path and the embedding see every bar);
    on the H200 its price is that times its measured seconds a step over the per-bar cells' at the same
    N and bars a step, so at a measured (N, bars a step) the prior's seconds a step are the measured
    ones; where no patch cell was measured (another patch size, the CPU) the per-bar price stands."""
    from dataclasses import replace

    cfg = load_config("default")
    p = n_params(cfg)
    cuda = CostModel(prior_rates("cuda"))
    calibration = cuda.prior
    for row in CALIBRATION_PATCH:
        per_bar = replace(cfg, train=replace(cfg.train, tokens_per_step=row.tokens_per_step))
        patched = replace(per_bar, model=replace(cfg.model, patch=row.patch))
        work, per_bar_work = model_work(patched, row.n, p), model_work(per_bar, row.n, p)
        assert work.units == per_bar_work.units and (work.patch, work.tokens_per_step) == (row.patch, row.tokens_per_step)
        per_bar_step = _log_interp(row.n, calibration.lengths, calibration.step_seconds) * row.tokens_per_step / 131072
        assert calibration.patch_factor(work) * per_bar_step == pytest.approx(row.step_seconds)
        assert cuda.seconds(work) == pytest.approx(cuda.seconds(per_bar_work) * calibration.patch_factor(work))
    # between the measured bars a step and beyond them: between and flat
    patched = replace(cfg, model=replace(cfg.model, patch=16))
    factor = {t: calibration.patch_factor(model_work(replace(patched, train=replace(cfg.train, tokens_per_step=t)), 32768, p))
              for t in (65536, 131072, 524288, 2097152, 8388608)}
    assert factor[65536] == factor[131072] > factor[524288] > factor[2097152] == factor[8388608]
    other = replace(cfg, model=replace(cfg.model, patch=8))  # a patch size nobody measured: the per-bar price
    assert calibration.patch_factor(model_work(other, 32768, p)) == 1.0
    assert prior_rates("cpu").patch_factor(model_work(patched, 32768, p)) == 1.0
    p16 = n_params(patched)
    assert flops.flops_per_token(p16, 4, 256, 32768, patch=16) == pytest.approx(flops.flops_per_token(p16, 4, 256, 2048) / 16)
    assert flops.flops_per_token(p16, 4, 256, 32768, patch=16) < flops.flops_per_token(p16, 4, 256, 32768) / 100


def test_the_patch_calibration_recomputes_from_its_committed_cells(monkeypatch):
    import json

    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    for row in CALIBRATION_PATCH:
        paths = [f for f in glob.glob(row.source.split(" ")[0].replace("n*", f"n{row.n}")) if not f.endswith(".cell.json")]
        costs = [json.loads(Path(f).read_text())["cost"] for f in paths]
        assert len(costs) == row.cells and {c["tokens_per_step"] for c in costs} == {row.tokens_per_step}
        assert {json.loads(Path(f).read_text())["n"] for f in paths} == {row.n}
        assert np.mean([c["train_seconds"] / c["steps"] for c in costs]) == pytest.approx(row.step_seconds, abs=5e-6)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_prior_is_the_calibration_tables_measured_cells(device):
    """At a measured N the prior of a cell of a measured config is the mean measured cell of its
    training protocol (pooled over that protocol's rows); between two measured N it lies between them."""
    cost = CostModel(prior_rates(device))
    rows = [r for r in CALIBRATION if r.device == device]
    assert rows and all(r.source for r in rows)
    for overrides in {r.overrides for r in rows}:
        for n in sorted({r.n for r in rows if r.overrides == overrides}):
            at_n = [r for r in rows if r.n == n and r.overrides == overrides]
            cfg = preset_config(at_n[0].preset, overrides=overrides)
            mean = sum(r.cells * r.seconds for r in at_n) / sum(r.cells for r in at_n)
            assert cost.seconds(model_work(cfg, n, n_params(cfg))) == pytest.approx(mean)
    cfg = preset_config(rows[0].preset)
    between = cost.seconds(model_work(cfg, 1024, n_params(cfg)))
    assert cost.seconds(model_work(cfg, 512, n_params(cfg))) * 0.5 < between < cost.seconds(model_work(cfg, 4096, n_params(cfg)))


def test_a_cell_is_priced_by_rows_of_its_own_training_protocol():
    """The third edition's rule (screened restarts, which run nearly all of their screening steps)
    measured alone on the H200 cost 1.3-1.6 times the default protocol's price for its units: a rule
    cell is priced from the rule's rows, its worst case from the rule's share of steps run; a protocol
    nobody measured (two restarts, no screen) keeps the default's rows, and so does the CPU."""
    from dataclasses import replace

    rule = preset_config("full", overrides=RULE)
    two = preset_config("full", overrides=("train.restarts=2",))
    calibration = prior_rates("cuda")
    default = CostModel(Calibration("cuda", rows=[r for r in CALIBRATION if not r.overrides]))  # the table before
    cost = CostModel(calibration)
    for n in (512, 4096, 32768):
        work = model_work(rule, n, n_params(rule))
        assert work.protocol == (4, 400, 0.25, 0.98) != model_work(two, n, n_params(two)).protocol
        assert 1.3 < cost.seconds(work) / default.seconds(work) < 1.7
        assert calibration.cell_shape(work)[0] > 0.7 > calibration.cell_shape(model_work(two, n, n_params(two)))[0]
        assert cost.seconds(model_work(two, n, n_params(two))) == default.seconds(model_work(two, n, n_params(two)))
    assert cost.seconds(model_work(rule, 512, n_params(rule))) < cost.seconds(model_work(rule, 4096, n_params(rule))) \
        < cost.seconds(model_work(rule, 32768, n_params(rule)))
    patched = replace(rule, model=replace(rule.model, patch=4))  # a patch cell: the rule's price times its factor
    work = model_work(patched, 32768, n_params(rule))  # the same parameters: the same units
    assert cost.seconds(work) == pytest.approx(cost.seconds(model_work(rule, 32768, n_params(rule)))
                                               * calibration.patch_factor(work))
    cpu = prior_rates("cpu")
    assert cpu.curves_of(model_work(rule, 512, n_params(rule))) is cpu.default


def test_the_rule_calibration_recomputes_from_its_committed_cells(monkeypatch):
    """Each rule row is its committed cell: the whole cell's seconds (its summary), the training
    seconds of every restart, and the steps run: the screened restarts' steps and the kept one's."""
    import json

    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    rows = [r for r in CALIBRATION if r.overrides]
    assert {r.n for r in rows} == {512, 32768} and all(r.overrides == RULE and r.cells == 1 for r in rows)
    for row in rows:
        (marker,) = glob.glob(row.source.split(" ")[0].replace("n*", f"n{row.n}"))
        cell = json.loads(Path(marker).read_text())
        cost, restarts = cell["cost"], cell["cost"]["restarts"]
        screened = sum(s for r, s in enumerate(restarts["steps"]) if r != restarts["kept"])
        assert cell["n"] == row.n and cell["seconds"] == pytest.approx(row.seconds, abs=0.005)
        assert cost["train_seconds"] == pytest.approx(row.train_seconds, abs=0.005)
        assert screened + cost["steps"] == row.steps
        config = json.loads((Path(marker).parents[2] / "config.json").read_text())["train"]
        assert row.max_steps == (config["restarts"] - 1) * config["restart_screen"] + config["steps"]
        assert [f"train.{k}={config[k]}" for k in ("short_fraction", "ema_decay", "restarts", "restart_screen")] \
            == list(RULE)


def test_a_run_this_machine_cannot_finish_gets_a_warning(caplog):
    caplog.set_level(logging.INFO, logger="tsflash.sweep.progress")
    cfg = load_config("default")  # --preset full on a CPU
    p = n_params(cfg)
    cost = CostModel(prior_rates("cpu"))
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


REPO = Path(__file__).resolve().parents[2]

# The README's main command, measured (docs/benchmarks.md, "The start-up estimate"): on 2 idle
# x86_64 cores by benchmarks/bench_estimate.py in a run the CPU rows were NOT calibrated on
# (reports/bench/estimate-cpu-check/; the rows come from reports/bench/estimate-cpu/), and on one
# H200 (docs/results.md: 13 min 23 s).
MEASURED_MAIN_COMMAND_S = {
    "cpu": json.loads((REPO / "reports/bench/estimate-cpu-check/estimate.json").read_text())["measured_s"],
    "cuda": 13 * 60 + 23,
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_estimate_of_the_main_command_is_within_1_5x_of_its_measured_wall_clock(device):
    """The estimate a new run gets before its first cell (the calibration table, no timing here)."""
    from tsflash.sweep.plan import SweepOptions, resolve_config
    from tsflash.sweep.progress import fresh_works

    cfg, _, _ = resolve_config(SweepOptions(lengths=[512, 4096, 32768]), device)
    estimate = sum(CostModel(prior_rates(device)).seconds(w) for w in fresh_works(cfg))
    assert 1 / 1.5 <= estimate / MEASURED_MAIN_COMMAND_S[device] <= 1.5
