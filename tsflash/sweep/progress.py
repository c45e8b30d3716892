"""Progress that tells the truth: what each cell costs, how long the rest will take, and the log.

A cell's cost is ESTIMATED before it runs, in units that grow with its work: for a model cell its
training and evaluation FLOPs (steps * tokens_per_step * flops_per_token(N), plus the forward
passes over the test block), for a fold's baselines the size of the logistic regression's design
matrix, for the precision check its dense float64 attention FLOPs. Units become seconds through
a CALIBRATED prior, corrected by what this run measures:

    a finished cell of the same group (same N)  -> that cell's measured seconds
    else                                        -> units * prior rate(N) * speed of this machine

The prior rate is seconds per unit of cells measured on a machine class (`CALIBRATION`, each row
naming where its figures come from in calibration.toml's [sources]: published GPU sweeps, the CPU
preset timed on 2 x86_64 cores, the third edition's rule alone on a GPU), interpolated in log N between the measured
lengths, from the rows of the cell's training protocol where the table has them
(`training_protocol`: validated restarts screened at a step run nearly all of their screening
steps, so their cells cost more per unit than early stopping leaves of a default cell). The speed
of this machine is 1 until it is measured: the ratio of measured to prior seconds of the finished
cells of that kind (of the model cells for the precision check and the report), and before any
cell finished, the current cell's own step rate against the rate its calibration row implies. So the ETA moves within the
first cell (after its second step), and a machine unlike the table's is corrected there.
FLOPs are counted by the one rule of `tsflash.model.flops`.

`Progress` logs one INFO line per finished cell with a cost-weighted ETA, a DEBUG line every ~10 %
of a cell's training steps, and keeps two tqdm bars (cells, and the current cell's steps) on a
terminal only; logs and pipes get the plain lines. With several workers (tsflash.sweep.workers)
each has its own `Progress`: the cells left are refreshed from the run folder before each job
(`set_remaining`), and their time is divided by the number of workers.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import logging
import math
import sys
import time
import tomllib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from tsflash import engine
from tsflash.config import ExperimentConfig, TrainConfig
from tsflash.dataset.features import FEATURE_NAMES
from tsflash.dataset.probe import probe_windows
from tsflash.device import device_name
from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.model.flops import FWD_BWD, attention_forward_flops, flops_per_token
from tsflash.model.transformer import CausalTransformer, ModelConfig

log = logging.getLogger(__name__)

# A run estimated to need longer than this on this machine gets a warning before it starts.
LONG_RUN_S = 2 * 3600.0


# ---------------------------------------------------------------------------------------------
# The calibration: measured cells, read from calibration.toml beside this module

CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")


@dataclass(frozen=True)
class Measured:
    """Model cells of one N measured on one machine class, means over `cells` cells: `seconds`
    a whole cell (training, validation passes, test evaluation), `train_seconds` its training
    loop, `steps` the training steps run (early stopping ends a cell before `max_steps`)."""

    device: str  # "cpu" | "cuda"
    preset: str  # the config the cells ran: "full" = presets/default.toml, "cpu" = with presets/cpu.toml
    n: int
    cells: int
    seconds: float
    train_seconds: float
    steps: float
    max_steps: int
    source: str
    overrides: tuple[str, ...] = ()  # --set items on top of `preset` the cells ran (another training protocol)


@dataclass(frozen=True)
class MeasuredOnce:
    """Seconds of one other kind of work ("baseline": a fold's baselines, mean over `count`
    folds; "precision": the check at the lengths of its run; "report": building the report)."""

    device: str
    preset: str
    kind: str
    seconds: float
    count: int
    lengths: tuple[int, ...]
    source: str


@dataclass(frozen=True)
class MeasuredPatch:
    """Patch-token model cells (`model.patch` = `patch`) of one N and one `tokens_per_step` (bars a
    step) measured on one machine class: `step_seconds`, the mean over `cells` cells of their
    training loop's seconds per step run. A patch cell is priced as a per-bar cell of the same bars a
    step times this over the per-bar cells' own seconds per step (`Calibration.patch_factor`)."""

    device: str
    patch: int
    n: int
    tokens_per_step: int
    cells: int
    step_seconds: float
    source: str


def _load_calibration(
    path: Path = CALIBRATION_FILE,
) -> tuple[tuple[Measured, ...], tuple[MeasuredOnce, ...], tuple[MeasuredPatch, ...]]:
    """The rows of calibration.toml, each with its source's words from [sources] (a row naming a
    source the table lacks is an error: every figure says where it comes from)."""
    with open(path, "rb") as f:
        table = tomllib.load(f)
    sources, protocols = table["sources"], table.get("protocols", {})

    def row(r: dict) -> dict:
        r = dict(r)
        r["source"] = sources[r["source"]]
        if "protocol" in r:
            r["overrides"] = tuple(protocols[r.pop("protocol")])
        if "lengths" in r:
            r["lengths"] = tuple(r["lengths"])
        return r

    return (
        tuple(Measured(**row(r)) for r in table["cells"]),
        tuple(MeasuredOnce(**row(r)) for r in table["other"]),
        tuple(MeasuredPatch(**row(r)) for r in table["patch"]),
    )


CALIBRATION, CALIBRATION_OTHER, CALIBRATION_PATCH = _load_calibration()


# ---------------------------------------------------------------------------------------------
# Estimated cost


@dataclass(frozen=True)
class Work:
    """One piece of work: kind "model" | "baseline" | "precision" | "report"; group: cells of equal
    cost ("n512", "baselines"); units: its estimated cost (see the module doc); n: a model cell's
    context length; train_share: the share of `units` that is training (the rest evaluation); patch,
    tokens_per_step: a model cell's token and batch (a patch cell's price, `Calibration.rate`)."""

    kind: str
    group: str
    units: float
    n: int = 0
    train_share: float = 1.0
    patch: int = 1  # a model cell's bars per token (model.patch)
    tokens_per_step: int = 0  # a model cell's bars a step (train.tokens_per_step)
    protocol: tuple = ()  # a model cell's `training_protocol`; () the default's


def training_protocol(train: TrainConfig) -> tuple:
    """The training settings that change a cell's cost beyond its units (`model_work` counts its most
    steps): how many of them early stopping leaves run and what a step costs beside its FLOPs.
    Screened restarts run nearly all of their screening steps, where one default training stops at
    about half of its most, so a cell of the third edition's rule took 1.3 to 1.6 times the default
    protocol's price alone on one GPU (calibration.toml, source "rule"): a cell is priced from rows of its own
    protocol where the table has them."""
    return (train.restarts, train.restart_screen, train.short_fraction, train.ema_decay)


def n_params(cfg: ExperimentConfig, n_features: int = len(FEATURE_NAMES)) -> int:
    """Parameters of the sweep's model, counted on the meta device (no memory)."""
    return _count_params(tuple(dataclasses.asdict(cfg.model).items()), n_features)


@functools.cache  # a model built on the meta device still takes seconds on a busy CPU
def _count_params(settings: tuple, n_features: int) -> int:
    with torch.device("meta"):
        model = CausalTransformer(ModelConfig(n_features=n_features, **dict(settings)))
    return model.n_params()


def model_work(cfg: ExperimentConfig, n: int, params: int) -> Work:
    """Training FLOPs plus the forward passes over the test block (windows of N at stride N/2), per bar
    (a patch model's cell in a per-bar one's units: the comment below says why)."""
    # A patch model (model.patch = p) is counted as a per-bar one at the same bars a step: its own
    # FLOPs (`flops_per_token(..., patch=p)`) are 1/7 of that at N=32768, yet its cells do not run at
    # the FLOPs' speed (a step's bars still pass the data path and the embedding: measured on the GPU,
    # 2x to 45x slower than their FLOPs at the per-bar rates). Its price is these units times its
    # measured seconds a step over the per-bar cells' (`Calibration.patch_factor`, CALIBRATION_PATCH).
    fpt = flops_per_token(params, cfg.model.n_layers, cfg.model.d_model, n)  # per bar
    test_bars = cfg.splits.test_days * bars_per_day(INTERVAL_US[cfg.data.interval])
    train = engine.cell_steps(cfg.train) * cfg.train.tokens_per_step * fpt
    scored = 1 if cfg.train.restart_screen else cfg.train.restarts  # screened: the kept restart alone is scored
    evaluate = (2 * test_bars + n) * fpt / FWD_BWD * scored  # forward only
    return Work(
        "model",
        f"n{n}",
        train + evaluate,
        n=n,
        train_share=train / (train + evaluate),
        patch=cfg.model.patch,
        tokens_per_step=cfg.train.tokens_per_step,
        protocol=training_protocol(cfg.train),
    )


def baseline_work(cfg: ExperimentConfig, fold: int, n_bars: int, n_features: int = len(FEATURE_NAMES)) -> Work:
    """The logistic regression's design matrix for fold `fold` (expanding or rolling train range)."""
    per_day = bars_per_day(INTERVAL_US[cfg.data.interval])
    test_bars = cfg.splits.test_days * per_day
    train_bars = n_bars - (cfg.splits.n_folds - fold) * test_bars
    if cfg.splits.scheme == "rolling" and cfg.splits.train_days:
        train_bars = min(train_bars, cfg.splits.train_days * per_day)
    rows = min(max(train_bars, 0), engine.MAX_LOGREG_ROWS) + test_bars
    # the probe's columns at every N (eval.probe), fitted on as many rows, as further columns
    probe = sum(2 * len(probe_windows(n)) for n in cfg.lengths) if cfg.eval.probe else 0
    return Work("baseline", "baselines", float(rows * (cfg.eval.baseline_lags * n_features + probe)))


def precision_work(cfg: ExperimentConfig) -> Work:
    """The float64 reference attention of the oracle and of each layer: every one materialises all
    N x N scores, twice the causal forward of `tsflash.model.flops` (the mask comes after)."""
    dense = 2 * sum(attention_forward_flops(1, 1, n, cfg.model.d_model) for n in cfg.lengths)
    return Work("precision", "precision", (1 + cfg.model.n_layers) * dense)


def report_work() -> Work:
    """Building the report: one unit (its calibrated seconds)."""
    return Work("report", "report", 1.0)


@functools.cache
def preset_config(
    preset: str, lengths: tuple[int, ...] = (512, 4096, 32768), overrides: tuple[str, ...] = ()
) -> ExperimentConfig:
    """The default config as a calibration row ran it: "full" or with the reduced CPU preset, and the
    row's --set items."""
    from tsflash.config import parse_overrides
    from tsflash.sweep.plan import SweepOptions, resolve_config

    opts = SweepOptions(lengths=list(lengths), preset=preset, overrides=parse_overrides(list(overrides)))
    return resolve_config(opts, "cpu")[0]


def _row_work(row: Measured | MeasuredOnce) -> Work:
    if isinstance(row, Measured):
        cfg = preset_config(row.preset, overrides=row.overrides)
        return model_work(cfg, row.n, n_params(cfg))
    cfg = preset_config(row.preset, row.lengths or (512, 4096, 32768))
    if row.kind == "baseline":  # the mean over the folds of the row
        works = [baseline_work(cfg, k, _bars_of(cfg)) for k in range(cfg.splits.n_folds)]
        return Work("baseline", "baselines", sum(w.units for w in works) / len(works))
    return precision_work(cfg) if row.kind == "precision" else report_work()


def _row_protocol(row: Measured) -> tuple:
    return training_protocol(preset_config(row.preset, overrides=row.overrides).train)


def _bars_of(cfg: ExperimentConfig) -> int:
    from tsflash.sweep.source import configured_bar_count

    return configured_bar_count(cfg)


def _log_interp(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """ys at x, linear in (log x, log y) between the points, flat beyond the ends."""
    if x <= xs[0] or len(xs) == 1:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    t = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
    return math.exp(math.log(ys[i - 1]) + t * (math.log(ys[i]) - math.log(ys[i - 1])))


@dataclass(frozen=True)
class _Curves:
    """One training protocol's model cells by N (pooled over its rows, means over cells): seconds per
    unit, the share of the most steps run, training's share of a cell's seconds, per-bar seconds a
    step at the rows' own bars a step."""

    lengths: list[int]
    model_rate: list[float]
    step_share: list[float]
    train_fraction: list[float]
    step_seconds: list[float]

    @classmethod
    def of(cls, rows: list[Measured]) -> _Curves:
        by_n: dict[int, list[Measured]] = defaultdict(list)
        for r in rows:
            by_n[r.n].append(r)
        lengths = sorted(by_n)

        def pooled(value: Callable[[Measured], float]) -> list[float]:  # mean over cells, at each N
            return [sum(r.cells * value(r) for r in by_n[n]) / sum(r.cells for r in by_n[n]) for n in lengths]

        return cls(
            lengths,
            pooled(lambda r: r.seconds / _row_work(r).units),
            pooled(lambda r: r.steps / r.max_steps),
            pooled(lambda r: r.train_seconds / r.seconds),
            pooled(lambda r: r.train_seconds / r.steps),
        )


class Calibration:
    """The prior of one device type from `CALIBRATION`: seconds per unit of each kind of work, a
    model cell's by N and training protocol (its own rows where the table has them, else the
    default's); and the shape of a model cell (training steps run, training's share of its
    seconds), for reading the current cell's step rate."""

    def __init__(self, device_type: str, rows=CALIBRATION, other=CALIBRATION_OTHER, patch_rows=CALIBRATION_PATCH):
        rows = [r for r in rows if r.device == device_type]
        if not rows:
            raise ValueError(f"no calibration for device type {device_type!r}")
        by_protocol: dict[tuple, list[Measured]] = defaultdict(list)
        for r in rows:
            by_protocol[_row_protocol(r)].append(r)
        self.curves = {protocol: _Curves.of(rs) for protocol, rs in by_protocol.items()}
        plain = next((r for r in rows if not r.overrides), rows[0])
        self.default = self.curves[_row_protocol(plain)]  # a protocol nobody measured is priced as the preset's
        self.lengths, self.step_seconds = self.default.lengths, self.default.step_seconds
        self.row_tokens = preset_config(plain.preset).train.tokens_per_step
        # patch -> {bars a step: (lengths, measured over per-bar seconds a step at those bars)}
        self.patch_factors: dict[int, dict[int, tuple[list[int], list[float]]]] = defaultdict(dict)
        for row in sorted((r for r in patch_rows if r.device == device_type), key=lambda r: r.n):
            per_bar = _log_interp(row.n, self.lengths, self.step_seconds) * row.tokens_per_step / self.row_tokens
            ns, factors = self.patch_factors[row.patch].setdefault(row.tokens_per_step, ([], []))
            ns.append(row.n)
            factors.append(row.step_seconds / per_bar)
        self.rates: dict[str, float] = {}
        for kind in ("baseline", "precision", "report"):
            measured = [r for r in other if r.device == device_type and r.kind == kind]
            self.rates[kind] = sum(r.seconds / _row_work(r).units for r in measured) / max(len(measured), 1)

    def curves_of(self, work: Work) -> _Curves:
        """The rows that price a model cell: those of its training protocol, else the default's."""
        return self.curves.get(work.protocol, self.default)

    def rate(self, work: Work) -> float:
        """Prior seconds per unit of `work`; a patch cell's, the per-bar rate times `patch_factor`."""
        if work.kind == "model":
            curves = self.curves_of(work)
            return _log_interp(work.n, curves.lengths, curves.model_rate) * self.patch_factor(work)
        return self.rates[work.kind]

    def patch_factor(self, work: Work) -> float:
        """A patch cell's measured seconds a step over a per-bar cell's at the same N and bars a step,
        interpolated in log N, then in log bars a step, between the measured cells of its patch size
        (flat beyond them); 1 for per-bar cells and for a patch size nobody measured (the per-bar
        price: high, never low)."""
        by_tokens = self.patch_factors.get(work.patch) if work.patch > 1 else None
        if not by_tokens:
            return 1.0
        tokens = sorted(by_tokens)
        at_n = [_log_interp(work.n, *by_tokens[t]) for t in tokens]
        return _log_interp(work.tokens_per_step or tokens[0], tokens, at_n)

    def cell_shape(self, work: Work) -> tuple[float, float]:
        """(share of the maximum steps a cell runs, share of its seconds that is training) at N."""
        curves = self.curves_of(work)
        return (
            _log_interp(work.n, curves.lengths, curves.step_share),
            _log_interp(work.n, curves.lengths, curves.train_fraction),
        )

    def extra_at_max_steps(self, work: Work, seconds: float) -> float:
        """The seconds a cell estimated at `seconds` adds when it runs all its maximum steps (no early
        stop): the worst case of a cost plan."""
        return seconds * (1 / self.cell_shape(work)[0] - 1)


def prior_rates(device: torch.device | str) -> Calibration:
    """The calibrated prior of `device`'s type (cpu or cuda)."""
    return Calibration(torch.device(device).type)


class CostModel:
    """Estimated seconds of a Work: the prior (a `Calibration`, or plain seconds per unit of each
    kind) times the measured speed of this machine; a finished cell's group by its own seconds."""

    def __init__(self, prior: Calibration | Mapping[str, float]):
        self.prior = prior
        self.group_seconds: dict[str, list[float]] = defaultdict(list)
        self.kind_seconds: dict[str, float] = defaultdict(float)
        self.kind_prior: dict[str, float] = defaultdict(float)
        self.provisional: dict[str, float] = {}  # kind -> speed read from the current cell's steps

    def prior_seconds(self, work: Work) -> float:
        rate = self.prior.rate(work) if isinstance(self.prior, Calibration) else self.prior[work.kind]
        return work.units * rate

    def observe(self, work: Work, seconds: float) -> None:
        self.group_seconds[work.group].append(seconds)
        self.kind_seconds[work.kind] += seconds
        self.kind_prior[work.kind] += self.prior_seconds(work)
        self.provisional.pop(work.kind, None)

    def observe_steps(self, work: Work, seconds_per_step: float, steps: int) -> None:
        """The current cell's step rate before any cell of its kind finished: the whole cell
        projected from it (its calibrated steps run and training share) against its prior."""
        share_steps, share_train = self.prior.cell_shape(work) if isinstance(self.prior, Calibration) else (1.0, 1.0)
        projected = seconds_per_step * steps * share_steps / share_train
        if self.kind_prior[work.kind] == 0 and (prior := self.prior_seconds(work)) > 0:
            self.provisional[work.kind] = projected / prior

    def speed(self, kind: str) -> float:
        """Measured seconds / prior seconds of finished work of this kind (of model cells for the
        precision check and the report, which run on the same machine), else the current cell's
        provisional speed, else 1."""
        for k in (kind,) if kind in ("model", "baseline") else (kind, "model"):  # baselines run on the CPU
            if self.kind_prior[k] > 0:
                return self.kind_seconds[k] / self.kind_prior[k]
            if k in self.provisional:
                return self.provisional[k]
        return 1.0

    def measured(self, work: Work) -> bool:
        """Whether `seconds(work)` is a measurement (finished work of its group), not a calibrated guess."""
        return bool(self.group_seconds.get(work.group))

    def longest(self, work: Work) -> float:
        """The longest finished cell of work's group, else `seconds(work)`."""
        return max(self.group_seconds.get(work.group) or [self.seconds(work)])

    def seconds(self, work: Work) -> float:
        measured = self.group_seconds.get(work.group)
        if measured:
            return sum(measured) / len(measured)
        return self.prior_seconds(work) * self.speed(work.kind)


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


def fresh_works(cfg: ExperimentConfig, trials: int = 1, precision: bool = True) -> list[Work]:
    """Every piece of work of a new run of `cfg` (no cell saved yet): each fold's baselines, the
    model cells of every N, trial, fold and seed, the precision check, the report."""
    from tsflash.sweep.source import configured_bar_count

    params, n_bars = n_params(cfg), configured_bar_count(cfg)
    works = [baseline_work(cfg, k, n_bars) for k in range(cfg.splits.n_folds)]
    works += [
        model_work(cfg, n, params)
        for n in cfg.lengths
        for _ in range(trials * cfg.splits.n_folds * len(cfg.train.seeds))
    ]
    return works + ([precision_work(cfg)] if precision else []) + [report_work()]


def warn_if_long(works: list[Work], cost: CostModel, device: str, where: str, workers: int = 1) -> float:
    """Log the estimated time of `works` shared by `workers` like devices; a warning (not a
    refusal) beyond LONG_RUN_S."""
    total = sum(cost.seconds(w) for w in works) / workers
    if total > LONG_RUN_S:
        log.warning(
            "this run needs about %s on %s (%s): far longer than %s. It runs anyway and resumes where it "
            "stops; a CUDA machine, --preset cpu or fewer --lengths is faster",
            format_seconds(total),
            device_name(device),
            where,
            format_seconds(LONG_RUN_S),
        )
    else:
        log.info("estimated time for the remaining work: about %s (%s)", format_seconds(total), where)
    return total


# ---------------------------------------------------------------------------------------------
# Progress


class Progress:
    """Cells done / to do, a cost-weighted ETA, step lines within a cell; `clock` is injectable."""

    STEP_LINES = 10  # a DEBUG step line every 1/STEP_LINES of a cell's training steps

    def __init__(
        self,
        todo: list[Work],
        cost: CostModel,
        done: int = 0,
        clock: Callable[[], float] = time.monotonic,
        bar: bool | None = None,
        workers: int = 1,
    ):
        self.todo = list(todo)
        self.cost = cost
        self.total = done + len(todo)
        self.n = done
        self.workers = workers  # like workers share the cells left: the ETA divides their time
        self.clock = clock
        self.t0 = clock()
        self.current: Work | None = None
        self.label = ""
        # Bars on a terminal only (disable=None: tqdm draws them when stderr is a tty); logs and
        # pipes get the plain log lines, which carry the same figures.
        self._bar_off = True if bar is False else None
        self.bar = tqdm(
            total=self.total,
            initial=done,
            unit="cell",
            desc="sweep",
            file=sys.stderr,
            disable=self._bar_off,
            dynamic_ncols=True,
            position=0,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total} cells [{elapsed}{postfix}]",
        )
        self.step_bar = None

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
        self.bar.total = self.total
        self._draw(self.bar, self.n)

    def estimate(self, works: list[Work]) -> float:
        return sum(self.cost.seconds(w) for w in works)

    def start(self, work: Work, label: str) -> None:
        self.current, self.label = work, label
        self.t_cell = self.clock()
        self.first_step: int | None = None
        self.t_first = self.t_cell
        self.step_now, self.steps = 0, 0
        self.next_line = 1
        self._close_step_bar()

    def _seconds_per_step(self) -> float | None:
        """Measured from the end of the cell's first step (which also pays one-off costs)."""
        done = self.step_now - (self.first_step or 0) - 1
        return (self.clock() - self.t_first) / done if self.first_step is not None and done > 0 else None

    def _current_left(self) -> float:
        if self.current is None:
            return 0.0
        spent = self.clock() - self.t_cell
        if self.first_step and (per_step := self._seconds_per_step()) is not None:
            return per_step * (self.steps - self.step_now)  # resumed mid-way: its own steps left
        return max(self.cost.seconds(self.current) - spent, 0.0)

    def step(self, step: int, steps: int) -> None:
        """run_fold's on_step hook: the step bar, the ETA refined by this cell's step rate, and a
        DEBUG line every ~10 % of the steps (not at the last one)."""
        if self.first_step is None:
            self.first_step = step - 1  # a resumed cell starts past 0
            self.t_first = self.clock()
            self.step_bar = tqdm(
                total=steps,
                initial=step - 1,
                unit="step",
                desc=f"  {self.label}",
                leave=False,
                file=sys.stderr,
                disable=self._bar_off,
                dynamic_ncols=True,
                position=1,
            )
        self.step_now, self.steps = step, steps
        per_step = self._seconds_per_step()
        if per_step is not None and self.first_step == 0 and self.current is not None:
            self.cost.observe_steps(self.current, per_step, steps)
        left = self.remaining_seconds()
        if self.step_bar is not None:
            self.step_bar.set_postfix_str(f"sweep ETA {format_seconds(left)}", refresh=False)
            self._draw(self.step_bar, step)
        if step * self.STEP_LINES >= self.next_line * steps and step < steps:
            while step * self.STEP_LINES >= self.next_line * steps:
                self.next_line += 1
            self.bar.set_postfix_str(f"ETA {format_seconds(left)}", refresh=False)
            self._draw(self.bar, self.n)
            log.debug(
                "  %s: step %d of %d (%d %%), sweep ETA %s",
                self.label,
                step,
                steps,
                100 * step // steps,
                format_seconds(left),
            )

    def finish(self, line: str) -> None:
        """One INFO line per finished cell; its seconds refine the estimate (unless it resumed mid-way)."""
        work = self.current
        if work is not None:
            if self.first_step in (None, 0):  # a cell resumed mid-way would flatter the rate
                self.cost.observe(work, self.clock() - self.t_cell)
            if work in self.todo:
                self.todo.remove(work)
        self.current = None
        self._close_step_bar()
        self.n += 1
        left = self.remaining_seconds()
        self.bar.set_postfix_str(f"ETA {format_seconds(left)}", refresh=False)
        self._draw(self.bar, self.n)
        log.info(
            "[%d/%d] %s (elapsed %.0fs, ETA %s)", self.n, self.total, line, self.clock() - self.t0, format_seconds(left)
        )

    @staticmethod
    def _draw(bar, n) -> None:
        bar.n = n
        bar.refresh()  # setting n alone does not redraw a bar

    def _close_step_bar(self) -> None:
        if self.step_bar is not None:
            self.step_bar.close()
            self.step_bar = None

    def close(self) -> None:
        self._close_step_bar()
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
