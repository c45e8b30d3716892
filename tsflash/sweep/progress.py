"""Progress that tells the truth: what each cell costs, how long the rest will take, and the log.

A cell's cost is ESTIMATED before it runs, in units that grow with its work: for a model cell its
training and evaluation FLOPs (steps * tokens_per_step * flops_per_token(N), plus the forward
passes over the test block), for a fold's baselines the size of the logistic regression's design
matrix. Units become seconds through a rate that finished cells refine:

    a finished cell of the same group (same N)  -> that cell's measured seconds
    else a finished cell of the same kind       -> units * (measured seconds / units of that kind)
    else                                        -> units * the prior rate of this device

The prior rate of model cells comes from a quick calibration (the bench's matmul ceiling,
`tsflash.bench.common.matmul_ceiling`, timed for ~0.2 s) times the share of it that training
reaches (TRAIN_EFFICIENCY, measured); of baselines from a measured constant. FLOPs are counted
by the one rule of `tsflash.model.flops`. `Progress` logs one line per finished cell with a cost-weighted ETA, a line every ~10 %
of a cell's training steps, and keeps a tqdm bar (on a terminal) in step with them. With several
workers (tsflash.sweep.workers) each has its own `Progress`: the cells left are refreshed from the run
folder before each job (`set_remaining`), and their time is divided by the number of workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from tsflash import engine
from tsflash.bench.common import matmul_ceiling
from tsflash.config import ExperimentConfig
from tsflash.device import device_name
from tsflash.dataset.features import FEATURE_NAMES
from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.model.flops import FWD_BWD, attention_forward_flops, flops_per_token
from tsflash.model.transformer import CausalTransformer, ModelConfig

log = logging.getLogger(__name__)

# Share of the calibrated matmul rate (float32 on CPU, bfloat16 on CUDA) that a training cell
# reaches, FLOPs counted by tsflash.model.flops.flops_per_token. Rough on purpose (the first finished cell
# replaces it): CPU preset on 2 x86_64 cores, 0.1 at N=512 and 0.3 at N=4096; published H200
# sweep, 108..354 TFLOP/s at N=512..131072 against ~700 for a bf16 matmul.
TRAIN_EFFICIENCY = {"cpu": 0.2, "cuda": 0.25}
# Baselines run on the CPU (scikit-learn): seconds per value of the logistic regression's design
# matrix (rows x lags x features); 3.8 s for 200,000 x 224 on the H200 host's CPU, 1.3e-7 on 2
# busy x86_64 cores.
BASELINE_S_PER_VALUE = 1e-7
# The precision check's exact float64 attention materialises N x N scores per layer: its
# estimated FLOPs (`precision_work`) cost this many training FLOPs each
# (measured 5-13 on 2 x86_64 cores at N=2048..4096).
PRECISION_SLOWDOWN = 6.0
# A run estimated to need longer than this on this machine gets a warning before it starts.
LONG_RUN_S = 2 * 3600.0
# The calibration matmul: (size x size) in bfloat16 on CUDA, float32 on CPU, timed ~0.2 s.
CALIBRATION_SIZE = {"cpu": 512, "cuda": 4096}


# ---------------------------------------------------------------------------------------------
# Estimated cost


@dataclass(frozen=True)
class Work:
    """One cell to do: kind "model" | "baseline" | "precision"; group: cells of equal cost
    ("n512", "baselines"); units: its estimated cost (see the module doc)."""

    kind: str
    group: str
    units: float


def n_params(cfg: ExperimentConfig, n_features: int = len(FEATURE_NAMES)) -> int:
    """Parameters of the sweep's model, counted on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = CausalTransformer(ModelConfig(n_features=n_features, **dataclasses.asdict(cfg.model)))
    return model.n_params()


def model_work(cfg: ExperimentConfig, n: int, params: int) -> Work:
    """Training FLOPs plus the forward passes over the test block (windows of N at stride N/2)."""
    fpt = flops_per_token(params, cfg.model.n_layers, cfg.model.d_model, n)
    test_bars = cfg.splits.test_days * bars_per_day(INTERVAL_US[cfg.data.interval])
    train = cfg.train.steps * cfg.train.tokens_per_step * fpt
    evaluate = (2 * test_bars + n) * fpt / FWD_BWD  # forward only
    return Work("model", f"n{n}", train + evaluate)


def baseline_work(cfg: ExperimentConfig, fold: int, n_bars: int, n_features: int = len(FEATURE_NAMES)) -> Work:
    """The logistic regression's design matrix for fold `fold` (expanding or rolling train range)."""
    per_day = bars_per_day(INTERVAL_US[cfg.data.interval])
    test_bars = cfg.splits.test_days * per_day
    train_bars = n_bars - (cfg.splits.n_folds - fold) * test_bars
    if cfg.splits.scheme == "rolling" and cfg.splits.train_days:
        train_bars = min(train_bars, cfg.splits.train_days * per_day)
    rows = min(max(train_bars, 0), engine.MAX_LOGREG_ROWS) + test_bars
    return Work("baseline", "baselines", float(rows * cfg.eval.baseline_lags * n_features))


def precision_work(cfg: ExperimentConfig) -> Work:
    """The float64 reference attention of the oracle and of each layer: every one materialises all
    N x N scores, twice the causal forward of `tsflash.model.flops` (the mask comes after)."""
    dense = 2 * sum(attention_forward_flops(1, 1, n, cfg.model.d_model) for n in cfg.lengths)
    return Work("precision", "precision", (1 + cfg.model.n_layers) * dense)


def prior_rates(device: torch.device | str, flops_per_s: float | None = None) -> dict[str, float]:
    """Seconds per unit of each kind of work before any cell is measured."""
    device = torch.device(device)
    if flops_per_s is None:
        flops_per_s = matmul_ceiling(device, CALIBRATION_SIZE[device.type], min_time=0.2)
    per_flop = 1.0 / (flops_per_s * TRAIN_EFFICIENCY[device.type])
    return {"model": per_flop, "baseline": BASELINE_S_PER_VALUE, "precision": per_flop * PRECISION_SLOWDOWN}


class CostModel:
    """Estimated seconds of a Work, refined by the measured seconds of finished cells."""

    def __init__(self, prior: dict[str, float]):
        self.prior = dict(prior)
        self.group_seconds: dict[str, list[float]] = defaultdict(list)
        self.kind_units: dict[str, float] = defaultdict(float)
        self.kind_seconds: dict[str, float] = defaultdict(float)

    def observe(self, work: Work, seconds: float) -> None:
        self.group_seconds[work.group].append(seconds)
        self.kind_units[work.kind] += work.units
        self.kind_seconds[work.kind] += seconds

    def rate(self, kind: str) -> float:
        """Seconds per unit: measured for this kind, else (precision) scaled from the measured
        model rate, else the prior."""
        if self.kind_units[kind] > 0:
            return self.kind_seconds[kind] / self.kind_units[kind]
        if kind == "precision" and self.kind_units["model"] > 0:
            return self.rate("model") * PRECISION_SLOWDOWN
        return self.prior[kind]

    def seconds(self, work: Work) -> float:
        measured = self.group_seconds.get(work.group)
        if measured:
            return sum(measured) / len(measured)
        return work.units * self.rate(work.kind)


def format_seconds(s: float) -> str:
    """42 -> "42s", 311 -> "5m 11s", 9000 -> "2.5 h", 3e5 -> "3.5 days"."""
    if not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def warn_if_long(works: list[Work], cost: CostModel, device: str, where: str, workers: int = 1) -> float:
    """Log the estimated time of `works` shared by `workers` like devices; a warning (not a
    refusal) beyond LONG_RUN_S."""
    total = sum(cost.seconds(w) for w in works) / workers
    if total > LONG_RUN_S:
        log.warning("this run needs about %s on %s (%s): far longer than %s. It runs anyway and resumes where it "
                    "stops; a CUDA machine, --preset cpu or fewer --lengths is faster", format_seconds(total),
                    device_name(device), where, format_seconds(LONG_RUN_S))
    else:
        log.info("estimated time for the remaining work: about %s (%s)", format_seconds(total), where)
    return total


# ---------------------------------------------------------------------------------------------
# Progress


class Progress:
    """Cells done / to do, a cost-weighted ETA, step lines within a cell; `clock` is injectable."""

    STEP_LINES = 10  # a step line every 1/STEP_LINES of a cell's training steps

    def __init__(self, todo: list[Work], cost: CostModel, done: int = 0, clock: Callable[[], float] = time.monotonic,
                 bar: bool | None = None, workers: int = 1):
        self.todo = list(todo)
        self.cost = cost
        self.total = done + len(todo)
        self.n = done
        self.workers = workers  # like workers share the cells left: the ETA divides their time
        self.clock = clock
        self.t0 = clock()
        self.current: Work | None = None
        self.label = ""
        # The bar shows on a terminal only (disable=None); the log lines carry the same figures.
        self.bar = tqdm(total=self.total, initial=done, unit="cell", desc="sweep", file=sys.stderr,
                        disable=True if bar is False else None, dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total} "
                        "cells [{elapsed}{postfix}]")

    def remaining_seconds(self) -> float:
        """Estimated seconds of every cell not yet finished, the current one included."""
        rest = list(self.todo)
        if self.current is not None and self.current in rest:
            rest.remove(self.current)
        return sum(self.cost.seconds(w) for w in rest) / self.workers + self._current_left()

    def set_remaining(self, todo: list[Work], done: int) -> None:
        """The cells not finished yet and the count of finished ones, as saved in the run folder:
        with several workers, cells finish elsewhere too."""
        self.todo, self.n = list(todo), done
        self.total = max(self.total, done + len(todo))
        self.bar.n = self.n

    def estimate(self, works: list[Work]) -> float:
        return sum(self.cost.seconds(w) for w in works)

    def start(self, work: Work, label: str) -> None:
        self.current, self.label = work, label
        self.t_cell = self.clock()
        self.first_step: int | None = None
        self.step_now, self.steps = 0, 0
        self.next_line = 1

    def _current_left(self) -> float:
        if self.current is None:
            return 0.0
        est, spent = self.cost.seconds(self.current), self.clock() - self.t_cell
        if self.first_step is not None and self.step_now > self.first_step:
            # measured step rate of this cell; evaluation after training adds a little
            return spent / (self.step_now - self.first_step) * (self.steps - self.step_now)
        return max(est - spent, 0.0)

    def step(self, step: int, steps: int) -> None:
        """run_fold's on_step hook: a log line every ~10 % of the steps (not at the last one)."""
        if self.first_step is None:
            self.first_step = step - 1  # a resumed cell starts past 0
        self.step_now, self.steps = step, steps
        self.bar.n = self.n + step / steps
        if step * self.STEP_LINES >= self.next_line * steps and step < steps:
            while step * self.STEP_LINES >= self.next_line * steps:
                self.next_line += 1
            left = self.remaining_seconds()
            self.bar.set_postfix_str(f"ETA {format_seconds(left)}")
            log.info("  %s: step %d of %d (%d %%), sweep ETA %s", self.label, step, steps, 100 * step // steps,
                     format_seconds(left))

    def finish(self, line: str) -> None:
        """One line per finished cell; its seconds refine the estimate (unless it resumed mid-way)."""
        work = self.current
        if work is not None:
            if self.first_step in (None, 0):  # a cell resumed mid-way would flatter the rate
                self.cost.observe(work, self.clock() - self.t_cell)
            if work in self.todo:
                self.todo.remove(work)
        self.current = None
        self.n += 1
        self.bar.n = self.n
        left = self.remaining_seconds()
        self.bar.set_postfix_str(f"ETA {format_seconds(left)}")
        log.info("[%d/%d] %s (elapsed %.0fs, ETA %s)", self.n, self.total, line, self.clock() - self.t0,
                 format_seconds(left))

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def run_logging(log_file: Path, tag: str = ""):
    """Append this invocation's log to `log_file`; console logs pass through tqdm. `tag` (a
    worker's device) marks each line when several workers write to one log."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file)
    marker = f"[{tag}] " if tag else ""
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {marker}%(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    pkg = logging.getLogger("tsflash")
    old_level = pkg.level
    pkg.addHandler(handler)
    if pkg.getEffectiveLevel() > logging.INFO:
        pkg.setLevel(logging.INFO)
    try:
        with logging_redirect_tqdm(loggers=[logging.root]):
            yield
    finally:
        pkg.removeHandler(handler)
        pkg.setLevel(old_level)
        handler.close()
