"""The sweep's report: report.md, a self-contained report.html, results.json and Parquet tables.

`build_report(run_dir)` reads only what the sweep saved (run.json, config.json, data.json,
ledger.json, precision.json, cells/**/*.cell.json, series/*.npz) through
`tsflash.runfolder.RunFolder`, so `tsflash report RUN_DIR` rebuilds it without training, torch or
optuna. With `overrides` (scoring keys only, `rescore.RESCORE_KEYS`) it re-scores the run from
its saved per-bar positions and writes the re-scored report to another folder. Sections, in order:

    1. the questions and their answers (one lead sentence each, at most 40 words)
    2. setup            data source and range, bars, folds with dates, horizon, flat band, fees,
                        model, budget
    3. cost vs N        epoch time, tokens/s, peak memory, backend, TFLOP/s (table + plot)
    4. question 1       its lead, each longer N against the shortest over training runs (table),
                        the benefit figure; then, under their own headings, the tests over runs,
                        the forecast-level tests, the baselines, the nesting check, probe and A/A
    5. question 2       its lead, each candidate after fees (table), the equity curves; then the
                        trading rule per candidate and the selection gates (Sharpe, PSR, DSR, PBO)
    6. precision        the bf16-vs-float64 oracle at each N
    7. reproducibility  command, git commit, packages, device, seed, config hash, data fingerprint

Statistics are computed on DAILY net returns (see `tsflash.scoring.days.daily_returns` for why) by
`tsflash.stats.gate.select_run`, the one place a run's DSR and PBO are computed; Sharpe ratios
are per day and annualised with 365 (BTC trades every day). The candidates are the sweep's
completed trials; the DSR's trial count is the number of COMPLETE trials in the optuna study
(ledger.json, one per configuration slot), and its Sharpe variance is the sample variance of
their values (per-day Sharpe ratios; a trial whose daily returns are constant, i.e. that never
trades, enters with 0). PBO uses CSCV on the candidates' daily net returns aligned on their common
days; with fewer common days than `selection.cscv_blocks` the block count is reduced (and the
report says so).

Layout: rundata (loading), rescore (fees at scoring time), runlevel (question 1 over training runs
and its loss table), compute (numbers), diagnostics (one module per check: the nesting check, the
linear probe, the ranking check, the power, an A/A replicate; registered in one list),
registration (a pre-registered plan read back: a run's departures), wording (sentences and
units), figures, context (the one template context), render (jinja2), outputs (results.json,
Parquet).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

from tsflash.atomic import write_text as atomic_text
from tsflash.errors import UserError, file_error
from tsflash.report.compute import compute, run_selection
from tsflash.report.context import SECTIONS, build_context, caveats, memory_kind, smoke_line, with_caveats
from tsflash.report.figures import draw
from tsflash.report.outputs import write_all
from tsflash.report.registration import ArmResolver
from tsflash.report.render import render
from tsflash.report.rescore import RESCORE_KEYS, check_overrides, default_out_dir, rescore, rescores_cells
from tsflash.report.rundata import RunData, load_run
from tsflash.report.wording import label, sentences
from tsflash.runfolder import RunFolder

__all__ = ["SECTIONS", "RESCORE_KEYS", "RunData", "build_report", "label", "load_run", "run_selection"]

log = logging.getLogger(__name__)


def _out_dir(rd: RunData, overrides: dict | None, out_dir: Path | None) -> Path:
    if out_dir is not None and RunFolder(out_dir).run_json.exists() and Path(out_dir).resolve() != rd.run_dir.resolve():
        # a folder with a run.json is a run's own folder (a published one, perhaps): --out never writes there
        raise UserError(
            f"report --out {out_dir}: that folder holds a run (run.json), whose report --out never "
            "overwrites; give a new folder, or leave --out out to rebuild a run's report in place"
        )
    if not overrides:
        return Path(out_dir) if out_dir is not None else rd.run_dir
    overrides = check_overrides(overrides)
    out = Path(out_dir) if out_dir is not None else default_out_dir(rd.run_dir, overrides)
    if out.resolve() == rd.run_dir.resolve():
        raise UserError(
            f"report --out {out}: a re-scored report never overwrites the run's own report; give another folder"
        )
    return out


def check_writable(folder: Path) -> None:
    """UserError (one line, `file_error`) unless files can be created in `folder`; a folder made
    for this check is removed again (a later refusal then leaves nothing)."""
    folder = Path(folder)
    top = folder  # the topmost folder this check creates, removed again below
    while not top.parent.exists():
        top = top.parent
    made = top if not top.exists() else None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        if (error := file_error(exc)) is None:
            raise
        raise UserError(f"report: cannot write the report into {folder}: {error}") from None
    finally:
        if made is not None and made.is_dir():
            shutil.rmtree(made, ignore_errors=True)


def build_report(
    run_dir: Path | str,
    *,
    overrides: dict | None = None,
    out_dir: Path | None = None,
    resolve: ArmResolver | None = None,
) -> tuple[Path, Path]:
    """Write report.md, report.html, results.json, fold_metrics.parquet, daily_returns.parquet and
    figures/*.png; returns (report.md, report.html).

    Without `overrides` the run's report is rebuilt from its saved results, in `run_dir` (or
    `out_dir`). With overrides such as {"eval.fee_bps": 2} every candidate and baseline is
    re-scored from the per-bar cell files (UserError when they are missing, or for a key that
    needs retraining) and the report goes to `out_dir`, default `<run>/rescored/fee-<x>bps/`,
    with the re-scored daily series under its series/. `resolve`: how a pre-registered plan's
    amendment resolves a control it adds (`tsflash.sweep.preregister.resolved_arm`), needed only for
    such a control's run.
    """
    t0 = time.perf_counter()
    rd = load_run(run_dir)
    # the statistics (bootstraps, CSCV, the null replicates) and figures take a while on a long run
    log.info("writing the report of %s: %d cells, %d daily series", rd.run_dir, len(rd.cells), len(rd.series))
    out = _out_dir(rd, overrides, out_dir)
    check_writable(out)  # before the figures and numbers are computed, not after
    if overrides:
        rd = rescore(rd, overrides)
        assert rd.rescored_from is not None  # rescore sets it
        if rescores_cells(rd.rescored_from["overrides"]):  # new daily series; else the run's stand
            target = RunFolder(out)
            for name, s in rd.series.items():
                target.write_series(name, s.days, s.net, s.gross)
    nums = compute(rd)
    words = with_caveats(sentences(nums), caveats(rd, nums), smoke_line(rd, nums))  # what the run cannot support leads
    figures = draw(rd, nums, out / "figures", memory_kind(nums.per_n))
    context = build_context(rd, nums, words, figures, out, resolve)
    write_all(rd, nums, words, out)
    md, html = RunFolder(out).report_md, RunFolder(out).report_html
    atomic_text(md, render(context, "report.md.j2"))
    atomic_text(html, render(context, "report.html.j2"))
    log.info("report written in %.1f s: %s", time.perf_counter() - t0, md)
    return md, html
