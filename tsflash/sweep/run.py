"""The context-length sweep: one optuna trial per configuration, resumable cell by cell.

`tsflash sweep --lengths 512,4096,32768` trains and evaluates every context length N over all
walk-forward folds, keeps a trial ledger, and writes the report. The unit of work is a CELL: one
(trial, fold, seed) model run, or one fold's baselines. Each finished cell is saved atomically in
the run folder (layout: tsflash.runfolder), so killing the sweep at any moment (even SIGKILL) and
running the same command again recomputes only unfinished cells; engine checkpoints let an
interrupted cell resume too. Once every seed of a fold is saved, the fold is scored into a small
fold file (`Objective.fold_scores`), which then stands in for its cells' per-bar arrays: a copy
of the run folder without those (a device's state archive) loses only the cells of unscored folds.

The sweep is optuna's idiom: `Objective(trial)` runs one configuration (N, plus searched values
with --trials) over every fold and seed, reports per-fold daily net Sharpe ratios as intermediate
values, keeps the paths of its saved series in `user_attrs`, and returns its daily net Sharpe
ratio over all folds, scored at the run's fee from the saved per-bar positions (tsflash.scoring.daily).
The cells are the unit of parallel work, each an optuna trial of the ledger's cells study:
`_work`, one worker per device (`--devices`), pops cells and runs `Objective._cell` on each (the
worker that saves the last seed of a fold scores the fold); once every cell of a configuration is
saved, its scoring is queued and popped first, by the worker that saved the last one, which calls
`Objective(trial)` (it joins the fold files) and completes the configuration's trial
(tsflash.sweep.workers: order, heartbeat, retries). The DSR uses the number of COMPLETE
configuration trials (ledger.json; cells are not counted) and the variance of their values.

Where things live: the options, config, run key and run folder choice in tsflash.sweep.plan; the
ledger (configurations, cells, the heartbeat storage) in tsflash.sweep.ledger; the workers and the
order of cells in tsflash.sweep.workers; run.json and data.json in tsflash.sweep.provenance; the cost estimates, ETA and log
in tsflash.sweep.progress; the bars in tsflash.sweep.source.

Sharing a study: `--storage postgresql://user:pass@host/db` (or any SQLAlchemy URL optuna
accepts; needs the driver, e.g. psycopg2) together with an artifact store every host reaches
(`--artifacts /shared/folder` or s3://bucket) lets the workers of several hosts pull cells from
one run, each host in a run folder of its own: a job's files are uploaded to its cell trial
(tsflash.sweep.artifacts), a cell is saved when its trial is COMPLETE with them, and a host
fetches what its folder lacks (the scorer of a configuration its cells, every host all of them at
the start and the end). The first invocation creates the study and enqueues the plan; later ones
load it and only add missing slots. Every invocation whose workers leave the study complete
assembles its run folder and writes the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from optuna.trial import Trial

from tsflash import engine
from tsflash.bench.precision import bench_precision
from tsflash.config import ExperimentConfig
from tsflash.data.store import iso
from tsflash.errors import UserError
from tsflash.model import attention
from tsflash.model.transformer import CausalTransformer, ModelConfig
from tsflash.report import build_report
from tsflash.runfolder import (
    BASELINE_DIR,
    RunFolder,
    baseline_series_name,
    decode_trial_key,
    encode_trial_key,
    read_json,
    write_json,
)
from tsflash.scoring.daily import (
    FoldScores,
    baseline_losses,
    cell_arrays,
    cell_returns,
    concat_losses,
    daily_series,
    daily_series_of_folds,
    daily_sharpe,
    objective_value,
    read_fold_scores,
    result_arrays,
    score_fold,
    scored_arrays,
    scoring_id,
    write_fold_scores,
    write_losses,
)
from tsflash.scoring.strategy import Strategy
from tsflash.sweep.artifacts import CellFiles, open_store
from tsflash.sweep.ledger import Ledger, plan_slots, suggest_params
from tsflash.sweep.plan import (  # the sweep's public API: SweepOptions, plan_sweep, run_sweep
    SweepOptions,
    SweepPlan,
    nesting_unmeasured,
    plan_sweep,
)
from tsflash.sweep.preregister import resolved_arm
from tsflash.sweep.progress import (
    CostModel,
    Progress,
    Work,
    baseline_work,
    format_seconds,
    model_work,
    n_params,
    precision_work,
    prior_rates,
    report_work,
    run_logging,
    warn_if_long,
)
from tsflash.sweep.provenance import (
    kept_kernel_choices,
    mark_complete,
    record_kernel_choices,
    record_peak_memory,
    write_data_json,
    write_run_json,
)
from tsflash.sweep.source import check_data, configured_bar_count, load_data
from tsflash.sweep.workers import CellQueue, CellTime, Job, cell_name, run_workers, worker_tag

log = logging.getLogger(__name__)

CLASSIFICATION = ("accuracy", "balanced_accuracy", "log_loss", "mcc")


def run_sweep(plan: SweepPlan | SweepOptions) -> Path:
    """Run (or resume) the sweep and write the report; returns the run folder.

    Returns early (without the report) when other workers still run trials of a shared study, or
    when --time-budget stopped it.
    """
    if isinstance(plan, SweepOptions):
        plan = plan_sweep(plan)
    folder = plan.folder
    refuse_claims_era(folder)
    check_data(plan.cfg, plan.options.data)  # a changed or damaged store file: refused before the run folder exists
    created = not folder.root.exists()
    folder.root.mkdir(parents=True, exist_ok=True)
    try:
        with run_logging(folder.log_file):
            return _run_in_folder(plan)
    except Exception:
        # A new run that failed before finishing or checkpointing any cell (bad data, offline, a
        # full disk, ...) leaves no run folder (sweep.log, optuna.db, run.json) for the next
        # command to "resume".
        if created and not folder.cells_dir.exists() and not folder.checkpoints_dir.exists():
            shutil.rmtree(folder.root, ignore_errors=True)
        raise


def _run_in_folder(plan: SweepPlan) -> Path:
    folder = plan.folder
    if plan.preset_note:
        log.warning("%s", plan.preset_note)
    if plan.fee_note:
        log.warning("%s", plan.fee_note)
    if (why := nesting_unmeasured(plan.cfg)) is not None:
        log.warning("%s", why)
    log.info("run folder %s (%s)", folder.root, "resuming" if plan.resumed else "new")
    write_run_json(plan)
    if not _run_cells(plan):
        log.info("the study is unfinished (cells left to other workers, or to a rerun after --time-budget); "
                 "the run that completes it writes the report")
        return folder.root
    record_peak_memory(folder, "data, cells, precision check")  # what the report's cost section shows
    written = None if plan.options.validation_only else build_report(folder.root, resolve=resolved_arm)
    mark_complete(folder)
    peak = record_peak_memory(folder, "data, cells, precision check" + ("" if written is None else ", report"))
    log.info("peak memory of the job: %.2f GiB (%s; run.json \"peak_memory\")", peak / 2**30,
             "the host's resident set" if plan.device == "cpu" else "the host's resident set, not the GPU's")
    folder.tidy_checkpoints()
    if written:
        log.info("report: %s and %s", *written)
    else:
        log.info("complete; no report (--validation-only: its test figures stay unread); `tsflash report %s` "
                 "writes it", folder.root)
    return folder.root


def _run_cells(plan: SweepPlan) -> bool:
    """Enqueue the planned configurations, the baselines and the precision check, then run one
    worker per device (`_work`; in this process for one device). True when every planned
    configuration, the baselines and the precision check are done."""
    cfg, folder, opts = plan.cfg, plan.folder, plan.options
    ledger = _open_ledger(plan)
    ledger.sync()
    files = cell_files(plan, ledger)
    files.fetch()  # what other hosts saved (their baselines and precision check are not queued again)
    if not _baselines_done(folder, cfg):
        ledger.enqueue_cell("baselines", {})
    if _precision_due(plan):
        ledger.enqueue_cell("precision", {})
    results = run_workers(_work, plan, plan.devices)
    files.fetch()  # this run folder is what the report is built from
    ledger.write_json(folder.ledger_json)
    if ledger.is_complete() and _baselines_done(folder, cfg) and not _precision_due(plan):
        return True
    if any(r["out_of_time"] for r in results):
        log.info("time budget of %.0f s used: no new cell was started after it; run the same command again to "
                 "resume", opts.time_budget)
    return False


def _work(plan: SweepPlan, device: str, index: int, n_workers: int) -> dict:
    """One worker on `device`: prepare the data once, then claim and run jobs (tsflash.sweep.workers)
    until none is left. Returns {"device", "out_of_time", "jobs"}."""
    t0 = time.monotonic()
    plan = dataclasses.replace(plan, device=device)
    cfg, folder, opts = plan.cfg, plan.folder, plan.options
    with run_logging(folder.log_file, tag=worker_tag(device, index)) if n_workers > 1 else contextlib.nullcontext():
        ledger = _open_ledger(plan)
        files = cell_files(plan, ledger)
        if pinned := attention.pin(kept_kernel_choices(folder)):  # a resumed run keeps its kernels
            log.info("attention: kept the run's earlier kernel decisions %s", pinned)
        model_params = n_params(cfg)
        cost = CostModel(prior_rates(device))
        _observe_saved_cells(cost, folder, cfg, model_params)
        lengths = [s.params["n"] for s in ledger.slots]
        todo, done = _todo(folder, cfg, lengths, model_params)
        finale = [precision_work(cfg)] if _precision_due(plan) else []
        if index == 0:
            warn_if_long(todo + finale + [report_work()], cost, device, f"{len(todo)} of {done + len(todo)} cells to do"
                         + (", then the precision check" if finale else "")
                         + (f", on {n_workers} workers" if n_workers > 1 else ""), workers=n_workers)
        prepared = _prepare_data(plan, write=index == 0)
        progress = Progress(todo, cost, done, bar=False if n_workers > 1 else None, workers=n_workers)
        objective = Objective(plan, prepared, ledger, progress, model_params)
        deadline = None if opts.time_budget is None else t0 + opts.time_budget
        queue = CellQueue(ledger, cells=functools.partial(_cells_of, folder, cfg, files),
                          params_of=functools.partial(_params_of, cfg, opts.trials), deadline=deadline,
                          estimate=functools.partial(_cell_time, cost, cfg, model_params),
                          whole_folds=opts.slice_by == "fold")
        jobs = 0
        try:
            for job in queue:
                progress.set_remaining(*_todo(folder, cfg, lengths, model_params))  # other workers' cells too
                _run_job(job, objective, files, finale)
                jobs += 1
        finally:
            progress.close()
    return {"device": device, "out_of_time": queue.out_of_time, "jobs": jobs}


def _open_ledger(plan: SweepPlan) -> Ledger:
    cfg, opts = plan.cfg, plan.options
    slots = plan_slots(cfg.lengths, opts.trials, cfg.train.lr, cfg.train.weight_decay)
    return Ledger.open(plan.study_name, plan.storage, slots, shared=plan.shared, seed=cfg.train.seeds[0])


def refuse_claims_era(folder: RunFolder) -> None:
    """A run folder whose workers claimed cells with files (tsflash before cells were optuna
    trials) and left claims behind may still have workers of that version running on it."""
    claims = sorted(folder.claims_dir.rglob("*.claim")) if folder.claims_dir.is_dir() else []
    if claims:
        raise UserError(f"{folder.root} was run by an earlier tsflash whose workers claim cells with files, and "
                        f"{len(claims)} claim(s) remain in {folder.claims_dir}: finish it with that version (git "
                        "checkout cb7b66d, then the same `tsflash sweep` command), or, once none of its workers "
                        f"runs, delete {folder.claims_dir} and resume it with this one")
    if folder.claims_dir.is_dir():
        shutil.rmtree(folder.claims_dir)  # only the lock file of a finished claims-era invocation


def cell_files(plan: SweepPlan, ledger: Ledger) -> CellFiles:
    """The run's artifact store; none for a private study (no --storage, no --artifacts): its one
    run folder is all there is, and a state archive of it stays as small as before."""
    store = open_store(plan.options.artifacts, plan.folder) if plan.shared or plan.options.artifacts else None
    return CellFiles(store, ledger, plan.folder)


def _run_job(job: Job, objective: Objective, files: CellFiles, finale: list[Work]) -> None:
    """One popped job (tsflash.sweep.workers.Job) on this worker, its files uploaded to its cell
    trial before that is completed (tsflash.sweep.artifacts)."""
    plan = objective.plan
    if job.kind == "baselines":
        objective.run_baselines()
    elif job.kind == "cell":
        ckpt, seen, recorded = plan.folder.checkpoint_dir(job.key, job.fold, job.seed), {}, []
        files.restore_checkpoint(job.cell, ckpt)  # a retried cell resumes where its lost worker stopped

        def after_step() -> None:
            files.upload_checkpoint(job.cell, ckpt, seen)
            # the decisions behind this cell's kernel (made before its first step), in run.json once,
            # at that step: before any checkpoint of it exists, so a resume keeps them (attention.pin)
            if not recorded:
                record_kernel_choices(plan.folder, attention.auto_report())
                recorded.append(True)

        objective._cell(job.config, job.params, job.key, job.fold, job.seed, after_step=after_step)
        record_kernel_choices(plan.folder, attention.auto_report())  # and any made after training (evaluation)
    elif job.kind == "score":
        files.fetch(lambda cell: cell.user_attrs.get("key") == job.key)  # its cells saved by other hosts
        objective.ledger.complete(job.config, *objective.score(job.config))
    elif job.kind == "precision":
        _run_precision(plan, objective.prepared.n_features, objective.progress.estimate(finale))
    files.upload(job.cell, _outputs(job, plan.folder, objective.n_folds))
    files.drop_checkpoint(job.cell)


def _outputs(job: Job, folder: RunFolder, n_folds: int) -> list[Path]:
    """The files in the run folder that job made (those of them that exist are uploaded)."""
    if job.kind == "cell":
        stem = folder.cell_stem(job.key, job.fold, job.seed)
        return [folder.cell_npz(stem), stem.with_name(f"{stem.name}.json"), folder.fold_scores_path(job.key, job.fold),
                folder.cell_marker(job.key, job.fold, job.seed)]
    if job.kind == "score":
        return [folder.series_path(job.key), folder.forecasts_path(job.key),
                *(folder.fold_scores_path(job.key, k) for k in range(n_folds))]
    if job.kind == "baselines":
        prefix = baseline_series_name("")
        return [*sorted((folder.cells_dir / BASELINE_DIR).glob("fold*")), *sorted(folder.series_dir.glob(f"{prefix}*.npz")),
                *sorted(folder.forecasts_dir.glob(f"{prefix}*.npz"))]
    return [folder.precision_json]


def _prepare_data(plan: SweepPlan, write: bool) -> engine.Prepared:
    """Load the bars and prepare features, labels and folds on the worker's device (once per worker)."""
    cfg, opts = plan.cfg, plan.options
    t0 = time.monotonic()
    log.info("loading %s %s bars %s..%s from %s", cfg.data.symbol, cfg.data.interval, cfg.data.start, cfg.data.end,
             opts.data)
    bars, source = load_data(cfg, opts.data, default_seed=cfg.train.seeds[0])
    log.info("preparing features, labels and %d walk-forward folds for %d bars on %s", cfg.splits.n_folds, len(bars),
             plan.device)
    prepared = engine.prepare(cfg, bars, plan.device)
    prep_s = time.monotonic() - t0
    log.info("data ready in %.1fs", prep_s)
    if write:
        write_data_json(plan.folder, cfg, bars, source, prepared.folds, prep_s)
    return prepared


def _cells_of(folder: RunFolder, cfg: ExperimentConfig, files: CellFiles, key: str) -> list[tuple[int, int, bool]]:
    """(fold, seed, saved?) of every cell of trial key `key`: its trial is COMPLETE with its files
    (on any host), or it is saved in this run folder (one of an earlier version)."""
    saved = files.saved()
    return [(k, s, cell_name(key, k, s) in saved or folder.cell_saved(key, k, s))
            for k in range(cfg.splits.n_folds) for s in cfg.train.seeds]


def _params_of(cfg: ExperimentConfig, trials: int, trial: Trial) -> tuple[dict, str]:
    """A trial's parameters (drawn once, when it is popped) and its key, kept in its user attrs."""
    params = suggest_params(trial, cfg.lengths, cfg.train.lr, cfg.train.weight_decay, trials > 1)
    key = encode_trial_key(params)
    if trial.user_attrs.get("key") != key:
        trial.set_user_attr("key", key)
    return params, key


def _baselines_done(folder: RunFolder, cfg: ExperimentConfig) -> bool:
    return all(_baseline_saved(folder, k) for k in range(cfg.splits.n_folds))


def _baseline_saved(folder: RunFolder, k: int) -> bool:
    """Fold k's baselines are done: their summary, and their per-bar arrays unless each baseline's
    daily series, written with its loss table once every fold is done, is there (a state archive
    leaves the arrays behind; a published run has no loss tables of its baselines)."""
    marker = folder.baseline_marker(k)
    return marker.exists() and all(folder.cell_npz(folder.baseline_stem(k, name)).exists()
                                   or folder.series_path(baseline_series_name(name)).exists()
                                   for name in read_json(marker)["baselines"])


def _precision_due(plan: SweepPlan) -> bool:
    return plan.options.precision and not plan.folder.precision_json.exists()


def _todo(folder: RunFolder, cfg: ExperimentConfig, slot_lengths: list[int], model_params: int) -> tuple[list[Work], int]:
    """(cells not finished yet, cells finished): baselines per fold, model cells per N."""
    n_folds, n_seeds = cfg.splits.n_folds, len(cfg.train.seeds)
    n_bars = configured_bar_count(cfg)
    todo = [baseline_work(cfg, k, n_bars) for k in range(n_folds) if not _baseline_saved(folder, k)]
    finished = Counter(decode_trial_key(key)["n"] for key in folder.saved_cell_keys())
    for n, n_slots in Counter(slot_lengths).items():
        todo += [model_work(cfg, n, model_params)] * max(n_slots * n_folds * n_seeds - finished[n], 0)
    total = n_folds + len(slot_lengths) * n_folds * n_seeds
    return todo, total - len(todo)


def work_left(folder: RunFolder, cfg: ExperimentConfig, trials: int, cost: CostModel) -> list[Work]:
    """What resuming `folder` at `cfg` still runs, as the sweep prices it (`python -m lab.plan --check`
    adds these up over a plan): `cost` first learns the run's saved cells, then the baselines and model
    cells not saved, the precision check unless saved, and the report."""
    model_params = n_params(cfg)
    _observe_saved_cells(cost, folder, cfg, model_params)
    todo, _ = _todo(folder, cfg, [n for n in cfg.lengths for _ in range(trials)], model_params)
    return todo + ([] if folder.precision_json.exists() else [precision_work(cfg)]) + [report_work()]


def _cell_time(cost: CostModel, cfg: ExperimentConfig, model_params: int, n: int) -> CellTime:
    """What a time budget plans a cell at N with: the longest cell of this run measured at N, not
    their mean (early stopping makes cells of one N differ twofold, and a fold that outlasts a
    call's hard limit loses all its cells), else the calibrated guess."""
    work = model_work(cfg, n, model_params)
    return CellTime(cost.longest(work), cost.measured(work))


def _observe_saved_cells(cost: CostModel, folder: RunFolder, cfg: ExperimentConfig, model_params: int) -> None:
    """Cells saved by earlier invocations refine the estimate before any cell runs here (not those
    whose per-bar files a state archive left behind before their fold was scored: they are trained
    again, and their time may have been measured on a GPU shared with another run)."""
    cells, _ = folder.cell_summaries()
    for c in cells:
        if "key" in c and not folder.cell_saved(c["key"], c["fold"], c["seed"]):
            continue
        seconds = c.get("seconds") or c["cost"].get("train_seconds", 0.0) + c["cost"].get("eval_seconds", 0.0)
        if seconds > 0:
            cost.observe(model_work(cfg, c["n"], model_params), seconds)


# ---------------------------------------------------------------------------------------------
# The objective


class Objective:
    """optuna's objective: one trial = one configuration over every fold and seed.

    Holds what every trial shares: the prepared data, each fold's fitted inputs (normaliser, flat
    band; computed once per process), the run folder, the ledger and the progress.
    """

    def __init__(self, plan: SweepPlan, prepared: engine.Prepared, ledger: Ledger, progress: Progress, model_params: int):
        self.plan, self.cfg, self.folder = plan, plan.cfg, plan.folder
        self.prepared, self.ledger, self.progress = prepared, ledger, progress
        self.model_params = model_params  # parameters of the model, for the cost estimates
        self.fee = plan.cfg.eval.fee_bps
        self.validation_only = plan.options.validation_only  # no test figure in the log (--validation-only)
        self.strategy = Strategy.from_config(plan.cfg.to_dict())  # the trading rule scored (tsflash.scoring.strategy)
        self.scoring = scoring_id(self.strategy, self.fee)  # what a fold file must have been scored under
        self.n_folds = len(prepared.folds)
        self._fold_inputs: dict[int, engine.FoldData] = {}

    def fold_inputs(self, k: int) -> engine.FoldData:
        if k not in self._fold_inputs:
            self._fold_inputs[k] = engine.fold_data(self.prepared, k)
        return self._fold_inputs[k]

    def __call__(self, trial: Trial) -> float:
        value, record = self.score(trial)
        record(trial)
        return value

    def score(self, trial: Trial) -> tuple[float, Callable[[Trial], None]]:
        """The configuration's value, and what records it on its trial (per-fold values, metrics
        and paths): the caller records it, so that a worker whose configuration another worker
        completed meanwhile has written nothing to the trial but that (`Ledger.complete`)."""
        slot = trial.user_attrs["slot"]
        cfg = self.cfg
        params = suggest_params(trial, cfg.lengths, cfg.train.lr, cfg.train.weight_decay, self.plan.options.trials > 1)
        key = encode_trial_key(params)
        to_do = sum(not self.folder.cell_saved(key, k, s) for k in range(self.n_folds) for s in cfg.train.seeds)
        log.info("trial %s (slot %s): %d of %d cells to do, about %s", key, slot, to_do,
                 self.n_folds * len(cfg.train.seeds),
                 format_seconds(self.progress.estimate([model_work(cfg, params["n"], self.model_params)] * to_do)))
        attrs, reports, folds = {"key": key}, {}, []
        for k in range(self.n_folds):
            folds.append(fold := self._scored_fold(trial, params, key, k))
            if np.isfinite(fold_sr := daily_sharpe(fold.daily.net)):
                reports[k] = fold_sr
            metrics = read_json(self.folder.cell_marker(key, k, cfg.train.seeds[0]))["metrics"]
            attrs[f"fold{k}_metrics"] = {m: metrics[m] for m in CLASSIFICATION}
        daily = daily_series_of_folds([f.daily for f in folds])
        path = self.folder.write_series(key, **daily)
        write_losses(self.folder, key, concat_losses([f.losses for f in folds]))  # question 1's paired tests read these
        attrs["result_paths"] = [self.folder.relative(self.folder.cell_stem(key, k, s))
                                 for k in range(self.n_folds) for s in cfg.train.seeds]
        attrs["daily_returns_path"] = self.folder.relative(path)
        attrs["daily_sharpe_defined"] = bool(np.std(daily["net"]) > 0)
        value = objective_value(daily["net"])
        if not self.validation_only:
            log.info("trial %s: daily net Sharpe %.4f over %d days (fee %g bps)", key, value, len(daily["net"]),
                     self.fee)

        def record(trial: Trial) -> None:
            for step, fold_sr in reports.items():
                trial.report(fold_sr, step=step)
            for name, attr in attrs.items():
                trial.set_user_attr(name, attr)
        return value, record

    def _scored_fold(self, trial: Trial, params: dict, key: str, k: int) -> FoldScores:
        """Fold k of the trial scored, its cells that are not saved trained first (a score job
        finds them all saved)."""
        if (scores := self.fold_scores(key, k)) is None:
            for seed in self.cfg.train.seeds:
                self._cell(trial, params, key, k, seed)
            scores = self.fold_scores(key, k)
        return scores

    def fold_scores(self, key: str, k: int) -> FoldScores | None:
        """Fold k of trial `key` scored: read from its fold file, else scored from its seeds'
        per-bar cells and written there; None while a seed of the fold is not saved with its arrays.

        Two workers that save the fold's last seeds at once may both score it: each writes the
        same arrays atomically (tsflash.scoring.daily.write_fold_scores), so no lock is needed.
        """
        folder, seeds = self.folder, self.cfg.train.seeds
        saved = read_fold_scores(folder, key, k)
        if saved is not None and saved.scoring == self.scoring:
            return saved
        if not all(folder.cell_loadable(key, k, s) for s in seeds):
            if saved is not None:
                raise UserError(f"{folder.fold_scores_path(key, k)} was scored under {saved.scoring}, this run scores "
                                f"under {self.scoring}, and fold {k}'s per-bar cells are gone: resume with the "
                                "eval.strategy and eval.entry_threshold of the run's config.json")
            return None
        scores = score_fold(key, k, [cell_arrays(folder.cell_stem(key, k, s)) for s in seeds],
                            [f"seed{s}" for s in seeds], self.strategy, self.fee)
        write_fold_scores(folder, key, k, scores)
        return scores

    def _cell(self, trial: Trial, params: dict, key: str, k: int, seed: int,
              after_step: Callable[[], None] | None = None) -> None:
        """One (trial, fold, seed), unless saved: trained, scored and saved; the fold's last seed
        to be saved also scores the fold (`fold_scores`). `after_step`: called after each training
        step (a worker uploads the cell's checkpoint when the engine rewrote it)."""
        folder, n = self.folder, int(params["n"])
        stem, marker = folder.cell_stem(key, k, seed), folder.cell_marker(key, k, seed)
        if folder.cell_saved(key, k, seed):
            return
        self.progress.start(model_work(self.cfg, n, self.model_params), f"{key} fold {k} seed {seed}")
        t1 = time.monotonic()
        ckpt = folder.checkpoint_dir(key, k, seed)
        train_over = {p: v for p, v in params.items() if p in ("lr", "weight_decay")}
        steps = engine.cell_steps(self.cfg.train)  # a cell's steps over all its restarts
        res = engine.run_cell(self.prepared, n, k, seed, self.plan.device, checkpoint_dir=ckpt,
                              train_overrides=train_over or None, fold_inputs=self.fold_inputs(k),
                              on_step=lambda step: (self.progress.step(step, steps), after_step and after_step()))
        res.save(stem)
        seconds = time.monotonic() - t1
        write_json(marker, self._summary(res, kind="model", key=key, name=key, params=params, fold=k, seed=seed,
                                         stem=stem) | {"seconds": seconds})
        shutil.rmtree(ckpt, ignore_errors=True)  # the cell is saved: its checkpoint is dead weight
        with contextlib.suppress(OSError):
            ckpt.parent.rmdir()  # only when empty
        m, c = res.metrics, res.cost
        scores = (f"validation loss {c.get('best_val_loss', float('nan')):.4f} at step {c.get('best_step')}"
                  if self.validation_only else
                  f"acc {m['accuracy']:.4f} bal {m['balanced_accuracy']:.4f} logloss {m['log_loss']:.4f} "
                  f"mcc {m['mcc']:.4f}")
        self.progress.finish(f"{key} fold {k} seed {seed}: {scores}, {c.get('tokens_per_s', float('nan')):.0f} tok/s "
                             f"({seconds:.1f}s)")
        self.fold_scores(key, k)  # written once every seed of the fold is saved

    def run_baselines(self) -> None:
        """The class prior and the logistic regression, once per fold (independent of N and seed)."""
        folder, n_bars, n_features = self.folder, len(self.prepared.open_time), self.prepared.n_features
        todo = {k: baseline_work(self.cfg, k, n_bars, n_features) for k in range(self.n_folds)
                if not _baseline_saved(folder, k)}
        if todo:
            log.info("baselines (class prior, logistic regression) on %d fold(s): about %s", len(todo),
                     format_seconds(self.progress.estimate(list(todo.values()))))
        for k, work in todo.items():
            self.progress.start(work, f"baselines fold {k}")
            t1 = time.monotonic()
            summaries = {}
            for name, res in engine.run_baselines(self.prepared, k, fold_inputs=self.fold_inputs(k)).items():
                stem = folder.baseline_stem(k, name)
                res.save(stem)
                summaries[name] = self._summary(res, kind="baseline", key=baseline_series_name(name), name=name,
                                                params={}, fold=k, seed=None, stem=stem)
            seconds = time.monotonic() - t1
            write_json(folder.baseline_marker(k), {"fold": k, "baselines": summaries, "seconds": seconds})
            accs = ("saved" if self.validation_only else
                    ", ".join(f"{n} acc {s['metrics']['accuracy']:.4f}" for n, s in summaries.items()))
            self.progress.finish(f"baselines fold {k}: {accs} ({seconds:.1f}s)")
        for name in read_json(folder.baseline_marker(0))["baselines"]:
            series = baseline_series_name(name)
            if not folder.series_path(series).exists():
                parts = [cell_returns(folder.baseline_stem(k, name), self.fee, self.strategy)
                         for k in range(self.n_folds)]
                folder.write_series(series, **daily_series(parts))
                write_losses(folder, series, baseline_losses(folder, name, self.n_folds))

    def _summary(self, res: engine.FoldResult, **where) -> dict:
        return cell_summary(res, self.folder, self.strategy, self.fee, **where)


def cell_summary(res: engine.FoldResult, folder: RunFolder, strategy, fee_bps: float, *, kind: str, key: str,
                 name: str, params: dict, fold: int, seed: int | None, stem: Path) -> dict:
    """A cell's summary (its marker file): what the report reads, without the per-bar arrays.
    Shared by the sweep and `tsflash confirm`."""
    return {
        "kind": kind, "key": key, "name": name,
        "n": int(params["n"]) if params.get("n") else None,
        "params": params,
        "fold": int(fold),
        "seed": None if seed is None else int(seed),
        "train_start": iso(res.train_start), "train_end": iso(res.train_end),
        "test_start": iso(res.test_start), "test_end": iso(res.test_end),
        "metrics": dict(res.metrics),  # its mean_net_return is at fee_bps, under the one-bar rule
        "fee_bps": fee_bps,
        "strategy": scored_arrays(result_arrays(res), strategy, fee_bps)[1],  # the rule scored, at fee_bps
        "cost": dict(res.cost or {}),  # with the learning curve and stopping steps of a model cell
        "far_context": dict(res.far_context),  # metrics with the context cut (tsflash.engine._evaluate)
        "flat_threshold": float(res.flat_threshold),
        "n_bars": int(len(res.test_time)),
        "result_path": folder.relative(stem),
    }


# ---------------------------------------------------------------------------------------------
# The precision check


def _run_precision(plan: SweepPlan, n_features: int, estimate_s: float) -> None:
    """The precision oracle (tsflash.bench.precision.bench_precision) at each N, once per run folder.

    Small on purpose: one sequence per N, a freshly initialised model of the sweep's size (its
    attention head size is what the kernels see), bf16 fused path against float64.
    """
    cfg, folder = plan.cfg, plan.folder
    log.info("precision check at N=%s (bf16 fused attention against exact float64): this takes about %s",
             ", ".join(map(str, cfg.lengths)), format_seconds(estimate_s))
    t1 = time.monotonic()
    seed = cfg.train.seeds[0]
    try:
        torch.manual_seed(seed)
        model = CausalTransformer(ModelConfig(n_features=n_features, **dataclasses.asdict(cfg.model)))
        with tempfile.TemporaryDirectory(dir=folder.root) as tmp:
            model_path = Path(tmp) / "fresh-model.pt"
            model.save(model_path)
            result = bench_precision(
                list(cfg.lengths), torch.device(plan.device), model_path=model_path, heads=cfg.model.n_heads,
                head_dim=cfg.model.d_model // cfg.model.n_heads, backend=cfg.model.attention_backend, seed=seed,
            )
        result["available"] = True
        result["settings"]["model"] = f"fresh (seed {seed}), d_model={cfg.model.d_model}, n_layers={cfg.model.n_layers}"
    except Exception as exc:  # a diagnostic: record the failure, never lose a finished sweep
        log.warning("precision oracle failed: %s: %s", exc.__class__.__name__, exc)
        result = {"available": False, "reason": f"{exc.__class__.__name__}: {exc}"}
    result["seconds"] = time.monotonic() - t1
    write_json(folder.precision_json, result)
    log.info("precision oracle at N=%s in %.1fs", cfg.lengths, result["seconds"])
