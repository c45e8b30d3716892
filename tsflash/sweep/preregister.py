"""Pre-registration: what a sweep will run and how its answer will be read, fixed before it runs.

    tsflash preregister --lengths 512,4096,32768 --arm per-bar= --arm patch16=model.patch=16 \\
        --start 2021-01-01 --end 2025-06-30 --out reports/third-edition

resolves every arm's config exactly as `tsflash sweep --device cuda --preset full` would (no data,
no training: `tsflash.sweep.plan.resolve_config`), and writes PLAN.json (machine-read) and PLAN.md
(the same, for people) into OUT: each arm's overrides, config hash and run key, its lengths, seeds,
folds and training recipe, the primary test and its level, the nesting check, the trading gates, the
trial ledger's count with this plan's configurations added, the sentence each outcome will produce
(from `tsflash.report.wording`, the report's own words) and the GPU time the calibrated cost model
expects. A plan is written once: a second `preregister` into the same folder is refused, because a
plan changed after the run started is no plan.

With `--control NAME=SOURCE` each control runs every arm's config on a synthetic market into
OUT/controls/NAME/<arm>, with the answer it should give (`wording.CONTROL_EXPECTATIONS`) and its
cost in the plan; `--control-set NAME=KEY=VALUE` (repeatable) gives one control a setting of its
own, e.g. more folds of the same size on a longer synthetic market (`splits.n_folds=10`,
`data.start=2018-07-06`), where the protocol's five folds cannot resolve a control's effect: its
configs, hashes and cost are then resolved per arm with it. The arms' runs go to OUT/<arm> (`tsflash sweep ... --out OUT/<arm>`, the commands are in PLAN.md),
so a run folder's parent holds its plan: the report of a run whose parent folder has a PLAN.json
reads it and lists every departure from it (`tsflash.report.registration`, which also reads the
plan's amendments), and says "none" when there is none. `tsflash preregister --check RUN` prints the
same list (exit status 1 when there is any).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tsflash.atomic import write_text as atomic_text
from tsflash.config import parse_overrides, recipe_words
from tsflash.data.synthetic import parse_source
from tsflash.errors import UserError
from tsflash.identity import digest
from tsflash.report import registration, wording
from tsflash.report.registration import (
    AA_CONTROL,
    CONTROL_RULES,
    CONTROLS_DIR,
    LADDER_DIR,
    PLAN_JSON,
    PLAN_MD,
    control_arm,
    plan_order,
    plan_order_of,
    planned_runs,
    run_dir_of,
    run_names,
)
from tsflash.runfolder import read_json

if TYPE_CHECKING:
    from tsflash.sweep.plan import SweepOptions

# tsflash.sweep.plan (torch, optuna) is imported where a plan is built or a control resolved: the
# command line imports this module, and does not load them for nothing.
PLAN_DEVICE = "cuda"  # a plan is for the full config on a GPU, whatever machine writes it


def parse_arm(text: str) -> tuple[str, list[str]]:
    """\"patch16=model.patch=16,train.steps=600" -> ("patch16", ["model.patch=16", "train.steps=600"]);
    "per-bar=" is an arm with no override of its own."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise UserError(
            f"--arm expects NAME=KEY=VALUE[,KEY=VALUE...] (NAME of letters, digits, - and _; "
            f"'NAME=' for none), got {text!r}"
        )
    return name, [item for item in rest.split(",") if item]


def parse_control(text: str) -> tuple[str, str]:
    """\"echo=synthetic:long-memory:0:strength=0.2" -> ("echo", that source): a control run of every
    arm on a synthetic market (same config, same protocol and size)."""
    name, sep, source = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum() or parse_source(source) is None:
        raise UserError(
            f"--control expects NAME=synthetic:KIND[:SEED][:k=v,...] (NAME of letters, digits, - and _), got {text!r}"
        )
    return name, source


def parse_control_set(text: str) -> tuple[str, str]:
    """\"regime=splits.n_folds=10" -> ("regime", "splits.n_folds=10"): one setting of one control's
    own, on top of every arm's config (one item a flag: a value may hold commas)."""
    name, sep, item = text.partition("=")
    if not sep or not name or "=" not in item or not item.partition("=")[0]:
        raise UserError(f"--control-set expects NAME=KEY=VALUE (a control's name, then a config setting), got {text!r}")
    return name, item


def parse_stage(text: str) -> tuple[str, list[str]]:
    """\"first=per-bar,aa/per-bar,echo/*" -> ("first", [those patterns]): one stage of the plan's order,
    its runs by their names in `python -m lab.plan --check` (an arm, CONTROL/ARM, or ladder), each
    name or shell pattern matching the runs not in an earlier stage."""
    name, sep, rest = text.partition("=")
    patterns = [p for p in rest.split(",") if p]
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum() or not patterns:
        raise UserError(
            f"--stage expects NAME=RUN[,RUN...] (NAME of letters, digits, - and _; a RUN is a planned "
            f"run's name or a pattern such as '*/per-bar'), got {text!r}"
        )
    return name, patterns


# data.start and data.end of a control are its market's range: given to the sweep as --start/--end
RANGE_KEYS = ("data.start", "data.end")


def _split_range(items: list[str]) -> tuple[list[str], list[str]]:
    """(a control's range items, its other items)."""
    ranged = [i for i in items if i.partition("=")[0] in RANGE_KEYS]
    return ranged, [i for i in items if i not in ranged]


def _control(
    name: str,
    source: str,
    items: list[str],
    arms: list[tuple[str, list[str]]],
    resolved: list[dict],
    opts: SweepOptions,
    kind: str | None = None,
) -> dict:
    """One control: every arm's config on its synthetic market (or, `kind` "aa", on the plan's own
    bars with other seeds); with items of its own, each arm's config resolved again with them (its
    hash, folds and cost are then the control's)."""
    kind = kind or cast(tuple[str, int | None], parse_source(source))[0]  # without kind, a synthetic source
    control: dict = {
        "name": name,
        "source": source,
        "kind": kind,
        "expect": wording.CONTROL_EXPECTATIONS[kind],
        "rule": CONTROL_RULES[kind],
    }
    if items:
        ranged, rest = _split_range(items)
        ranges: dict[str, Any] = {k: str(v) for k, v in parse_overrides(ranged).get("data", {}).items()}  # start, end
        own = replace(opts, **ranges)
        resolved = [_arm(a, a_items + rest, own) for a, a_items in arms]
        control |= {
            "overrides": items,
            "arms": [
                {
                    k: r[k]
                    for k in ("name", "config", "config_hash", "folds", "range", "gpu_seconds", "gpu_seconds_worst")
                }
                for r in resolved
            ],
        }
    return control | {
        "gpu_seconds": sum(a["gpu_seconds"] for a in resolved),
        "gpu_seconds_worst": sum(a["gpu_seconds_worst"] for a in resolved),
    }


def _arm(name: str, items: list[str], opts: SweepOptions) -> dict:
    """One arm: the base options with the arm's --set items, resolved for the GPU."""
    from tsflash.config import merge_overrides
    from tsflash.sweep.plan import make_run_key, nesting_unmeasured, resolve_config, run_hash
    from tsflash.sweep.progress import CostModel, fresh_works, prior_rates

    arm_opts = replace(opts, overrides=merge_overrides(opts.overrides or {}, parse_overrides(items)), preset="full")
    cfg = resolve_config(arm_opts, PLAN_DEVICE)[0]
    calibration = prior_rates(PLAN_DEVICE)
    cost = CostModel(calibration)
    works = fresh_works(cfg, trials=opts.trials)
    expected = sum(cost.seconds(w) for w in works)
    # with early stopping cells end before their maximum steps; the worst case runs every model cell to it
    worst = expected + sum(calibration.extra_at_max_steps(w, cost.seconds(w)) for w in works if w.kind == "model")
    d = json.loads(json.dumps(cfg.to_dict(), default=str))  # as PLAN.json will hold it (tuples as lists)
    return {
        "name": name,
        "overrides": items,
        "config": d,
        "config_hash": run_hash(cfg),
        "run_key": make_run_key(cfg, opts.data, opts.trials, PLAN_DEVICE),
        "lengths": list(cfg.lengths),
        "seeds": list(cfg.train.seeds),
        "folds": cfg.splits.n_folds,
        "range": [str(cfg.data.start), str(cfg.data.end)],
        "patch": int(getattr(cfg.model, "patch", 1)),
        "recipe": recipe_words(d["train"]),
        "model_cells": sum(w.kind == "model" for w in works),
        "gpu_seconds": round(expected),
        "gpu_seconds_worst": round(worst),
        "nesting_unmeasured": nesting_unmeasured(cfg),
    }


def _ledger(symbol: str, added: int) -> list[dict]:
    """The trial ledger's periods of this symbol, each with its count now and with the plan's configurations."""
    from tsflash.stats.gate import TrialLedger

    return [
        {"period": p["key"], "now": len(p.get("trial", [])), "with_plan": len(p.get("trial", [])) + added}
        for p in TrialLedger.read().periods
        if str(p["key"]).startswith(symbol)
    ]


def _ledger_entries(plan: dict) -> list[dict]:
    """The trial ledger's entries the plan's runs on its own bars will need (trials.toml): each arm's
    configurations as trials, the A/A replicate's runs as not counted (the same configurations, other
    seeds), each with the config hash its run.json will carry (`TrialLedger.count_for` matches on it)."""
    entries = [
        {
            "arm": a["name"],
            "config_hash": a["config_hash"],
            "counted": True,
            "configs": [f"n{n}" for n in a["lengths"]] if plan["trials_per_n"] == 1 else [],
        }
        for a in plan["arms"]
    ]
    for c in plan["controls"]:
        if c["kind"] == AA_CONTROL:
            entries += [
                {
                    "arm": f"{CONTROLS_DIR}/{AA_CONTROL}/{a['name']}",
                    "config_hash": a["config_hash"],
                    "counted": False,
                    "configs": [],
                }
                for a in c["arms"]
            ]
    return entries


def _ledger_markdown(plan: dict, out: Path) -> list[str]:
    """PLAN.md's trial ledger: each period's count now and with the plan, and the lines to add."""
    plural = wording.plural

    lines = [
        f'- Trial ledger, period "{row["period"]}": {plural(row["now"], "trial")} now, '
        f"{row['with_plan']} with this plan's configurations (add them to `tsflash/stats/trials.toml` "
        "before the first report)."
        for row in plan["ledger"]
    ]
    if entries := _ledger_lines(plan, out):
        lines += [
            "",
            "The lines to add to that period in `tsflash/stats/trials.toml` (its `trial` list; a line marked "
            "not_counted to its `not_counted` list). A run whose config hash the period does not list counts its "
            "own configurations on top of the period's, never fewer:",
            "",
            "```toml",
            *entries,
            "```",
        ]
    return lines


def _ledger_lines(plan: dict, out: Path) -> list[str]:
    """`_ledger_entries` as the TOML lines to paste into the period of the plan's bars."""
    lines = []
    for e in plan.get("ledger_entries", []):
        run = (Path(out) / e["arm"]).as_posix()
        if not e["counted"]:
            lines.append(
                f'  {{ run = "{run}", config_hash = "{e["config_hash"]}", note = "plan {plan["plan_hash"]}: '
                'an A/A replicate of its arm, no new configuration" },  # not_counted'
            )
            continue
        for config in e["configs"] or ["<each trial key of its ledger.json>"]:
            lines.append(
                f'  {{ run = "{run}", config_hash = "{e["config_hash"]}", config = "{config}", '
                f'note = "plan {plan["plan_hash"]}, arm {e["arm"]}" }},'
            )
    return lines


# The strength ladder's entry of a plan at its shared overrides and first arm (resolved): its "command",
# "cost" (the command that prices it), "gpu_seconds", "gpu_seconds_worst" and "replicates". The ladder
# is a study of the lab (lab/power_ladder.py's `plan_entry`, `python -m lab.preregister --ladder`).
LadderEntry = Callable[[tuple[str, ...], dict], dict]
LADDER_KEYS = ("command", "cost", "gpu_seconds", "gpu_seconds_worst", "replicates")


def build_plan(
    opts: SweepOptions,
    arms: list[tuple[str, list[str]]],
    *,
    base: tuple[str, ...] = (),
    note: str = "",
    controls: Sequence[tuple[str, str]] = (),
    control_sets: Sequence[tuple[str, str]] = (),
    ladder: LadderEntry | None = None,
    aa_seeds: list[int] | None = None,
    stages: Sequence[tuple[str, list[str]]] = (),
) -> dict:  # long: one argument a line; the plan's dict literal, key by key
    """The plan as a dict (PLAN.json): nothing is read but the config presets and the trial ledger.
    `opts` holds what every arm shares (its overrides parsed from `base`, the --set items, kept as
    typed for the commands); each arm adds its own items. `aa_seeds`: the A/A replicate, every arm's
    config on the plan's own bars with these seeds (disjoint from the arms'), a control named "aa".
    `stages`: the order the runs go in (`plan_order`). `ladder`: the strength ladder's entry (`LadderEntry`)."""
    from tsflash.stats.forecasts import ALPHA
    from tsflash.sweep.provenance import git_commit

    if not arms:
        arms = [("per-bar", [])]
    names = [a for a, _ in arms]
    if len(set(names)) != len(names):
        raise UserError(f"--arm names must differ, got {', '.join(names)}")
    resolved = [_arm(name, items, opts) for name, items in arms]
    control_names = [c for c, _ in controls] + ([AA_CONTROL] if aa_seeds else [])
    if len(set(control_names)) != len(control_names):
        raise UserError(
            f"--control names must differ{' (--aa-seeds is the control aa)' if aa_seeds else ''}, "
            f"got {', '.join(c for c, _ in controls)}"
        )
    for a in resolved:
        if aa_seeds and (shared := sorted(set(aa_seeds) & set(a["seeds"]))):
            raise UserError(
                f"--aa-seeds must differ from every arm's seeds: {a['name']} trains seeds "
                f"{', '.join(map(str, a['seeds']))}, --aa-seeds repeats {', '.join(map(str, shared))}"
            )
    if unknown := sorted({c for c, _ in control_sets} - {c for c, _ in controls}):
        raise UserError(
            f"--control-set {unknown[0]}: no --control of that name "
            f"(controls: {', '.join(c for c, _ in controls) or 'none'})"
        )
    first = resolved[0]["config"]
    tests = sorted({a["config"]["eval"].get("seed_inference", "fold") for a in resolved})
    plan = {
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "git_commit": git_commit(),
        "note": note,
        "data": opts.data,
        "base_overrides": list(base),
        "symbol": first["data"]["symbol"],
        "range": [first["data"]["start"], first["data"]["end"]],
        "trials_per_n": opts.trials,
        "arms": resolved,
        "primary": {
            "question": 1,
            "test": tests,
            "alpha": ALPHA,
            "family": "Holm over each longer N against the shortest on the log-loss and the direction score, per arm",
            "rule": wording.RUN_ANSWER_RULE,
        },
        "nesting": {"cut": min(first["lengths"]), "rule": wording.NESTING_RULE},
        "ranking": {"rule": wording.RANKING_RULE} if len(first["lengths"]) > 2 else None,
        "probe": {
            "arms": [a["name"] for a in resolved if a["config"]["eval"].get("probe", False)],
            "rule": wording.PROBE_RULE,
        },
        "trading": {
            "min_dsr": first["selection"]["min_dsr"],
            "max_pbo": first["selection"]["max_pbo"],
            "fee_bps": first["eval"]["fee_bps"],
            "strategy": first["eval"].get("strategy"),
        },
        "ledger": _ledger(first["data"]["symbol"], sum(len(a["lengths"]) * opts.trials for a in resolved)),
        "outcomes": wording.plan_outcomes(pooled=bool(aa_seeds)),
        # each control runs every arm's config on its synthetic market: the cost of the arms again
        "controls": [
            _control(c, source, [i for n, i in control_sets if n == c], arms, resolved, opts) for c, source in controls
        ],
    }
    if aa_seeds:  # the same bars and configs, other initial weights: the primary test's false positives on them
        plan["controls"].append(
            _control(AA_CONTROL, opts.data, [f"train.seeds={list(aa_seeds)}"], arms, resolved, opts, kind="aa")
        )
        plan["primary"]["pooled"] = wording.POOLED_RULE  # ... and more seeds for question 1
    if ladder is not None:
        entry = ladder(tuple(base), resolved[0])
        if missing := [k for k in LADDER_KEYS if k not in entry]:
            raise ValueError(f"the ladder's plan entry lacks {', '.join(missing)}")
        plan["ladder"] = {k: entry[k] for k in LADDER_KEYS} | {"rule": wording.LADDER_RULE}
    plan["ledger_entries"] = _ledger_entries(plan)
    plan["order"] = plan_order(plan, stages)
    plan["order_rule"] = wording.ORDER_RULE
    plan["plan_hash"] = digest({k: v for k, v in plan.items() if k not in ("created", "git_commit")}, 12)
    return plan


def sweep_command(plan: dict, arm: dict, out: Path, control: dict | None = None) -> str:
    """The `tsflash sweep` command that runs one arm into its run folder (`run_dir_of`)."""
    data = plan["data"] if control is None else control["source"]
    own = control_arm(control, arm["name"]) if control else None
    start, end = own["range"] if own else plan["range"]
    lengths = own.get("lengths", arm["lengths"]) if own else arm["lengths"]  # an amendment's control: its own
    words = [
        "tsflash",
        "sweep",
        "--lengths",
        ",".join(map(str, lengths)),
        "--device",
        "cuda",
        "--preset",
        "full",
        "--data",
        data,
        "--start",
        start,
        "--end",
        end,
        "--out",
        str(run_dir_of(out, arm["name"], control)),
    ]
    if plan["trials_per_n"] != 1:
        words += ["--trials", str(plan["trials_per_n"])]
    extra = _split_range((control or {}).get("overrides", []))[1]
    for item in plan["base_overrides"] + arm["overrides"] + extra:
        words += ["--set", item]
    return shlex.join(words)


def plan_commands(plan: dict, out: Path) -> list[tuple[Path, str]]:
    """(run folder, the `tsflash sweep` command that runs it) of every run of `planned_runs`, in its
    order: each arm, then each control's arms."""
    arms = {a["name"]: a for a in plan["arms"]}  # the command is built from the arm as planned
    return [
        (run_dir, sweep_command(plan, arms[resolved["name"]], out, control))
        for _, control, resolved, run_dir in planned_runs(plan, out)
    ]


def ordered_commands(plan: dict, out: Path) -> list[tuple[str, Path, str]]:
    """(stage, run folder, command) of every planned run, the ladder's too, in the plan's order."""
    # a plan's ladder, where it has one, is never empty, so ladder_run gives its folder and command
    ladder = [cast(tuple[Path, str], ladder_run(plan, out))] if "ladder" in plan else []
    by_name = dict(zip(run_names(plan), plan_commands(plan, out) + ladder, strict=True))
    return [(stage["stage"], *by_name[name]) for stage in plan_order_of(plan) for name in stage["runs"]]


def ladder_run(plan: dict, out: Path) -> tuple[Path, str] | None:
    """(its folder, the command that runs it) of the plan's strength ladder; None without one."""
    if not (ladder := plan.get("ladder")):
        return None
    return out / LADDER_DIR, f"{ladder['command']} --runs {out / LADDER_DIR}"


def render_plan(plan: dict, out: Path) -> str:  # long: PLAN.md, section by section
    p, t = plan["primary"], plan["trading"]
    lines = [
        f"# Pre-registration (plan {plan['plan_hash']})",
        "",
        f"Written {plan['created']} at commit {plan['git_commit']}, before the run, by `tsflash preregister`; "
        f"[`{PLAN_JSON}`]({PLAN_JSON}) holds the same and each arm's whole resolved config. The run follows it; "
        "the report of each arm lists every departure from it (`tsflash preregister --check RUN`).",
        "",
    ]
    if plan.get("note"):
        lines += [plan["note"], ""]
    lines += [
        f"**Data**: `{plan['data']}`, {plan['symbol']}, {plan['range'][0]} .. {plan['range'][1]}.",
        "",
        "| arm | overrides | config hash | lengths | seeds | folds | model cells | GPU time expected (all cells at max steps) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in plan["arms"]:
        lines.append(
            f"| {a['name']} | {' '.join(f'`{o}`' for o in a['overrides']) or '-'} | `{a['config_hash']}` "
            f"| {', '.join(map(str, a['lengths']))} | {', '.join(map(str, a['seeds']))} "
            f"| {a['folds']} | {a['model_cells']} | {a['gpu_seconds'] / 60:.0f} min "
            f"({a['gpu_seconds_worst'] / 60:.0f} min) |"
        )
    controls = plan.get("controls", [])
    total, worst = (sum(a[k] for a in [*plan["arms"], *controls]) for k in ("gpu_seconds", "gpu_seconds_worst"))
    lines += [
        "",
        f"GPU time, all arms{' and controls' if controls else ''}: {total / 3600:.1f} h expected, "
        f"{worst / 3600:.1f} h if every cell runs its "
        "maximum steps (the calibrated cost table, `tsflash.sweep.progress`).",
        "",
        "Training recipe: " + "; ".join(f"{a['name']}: {a['recipe']}" for a in plan["arms"]) + ".",
        "",
    ]
    lines += [
        "## How the answer will be read",
        "",
        f"**Primary (question 1)**: over training runs, by the {' and '.join(p['test'])} test "
        f"(`eval.seed_inference`), {p['family']}, family-wise level {p['alpha']:g}. {p['rule']}"
        + (f" {p['pooled']}" if p.get("pooled") else ""),
        "",
        f"**Nesting check**: each longer N cut to {plan['nesting']['cut']} bars against "
        f"N={plan['nesting']['cut']}. {plan['nesting']['rule']}",
        "",
    ]
    for a in plan["arms"]:
        if a["nesting_unmeasured"]:
            lines += [f"- {a['name']}: {a['nesting_unmeasured']}.", ""]
    if plan.get("ranking"):
        lines += [f"**Ranking check**: {plan['ranking']['rule']}", ""]
    probe = plan.get("probe", {"arms": []})
    lines += [
        "**Linear information probe** (`eval.probe`, per N): "
        + (f"on in {', '.join(probe['arms'])}. {probe['rule']}" if probe["arms"] else "off in every arm."),
        "",
    ]
    lines += [
        f"**Question 2 (trading)**: at {t['fee_bps']:g} bps, the selected length must reach DSR >= "
        f"{t['min_dsr']} and PBO <= {t['max_pbo']}.",
        "",
    ]
    lines += _ledger_markdown(plan, out)
    if controls:
        lines += [
            "",
            "## Controls",
            "",
            f"Every arm's config on each synthetic market, unchanged but for a control's own settings "
            f"(runs in `{CONTROLS_DIR}/<control>/<arm>`); their reports list their departures from the plan "
            "like the arms'.",
            "",
            "| control | source | its own settings | the answer it should give | read as | GPU time, all arms (all cells at max steps) |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c['name']} | `{c['source']}` | {' '.join(f'`{o}`' for o in c.get('overrides', [])) or '-'} "
            f"| {c['expect']} | {c.get('rule', '-')} | {c['gpu_seconds'] / 60:.0f} min ({c['gpu_seconds_worst'] / 60:.0f} min) |"
            for c in controls
        ]
    if ladder := plan.get("ladder"):
        lines += [
            "",
            '## What "no" rules out: the strength ladder',
            "",
            ladder["rule"],
            "",
            f"Its design is the script's default (rungs and replicates chosen by its design study, "
            f"`reports/controls/power/design/`): {ladder['replicates']} replicates, "
            f"{ladder['gpu_seconds'] / 3600:.1f} h of one GPU expected, {ladder['gpu_seconds_worst'] / 3600:.1f} h "
            f"if every longest-N cell runs its maximum steps (`{ladder['cost']}`).",
            "",
        ]
    lines += [
        "",
        "## The order of the runs",
        "",
        plan["order_rule"],
        "",
        "| stage | runs | GPU time expected (all cells at max steps) | by its end |",
        "|---|---|---|---|",
    ]
    done = done_worst = 0
    for stage in plan["order"]:
        done, done_worst = done + stage["gpu_seconds"], done_worst + stage["gpu_seconds_worst"]
        lines.append(
            f"| {stage['stage']} | {', '.join(stage['runs'])} | {stage['gpu_seconds'] / 3600:.1f} h "
            f"({stage['gpu_seconds_worst'] / 3600:.1f} h) | {done / 3600:.1f} h ({done_worst / 3600:.1f} h) |"
        )
    lines += ["", "## The sentence each outcome will produce", ""]
    for o in plan["outcomes"]:
        lines.append(f'- **{o["outcome"]}**: "{o["sentence"]}"')
    lines += [
        "",
        "## The commands",
        "",
        "In the plan's order; rerun each until its run is complete (a sweep resumes where it stopped).",
        "",
        "```bash",
    ]
    stage = None
    for this, run_dir, command in ordered_commands(plan, out):
        if this != stage:
            lines += [f"# stage {this}"]
            stage = this
        lines.append(command if run_dir == out / LADDER_DIR else f"{command} --time-budget 400")  # the ladder's has one
    lines += ["```", ""]
    return "\n".join(lines)


def write_plan(plan: dict, out: Path) -> tuple[Path, Path]:
    """PLAN.json and PLAN.md into `out`, once: an existing plan there is never replaced."""
    out = Path(out)
    if (out / PLAN_JSON).exists():
        raise UserError(
            f"{out / PLAN_JSON} exists: a pre-registration is written once (plan "
            f"{read_json(out / PLAN_JSON).get('plan_hash')}); choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_text(out / PLAN_MD, render_plan(plan, out))
    atomic_text(out / PLAN_JSON, json.dumps(plan, indent=1, sort_keys=True) + "\n")  # last: its presence is the plan
    return out / PLAN_JSON, out / PLAN_MD


@functools.cache
def resolved_arm(
    name: str,
    items: tuple[str, ...],
    base: tuple[str, ...],
    symbol: str | None,
    lengths: tuple[int, ...],
    data: str,
    dates: tuple[str, str],
    trials: int,
) -> str:
    """One arm resolved by `_arm` at other lengths on another market (JSON: each caller gets a copy);
    cached, since every reader of an amended plan asks again. The resolver the plan's readers are
    handed (`tsflash.report.registration.ArmResolver`)."""
    from tsflash.config import merge_overrides
    from tsflash.sweep.plan import SweepOptions

    overrides = merge_overrides({"data": {"symbol": symbol}} if symbol else {}, parse_overrides(list(base)))
    opts = SweepOptions(
        lengths=list(lengths),
        data=data,
        start=dates[0],
        end=dates[1],
        trials=trials,
        preset="full",
        overrides=overrides,
    )
    return json.dumps(_arm(name, list(items), opts))


def amended_plan(plan_folder: Path, *, resolve: bool = True) -> dict:
    """The plan in `plan_folder` as amended (`tsflash.report.registration.amended_plan`), its added
    controls resolved and priced here (`resolved_arm`); `resolve=False` reads their names, folders
    and commands only (no torch)."""
    return registration.amended_plan(plan_folder, resolve=resolved_arm if resolve else None)


def check_run(plan_path: Path, run_dir: Path) -> tuple[str | None, list[str], str]:
    """(arm, departures, the report's line) of one run against its plan (`registration.check_run`),
    a control an amendment added resolved here."""
    return registration.check_run(plan_path, run_dir, resolved_arm)
