"""Question 1 over training runs and the per-day loss table it reads: `run_question` (each longer N
against the shortest, Holm over both scores, and the skill tests), its JSON (`runs_results`) and
`load_losses`. The power and the ranking check are their diagnostics' numbers
(`tsflash.report.diagnostics.power.with_power`, `tsflash.report.diagnostics.ranking.with_ranking`). Below `compute` so that a diagnostic (an A/A replicate reads
another run folder) can run question 1's test without the whole report's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tsflash.report.rundata import RunData
from tsflash.runfolder import RunFolder, baseline_series_name, read_parquet
from tsflash.scoring.daily import ENSEMBLE, cell_arrays, concat_losses, fold_losses, read_losses
from tsflash.scoring.metrics import DAILY_SUMS
from tsflash.stats.forecasts import ONE_SEED, RunAnswer, run_answer
from tsflash.stats.runs import (
    CrossedComponents,
    RankingCheck,
    Runs,
    RunTestInputError,
    run_level_test,
    runs_from_table,
)

LOSS_FILE = "forecast_daily.parquet"  # per (series, member, fold, day) loss sums, beside the report
PRIOR = baseline_series_name("prior")
# score -> (column of summed losses, column of the bar count it is averaged over)
SCORES = {"log_loss": ("log_loss", "n_labelled"), "direction": ("direction_loss", "n_moves")}

# ---------------------------------------------------------------------------------------------
# The per-day loss table: columns series, member, fold, day and tsflash.scoring.metrics.DAILY_SUMS


def losses_from_sweep(rd: RunData, names: list[str]) -> dict | None:
    """The loss tables the sweep wrote per trial and baseline (forecasts/*.npz); None when any is missing."""
    tables = [t for name in names if (t := read_losses(rd.folder, name)) is not None]
    return concat_losses(tables) if names and len(tables) == len(names) else None


def losses_from_cells(rd: RunData) -> dict | None:
    """The loss table of every configuration (each seed and the seed ensemble) and baseline, from
    the per-bar cells; None when any cell's .npz is missing."""
    folder, parts = rd.folder, []
    groups: dict[tuple[str, int], list[int]] = {}
    for c in rd.cells:
        groups.setdefault((c["key"], c["fold"]), []).append(c["seed"])
    stems = [folder.cell_stem(k, f, s) for (k, f), seeds in groups.items() for s in seeds]
    stems += [folder.baseline_stem(b["fold"], b["name"]) for b in rd.baselines]
    if not stems or not all(RunFolder.cell_npz(s).exists() for s in stems):
        return None
    for (key, fold), seeds in sorted(groups.items()):
        seeds = sorted(seeds)
        parts.append(
            fold_losses(
                key, fold, [cell_arrays(folder.cell_stem(key, fold, s)) for s in seeds], [f"seed{s}" for s in seeds]
            )
        )
    for b in rd.baselines:
        parts.append(
            fold_losses(
                baseline_series_name(b["name"]), b["fold"], [cell_arrays(folder.baseline_stem(b["fold"], b["name"]))]
            )
        )
    return concat_losses(parts)


def write_table(table: dict, path: Path) -> Path:
    """The loss table as Parquet (atomically), days as date32."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tsflash import atomic

    cols = {k: pa.array(table[k].tolist(), type=pa.string()) for k in ("series", "member")}
    cols |= {"fold": pa.array(table["fold"], type=pa.int64()), "day": pa.array(table["day"].astype("datetime64[D]"))}
    cols |= {k: pa.array(table[k], type=pa.float64()) for k in DAILY_SUMS}
    with atomic.atomic_path(path) as tmp:
        pq.write_table(pa.table(cols), tmp, write_page_checksum=True)  # a changed byte is then refused when read
    return path


def read_table(path: Path) -> dict | None:
    """The loss table `write_table` wrote, or None when `path` does not exist."""
    if not path.exists():
        return None
    t = read_parquet(path)
    out = {k: np.array(t.column(k).to_pylist(), dtype=object) for k in ("series", "member")}
    out["fold"] = t.column("fold").to_numpy().astype(np.int64)
    out["day"] = t.column("day").to_numpy().astype("datetime64[D]")
    return out | {k: t.column(k).to_numpy().astype(np.float64) for k in DAILY_SUMS}


def load_losses(rd: RunData) -> tuple[dict | None, str]:
    """(loss table or None, where it came from, or why it is missing): the sweep's per-trial loss
    files (forecasts/*.npz), else the per-bar cells, else LOSS_FILE beside the report."""
    names = [*rd.trial_keys, *sorted({baseline_series_name(b["name"]) for b in rd.baselines})]
    for table, source in (
        (lambda: losses_from_sweep(rd, names), "the sweep's per-day loss sums (forecasts/)"),
        (lambda: losses_from_cells(rd), "per-bar cells"),
        (lambda: read_table(rd.run_dir / LOSS_FILE), LOSS_FILE),
    ):
        found = table()
        if found is not None:
            return found, source
    return None, (
        f"this run folder has neither its per-day loss sums (forecasts/ or {LOSS_FILE}) nor its "
        "per-bar cells (cells/**/*.npz)"
    )


# ---------------------------------------------------------------------------------------------
# Question 1 over training runs: the answer


@dataclass
class RunQuestion:
    """Question 1 over training runs (`tsflash.stats.forecasts.run_answer`), or why it cannot be
    tested (`reason`). `power`, `seed_sd` and `between_sd` (per score) are filled by
    `tsflash.report.diagnostics.power.with_power`, `ranking` by
    `tsflash.report.diagnostics.ranking.with_ranking`."""

    available: bool
    reason: str = ""
    result: RunAnswer | None = None
    n_folds: int = 0
    seeds_per_fold: int = 0
    power: dict[str, dict[int, float]] = field(default_factory=dict)
    seed_sd: dict[str, float] = field(default_factory=dict)  # per score, pooled over the comparisons
    between_sd: dict[str, float] = field(default_factory=dict)
    inference: str = "fold"  # eval.seed_inference: the family's test (tsflash.stats.runs.run_level_test)
    ranking: RankingCheck | None = None  # each N against the next shorter one, log-loss (three lengths or more)
    # (longer N's key, score) -> the paired fold x seed table's components, where the family's test is crossed
    crossed: dict[tuple[str, str], CrossedComponents] = field(default_factory=dict)
    crossed_power: dict[str, dict[str, float]] = field(default_factory=dict)  # score -> key -> detectable (80 %)
    crossed_alpha: float | None = None  # the level crossed_power is at: Holm's first step over the family

    @property
    def answer(self) -> str | None:
        return self.result.answer if self.result else None


def _prior_runs(table: dict, score: str) -> Runs:
    """The no-skill forecast as one run per fold (it has no seeds: the skill tests admit one run)."""
    loss, count = SCORES[score]
    m = (table["series"] == PRIOR) & (table["member"] == ENSEMBLE)
    return Runs(
        PRIOR, table["fold"][m], np.zeros(int(m.sum()), np.int64), table["day"][m], table[loss][m], table[count][m]
    )


def run_question(table: dict, primary: list[str], inference: str = "fold") -> RunQuestion:
    """Each longer N against the shortest over training runs, on both scores (one Holm family),
    the skill tests against the class prior where the run has it. `inference`: the
    config's eval.seed_inference for the family (the skill tests stay the fold t: the prior has
    no seeds)."""
    if len(primary) < 2:
        return RunQuestion(False, "there is no longer context length to compare with the shortest")
    try:
        runs = {
            (n, sc): runs_from_table(table, n, loss=SCORES[sc][0], count=SCORES[sc][1])
            for n in primary
            for sc in SCORES
        }
    except RunTestInputError as exc:
        return RunQuestion(False, f"question 1 cannot be tested over training runs: {exc}")
    seeds = min(len(r.seeds_of(f)) for r in runs.values() for f in r.folds)
    folds = len(runs[(primary[0], "log_loss")].folds)
    if seeds < 2:
        return RunQuestion(False, ONE_SEED, n_folds=folds, seeds_per_fold=seeds)
    has_prior = bool(((table["series"] == PRIOR) & (table["member"] == ENSEMBLE)).any())
    try:
        vs_shortest = {
            (n, primary[0], sc): run_level_test(runs[(primary[0], sc)], runs[(n, sc)], seeds=inference)
            for n in primary[1:]
            for sc in SCORES
        }
        vs_prior = (
            {
                (n, PRIOR, sc): run_level_test(_prior_runs(table, sc), runs[(n, sc)], min_seeds_per_fold=1)
                for n in primary
                for sc in SCORES
            }
            if has_prior
            else {}
        )
    except RunTestInputError as exc:
        return RunQuestion(
            False, f"question 1 cannot be tested over training runs: {exc}", n_folds=folds, seeds_per_fold=seeds
        )
    crossed = {}
    if inference == "crossed":  # what the family's test detects is read from these (diagnostics.power)
        for n in primary[1:]:
            for sc in SCORES:
                try:
                    crossed[(n, sc)] = CrossedComponents.from_runs(runs[(primary[0], sc)], runs[(n, sc)])
                except RunTestInputError:  # seeds not shared by both lengths: no paired table
                    pass
    return RunQuestion(
        True,
        result=run_answer(vs_shortest, vs_prior),
        n_folds=folds,
        seeds_per_fold=seeds,
        inference=inference,
        crossed=crossed,
    )


def default_keys(rd: RunData) -> dict[int, str]:
    """N -> the trial key of the primary configuration at N: the enqueued default (slot "n<N>/0");
    trials searched with --trials appear as extra table rows, not in the plots against N."""
    enqueued = {t.get("key") for t in rd.ledger.get("trials", []) if str(t.get("slot", "")).endswith("/0")}
    keys = [k for k in rd.trial_keys if k in enqueued] or [k for k in rd.trial_keys if "-" not in k]
    return {n: k for k in keys if (n := rd.n_of(k)) is not None}  # every trial key has cells, so an N


def runs_results(runs, information: str | None = None) -> dict:
    """questions.json's run-level part: the answer, why none, each test and the power; `information`:
    the ranking check against the probe's order (`tsflash.report.diagnostics.ranking.information_order`)."""
    out = {
        "available": runs.available,
        "reason": runs.reason,
        "answer": runs.answer,
        "n_folds": runs.n_folds,
        "seeds_per_fold": runs.seeds_per_fold,
        "power_80": {sc: {str(k): v for k, v in m.items()} for sc, m in runs.power.items()},
        "crossed_power_80": runs.crossed_power,
        "crossed_alpha": runs.crossed_alpha,
        "seed_sd": runs.seed_sd,
        "between_fold_sd": runs.between_sd,
        "comparisons": [],
        "skill": [],
    }
    if runs.result is None:
        return out
    out["mixed"] = runs.result.mixed
    if (ranking := runs.ranking) is not None:
        out["ranking"] = {
            "verdict": ranking.verdict,
            "estimates_in_order": ranking.estimates_in_order,
            "information_order": information,
            "pairs": [
                {
                    "series": r.arm_b,
                    "reference": r.arm_a,
                    "estimate": r.estimate,
                    "ci": list(r.ci),
                    "p": r.p,
                    "p_holm": r.p_holm,
                    "verdict": r.verdict,
                }
                for r in ranking.pairs
            ],
        }
    for key, comps in (("comparisons", runs.result.comparisons), ("skill", runs.result.skill.values())):
        for p in comps:
            r = p.result
            out[key].append(
                {
                    "series": p.series,
                    "reference": p.reference,
                    "score": p.score,
                    "estimate": r.estimate,
                    "se": r.se,
                    "df": r.df,
                    "t": r.t,
                    "p": r.p,
                    "p_holm": p.p_holm,
                    "ci": list(r.ci),
                    "n_runs": [r.n_runs_a, r.n_runs_b],
                    "fold_differences": list(r.fold_differences),
                    "seed_sd": r.components.seed_sd,
                    "between_fold_var": r.components.between_fold,
                    "decides": runs.result.counts(p) if key == "comparisons" else None,
                }
            )
    return out
