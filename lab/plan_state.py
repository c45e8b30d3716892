"""A pre-registered plan's state, read from its run folders: each planned run's state, departures
and answers (`plan_state`, `render_state`), the device calls it used (`device_calls`), the GPU time
its runs not complete still need at today's prices (`time_left`), and what the next device call runs
(`next_runs`). `python -m lab.plan` prints them; the device scripts call it.

The plan is read as amended (`tsflash.report.registration`), its added controls resolved and priced
by the sweep (`tsflash.sweep.preregister.amended_plan`).
"""

from __future__ import annotations

from pathlib import Path

from tsflash.config import config_from_dict
from tsflash.report import wording
from tsflash.report.markdown import markdown_table
from tsflash.report.questions import RESULTS_FILE
from tsflash.report.registration import (
    LADDER_DIR,
    LADDER_RUN,
    NOT_RUN,
    amended_words,
    deviations,
    plan_order_of,
    planned_runs,
)
from tsflash.runfolder import RunFolder, read_json
from tsflash.sweep.preregister import PLAN_DEVICE, amended_plan
from tsflash.sweep.progress import CostModel, format_seconds, prior_rates
from tsflash.sweep.run import work_left

CALLS_DIR = "calls"  # one record per device call (lab/third_edition_h200.sh): the device time used


def _planned_cells(plan: dict, resolved: dict) -> int:
    cfg = resolved["config"]
    return len(cfg["lengths"]) * cfg["splits"]["n_folds"] * len(cfg["train"]["seeds"]) * plan["trials_per_n"]


def plan_state(out: Path) -> list[dict]:
    """One row per planned run: its state (not started, cells saved of those planned, complete), its
    departures, and from its report (questions.json, results.json) question 1's answer over training
    runs, the nesting check's verdict and, for the A/A replicate, its reading; with what the plan
    expects of a control. The plan is read as amended (`amended_plan`): a run an amendment does not
    run is "not run in this edition: <reason>", in no stage ("-")."""
    plan = amended_plan(out)
    not_run = plan.get("not_run", {})
    rows = []
    for name, control, resolved, run_dir in planned_runs(plan, out):
        folder = RunFolder(run_dir)
        row = _state_row(name, str(run_dir.relative_to(out)), control["expect"] if control else "")
        if name in not_run:  # an amendment took it out of the order: nothing of it is read, but that it ran
            row["state"] = f"{NOT_RUN}: {not_run[name]}"
            if folder.run_json.exists():
                row["departures"] = deviations(plan, run_dir)[1]
            rows.append(row)
            continue
        if folder.run_json.exists():
            row["departures"] = deviations(plan, run_dir)[1]
            row["state"] = "complete" if folder.is_complete() else _cells_state(folder, _planned_cells(plan, resolved))
        if (run_dir / RESULTS_FILE).exists():  # the report, written when the run completes
            forecast = read_json(run_dir / RESULTS_FILE)["forecast"]
            runs = forecast.get("runs", {})
            row["question1"] = runs.get("answer") or f"no answer ({runs.get('reason') or forecast.get('source')})"
            row["nesting"] = forecast.get("nesting", {}).get("verdict", "")
            ranking = runs.get("ranking") or {}
            row["ranking"] = "; ".join(x for x in (ranking.get("verdict"), ranking.get("information_order")) if x)
        if (results := run_dir / "results.json").exists() and (aa := read_json(results).get("aa")):
            row["aa"] = _aa_state(aa)
        rows.append(row)
    if "ladder" in plan:
        rows.append(_ladder_state(plan, out / LADDER_DIR) if LADDER_RUN not in not_run else
                    _state_row(LADDER_RUN, LADDER_DIR, "what a \"no\" on question 1 rules out")
                    | {"state": f"{NOT_RUN}: {not_run[LADDER_RUN]}"})
    stage_of = {name: stage["stage"] for stage in plan_order_of(plan) for name in stage["runs"]}
    for row in rows:
        row["stage"] = stage_of.get(row["run"], "-")  # "-": not run in this edition
    return rows


def device_calls(out: Path) -> dict:
    """The plan's device calls so far, from their records (`CALLS_DIR`): how many, their seconds of
    wall-clock in all, those times the GPUs each call had (a record without a count had one), and the
    GPUs named."""
    calls = [read_json(p) for p in sorted((out / CALLS_DIR).glob("*.json"))]
    return {"calls": len(calls), "seconds": sum(c["seconds"] for c in calls),
            "gpu_seconds": sum(c["seconds"] * c.get("gpu_count", 1) for c in calls),
            "gpus": sorted({c.get("gpu") or "unknown" for c in calls})}


def _works_left(plan: dict, resolved: dict, run_dir: Path) -> tuple[CostModel, list]:
    """(the cost model that has learnt the run's saved cells, the work a resume of the planned run
    still does), priced as a sweep prices it (`tsflash.sweep.run.work_left`)."""
    cost = CostModel(prior_rates(PLAN_DEVICE))
    return cost, work_left(RunFolder(run_dir), config_from_dict(resolved["config"]), plan["trials_per_n"], cost)


def time_left(out: Path, rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Seconds of one H200 (expected; every model cell at its most steps) that each run not complete
    (`rows`, `plan_state`) still needs, by name, priced as a sweep would price it now: the calibrated
    table of `tsflash.sweep.progress` as it stands (PLAN.json keeps the prices it was written with) and
    the run's own saved cells (`tsflash.sweep.run.work_left`); the ladder's replicates not done at its
    script's price. A run an amendment does not run needs nothing."""
    plan, state = amended_plan(out), {r["run"]: r["state"] for r in rows}
    calibration = prior_rates(PLAN_DEVICE)
    left: dict[str, tuple[float, float]] = {}
    for name, _, resolved, run_dir in planned_runs(plan, out):
        if state[name] == "complete" or name in plan.get("not_run", {}):
            continue
        cost, works = _works_left(plan, resolved, run_dir)
        expected = worst = 0.0
        for work in works:
            seconds = cost.seconds(work)
            expected += seconds
            worst += seconds + (calibration.extra_at_max_steps(work, seconds) if work.kind == "model" else 0.0)
        left[name] = (expected, worst)
    if "ladder" in plan and state[LADDER_RUN] != "complete" and LADDER_RUN not in plan.get("not_run", {}):
        from lab.power_ladder import ladder_cost, ladder_lengths

        ladder = ladder_cost(tuple(plan["base_overrides"]), ladder_lengths(plan["arms"][0]))
        summary = read_json(path) if (path := out / LADDER_DIR / "summary.json").exists() else None
        share = 1 - summary["replicates_done"] / summary["replicates_planned"] if summary else 1.0
        left[LADDER_RUN] = (share * ladder["gpu_seconds"], share * ladder["gpu_seconds_worst"])
    return left


def fold_seconds(out: Path, run: str) -> dict[int, float]:
    """Seconds that a whole fold of planned run `run` takes at each N it still trains: its seeds at the
    longest cell the run has trained at that N (saved, or lost with its per-bar file: `lost_cell_seconds`;
    on the card that trained it), else at the cost table's price on one H200. A device call sliced by
    fold and shorter than a fold at N finishes no fold there (`tsflash.sweep.workers.CellQueue`).
    {} for the ladder and for a run with nothing left to train."""
    plan = amended_plan(out)
    found = [(r, d) for name, _, r, d in planned_runs(plan, out) if name == run]
    if not found:  # the ladder: its script's replicates, not folds of one sweep
        return {}
    (resolved, run_dir), = found
    cost, works = _works_left(plan, resolved, run_dir)
    models = [w for w in works if w.kind == "model"]
    seeds, lost = len(resolved["config"]["train"]["seeds"]), lost_cell_seconds(RunFolder(run_dir))
    return {n: seeds * max([cost.longest(w) for w in models if w.n == n] + lost.get(n, []))
            for n in sorted({w.n for w in models})}


def lost_cell_seconds(folder: RunFolder) -> dict[int, list[float]]:
    """N -> the wall-clock seconds of the run's model cells trained but not saved (their per-bar files
    stayed on a device before their fold was scored): what a sweep's cost model does not learn from,
    though they ran on the card that trains the run."""
    lost: dict[int, list[float]] = {}
    for marker in folder.model_cell_markers():
        cell = read_json(marker)
        if not folder.cell_saved(cell["key"], cell["fold"], cell["seed"]):
            lost.setdefault(int(cell["n"]), []).append(float(cell["seconds"]))
    return lost


def _fold_words(out: Path, run: str) -> str:
    """" A whole fold of RUN takes about 6m 0s at N=32768, ...": how long a call must be."""
    folds = fold_seconds(out, run)
    if not folds:
        return ""
    at = ", ".join(f"{format_seconds(s)} at N={n}" for n, s in sorted(folds.items(), reverse=True))
    return (f" A whole fold of {run} takes about {at} (its seeds at the longest cell the run trained at that N, "
            "saved or lost, on the card that trained it; else the cost table's price on one H200); a device call "
            "shorter than that trains no fold at that N, or trains cells that are lost when the machine goes back.")


def next_runs(out: Path, rows: list[dict] | None = None) -> tuple[str | None, list[str]]:
    """(the first stage with a run not complete, its runs not complete: their folders relative to the
    plan's), or (None, []) when every stage is complete: what the next device call runs."""
    rows = plan_state(out) if rows is None else rows
    by_name = {r["run"]: r for r in rows}
    for stage in plan_order_of(amended_plan(out)):
        if todo := [by_name[n]["folder"] for n in stage["runs"] if by_name[n]["state"] != "complete"]:
            return stage["stage"], todo
    return None, []


def _cells_state(folder: RunFolder, planned: int) -> str:
    """An unfinished run's state: its model cells saved of those planned, and those trained whose
    per-bar files stayed behind (a device's state archive) before their fold was scored, which
    are trained again (`RunFolder.cell_saved`)."""
    saved, trained = len(folder.saved_cell_keys()), len(folder.model_cell_markers())
    again = f" ({trained - saved} more trained but lost: their per-bar files stayed on the device before their " \
            "fold was scored; trained again)" if trained > saved else ""
    return f"{saved} of {planned} cells saved{again}"


def _aa_state(aa: dict) -> str:
    """The A/A column of `plan_state` from a replicate's results.json "aa" (`tsflash.report.diagnostics.replicate`)."""
    if not aa["comparisons"]:
        return f"no reading: {aa['reason']}"
    text = f"{aa['differ']} of {aa['comparisons']} say \"differ\" ({'' if aa['calibrated'] else 'not '}calibrated)"
    pooled = (aa.get("pooled") or {}).get("answer")
    nesting = (aa.get("pooled_nesting") or {}).get("verdict")
    return (text + (f"; question 1 over both seed sets: {pooled}" if pooled else "")
            + (f"; their nesting check: {nesting}" if nesting else ""))


def _state_row(run: str, folder: str, expect: str) -> dict:
    """A row of `plan_state` before anything is read: not started."""
    return {"run": run, "folder": folder, "expect": expect, "state": "not started", "departures": [],
            "question1": "", "nesting": "", "ranking": "", "aa": ""}


def _ladder_state(plan: dict, runs: Path) -> dict:
    """The ladder's row of `plan_state`: replicates done of planned, and what "no" rules out on the
    log-loss (`wording.ladder_sentence`) once its summary.json is there."""
    row = _state_row(LADDER_RUN, LADDER_DIR, "what a \"no\" on question 1 rules out")
    if (path := runs / "summary.json").exists():
        s = read_json(path)
        row["state"] = "complete" if s["complete"] else f"{s['replicates_done']} of {s['replicates_planned']} replicates"
        gains = [r["oracle_gain"] for r in s["rungs"] if r["strength"] is not None and r["oracle_gain"]]
        row["question1"] = wording.ladder_sentence((s.get("curve_80") or {}).get("log_loss"),
                                                   max(gains, default=None), min(gains, default=None))
    return row


def _calls_words(calls: dict) -> str:
    """`render_state`'s words for `device_calls`: none when there was no call."""
    if not calls["calls"]:
        return ""
    gpus = f", {calls['gpu_seconds']:,.0f} GPU-seconds" if calls["gpu_seconds"] != calls["seconds"] else ""
    return f"; device calls so far: {calls['calls']}, {calls['seconds']:,.0f} s of wall-clock{gpus} ({CALLS_DIR}/)"


def _time_left_words(out: Path, rows: list[dict], order: list[dict], stage: str, amended: bool) -> str:
    """`render_state`'s words for `time_left`: the plan's and the next stage's, beside what PLAN.json
    (and its amendments) priced the plan's order at."""
    f = format_seconds
    left = time_left(out, rows)
    expected, worst = (sum(v[i] for v in left.values()) for i in (0, 1))
    runs = next(st["runs"] for st in order if st["stage"] == stage)
    nxt = sum(left[n][0] for n in runs if n in left)
    planned, planned_worst = (sum(st[k] for st in order) for k in ("gpu_seconds", "gpu_seconds_worst"))
    return (f"; left: about {f(expected)} of one H200 expected ({f(worst)} if every model cell runs its most steps), "
            f"{f(nxt)} of it stage {stage}'s, at today's calibrated prices, or at a run's own saved cells where it has "
            "some (on the card that trained them); "
            + ("PLAN.json and its amendments priced the amended order at " if amended else
               "PLAN.json priced the whole plan at ") + f"{f(planned)} ({f(planned_worst)})")


def _run_of(rows: list[dict], folder: str) -> str:
    """The planned run's name of a folder relative to the plan (`next_runs`' words)."""
    return next(r["run"] for r in rows if r["folder"] == folder)


def render_state(rows: list[dict], plan_path: Path) -> str:
    """`plan_state` as Markdown: a line naming the plan (and its amendments), then a table of the
    planned runs in the plan's order, those an amendment does not run last."""
    plan = amended_plan(plan_path.parent)
    order, not_run = plan_order_of(plan), plan.get("not_run", {})
    head = ["stage", "run", "folder", "state", "departures", "question 1 (over runs)", "nesting check", "ranking check",
            "A/A", "the plan expects"]
    rank = {name: i for i, name in enumerate(n for st in order for n in st["runs"])}
    rank |= {name: len(rank) + i for i, name in enumerate(not_run)}  # the not-run last, as the amendment lists them
    rows = sorted(rows, key=lambda r: rank[r["run"]])
    body = [[r["stage"], r["run"], r["folder"], r["state"],
             len(r["departures"]) or ("" if r["state"] == "not started" or r["run"] in not_run else "none"),
             r["question1"], r["nesting"], r["ranking"], r["aa"], r["expect"]] for r in rows]
    done = sum(r["state"] == "complete" for r in rows)
    amended = amended_words(plan)
    stage, todo = next_runs(plan_path.parent, rows)
    names = [st["stage"] for st in order]
    complete = names[:names.index(stage)] if stage else names
    text = (f"Plan {plan['plan_hash']} ({plan_path.name} of {plan_path.parent}){', ' + amended if amended else ''}: "
            f"{done} of {len(rows) - len(not_run)} planned runs complete"
            + (f", {len(not_run)} {NOT_RUN}" if not_run else "")
            + f"; stages complete: {len(complete)} of {len(order)}"
            + (f" ({', '.join(complete)})" if complete else "")
            + (f"; next: stage {stage}, runs {' '.join(todo)} (`python -m lab.plan --next`)" if stage else "")
            + _calls_words(device_calls(plan_path.parent))
            + (_time_left_words(plan_path.parent, rows, order, stage, bool(amended)) if stage else "")
            + "." + (_fold_words(plan_path.parent, _run_of(rows, todo[0])) if stage else "")
            + "\n\n" + markdown_table(head, body))
    departing = [f"- {r['run']}: " + "; ".join(r["departures"]) for r in rows if r["departures"]]
    return text + ("\n\nDepartures from the plan:\n" + "\n".join(departing) if departing else "")
