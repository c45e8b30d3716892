"""The context-length sweep: one optuna trial per configuration, resumable cell by cell.

`tsflash sweep --lengths 512,4096,32768` trains and evaluates every context length N over all
walk-forward folds, keeps a trial ledger, and writes the report. The unit of work is a CELL: one
(trial, fold, seed) model run, or one fold's baselines. Each finished cell is saved atomically in
the run folder, so killing the sweep at any moment (even SIGKILL) and running the same command
again recomputes only unfinished cells; engine checkpoints let an interrupted cell resume too.

Run folder (default `reports/<YYYYMMDD-HHMMSS>-<config hash>`)::

    run.json            run key, command, options, status ("running" | "complete")
    config.json         the resolved ExperimentConfig (after preset and overrides)
    data.json           data source, fingerprint, gaps, folds with dates
    sweep.log           the log of every invocation (appended)
    optuna.db           the trial ledger (SQLite) unless --storage points elsewhere
    cells/<trial key>/fold<k>-seed<s>.*         FoldResult.save (per-bar out-of-sample series)
    cells/<trial key>/fold<k>-seed<s>.cell.json this module's summary; its presence = cell done
    cells/baselines/fold<k>-<name>.*            baselines, once per fold (independent of N)
    series/<trial key>.npz                      the trial's daily net/gross returns (all folds)
    checkpoints/...                             engine checkpoints of unfinished cells
    ledger.json, precision.json, results.json, report.md, report.html, *.parquet, figures/

The trial ledger is optuna: each configuration (N, plus searched values with --trials) is one
trial, enqueued once with `study.enqueue_trial`; per-fold daily net Sharpe ratios are reported as
intermediate values; `user_attrs` keep the paths of the saved out-of-sample series; the trial's
value is its daily net Sharpe ratio over all folds. The DSR uses the number of COMPLETE trials in
the study and the variance of their values.

Same command, same run: without --out, the newest run folder under `reports/` with the same run
key (config hash, data source, trial count, device type) that is not complete is resumed; a
complete one is left alone and a new folder is made.

Sharing a study: `--storage postgresql://user:pass@host/db` (or any SQLAlchemy URL optuna
accepts; needs the driver, e.g. psycopg2) together with the same `--out` on a shared file system
lets several workers pull trials from one queue. The first worker creates the study and enqueues
the plan; later workers load it (`load_if_exists`) and only add missing slots. An abandoned
RUNNING trial is failed and re-enqueued with the same parameters (so its saved cells are reused):
at once when its worker process is gone from this host, or when the study is the run folder's
private SQLite file; with a shared --storage, when its heartbeat is older than STALE_AFTER_S.
The last worker to finish writes the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tsflash import atomic
from tsflash.config import EXPERIMENTS_DIR, ExperimentConfig, load_config, merge_overrides, parse_lengths, parse_overrides  # noqa: F401
from tsflash.errors import UserError

log = logging.getLogger(__name__)

PRESETS = ("auto", "full", "cpu")
CPU_PRESET = EXPERIMENTS_DIR / "cpu.toml"
DEFAULT_REPORTS = Path("reports")
DAY_US = 86_400_000_000
CELL_SUFFIX = ".cell.json"
# With a shared --storage, a RUNNING trial of another host whose heartbeat (after each cell) is
# older than this is taken as abandoned and re-enqueued. Generous: a full-size cell on a CPU is slow.
STALE_AFTER_S = 3 * 3600.0
# Searched with --trials K > 1, within each N (N itself is always enqueued, never sampled).
SEARCH_SPACE_DOC = "lr (log-uniform, lr/10 .. 3 lr) and weight_decay (uniform, 0 .. max(0.3, wd))"


# ---------------------------------------------------------------------------------------------
# Options and the plan


@dataclass
class SweepOptions:
    """What the user asked for (the CLI's arguments, validated by `plan_sweep`)."""

    lengths: list[int] | None = None  # None = the config's lengths
    config: str = "default"  # preset name in experiments/ or a .toml path
    data: str = "data"  # bar store root, or "synthetic:random-walk[:SEED]"
    start: str | None = None  # overrides data.start (YYYY-MM-DD)
    end: str | None = None  # overrides data.end (inclusive)
    out: Path | None = None  # run folder; None = find the unfinished run or make a new one
    device: str = "auto"  # auto | cpu | cuda | cuda:K
    seed: int | None = None  # overrides train.seeds with [seed]
    storage: str | None = None  # optuna storage URL; None = SQLite in the run folder
    trials: int = 1  # trials per N; > 1 searches SEARCH_SPACE_DOC
    preset: str = "auto"  # auto | full | cpu
    overrides: dict = field(default_factory=dict)  # nested config overrides (--set), applied last
    reports_root: Path = DEFAULT_REPORTS
    command: str = ""  # the command line, for the report
    precision: bool = True  # run the precision oracle at each N
    # Seconds after which no new trial is started (the run stops cleanly and the same command
    # resumes it): for machines with a per-session time limit. None = no limit.
    time_budget: float | None = None


@dataclass
class SweepPlan:
    """A resolved sweep: config, device, run folder; built cheaply before any training."""

    options: SweepOptions
    cfg: ExperimentConfig
    device: str
    preset: str  # the preset actually applied: "full" | "cpu"
    preset_note: str  # "" or the banner text for the reduced CPU preset
    run_key: str
    run_dir: Path
    resumed: bool
    storage: str
    study_name: str


def _check_date(value: str, flag: str) -> str:
    try:
        dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a date YYYY-MM-DD, got {value!r}") from None
    return value


def resolve_device(device: str) -> str:
    """auto -> "cuda" when available else "cpu"; cuda without CUDA is an error."""
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise UserError(f"--device must be auto, cpu, cuda or cuda:K, got {device!r}")
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine (use --device cpu)")
    return device


def resolve_config(opts: SweepOptions, device: str) -> tuple[ExperimentConfig, str, str]:
    """The config for this sweep: preset file, then the CPU preset when it applies, then the
    command's lengths/range/seed, then --set overrides. Returns (cfg, preset applied, banner)."""
    if opts.preset not in PRESETS:
        raise UserError(f"--preset must be one of {', '.join(PRESETS)}, got {opts.preset!r}")
    on_cuda = device.startswith("cuda")
    preset = opts.preset if opts.preset != "auto" else ("full" if on_cuda else "cpu")
    overrides: dict = {}
    if preset == "cpu":
        cpu = tomllib.loads(CPU_PRESET.read_text())
        overrides = {k: v for k, v in cpu.items() if k not in ("name", "description")}
    cli: dict = {}
    if opts.lengths is not None:
        cli["lengths"] = list(opts.lengths)
    if opts.start is not None:
        cli.setdefault("data", {})["start"] = _check_date(opts.start, "--start")
    if opts.end is not None:
        cli.setdefault("data", {})["end"] = _check_date(opts.end, "--end")
    if opts.seed is not None:
        cli.setdefault("train", {})["seeds"] = [int(opts.seed)]
    overrides = merge_overrides(merge_overrides(overrides, cli), opts.overrides or {})
    cfg = load_config(opts.config, overrides)
    if preset == "cpu":
        cfg.name = f"{cfg.name}+cpu"
    note = ""
    if preset == "cpu":
        why = "no CUDA device" if not on_cuda else "--preset cpu"
        note = (
            f"reduced CPU preset ({why}): experiments/cpu.toml applied -- d_model={cfg.model.d_model}, "
            f"n_layers={cfg.model.n_layers}, steps={cfg.train.steps}, tokens/step={cfg.train.tokens_per_step}, "
            f"data {cfg.data.start}..{cfg.data.end}, {cfg.splits.n_folds} folds of {cfg.splits.test_days} days. "
            "A smoke test of the method, not evidence about BTC; use --preset full to insist on the full config."
        )
    return cfg, preset, note


def make_run_key(cfg: ExperimentConfig, data: str, trials: int, device: str) -> str:
    """What makes two invocations "the same run": config, data source, trials, device type."""
    blob = json.dumps(
        {"config": cfg.to_dict(), "data": data, "trials": trials, "device": device.split(":")[0]},
        sort_keys=True,
        default=str,
    ).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write_json(path: Path, obj) -> None:
    """Atomic (tsflash.atomic): `<name>.tmp-<pid>` in the same folder, then os.replace."""
    atomic.write_json(path, obj, indent=1, sort_keys=True, default=_json_default)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def find_unfinished_run(reports_root: Path, cfg_hash: str, run_key: str) -> Path | None:
    """Newest `reports_root/*-<cfg_hash>` whose run.json has `run_key` and is not complete."""
    root = Path(reports_root)
    if not root.is_dir():
        return None
    for d in sorted(root.glob(f"*-{cfg_hash}"), reverse=True):  # names start with the timestamp
        try:
            meta = read_json(d / "run.json")
        except (OSError, ValueError):
            continue
        if meta.get("run_key") == run_key and meta.get("status") != "complete":
            return d
    return None


def plan_sweep(opts: SweepOptions) -> SweepPlan:
    """Validate the options and resolve config, device and run folder (no training, no data)."""
    if opts.trials < 1:
        raise UserError(f"--trials must be >= 1 (trials per context length), got {opts.trials}")
    from tsflash.synthetic import parse_source

    if parse_source(opts.data) is None and not Path(opts.data).is_dir():
        raise UserError(
            f"--data: bar store folder not found: {opts.data} (create it with `tsflash data import FOLDER` "
            "or `tsflash data fetch`, or use --data synthetic:random-walk)"
        )
    if opts.start and opts.end and _check_date(opts.end, "--end") < _check_date(opts.start, "--start"):
        raise UserError(f"--end {opts.end} is before --start {opts.start}")
    device = resolve_device(opts.device)
    cfg, preset, note = resolve_config(opts, device)
    run_key = make_run_key(cfg, opts.data, opts.trials, device)
    resumed = False
    if opts.out is not None:
        run_dir = Path(opts.out)
        meta_path = run_dir / "run.json"
        if meta_path.exists():
            meta = read_json(meta_path)
            if meta.get("run_key") != run_key:
                raise UserError(
                    f"--out {run_dir} holds a run of another configuration (run key {meta.get('run_key')}, "
                    f"this command {run_key}); choose another --out"
                )
            resumed = True
    else:
        found = find_unfinished_run(opts.reports_root, cfg.hash(), run_key)
        if found is not None:
            run_dir, resumed = found, True
        else:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_dir = Path(opts.reports_root) / f"{stamp}-{cfg.hash()}"
    storage = opts.storage or f"sqlite:///{(run_dir / 'optuna.db').as_posix()}"
    return SweepPlan(opts, cfg, device, preset, note, run_key, run_dir, resumed, storage, f"tsflash-{run_key}")


# ---------------------------------------------------------------------------------------------
# Data


def configured_bar_count(cfg: ExperimentConfig) -> int:
    """Bars in [data.start, data.end] (whole end day) on the interval grid, without gaps."""
    from tsflash.store import INTERVAL_US

    days = (dt.date.fromisoformat(cfg.data.end) - dt.date.fromisoformat(cfg.data.start)).days + 1
    return days * (DAY_US // INTERVAL_US[cfg.data.interval])


def load_data(cfg: ExperimentConfig, data: str, default_seed: int):
    """Bars for the sweep and a description of their source.

    A store folder is read for [start, end]; when it holds no bars for (part of) the range, the
    missing range is fetched from the Binance archive, then read again. `synthetic:random-walk`
    builds seeded noise bars with the same bar count as the configured range.
    """
    from tsflash.store import load_bars, to_us
    from tsflash.synthetic import parse_source, random_walk_bars

    syn = parse_source(data)
    if syn is not None:
        name, seed = syn
        seed = default_seed if seed is None else seed
        n = configured_bar_count(cfg)
        bars = random_walk_bars(n, seed=seed, start=cfg.data.start, interval=cfg.data.interval, symbol=cfg.data.symbol)
        return bars, {"kind": "synthetic", "source": f"synthetic:{name}:{seed}", "seed": seed}
    root = Path(data)
    lo, hi = to_us(cfg.data.start), to_us(cfg.data.end, end=True)

    def _load():
        try:
            return load_bars(root, cfg.data.symbol, cfg.data.interval, cfg.data.start, cfg.data.end)
        except UserError:
            if any(root.iterdir()) and (root / f"{cfg.data.symbol.lower()}-{cfg.data.interval}").exists():
                raise
            return None  # empty store: fetch

    bars = _load()
    covered = bars is not None and len(bars) > 0 and bars.open_time[0] < lo + DAY_US and bars.open_time[-1] >= hi - DAY_US
    if not covered:
        _fetch(root, cfg)
        bars = _load()
        if bars is None or len(bars) == 0:
            raise UserError(
                f"--data {root}: no {cfg.data.symbol} {cfg.data.interval} bars for {cfg.data.start}..{cfg.data.end} "
                "even after fetching; import them with `tsflash data import FOLDER`"
            )
    return bars, {"kind": "store", "source": str(root)}


def _fetch(root: Path, cfg: ExperimentConfig) -> None:
    """Fetch the configured range into the store; offline -> one line saying how to import."""
    try:
        from tsflash import fetch
    except ImportError:
        raise UserError(
            f"no bars for {cfg.data.start}..{cfg.data.end} in {root} and this install cannot fetch; "
            "import a local folder instead: tsflash data import FOLDER"
        ) from None
    log.info("the store %s lacks %s..%s: fetching from the Binance archive", root, cfg.data.start, cfg.data.end)
    try:
        fetch.fetch(
            symbol=cfg.data.symbol, interval=cfg.data.interval, start=cfg.data.start, end=cfg.data.end, root=root
        )
    except UserError as exc:
        raise UserError(
            f"could not fetch {cfg.data.symbol} {cfg.data.interval} {cfg.data.start}..{cfg.data.end} ({exc}); "
            "offline? import a local folder instead: tsflash data import FOLDER"
        ) from None
    except OSError as exc:
        raise UserError(
            f"could not reach the Binance archive ({exc.__class__.__name__}: {exc}); "
            "import a local folder instead: tsflash data import FOLDER"
        ) from None


# ---------------------------------------------------------------------------------------------
# Trials and cells


def trial_key(params: dict) -> str:
    """Stable name of a configuration: "n512", or "n512-lr0.0003-wd0.05" with searched values."""
    key = f"n{int(params['n'])}"
    extra = {k: v for k, v in sorted(params.items()) if k != "n"}
    if extra:
        key += "".join(f"-{_SHORT.get(k, k)}{v:.4g}" for k, v in extra.items())
    return key


_SHORT = {"lr": "lr", "weight_decay": "wd"}


def _suggest(trial, cfg: ExperimentConfig, lengths: list[int], search: bool) -> dict:
    params = {"n": trial.suggest_categorical("n", lengths)}
    if search:
        lr, wd = cfg.train.lr, cfg.train.weight_decay
        params["lr"] = trial.suggest_float("lr", lr / 10, lr * 3, log=True)
        params["weight_decay"] = trial.suggest_float("weight_decay", 0.0, max(0.3, wd))
    return params


def _plan_slots(cfg: ExperimentConfig, trials: int) -> list[tuple[str, dict]]:
    """(slot id, enqueued params) for every planned trial: per N the default configuration,
    then trials - 1 slots whose searched values the sampler fills in."""
    slots = []
    for n in cfg.lengths:
        base = {"n": n}
        if trials > 1:
            base |= {"lr": cfg.train.lr, "weight_decay": cfg.train.weight_decay}
        slots.append((f"n{n}/0", base))
        slots += [(f"n{n}/{j}", {"n": n}) for j in range(1, trials)]
    return slots


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start(os.getpid())}"


def _proc_start(pid: int) -> str:
    """The process start time (clock ticks since boot) so that a reused pid is not mistaken."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _worker_alive(worker: str | None) -> bool | None:
    """True/False for a worker of this host, None when it ran elsewhere (cannot tell)."""
    if not worker:
        return False
    host, pid, start = (worker.split(":") + ["", "", ""])[:3]
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return _proc_start(int(pid)) == start


def _is_stale(t, shared: bool, now: float) -> bool:
    """Is RUNNING trial `t` abandoned? Its worker is dead on this host; or it ran on another host
    and the study is private to the run folder (default storage: one worker at a time, e.g. a
    GPU machine that was taken back); or, with shared --storage, its heartbeat (updated after
    every cell) is older than STALE_AFTER_S."""
    alive = _worker_alive(t.user_attrs.get("worker"))
    if alive is not None:
        return not alive
    if not shared:
        return True
    return now - float(t.user_attrs.get("heartbeat", 0.0)) > STALE_AFTER_S


def _sync_ledger(study, cfg: ExperimentConfig, trials: int, shared: bool) -> None:
    """Fail abandoned RUNNING trials (re-enqueued with the same parameters, so their saved cells
    are reused) and enqueue every planned slot not yet present."""
    from optuna.trial import TrialState

    now = time.time()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _is_stale(t, shared, now):
            log.info("trial %d (%s) was left running by a dead worker %s: failing and re-enqueuing it",
                     t.number, t.user_attrs.get("key", "?"), t.user_attrs.get("worker", "(unknown)"))
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            if t.params:
                study.enqueue_trial(dict(t.params), user_attrs={"slot": t.user_attrs.get("slot")})
    live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
    present = {t.user_attrs.get("slot") for t in study.get_trials(deepcopy=False, states=live)}
    for slot, params in _plan_slots(cfg, trials):
        if slot not in present:
            study.enqueue_trial(params, user_attrs={"slot": slot})


def _open_study(plan: SweepPlan):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=plan.cfg.train.seeds[0], n_startup_trials=len(plan.cfg.lengths))
    return optuna.create_study(
        study_name=plan.study_name, storage=plan.storage, direction="maximize", sampler=sampler, load_if_exists=True
    )


def _cell_paths(run_dir: Path, key: str, fold: int, seed: int) -> tuple[Path, Path]:
    stem = run_dir / "cells" / key / f"fold{fold}-seed{seed}"
    return stem, stem.with_name(stem.name + CELL_SUFFIX)


def _result_summary(res, *, kind: str, key: str, name: str, params: dict, fold: int, seed: int | None,
                    result_path: Path, run_dir: Path) -> dict:
    from tsflash.store import iso

    return {
        "kind": kind,
        "key": key,
        "name": name,
        "n": int(params["n"]) if params.get("n") else None,
        "params": params,
        "fold": int(fold),
        "seed": None if seed is None else int(seed),
        "train_start": iso(res.train_start), "train_end": iso(res.train_end),
        "test_start": iso(res.test_start), "test_end": iso(res.test_end),
        "metrics": {k: v for k, v in res.metrics.items()},
        "cost": dict(res.cost or {}),
        "flat_threshold": float(res.flat_threshold),
        "n_bars": int(len(res.test_time)),
        "result_path": str(result_path.relative_to(run_dir)),
    }


def _series_of(res) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.asarray(res.test_time, dtype=np.int64), np.asarray(res.net_returns, dtype=np.float64),
            np.asarray(res.gross_returns, dtype=np.float64))


def write_daily_series(path: Path, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict:
    """Concatenate per-fold per-bar (time, net, gross) and compound them to UTC-daily returns."""
    from tsflash.selection import daily_returns

    parts = sorted(parts, key=lambda p: int(p[0][0]) if len(p[0]) else 0)
    t = np.concatenate([p[0] for p in parts])
    net = np.concatenate([p[1] for p in parts])
    gross = np.concatenate([p[2] for p in parts])
    days, dnet = daily_returns(t, net)
    _, dgross = daily_returns(t, gross)
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a handle: np.savez would append ".npz"
        np.savez(fh, days=days.astype("datetime64[D]").astype(np.int64), net=dnet, gross=dgross)
    return {"days": days, "net": dnet, "gross": dgross}


def _daily_sharpe(times: np.ndarray, net: np.ndarray) -> float:
    """Per-day Sharpe of a per-bar net series; NaN when undefined (under 2 days, constant)."""
    from tsflash.selection import SelectionInputError, daily_returns, sharpe

    try:
        _, d = daily_returns(times, net)
        return float(sharpe(d))
    except SelectionInputError:
        return float("nan")


class _Progress:
    """tqdm bar over cells plus one log line per finished cell."""

    def __init__(self, total: int, done: int):
        from tqdm.auto import tqdm

        # The bar shows on a terminal only (disable=None); the log lines carry the same figures.
        self.bar = tqdm(total=total, initial=done, unit="cell", desc="sweep", dynamic_ncols=True,
                        file=sys.stderr, disable=None)
        self.total, self.n, self.start_n = total, done, done
        self.t0 = time.monotonic()

    def done(self, line: str) -> None:
        self.bar.update(1)
        self.n += 1
        elapsed = time.monotonic() - self.t0
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0  # cells/s in this session
        eta = f"{(self.total - self.n) / rate:.0f}s" if rate > 0 else "?"
        log.info("[%d/%d] %s (elapsed %.0fs, ETA %s)", self.n, self.total, line, elapsed, eta)

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def _run_logging(run_dir: Path):
    """Append this invocation's log to run_dir/sweep.log; console logs pass through tqdm."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    run_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / "sweep.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
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


def _git_commit() -> str | None:
    """HEAD (+ "-dirty"), or $TSFLASH_GIT_COMMIT where the code runs from a copy without .git."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        if out.returncode != 0:
            return os.environ.get("TSFLASH_GIT_COMMIT")
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("TSFLASH_GIT_COMMIT")


def package_versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for name in ("tsflash", "torch", "numpy", "pyarrow", "scikit-learn", "optuna", "matplotlib", "polars"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, torch threads {torch.get_num_threads()})"


# ---------------------------------------------------------------------------------------------
# The sweep


def run_sweep(plan: SweepPlan | SweepOptions) -> Path:
    """Run (or resume) the sweep and write the report; returns the run folder.

    Returns early (without the report) when other workers still run trials of a shared study.
    """
    if isinstance(plan, SweepOptions):
        plan = plan_sweep(plan)
    run_dir = plan.run_dir
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _run_in_folder(plan)
    except UserError:
        # A new run that failed before finishing any cell (no data, offline, ...) leaves no
        # empty run folder behind for the next command to "resume".
        if created and not (run_dir / "cells").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_in_folder(plan: SweepPlan) -> Path:
    run_dir = plan.run_dir
    with _run_logging(run_dir):
        if plan.preset_note:
            log.warning("%s", plan.preset_note)
        log.info("run folder %s (%s)", run_dir, "resuming" if plan.resumed else "new")
        _write_run_meta(plan)
        complete = _run_cells(plan)
        if not complete:
            log.info("the study is unfinished (trials left to other workers, or to a rerun after --time-budget); the run that completes it writes the report")
            return run_dir
        from tsflash.report import build_report

        md, html = build_report(run_dir)
        meta = read_json(run_dir / "run.json")
        meta["status"] = "complete"
        meta["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        write_json(run_dir / "run.json", meta)
        log.info("report: %s and %s", md, html)
    return run_dir


def _redact(url: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db (run.json is published)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _write_run_meta(plan: SweepPlan) -> None:
    path = plan.run_dir / "run.json"
    meta = read_json(path) if path.exists() else {}
    opts = plan.options
    invocations = meta.get("invocations", [])
    invocations.append({"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                        "command": opts.command, "worker": _worker_id()})
    meta.update(
        {
            "run_key": plan.run_key,
            "config_hash": plan.cfg.hash(),
            "status": meta.get("status", "running"),
            "created": meta.get("created", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")),
            "command": meta.get("command", opts.command),
            "invocations": invocations,
            "lengths": plan.cfg.lengths,
            "data": opts.data,
            "trials_per_length": opts.trials,
            "search_space": SEARCH_SPACE_DOC if opts.trials > 1 else None,
            "preset": plan.preset,
            "preset_note": plan.preset_note,
            "device": plan.device,
            "device_name": _device_name(plan.device),
            "seeds": plan.cfg.train.seeds,
            "storage": _redact(plan.storage) if plan.options.storage else "sqlite (run folder)/optuna.db",
            "study_name": plan.study_name,
            "git_commit": meta.get("git_commit", _git_commit()),
            "packages": package_versions(),
        }
    )
    write_json(path, meta)
    cfg_path = plan.run_dir / "config.json"
    if not cfg_path.exists():
        write_json(cfg_path, plan.cfg.to_dict())


def _run_cells(plan: SweepPlan) -> bool:
    """All cells of all trials; True when every planned trial of the study is complete."""
    from optuna.trial import TrialState

    from tsflash import engine

    cfg, run_dir, device = plan.cfg, plan.run_dir, plan.device
    seeds = list(cfg.train.seeds)
    study = _open_study(plan)
    _sync_ledger(study, cfg, plan.options.trials, shared=plan.options.storage is not None)

    bars, source = load_data(cfg, plan.options.data, default_seed=seeds[0])
    t0 = time.monotonic()
    prepared = engine.prepare(cfg, bars, device)
    prep_s = time.monotonic() - t0
    folds = prepared.folds
    _write_data_meta(run_dir, cfg, bars, source, folds, prep_s)

    n_slots = len(_plan_slots(cfg, plan.options.trials))
    total = len(folds) + n_slots * len(folds) * len(seeds)
    done = sum(1 for _ in (run_dir / "cells").rglob(f"*{CELL_SUFFIX}")) if (run_dir / "cells").exists() else 0
    progress = _Progress(total, min(done, total))
    cache: dict = {}

    def fold_inputs(k: int):
        """The fold's fitted inputs (normaliser, flat band), computed once per process."""
        if k not in cache:
            cache[k] = engine.fold_data(prepared, k)
        return cache[k]

    try:
        # Baselines: once per fold, independent of N and of the seed.
        for k in range(len(folds)):
            marker = run_dir / "cells" / "baselines" / f"fold{k}{CELL_SUFFIX}"
            if marker.exists():
                continue
            t1 = time.monotonic()
            results = engine.run_baselines(prepared, k, fold_inputs=fold_inputs(k))
            summaries = {}
            for name, res in results.items():
                stem = run_dir / "cells" / "baselines" / f"fold{k}-{name}"
                stem.parent.mkdir(parents=True, exist_ok=True)
                res.save(stem)
                summaries[name] = _result_summary(res, kind="baseline", key=f"baseline-{name}", name=name,
                                                  params={}, fold=k, seed=None, result_path=stem, run_dir=run_dir)
            write_json(marker, {"fold": k, "baselines": summaries})
            accs = ", ".join(f"{n} acc {s['metrics']['accuracy']:.4f}" for n, s in summaries.items())
            progress.done(f"baselines fold {k}: {accs} ({time.monotonic() - t1:.1f}s)")

        _write_baseline_series(run_dir, len(folds))

        while True:
            waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if not waiting:
                break
            budget = plan.options.time_budget
            if budget is not None and time.monotonic() - t0 > budget:
                log.info("time budget of %.0f s used: stopping before the next trial (%d still waiting); "
                         "run the same command again to resume", budget, len(waiting))
                break
            trial = study.ask()
            if trial.user_attrs.get("slot") is None:  # not enqueued: another worker took the last one
                study.tell(trial, state=TrialState.FAIL)
                continue
            trial.set_user_attr("worker", _worker_id())
            trial.set_user_attr("heartbeat", time.time())
            params = _suggest(trial, cfg, cfg.lengths, plan.options.trials > 1)
            key = trial_key(params)
            trial.set_user_attr("key", key)
            value = _run_trial(trial, params, key, plan, prepared, engine, progress, fold_inputs)
            study.tell(trial, value)
    finally:
        progress.close()

    planned = {slot for slot, _ in _plan_slots(cfg, plan.options.trials)}
    all_trials = study.get_trials(deepcopy=False)
    complete = {t.user_attrs.get("slot") for t in all_trials if t.state == TrialState.COMPLETE}
    _write_ledger(run_dir, study)
    if not planned <= complete:
        return False
    if plan.options.precision:
        _run_precision(run_dir, cfg, device, prepared.n_features)
    return True


def _run_trial(trial, params: dict, key: str, plan: SweepPlan, prepared, engine, progress, fold_inputs) -> float:
    cfg, run_dir, device = plan.cfg, plan.run_dir, plan.device
    n = int(params["n"])
    train_over = {k: v for k, v in params.items() if k in ("lr", "weight_decay")}
    parts, result_paths = [], []
    for k in range(len(prepared.folds)):
        per_seed = []
        for seed in cfg.train.seeds:
            stem, marker = _cell_paths(run_dir, key, k, seed)
            if marker.exists():
                from tsflash.engine import FoldResult

                res = FoldResult.load(stem)
            else:
                t1 = time.monotonic()
                ckpt = run_dir / "checkpoints" / key / f"fold{k}-seed{seed}"
                res = engine.run_fold(prepared, n, k, seed, device, checkpoint_dir=ckpt,
                                      train_overrides=train_over or None, fold_inputs=fold_inputs(k))
                stem.parent.mkdir(parents=True, exist_ok=True)
                res.save(stem)
                summary = _result_summary(res, kind="model", key=key, name=key, params=params, fold=k, seed=seed,
                                          result_path=stem, run_dir=run_dir)
                write_json(marker, summary)
                shutil.rmtree(ckpt, ignore_errors=True)  # the cell is saved: its checkpoint is dead weight
                with contextlib.suppress(OSError):
                    ckpt.parent.rmdir()  # only when empty
                m = res.metrics
                progress.done(
                    f"{key} fold {k} seed {seed}: acc {m['accuracy']:.4f} bal {m['balanced_accuracy']:.4f} "
                    f"logloss {m['log_loss']:.4f} mcc {m['mcc']:.4f}, {res.cost.get('tokens_per_s', float('nan')):.0f} tok/s "
                    f"({time.monotonic() - t1:.1f}s)"
                )
                trial.set_user_attr("heartbeat", time.time())
            per_seed.append(res)
            result_paths.append(str(stem.relative_to(run_dir)))
        times, net, gross = _series_of(per_seed[0])
        for res in per_seed[1:]:  # several seeds: an equal-weight portfolio of the seeds' strategies
            t2, n2, g2 = _series_of(res)
            assert np.array_equal(t2, times), "seeds scored different test bars"
            net, gross = net + n2, gross + g2
        net, gross = net / len(per_seed), gross / len(per_seed)
        parts.append((times, net, gross))
        fold_sr = _daily_sharpe(times, net)
        if np.isfinite(fold_sr):
            trial.report(fold_sr, step=k)
        trial.set_user_attr(f"fold{k}_metrics", {m: per_seed[0].metrics[m] for m in
                                                 ("accuracy", "balanced_accuracy", "log_loss", "mcc")})
    series_path = run_dir / "series" / f"{key}.npz"
    daily = write_daily_series(series_path, parts)
    trial.set_user_attr("result_paths", result_paths)
    trial.set_user_attr("daily_returns_path", str(series_path.relative_to(run_dir)))
    from tsflash.selection import SelectionInputError, sharpe

    try:
        value = float(sharpe(daily["net"]))
    except SelectionInputError:  # a strategy that never trades has no Sharpe ratio: score it 0
        value = 0.0
    trial.set_user_attr("daily_sharpe_defined", bool(np.std(daily["net"]) > 0))
    log.info("trial %s: daily net Sharpe %.4f over %d days", key, value, len(daily["net"]))
    return value


def _write_baseline_series(run_dir: Path, n_folds: int) -> None:
    """series/baseline-<name>.npz: each baseline's daily returns over all folds (once)."""
    from tsflash.engine import FoldResult

    first = read_json(run_dir / "cells" / "baselines" / f"fold0{CELL_SUFFIX}")
    for name in first["baselines"]:
        path = run_dir / "series" / f"baseline-{name}.npz"
        if path.exists():
            continue
        parts = [_series_of(FoldResult.load(run_dir / "cells" / "baselines" / f"fold{k}-{name}")) for k in range(n_folds)]
        write_daily_series(path, parts)


def _write_data_meta(run_dir: Path, cfg, bars, source: dict, folds, prep_s: float) -> None:
    from tsflash.store import find_gaps, fingerprint, iso

    gaps = find_gaps(bars.open_time, bars.interval_us)
    fold_rows = []
    for k, (tr, te) in enumerate(folds):
        fold_rows.append({
            "fold": k,
            "train_start": iso(bars.open_time[tr[0]]), "train_end": iso(bars.open_time[tr[-1]]),
            "test_start": iso(bars.open_time[te[0]]), "test_end": iso(bars.open_time[te[-1]]),
            "n_train": int(len(tr)), "n_test": int(len(te)),
        })
    write_json(run_dir / "data.json", {
        **source,
        "symbol": bars.symbol, "interval": bars.interval,
        "range": [cfg.data.start, cfg.data.end],
        "fingerprint": fingerprint(bars),
        "n_gaps": int(len(gaps)), "missing_bars": int(gaps.missing.sum()) if len(gaps) else 0,
        "folds": fold_rows,
        "prepare_seconds": prep_s,
    })


def _write_ledger(run_dir: Path, study) -> None:
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({
            "number": t.number, "state": t.state.name, "params": t.params, "value": t.value,
            "key": t.user_attrs.get("key"), "slot": t.user_attrs.get("slot"),
            "intermediate": {str(k): v for k, v in t.intermediate_values.items()},
            "daily_returns_path": t.user_attrs.get("daily_returns_path"),
        })
    write_json(run_dir / "ledger.json", {"study_name": study.study_name, "trials": rows,
                                         "n_complete": sum(r["state"] == "COMPLETE" for r in rows)})


def _run_precision(run_dir: Path, cfg: ExperimentConfig, device: str, n_features: int) -> None:
    """The precision oracle (tsflash.bench.bench_precision) at each N, once per run folder.

    Small on purpose: one sequence per N, a freshly initialised model of the sweep's size (its
    attention head size is what the kernels see), bf16 fused path against float64.
    """
    path = run_dir / "precision.json"
    if path.exists():
        return
    import tempfile

    import torch

    from tsflash import bench
    from tsflash.model import CausalTransformer, ModelConfig

    t1 = time.monotonic()
    seed = cfg.train.seeds[0]
    try:
        torch.manual_seed(seed)
        model = CausalTransformer(ModelConfig(n_features=n_features, **dataclasses.asdict(cfg.model)))
        with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
            model_path = Path(tmp) / "fresh-model.pt"
            model.save(model_path)
            result = bench.bench_precision(
                list(cfg.lengths), torch.device(device), model_path=model_path, heads=cfg.model.n_heads,
                head_dim=cfg.model.d_model // cfg.model.n_heads, backend=cfg.model.attention_backend, seed=seed,
            )
        result["available"] = True
        result["settings"]["model"] = f"fresh (seed {seed}), d_model={cfg.model.d_model}, n_layers={cfg.model.n_layers}"
    except Exception as exc:  # a diagnostic: record the failure, never lose a finished sweep
        log.warning("precision oracle failed: %s: %s", exc.__class__.__name__, exc)
        result = {"available": False, "reason": f"{exc.__class__.__name__}: {exc}"}
    result["seconds"] = time.monotonic() - t1
    write_json(path, result)
    log.info("precision oracle at N=%s in %.1fs", cfg.lengths, result["seconds"])
