"""The answer of a pre-registered plan, read from its runs' reports (issue 33, deliverable 4).

    python -m lab.plan --summary reports/third-edition

collects every figure an edition's README paragraph and closing note give (per architecture and N:
the steps kept, question 1 over training runs, the nesting check and its two parts, the linear probe,
the trading figures and gates, the cost), each control's reading against the rule the plan stated
for it (`CONTROL_RULES`, met or not), the A/A reading and what "no" rules out, into SUMMARY.md and
summary.json beside PLAN.md, with summary.png (per arm, the transformer, the same model cut to the
shortest N and the linear probe against N) and answer.png (question 1 on both scores, each arm beside
its echo and iid controls: `lab.edition_figures`) and, at its head, the answer in
brief, one paragraph per question as the README gives them (`answer_brief`). Nothing is recomputed:
every number is one its run's report wrote (questions.json, results.json), so the summary cannot
say what the reports do not. Read under the
plan's order rule (`wording.ORDER_RULE`): only complete stages are read, and every run of a stage not
complete is listed as not run, whatever part of it has finished. The device time the plan used is
the sum of its calls' records (calls/*.json, one per `lab/third_edition_h200.sh` call).
The plan is read as amended (`amended_plan`): the summary names each amendment, lists the runs it
takes out of this edition with their reasons, and reads a power bracket's rungs (an amendment's
controls with an oracle gain) as found or missed, one run a strength. What "no" rules out starts with
each arm's primary reading at the design that ran: the difference its test detects with 80 % power
at Holm's first step, as the report gives it (`crossed_power_80`); a report written before that
figure is named, to be rebuilt with `tsflash report`.
"""

from __future__ import annotations

from pathlib import Path

from lab.plan_state import CALLS_DIR, device_calls, plan_state
from tsflash.atomic import write_json, write_text
from tsflash.errors import UserError
from tsflash.report.context import most_gpu_jobs
from tsflash.report.diagnostics.nesting import NESTING_PART_NAMES
from tsflash.report.questions import RESULTS_FILE as QUESTIONS_FILE
from tsflash.report.registration import (
    AA_CONTROL,
    CONTROL_RULES,
    LADDER_RUN,
    NOT_RUN,
    PLAN_JSON,
    amended_words,
    plan_order_of,
    planned_runs,
)
from tsflash.report.wording import FOLLOWS, NA, SCORE_NAMES, bps, fmt, label, plural, signed
from tsflash.runfolder import RunFolder, read_json
from tsflash.sweep.preregister import amended_plan

SUMMARY_MD, SUMMARY_JSON, SUMMARY_PNG, ANSWER_PNG = "SUMMARY.md", "summary.json", "summary.png", "answer.png"
__all__ = ["CONTROL_RULES", "control_met", "write_summary"]  # CONTROL_RULES: the package's, read here
def control_met(kind: str, reading: dict) -> bool | None:
    """Is a control's expectation met by its reading (`_reading`), by `CONTROL_RULES`? None where
    the report has no reading for the rule (e.g. no ranking: fewer than three lengths)."""
    if kind == "long-memory":
        return reading["question1"] == "better" if reading["question1"] else None
    if kind == "regime":
        return reading["information_order"] == FOLLOWS if reading["information_order"] else None
    if kind in ("random-walk", "iid"):
        if not reading["question1"] or reading["trading_passed"] is None:
            return None
        return reading["question1"] != "better" and not reading["trading_passed"]
    if kind == AA_CONTROL:
        return reading["aa_calibrated"]
    return None


def _report(run_dir: Path) -> tuple[dict, dict]:
    """(questions.json, results.json) of a finished run."""
    return read_json(run_dir / QUESTIONS_FILE), read_json(run_dir / "results.json")


def _reading(questions: dict, results: dict) -> dict:
    """What the control rules read from a finished run's report (and an arm's summary shares)."""
    runs = questions["forecast"].get("runs", {})
    ranking = runs.get("ranking") or {}
    aa = results.get("aa") or {}
    return {"question1": runs.get("answer") or "", "mixed": bool(runs.get("mixed")),
            "ranking": ranking.get("verdict") or "", "information_order": ranking.get("information_order") or "",
            "trading_passed": questions["trading"].get("passed"),
            "aa_calibrated": aa.get("calibrated") if aa.get("comparisons") else None,
            "aa_differ": [aa.get("differ"), aa.get("comparisons")] if aa.get("comparisons") else None}


def _test(r: dict | None, p_key: str = "p_holm") -> dict | None:
    """A run-level result as the summary keeps it: estimate, 95 % interval, p."""
    if not r:
        return None
    return {"estimate": r.get("estimate", r.get("mean")), "ci": list(r["ci"]), "p": r.get(p_key)}


def _cell_seconds(run_dir: Path) -> float:
    """Measured seconds of every model cell: training, validation passes and scoring the test block."""
    cells, _ = RunFolder(run_dir).cell_summaries()
    return float(sum((c["cost"].get(k) or 0.0) for c in cells for k in ("train_seconds", "val_seconds", "eval_seconds")))


def _question1_rows(runs: dict, lengths: list[dict]) -> list[dict]:
    """Per N of `lengths` (rows with "series" and "n"), question 1's test on each score from a
    run-level reading `runs` (questions.json's forecast.runs, or a replicate's pooled one); None for
    the reference."""
    comparisons = {(c["series"], c["score"]): c for c in runs.get("comparisons", [])}
    return [{"series": row["series"], "n": row["n"],
             "question1": {score: _test(comparisons.get((row["series"], score))) for score in SCORE_NAMES}}
            for row in lengths]


def _rules_out(runs: dict) -> dict:
    """What a "no" of question 1's primary test rules out at the design that ran, as the report gives
    it (questions.json's forecast.runs, or a replicate's pooled reading: `crossed_power_80` at Holm's
    first step, `tsflash.report.diagnostics.power`); "predates" when the report was written before it."""
    if "crossed_power_80" not in runs:
        return {"detectable": {}, "alpha": None, "predates": True}
    return {"detectable": runs["crossed_power_80"], "alpha": runs.get("crossed_alpha"), "predates": False,
            "n_folds": runs.get("n_folds"), "seeds_per_fold": runs.get("seeds_per_fold"),
            "comparisons": len(runs.get("comparisons", []))}


def _pooled(aa: dict, lengths: list[dict], folder: str = "") -> dict | None:
    """Question 1 over the arm's seeds and its A/A replicate's together (results.json "aa" of the
    replicate, `tsflash.report.diagnostics.replicate`) at the arm's `lengths`: the plan's primary
    reading with a replicate; None without one."""
    pooled = aa.get("pooled")
    if not pooled or not pooled.get("comparisons"):
        return None
    nesting = aa.get("pooled_nesting") or {}
    return {"seeds_per_fold": pooled.get("seeds_per_fold"), "question1": pooled.get("answer") or "",
            "mixed": bool(pooled.get("mixed")), "nesting": nesting.get("verdict") or "",
            "lengths": _question1_rows(pooled, lengths), "rules_out": _rules_out(pooled), "folder": folder}


def _arm_summary(name: str, run_dir: Path, out: Path) -> dict:
    """One arm's figures per N, its gates, sentences and cost, from its report."""
    questions, results = _report(run_dir)
    reading = _reading(questions, results)
    forecast, trading = questions["forecast"], questions["trading"]
    question1 = {r["series"]: r["question1"] for r in _question1_rows(forecast.get("runs", {}), results["per_configuration"])}
    nesting = forecast.get("nesting") or {}
    tests = {t["n"]: t for t in nesting.get("tests", [])}
    probe = {r["n"]: r for r in (results.get("probe") or {}).get("rows", [])}
    fees = {r["series"]: r["break_even_fee_bps"] for r in trading.get("rows", [])}
    candidates = {c["key"]: c for c in results.get("selection", {}).get("candidates", [])}
    lengths = []
    for row in results["per_configuration"]:
        key, n = row["series"], row["n"]
        test = tests.get(n, {}).get("cut_minus_shortest", {})
        step = probe.get(n, {}).get("vs_shortest", {}).get("log_loss")
        step_test = _test(step, "p")  # None exactly when `step` is empty
        cand = candidates.get(key, {})
        lengths.append({
            "series": key, "n": n, "steps_mean": row.get("steps_mean"), "steps_min": row.get("steps_min"),
            "steps_max": row.get("steps_max"),
            "question1": question1[key],
            "nesting": {part: _test(test.get(part)) for part in NESTING_PART_NAMES},
            "lost_skill": tests.get(n, {}).get("lost_skill"),  # the nesting check fails at this N
            "probe": step_test | {"p_holm": probe[n].get("p_holm"), "reads_more": probe[n].get("reads_more")}
            if step_test is not None else None,
            "break_even_fee_bps": fees.get(key), "sharpe_annual": cand.get("sharpe_annual"), "dsr": cand.get("dsr"),
            "mean_daily_net": cand.get("mean_daily_net"), "train_seconds": row.get("train_seconds"),
            "peak_memory_bytes": row.get("peak_memory_bytes"), "tokens_per_s": row.get("tokens_per_s")})
    verdict, pbo_null = results.get("verdict", {}), trading.get("pbo_null") or {}
    jobs = most_gpu_jobs(read_json(run_dir / "run.json").get("invocations", []))
    return {"arm": name, "folder": run_dir.relative_to(out).as_posix(), "lengths": lengths,
            "question1": reading["question1"], "sentence": forecast.get("sentence", ""),
            "rules_out": _rules_out(forecast.get("runs", {})),
            "trading_sentence": trading.get("sentence", ""), "nesting": nesting.get("verdict", ""),
            "ranking": reading["ranking"], "information_order": reading["information_order"],
            "gate": {"selected": verdict.get("selected"), "dsr": verdict.get("dsr"), "n_trials": verdict.get("n_trials"),
                     "n_trials_source": trading.get("n_trials_source"), "pbo": verdict.get("pbo"),
                     "pbo_null": [pbo_null.get("q05"), pbo_null.get("q95")] if pbo_null else None,
                     "pbo_informative": pbo_null.get("informative"), "passed": verdict.get("passed")},
            "cell_seconds": _cell_seconds(run_dir), "gpu_jobs": jobs}


def edition_summary(out: Path) -> dict:
    """Every figure of a plan's complete stages (module doc); refused in one line when no stage is complete."""
    out = Path(out)
    if not (out / PLAN_JSON).is_file():
        raise UserError(f"--summary {out}: no {PLAN_JSON} there (write one with --out)")
    plan = amended_plan(out)
    rows = {r["run"]: r for r in plan_state(out)}
    stages = [{"stage": st["stage"], "runs": list(st["runs"]),
               "complete": all(rows[n]["state"] == "complete" for n in st["runs"])} for st in plan_order_of(plan)]
    if not any(st["complete"] for st in stages):
        raise UserError(f"--summary {out}: no stage of plan {plan['plan_hash']} is complete, so nothing is read "
                        f"(only complete stages are; `python -m lab.plan --check {out}` shows each run's state)")
    read = {n for st in stages if st["complete"] for n in st["runs"]}
    # replicas: an arm's folder name -> (its A/A replicate's results.json "aa", the replicate's folder)
    arms, controls, replicas = [], [], {}
    for name, control, _, run_dir in planned_runs(plan, out):
        if name not in read:
            continue
        if control is None:
            arms.append(_arm_summary(name, run_dir, out))
            continue
        questions, results = _report(run_dir)
        reading = _reading(questions, results)
        controls.append({"run": name, "control": control["name"], "kind": control["kind"],
                         "arm": run_dir.name, "expect": control["expect"], "rule": control.get("rule", ""),  # as planned
                         "met": control_met(control["kind"], reading), "cell_seconds": _cell_seconds(run_dir),
                         # a power bracket's rung (an amendment's): found or missed, not met or not
                         "oracle_gain": control.get("oracle_gain"), "amendment": control.get("amendment"),
                         "lengths": _question1_rows(questions["forecast"].get("runs", {}),
                                                    results["per_configuration"])} | reading)
        if control["kind"] == AA_CONTROL and results.get("aa"):
            replicas[run_dir.name] = (results["aa"], run_dir.relative_to(out).as_posix())
    for a in arms:  # the replicate's pooled reading is the arm's primary question 1
        aa, folder = replicas.get(a["arm"], ({}, ""))
        a["pooled"] = _pooled(aa, a["lengths"], folder)
    ladder = None
    if LADDER_RUN in rows:
        ladder = {"read": LADDER_RUN in read, "state": rows[LADDER_RUN]["state"],
                  "sentence": rows[LADDER_RUN]["question1"] if LADDER_RUN in read else ""}
    return {"plan_hash": plan["plan_hash"], "data": plan["data"], "range": plan["range"], "stages": stages,
            "amendments": plan.get("amendments", []), "amended": amended_words(plan),
            "device_calls": device_calls(out),
            "not_run": [n for st in stages if not st["complete"] for n in st["runs"]],
            "not_run_in_edition": dict(plan.get("not_run", {})),
            "arms": arms, "controls": controls, "ladder": ladder,
            "cell_seconds": sum(r["cell_seconds"] for r in [*arms, *controls])}


def _ci(t: dict | None, p_name: str = "Holm p") -> str:
    """"+0.0012 [-0.0004, +0.0029], Holm p 0.29", or "-" where there is no test."""
    if not t:
        return "-"
    return f"{signed(t['estimate'])} [{signed(t['ci'][0])}, {signed(t['ci'][1])}], {p_name} {fmt(t['p'], '.3g')}"


def _steps(r: dict) -> str:
    return f"{fmt(r['steps_mean'], '.0f')} ({fmt(r['steps_min'], '.0f')}..{fmt(r['steps_max'], '.0f')})"


def _pooled_markdown(a: dict, shortest: str) -> list[str]:
    """Question 1 over the arm's seeds and its A/A replicate's, per N, as a table; [] without it."""
    if not (pooled := a.get("pooled")):
        return []
    lines = [f"**Question 1 over both seed sets** ({plural(pooled['seeds_per_fold'] or 0, 'seed')} a fold, the plan's "
             f"primary reading): {pooled['question1'] or NA}{' (mixed)' if pooled['mixed'] else ''}; nesting check over "
             f"both: {pooled['nesting'] or NA}.", "",
             f"| N | log-loss minus {shortest} | direction score minus {shortest} |", "|---|---|---|"]
    lines += [f"| {label(r['series'])} | {_ci(r['question1']['log_loss'])} | {_ci(r['question1']['direction'])} |"
              for r in pooled["lengths"]]
    return [*lines, ""]


def _arm_markdown(a: dict, controls: list[dict]) -> list[str]:
    shortest = label(a["lengths"][0]["series"]) if a["lengths"] else "the shortest N"
    lines = [f"## {a['arm']} ([`{a['folder']}/report.md`]({a['folder']}/report.md))", "",
             f"**Question 1**: {a['sentence']}", "", *_pooled_markdown(a, shortest),
             f"**Question 2**: {a['trading_sentence']}", "",
             f"| N | steps kept, mean (range) | log-loss minus {shortest} | direction score minus {shortest} "
             f"| cut to the shortest N minus {shortest}: log-loss | flat-vs-move part | up-vs-down part "
             f"| linear probe minus its {shortest} | break-even fee | net Sharpe (annual) | DSR | train s per cell "
             "| peak memory (GiB) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in a["lengths"]:
        q, nest = r["question1"], r["nesting"]
        memory = NA if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**30:.2f}"
        lines.append(f"| {label(r['series'])} | {_steps(r)} | {_ci(q['log_loss'])} | {_ci(q['direction'])} "
                     f"| {_ci(nest['log_loss'])} | {_ci(nest['move'])} | {_ci(nest['direction'])} | {_ci(r['probe'], 'p')} "
                     f"| {bps(r['break_even_fee_bps'])} | {fmt(r['sharpe_annual'], '.2f')} | {fmt(r['dsr'], '.3f')} "
                     f"| {fmt(r['train_seconds'], '.1f')} | {memory} |")
    g = a["gate"]
    null = g["pbo_null"]
    lines += ["", "Differences are per bar, over training runs, with 95 % intervals (the probe: over folds); \"-\" is "
              "the reference or a figure the run did not measure.", "",
              f"- Gates: DSR {fmt(g['dsr'], '.3f')} of {label(g['selected']) if g['selected'] else NA} over "
              f"{plural(g['n_trials'] or 0, 'trial')} (counted by {g['n_trials_source'] or 'its own study'}); PBO {fmt(g['pbo'], '.2f')}"
              + (f" (noise alone, 5-95 %: {fmt(null[0], '.2f')} to {fmt(null[1], '.2f')}: "
                 f"{'informative' if g['pbo_informative'] else 'not informative'})" if null else "")
              + f"; {'passes' if g['passed'] else 'no length passes'}.",
              f"- Nesting check: {a['nesting'] or NA}. Ranking check: "
              + ("; ".join(x for x in (a["ranking"], a["information_order"]) if x)
                 or "not in this run's report")
              + "."]
    for c in controls:
        if c["kind"] == AA_CONTROL and c["arm"] == a["arm"] and c["aa_differ"]:
            lines.append(f"- A/A ({c['run']}): {c['aa_differ'][0]} of {c['aa_differ'][1]} comparisons say \"differ\" "
                         f"({'calibrated' if c['aa_calibrated'] else 'not calibrated'}).")
    cost = f"{a['cell_seconds'] / 3600:.2f} h" if a["cell_seconds"] >= 360 else f"{a['cell_seconds']:.0f} s"
    lines += [f"- Cells' measured time (training, validation, scoring): {cost}"
              + (f", with up to {a['gpu_jobs']} jobs sharing the GPU" if a["gpu_jobs"] > 1 else "") + ".", ""]
    return lines


def _smallest_p(a: dict) -> tuple[dict, str, dict] | None:
    """(length row, score, test) of the arm's (or its pooled reading's) question-1 comparison with the smallest Holm p."""
    tests = [(r, score, t) for r in a["lengths"] for score, t in r["question1"].items() if t]
    return min(tests, key=lambda x: x[2]["p"] if x[2]["p"] is not None else 2.0, default=None)


def _forecast_brief(a: dict) -> str:
    """"per-bar: no better (smallest Holm p: N=32768 on the log-loss, +0.0015 [...]); nesting check
    fails (N=32768 cut to N=512 +0.0054 [...]; flat-vs-move +0.003, up-vs-down +0.002); the probe
    reads more at N=4096"."""
    if pooled := a.get("pooled"):  # the plan's primary reading: the arm's seeds and its replicate's
        text = f"{a['arm']}, over {plural(pooled['seeds_per_fold'] or 0, 'seed')} a fold: {pooled['question1'] or 'no answer over runs'}"
        if low := _smallest_p(pooled):
            r, score, t = low
            text += f" (smallest Holm p: {label(r['series'])} on the {SCORE_NAMES[score]}, {_ci(t)})"
        text += f"; the arm's own seeds alone: {a['question1'] or 'no answer over runs'}"
    else:
        text = f"{a['arm']}: {a['question1'] or 'no answer over runs'}"
        if low := _smallest_p(a):
            r, score, t = low
            text += f" (smallest Holm p: {label(r['series'])} on the {SCORE_NAMES[score]}, {_ci(t)})"
    text += f"; nesting check {a['nesting'] or NA}"
    # the lengths that failed it, else the longest: where a long context lost the most short-range skill
    shown = ([r for r in a["lengths"] if r["lost_skill"]] or a["lengths"][-1:]) if len(a["lengths"]) > 1 else []
    tested = []
    for r in shown:
        nest = r["nesting"]
        if nest.get("log_loss"):
            parts = ", ".join(f"{NESTING_PART_NAMES[p]} {signed(nest[p]['estimate'])}" for p in ("move", "direction")
                              if nest.get(p))
            tested.append(f"{label(r['series'])} cut to the shortest N {_ci(nest['log_loss'])}"
                          + (f", {parts}" if parts else ""))
    text += f" ({'; '.join(tested)})" if tested else ""
    probe = [r for r in a["lengths"][1:] if r["probe"]]
    if probe:
        more = [label(r["series"]) for r in probe if r["probe"]["reads_more"]]  # the report's rule (diagnostics.probe)
        text += f"; the linear probe reads more at {', '.join(more)}" if more else "; the linear probe reads no more at any longer N"
    return text + "."


def _trading_brief(a: dict) -> str:
    g, fees = a["gate"], [r["break_even_fee_bps"] for r in a["lengths"] if r["break_even_fee_bps"] is not None]
    null = g["pbo_null"]
    return (f"{a['arm']}: {'passes' if g['passed'] else 'no length passes'}; DSR {fmt(g['dsr'], '.3f')} over "
            f"{plural(g['n_trials'] or 0, 'trial')}, PBO {fmt(g['pbo'], '.2f')}"
            + (f" ({'informative' if g['pbo_informative'] else 'not informative'}: noise alone reaches "
               f"{fmt(null[0], '.2f')} to {fmt(null[1], '.2f')})" if null else "")
            + (f"; break-even fees {bps(min(fees))} to {bps(max(fees))}" if fees else "") + ".")


def _not_run(state: str) -> bool:
    return state.startswith(NOT_RUN)


def _bracket_words(s: dict) -> str:
    """The power bracket's reading (an amendment's controls with an oracle gain): each rung found or
    missed, one run a strength; "" without one."""
    rungs = [c for c in s["controls"] if c.get("oracle_gain") is not None]
    if not rungs:
        return ""
    words = {True: "found", False: "missed", None: "not read"}
    return ("Power bracket: " + "; ".join(f"{c['control']} ({c['arm']}, oracle gain {fmt(c['oracle_gain'], '.2g')} "
                                          f"nats per moved bar) {words[c['met']]}" for c in rungs)
            + ". One run a strength says found or missed at this design; it is not a detection rate.")


def primary_rules_out(a: dict) -> dict:
    """An arm's primary reading's power: over both seed sets where it has its A/A replicate."""
    return (a.get("pooled") or {}).get("rules_out") or a["rules_out"]


def _range(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2g}" if f"{lo:.2g}" == f"{hi:.2g}" else f"{lo:.2g}-{hi:.2g}"


def rules_out_words(a: dict) -> str:
    """"per-bar: at the design that ran (5 folds, 6 seeds a fold; Holm over 4), the primary test detects
    with 80 % power 0.0042-0.0061 nats per bar on the log-loss and ...", its range over the longer N;
    "" where the report gives none."""
    r = primary_rules_out(a)
    if r["predates"]:
        folder = a["pooled"]["folder"] if a.get("pooled") else a["folder"]
        return (f"{a['arm']}: the report of {folder} predates the primary test's power; rebuild it "
                f"(`tsflash report <plan>/{folder}`), then the summary.")
    if not r["detectable"]:
        return ""
    by_score = [(sc, r["detectable"][sc]) for sc in SCORE_NAMES if r["detectable"].get(sc)]
    ranges = [f"{_range(v.values())}{' nats per bar' if not i else ''} on the {SCORE_NAMES[sc]}"
              for i, (sc, v) in enumerate(by_score)]
    return (f"{a['arm']}: at the design that ran ({plural(r['n_folds'] or 0, 'fold')}, "
            f"{plural(r['seeds_per_fold'] or 0, 'seed')} a fold; Holm over {r['comparisons']}), the primary test detects "
            f"with 80 % power {' and '.join(ranges)}. Smaller effects are not ruled out.")


def answer_brief(s: dict) -> list[str]:
    """The README's answer, one short paragraph per question, from the summary's own figures."""
    by_met: dict[bool | None, list[str]] = {True: [], False: [], None: []}
    for c in s["controls"]:
        if c.get("oracle_gain") is None:  # a bracket's rung is read in item 3
            by_met[c["met"]].append(f"{c['control']} ({c['arm']})")
    controls = "; ".join(f"{what}: {', '.join(names)}" for what, names in
                         (("as expected", by_met[True]), ("**not as expected**", by_met[False]),
                          ("no reading", by_met[None])) if names) or "none read"
    ladder = s["ladder"]
    rules_out = (ladder["sentence"] if ladder and ladder["read"] else
                 f"not measured: the strength ladder is {ladder['state']}." if ladder and _not_run(ladder["state"]) else
                 "not measured: the strength ladder's stage is not complete." if ladder else "no ladder in the plan.")
    if bracket := _bracket_words(s):
        rules_out += f" {bracket}"
    if primary := " ".join(w for a in s["arms"] if (w := rules_out_words(a))):
        rules_out = f"{primary} {rules_out[0].upper()}{rules_out[1:]}"
    memory = sorted(f"{r['peak_memory_bytes'] / 2**30:.1f}" for a in s["arms"] for r in a["lengths"]
                    if r["peak_memory_bytes"])
    calls = s["device_calls"]
    cost = (f"{calls['seconds'] / 3600:.1f} h of device calls ({calls['calls']})" if calls["calls"] else
            "no device call recorded") + (f"; peak memory {memory[0]}-{memory[-1]} GiB over every N and arm"
                                          if memory else "")
    unread = "not read: no arm's stage is complete."
    return ["1. **Forecasting**: " + (" ".join(_forecast_brief(a) for a in s["arms"]) or unread),
            "2. **Trading**: " + (" ".join(_trading_brief(a) for a in s["arms"]) or unread),
            f"3. **What \"no\" rules out**: {rules_out}",
            f"4. **Controls**, each against the rule the plan stated: {controls}.",
            f"5. **Cost**: {cost}."]


def render_summary(s: dict) -> str:
    """`edition_summary` as Markdown (SUMMARY.md)."""
    from tsflash.report.wording import ORDER_RULE

    done = [st["stage"] for st in s["stages"] if st["complete"]]
    lines = [f"# The answer of plan {s['plan_hash']}", "",
             f"Written by `python -m lab.plan --summary` from the reports of the plan's runs ([PLAN.md](PLAN.md)); "
             f"every figure is one a report wrote. Data: `{s['data']}`, {s['range'][0]} .. {s['range'][1]}.", "",
             f"Stages complete: {len(done)} of {len(s['stages'])} ({', '.join(done)}). {ORDER_RULE}", ""]
    if s.get("amendments"):
        links = ", ".join(f"[{a['file']}]({a['file']}) of {a['date']}" for a in s["amendments"])
        lines += [f"**Amended**: {links}. The stages above are the amended order; PLAN.json stays as registered.", ""]
    if s["not_run"]:
        lines += [f"**Not run** (their stage is not complete): {', '.join(s['not_run'])}.", ""]
    if s.get("not_run_in_edition"):
        lines += [f"**{NOT_RUN[0].upper()}{NOT_RUN[1:]}** (by the amendment), each with its reason:", "",
                  *(f"- {run}: {reason}" for run, reason in s["not_run_in_edition"].items()), ""]
    lines += ["## The answer in brief", "", *answer_brief(s), ""]
    if s["arms"]:
        lines += [f"![Question 1: each longer N minus the shortest on the log-loss and the direction score, "
                  f"the market beside its echo and iid controls]({ANSWER_PNG})", ""]
    if s["arms"]:
        lines += [f"![Each longer N minus the shortest, per arm: the transformer, the same model cut to the shortest N, "
                  f"the linear probe]({SUMMARY_PNG})", ""]
    for a in s["arms"]:
        lines += _arm_markdown(a, s["controls"])
    if s["controls"]:
        lines += ["## Controls", "", "Each against the rule the plan stated for it.", "",
                  "| control | arm | question 1 (over runs) | ranking check | trading passes | A/A | the plan expects "
                  "| read as | as expected |", "|---|---|---|---|---|---|---|---|---|"]
        for c in s["controls"]:
            ranking = "; ".join(x for x in (c["ranking"], c["information_order"]) if x) or "-"
            aa = f"{c['aa_differ'][0]} of {c['aa_differ'][1]} differ" if c["aa_differ"] else "-"
            met = ({True: "found", False: "missed", None: "not read"} if c.get("oracle_gain") is not None else
                   {True: "yes", False: "**no**", None: "not read"})[c["met"]]
            lines.append(f"| {c['control']} | {c['arm']} | {c['question1'] or NA}{' (mixed)' if c['mixed'] else ''} "
                         f"| {ranking} | {fmt(c['trading_passed'])} | {aa} | {c['expect']} | {c['rule']} | {met} |")
        lines.append("")
    power = [(a, primary_rules_out(a)) for a in s["arms"]]
    if s["ladder"] is not None or _bracket_words(s) or any(r["detectable"] or r["predates"] for _, r in power):
        ladder = s["ladder"]
        lines += ["## What \"no\" rules out", ""]
        for a, r in power:
            if words := rules_out_words(a):
                lines += [words, ""]
            if r["detectable"]:
                lines += [f"| {a['arm']}: comparison | score | detectable with 80 % power at {fmt(r['alpha'], '.3g')} "
                          "(nats per bar) |", "|---|---|---|"]
                lines += [f"| {label(k)} minus the shortest N | {SCORE_NAMES[sc]} | {v:.2g} |"
                          for sc in SCORE_NAMES for k, v in r["detectable"].get(sc, {}).items()] + [""]
        if ladder is not None:
            lines += [ladder["sentence"] if ladder["read"] else
                      f"The strength ladder is {ladder['state']}." if _not_run(ladder["state"]) else
                      f"Not run: the strength ladder's stage is not complete ({ladder['state']}).", ""]
        if bracket := _bracket_words(s):
            lines += [bracket, ""]
    total, calls = s["cell_seconds"], s["device_calls"]
    lines += ["## Time", "", f"Cells' measured time over every run read: {total / 3600:.2f} h (training, validation "
              "passes and scoring).",
              f"Device calls recorded in `{CALLS_DIR}/`: {calls['calls']}, {calls['seconds'] / 3600:.2f} h of their "
              f"scripts' wall-clock" + (f" ({calls['gpu_seconds'] / 3600:.2f} GPU-hours)"
                                        if calls["gpu_seconds"] != calls["seconds"] else "")
              + f" ({', '.join(calls['gpus']) or 'no GPU named'}; every call of the plan, complete stages "
              "or not; a machine's start and the transfers are not in it).", ""]
    return "\n".join(lines)


def write_summary(out: Path) -> tuple[Path, Path, dict]:
    """SUMMARY.md, summary.json and (with an arm read) summary.png and answer.png into the plan's folder (each
    written whole, then renamed)."""
    from lab.edition_figures import plot_answer, plot_edition

    s = edition_summary(out)
    out = Path(out)
    if s["arms"]:
        plot_edition(s["arms"], out / SUMMARY_PNG)
        plot_answer(s, out / ANSWER_PNG)
    write_json(out / SUMMARY_JSON, s, strict=True, end="\n")
    write_text(out / SUMMARY_MD, render_summary(s))
    return out / SUMMARY_MD, out / SUMMARY_JSON, s
