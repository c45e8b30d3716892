"""Out-of-time confirmation: re-test a finished sweep, unchanged, on a later period.

`tsflash confirm RUN --start 2025-07-01 [--end 2025-12-31]` keeps the hold-out a practitioner
keeps in a drawer: bars that played no part in any choice of the sweep. Every candidate of the
run (its completed trials, with their searched hyper-parameters) and the baselines are retrained
exactly as a walk-forward fold would train them -- same resolved config, same seeds, same
protocol -- on every bar before `--start` minus the purge (expanding; the last `train_days` days
when the run's scheme is rolling), with the validation tail the config asks for, and score every
bar of the hold-out once (the engine's evaluation rule). The run's data range becomes
[data.start, --end] with one fold whose test block is [--start, --end]::

    TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTT...###########     T run's range (+ days up to --start), . purge,
    |<- data.start    data.end ->|      |<- --start  --end ->|     # the hold-out

Both questions of the report are answered on the hold-out with the report's own code
(`tsflash.report.compute` on a RunData of the confirm work folder): forecasting, over training
runs where the hold-out allows it (it needs at least 2 folds and 2 seeds, and the hold-out is one
fold), else the seed ensembles' paired Diebold-Mariano tests between N, compared with the run's
answer at the same level; trading, the net returns, PSR and the DSR with the ORIGINAL
run's ledger (its trial count and Sharpe variance: the search happened there). confirm.md,
confirm.html and confirm.json say whether the original verdict holds; the run's own files are
untouched.

Work folder `<run>/confirm/` is a RunFolder of its own (run.json with the hold-out, config.json,
data.json, cells/, series/, forecasts/, checkpoints/): each (N, seed) cell and the baselines are
saved atomically and skipped when present, engine checkpoints resume an interrupted cell, so a
killed confirmation resumes with the same command.

Synthetic runs (`synthetic:random-walk[:SEED]`): the run's walk is regenerated, cut at --start,
and continued by a fresh walk of a seed derived from the run's (never seen by the sweep).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tsflash import atomic, engine
from tsflash.config import ExperimentConfig, config_from_dict, read_run_config
from tsflash.data.store import Bars, iso, load_bars, to_us
from tsflash.data.synthetic import parse_source, random_walk_bars
from tsflash.errors import UserError
from tsflash.intervals import US_PER_DAY, bars_per_day
from tsflash.runfolder import RunFolder, baseline_series_name, decode_trial_key, read_json, write_json
from tsflash.scoring.daily import (
    baseline_losses,
    cell_arrays,
    cell_returns,
    daily_series,
    fold_losses,
    seed_portfolio,
    write_losses,
)
from tsflash.scoring.strategy import Strategy
from tsflash.sweep.run import cell_summary
from tsflash.sweep.source import configured_bar_count

log = logging.getLogger(__name__)

FOLD = 0  # the hold-out is the confirmation's one fold
TRAIN_PARAMS = ("lr", "weight_decay")  # searched hyper-parameters that go to run_fold's train_overrides


@dataclass(frozen=True)
class HoldOut:
    start: str  # first UTC day, inclusive
    end: str  # last UTC day, inclusive
    data: str  # the bar source: a store folder or synthetic:random-walk[:SEED]


@dataclass
class Setup:
    """Everything checked before anything is written."""

    run: RunFolder
    work: RunFolder  # <run>/confirm
    cfg: ExperimentConfig  # the run's resolved config, data range [data.start, hold-out end]
    run_range: tuple[str, str]  # the run's own data range
    hold: HoldOut
    bars: Bars
    source: dict
    fold: tuple[np.ndarray, np.ndarray]  # (train_idx, test_idx) of the hold-out fold
    candidates: list[dict]  # {"key", "params"} per completed trial, in ledger order
    ledger: dict  # the run's ledger.json (its trial count deflates the hold-out DSR)


def _day(iso_day: str) -> dt.date:
    return dt.date.fromisoformat(iso_day)


def _ranges(days: list[dt.date]) -> str:
    """[d1, d2, d3, d7] -> "d1..d3, d7" (consecutive days as one range)."""
    out, lo = [], None
    for i, d in enumerate(days):
        lo = d if lo is None else lo
        if i + 1 == len(days) or days[i + 1] != d + dt.timedelta(days=1):
            out.append(str(lo) if lo == d else f"{lo}..{d}")
            lo = None
    return ", ".join(out)


def missing_days(open_time: np.ndarray, first: str, last: str) -> list[dt.date]:
    """The UTC days of [first, last] on which `open_time` (int64 us) has no bar."""
    have = set((np.asarray(open_time, dtype=np.int64) // US_PER_DAY).tolist())
    n = (_day(last) - _day(first)).days + 1
    return [
        d for d in (_day(first) + dt.timedelta(days=i) for i in range(n)) if (d - dt.date(1970, 1, 1)).days not in have
    ]


def holdout_fold(
    open_time: np.ndarray, start_us: int, purge: int, train_bars: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, test_idx): the test block is every bar from `start_us` on (the data ends at the
    hold-out's end); training is every bar before it minus `purge` bars (`train_bars`: the last
    that many only, the rolling scheme), as `tsflash.dataset.splits.walk_forward_folds` builds a fold."""
    lo = int(np.searchsorted(open_time, start_us))
    train_end = max(lo - purge, 0)
    train_lo = 0 if train_bars is None else max(train_end - train_bars, 0)
    return np.arange(train_lo, train_end, dtype=np.int64), np.arange(lo, len(open_time), dtype=np.int64)


def _synthetic_bars(run_cfg: ExperimentConfig, source: dict, hold: HoldOut) -> Bars:
    """The run's walk, cut at the hold-out start, continued by a fresh walk up to its end."""
    d = run_cfg.data
    seed = int(source.get("seed") or 0)
    base = random_walk_bars(
        configured_bar_count(run_cfg), seed=seed, start=d.start, interval=d.interval, symbol=d.symbol
    )
    base = base.slice(0, int(np.searchsorted(base.open_time, to_us(hold.start))))
    step = base.interval_us
    first = to_us(hold.start)
    n_new = (to_us(hold.end, end=True) + 1 - first) // step
    fresh_seed = int(np.random.SeedSequence([seed, 13]).generate_state(1)[0])  # 13: this issue's salt
    more = random_walk_bars(
        int(n_new),
        seed=fresh_seed,
        start=hold.start,
        interval=d.interval,
        symbol=d.symbol,
        start_price=float(base.close[-1]),
        n_gaps=0,
    )
    cols = {
        f.name: np.concatenate([getattr(base, f.name), getattr(more, f.name)])
        for f in dataclasses.fields(Bars)
        if f.name not in ("symbol", "interval")
    }
    return Bars(**cols, symbol=d.symbol, interval=d.interval)


def _load_bars(run_cfg: ExperimentConfig, run_source: dict, hold: HoldOut) -> tuple[Bars, dict]:
    d = run_cfg.data
    syn = parse_source(hold.data)
    if syn is not None:
        seed = syn[1] if syn[1] is not None else run_source.get("seed", 0)
        src = {"kind": "synthetic", "source": f"synthetic:{syn[0]}:{seed}", "seed": seed}
        return _synthetic_bars(run_cfg, src, hold), src | {"note": "run's walk cut at the hold-out, then a fresh walk"}
    bars = load_bars(hold.data, d.symbol, d.interval, d.start, hold.end)
    after = (_day(d.end) + dt.timedelta(days=1)).isoformat()
    gone = missing_days(bars.open_time, after, hold.end)
    if gone:
        raise UserError(
            f"confirm --data {hold.data}: the store lacks {d.symbol} {d.interval} bars for "
            f"{len(gone)} day(s) of {after}..{hold.end}: {_ranges(gone)}; "
            "fetch or import them first (tsflash data fetch / tsflash data import)"
        )
    return bars, {"kind": "store", "source": str(hold.data)}


def _candidates(ledger: dict) -> list[dict]:
    """The run's completed trial keys with their parameters (the ledger's, else the key's)."""
    out, seen = [], set()
    for t in ledger.get("trials", []):
        key = t.get("key")
        if t.get("state") == "COMPLETE" and key and key not in seen:
            seen.add(key)
            out.append({"key": key, "params": dict(t.get("params") or decode_trial_key(key))})
    return out


def plan_confirm(run_dir: Path | str, start: str, end: str | None = None, data: str | None = None) -> Setup:
    """Check everything (UserError, one line, nothing written) and load the bars."""
    run = RunFolder(Path(run_dir))
    run.require_finished("confirm")
    if not run.ledger_json.exists() or not run.config_json.exists():
        raise UserError(f"confirm: {run.root} has no ledger.json/config.json; is it a finished `tsflash sweep` run?")
    run_cfg = read_run_config(run.root)
    meta, ledger = run.read_run(), read_json(run.ledger_json)
    run_source = read_json(run.data_json) if run.data_json.exists() else {}
    d = run_cfg.data
    if _day(start) <= _day(d.end):
        raise UserError(
            f"confirm --start {start} overlaps the run's data range {d.start}..{d.end}: "
            f"the hold-out must start after {d.end}"
        )
    data = data or meta.get("data") or run_source.get("source")
    if not data:
        raise UserError(
            f"confirm: {run.root} records no data source (run.json's data, data.json's source); "
            "name the bars with --data"
        )
    if end is None:
        end = (
            (_day(start) + dt.timedelta(days=run_cfg.splits.test_days - 1)).isoformat() if parse_source(data) else None
        )
    if end is not None and _day(end) < _day(start):
        raise UserError(f"confirm --end {end} is before --start {start}")
    if end is None:  # a store: up to its last full day
        tail = load_bars(data, d.symbol, d.interval, start, None)
        if len(tail) == 0:
            raise UserError(f"confirm --data {data}: the store has no {d.symbol} {d.interval} bars from {start} on")
        end = iso(int(tail.open_time[-1]))[:10]
    hold = HoldOut(start, end, str(data))
    bars, source = _load_bars(run_cfg, run_source, hold)
    cfg = config_from_dict(run_cfg.to_dict() | {"data": dataclasses.asdict(d) | {"end": end}})
    train_bars = cfg.splits.train_days * bars_per_day(bars.interval_us) if cfg.splits.scheme == "rolling" else None
    fold = holdout_fold(bars.open_time, to_us(start), cfg.purge, train_bars)
    h = cfg.labels.horizon
    if len(fold[1]) <= h:
        raise UserError(
            f"confirm --start {start} --end {end}: the hold-out has {len(fold[1])} bar(s), not more than "
            f"the label horizon ({h} bars): no bar of it has a label"
        )
    work = RunFolder(run.confirm_dir)
    if work.run_json.exists() and work.read_run().get("hold_out") != dataclasses.asdict(hold):
        raise UserError(
            f"confirm: {work.root} holds a confirmation of {work.read_run().get('hold_out')}; "
            "remove that folder to confirm another period"
        )
    cands = _candidates(ledger)
    if not cands:
        raise UserError(f"confirm: the ledger of {run.root} has no completed trial")
    return Setup(run, work, cfg, (d.start, d.end), hold, bars, source, fold, cands, ledger)


# ---------------------------------------------------------------------------------------------
# The cells


class _Cells:
    """Trains and saves the confirmation's cells in `work`; a saved cell is skipped."""

    def __init__(self, setup: Setup, device: str):
        self.setup, self.device, self.cfg, self.folder = setup, device, setup.cfg, setup.work
        self.fee = self.cfg.eval.fee_bps
        self.strategy = Strategy.from_config(self.cfg.to_dict())
        self.prepared = engine.prepare(self.cfg, setup.bars, device)
        self.prepared.folds = [setup.fold]  # the one hold-out fold, by dates (see the module doc)
        self._inputs: engine.FoldData | None = None

    def inputs(self) -> engine.FoldData:
        if self._inputs is None:
            self._inputs = engine.fold_data(self.prepared, FOLD)
        return self._inputs

    def baselines(self) -> list[str]:
        marker = self.folder.baseline_marker(FOLD)
        if not marker.exists():
            summaries = {}
            for name, res in engine.run_baselines(self.prepared, FOLD, fold_inputs=self.inputs()).items():
                stem = self.folder.baseline_stem(FOLD, name)
                res.save(stem)
                summaries[name] = cell_summary(
                    res,
                    self.folder,
                    self.strategy,
                    self.fee,
                    kind="baseline",
                    key=baseline_series_name(name),
                    name=name,
                    params={},
                    fold=FOLD,
                    seed=None,
                    stem=stem,
                )
            write_json(marker, {"fold": FOLD, "baselines": summaries})
            log.info("confirm: baselines done")
        return sorted(read_json(marker)["baselines"])

    def model(self, cand: dict, seed: int) -> None:
        key, params = cand["key"], cand["params"]
        marker = self.folder.cell_marker(key, FOLD, seed)
        if marker.exists():
            return
        stem = self.folder.cell_stem(key, FOLD, seed)
        over = {p: v for p, v in params.items() if p in TRAIN_PARAMS}
        res = engine.run_cell(
            self.prepared,
            int(params["n"]),
            FOLD,
            seed,
            self.device,
            checkpoint_dir=self.folder.checkpoint_dir(key, FOLD, seed),
            train_overrides=over or None,
            fold_inputs=self.inputs(),
        )
        res.save(stem)
        write_json(
            marker,
            cell_summary(
                res,
                self.folder,
                self.strategy,
                self.fee,
                kind="model",
                key=key,
                name=key,
                params=params,
                fold=FOLD,
                seed=seed,
                stem=stem,
            ),
        )
        log.info(
            "confirm: %s seed %d: log-loss %.4f on %d hold-out bars",
            key,
            seed,
            res.metrics["log_loss"],
            len(res.test_time),
        )


def _score(setup: Setup, baselines: list[str]) -> None:
    """Daily series and per-day loss sums of every candidate and baseline, from the saved cells
    (so a resumed confirmation scores exactly what an uninterrupted one does)."""
    work, cfg = setup.work, setup.cfg
    fee, strategy, seeds = cfg.eval.fee_bps, Strategy.from_config(cfg.to_dict()), cfg.train.seeds
    for cand in setup.candidates:
        key = cand["key"]
        stems = [work.cell_stem(key, FOLD, s) for s in seeds]
        work.write_series(key, **daily_series([seed_portfolio([cell_returns(st, fee, strategy) for st in stems])]))
        write_losses(work, key, fold_losses(key, FOLD, [cell_arrays(st) for st in stems], [f"seed{s}" for s in seeds]))
    for name in baselines:
        series = baseline_series_name(name)
        work.write_series(series, **daily_series([cell_returns(work.baseline_stem(FOLD, name), fee, strategy)]))
        write_losses(work, series, baseline_losses(work, name, 1))


def _write_provenance(setup: Setup, status: str) -> None:
    from tsflash.sweep.provenance import now_utc, write_data_json

    work = setup.work
    meta = work.read_run() if work.exists() else {"created": now_utc()}
    meta |= {
        "kind": "confirm",
        "status": status,
        "hold_out": dataclasses.asdict(setup.hold),
        "run": setup.run.root.name,
        "run_range": list(setup.run_range),
        "seeds": setup.cfg.train.seeds,
        "candidates": [c["key"] for c in setup.candidates],
    }
    write_json(work.run_json, meta)
    write_json(work.config_json, setup.cfg.stored())
    if not work.data_json.exists():
        write_data_json(work, setup.cfg, setup.bars, setup.source, [setup.fold], 0.0)


def run_cells(setup: Setup, device: str = "cpu") -> None:
    """Every cell of the confirmation (resumable), then the daily series and loss sums."""
    _write_provenance(setup, "running")
    cells = _Cells(setup, device)
    baselines = cells.baselines()
    for cand in setup.candidates:
        for seed in setup.cfg.train.seeds:
            cells.model(cand, seed)
    _score(setup, baselines)
    setup.work.tidy_checkpoints()
    _write_provenance(setup, "complete")


def confirm(
    run_dir: Path | str, start: str, end: str | None = None, data: str | None = None, device: str = "auto"
) -> tuple[Path, Path, Path]:
    """Plan, run (or resume) and report the confirmation; returns (confirm.md, .html, .json)."""
    from tsflash.device import resolve_device

    setup = plan_confirm(run_dir, start, end, data)
    dev = str(resolve_device(device))
    log.info(
        "confirm %s on %s..%s (%d hold-out bars, %d candidates x %d seeds) on %s",
        setup.run.root,
        setup.hold.start,
        setup.hold.end,
        len(setup.fold[1]),
        len(setup.candidates),
        len(setup.cfg.train.seeds),
        dev,
    )
    run_cells(setup, dev)
    return write_confirmation(setup)


# ---------------------------------------------------------------------------------------------
# The answers: the report's numbers and sections on the hold-out, against the original verdict


def original_verdict(run: RunFolder) -> dict:
    """The run's own answers: results.json's verdict and questions.json's forecasting answers, over
    training runs (`forecast_answer`, None where the run had none) and at the forecast level
    (`forecast_dm_answer`; a report from before the run-level rule kept only this one, as "answer")."""
    from tsflash.report.questions import RESULTS_FILE

    res = read_json(run.results_json) if run.results_json.exists() else {}
    q = read_json(run.root / RESULTS_FILE).get("forecast", {}) if (run.root / RESULTS_FILE).exists() else {}
    v = res.get("verdict", {})
    runs_rule = "dm_answer" in q  # written with question 1 over training runs
    return {
        "passed": bool(v.get("passed")),
        "selected": v.get("selected"),
        "dsr": v.get("dsr"),
        "pbo": v.get("pbo"),
        "n_trials": v.get("n_trials"),
        "sentence": res.get("verdict_sentence"),
        "forecast_answer": q.get("answer") if runs_rule else None,
        "forecast_dm_answer": q.get("dm_answer") if runs_rule else q.get("answer"),
        "forecast_sentence": q.get("sentence"),
    }


def forecast_level(orig: dict, fq) -> tuple[str, str | None, str | None]:
    """(level, the run's answer, the hold-out's answer) compared for question 1: over training runs
    when both have that answer, else at the forecast level (the seed ensembles' DM tests), so that
    like is compared with like; the hold-out is one fold, where the run-level test cannot run."""
    if fq.answer is not None and orig["forecast_answer"] is not None:
        return "over training runs", orig["forecast_answer"], fq.answer
    return "forecast level", orig["forecast_dm_answer"], fq.dm_answer


def verdict_holds(orig: dict, nums) -> dict:
    """Does the original verdict hold on the hold-out? Forecasting: the same answer at the same
    level (`forecast_level`). Trading: a passed verdict holds when its selected candidate's
    hold-out DSR (original trial count) clears min_dsr and its mean daily net return is positive;
    a failed one when the hold-out gates fail too."""
    v = nums.selection.verdict
    row = nums.candidate_row(orig["selected"]) or {}
    dsr, mean = row.get("dsr", float("nan")), row.get("mean", float("nan"))
    trading = bool(dsr >= v.min_dsr and mean > 0) if orig["passed"] else not v.passed
    level, before, after = forecast_level(orig, nums.forecast)
    forecast = None if before is None or after is None else before == after
    return {
        "forecast": forecast,
        "forecast_level": level,
        "trading": trading,
        "selected_dsr": dsr,
        "selected_psr": row.get("psr"),
        "selected_mean_daily_net": mean,
    }


def holds_sentences(orig: dict, holds: dict, nums, words: dict) -> list[str]:
    from tsflash.report.wording import fmt, label, pct_per_day

    def said(ok) -> str:
        return "cannot be compared" if ok is None else "holds" if ok else "does NOT hold"

    fq = nums.forecast
    level, before, after = forecast_level(orig, fq)
    if level == "over training runs":
        forecast = (
            f'Forecasting, over training runs: the run answered "{before}"; on the hold-out, "{after}". '
            f"The original answer {said(holds['forecast'])}."
        )
    else:
        why = fq.runs.reason or "the run has no answer over training runs"
        own = f' (the run answered "{orig["forecast_answer"]}" over training runs)' if orig["forecast_answer"] else ""
        forecast = (
            f"Forecasting, at the forecast level (the seed ensembles' Diebold-Mariano tests, the same rule; "
            f"the hold-out is not tested over training runs: {why}): the run's read \"{before or 'not recorded'}"
            f'"; the hold-out\'s, "{after or "no paired test"}". The forecast-level reading '
            f"{said(holds['forecast'])}; it says whether these ensembles' forecasts differ, not question 1's "
            f"answer{own}."
        )
    out = [forecast]
    n = nums.selection.n_trials
    if orig["passed"]:
        out.append(
            f"Trading: the run selected {label(orig['selected'])} (DSR {fmt(orig['dsr'], '.3f')}); on the "
            f"hold-out its DSR with the run's {n} trials is {fmt(holds['selected_dsr'], '.3f')} (PSR "
            f"{fmt(holds['selected_psr'], '.3f')}, mean daily net {pct_per_day(holds['selected_mean_daily_net'])})"
            f". The verdict {said(holds['trading'])}."
        )
    else:
        out.append(
            f"Trading: no candidate passed the run's gates; on the hold-out, with the run's {n} trials: "
            f"{words['sentence']} The verdict {said(holds['trading'])}."
        )
    return out


def _summary_table(setup: Setup, nums) -> dict:
    from tsflash.report.wording import plural

    tr, te = setup.fold
    t = setup.bars.open_time
    items = [
        ["run", setup.run.root.name],
        ["run's data range", "..".join(setup.run_range)],
        [
            "hold-out",
            f"{setup.hold.start}..{setup.hold.end} ({plural(len(te), 'bar')}, "
            f"{iso(int(t[te[0]]))} .. {iso(int(t[te[-1]]))})",
        ],
        [
            "retrained on",
            f"{iso(int(t[tr[0]]))} .. {iso(int(t[tr[-1]]))} ({plural(len(tr), 'bar')}, purge "
            f"{setup.cfg.purge} bars, validation fraction {setup.cfg.splits.val_fraction:g})",
        ],
        ["data", setup.source.get("source", setup.hold.data)],
        ["candidates", ", ".join(c["key"] for c in setup.candidates)],
        ["seeds", ", ".join(map(str, setup.cfg.train.seeds))],
        ["DSR trial count (the run's ledger)", str(nums.selection.n_trials)],
        ["fee", f"{setup.cfg.eval.fee_bps:g} bps per unit of turnover"],
    ]
    return {"header": ["item", "value"], "rows": items}


def write_confirmation(setup: Setup) -> tuple[Path, Path, Path]:
    """confirm.md, confirm.html and confirm.json in the run folder, from the work folder's cells."""
    from tsflash.atomic import json_safe as clean
    from tsflash.report.compute import compute
    from tsflash.report.context import selection_section
    from tsflash.report.outputs import selection_results
    from tsflash.report.questions import forecast_section, results, trading_section
    from tsflash.report.render import render
    from tsflash.report.rundata import load_run
    from tsflash.report.wording import sentences

    rd = load_run(setup.work.root)
    rd.ledger = setup.ledger  # the search happened in the run: its trial count and Sharpe variance
    nums = compute(rd)
    words = sentences(nums)
    orig = original_verdict(setup.run)
    holds = verdict_holds(orig, nums)
    said = holds_sentences(orig, holds, nums, words)
    context = {
        "title": f"Out-of-time confirmation of {setup.run.root.name}",
        "summary": _summary_table(setup, nums),
        "holds": said,
        "forecast": forecast_section(nums, words, None),
        "trading": trading_section(nums),
        "selection": selection_section(rd, nums, words, {}),
        "trading_sentence": words["sentence"],
    }
    run = setup.run
    atomic.write_text(run.confirm_md, render(context, "confirm.md.j2"))
    atomic.write_text(run.confirm_html, render(context, "confirm.html.j2"))
    atomic.write_json(
        run.confirm_json,
        clean(
            {
                "hold_out": dataclasses.asdict(setup.hold),
                "run_range": list(setup.run_range),
                "source": setup.source,
                "n_bars": int(len(setup.fold[1])),
                "candidates": setup.candidates,
                "original": orig,
                "holds": holds,
                "sentences": said,
                "questions": results(nums, words),
                "selection": selection_results(rd, nums, words["notes"]),
            }
        ),
    )
    log.info("confirmation written: %s", run.confirm_md)
    return run.confirm_md, run.confirm_html, run.confirm_json
