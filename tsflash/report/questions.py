"""The report's two-questions sections: their tables, sentences and files, from the numbers of
`tsflash.report.compute` (ForecastQuestion, TradingQuestion, the run's selection) and the
sentences of `tsflash.report.wording`. Each section opens with its lead sentence (at most 40
words), a small table (`lead_table`, `trading_lead_table`) and the figure; the rest follows.

Question 1 (forecasting) shows, beside the classification table: the tests over training runs,
the direction apart from volatility (each N's log-loss split into its flat-vs-move and up-vs-down
parts, the skill over the class prior and the share of it that is direction), and the paired tests
(Holm-adjusted) with their figure. Question 2 (trading) shows the trading rule per candidate
(turnover, gross and net returns, break-even fee) and the gates. The diagnostics (the nesting
check, the probe, the ranking, the power, an A/A replicate, what a "no" rules out, PBO under the
null) come from `tsflash.report.diagnostics`, each with its own sentences and table, in the order of
its list.

`write_outputs` writes the files of these sections beside the report: forecast_daily.parquet
(the per-day loss sums the paired tests read, small enough to commit with a published run),
questions.json (both answers as numbers) and figures/paired.png.
"""

from __future__ import annotations

import math
from pathlib import Path

from tsflash import atomic
from tsflash.report.compute import LOGREG, LOSS_FILE, Numbers, write_table
from tsflash.report.diagnostics import OWN, RUNS, TRADING, sections
from tsflash.report.markdown import table as _table
from tsflash.report.rundata import RunData
from tsflash.report.runlevel import runs_results
from tsflash.report.wording import (
    CROSSED_WORDS,
    SCORE_NAMES,
    bps,
    df_text,
    dm_sentence,
    fmt,
    forecast_sentence,
    label,
    pct_per_day,
    percent,
    plural,
    return_bps,
    run_sentence,
    signed,
    signs,
    trial_count_sentence,
)
from tsflash.runfolder import is_baseline
from tsflash.stats.sharpe import PERIODS_PER_YEAR

PAIRED_CAPTION = (
    "Question 1: per-bar loss differences of each N against the shortest N, the logistic baseline and the "
    "no-skill forecast (class prior)"
)
RESULTS_FILE = "questions.json"


def _name(key: str) -> str:
    return f"baseline: {label(key)}" if is_baseline(key) else label(key)


def decomposition_table(nums: Numbers) -> dict | None:
    rows = nums.forecast.decomposition
    if not rows:
        return None
    head = [
        "configuration (seed ensemble, pooled over folds' bars)",
        "log-loss",
        "flat-vs-move part",
        "up-vs-down part",
        "skill over prior",
        "of which direction",
        "direction share",
        "hit rate (bars that moved)",
        "direction score (bars that moved)",
        "bars that moved",
    ]
    body = [
        [
            _name(r["series"]),
            fmt(r["log_loss"]),
            fmt(r["move_part"]),
            fmt(r["direction_part"]),
            fmt(r["skill"]),
            fmt(r["skill_direction"]),
            percent(r["direction_share"], 1),
            fmt(r["hit_rate"]),
            fmt(r["direction_log_loss_moves"]),
            fmt(r["n_direction"]),
        ]
        for r in rows
    ]
    return _table(head, body)


def runs_table(nums: Numbers) -> dict | None:
    """Question 1 over training runs: each comparison of the answer's family, then the skill tests."""
    runs = nums.forecast.runs
    if not runs.available:
        return None
    res = runs.result
    assert res is not None  # available: the answer was computed
    head = [
        "comparison (over training runs: fold means of the runs)",
        "score",
        "family",
        "runs (A, B)",
        "mean difference per bar",
        "95 % interval",
        "t (df)",
        "p",
        "Holm p",
        "decides",
        "seed sd",
        "between-fold sd",
    ]
    body = []
    for family, comps in (("the answer", res.comparisons), ("skill (vs class prior)", tuple(res.skill.values()))):
        for p in comps:
            r = p.result
            c = r.components
            body.append(
                [
                    f"{label(p.series)} minus {_name(p.reference)}",
                    SCORE_NAMES[p.score],
                    family,
                    f"{r.n_runs_a}, {r.n_runs_b}",
                    signed(r.estimate),
                    f"[{signed(r.ci[0])}, {signed(r.ci[1])}]",
                    f"{fmt(r.t, '+.2f')} ({df_text(r.df)})",
                    fmt(r.p, ".3g"),
                    fmt(p.p_holm, ".3g"),
                    fmt(res.counts(p)) if family == "the answer" else "",
                    fmt(c.seed_sd, ".2g"),
                    fmt(math.sqrt(c.between_fold), ".2g"),
                ]
            )
    return _table(head, body)


def lead_table(nums: Numbers) -> dict | None:
    """The table under question 1's lead: each longer N against the shortest N over training runs
    (the answer's family), its difference per bar, 95 % interval, Holm p and runs."""
    runs = nums.forecast.runs
    if not runs.available:
        return None
    assert runs.result is not None and nums.forecast.shortest is not None  # available: compared with the shortest
    short = label(nums.forecast.shortest)
    head = [f"N against {short}", "score", "difference per bar", "95 % interval", "Holm p", f"runs (N, {short})"]
    body = [
        [
            f"{label(p.series)} − {short}",
            SCORE_NAMES[p.score],
            signed(p.result.estimate),
            f"[{signed(p.result.ci[0])}, {signed(p.result.ci[1])}]",
            fmt(p.p_holm, ".3g"),
            f"{p.result.n_runs_b}, {p.result.n_runs_a}",
        ]
        for p in runs.result.comparisons
    ]
    return _table(head, body)


def trading_lead_table(nums: Numbers) -> dict | None:
    """The table under question 2's lead: per candidate, its mean daily net return after fees, its
    net Sharpe ratio a year and its break-even fee."""
    rows = {r["series"]: r for r in nums.trading.rows}
    cands = nums.selection.candidates
    if not cands:
        return None
    head = ["configuration", f"mean daily net ({nums.trading.fee_bps:g} bps)", "net Sharpe/yr", "break-even fee"]
    body = [
        [
            label(c["key"]),
            pct_per_day(c["mean"]),
            fmt(c.get("sharpe_annual"), ".2f"),
            bps(rows[c["key"]]["break_even_fee_bps"]) if c["key"] in rows else "n/a",
        ]
        for c in cands
    ]
    return _table(head, body)


def paired_table(nums: Numbers) -> dict | None:
    comps = nums.forecast.comparisons
    if not comps:
        return None
    head = [
        "comparison (forecast level: seed ensembles, UTC days)",
        "score",
        "mean difference per bar",
        "95 % interval",
        "DM statistic",
        "p",
        "Holm p",
        "days (lag)",
        "sign per fold",
        "sign per seed",
    ]
    body = [
        [
            f"{label(p.series)} minus {_name(p.reference)}",
            SCORE_NAMES[p.score],
            signed(p.mean_diff),
            f"[{signed(p.lo)}, {signed(p.hi)}]",
            fmt(p.statistic, ".2f"),
            fmt(p.pvalue, ".3g"),
            fmt(p.p_holm, ".3g"),
            f"{fmt(p.n_days)} ({p.lag})",
            signs(p.fold_diffs),
            signs(p.seed_diffs.values()),
        ]
        for p in comps
    ]
    return _table(head, body)


def fold_level_table(nums: Numbers) -> dict | None:
    """Without per-bar forecasts: fold-mean log-loss differences and the confusion-matrix hit rate."""
    rows = nums.forecast.fold_level
    if not rows:
        return None
    refs = [ref for ref in (nums.forecast.shortest, LOGREG) if ref is not None and any(ref in r["diffs"] for r in rows)]
    head = [
        "configuration (cells pooled over folds and seeds)",
        "hit rate (forecast and outcome not flat, pooled confusion: a set that depends on the forecast)",
    ] + [f"log-loss minus {_name(ref)}, per fold" for ref in refs]
    body = [
        [_name(r["series"]), fmt(r["hit_rate"])]
        + [" ".join(signed(d, 2) for d in r["diffs"][ref]) if ref in r["diffs"] else "" for ref in refs]
        for r in rows
    ]
    return _table(head, body)


def forecast_section(nums: Numbers, words: dict, figure: dict | None) -> dict:
    """Question 1's section: its lead and lead table first, then the tests over training runs, the
    forecast-level tests, the baselines, the nesting check and the other diagnostics, each with its notes."""
    fq = nums.forecast
    baseline_notes = [
        "Direction apart from volatility: the log-loss of a bar that moved is -log(p_up + p_down) - log q, "
        "q the forecast's up-vs-down probability, and of a flat bar -log p_flat; the first part (flat-vs-move) "
        "is what a volatility forecast improves, the second (up-vs-down, ln 2 = 0.6931 for a coin flip) is "
        "direction. Skill is the class prior's log-loss minus the configuration's; the direction share is the "
        "part of that skill from the up-vs-down part. The volatility baseline is the logistic regression with "
        "the sign of every directional feature removed."
    ]
    runs_notes, paired_notes = [], []
    if fq.runs.available:
        runs_notes.append(
            "Over training runs (the answer): each run (fold, seed) is its mean loss per bar on the fold's "
            "test bars; per fold, the mean over seeds of N's runs minus the mean over seeds of the shortest "
            "N's; the test is the one-sample t of these fold differences (df = folds - 1), so its variance "
            "carries the seed-to-seed and run-to-run variation and the fold-to-fold variation of the benefit "
            "(`tsflash.stats.runs.run_level_test`)"
            + ("" if fq.runs.inference == "fold" else f"; here, by eval.seed_inference, {CROSSED_WORDS}")
            + ". Holm over the answer's comparisons; a significant "
            "difference decides only when its winner also beats the class prior over runs (the skill rows, "
            "their own Holm family). Seed sd: a run's spread about its N's fold mean; between-fold sd: what "
            "the fold differences spread beyond the seeds."
        )
    elif fq.available:
        runs_notes.append(
            f"Over training runs: {fq.runs.reason}; the forecast-level tests below do not answer question 1."
        )
    if fq.available:
        paired_notes.append(
            f"Paired tests at the forecast level ({fq.source}; they say whether these seed ensembles' "
            "forecasts differ on these days, not whether training at N forecasts better): the seed ensemble per N (mean of the seeds' probabilities), "
            "scored on the same test bars as its reference. Scores: the per-bar log-loss, and the direction "
            "score, the up-vs-down log-loss on every bar whose outcome moved. Diebold-Mariano on UTC-daily "
            "loss differences (their mean is the per-bar mean difference), Newey-West lag >= the horizon "
            "in days; 95 % interval mean ± 1.96 se; Holm-adjusted over all "
            f'{plural(len(fq.comparisons), "comparison")}. Signs per fold and per seed: "-" where the '
            "configuration has the lower loss."
        )
    else:
        paired_notes.append(
            f"No paired test: {fq.source}. The table shows what the cell summaries allow: each "
            "configuration's fold-mean log-loss minus the reference's, fold by fold (\"-\": lower loss), "
            "and the directional hit rate from the pooled confusion matrices; the up-vs-down split of the "
            "log-loss needs the per-bar forecasts."
        )
    within_runs = sections(nums, RUNS)  # diagnostics read beside the tests over training runs (ranking, power)
    return {
        "lead": words["forecast_lead"],
        "lead_table": lead_table(nums),
        "figure": figure,
        "runs_sentence": run_sentence(fq) if fq.available else "",
        "dm_sentence": dm_sentence(fq) if fq.available else forecast_sentence(fq),
        "runs": runs_table(nums),
        "runs_diagnostics": within_runs,
        "diagnostics": sections(nums, OWN),
        "paired": paired_table(nums),
        "decomposition": decomposition_table(nums),
        "fold_level": None if fq.available else fold_level_table(nums),
        "runs_notes": runs_notes,
        "paired_notes": paired_notes,
        "baseline_notes": baseline_notes,
        # tsflash confirm's page keeps the whole sentence and every note in one list
        "sentence": words["forecast"],
        "notes": baseline_notes + runs_notes + [n for d in within_runs for n in d["notes"]] + paired_notes,
    }


def trading_table(nums: Numbers) -> dict:
    head = [
        "series",
        "entry threshold",
        "turnover per bar",
        "mean gross per bar",
        "mean net per bar",
        "break-even fee",
        "gross Sharpe/yr",
        "net Sharpe/yr",
    ]
    ann = math.sqrt(PERIODS_PER_YEAR)
    body = []
    for r in nums.trading.rows:
        st = nums.series_stats.get(r["series"], {})
        taus = [t for t in r["thresholds"] if math.isfinite(t)]
        tau = (
            "n/a"
            if not taus
            else fmt(taus[0], ".3g")
            if min(taus) == max(taus)
            else f"{min(taus):.3g}..{max(taus):.3g}"
        )
        body.append(
            [
                _name(r["series"]),
                f"{tau} ({', '.join(r['sources']) or 'n/a'})",
                fmt(r["turnover"]),
                return_bps(r["mean_gross_return"]),
                return_bps(r["mean_net_return"]),
                bps(r["break_even_fee_bps"]),
                fmt(st.get("gross_sharpe", math.nan) * ann, ".2f"),
                fmt(st.get("sharpe_annual"), ".2f"),
            ]
        )
    return _table(head, body)


def trading_section(nums: Numbers) -> dict:
    tq, s = nums.trading, nums.selection
    intro = (
        f"Trading rule: {tq.strategy.describe()}; {tq.fee_bps:g} bps per unit of turnover, charged at scoring "
        "time. Per bar, pooled over folds (seeds as one equal-weight portfolio); the break-even fee is the fee "
        "at which the mean net return per bar is exactly 0 (negative: the rule loses before fees). "
        f"{plural(tq.n_profitable, 'candidate')} of {tq.n_candidates} "
        f"{'has' if tq.n_profitable == 1 else 'have'} a positive mean daily net return."
    )
    own = [t for t in (trial_count_sentence(s.trial_count),) if t]
    gates = sections(nums, TRADING)  # what a "no" rules out, PBO under the null
    return {
        "intro": intro,
        "table": trading_table(nums),
        "own_notes": own,
        "diagnostics": gates,
        "lead_table": trading_lead_table(nums),
        # tsflash confirm's page keeps every note in one list
        "notes": own + [n for d in gates for n in d["notes"]],
    }


def results(nums: Numbers, words: dict) -> dict:
    """questions.json: both answers as numbers and sentences."""
    fq, tq, s = nums.forecast, nums.trading, nums.selection
    d = s.deflation
    return {
        "forecast": {
            "answer": fq.answer,
            "mixed": fq.mixed,
            "available": fq.available,
            "source": fq.source,
            "sentence": words["forecast"],
            "lead": words["forecast_lead"],
            "shortest": fq.shortest,
            "runs": runs_results(fq.runs, nums.diagnostics["ranking"].information),
            "dm_answer": fq.dm_answer,
            "dm_mixed": fq.dm_mixed,
            "comparisons": [
                {k: getattr(p, k) for k in p.__dataclass_fields__} | {"counts": fq.counts(p)} for p in fq.comparisons
            ],
            "decomposition": fq.decomposition,
            "fold_level": fq.fold_level,
            "nesting": fq.nesting.to_dict(),
        },
        "trading": {
            "strategy": tq.strategy.kind,
            "horizon": tq.strategy.horizon,
            "threshold": tq.strategy.threshold,
            "fee_bps": tq.fee_bps,
            "n_candidates": tq.n_candidates,
            "n_profitable": tq.n_profitable,
            "none_profitable": tq.none_profitable,
            "passed": s.verdict.passed,
            "sentence": words["sentence"],
            "lead": words["trading_lead"],
            "rows": tq.rows,
            "n_trials": s.n_trials,
            "n_effective": d.effective.n_effective if d else None,
            "n_trials_effective": d.n_trials_effective if d else None,
            "dsr": s.verdict.dsr,
            "dsr_effective": d.dsr_effective.dsr if d else None,
            "min_sharpe_annual": (d.min_sharpe * math.sqrt(PERIODS_PER_YEAR))
            if d and d.min_sharpe is not None
            else None,
            "min_sharpe_effective_annual": (d.min_sharpe_effective * math.sqrt(PERIODS_PER_YEAR))
            if d and d.min_sharpe_effective is not None
            else None,
            "min_trl_days": d.min_trl if d else None,
            "n_trials_source": s.trial_count.source if s.trial_count else None,
            "trial_ledger": list(s.trial_count.entries) if s.trial_count else [],
            "pass_line_null_annual": _annual(d.min_sharpe_null if d else None),
            "power80_sharpe_annual": _annual(d.power_sharpe if d else None),
            "power80_sharpe_null_annual": _annual(d.power_sharpe_null if d else None),
            "pbo_null": nums.diagnostics["pbo_null"].summary,
        },
    }


def _annual(sr: float | None) -> float | None:
    return None if sr is None else sr * math.sqrt(PERIODS_PER_YEAR)


def write_outputs(rd: RunData, nums: Numbers, words: dict, out_dir: Path) -> dict | None:
    """forecast_daily.parquet (when the loss table came from the cells), questions.json and the
    paired figure; returns the figure entry of the context, or None."""
    from tsflash.atomic import json_safe as clean
    from tsflash.report.figures import plot_paired

    fq = nums.forecast
    if fq.table is not None and (fq.source != LOSS_FILE or Path(out_dir).resolve() != rd.run_dir.resolve()):
        write_table(fq.table, out_dir / LOSS_FILE)
    atomic.write_json(out_dir / RESULTS_FILE, clean(results(nums, words)))
    if not fq.comparisons:
        return None
    path = plot_paired(fq.comparisons, {c["key"]: c["n"] for c in rd.cells}, out_dir / "figures" / "paired.png")
    return {"src": path.relative_to(out_dir).as_posix(), "file": path, "caption": PAIRED_CAPTION}
