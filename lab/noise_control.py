"""The noise control at the two-questions protocol: on seeded random walks, `tsflash sweep` must
answer "no" to both questions (issue 11, item 8; first written for issue 6).

Runs the sweep CLI (`python -m tsflash.cli sweep`, one process at a time) on
`--data synthetic:random-walk:SEED` for SEED = 0 .. K-1, once per seed at the first fee setting.
The CPU arm (the default) uses a small, fast configuration (`--preset cpu` plus `--set`
overrides); the full-size arm (`--full`, on a GPU) runs the default protocol unchanged. The
other fee settings (default 5 bps, then 0 bps) re-score the same trained run from its saved
cells (`tsflash.report.build_report(run, overrides={"eval.fee_bps": fee})`): fees never change
what is trained, so no seed is trained twice. It reads each setting's results.json and
questions.json and writes

    <out>/summary.json   every run's answers and the rates (machine-readable)
    <out>/summary.md     the same as tables, with the rules, the nominal rates and the bounds

(<out> = reports/noise-control by default.) The bars are a driftless random walk, so nothing is
predictable by construction:

- Question 1 (forecasting, paired Diebold-Mariano tests of each N against the shortest N,
  Holm-adjusted at 5 %; fee-independent, so counted once per seed). The walk's SIGN is
  unpredictable, but the SIZE of its moves is partly forecastable (its volatility clusters,
  tsflash.data.synthetic), so the log-loss can truly differ between N (a model that learned the
  volatility less well is truly worse). Two counts: a run answering "better" (the "yes" that the
  control must not give), and the clean false positive, a run in which some longer N differs
  from the shortest N on the direction score (up-vs-down log-loss) at Holm 5 %: no context can
  hold information about the sign, so Holm's family-wise error rate bounds this at 5 %.
- Question 2 (trading): passing the DSR gate is a false positive at a nominal rate of about
  1 - min_dsr = 5 %, and passing both gates at most that often. At 5 bps every strategy loses to
  fees, so that setting fails trivially; 0 bps is the setting that tests the gates.

Each false-positive rate is stated with its exact 95 % (Clopper-Pearson) interval, whose upper
end is the bound this many runs can give: with 0 of K false positives, 1 - 0.025^(1/K).

Each sweep writes its run folder under a scratch folder (a temporary one, removed at the end,
unless --workdir is given; a --workdir keeps the run folders and a rerun reuses the finished
ones and resumes unfinished ones), and each re-scored setting a folder `rescored/fee-<x>bps`
inside it. The statistics come from scipy.stats: the Wilson and Clopper-Pearson intervals
(`binomtest(...).proportion_ci`), the binomial tail (`binomtest(..., alternative="greater")`)
and the t statistic (`ttest_1samp`).

    python lab/noise_control.py                     # CPU arm: K = 10 seeds x {5, 0} bps
    python lab/noise_control.py --seeds 8 --fees 0  # 8 seeds at 0 bps only
    python lab/noise_control.py --workdir /tmp/nc --set train.steps=24

The full-size arm on the H200 (`FULL_SIZE_COMMAND`; resumable: run it again until it writes the
summary; each invocation stops starting trials after --time-budget seconds):

    python lab/noise_control.py --full --seeds 1 --device cuda --fees 5,0 \
        --lengths 512,4096,32768 --time-budget 420 --workdir runs/noise-full \
        --out reports/controls/random-walk
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

log = logging.getLogger("noise_control")

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash, the one the sweeps run (`python -m` from REPO)
DEFAULT_OUT = Path("reports") / "noise-control"  # relative to the repository root
FULL_SIZE_COMMAND = ("python lab/noise_control.py --full --seeds 1 --device cuda --fees 5,0 "
                     "--lengths 512,4096,32768 --time-budget 420 --workdir runs/noise-full "
                     "--out reports/controls/random-walk")

# The small CPU configuration: ~20 s per sweep on one CPU thread. `--preset cpu` first, then these.
DEFAULT_LENGTHS = "32,64,128,256"
DEFAULT_START, DEFAULT_END = "2024-01-01", "2024-05-31"  # 152 days of 1-minute bars
DEFAULT_OVERRIDES = [
    "splits.n_folds=2",
    "splits.test_days=40",  # 2 x 40 = 80 out-of-sample days (>= 64) for the daily CSCV with 16 blocks
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "train.steps=12",
    "train.tokens_per_step=8192",
    "train.warmup_steps=2",
    "eval.baseline_lags=2",  # the logistic baseline is reported, not gated: keep it cheap
]

GATE_RULE = (
    "The sweep selects the candidate (context length N) with the highest daily net Sharpe ratio "
    "(first on ties). passes_dsr: its Deflated Sharpe Ratio DSR = PSR(SR0) >= min_dsr, where PSR "
    "is the probabilistic Sharpe ratio of its daily net returns (skew and kurtosis adjusted) and "
    "SR0 the expected maximum Sharpe ratio of n_trials skill-less trials with the sample variance "
    "of the study's trial Sharpe ratios (Bailey & Lopez de Prado 2014). passes_pbo: the "
    "Probability of Backtest Overfitting by CSCV over the candidates' daily net returns "
    "(16 contiguous blocks) is <= max_pbo. passed: both. A run whose gates cannot be evaluated "
    "(e.g. fewer than 2 candidates with a defined Sharpe ratio) counts as not passing."
)
NOMINAL_NOTE = (
    "Nominal rates under the null (no skill): the DSR gate is a one-sided test at level "
    "1 - min_dsr (5% for min_dsr = 0.95) once selection among n_trials is deflated; passing both "
    "gates can only be rarer than passing the DSR gate. The PBO gate has no fixed nominal rate: on "
    "noise PBO scatters around 0.5 (biased upward by CSCV's symmetric splits), so PBO <= 0.5 alone "
    "passes noise up to about half of the time; it is a guard against overfit selection, not a test "
    "of size 5%. A pass rate clearly above the nominal 5% (see the binomial tail p-value) would mean "
    "the gate, or the pipeline (leakage), lets noise through. With fees, candidates that all lose can "
    "still rank stably (by turnover, i.e. fee drag), so PBO can be low on noise; the DSR gate (a Sharpe "
    "ratio confidently above SR0 >= 0) is what rejects them."
)


# ---------------------------------------------------------------------------------------------
# Reading runs and summarising (pure functions: tests/lab/test_noise_control.py checks them)


def _num(x) -> float | None:
    """A finite float, or None (NaN, missing)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def question_fields(questions: dict | None) -> dict:
    """The two answers from a run's questions.json (tsflash.report.questions); None where absent."""
    q1 = (questions or {}).get("forecast") or {}
    q2 = (questions or {}).get("trading") or {}
    shortest = q1.get("shortest")
    vs = [c for c in q1.get("comparisons") or [] if c.get("reference") == shortest]
    direction = [c for c in vs if c.get("score") == "direction"]
    significant = [c for c in direction if (_num(c.get("p_holm")) or 1.0) <= 0.05]
    holm = [_num(c.get("p_holm")) for c in vs]
    return {
        "q1_available": bool(q1.get("available", False)),
        "q1_answer": q1.get("answer"),
        "q1_min_holm_p": min((p for p in holm if p is not None), default=None),
        # a difference counts when its winner also beats the no-skill forecast (tsflash.report.compute);
        # files written before that rule have no "counts": every significant difference counted then
        "q1_direction_differs": any(c.get("counts", True) for c in significant),
        "q1_direction_differs_unskilled": sum(not c.get("counts", True) for c in significant),
        "q2_strategy": q2.get("strategy"),
        "q2_none_profitable": q2.get("none_profitable"),
        "q2_n_profitable": q2.get("n_profitable"),
        "q2_n_effective": _num(q2.get("n_effective")),
        "q2_dsr_effective": _num(q2.get("dsr_effective")),
        "q2_min_sharpe_annual": _num(q2.get("min_sharpe_annual")),
    }


def row_from_results(results: dict, fee_bps: float, seed: int, questions: dict | None = None) -> dict:
    """One summary row from a run's results.json and questions.json (tsflash.report): the gates'
    verdict, the selected candidate and the two questions' answers."""
    v = results.get("verdict") or {}
    sel = results.get("selection") or {}
    cands = sel.get("candidates") or []
    chosen: dict = next((c for c in cands if c.get("key") == v.get("selected")), {})
    pbo = sel.get("pbo") or {}
    return {
        "fee_bps": float(fee_bps),
        "seed": int(seed),
        "ok": True,
        "selected": v.get("selected"),
        "selected_label": v.get("selected_label"),
        "sharpe": _num(chosen.get("sharpe")),
        "sharpe_annual": _num(chosen.get("sharpe_annual")),
        "total_net": _num(chosen.get("total_net")),
        "dsr": _num(v.get("dsr")),
        "sr0": _num(chosen.get("sr0")),
        "pbo": _num(v.get("pbo")),
        "pbo_blocks": pbo.get("n_blocks"),
        "passes_dsr": bool(v.get("passes_dsr", False)),
        "passes_pbo": bool(v.get("passes_pbo", False)),
        "passed": bool(v.get("passed", False)),
        "n_trials": sel.get("n_trials"),
        "n_days": sel.get("n_days"),
        "min_dsr": _num(v.get("min_dsr", sel.get("min_dsr"))),
        "max_pbo": _num(v.get("max_pbo", sel.get("max_pbo"))),
        "candidate_sharpes": {c.get("key"): _num(c.get("sharpe")) for c in cands},
        "reasons": list(v.get("reasons") or []),
    } | question_fields(questions)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k / n ((0, 1) when n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how surprising k passes are at the nominal rate p."""
    if k <= 0:
        return 1.0
    return float(stats.binomtest(k, n, p, alternative="greater").pvalue)


def exact_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a binomial proportion k / n ((0, 1) when n = 0); its
    upper end is the false-positive bound that n runs give."""
    if n <= 0:
        return 0.0, 1.0
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def false_positives(k: int, n: int, nominal: float | None, what: str) -> dict:
    """A false-positive rate with its exact 95 % interval and the bound it gives."""
    lo, hi = exact_interval(k, n)
    out = {"what": what, "false_positives": k, "runs": n, "rate": (k / n) if n else None,
           "exact95": [lo, hi], "bound95": hi, "nominal": nominal}
    if nominal is not None and n:
        out["p_value_at_nominal"] = binom_tail(k, n, nominal)
    return out


def question_rates(rows: list[dict], alpha: float = 0.05) -> dict:
    """The two questions' false positives over the finished runs: question 1 once per seed (it
    does not depend on the fee), question 2 per fee setting (a pass of both gates)."""
    ok = [r for r in rows if r.get("ok")]
    per_seed: dict[int, dict] = {}
    for r in ok:
        if r.get("q1_available"):
            per_seed.setdefault(r["seed"], r)
    q1 = list(per_seed.values())
    out = {"forecast": false_positives(sum(r.get("q1_answer") == "better" for r in q1), len(q1), alpha,
                                       'question 1 answers "better" (paired tests against the shortest N, Holm 5 %)'),
           "direction": false_positives(sum(bool(r.get("q1_direction_differs")) for r in q1), len(q1), alpha,
                                        "a longer N differs from the shortest N on the direction score (Holm 5 %, "
                                        "the lower loss beating the no-skill forecast)")}
    out["direction"]["unskilled"] = sum(int(r.get("q1_direction_differs_unskilled") or 0) > 0 for r in q1)
    out["forecast"]["not_tested"] = len({r["seed"] for r in ok}) - len(q1)
    out["forecast"]["answers"] = {a: sum(r.get("q1_answer") == a for r in q1) for a in ("better", "no better", "worse")}
    out["trading"] = {}
    for fee in sorted({float(r["fee_bps"]) for r in ok}, reverse=True):
        rs = [r for r in ok if float(r["fee_bps"]) == fee]
        out["trading"][f"{fee:g}"] = false_positives(sum(r["passed"] for r in rs), len(rs), alpha,
                                                     f"question 2 passes both gates at {fee:g} bps") | {
            "none_profitable": sum(bool(r.get("q2_none_profitable")) for r in rs)}
    return out


def t_statistic(xs: list[float]) -> float | None:
    """One-sample t statistic against mean 0; None with fewer than 2 values or no spread."""
    if len(xs) < 2 or max(xs) == min(xs):
        return None
    return float(stats.ttest_1samp(xs, 0.0).statistic)


def _rate(k: int, n: int, nominal: float | None) -> dict:
    lo, hi = wilson_interval(k, n)
    out = {"passes": k, "runs": n, "rate": (k / n) if n else None, "wilson95": [lo, hi], "nominal": nominal}
    if nominal is not None and n:
        out["p_value_at_nominal"] = binom_tail(k, n, nominal)  # one-sided: P(>= k passes | nominal rate)
    return out


def summarize(rows: list[dict], min_dsr: float = 0.95, max_pbo: float = 0.5) -> dict:
    """Pass rates per fee setting from summary rows (`row_from_results`, or {"ok": False, ...} for a failed run).

    Rates count only runs that finished (ok); failed runs are listed. Nominal: the DSR gate 1 - min_dsr,
    both gates the same upper bound, the PBO gate none (see NOMINAL_NOTE).
    """
    nominal_dsr = round(1.0 - min_dsr, 10)
    by_fee: dict[str, dict] = {}
    for fee in sorted({float(r["fee_bps"]) for r in rows}, reverse=True):
        rs = sorted((r for r in rows if float(r["fee_bps"]) == fee), key=lambda r: r["seed"])
        ok = [r for r in rs if r.get("ok")]
        n = len(ok)
        # Diagnostic for leakage: on noise every candidate's daily Sharpe has mean 0 (unlike the
        # selected one's, biased upward by the selection). Mean and t over all candidates of all seeds.
        all_sr = [s for r in ok for s in (r.get("candidate_sharpes") or {}).values() if s is not None]
        per_seed_means = [statistics.fmean(v) for r in ok
                          if (v := [x for x in (r.get("candidate_sharpes") or {}).values() if x is not None])]
        by_fee[f"{fee:g}"] = {
            "fee_bps": fee,
            "seeds": [r["seed"] for r in rs],
            "runs_ok": n,
            "runs_failed": [r["seed"] for r in rs if not r.get("ok")],
            "dsr": _rate(sum(r["passes_dsr"] for r in ok), n, nominal_dsr),
            "pbo": _rate(sum(r["passes_pbo"] for r in ok), n, None),
            "both": _rate(sum(r["passed"] for r in ok), n, nominal_dsr),
            "mean_selected_sharpe": (sum(r["sharpe"] for r in ok if r["sharpe"] is not None)
                                     / max(1, sum(r["sharpe"] is not None for r in ok))) if ok else None,
            "mean_candidate_sharpe": statistics.fmean(all_sr) if all_sr else None,
            "sd_candidate_sharpe": statistics.stdev(all_sr) if len(all_sr) >= 2 else None,
            "t_mean_candidate_sharpe_over_seeds": t_statistic(per_seed_means),
            "median_pbo": _median([r["pbo"] for r in ok if r["pbo"] is not None]),
            "median_dsr": _median([r["dsr"] for r in ok if r["dsr"] is not None]),
        }
    total_ok = sum(v["runs_ok"] for v in by_fee.values())
    return {
        "min_dsr": min_dsr,
        "max_pbo": max_pbo,
        "gate_rule": GATE_RULE,
        "nominal_note": NOMINAL_NOTE,
        "runs": total_ok,
        "by_fee": by_fee,
        "questions": question_rates(rows),
        "rows": sorted(rows, key=lambda r: (-float(r["fee_bps"]), r["seed"])),
    }


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _f(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _pct(rate: dict) -> str:
    if not rate["runs"]:
        return "n/a"
    lo, hi = rate["wilson95"]
    return f"{rate['passes']}/{rate['runs']} = {rate['rate']:.0%} [{lo:.0%}, {hi:.0%}]"


def _bound(fp: dict) -> str:
    if not fp["runs"]:
        return f"{fp['what']}: no run to count."
    lo, hi = fp["exact95"]
    return (f"{fp['what']}: {fp['false_positives']} of {fp['runs']} runs, rate {fp['rate']:.0%}, exact 95 % interval "
            f"[{lo:.1%}, {hi:.1%}]: the false-positive rate at this size is at most {hi:.1%} (95 % confidence; "
            f"nominal {fp['nominal']:.0%}).")


def question_lines(summary: dict) -> list[str]:
    """The two questions' answers and their false-positive bounds, as Markdown lines."""
    q = summary.get("questions")
    if not q:
        return []
    f = q["forecast"]
    answers = ", ".join(f"{v} {k!r}" for k, v in f.get("answers", {}).items())
    lines = ["## The two questions", "", "Question 1 (forecasting): " + _bound(f) + f" Answers: {answers}.",
             "", "Question 1, the direction alone: " + _bound(q["direction"])
             + " The sign of a random walk cannot be forecast, so this is the clean false positive; the log-loss "
               "can truly differ between N through the volatility part, which the walk makes partly forecastable "
               "(a \"worse\" answer there is a real difference in training, not a false positive)."]
    if q["direction"].get("unskilled"):
        lines[-1] += (f" In {q['direction']['unskilled']} run(s) a direction difference was significant but its lower "
                      "loss did not beat the no-skill forecast (two forecasts without skill, one straying less from "
                      "50/50): listed by the report, not counted as an answer.")
    if f.get("not_tested"):
        lines[1] += f" ({f['not_tested']} run(s) without paired tests are not counted.)"
    for fee in q["trading"].values():
        lines += ["", "Question 2 (trading): " + _bound(fee)
                  + f" In {fee['none_profitable']} of {fee['runs']} runs no candidate made money after fees."]
    lines += ["", "| fee (bps) | seed | question 1 answer | direction differs | smallest Holm p vs the shortest N "
              "| question 2: gates | none profitable | effective trials | smallest passing Sharpe/yr |",
              "|---|---|---|---|---|---|---|---|---|"]
    yn = {True: "yes", False: "no"}
    for r in summary["rows"]:
        if r.get("ok"):
            lines.append(f"| {r['fee_bps']:g} | {r['seed']} | {r.get('q1_answer') or 'not tested'} "
                         f"| {yn[bool(r.get('q1_direction_differs'))]} "
                         f"| {_f(r.get('q1_min_holm_p'))} | {'pass' if r['passed'] else 'fail'} "
                         f"| {r.get('q2_none_profitable')} | {_f(r.get('q2_n_effective'), '.2f')} "
                         f"| {_f(r.get('q2_min_sharpe_annual'), '.2f')} |")
    return lines + [""]


def render_markdown(summary: dict, meta: dict | None = None) -> str:
    """summary.md: pass-rate table, per-run table, the gate rule, nominal rates and how it was run."""
    meta = meta or {}
    lines = ["# Noise control: the sweep on seeded random walks", ""]
    lines += ["The bars are a seeded random walk (`--data synthetic:random-walk:SEED`): the sign of future "
              "returns is unpredictable by construction, so the sweep must not pass the selection gates more "
              "often than their nominal rate.", ""]
    lines += ["## Pass rates", "",
              f"Gates: DSR >= {summary['min_dsr']:g}, PBO <= {summary['max_pbo']:g}. Rates with 95% Wilson "
              "intervals; p = P(at least that many passes | nominal rate), binomial.", "",
              "| fee (bps) | runs | passes DSR | passes PBO | passes both | nominal (DSR, both) | p (DSR) | p (both) "
              "| median DSR | median PBO | mean Sharpe, all candidates (t over seeds) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for fee in summary["by_fee"].values():
        d, b = fee["dsr"], fee["both"]
        lines.append(
            f"| {fee['fee_bps']:g} | {fee['runs_ok']}"
            + (f" ({len(fee['runs_failed'])} failed)" if fee["runs_failed"] else "")
            + f" | {_pct(d)} | {_pct(fee['pbo'])} | {_pct(b)} | <= {d['nominal']:.0%} "
            f"| {_f(d.get('p_value_at_nominal'))} | {_f(b.get('p_value_at_nominal'))} "
            f"| {_f(fee['median_dsr'])} | {_f(fee['median_pbo'])} "
            f"| {_f(fee['mean_candidate_sharpe'], '.4f')} ({_f(fee['t_mean_candidate_sharpe_over_seeds'], '.2f')}) |"
        )
    lines += ["", "## Every run", "",
              "| fee (bps) | seed | selected | daily Sharpe | DSR | PBO | DSR gate | PBO gate | both |",
              "|---|---|---|---|---|---|---|---|---|"]
    yn = {True: "pass", False: "fail"}
    for r in summary["rows"]:
        if not r.get("ok"):
            lines.append(f"| {r['fee_bps']:g} | {r['seed']} | run failed: {r.get('error', '?')} | | | | | | |")
            continue
        lines.append(f"| {r['fee_bps']:g} | {r['seed']} | {r.get('selected_label') or r.get('selected')} "
                     f"| {_f(r['sharpe'], '.4f')} | {_f(r['dsr'])} | {_f(r['pbo'])} "
                     f"| {yn[r['passes_dsr']]} | {yn[r['passes_pbo']]} | {yn[r['passed']]} |")
    lines += ["", *question_lines(summary)]
    lines += ["", "## The rule", "", summary["gate_rule"], "", summary["nominal_note"], "",
              "The last column of the first table is a leakage check: every candidate's daily net Sharpe "
              "ratio has mean 0 on noise (the selected one's does not: it is the maximum of several), so a "
              "mean clearly away from 0 (|t| well above 2 over seeds) would point at leakage or a bias in "
              "the pipeline even when the gates hold.", ""]
    if meta:
        lines += ["## How it was run", ""]
        if meta.get("command"):
            lines += ["```", meta["command"], "```", ""]
        if meta.get("sweep_command"):
            lines += ["Each sweep (SEED filled in), trained once per seed:", "", "```", meta["sweep_command"], "```", ""]
        if meta.get("full_size_command") and not str(meta.get("arm", "")).startswith("full"):
            lines += ["The full-size arm (the default protocol on a GPU; resumable, run it until it writes its "
                      "summary):", "", "```", meta["full_size_command"], "```", ""]
        if meta.get("rescored_fees_bps"):
            fees = ", ".join(f"{f:g}" for f in meta["rescored_fees_bps"])
            lines += [f"The other fee settings ({fees} bps) re-score each seed's run from its saved per-bar "
                      "positions (`tsflash.report.build_report(run, overrides={\"eval.fee_bps\": FEE})`), "
                      "without retraining.", ""]
        items = []
        for key, text in (("started", "started (UTC)"), ("runtime_s", "runtime (s)"),
                          ("mean_sweep_s", "mean time per sweep (s)"), ("git_commit", "git commit"),
                          ("machine", "machine"), ("reused_seeds", "seeds whose finished runs were reused from the "
                                                      "work folder, reports rebuilt, not retrained (runtime is the re-scoring)")):
            if meta.get(key) is not None:
                val = meta[key]
                val = ", ".join(map(str, val)) if isinstance(val, list) else val
                items.append(f"- {text}: {val:.0f}" if isinstance(val, float) else f"- {text}: {val}")
        lines += items + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Running the sweeps


def sweep_argv(seed: int, fee_bps: float, run_dir: Path, args) -> list[str]:
    """The sweep command of one seed: the CPU arm's small configuration, or with --full the default
    protocol at full size (its preset, data range and lengths as given)."""
    full = getattr(args, "full", False)
    argv = [sys.executable, "-m", "tsflash.cli", "sweep", "--preset", "full" if full else "cpu",
            "--device", args.device, "--data", f"synthetic:random-walk:{seed}", "--lengths", args.lengths,
            "--out", str(run_dir), "--no-precision"]
    if not full:
        argv += ["--start", args.start, "--end", args.end]
    if getattr(args, "time_budget", None):
        argv += ["--time-budget", f"{args.time_budget:g}"]
    for item in [*([] if full else DEFAULT_OVERRIDES), *args.overrides, f"eval.fee_bps={fee_bps:g}"]:
        argv += ["--set", item]
    return argv


def _is_finished(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def train_one(seed: int, fee_bps: float, workdir: Path, args) -> tuple[Path, str | None, bool]:
    """Run (or reuse) one seed's sweep at `fee_bps`; returns (run folder, error or None, reused: a
    finished run taken from the work folder, its report rebuilt with this code's rules)."""
    run_dir = workdir / f"seed{seed}"
    if _is_finished(run_dir) and (run_dir / "results.json").exists():
        from tsflash.report import build_report

        log.info("seed %d: reusing the finished run %s (its report rebuilt with this code's rules)", seed, run_dir)
        build_report(run_dir)
        return run_dir, None, True
    argv = sweep_argv(seed, fee_bps, run_dir, args)
    run_dir.mkdir(parents=True, exist_ok=True)
    log.info("seed %d: %s", seed, shlex.join(argv[1:]))
    # One thread: on a small shared CPU, torch's thread pool under contention is many times slower.
    env = dict(os.environ)
    if args.threads > 0:
        env |= {var: str(args.threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    with open(run_dir / "noise-control-stdout.txt", "w") as fh:
        proc = subprocess.run(argv, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode == 0 and not _is_finished(run_dir):
        log.warning("seed %d: the sweep stopped at --time-budget before finishing; run the same command again", seed)
        return run_dir, "unfinished (time budget): run the same command again to resume", False
    if proc.returncode != 0 or not (run_dir / "results.json").exists():
        tail = (run_dir / "noise-control-stdout.txt").read_text().splitlines()[-5:]
        log.error("seed %d: sweep failed (exit %d): %s", seed, proc.returncode, " | ".join(tail))
        return run_dir, f"exit {proc.returncode}: {tail[-1] if tail else ''}"[:200], False
    return run_dir, None, False


def score_one(run_dir: Path, seed: int, fee_bps: float, run_fee_bps: float) -> dict:
    """The summary row of one seed at one fee: the run's own results, or a re-scoring of its cells."""
    if fee_bps == run_fee_bps:
        results_path = run_dir / "results.json"
    else:
        from tsflash.report import build_report

        results_path = build_report(run_dir, overrides={"eval.fee_bps": fee_bps})[0].parent / "results.json"
    results = json.loads(results_path.read_text())
    questions_path = results_path.parent / "questions.json"
    questions = json.loads(questions_path.read_text()) if questions_path.exists() else None
    row = row_from_results(results, fee_bps, seed, questions)
    row["git_commit"] = (results.get("reproducibility") or {}).get("git_commit")
    log.info("fee %g bps, seed %d: selected %s, daily Sharpe %s, DSR %s, PBO %s -> %s", fee_bps, seed,
             row["selected_label"], _f(row["sharpe"], ".4f"), _f(row["dsr"]), _f(row["pbo"]),
             "PASS" if row["passed"] else "fail")
    return row


def run_all(seeds: list[int], fees: list[float], workdir: Path, args) -> tuple[list[dict], list[float]]:
    """Every (fee, seed) row and the seconds of each sweep trained here (one per seed, at fees[0];
    a finished run reused from the work folder has no row in the seconds)."""
    rows, secs = [], []
    for seed in seeds:
        t0 = time.monotonic()
        run_dir, error, reused = train_one(seed, fees[0], workdir, args)
        if not reused:
            secs.append(time.monotonic() - t0)
        for fee in fees:
            if error:
                rows.append({"fee_bps": float(fee), "seed": seed, "ok": False, "error": error})
                continue
            t1 = time.monotonic()
            row = score_one(run_dir, seed, fee, fees[0])
            row["seconds"] = (time.monotonic() - t1) + (secs[-1] if fee == fees[0] and not reused else 0.0)
            row["reused"] = reused
            rows.append(row)
    return rows, secs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--seeds", type=int, default=10, help="number of synthetic seeds K: seeds 0..K-1 (default 10)")
    p.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--fees", default="5,0",
                   help="comma-separated fee settings in bps; the sweep trains at the first, the others re-score it "
                        "(default 5,0)")
    p.add_argument("--lengths", default=DEFAULT_LENGTHS, help=f"context lengths (default {DEFAULT_LENGTHS})")
    p.add_argument("--start", default=DEFAULT_START, help=f"first day of the synthetic range (default {DEFAULT_START})")
    p.add_argument("--end", default=DEFAULT_END, help=f"last day, inclusive (default {DEFAULT_END})")
    p.add_argument("--device", default="cpu", help="sweep device (default cpu)")
    p.add_argument("--threads", type=int, default=1,
                   help="OMP/MKL threads of each sweep process; 0 leaves the environment alone (default 1)")
    p.add_argument("--full", action="store_true",
                   help="the full-size arm: the default protocol and data range (--preset full, no CPU overrides); "
                        "for a GPU")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="passed to each sweep: start no new trial after this many seconds (resume by rerunning)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="extra sweep config override, after the built-in ones (repeatable)")
    p.add_argument("--workdir", type=Path, help="keep run folders here (default: a temporary folder, removed at the end)")
    p.add_argument("--out", type=Path, default=None,
                   help="summary folder (default: reports/noise-control in the repository)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _meta(argv: list[str] | None, args, fees: list[float], seeds: list[int], started: str, runtime: float,
          secs: list[float], rows: list[dict]) -> dict:
    words = list(sys.argv[1:] if argv is None else argv)
    if "--workdir" in words:  # a scratch location: it changes no result, and names this machine
        i = words.index("--workdir")
        del words[i:i + 2]
    words = [w for w in words if not w.startswith("--workdir=")]
    # Two names: the sweep's argv (a list) and the command line shown (a str).
    template_argv = sweep_argv(0, fees[0], Path("WORKDIR/seedSEED"), args)
    template = shlex.join(["python", *template_argv[1:]]).replace("synthetic:random-walk:0",
                                                                  "synthetic:random-walk:SEED")
    return {
        "command": "python lab/noise_control.py" + (" " + shlex.join(words) if words else ""),
        "sweep_command": template,
        "rescored_fees_bps": fees[1:],
        "started": started,
        "runtime_s": runtime,
        "mean_sweep_s": statistics.fmean(secs) if secs else None,
        "reused_seeds": sorted({r["seed"] for r in rows if r.get("reused")}) or None,
        "seeds": seeds,
        "fees_bps": fees,
        "lengths": args.lengths,
        "range": None if args.full else [args.start, args.end],
        "arm": "full size (default protocol)" if args.full else "CPU (small configuration)",
        "full_size_command": FULL_SIZE_COMMAND,
        "overrides": [*([] if args.full else DEFAULT_OVERRIDES), *args.overrides],
        "git_commit": next((r.get("git_commit") for r in rows if r.get("ok") and r.get("git_commit")), None),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical cores, {args.threads or 'default'} thread(s) per sweep",
    }


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    fees = list(dict.fromkeys(float(x) for x in args.fees.split(",") if x.strip()))
    if not fees:
        p.error("--fees needs at least one fee setting")
    out_dir = args.out if args.out is not None else REPO / DEFAULT_OUT
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    temp = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="tsflash-noise-")) if temp else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        rows, secs = run_all(seeds, fees, workdir, args)
    finally:
        if temp:
            shutil.rmtree(workdir, ignore_errors=True)
    unfinished = sorted(r["seed"] for r in rows if str(r.get("error", "")).startswith("unfinished"))
    if unfinished:  # a resumable full-size arm: keep the last summary until every seed has finished
        log.warning("seed(s) %s unfinished (time budget): run the same command again; no summary written", unfinished)
        return 3
    ok = [r for r in rows if r.get("ok")]
    summary = summarize(rows, min_dsr=next((r["min_dsr"] for r in ok if r.get("min_dsr") is not None), 0.95),
                        max_pbo=next((r["max_pbo"] for r in ok if r.get("max_pbo") is not None), 0.5))
    summary["meta"] = meta = _meta(argv, args, fees, seeds, started, time.monotonic() - t0, secs, rows)
    from tsflash import atomic

    atomic.write_text(out_dir / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    atomic.write_text(out_dir / "summary.md", render_markdown(summary, meta))
    for fee in summary["by_fee"].values():
        log.info("fee %g bps: DSR %s, PBO %s, both %s", fee["fee_bps"], _pct(fee["dsr"]), _pct(fee["pbo"]), _pct(fee["both"]))
    log.info("%s", _bound(summary["questions"]["forecast"]))
    log.info("%s", _bound(summary["questions"]["direction"]))
    log.info("wrote %s and %s in %.0f s", out_dir / "summary.json", out_dir / "summary.md", meta["runtime_s"])
    return 1 if any(not r.get("ok") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
