"""Typed experiment configuration and its TOML presets.

One `ExperimentConfig` describes everything that is held fixed across a context-length sweep:
data range, target, splits, model, optimizer, budget and evaluation. Only the context length N
(and, with `--trials`, the searched hyperparameters) varies between trials.

Presets live in `tsflash/presets/*.toml` (package data, read with importlib.resources, so an
installed copy has them); a preset overrides a few fields of the defaults below.
Unknown keys and wrong types are errors that name the key, so a typo never silently runs the
default. Every run writes its resolved config (`to_dict`) into its run folder.

`validate` composes the rules of the concepts a config names, each kept where the concept lives:
symbols (`tsflash.data.store.check_pair`), the model's names and shape (`tsflash.model.spec`)
and rotary cover (`tsflash.model.rotary`), walk-forward feasibility
(`tsflash.dataset.splits.min_samples`) and the trading rules (`tsflash.scoring.strategy`). The
command-line parsing of lengths and `--set` is in `tsflash.commands.options`.

A stored config (a run folder's config.json) carries `config_version`; one without it is
version 0. `migrate` upgrades it step by step to `CONFIG_VERSION`, each step filling the keys
added then at the value an older config means. `to_dict`, the form every hash digests, leaves
those keys out at that value, so older runs keep their config hash and run key. The current
protocol (validation tail, early stopping, seeds, far-context scoring) is stated in
tsflash/presets/default.toml; docs/config.md lists every key (`tsflash.config_docs`).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import functools
import importlib.resources
import json
import math
import tomllib
import typing
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path

from tsflash.data.store import check_pair
from tsflash.dataset.splits import min_samples
from tsflash.errors import UserError
from tsflash.identity import digest
from tsflash.intervals import INTERVAL_US, US_PER_DAY, bars_per_day, duration_bars, duration_days, parse_duration
from tsflash.model.rotary import ROTARY_COVER, rotary_base_for, rotary_covers, rotary_wavelength
from tsflash.model.spec import ModelSettings, check_patch
from tsflash.runfolder import RunFolder
from tsflash.stats.pbo import CSCV_BLOCKS, MAX_PBO
from tsflash.stats.runs import SEED_TESTS
from tsflash.stats.sharpe import DSR_CONFIDENCE

# The presets ship inside the package (pyproject's package-data): a wheel or `pip install .` has them.
PRESETS_DIR = importlib.resources.files("tsflash") / "presets"

REDUCED_PRESET = "cpu"  # run.json's "preset" of a run on presets/cpu.toml: a smoke test, never evidence
SMOKE = "Smoke test of the method"  # how the one line opens that says a run cannot support a verdict


def reduced_note(cfg: dict, why: str = "") -> str:
    """The one line that opens a reduced run's console output and its report (run.json's
    "preset_note"): what the CPU preset shrank, and that the answers are not evidence."""
    m, t, d, s = cfg["model"], cfg["train"], cfg["data"], cfg["splits"]
    return (
        f"{SMOKE} on the reduced CPU preset{f' ({why})' if why else ''}, not evidence: "
        f"tsflash/presets/cpu.toml applied -- d_model={m['d_model']}, n_layers={m['n_layers']}, "
        f"steps={t['steps']}, tokens/step={t['tokens_per_step']}, data {d['start']}..{d['end']}, "
        f"{s['n_folds']} folds of {s['test_days']} days; use --preset full to insist on the full config."
    )


@dataclass
class DataConfig:
    symbol: str = "BTCUSDT"  # the pair, upper case as Binance's archives name it
    interval: str = "1m"  # the bar interval; the store keeps one folder per symbol and interval
    start: str = "2021-01-01"  # first UTC day, inclusive
    end: str = "2025-06-30"  # last UTC day, inclusive
    # A training window may not bridge a gap longer than this many missing bars. Shorter gaps are
    # kept, with the gap marker feature telling the model, because dropping them would fragment the data.
    max_gap_bars: int = 60


@dataclass
class LabelConfig:
    horizon: int = 15  # bars ahead; the target is the sign of the forward log return over them
    # Share of the training fold's labels in the flat band (symmetric quantiles of |forward return|),
    # fitted on each fold's training part only. 1/3 gives balanced classes.
    flat_fraction: float = 1 / 3


@dataclass
class SplitConfig:
    scheme: str = "expanding"  # walk-forward training ranges: from the start, or a rolling window
    n_folds: int = 5  # test blocks, each trained on what comes before it
    test_days: int = 182  # length of each test block, in days (about six months)
    train_days: int = 0  # rolling window length in days; 0 = expanding
    purge: int = -1  # bars removed before each test block, so no training label looks into it; -1 = the label horizon
    embargo: int = 0  # bars removed after each test block (only matters for rolling/purged k-fold)
    # Validation tail for early stopping: the last val_days days of each fold's training range,
    # purged from the bars trained on by `purge` bars. 0 = no tail: a fixed budget of train.steps.
    val_days: int = 0
    val_fraction: float = 0.0  # retired (replaced by val_days); kept so older config.json files load: must be 0


@dataclass
class TrainConfig:
    steps: int = 200  # optimizer steps per fold (the maximum, with early stopping), identical for every N
    tokens_per_step: int = 131072  # tokens of one step: batch = tokens_per_step // N windows, the same work at every N
    lr: float = 1e-3  # peak learning rate (AdamW)
    min_lr_ratio: float = 0.1  # the schedule decays to lr * min_lr_ratio
    warmup_steps: int = 20  # linear warm-up from 0 to lr
    weight_decay: float = 0.1  # AdamW's, on the weight matrices
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's
    grad_clip: float = 1.0  # the gradient's global norm is clipped to it
    # Loss on positions >= loss_warmup_fraction * N within each window only: the first positions see
    # almost no context, and at small N they would dominate.
    loss_warmup_fraction: float = 0.0
    seeds: list[int] = field(default_factory=lambda: [0])  # one trained model per seed at every (N, fold)
    compile: bool = False  # torch.compile the model before the first step
    # With splits.val_days > 0, the validation loss is measured every eval_every steps and at the
    # last step; the best weights are restored either way.
    eval_every: int = 0
    patience: int = 0  # stop after this many evaluations without improvement; 0 = never stop early
    # An exponential moving average of the weights (debiased: the average of the iterates so far).
    # Validation, the restored best weights and the test scoring use the average. 0 = off.
    ema_decay: float = 0.0
    # "cosine": warm-up, then cosine decay to lr * min_lr_ratio at train.steps. "wsd": warm-up, stable
    # at lr, then a linear decay; with a validation tail the stable phase ends by the stopping rule,
    # rewound to its best step, so the annealed end lands at the validated step.
    schedule: str = "cosine"
    # The wsd schedule's decay: this fraction of the best step s (with a validation tail), or the
    # last fraction of train.steps (without one). Unused by "cosine".
    decay_fraction: float = 0.2
    # Share of each long-N batch (N > short_length) whose tokens are drawn as windows of
    # short_length bars instead, under the same loss (one denominator: the expected scored positions
    # of the mixed batch). Long-N models lost the short-range skill that every N=512 step trains;
    # this trains it at every N. 0 = off.
    short_fraction: float = 0.0
    short_length: int = 512  # the short windows' length in bars (with short_fraction > 0)
    # Each cell (N, fold, seed) trains this many times (seeds k*seed .. k*seed + k - 1) and keeps the
    # one with the lowest validation loss (tsflash.engine._restarts): whether a long-N run learns a
    # far effect is decided early.
    restarts: int = 1
    # With restarts > 1, every restart trains to this step only; the one with the lowest validation
    # loss by then trains on alone. 0 = every restart trains to its end.
    restart_screen: int = 0
    # The stopping rule and the kept weights start at this step: no early stop before it, and the
    # weights kept are the best validated at or after it. 0 = from the start.
    keep_from: int = 0


@dataclass
class EvalConfig:
    fee_bps: float = 5.0  # cost per unit of turnover (position change of 1), in basis points; applied at scoring time
    baseline_lags: int = 16  # the logistic-regression baseline sees the last k bars' features
    batch_tokens: int = 262144  # tokens of one evaluation forward pass
    # The trading rule scored (tsflash.scoring.strategy): "horizon" holds each decision for
    # labels.horizon bars, as the label looks ahead; "one-bar" re-decides every bar. Applied at
    # scoring time; the default preset sets "horizon".
    strategy: str = "one-bar"
    entry_threshold: float = -1.0  # -1: fitted per cell on the validation tail; else fixed in [0, 1)
    # Far context: every model with N > cut is also scored with its context cut to the last `cut`
    # bars, on the same test bars.
    context_cuts: list[int] = field(default_factory=list)
    # How question 1 and the nesting check treat seeds (tsflash.stats.runs.run_level_test): "fold",
    # a t over the fold means; "crossed", folds and seeds as crossed random effects. Applied at report time.
    seed_inference: str = "fold"
    # The linear information probe (tsflash.dataset.probe) as a baseline per N: a logistic
    # regression on return and volatility summaries over windows of 1, 4, 16, ... up to N bars.
    # Does the far information exist in a form a linear model can read?
    probe: bool = False


@dataclass
class SelectionConfig:
    min_dsr: float = DSR_CONFIDENCE  # the trading gate: the selected candidate's Deflated Sharpe Ratio >= min_dsr
    max_pbo: float = MAX_PBO  # the trading gate: the candidates' probability of backtest overfitting <= max_pbo
    cscv_blocks: int = CSCV_BLOCKS  # blocks of the PBO's combinatorially symmetric cross-validation


@dataclass
class ExperimentConfig:
    name: str = "default"  # the preset's name, shown in `tsflash runs`
    description: str = ""  # one line shown in the report
    lengths: list[int] = field(default_factory=lambda: [512, 4096, 32768])  # the context lengths N compared
    data: DataConfig = field(default_factory=DataConfig)
    labels: LabelConfig = field(default_factory=LabelConfig)
    splits: SplitConfig = field(default_factory=SplitConfig)
    model: ModelSettings = field(default_factory=ModelSettings)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)

    @property
    def purge(self) -> int:
        return self.labels.horizon if self.splits.purge < 0 else self.splits.purge

    def to_dict(self) -> dict:
        """The resolved config as plain data, the form hashed: a key added by a migration step is
        left out at the value that step fills, so a config of any version keeps its hash."""
        d = dataclasses.asdict(self)
        for key, default in added_since(0).items():
            section, name = key.split(".")
            if d[section][name] == default:
                del d[section][name]
        return d

    def stored(self) -> dict:
        """What a run folder's config.json holds: every key, and the version that reads them."""
        return {"config_version": CONFIG_VERSION, **dataclasses.asdict(self)}

    def hash(self) -> str:
        """8 hex digits of the resolved config, fee included: run.json's `config_hash` of folders made
        while the fee was part of the run (reports/h200-btcusdt-1m) and part of a checkpoint's identity.
        A new run folder is named by `tsflash.sweep.plan.run_hash` (the config without the fee)."""
        return digest(self.to_dict(), 8)


def _coerce(value, tp, key: str):
    """Check `value` against the annotated type `tp`; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise UserError(f"config key {key}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise UserError(f"config key {key}: expected {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, datetime.date):  # TOML's bare dates (start = 2021-01-01)
        return value.isoformat()
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise UserError(f"config key {key}: expected {tp.__name__}, got {value!r}")
    return value


def _apply(obj, overrides: dict, prefix: str = "") -> None:
    hints = typing.get_type_hints(type(obj))
    for key, value in overrides.items():
        full = f"{prefix}{key}"
        if key not in hints:
            known = ", ".join(sorted(hints))
            near = difflib.get_close_matches(key, list(hints), n=1)  # a typo of one known key
            rest = ""
            while isinstance(value, dict) and value:  # name the whole key the user typed: 'no.such', not 'no'
                key, value = next(iter(value.items()))
                rest = f"{rest}.{key}"
            guess = f" (did you mean {prefix + near[0] + rest!r}?)" if near else ""
            raise UserError(f"unknown config key {full + rest!r}{guess}; known keys here: {known}")
        current = getattr(obj, key)
        if full in DURATIONS and isinstance(value, str):  # kept as given until `validate` knows the interval
            parse_duration(value, full)
            setattr(obj, key, value.strip())
        elif dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UserError(f"config key {full}: expected a table, got {value!r}")
            _apply(current, value, prefix=f"{full}.")
        else:
            setattr(obj, key, _coerce(value, hints[key], full))


def check_context_length(n, where: str = "lengths") -> int:
    """The one rule for a context length N: an integer power of two >= 2 (the eval windows score
    the last N/2 bars of each window, and the benchmarks sweep octaves). `where` names the user's
    key or flag in the message."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2 or n & (n - 1):
        raise UserError(f"{where}: every length must be a power of two >= 2, got {n!r}")
    return n


def check_overrides(overrides: dict) -> dict:
    """Check the keys and value types of `overrides` against the config's fields (the value rules
    are checked by `validate`, on the whole resolved config); returns `overrides`."""
    _apply(ExperimentConfig(), overrides)
    return overrides


def merge_overrides(a: dict, b: dict) -> dict:
    """Nested merge of override tables; `b` wins."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge_overrides(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


SCHEMES = ("expanding", "rolling")

# Config versions. A stored config without "config_version" is version 0 (every run folder made
# before the version existed). Step k (MIGRATIONS[k - 1]) upgrades version k - 1 to k by filling
# the keys added then at the value a config without them means; a key already there is kept.


def _fill(raw: dict, key: str, value) -> None:
    section, name = key.split(".")
    raw.setdefault(section, {}).setdefault(name, copy.deepcopy(value))


def _v1_validation_tail(raw: dict) -> None:
    """Early stopping on a validation tail, the rotary base and far-context scoring: all off."""
    _fill(raw, "splits.val_days", 0)
    _fill(raw, "train.eval_every", 0)
    _fill(raw, "train.patience", 0)
    _fill(raw, "model.rope_base", 0.0)
    _fill(raw, "eval.context_cuts", [])


def _v2_trading_rule(raw: dict) -> None:
    """The trading rule: one-bar decisions, the entry threshold fitted on the validation tail."""
    _fill(raw, "eval.strategy", "one-bar")
    _fill(raw, "eval.entry_threshold", -1.0)


def _v3_residual(raw: dict) -> None:
    """The residual stream in the parameters' dtype, as every earlier run trained."""
    _fill(raw, "model.residual", "param")


def _v4_norm(raw: dict) -> None:
    """RMSNorm, as every earlier run trained."""
    _fill(raw, "model.norm", "rmsnorm")


def _v5_patch(raw: dict) -> None:
    """A token per bar."""
    _fill(raw, "model.patch", 1)


def _v6_recipe(raw: dict) -> None:
    """No weight average, the cosine schedule (decay_fraction is the wsd schedule's only)."""
    _fill(raw, "train.ema_decay", 0.0)
    _fill(raw, "train.schedule", "cosine")
    _fill(raw, "train.decay_fraction", 0.2)


def _v7_short_windows(raw: dict) -> None:
    """No short windows mixed into long-N batches."""
    _fill(raw, "train.short_fraction", 0.0)
    _fill(raw, "train.short_length", 512)


def _v8_restarts(raw: dict) -> None:
    """One training per cell."""
    _fill(raw, "train.restarts", 1)


def _v9_seed_inference(raw: dict) -> None:
    """Question 1's test over fold means."""
    _fill(raw, "eval.seed_inference", "fold")


def _v10_probe(raw: dict) -> None:
    """No linear information probe."""
    _fill(raw, "eval.probe", False)


def _v11_restart_screen(raw: dict) -> None:
    """Every restart trains to its end."""
    _fill(raw, "train.restart_screen", 0)


def _v12_keep_from(raw: dict) -> None:
    """The stopping rule from the first evaluation."""
    _fill(raw, "train.keep_from", 0)


MIGRATIONS: tuple[typing.Callable[[dict], None], ...] = (
    _v1_validation_tail,
    _v2_trading_rule,
    _v3_residual,
    _v4_norm,
    _v5_patch,
    _v6_recipe,
    _v7_short_windows,
    _v8_restarts,
    _v9_seed_inference,
    _v10_probe,
    _v11_restart_screen,
    _v12_keep_from,
)
CONFIG_VERSION = len(MIGRATIONS)  # the version this code writes and reads


def config_version(raw: dict, where: str = "config") -> int:
    """The version of a stored config (0 without the key); a UserError for one that is not a
    version this code reads. `where` names the file or folder in the message."""
    version = raw.get("config_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise UserError(f"{where}: config_version must be an integer >= 0, got {version!r}")
    if version > CONFIG_VERSION:
        raise UserError(
            f"{where}: config_version {version} is newer than this tsflash's CONFIG_VERSION "
            f"{CONFIG_VERSION}: upgrade tsflash to read it"
        )
    return version


def migrate(raw: dict, where: str = "config") -> dict:
    """A stored config of any version upgraded to CONFIG_VERSION (a new dict, `raw` unchanged):
    each step after its version fills the keys added then. `where` names it in errors."""
    version = config_version(raw, where)
    out = copy.deepcopy(raw)
    for step in MIGRATIONS[version:]:
        step(out)
    out["config_version"] = CONFIG_VERSION
    return out


@functools.cache
def added_by(version: int) -> dict:
    """{"section.key": value} that step `version` (1-based) fills in a config without them."""
    raw: dict = {}
    MIGRATIONS[version - 1](raw)
    return {f"{section}.{name}": value for section, table in raw.items() for name, value in table.items()}


def added_since(version: int) -> dict:
    """Every key added after `version`, at the value a config of that version means."""
    return {k: v for step in range(version + 1, CONFIG_VERSION + 1) for k, v in added_by(step).items()}


SCHEDULES = ("cosine", "wsd")


@dataclass(frozen=True)
class Bound:
    """The allowed range of one numeric config field; `str(bound)` is the rule as messages print it."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    note: str = ""  # said after the rule, e.g. what a special value means

    def holds(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        above = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        return above and below

    def __str__(self) -> str:
        if self.hi is None:
            rule = f"{'>' if self.lo_open else '>='} {self.lo}"
        else:
            rule = f"in {'(' if self.lo_open else '['}{self.lo}, {self.hi}{')' if self.hi_open else ']'}"
        return f"{rule} ({self.note})" if self.note else rule


UNIT = Bound(0, 1, lo_open=True, hi_open=True)  # (0, 1)
FRACTION = Bound(0, 1, hi_open=True)  # [0, 1)

# One rule per numeric field, checked first (so "model.d_model=-1" names this rule, not a
# cross-field one). A list or tuple field has the rule for each item.
FIELD_RULES: dict[str, Bound] = {
    "data.max_gap_bars": Bound(0),
    "labels.horizon": Bound(1),
    "labels.flat_fraction": UNIT,
    "splits.n_folds": Bound(1),
    "splits.test_days": Bound(1),
    "splits.train_days": Bound(0),
    "splits.purge": Bound(-1, note="-1 = labels.horizon"),
    "splits.embargo": Bound(0),
    "splits.val_fraction": FRACTION,
    "splits.val_days": Bound(0, note="0 = no validation tail"),
    "model.d_model": Bound(1),
    "model.n_layers": Bound(1),
    "model.n_heads": Bound(1),
    "model.mlp_ratio": Bound(1),
    "model.dropout": FRACTION,
    "model.rope_base": Bound(0, note="0 = auto"),
    "model.patch": Bound(1, note="1 = a token per bar"),
    "train.steps": Bound(1),
    "train.tokens_per_step": Bound(1),
    "train.lr": Bound(0, lo_open=True),
    "train.min_lr_ratio": Bound(0, 1),
    "train.warmup_steps": Bound(0),
    "train.weight_decay": Bound(0),
    "train.betas": FRACTION,
    "train.grad_clip": Bound(0, note="0 = no clipping"),
    "train.loss_warmup_fraction": FRACTION,
    "train.seeds": Bound(0),
    "train.eval_every": Bound(0),
    "train.patience": Bound(0, note="0 = never stop early"),
    "train.ema_decay": Bound(0, 1, hi_open=True, note="0 = no weight average"),
    "train.decay_fraction": Bound(0, 1, lo_open=True),
    "train.short_fraction": FRACTION,
    "train.short_length": Bound(2),
    "train.restarts": Bound(1, note="1 = one training per cell"),
    "train.restart_screen": Bound(0, note="0 = every restart trains to its end"),
    "train.keep_from": Bound(0, note="0 = the stopping rule from the first evaluation"),
    "eval.fee_bps": Bound(0),
    "eval.baseline_lags": Bound(1),
    "eval.batch_tokens": Bound(1),
    "eval.context_cuts": Bound(2),
    "selection.min_dsr": UNIT,
    "selection.max_pbo": Bound(0, 1, lo_open=True),
}


# Fields that may be given as a time ("15m", "1h", "30d"), and their unit once converted: bars of
# data.interval, or days. Plain integers keep meaning bars or days, so older configs load as before.
DURATIONS: dict[str, str] = {
    "data.max_gap_bars": "bars",
    "labels.horizon": "bars",
    "splits.purge": "bars",
    "splits.embargo": "bars",
    "splits.test_days": "days",
    "splits.train_days": "days",
}


def _field(cfg: ExperimentConfig, key: str):
    return functools.reduce(getattr, key.split("."), cfg)


def _resolve_durations(cfg: ExperimentConfig) -> None:
    """Replace every time-valued duration field by its bars (at data.interval) or days."""
    for key, unit in DURATIONS.items():
        value = _field(cfg, key)
        if isinstance(value, str):
            section, name = key.split(".")
            as_unit = duration_bars(value, cfg.data.interval, key) if unit == "bars" else duration_days(value, key)
            setattr(getattr(cfg, section), name, as_unit)


def _check_fields(cfg: ExperimentConfig) -> None:
    for key, bound in FIELD_RULES.items():
        value = _field(cfg, key)
        items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, v in items:
            if not bound.holds(v):
                raise UserError(f"{key if i is None else f'{key}[{i}]'} must be {bound}, got {v!r}")
    seeds = cfg.train.seeds
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"train.seeds must be a non-empty list of distinct integers >= 0, got {seeds!r}")
    if not cfg.lengths or len(set(cfg.lengths)) != len(cfg.lengths):
        raise UserError(f"lengths must be a non-empty list of distinct powers of two, got {cfg.lengths!r}")
    for n in cfg.lengths:
        check_context_length(n, "lengths")
    cuts = cfg.eval.context_cuts
    for n in cuts:
        check_context_length(n, "eval.context_cuts")
    if len(set(cuts)) != len(cuts):
        raise UserError(f"eval.context_cuts must be distinct, got {cuts!r}")


def _check_data(cfg: ExperimentConfig) -> None:
    symbol = check_pair(cfg.data.symbol, "data.symbol")
    if symbol != cfg.data.symbol:  # the store and Binance's archives name pairs in upper case
        raise UserError(f"data.symbol must be upper case, got {cfg.data.symbol!r} (did you mean {symbol!r}?)")
    if cfg.data.interval not in INTERVAL_US:
        raise UserError(f"data.interval must be one of {', '.join(INTERVAL_US)}, got {cfg.data.interval!r}")
    for key in ("data.start", "data.end"):
        try:
            datetime.date.fromisoformat(_field(cfg, key))
        except (TypeError, ValueError):
            raise UserError(f"{key} must be a date YYYY-MM-DD, got {_field(cfg, key)!r}") from None
    if cfg.data.start > cfg.data.end:
        raise UserError(f"data range: end {cfg.data.end} is before start {cfg.data.start}")


def _check_splits(cfg: ExperimentConfig) -> None:
    """The split rules, in the config's words (the splitter would say n_splits, test_size in bars)."""
    sp = cfg.splits
    if sp.scheme not in SCHEMES:
        raise UserError(f"splits.scheme must be 'expanding' or 'rolling', got {sp.scheme!r}")
    if sp.scheme == "rolling" and sp.train_days < 1:
        raise UserError(f"splits.train_days must be >= 1 when splits.scheme is 'rolling', got {sp.train_days}")
    if 0 <= sp.purge < cfg.labels.horizon:
        raise UserError(
            f"splits.purge={sp.purge} must be >= labels.horizon={cfg.labels.horizon} (or -1 for the horizon): "
            "a shorter purge lets training labels look into the test block"
        )
    # WalkForward's rule (`min_samples`) on the bar count of the configured range
    interval_us = INTERVAL_US[cfg.data.interval]
    per_day = bars_per_day(interval_us)
    days = (datetime.date.fromisoformat(cfg.data.end) - datetime.date.fromisoformat(cfg.data.start)).days + 1
    if sp.scheme == "rolling":
        train, train_words = sp.train_days * per_day, f"splits.train_days={sp.train_days} days"
    else:
        train, train_words = 1, "1 training bar"
    if sp.val_fraction:
        raise UserError(
            f"splits.val_fraction is retired: give the validation tail as splits.val_days, got "
            f"splits.val_fraction={sp.val_fraction}"
        )
    if sp.val_days:  # the validation tail and its purge come out of the first fold's training range
        train += sp.val_days * per_day + cfg.purge
        train_words += f", a validation tail of splits.val_days={sp.val_days} days and its purge"
    need = min_samples(sp.n_folds, sp.test_days * per_day, cfg.purge, first_train=train)
    if days * US_PER_DAY // interval_us < need:
        raise UserError(
            f"the data range data.start..data.end = {cfg.data.start}..{cfg.data.end} ({days} days) is too short for "
            f"splits.n_folds={sp.n_folds} test blocks of splits.test_days={sp.test_days} days, the purge "
            f"({cfg.purge} bars) and {train_words}: it needs at least {-(-need // per_day)} days"
        )


def _check_model_and_budget(cfg: ExperimentConfig) -> None:
    cfg.model.check("model.")
    for n in cfg.lengths:
        check_patch(cfg.model.patch, n, ("model.patch", "lengths N"))
    for m in cfg.eval.context_cuts:  # a cut scores the model on windows of m bars: whole patches too
        check_patch(cfg.model.patch, m, ("model.patch", "eval.context_cuts m"))
    for n in cfg.lengths:
        if n > cfg.train.tokens_per_step:  # the length is what is out of range: name it, not the budget
            raise UserError(
                f"lengths: N={n} is longer than train.tokens_per_step={cfg.train.tokens_per_step}, the tokens of one "
                f"training step (a step holds tokens_per_step / N >= 1 windows): use lengths up to "
                f"{cfg.train.tokens_per_step}, or raise train.tokens_per_step"
            )
        if cfg.train.tokens_per_step % n:
            raise UserError(
                f"train.tokens_per_step={cfg.train.tokens_per_step} must be a multiple of every "
                f"context length (batch = tokens_per_step / N), got N={n}"
            )
    if cfg.eval.batch_tokens < max(cfg.lengths):
        raise UserError(
            f"eval.batch_tokens must be >= the longest context length {max(cfg.lengths)}, got {cfg.eval.batch_tokens}"
        )
    if cfg.selection.cscv_blocks % 2 or cfg.selection.cscv_blocks < 2:
        raise UserError(f"selection.cscv_blocks must be even and >= 2, got {cfg.selection.cscv_blocks}")
    _check_rotary(cfg)


def _check_rotary(cfg: ExperimentConfig) -> None:
    """Rotary positions cover every N (`tsflash.model.rotary.rotary_covers`)."""
    m = cfg.model
    if 0 < m.rope_base <= 1:
        raise UserError(f"model.rope_base must be 0 (auto) or > 1, got {m.rope_base}")
    head_dim, base, longest = m.head_dim, m.rotary_base, max(cfg.lengths)
    if not rotary_covers(head_dim, base, longest):
        fix = (
            f"set model.rope_base >= {rotary_base_for(head_dim, longest):.3g}"
            if head_dim > 2
            else "use a head size model.d_model / model.n_heads >= 4"
        )
        raise UserError(
            f"rotary positions do not cover N={longest} (lengths): the slowest wavelength at model.rope_base="
            f"{m.rope_base:g} ({'auto, ' if not m.rope_base else ''}base {base:.3g}, head size {head_dim}) is "
            f"{rotary_wavelength(head_dim, base):,.0f} bars < {ROTARY_COVER} x N; {fix}"
        )


def _check_budget(cfg: ExperimentConfig) -> None:
    """Validation tail and early stopping (without a tail, eval_every and patience are unused)."""
    sp, tr = cfg.splits, cfg.train
    if sp.val_days and tr.eval_every < 1:
        raise UserError(
            f"train.eval_every must be >= 1 when splits.val_days > 0 (the validation loss is measured "
            f"every eval_every steps and at the last step), got {tr.eval_every}"
        )
    check_schedule(tr)
    check_short_windows(tr, cfg.lengths)
    if tr.restarts > 1 and not sp.val_days:
        raise UserError(
            f"train.restarts={tr.restarts} keeps the restart with the lowest validation loss: it needs "
            f"splits.val_days > 0, got {sp.val_days}"
        )
    check_restart_screen(tr)
    if tr.keep_from and not sp.val_days:
        raise UserError(
            f"train.keep_from={tr.keep_from} starts the stopping rule at a step: it needs splits.val_days > 0, "
            f"got {sp.val_days}"
        )
    if tr.keep_from > tr.steps:
        raise UserError(
            f"train.keep_from={tr.keep_from} must be at most train.steps={tr.steps} (the last step is always validated)"
        )
    if tr.short_fraction:
        check_patch(cfg.model.patch, tr.short_length, ("model.patch", "train.short_length"))


def check_restart_screen(tr: TrainConfig) -> None:
    """A screening step that screens something: restarts to choose from, a validation by then, and
    steps left after it."""
    if not tr.restart_screen:
        return
    if tr.restarts < 2:
        raise UserError(
            f"train.restart_screen={tr.restart_screen} screens validated restarts: it is used with "
            f"train.restarts > 1 only, got {tr.restarts}"
        )
    if not tr.eval_every <= tr.restart_screen < tr.steps:
        raise UserError(
            f"train.restart_screen={tr.restart_screen} must be at least train.eval_every={tr.eval_every} "
            f"(a validation by then) and below train.steps={tr.steps} (0 trains every restart to its end)"
        )


def check_short_windows(tr: TrainConfig, lengths) -> None:
    """The short windows' length, and a share of each long-N batch that is a whole number of windows."""
    if not tr.short_fraction:
        if tr.short_length != TrainConfig.short_length:
            raise UserError(f"train.short_length={tr.short_length} is used with train.short_fraction > 0 only")
        return
    check_context_length(tr.short_length, "train.short_length")
    for n in lengths:
        if n <= tr.short_length:
            continue
        batch = tr.tokens_per_step // n
        replaced = tr.short_fraction * batch
        if replaced != round(replaced) or replaced < 1:
            raise UserError(
                f"train.short_fraction={tr.short_fraction} of the batch of {batch} windows at N={n} "
                f"(train.tokens_per_step={tr.tokens_per_step}) is {replaced:g} windows: it must be a whole "
                "number >= 1 at every N > train.short_length"
            )


def check_schedule(tr: TrainConfig) -> None:
    """The schedule's name, and no decay fraction where the schedule has no decay phase (a value that
    would silently do nothing)."""
    if tr.schedule not in SCHEDULES:
        raise UserError(f"train.schedule must be 'cosine' or 'wsd', got {tr.schedule!r}")
    if tr.schedule == "cosine" and tr.decay_fraction != TrainConfig.decay_fraction:
        raise UserError(
            f"train.decay_fraction={tr.decay_fraction} is used by train.schedule='wsd' only "
            f"(the cosine schedule decays over all of train.steps)"
        )


def recipe_words(train: dict) -> str:
    """The training recipe of a resolved config's train table (`to_dict`, keys added later may be
    absent), in one line for the report's setup table."""
    added = {k.removeprefix("train."): v for k, v in added_since(0).items() if k.startswith("train.")}
    train = added | train  # a key left out means the value its migration step fills
    schedule = train["schedule"]
    ratio = train.get("min_lr_ratio", TrainConfig.min_lr_ratio)
    if schedule == "wsd":
        fraction = train["decay_fraction"]
        words = (
            f"warm-up, stable, then a linear decay to {ratio:g} x lr over {fraction:.0%} of the steps before "
            "it; with a validation tail the stable phase ends by the stopping rule and the decay starts from its "
            "validated best step (weights and optimizer rewound)"
        )
    else:
        words = f"warm-up, then cosine decay to {ratio:g} x lr at the last step"
    decay = train["ema_decay"]
    average = (
        f"an exponential moving average of the weights (decay {decay:g}, about {1 / (1 - decay):.0f} steps) "
        "is validated, kept and scored"
        if decay
        else "the raw weights are validated, kept and scored"
    )
    short = train["short_fraction"]
    mixed = (
        f"; {short:.0%} of each longer-N batch's tokens drawn as {train['short_length']}-bar windows, same loss"
        if short
        else ""
    )
    restarts = train["restarts"]
    screen = train["restart_screen"]
    kept = (
        f"; each cell the validated best of {restarts} trainings (seeds {restarts} x seed + 0..{restarts - 1})"
        + (
            f", screened at step {screen} (the one with the lowest validation loss by then trains on alone)"
            if screen
            else ""
        )
        if restarts > 1
        else ""
    )
    start = train["keep_from"]
    late = (
        f"; no early stop before step {start}, and the weights kept the best validated at or after it" if start else ""
    )
    return f"{words}; {average}{mixed}{kept}{late}"


def _check_eval(cfg: ExperimentConfig) -> None:
    # Imported here: tsflash.scoring loads scikit-learn (most of a second), which the command
    # line's parsing, which imports this module, does not need.
    from tsflash.scoring.strategy import check_strategy

    check_strategy(cfg.eval.strategy, cfg.eval.entry_threshold)
    if cfg.eval.seed_inference not in SEED_TESTS:
        raise UserError(f"eval.seed_inference must be one of {', '.join(SEED_TESTS)}, got {cfg.eval.seed_inference!r}")


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Every rule of the resolved config, before anything is computed or written. Each failure is
    one UserError naming the user's key, the rule and the value: first each field's own range
    (FIELD_RULES), then the rules between fields. Durations given as time ("15m") are converted to
    bars of data.interval (or days) first, in place."""
    _resolve_durations(cfg)
    _check_fields(cfg)
    _check_data(cfg)
    _check_splits(cfg)
    _check_model_and_budget(cfg)
    _check_eval(cfg)
    _check_budget(cfg)
    return cfg


def preset_names() -> list[str]:
    """The presets shipped with the package: ["btc-1s", "cpu", "default", "first-edition"]."""
    return sorted(q.name.removesuffix(".toml") for q in PRESETS_DIR.iterdir() if q.name.endswith(".toml"))


def preset_path(name_or_path: str | Path) -> Path | Traversable:
    """`default` -> tsflash/presets/default.toml (inside the installed package); an existing .toml
    path is taken as is."""
    p = Path(name_or_path)
    if p.suffix == ".toml":
        if not p.exists():
            raise UserError(f"config file not found: {p}")
        return p
    candidate = PRESETS_DIR / f"{name_or_path}.toml"
    if not candidate.is_file():
        raise UserError(f"unknown preset {str(name_or_path)!r}; known presets: {', '.join(preset_names())}")
    return candidate


def load_config(name_or_path: str | Path = "default", overrides: dict | None = None) -> ExperimentConfig:
    """Load a preset (a name in tsflash/presets/ or a .toml path), apply overrides, validate."""
    path = preset_path(name_or_path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config file {path} is not valid TOML: {exc}") from None
    cfg = ExperimentConfig()
    _apply(cfg, raw)
    if overrides:
        _apply(cfg, overrides)
    return validate(cfg)


def config_from_dict(d: dict, where: str = "config") -> ExperimentConfig:
    """Rebuild a config saved with `stored` or `to_dict`, of any version (`migrate`); `where`
    names it in errors."""
    raw = migrate(d, where)
    del raw["config_version"]
    cfg = ExperimentConfig()
    _apply(cfg, raw)
    return validate(cfg)


def read_run_config(folder: Path | str) -> ExperimentConfig:
    """The config of a run folder (its config.json, of any version), the folder named in errors."""
    path = RunFolder(Path(folder)).config_json
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{folder}: no config.json, not a run folder") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON: {exc}") from None
    return config_from_dict(raw, str(folder))


# The text of --lengths and --set, parsed here so that every layer above the config (the command line,
# the sweep's pre-registration and cost model, the benchmarks, the lab's scripts) reads them one way.
def parse_lengths(text: str, flag: str = "--lengths") -> list[int]:
    """\"512,4096" -> [512, 4096]: powers of two >= 2 (`tsflash.config.check_context_length`),
    distinct, sorted."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(p == "" for p in parts):
        raise UserError(f"{flag}: give comma-separated powers of two such as 512,4096,32768, got {text!r}")
    out = []
    for p in parts:
        try:
            n = int(p)
        except ValueError:
            raise UserError(f"{flag}: every length must be an integer (a power of two >= 2), got {p!r}") from None
        out.append(check_context_length(n, flag))
    if len(set(out)) != len(out):
        raise UserError(f"{flag}: lengths must be distinct, got {text!r}")
    return sorted(out)


def parse_overrides(items: list[str]) -> dict:
    """["train.steps=3", "model.d_model=16"] -> {"train": {"steps": 3}, "model": {"d_model": 16}}.

    Values are TOML literals (3, 1e-3, true, [0, 1], "text"); a bare word is taken as a string.
    """
    out: dict = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set: expected KEY=VALUE such as train.steps=3, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out
