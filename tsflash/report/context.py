"""The one context both templates render: every section's sentences and tables, formatted once.

A table is {"header": [str], "rows": [[str]]}; a figure is {"src": path relative to the report,
"file": Path, "caption": str}. The Markdown and the HTML template lay out the same context, so
they show the same words and numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from tsflash.config import REDUCED_PRESET, SMOKE, recipe_words, reduced_note
from tsflash.data.synthetic import control_note
from tsflash.intervals import bars_as_time, interval_words
from tsflash.report import protocol
from tsflash.report.compute import METRICS, Numbers
from tsflash.report.figures import CAPTIONS
from tsflash.report.markdown import table as _table
from tsflash.report.questions import forecast_section, trading_section, write_outputs
from tsflash.report.registration import ArmResolver, deviations_sentence, plan_for
from tsflash.report.rescore import rescores_cells
from tsflash.report.rundata import RunData, seed_inference
from tsflash.report.wording import (
    NOT_EVIDENCE,
    bars_and_time,
    data_source,
    fmt,
    label,
    linear_fit,
    not_evidence_lead,
    pct_per_day,
    percent,
    plural,
    pm,
    support_sentences,
    timed_label,
    too_short_line,
)
from tsflash.scoring.strategy import Strategy

SECTIONS = (
    "The two questions and the answers",
    "Setup",
    "Cost against N",
    "Question 1: does a longer context forecast better?",
    "Question 2: is any of it tradable after fees and multiple testing?",
    "Precision",
    protocol.HEADING,
    "Reproducibility",
)


def memory_kind(per_n: list[dict]) -> str:
    """What the peak-memory figures measure, from the devices the cells ran on."""
    cuda = {str(s.get("device") or "").startswith("cuda") for s in per_n}
    return {frozenset({True}): "CUDA allocator", frozenset({False}): "process RSS"}.get(
        frozenset(cuda), "CUDA allocator or process RSS"
    )


def smoke_line(rd: RunData, nums: Numbers) -> str | None:
    """The one line that opens the report of a run that cannot support a verdict, or None: a reduced
    preset (run.json's note, `tsflash.sweep.plan.reduced_note`), or a budget too short for every N
    (`protocol.short_budget`). Its answers are then not set in bold."""
    if rd.run.get("preset") == REDUCED_PRESET:
        note = rd.run.get("preset_note") or ""
        if note.startswith(SMOKE):
            return note
        # an older run folder kept another banner: the line rebuilt from its config, with its reason
        why = re.match(r"reduced CPU preset \(([^)]*)\)", note)
        return reduced_note(rd.config, why.group(1) if why else "")
    per_n = protocol._model_cells(rd, nums)
    if per_n and set(protocol.short_budget(per_n, rd.config)) == set(per_n):
        return too_short_line(rd.config["train"]["steps"], sorted(per_n))
    return None


def caveats(rd: RunData, nums: Numbers) -> list[str]:
    """What the run cannot support, for the first screen before any answer: a failed
    convergence criterion, differences inside the seed spread, no run-level test. A budget too short
    for every N of a full-preset run is the report's first line instead (`smoke_line`)."""
    per_n = protocol._model_cells(rd, nums)
    gap, spread = protocol.largest_gap(per_n)
    short = protocol.short_budget(per_n, rd.config)
    if set(short) == set(per_n) and rd.run.get("preset") != REDUCED_PRESET:
        short = []  # the first line says so (`smoke_line`)
    runs = nums.forecast.runs
    return support_sentences(short, gap, spread, None if runs.available or not nums.forecast.available else runs.reason)


def with_caveats(words: dict, found: list[str], smoke: str | None = None) -> dict:
    """The sentences with the caveats and the smoke-test line, and both answers worded as not
    evidence when there is either."""
    words = words | {"caveats": found, "smoke": smoke}
    if not found and not smoke:
        return words
    leads = {k: not_evidence_lead(words[k]) for k in ("forecast_lead", "trading_lead") if k in words}
    return words | {"forecast": words["forecast"] + NOT_EVIDENCE, "sentence": words["sentence"] + NOT_EVIDENCE} | leads


def verdict_section(rd: RunData, words: dict, resolve: ArmResolver | None = None) -> dict:
    cfg = rd.config
    notes = []
    if rd.data.get("kind") == "synthetic":
        notes.append(control_note(rd.data.get("source", "")))
    if rd.rescored_from and rescores_cells(rd.rescored_from["overrides"]):
        notes.append(
            f"re-scored at eval.fee_bps = {cfg['eval']['fee_bps']:g} from the per-bar positions saved by "
            f"the run `{rd.run_dir.name}` (which charged {rd.rescored_from['run_fee_bps']:g} bps); nothing "
            f"was retrained. Trading rule: {Strategy.from_config(cfg).describe()}."
        )
    if plan := plan_for(rd.run_dir):  # a pre-registered run: its departures from the plan, or "none"
        notes.append(deviations_sentence(plan, rd.run_dir, resolve))
    seeds = seed_inference(cfg)
    if rd.rescored_from and "eval.seed_inference" in rd.rescored_from["overrides"]:
        notes.append(
            f"re-reported from the run `{rd.run_dir.name}` with eval.seed_inference = {seeds}; nothing was "
            "retrained or re-scored, only the tests changed."
        )
    replicate = (
        "the fold as the replicate"
        if seeds == "fold"
        else "folds and seeds as crossed random effects, a seed being one set of initial weights for every fold"
    )
    interval = cfg["data"]["interval"]
    spans = ", ".join(f"{n} = {bars_as_time(n, interval)}" for n in cfg["lengths"])
    question = (
        f"Two questions, answered separately. 1. Forecasting: does a causal transformer that sees a longer "
        f"context (N past {interval_words(interval)} bars: {spans}) forecast the up/flat/down move of "
        f"{rd.data.get('symbol', 'BTCUSDT')} over the next {bars_and_time(cfg['labels']['horizon'], interval)} "
        f"better out of sample (over training runs: each longer N against the shortest, {replicate}; "
        "and, secondary, paired tests of the seed ensembles on the same test bars)? 2. Trading: can any of it be traded after fees and multiple testing (a trading rule, the "
        f"Deflated Sharpe Ratio >= {cfg['selection']['min_dsr']} and PBO <= {cfg['selection']['max_pbo']})? "
        "And at what cost?"
    )
    return {
        "question": question,
        "smoke": words.get("smoke"),
        "caveats": words.get("caveats", []),
        "forecast_lead": words["forecast_lead"],
        "sentence": words["sentence"],
        "trading_lead": words["trading_lead"],
        "reasons": words["reasons"],
        "notes": notes,
    }


def _setup_items(rd: RunData, nums: Numbers) -> list[list]:
    cfg, data = rd.config, rd.data
    interval = cfg["data"]["interval"]
    fp = data.get("fingerprint", {})
    n_params = next((c["cost"].get("n_params") for c in rd.cells if c.get("cost")), None)
    sp, tr = cfg["splits"], cfg["train"]
    purge = sp["purge"] if sp["purge"] >= 0 else cfg["labels"]["horizon"]
    trials = plural(rd.run.get("trials_per_length", 1), "trial") + " per N"
    if rd.run.get("search_space"):
        trials += f" (searched: {rd.run.get('search_space')})"
    return [
        ["data", data_source(data)],
        ["range (configured)", f"{cfg['data']['start']} .. {cfg['data']['end']} (UTC, end inclusive)"],
        [
            "interval",
            f"{interval_words(interval)} bars ({interval}); context lengths N = "
            + ", ".join(f"{fmt(n)} ({bars_as_time(n, interval)})" for n in cfg["lengths"]),
        ],
        [
            "bars",
            f"{fmt(fp.get('count'))} ({fp.get('first')} .. {fp.get('last')}); {plural(data.get('n_gaps', 0), 'gap')}, "
            f"{plural(data.get('missing_bars', 0), 'missing bar')}; windows never bridge a gap > "
            f"{bars_and_time(cfg['data']['max_gap_bars'], interval)}",
        ],
        [
            "target",
            f"sign of the forward log return over {bars_and_time(cfg['labels']['horizon'], interval)}: "
            "up / flat / down",
        ],
        [
            "flat band",
            f"symmetric |return| quantile giving {cfg['labels']['flat_fraction']:.1%} flat labels, "
            "fitted on each fold's training bars only",
        ],
        [
            "folds",
            f"{sp['n_folds']} {sp['scheme']} walk-forward folds, test blocks of {plural(sp['test_days'], 'day')}, "
            f"purge {bars_and_time(purge, interval)}, embargo {plural(sp['embargo'], 'bar')}",
        ],
        ["fees", f"{cfg['eval']['fee_bps']} bps per unit of turnover, charged at scoring time"],
        ["trading rule", Strategy.from_config(cfg).describe()],
        [
            "model",
            f"causal transformer, d_model {cfg['model']['d_model']}, {plural(cfg['model']['n_layers'], 'layer')}, "
            f"{plural(cfg['model']['n_heads'], 'head')}, rotary positions; {fmt(n_params)} parameters "
            "(same for every N)",
        ],
        [
            "budget",
            f"{tr['steps']} AdamW steps of {fmt(tr['tokens_per_step'])} tokens (batch = tokens / N), "
            f"lr {tr['lr']}, warm-up {plural(tr['warmup_steps'], 'step')}, weight decay {tr['weight_decay']}",
        ],
        ["recipe", recipe_words(tr)],
        ["seeds", ", ".join(map(str, tr["seeds"]))],
        ["trials", f"{trials}; {plural(nums.selection.n_trials, 'complete trial')} in the study"],
        [
            "evaluation",
            "every test bar scored once, with a context of N/2..N bars ending at it (stride N/2); "
            "baselines (class prior, logistic regression on the last "
            f"{plural(cfg['eval']['baseline_lags'], 'bar')}, and where run its direction-blind twin, the "
            "volatility baseline) on the same folds; statistics on daily net returns",
        ],
        [
            "preset",
            f"{rd.run.get('preset')}" + (" (reduced CPU preset)" if rd.run.get("preset") == REDUCED_PRESET else ""),
        ],
        *protocol.setup_rows(rd),
    ]


def setup_section(rd: RunData, nums: Numbers) -> dict:
    thresholds = {r["fold"]: r["flat_threshold"] for r in nums.rows if r["kind"] == "model"}
    folds = [
        [
            f["fold"],
            f["train_start"],
            f["train_end"],
            f["test_start"],
            f["test_end"],
            fmt(f["n_train"]),
            fmt(f["n_test"]),
            fmt(thresholds.get(f["fold"]), ".2e"),
        ]
        for f in rd.data.get("folds", [])
    ]
    return {
        "summary": _table(["item", "value"], _setup_items(rd, nums)),
        "folds": _table(
            ["fold", "train start", "train end", "test start", "test end", "train bars", "test bars", "flat band |r|"],
            folds,
        ),
    }


def _label(key: str, interval: str | None) -> str:
    """A configuration's label, with N also as time when the bar interval is known."""
    return timed_label(key, interval) if interval else label(key)


def steps_text(s: dict) -> str:
    """Steps trained per cell: "412 (300..600)", the mean and the range over every cell."""
    mean, lo, hi = s.get("steps_mean", math.nan), s.get("steps_min", math.nan), s.get("steps_max", math.nan)
    if not math.isfinite(mean):
        return fmt(s.get("steps"))
    return fmt(round(mean)) if lo == hi else f"{fmt(mean, ',.0f')} ({fmt(int(lo))}..{fmt(int(hi))})"


def job_peak_note(peak: dict | None) -> str | None:
    """The job's peak memory from run.json (tsflash.sweep.provenance.record_peak_memory), or None
    for a run from before it was recorded."""
    if not peak or not peak.get("bytes"):
        return None
    return (
        f"Peak memory of the whole job: {peak['bytes'] / 2**30:.2f} GiB of host memory through the "
        f"{peak.get('through', 'cells')}: {peak.get('rule', 'the peak resident set')}."
    )


def most_gpu_jobs(invocations: list[dict]) -> int:
    """The most jobs any invocation (slice) of a run shared its GPU with, itself included (run.json,
    `tsflash.sweep.provenance.gpu_jobs`); 1 when it always had the GPU alone."""
    return max((i.get("gpu_jobs") or 1 for i in invocations), default=1)


def shared_gpu_note(invocations: list[dict]) -> str | None:
    """Whether this run's cost figures were shared: its invocations (slices) that a device script
    started beside other jobs on one GPU (run.json, `tsflash.sweep.provenance.gpu_jobs`); None when none was."""
    shared = [i["gpu_jobs"] for i in invocations if (i.get("gpu_jobs") or 1) > 1]
    if not shared:
        return None
    return (
        f"{len(shared)} of {plural(len(invocations), 'invocation')} of this run (its slices) ran beside other "
        f"jobs on the same GPU (up to {most_gpu_jobs(invocations)} jobs side by side, as the device script started them): the "
        "epoch, train, validation, tokens/s and TFLOP/s figures are shared, not one N's cost alone; peak memory "
        "is the CUDA allocator's of this process, which sharing leaves alone. One N's cost alone: `tsflash bench "
        "train` (docs/benchmarks.md)."
    )


def cost_section(
    nums: Numbers,
    figures: dict,
    interval: str | None = None,
    job_peak: dict | None = None,
    invocations: Sequence[dict] = (),
) -> dict:
    kind = memory_kind(nums.per_n)
    rows = [
        [
            _label(s["series"], interval),
            fmt(s["batch_size"]),
            steps_text(s),
            fmt(s["epoch_seconds"], ".2f"),
            fmt(s["train_seconds"], ".2f"),
            fmt(s.get("val_seconds"), ".2f"),
            fmt(s["tokens_per_s"], ",.0f"),
            fmt(s["peak_memory_bytes"] / 2**20, ",.0f"),
            s["backend"],
            s.get("backend_observed") or "-",
            fmt(s["tflops"], ".3g"),
            s["device"],
        ]
        for s in nums.per_n
    ]
    notes = [
        "Means over folds (and seeds). An epoch is as many tokens as the fold has training bars. Validation is "
        "the passes over the validation tail that decide early stopping, apart from training (n/a: cells saved "
        "before it was recorded)."
    ]
    if kind == "CUDA allocator":
        notes.append(
            "Peak memory is torch.cuda.max_memory_allocated, reset per fold: what torch allocated on the GPU "
            "(weights, activations, optimizer state), the quantity the memory claim is about."
        )
    else:
        notes.append(
            "Peak memory on CPU is the process's peak RSS (ru_maxrss: Python, torch, the data and earlier "
            "folds included), an upper bound that cannot show the memory claim (memory flat in N with fused "
            "attention); that needs CUDA's allocator statistics, i.e. a CUDA run."
        )
    header = [
        "configuration (means over folds and seeds)",
        "batch",
        "steps (mean, range over cells)",
        "epoch (s)",
        "train (s)",
        "validation (s)",
        "tokens/s",
        f"peak memory (MiB, {kind})",
        "kernel forced",
        "kernel observed",
        "TFLOP/s",
        "device",
    ]
    if note := job_peak_note(job_peak):
        notes.append(note)
    if note := shared_gpu_note(list(invocations)):
        notes.append(note)
    notes.append(
        "Kernel forced: the fused attention kernel each cell asked for; kernel observed: the kernel the "
        'profiler saw run on each cell\'s first training step ("-": cells from before it was recorded).'
    )
    return {"table": _table(header, rows), "notes": notes, "figure": figures.get("cost_vs_n")}


def benefit_section(nums: Numbers, figures: dict, interval: str | None = None) -> dict:
    head = (
        ["configuration (mean ± fold sd of the cells' fold means over seeds)"] + [t for _, t, _ in METRICS] + ["folds"]
    )
    body = [
        [_label(s["series"], interval)] + [pm(s[m], s[f"{m}_std"]) for m, _, _ in METRICS] + [s["n_folds"]]
        for s in nums.per_n
    ]
    body += [
        [f"baseline: {label(k)}"] + [pm(b[m], b[f"{m}_std"]) for m, _, _ in METRICS] + [b["n_folds"]]
        for k, b in nums.baselines.items()
    ]
    note = (
        "Mean ± fold-to-fold standard deviation over the test blocks; accuracy, balanced accuracy and MCC are "
        "fractions of 1; log-loss in nats (lower is better; a uniform guess scores ln 3 = 1.0986)."
    )
    return {"table": _table(head, body), "note": note, "figures": [f for f in (figures.get("benefit_vs_n"),) if f]}


def _candidate_rows(nums: Numbers, interval: str | None = None) -> list[list]:
    sel = nums.selection
    selected = sel.verdict.selected
    out = []
    for r in sel.candidates:
        role = "selected (highest Sharpe/day)" if r["key"] == selected else "candidate"
        out.append(
            [
                _label(r["key"], interval),
                fmt(r["n_periods"]),
                pct_per_day(r["mean"]),
                percent(r["total"]),
                fmt(nums.series_stats[r["key"]]["gross_sharpe"]),
                fmt(r["sharpe"]),
                fmt(r["sharpe_annual"], ".2f"),
                fmt(r["psr"], ".3f"),
                fmt(r["dsr"], ".3f"),
                fmt(r.get("sr0")),
                fmt(sel.n_trials),
                fmt(sel.sr_variance, ".3g"),
                role,
            ]
        )
    for k in nums.baselines:
        if k in nums.series_stats:
            b = nums.series_stats[k]
            out.append(
                [
                    f"baseline: {label(k)}",
                    fmt(b["n_days"]),
                    pct_per_day(b["mean_daily_net"]),
                    percent(b["total_net"]),
                    fmt(b["gross_sharpe"]),
                    fmt(b["sharpe"]),
                    fmt(b["sharpe_annual"], ".2f"),
                    "",
                    "",
                    "",
                    "",
                    "",
                    "baseline (not a candidate)",
                ]
            )
    return out


def prior_note(nums: Numbers) -> str | None:
    """Why the class-prior baseline can be positive where every trading strategy loses."""
    if "baseline-prior" not in nums.series_stats:
        return None
    positive = [k for k, s in nums.series_stats.items() if s["total_net"] > 0]
    why = (
        "The class-prior baseline predicts the training fold's most frequent class on every test bar, so it "
        "holds one constant position through each test block (long, short or flat): its return is "
        "buy-and-hold or short-and-hold of BTC, paying the fee once per fold, not a forecast."
    )
    if positive == ["baseline-prior"]:
        why += " That is why it is the only series with a positive total net return here."
    return why


def _pbo_text(p) -> str:
    return (
        f"PBO (CSCV, {plural(p.n_blocks, 'block')} of {plural(p.block_size, 'day')}, {plural(p.n_splits, 'split')}, "
        f"{plural(p.n_dropped, 'oldest day')} dropped): {p.pbo:.3f}; probability of an out-of-sample loss "
        f"{p.prob_oos_loss:.3f}; degradation: OOS Sharpe/day = {linear_fit(p.intercept, p.slope, 'IS Sharpe/day')} "
        f"(R² {fmt(p.r2, '.2f')})."
    )


def selection_section(rd: RunData, nums: Numbers, words: dict, figures: dict) -> dict:
    sel = nums.selection
    days = sel.days
    intro = (
        f"Daily net returns of {plural(len(sel.candidates), 'candidate')} on {plural(len(days), 'common day')} "
        f"({days[0] if len(days) else None} .. {days[-1] if len(days) else None}). DSR trial count = "
        f"{plural(sel.n_trials, 'trial')} ({sel.trial_count.source if sel.trial_count else 'the optuna study'}); "
        "Sharpe variance across trials = "
        f"{fmt(sel.sr_variance, '.3g')} (variance of per-day Sharpe ratios, ddof 1). Sharpe ratios are per day "
        "(mean / standard deviation of daily net returns), annualised with 365; the gates test the candidate "
        "with the highest daily net Sharpe ratio."
    )
    header = [
        "candidate",
        "days",
        "mean daily net",
        "total net (compounded)",
        "gross Sharpe/day",
        "Sharpe/day",
        "Sharpe/yr",
        "PSR(0)",
        "DSR",
        "SR0/day",
        "trials",
        "V[SR] (per-day Sharpe)",
        "role",
    ]
    p = sel.verdict.pbo_result
    notes = [n for n in [prior_note(nums)] if n] + [f"Note: {n}" for n in words["notes"]]
    return {
        "intro": intro,
        "table": _table(header, _candidate_rows(nums, rd.config["data"]["interval"])),
        "notes": notes,
        "pbo": _pbo_text(p) if p is not None else "PBO: not computable (see the reasons above).",
        "figure": figures.get("pbo"),
        "gates": [f"gate: {r}" for r in words["reasons"]],
    }


def precision_section(prec: dict) -> dict:
    if not (prec.get("available") and prec.get("rows")):
        return {"intro": f"The precision oracle was not run: {prec.get('reason', 'unavailable')}.", "table": None}
    st = prec.get("settings", {})
    intro = (
        f"bf16 fused attention against a float64 reference on identical inputs (q, k, v ~ N(0, 1), "
        f"{plural(st.get('heads') or 0, 'head')} of {st.get('head_dim')}), and the up/flat/down decisions of a "
        f"{st.get('model', 'fresh model')} on the same random inputs: bf16 autocast + fused kernel vs float64."
    )
    rows = [
        [
            r.get("n"),
            r.get("backend"),
            fmt(r.get("attn_max_rel"), ".2e"),
            fmt(r.get("attn_fro_rel"), ".2e"),
            percent(r.get("flip_fraction"), 4),
            fmt(r.get("logit_max_abs_err"), ".2e"),
            r.get("status"),
        ]
        for r in prec["rows"]
    ]
    header = ["N", "kernel", "max|err|/max|ref|", "||err||/||ref||", "decision flips", "max |d logit| (nats)", "status"]
    return {"intro": intro, "table": _table(header, rows)}


def reproducibility_section(rd: RunData) -> dict:
    run, fp = rd.run, rd.data.get("fingerprint", {})
    n_inv = len(run.get("invocations", []))
    resumed = "never resumed" if n_inv <= 1 else f"resumed {plural(n_inv - 1, 'time')}"
    items = [
        ["git commit", run.get("git_commit") or "n/a (not a git checkout, or no commit yet)"],
        ["packages", ", ".join(f"{k} {v}" for k, v in run.get("packages", {}).items() if v)],
        ["device", f"{run.get('device')}: {run.get('device_name')}"],
        ["seed(s)", ", ".join(map(str, run.get("seeds", rd.config["train"]["seeds"])))],
        ["config hash", run.get("config_hash")],
        ["run key", f"{run.get('run_key')} (config + data source + trials + device type)"],
        ["optuna study", f"{run.get('study_name')} in {run.get('storage')}"],
        [
            "data fingerprint",
            f"first {fp.get('first')}, last {fp.get('last')}, count {fmt(fp.get('count'))}, sha256 {fp.get('sha256')}",
        ],
        ["invocations", f"{plural(n_inv, 'invocation')} (the sweep was {resumed})"],
        ["resolved config", "config.json in the run folder"],
    ]
    return {"command": run.get("command") or "tsflash sweep", "table": _table(["item", "value"], items)}


def report_title(rd: RunData) -> str:
    """'Does a longer context forecast better, and can it be traded? BTCUSDT 1m, N = 512, 4096' with
    '(reduced CPU preset)' or '(synthetic data)' where that applies: the data, not the preset's file name."""
    cfg = rd.config
    data = cfg["data"]
    what = ("synthetic " if rd.data.get("kind") == "synthetic" else f"{data['symbol']} ") + data["interval"]
    caveat = " (reduced CPU preset)" if rd.run.get("preset") == REDUCED_PRESET else ""
    return (
        f"Does a longer context forecast better, and can it be traded? {what}, "
        f"N = {', '.join(map(str, cfg['lengths']))}{caveat}"
    )


def build_context(
    rd: RunData,
    nums: Numbers,
    words: dict,
    figure_paths: dict[str, Path],
    out_dir: Path,
    resolve: ArmResolver | None = None,
) -> dict:
    """The context of report.md.j2 and report.html.j2."""
    figures = {
        name: {"src": path.relative_to(out_dir).as_posix(), "file": path, "caption": CAPTIONS[name]}
        for name, path in figure_paths.items()
    }
    cfg = rd.config
    paired = write_outputs(rd, nums, words, out_dir)  # the two questions' files (figure, loss sums, questions.json)
    return {
        "title": report_title(rd),
        "page_title": f"tsflash report: {out_dir.name}",
        "headings": SECTIONS,
        "verdict": verdict_section(rd, words, resolve),
        "setup": setup_section(rd, nums),
        "cost": cost_section(
            nums, figures, cfg["data"]["interval"], rd.run.get("peak_memory"), rd.run.get("invocations", [])
        ),
        "benefit": benefit_section(nums, figures, cfg["data"]["interval"]),
        "forecast": forecast_section(nums, words, paired),
        "trading": trading_section(nums) | {"figure": figures.get("equity")},
        "selection": selection_section(rd, nums, words, figures),
        "precision": precision_section(rd.precision),
        "protocol": protocol.build(rd, nums, out_dir),
        "reproducibility": reproducibility_section(rd),
    }
