"""The report's numbers, computed once from a `RunData`: fold table, per-configuration summaries,
the run's selection (through `tsflash.stats.gate.select_run`, the one place the DSR and PBO of a
run are computed), the baselines' daily statistics and the two questions' numbers. No
formatting here.

The two questions, answered separately (the sentences are in wording.py, the sections in
questions.py):

Question 1, forecasting: does a longer context forecast the label better? The answer comes from
the test at the unit of the claim, training runs (`run_question`): each longer N against the
shortest on the log-loss and on the direction score, `tsflash.stats.runs.run_level_test` over the
(fold, seed) runs' mean losses (its variance carries the seed-to-seed and run-to-run variation),
Holm over those comparisons, and the rule `tsflash.stats.forecasts.run_answer`. With fewer than 2
seeds per fold it cannot run, and the report gives no answer. Secondary, worded as what it is
("these seed ensembles' forecasts differ on these days"): paired tests on the same test bars, for
each N against the shortest N and against the logistic baseline, a Diebold-Mariano test
(`tsflash.stats.forecasts.diebold_mariano`), Holm-adjusted across all comparisons (`forecasts.holm`).
The notes below are about these forecast-level tests.

- Forecasts: the seed ensemble per N (the mean of its seeds' probabilities for each bar): the
  question is about what N lets the model learn, not about one initialisation; each seed alone
  gives the per-seed signs.
- Scores: the 3-class log-loss of each labelled bar, and the direction score, the up-vs-down
  log-loss on every bar whose outcome moved (`tsflash.scoring.metrics.bar_losses`: a proper score on a
  bar set that depends on the outcome only, so both forecasts are scored on the same bars).
- The test runs on UTC days: each day's summed loss difference, divided by the mean number of
  scored bars per day, so that the mean of the daily values is exactly the per-bar mean
  difference. Days make the Newey-West variance robust to dependence much longer than the
  label's overlap (volatility clusters for hours); the lag is the larger of the horizon in days
  (rounded up: lag >= horizon) and Newey-West's rule floor(4 (T/100)^(2/9)) for T days. The 95 %
  interval is mean +- 1.96 se.
- Skill: every N is also compared with the no-skill forecast, the class prior of the fold's
  training bars (its direction part is the training up-vs-down frequency, within a hair of a coin
  flip). These comparisons are in the same Holm family.
- The forecast-level answer (`dm_answer`; the rule is `tsflash.stats.forecasts.forecast_answer`,
  the same rule the run-level answer reads) uses the comparisons with the shortest N, at Holm-adjusted 5 %, and counts a significant
  difference only when its winner (the lower loss) also beats the no-skill forecast
  significantly on that score: "better" when some longer N counts as significantly lower (if
  another counts as significantly higher, the answer is marked mixed), "worse" when some counts
  as higher and none as lower, "no better" otherwise. Why the skill condition: two forecasts
  without skill can differ truly and significantly in how far they stray from the no-skill
  forecast. On the full-size random walk (on a GPU), N=4096's direction loss was below N=512's with
  Holm p 0.009, because N=512 strayed further from 50/50; "less wrong than the shortest N" is not
  "forecasts better". Such differences are listed (`unskilled`) and the
  sentence names them, but they decide nothing.
- The per-day loss sums (`tsflash.scoring.daily.fold_losses`) are written by the sweep per trial and
  baseline (forecasts/*.npz, small: they survive where the per-bar cells are not kept), else
  computed from the per-bar cells (cells/**/*.npz); the report writes them beside itself as
  forecast_daily.parquet, and reads that file when neither is there. Without any, the report
  says the paired tests cannot be computed and shows the fold-level differences from the cell
  summaries instead.

The diagnostics (`tsflash.report.diagnostics`: the nesting check, the linear probe, the ranking
check, the power, an A/A replicate's reading) are computed after the two questions, in their
list's order, into `Numbers.diagnostics`. Question 1's answer reads the nesting check: a failed
check means the long models' training lost short-range skill, and the answer says so.

Question 2, trading: is any of it tradable after multiple testing? The candidates' daily net
returns under the run's trading rule (`tsflash.scoring.strategy`) go through the DSR and PBO gates
(`tsflash.stats.gate.select_run`); here, per candidate and baseline, the mean gross and net returns per
bar, the turnover and the break-even fee, pooled over folds from the cells' summaries (seeds as
one equal-weight portfolio, as the sweep scores them), and whether any candidate makes money.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.report.diagnostics import run_all
from tsflash.report.diagnostics.nesting import NestingCheck
from tsflash.report.diagnostics.power import POWER_SEEDS as POWER_SEEDS
from tsflash.report.rundata import RunData, seed_inference
from tsflash.report.runlevel import (  # question 1 over runs and its loss table, also read from here
    LOSS_FILE as LOSS_FILE,
)
from tsflash.report.runlevel import (
    PRIOR as PRIOR,
)
from tsflash.report.runlevel import (
    SCORES as SCORES,
)
from tsflash.report.runlevel import (
    RunQuestion as RunQuestion,
)
from tsflash.report.runlevel import (
    default_keys as default_keys,
)
from tsflash.report.runlevel import (
    load_losses as load_losses,
)
from tsflash.report.runlevel import (
    losses_from_cells as losses_from_cells,
)
from tsflash.report.runlevel import (
    losses_from_sweep as losses_from_sweep,
)
from tsflash.report.runlevel import (
    read_table as read_table,
)
from tsflash.report.runlevel import (
    run_question as run_question,
)
from tsflash.report.runlevel import (
    runs_results as runs_results,
)
from tsflash.report.runlevel import (
    write_table as write_table,
)
from tsflash.runfolder import baseline_series_name, is_baseline
from tsflash.scoring.daily import ENSEMBLE
from tsflash.scoring.metrics import hit_rate_from_confusion
from tsflash.scoring.strategy import Strategy
from tsflash.stats import SelectionInputError
from tsflash.stats.forecasts import (
    counts,
    diebold_mariano,
    forecast_answer,
    holm,
    significant,
)
from tsflash.stats.gate import RunSelection, TrialLedger, select_run
from tsflash.stats.pbo import CSCV_BLOCKS
from tsflash.stats.sharpe import PERIODS_PER_YEAR, sharpe

METRICS = (
    ("accuracy", "accuracy", "higher"),
    ("balanced_accuracy", "balanced accuracy", "higher"),
    ("log_loss", "log-loss (nats)", "lower"),
    ("mcc", "MCC", "higher"),
)
_SCORES = ("accuracy", "balanced_accuracy", "log_loss", "macro_f1", "mcc", "mean_net_return", "turnover")
# Direction apart from volatility (tsflash.scoring.metrics.direction_metrics); NaN in cells saved before them.
_DIRECTION = ("direction_hit_rate", "direction_log_loss", "move_log_loss", "direction_log_loss_moves")
_COST_MEANS = (
    "epoch_seconds",
    "train_seconds",
    "val_seconds",
    "eval_seconds",
    "tokens_per_s",
    "tflops",
    "peak_memory_bytes",
)
_COST_SUMMARY = tuple(m for m in _COST_MEANS if m != "eval_seconds")  # what a configuration's summary averages
_COST_FIRST = ("backend", "backend_observed", "n_params", "batch_size", "steps", "tokens_per_step", "device")
_DATES = ("train_start", "train_end", "test_start", "test_end")


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def fold_table(rd: RunData) -> list[dict]:
    """One row per (series, fold): metrics averaged over seeds, cost summed where additive."""
    rows = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c)
    for (key, fold), cs in sorted(groups.items(), key=lambda kv: (kv[1][0]["n"], kv[0])):
        row = {"series": key, "kind": "model", "n": cs[0]["n"], "fold": fold, "n_seeds": len(cs)}
        row |= {m: float(np.mean([_nan(c["metrics"].get(m)) for c in cs])) for m in (*_SCORES, *_DIRECTION)}
        row["n_scored"] = int(cs[0]["metrics"].get("n_scored", 0))
        row |= {m: float(np.mean([_nan(c["cost"].get(m)) for c in cs])) for m in _COST_MEANS}
        row |= {m: cs[0]["cost"].get(m) for m in _COST_FIRST}
        steps = [float(c["cost"]["steps"]) for c in cs if c["cost"].get("steps") is not None]
        row |= {
            "steps_mean": float(np.mean(steps)) if steps else math.nan,
            "steps_min": min(steps, default=math.nan),
            "steps_max": max(steps, default=math.nan),
        }
        row["flat_threshold"] = cs[0]["flat_threshold"]
        row |= {k: cs[0][k] for k in _DATES}
        rows.append(row)
    for c in sorted(rd.baselines, key=lambda c: (c["name"], c["fold"])):
        row = {
            "series": baseline_series_name(c["name"]),
            "kind": "baseline",
            "n": None,
            "fold": c["fold"],
            "n_seeds": 1,
        }
        row |= {m: _nan(c["metrics"].get(m)) for m in (*_SCORES, *_DIRECTION)}
        row["n_scored"] = int(c["metrics"].get("n_scored", 0))
        row |= {k: c[k] for k in _DATES}
        row["flat_threshold"] = c["flat_threshold"]
        rows.append(row)
    return rows


def summarize(rows: list[dict], series: str) -> dict:
    """Mean and fold-to-fold standard deviation (ddof=1; 0 with one fold) of each metric."""
    rs = [r for r in rows if r["series"] == series]
    out = {"series": series, "n": rs[0]["n"], "n_folds": len(rs)}
    for m, _, _ in METRICS:
        v = np.array([r[m] for r in rs], dtype=float)
        out[m] = float(np.mean(v))
        out[f"{m}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    if rs[0]["kind"] == "model":
        for m in _COST_SUMMARY:
            out[m] = float(np.nanmean([r[m] for r in rs])) if any(np.isfinite(r[m]) for r in rs) else float("nan")
        for m in _COST_FIRST:
            out[m] = rs[0][m]
        # steps trained per cell: the mean (folds have equal seed counts) and the range over every cell
        out["steps_mean"] = (
            float(np.nanmean([r["steps_mean"] for r in rs]))
            if any(math.isfinite(r["steps_mean"]) for r in rs)
            else math.nan
        )
        out["steps_min"] = (
            float(np.nanmin([r["steps_min"] for r in rs])) if math.isfinite(out["steps_mean"]) else math.nan
        )
        out["steps_max"] = (
            float(np.nanmax([r["steps_max"] for r in rs])) if math.isfinite(out["steps_mean"]) else math.nan
        )
    return out


def run_selection(rd: RunData) -> RunSelection:
    """The candidates (trials with daily series) against the study's ledger, through the gates."""
    cfg = rd.config["selection"]
    series = {k: (rd.series[k].days, rd.series[k].net) for k in rd.trial_keys}
    return select_run(
        series,
        rd.ledger.get("trials", []),
        min_dsr=cfg["min_dsr"],
        max_pbo=cfg["max_pbo"],
        n_blocks=int(cfg.get("cscv_blocks", CSCV_BLOCKS)),
        periods_per_year=PERIODS_PER_YEAR,
        ledger=TrialLedger.read(),
        fingerprint=(getattr(rd, "data", None) or {}).get("fingerprint", {}).get("sha256"),
        config_hash=(getattr(rd, "run", None) or {}).get("config_hash"),
    )


def _sharpe_or_nan(x) -> float:
    try:
        return float(sharpe(np.asarray(x, dtype=float)))
    except SelectionInputError:
        return math.nan


def series_stats(rd: RunData, name: str) -> dict:
    """Daily statistics of one saved series (a baseline's, or a candidate's before fees)."""
    s = rd.series[name]
    net = np.asarray(s.net, dtype=float)
    sr = _sharpe_or_nan(net)
    return {
        "n_days": len(net),
        "mean_daily_net": float(np.mean(net)),
        "total_net": float(np.prod(1 + net) - 1),
        "sharpe": sr,
        "sharpe_annual": sr * math.sqrt(PERIODS_PER_YEAR),
        "gross_sharpe": _sharpe_or_nan(s.gross),
    }


# ---------------------------------------------------------------------------------------------
# The two questions

LOGREG = baseline_series_name("logreg")
VOLATILITY = baseline_series_name("volatility")
_Z = NormalDist().inv_cdf(0.975)


# ---------------------------------------------------------------------------------------------
# Question 1: paired tests


@dataclass
class Paired:
    """One comparison: `series` minus `reference` on `score` (negative: series forecasts better)."""

    series: str
    reference: str
    score: str  # a key of SCORES
    mean_diff: float  # per bar
    se: float
    lo: float  # 95 % interval
    hi: float
    statistic: float
    pvalue: float
    lag: int  # Newey-West lag, in days
    n_days: int
    fold_diffs: list[float]  # per-bar mean difference within each fold
    seed_diffs: dict[str, float]  # per seed (the series' seed against the reference's same seed or the baseline)
    p_holm: float = math.nan

    @property
    def significant(self) -> bool:
        return significant(self.p_holm)


def paired_lag(horizon_bars: int, per_day: int, n_days: int) -> int:
    """Lag in days: >= the label horizon in days (rounded up) and >= floor(4 (T/100)^(2/9)), < T."""
    return max(0, min(n_days - 1, max(math.ceil(horizon_bars / per_day), math.floor(4 * (n_days / 100) ** (2 / 9)))))


def _select(table: dict, series: str, member: str) -> dict:
    m = (table["series"] == series) & (table["member"] == member)
    order = np.lexsort((table["fold"][m], table["day"][m]))
    return {k: v[m][order] for k, v in table.items()}


def _by_day(rows: dict, col: str) -> tuple[np.ndarray, np.ndarray]:
    """(days (D,), per-day sums of `col` over folds)."""
    days, inv = np.unique(rows["day"], return_inverse=True)
    return days, np.bincount(inv, weights=rows[col], minlength=len(days))


def _mean_diff(a: dict, b: dict, s_col: str, n_col: str, mask=None) -> float:
    mask = np.ones(len(a["day"]), bool) if mask is None else mask
    n = a[n_col][mask].sum()
    return float((a[s_col][mask].sum() - b[s_col][mask].sum()) / n) if n > 0 else math.nan


def paired(
    table: dict, series: str, reference: str, score: str, horizon: int, per_day: int, seeds: list[str]
) -> Paired | None:
    """The DM comparison of `series` against `reference` (seed ensembles) on `score`; None when
    either is missing from the table or they do not cover the same (fold, day) rows."""
    s_col, n_col = SCORES[score]
    a, b = _select(table, series, ENSEMBLE), _select(table, reference, ENSEMBLE)
    if (
        not len(a["day"])
        or len(a["day"]) != len(b["day"])
        or not (np.array_equal(a["day"], b["day"]) and np.array_equal(a["fold"], b["fold"]))
    ):
        return None
    days, n = _by_day(a, n_col)
    keep = n > 0
    scale = n[keep].mean()
    loss_a, loss_b = _by_day(a, s_col)[1][keep] / scale, _by_day(b, s_col)[1][keep] / scale
    if len(loss_a) < 2:
        return None
    lag = paired_lag(horizon, per_day, len(loss_a))
    dm = diebold_mariano(loss_a, loss_b, lag)
    folds = [_mean_diff(a, b, s_col, n_col, a["fold"] == f) for f in np.unique(a["fold"])]
    seed_diffs = {}
    for s in seeds:
        sa = _select(table, series, s)
        sb = _select(table, reference, ENSEMBLE if is_baseline(reference) else s)
        if len(sa["day"]) and len(sa["day"]) == len(sb["day"]):
            seed_diffs[s] = _mean_diff(sa, sb, s_col, n_col)
    return Paired(
        series,
        reference,
        score,
        dm.mean_diff,
        dm.se,
        dm.mean_diff - _Z * dm.se,
        dm.mean_diff + _Z * dm.se,
        dm.statistic,
        dm.pvalue,
        lag,
        len(loss_a),
        folds,
        seed_diffs,
    )


# ---------------------------------------------------------------------------------------------
# Question 1: direction apart from volatility, and what the summaries alone allow


def decomposition(table: dict, names: list[str]) -> list[dict]:
    """Per series (seed ensemble): the log-loss, its flat-vs-move and up-vs-down parts per labelled
    bar (log_loss = move + direction), the direction score and hit rate on the bars that moved (a
    set that does not depend on the forecast), and the skill over the class prior
    split into its volatility and direction parts (direction_share = direction / total skill)."""
    out = {}
    for name in names:
        r = _select(table, name, ENSEMBLE)
        if not len(r["day"]):
            continue
        n, moves, both = r["n_labelled"].sum(), r["n_moves"].sum(), r["n_both"].sum()
        out[name] = {
            "series": name,
            "log_loss": r["log_loss"].sum() / n,
            "move_part": r["move_loss"].sum() / n,
            "direction_part": r["direction_loss"].sum() / n,
            "direction_log_loss_moves": r["direction_loss"].sum() / moves if moves else math.nan,
            "direction_error_moves": r["direction_error"].sum() / moves if moves else math.nan,
            # on the bars whose realised move is up or down: the same bars for every forecast
            "hit_rate": 1 - r["direction_error"].sum() / moves if moves else math.nan,
            "n_direction": int(moves),
            # on the bars where forecast and outcome are both not flat (differs by forecast; kept for
            # comparison with earlier reports)
            "hit_rate_both": r["both_hits"].sum() / both if both else math.nan,
            "n_both": int(both),
        }
    prior = out.get(PRIOR)
    for row in out.values():
        if prior is None:
            row |= {"skill": math.nan, "skill_move": math.nan, "skill_direction": math.nan, "direction_share": math.nan}
            continue
        row["skill"] = prior["log_loss"] - row["log_loss"]
        row["skill_move"] = prior["move_part"] - row["move_part"]
        row["skill_direction"] = prior["direction_part"] - row["direction_part"]
        row["direction_share"] = row["skill_direction"] / row["skill"] if row["skill"] > 0 else math.nan
    return [out[n] for n in names if n in out]


def _fold_metric(rd: RunData, series: str, metric: str) -> dict[int, float]:
    """{fold: the metric averaged over seeds} from the cell summaries."""
    cells = [c for c in rd.cells if c["key"] == series] or [
        b for b in rd.baselines if baseline_series_name(b["name"]) == series
    ]
    folds: dict[int, list[float]] = {}
    for c in cells:
        v = c["metrics"].get(metric)
        folds.setdefault(c["fold"], []).append(math.nan if v is None else float(v))
    return {f: float(np.mean(v)) for f, v in sorted(folds.items())}


def fold_level(rd: RunData, names: list[str], references: list[str]) -> list[dict]:
    """What the summaries allow without per-bar forecasts: per series, the fold-mean log-loss
    difference to each reference fold by fold (descriptive: no paired test), and the directional
    hit rate from the pooled confusion matrices. The differences are over the folds every series
    and reference has, so that the k-th difference of each row is the same fold."""
    loss = {s: _fold_metric(rd, s, "log_loss") for s in dict.fromkeys([*names, *references])}
    present = [set(v) for v in loss.values() if v]
    common = sorted(set.intersection(*present)) if present else []
    rows = []
    for name in names:
        conf = np.zeros((3, 3))
        for c in [c for c in rd.cells if c["key"] == name] or [
            b for b in rd.baselines if baseline_series_name(b["name"]) == name
        ]:
            conf += np.asarray(c["metrics"].get("confusion", np.zeros((3, 3))), dtype=float)
        row: dict[str, Any] = {"series": name, "hit_rate": hit_rate_from_confusion(conf), "diffs": {}}
        mine = loss[name]
        for ref in references:
            theirs = loss[ref]
            if ref != name and theirs:
                row["diffs"][ref] = [mine[f] - theirs[f] for f in common] if mine else []
        rows.append(row)
    return rows


@dataclass
class ForecastQuestion:
    """Question 1's numbers: the answer over training runs (`runs`), the forecast-level paired
    comparisons (Holm-adjusted) and their answer, the direction and volatility decomposition, or
    why the tests could not be computed."""

    available: bool
    source: str  # "per-bar cells" or LOSS_FILE when available, else why not
    shortest: str | None  # the reference configuration (the shortest N)
    comparisons: list[Paired] = field(default_factory=list)
    runs: RunQuestion = field(default_factory=lambda: RunQuestion(False, "no per-day loss sums"))
    dm_answer: str | None = None  # the forecast-level rule on the ensembles' DM tests (secondary)
    dm_mixed: bool = False  # "better", and some other longer N counts as worse
    skill: dict[tuple[str, str], Paired] = field(default_factory=dict)  # (series, score) -> series minus the prior
    decomposition: list[dict] = field(default_factory=list)
    fold_level: list[dict] = field(default_factory=list)  # always (from the summaries)
    table: dict | None = field(default=None, repr=False)  # the loss table (written beside the report)
    nesting: NestingCheck = field(default_factory=NestingCheck)  # the nesting check, which the answer reads

    @property
    def answer(self) -> str | None:
        """Question 1's answer: the run-level one (None when it cannot be tested)."""
        return self.runs.answer

    @property
    def mixed(self) -> bool:
        return bool(self.runs.result and self.runs.result.mixed)

    def vs(self, reference: str | None) -> list[Paired]:
        return [p for p in self.comparisons if p.reference == reference]

    def counts(self, p: Paired) -> bool:
        """Does comparison `p` decide the answer (significant, and its winner has skill)?"""
        return counts(p, self.skill)

    @property
    def unskilled(self) -> list[Paired]:
        """Significant differences from the shortest N that do not count: the lower loss is no
        better than the no-skill forecast (on a random walk: the one that strays less from it)."""
        return [p for p in self.vs(self.shortest) if p.significant and not self.counts(p)]


def forecast_question(rd: RunData, primary: list[str]) -> ForecastQuestion:
    """Question 1 over the default configuration per N (`primary`, in order of N)."""
    shortest = primary[0] if primary else None
    baselines = [
        b for b in (LOGREG, VOLATILITY, PRIOR) if any(baseline_series_name(x["name"]) == b for x in rd.baselines)
    ]
    refs = [r for r in (shortest, LOGREG, PRIOR) if r and (not is_baseline(r) or r in baselines)]
    out = ForecastQuestion(
        False, "", shortest, fold_level=fold_level(rd, primary + baselines, [r for r in refs if r != PRIOR])
    )
    table, source = load_losses(rd)
    out.source = source
    if table is None or shortest is None:
        return out
    cfg = rd.config
    horizon = int(cfg["labels"]["horizon"])
    per_day = bars_per_day(INTERVAL_US[cfg["data"]["interval"]])
    seeds = [f"seed{s}" for s in cfg["train"]["seeds"]]
    comps = []
    for ref in refs:
        for name in primary:
            for score in SCORES:
                p = None if name == ref else paired(table, name, ref, score, horizon, per_day, seeds)
                comps += [p] if p is not None else []
    if comps:
        for p, adj in zip(comps, holm([p.pvalue for p in comps]), strict=True):
            p.p_holm = float(adj)
        out.skill = {(p.series, p.score): p for p in comps if p.reference == PRIOR}
        out.dm_answer, out.dm_mixed = forecast_answer([p for p in comps if p.reference == shortest], out.skill)
    out.available, out.comparisons, out.table = bool(comps), comps, table
    out.runs = run_question(table, primary, seed_inference(rd.config))
    out.decomposition = decomposition(table, primary + baselines)
    return out


# ---------------------------------------------------------------------------------------------
# Question 2: the trading rule per candidate


_PATH_FIELDS = ("mean_gross_return", "mean_net_return", "turnover")


def _cell_path(summary: dict, strategy: Strategy) -> dict | None:
    """A cell's path statistics under the run's rule: its "strategy" record, or for the one-bar
    rule of a cell saved before that record existed, its metrics."""
    rec = summary.get("strategy")
    if rec and rec.get("strategy") == strategy.kind:
        return rec
    if strategy.kind == "one-bar":
        m = summary["metrics"]
        return {k: m.get(k) for k in _PATH_FIELDS} | {
            "n_bars": m.get("n_bars", summary.get("n_bars")),
            "threshold": 0.0,
            "threshold_source": "one-bar",
        }
    return None


def path_stats(summaries: list[dict], strategy: Strategy) -> dict:
    """Per-bar means over folds (weighted by bars; seeds averaged within a fold, as one portfolio),
    the break-even fee (bps) and the thresholds used."""
    folds: dict[int, list[dict]] = {}
    for s in summaries:
        rec = _cell_path(s, strategy)
        if rec is None or any(rec.get(k) is None for k in _PATH_FIELDS):
            return {k: math.nan for k in (*_PATH_FIELDS, "break_even_fee_bps")} | {
                "n_bars": 0,
                "thresholds": [],
                "sources": [],
            }
        folds.setdefault(s["fold"], []).append(rec)
    n = np.array([recs[0]["n_bars"] for recs in folds.values()], dtype=float)
    means = {k: np.array([np.mean([r[k] for r in recs]) for recs in folds.values()]) for k in _PATH_FIELDS}
    out: dict[str, Any] = {k: float((v * n).sum() / n.sum()) for k, v in means.items()}
    out["n_bars"] = int(n.sum())
    out["break_even_fee_bps"] = 1e4 * out["mean_gross_return"] / out["turnover"] if out["turnover"] > 0 else math.nan
    recs = [r for rs in folds.values() for r in rs]
    out["thresholds"] = [float(r.get("threshold", math.nan)) for r in recs]
    out["sources"] = sorted({str(r.get("threshold_source")) for r in recs})
    return out


@dataclass
class TradingQuestion:
    """Question 2's numbers beyond the gates (which are `tsflash.stats.gate.RunSelection`)."""

    strategy: Strategy
    fee_bps: float
    rows: list[dict]  # per candidate then baseline: series, path_stats fields
    n_candidates: int
    n_profitable: int  # candidates whose mean daily net return is > 0

    @property
    def none_profitable(self) -> bool:
        return self.n_candidates > 0 and self.n_profitable == 0


def trading_question(rd: RunData, selection: RunSelection) -> TradingQuestion:
    strategy = Strategy.from_config(rd.config)
    rows = []
    for key in [r["key"] for r in selection.candidates]:
        rows.append({"series": key} | path_stats([c for c in rd.cells if c["key"] == key], strategy))
    for name in sorted({b["name"] for b in rd.baselines}):
        rows.append(
            {"series": baseline_series_name(name)}
            | path_stats([b for b in rd.baselines if b["name"] == name], strategy)
        )
    return TradingQuestion(
        strategy, float(rd.config["eval"]["fee_bps"]), rows, len(selection.candidates), selection.n_profitable
    )


# ---------------------------------------------------------------------------------------------
# Every number of the report


@dataclass
class Numbers:
    """Every number the report shows, computed once."""

    rows: list[dict]  # fold table
    per_n: list[dict]  # one summary per trial key, in order of N
    baselines: dict[str, dict]  # "baseline-<name>" -> summary
    primary: list[dict]  # the default configuration per N (the plots against N)
    selection: RunSelection
    series_stats: dict[str, dict]  # candidates' and baselines' daily statistics (gross Sharpe, ...)
    forecast: ForecastQuestion  # question 1: over training runs, and paired tests of the forecasts
    trading: TradingQuestion  # question 2: the trading rule per candidate (the gates are `selection`)
    diagnostics: dict[str, Any] = field(default_factory=dict)  # name -> numbers (tsflash.report.diagnostics)

    def candidate_row(self, key: str | None) -> dict | None:
        return next((r for r in self.selection.candidates if r["key"] == key), None)


def compute(rd: RunData) -> Numbers:
    """Every number of the run's report, once: the tables and the two questions, then every
    diagnostic of `tsflash.report.diagnostics.DIAGNOSTICS` in its order."""
    rows = fold_table(rd)
    keys = rd.trial_keys
    per_n = [summarize(rows, k) for k in keys]
    baselines = {baseline_series_name(b): summarize(rows, baseline_series_name(b)) for b in rd.baseline_names}
    defaults = set(default_keys(rd).values())
    primary = [s for s in per_n if s["series"] in defaults]
    stats = {k: series_stats(rd, k) for k in [*keys, *baselines] if k in rd.series}
    selection = run_selection(rd)
    forecast = forecast_question(rd, [s["series"] for s in primary])
    nums = Numbers(rows, per_n, baselines, primary, selection, stats, forecast, trading_question(rd, selection))
    run_all(rd, nums)
    forecast.nesting = nums.diagnostics["nesting"]  # question 1's answer says when the check fails
    return nums
