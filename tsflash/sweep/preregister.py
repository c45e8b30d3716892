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
reads it and lists every departure from it (`deviations`), and says "none" when there is none.
`tsflash preregister --check RUN` prints the same list (exit status 1 when there is any).

A plan is changed only by a dated amendment beside it (AMENDMENT.md, then AMENDMENT-2.md, ...): its
last section, a fenced json block, replaces the order, adds controls, or takes runs out of the
edition with their reasons (`read_amendments`, `amended_plan`). PLAN.json and its hash stay as
registered; every reader here takes the plan as amended.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import importlib.util
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tsflash.atomic import write_text as atomic_text
from tsflash.config import config_from_dict, recipe_words
from tsflash.data.synthetic import parse_source
from tsflash.errors import UserError
from tsflash.identity import digest
from tsflash.runfolder import RunFolder, read_json

if TYPE_CHECKING:
    from tsflash.sweep.plan import SweepOptions

# tsflash.sweep.plan (torch, optuna) is imported where a plan is built or a run checked: the report
# and the command line import this module, and neither loads them for nothing.
PLAN_JSON, PLAN_MD = "PLAN.json", "PLAN.md"
PLAN_DEVICE = "cuda"  # a plan is for the full config on a GPU, whatever machine writes it
AA_CONTROL = "aa"  # the A/A replicate's control name (`--aa-seeds`): runs in OUT/controls/aa/<arm>
LADDER_DIR = "ladder"  # the ladder's replicates and summary: OUT/ladder (its command's --runs in PLAN.md)
LADDER_RUN = "ladder"  # the ladder's name among the planned runs (--check, --stage, PLAN.json's order)
CALLS_DIR = "calls"  # one record per device call (lab/third_edition_h200.sh): the device time used


def parse_arm(text: str) -> tuple[str, list[str]]:
    """"patch16=model.patch=16,train.steps=600" -> ("patch16", ["model.patch=16", "train.steps=600"]);
    "per-bar=" is an arm with no override of its own."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"--arm expects NAME=KEY=VALUE[,KEY=VALUE...] (NAME of letters, digits, - and _; "
                        f"'NAME=' for none), got {text!r}")
    return name, [item for item in rest.split(",") if item]


CONTROLS_DIR = "controls"  # a control's runs: OUT/controls/<control>/<arm>


def parse_control(text: str) -> tuple[str, str]:
    """"echo=synthetic:long-memory:0:strength=0.2" -> ("echo", that source): a control run of every
    arm on a synthetic market (same config, same protocol and size)."""
    name, sep, source = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum() or parse_source(source) is None:
        raise UserError(f"--control expects NAME=synthetic:KIND[:SEED][:k=v,...] (NAME of letters, digits, - and _), "
                        f"got {text!r}")
    return name, source


def parse_control_set(text: str) -> tuple[str, str]:
    """"regime=splits.n_folds=10" -> ("regime", "splits.n_folds=10"): one setting of one control's
    own, on top of every arm's config (one item a flag: a value may hold commas)."""
    name, sep, item = text.partition("=")
    if not sep or not name or "=" not in item or not item.partition("=")[0]:
        raise UserError(f"--control-set expects NAME=KEY=VALUE (a control's name, then a config setting), got {text!r}")
    return name, item


def parse_stage(text: str) -> tuple[str, list[str]]:
    """"first=per-bar,aa/per-bar,echo/*" -> ("first", [those patterns]): one stage of the plan's order,
    its runs by their names in `tsflash preregister --check` (an arm, CONTROL/ARM, or ladder), each
    name or shell pattern matching the runs not in an earlier stage."""
    name, sep, rest = text.partition("=")
    patterns = [p for p in rest.split(",") if p]
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum() or not patterns:
        raise UserError(f"--stage expects NAME=RUN[,RUN...] (NAME of letters, digits, - and _; a RUN is a planned "
                        f"run's name or a pattern such as '*/per-bar'), got {text!r}")
    return name, patterns


# data.start and data.end of a control are its market's range: given to the sweep as --start/--end
RANGE_KEYS = ("data.start", "data.end")


def _split_range(items: list[str]) -> tuple[list[str], list[str]]:
    """(a control's range items, its other items)."""
    ranged = [i for i in items if i.partition("=")[0] in RANGE_KEYS]
    return ranged, [i for i in items if i not in ranged]


def _control(name: str, source: str, items: list[str], arms: list[tuple[str, list[str]]], resolved: list[dict],
             opts: SweepOptions, kind: str | None = None) -> dict:
    """One control: every arm's config on its synthetic market (or, `kind` "aa", on the plan's own
    bars with other seeds); with items of its own, each arm's config resolved again with them (its
    hash, folds and cost are then the control's)."""
    from tsflash.report import wording
    from tsflash.report.edition import CONTROL_RULES

    kind = kind or parse_source(source)[0]
    control = {"name": name, "source": source, "kind": kind, "expect": wording.CONTROL_EXPECTATIONS[kind],
               "rule": CONTROL_RULES[kind]}
    if items:
        from tsflash.commands.options import parse_overrides

        ranged, rest = _split_range(items)
        own = replace(opts, **{k: str(v) for k, v in parse_overrides(ranged).get("data", {}).items()})
        resolved = [_arm(a, a_items + rest, own) for a, a_items in arms]
        control |= {"overrides": items, "arms": [{k: r[k] for k in ("name", "config", "config_hash", "folds", "range",
                                                                     "gpu_seconds", "gpu_seconds_worst")}
                                                  for r in resolved]}
    return control | {"gpu_seconds": sum(a["gpu_seconds"] for a in resolved),
                      "gpu_seconds_worst": sum(a["gpu_seconds_worst"] for a in resolved)}


def _arm(name: str, items: list[str], opts: SweepOptions) -> dict:
    """One arm: the base options with the arm's --set items, resolved for the GPU."""
    from tsflash.commands.options import parse_overrides
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
    return {"name": name, "overrides": items, "config": d, "config_hash": run_hash(cfg),
            "run_key": make_run_key(cfg, opts.data, opts.trials, PLAN_DEVICE),
            "lengths": list(cfg.lengths), "seeds": list(cfg.train.seeds), "folds": cfg.splits.n_folds,
            "range": [str(cfg.data.start), str(cfg.data.end)],
            "patch": int(getattr(cfg.model, "patch", 1)), "recipe": recipe_words(d["train"]),
            "model_cells": sum(w.kind == "model" for w in works),
            "gpu_seconds": round(expected), "gpu_seconds_worst": round(worst),
            "nesting_unmeasured": nesting_unmeasured(cfg)}


def _ledger(symbol: str, added: int) -> list[dict]:
    """The trial ledger's periods of this symbol, each with its count now and with the plan's configurations."""
    from tsflash.stats.gate import TrialLedger

    return [{"period": p["key"], "now": len(p.get("trial", [])), "with_plan": len(p.get("trial", [])) + added}
            for p in TrialLedger.read().periods if str(p["key"]).startswith(symbol)]


def _ledger_entries(plan: dict) -> list[dict]:
    """The trial ledger's entries the plan's runs on its own bars will need (trials.toml): each arm's
    configurations as trials, the A/A replicate's runs as not counted (the same configurations, other
    seeds), each with the config hash its run.json will carry (`TrialLedger.count_for` matches on it)."""
    entries = [{"arm": a["name"], "config_hash": a["config_hash"], "counted": True,
                "configs": [f"n{n}" for n in a["lengths"]] if plan["trials_per_n"] == 1 else []}
               for a in plan["arms"]]
    for c in plan["controls"]:
        if c["kind"] == AA_CONTROL:
            entries += [{"arm": f"{CONTROLS_DIR}/{AA_CONTROL}/{a['name']}", "config_hash": a["config_hash"],
                         "counted": False, "configs": []} for a in c["arms"]]
    return entries


def _ledger_markdown(plan: dict, out: Path) -> list[str]:
    """PLAN.md's trial ledger: each period's count now and with the plan, and the lines to add."""
    from tsflash.report.wording import plural

    lines = [f"- Trial ledger, period \"{row['period']}\": {plural(row['now'], 'trial')} now, "
             f"{row['with_plan']} with this plan's configurations (add them to `tsflash/stats/trials.toml` "
             "before the first report)." for row in plan["ledger"]]
    if entries := _ledger_lines(plan, out):
        lines += ["", "The lines to add to that period in `tsflash/stats/trials.toml` (its `trial` list; a line marked "
                  "not_counted to its `not_counted` list). A run whose config hash the period does not list counts its "
                  "own configurations on top of the period's, never fewer:", "", "```toml", *entries, "```"]
    return lines


def _ledger_lines(plan: dict, out: Path) -> list[str]:
    """`_ledger_entries` as the TOML lines to paste into the period of the plan's bars."""
    lines = []
    for e in plan.get("ledger_entries", []):
        run = (Path(out) / e["arm"]).as_posix()
        if not e["counted"]:
            lines.append(f'  {{ run = "{run}", config_hash = "{e["config_hash"]}", note = "plan {plan["plan_hash"]}: '
                         'an A/A replicate of its arm, no new configuration" },  # not_counted')
            continue
        for config in e["configs"] or ["<each trial key of its ledger.json>"]:
            lines.append(f'  {{ run = "{run}", config_hash = "{e["config_hash"]}", config = "{config}", '
                         f'note = "plan {plan["plan_hash"]}, arm {e["arm"]}" }},')
    return lines


LADDER_SCRIPT = "lab/power_ladder.py"  # the strength ladder (what a "no" rules out)


def ladder_command(base: tuple[str, ...], *flags: str) -> str:
    """The strength ladder script with `flags`, at the plan's shared overrides (the arms' training rule)."""
    return shlex.join(["python", LADDER_SCRIPT, *flags, *[w for item in base for w in ("--set", item)]])


def _ladder_script():
    """lab/power_ladder.py of this checkout, loaded as a module (the experiment scripts are not
    a package): its cost plan prices the ladder from the same calibrated table as the arms."""
    path = Path(__file__).resolve().parents[2] / LADDER_SCRIPT
    if not path.is_file():
        raise UserError(f"--ladder needs {LADDER_SCRIPT} of a tsflash checkout, not found at {path}")
    spec = importlib.util.spec_from_file_location("power_ladder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ladder_lengths(arm: dict) -> str:
    """The ladder's --lengths: the shortest and the longest N of the plan's first arm."""
    return f"{min(arm['lengths'])},{max(arm['lengths'])}"


def _ladder_cost(base: tuple[str, ...], lengths: str) -> dict:
    """The ladder's H200 seconds (every rung's replicates, expected and with every longest-N cell at its
    maximum steps) and its replicates, by the script's own `cost_plan` at the plan's overrides."""
    script = _ladder_script()
    cost = script.cost_plan(script.parse_args(["--lengths", lengths, *[w for i in base for w in ("--set", i)]]))
    return {"gpu_seconds": round(cost["ladder_s"]), "gpu_seconds_worst": round(cost["ladder_worst_s"]),
            "replicates": cost["replicates_planned"]}


def build_plan(opts: SweepOptions, arms: list[tuple[str, list[str]]], *, base: tuple[str, ...] = (),
               note: str = "", controls: list[tuple[str, str]] = (),
               control_sets: list[tuple[str, str]] = (), ladder: bool = False,
               aa_seeds: list[int] | None = None, stages: list[tuple[str, list[str]]] = ()) -> dict:
    """The plan as a dict (PLAN.json): nothing is read but the config presets and the trial ledger.
    `opts` holds what every arm shares (its overrides parsed from `base`, the --set items, kept as
    typed for the commands); each arm adds its own items. `aa_seeds`: the A/A replicate, every arm's
    config on the plan's own bars with these seeds (disjoint from the arms'), a control named "aa".
    `stages`: the order the runs go in (`plan_order`)."""
    from tsflash.report import wording
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
        raise UserError(f"--control names must differ{' (--aa-seeds is the control aa)' if aa_seeds else ''}, "
                        f"got {', '.join(c for c, _ in controls)}")
    for a in resolved if aa_seeds else ():
        if shared := sorted(set(aa_seeds) & set(a["seeds"])):
            raise UserError(f"--aa-seeds must differ from every arm's seeds: {a['name']} trains seeds "
                            f"{', '.join(map(str, a['seeds']))}, --aa-seeds repeats {', '.join(map(str, shared))}")
    if unknown := sorted({c for c, _ in control_sets} - {c for c, _ in controls}):
        raise UserError(f"--control-set {unknown[0]}: no --control of that name "
                        f"(controls: {', '.join(c for c, _ in controls) or 'none'})")
    first = resolved[0]["config"]
    tests = sorted({a["config"]["eval"].get("seed_inference", "fold") for a in resolved})
    plan = {
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), "git_commit": git_commit(),
        "note": note, "data": opts.data, "base_overrides": list(base), "symbol": first["data"]["symbol"],
        "range": [first["data"]["start"], first["data"]["end"]], "trials_per_n": opts.trials, "arms": resolved,
        "primary": {"question": 1, "test": tests, "alpha": ALPHA, "family": "Holm over each longer N against the "
                    "shortest on the log-loss and the direction score, per arm",
                    "rule": wording.RUN_ANSWER_RULE},
        "nesting": {"cut": min(first["lengths"]), "rule": wording.NESTING_RULE},
        "ranking": {"rule": wording.RANKING_RULE} if len(first["lengths"]) > 2 else None,
        "probe": {"arms": [a["name"] for a in resolved if a["config"]["eval"].get("probe", False)],
                  "rule": wording.PROBE_RULE},
        "trading": {"min_dsr": first["selection"]["min_dsr"], "max_pbo": first["selection"]["max_pbo"],
                    "fee_bps": first["eval"]["fee_bps"], "strategy": first["eval"].get("strategy")},
        "ledger": _ledger(first["data"]["symbol"], sum(len(a["lengths"]) * opts.trials for a in resolved)),
        "outcomes": wording.plan_outcomes(pooled=bool(aa_seeds)),
        # each control runs every arm's config on its synthetic market: the cost of the arms again
        "controls": [_control(c, source, [i for n, i in control_sets if n == c], arms, resolved, opts)
                     for c, source in controls],
    }
    if aa_seeds:  # the same bars and configs, other initial weights: the primary test's false positives on them
        plan["controls"].append(_control(AA_CONTROL, opts.data, [f"train.seeds={list(aa_seeds)}"], arms, resolved,
                                         opts, kind="aa"))
        plan["primary"]["pooled"] = wording.POOLED_RULE  # ... and more seeds for question 1
    if ladder:  # its design (rungs, replicates) is the script's own default, chosen by its design study
        # N=512 against the longest N, resumable in slices like the arms
        lengths = _ladder_lengths(first)
        plan["ladder"] = {"command": ladder_command(base, "--device", "cuda", "--lengths", lengths, "--time-budget", "400"),
                          "rule": wording.LADDER_RULE, "cost": ladder_command(base, "--plan")} | _ladder_cost(base, lengths)
    plan["ledger_entries"] = _ledger_entries(plan)
    plan["order"] = plan_order(plan, stages)
    plan["order_rule"] = wording.ORDER_RULE
    plan["plan_hash"] = digest({k: v for k, v in plan.items() if k not in ("created", "git_commit")}, 12)
    return plan


def run_dir_of(out: Path, arm: str, control: dict | None = None) -> Path:
    """Where a plan's run goes: one arm into OUT/<arm>, or on a control's market into
    OUT/controls/<control>/<arm> (`plan_for` and `control_of` read the same layout back)."""
    return out / arm if control is None else out / CONTROLS_DIR / control["name"] / arm


def sweep_command(plan: dict, arm: dict, out: Path, control: dict | None = None) -> str:
    """The `tsflash sweep` command that runs one arm into its run folder (`run_dir_of`)."""
    data = plan["data"] if control is None else control["source"]
    own = control_arm(control, arm["name"]) if control else None
    start, end = own["range"] if own else plan["range"]
    lengths = own.get("lengths", arm["lengths"]) if own else arm["lengths"]  # an amendment's control: its own
    words = ["tsflash", "sweep", "--lengths", ",".join(map(str, lengths)), "--device", "cuda",
             "--preset", "full", "--data", data, "--start", start, "--end", end,
             "--out", str(run_dir_of(out, arm["name"], control))]
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
    return [(run_dir, sweep_command(plan, arms[resolved["name"]], out, control))
            for _, control, resolved, run_dir in planned_runs(plan, out)]


def ordered_commands(plan: dict, out: Path) -> list[tuple[str, Path, str]]:
    """(stage, run folder, command) of every planned run, the ladder's too, in the plan's order."""
    by_name = dict(zip(run_names(plan), plan_commands(plan, out) + ([ladder_run(plan, out)] if "ladder" in plan else [])))
    return [(stage["stage"], *by_name[name]) for stage in plan_order_of(plan) for name in stage["runs"]]


def plan_order_of(plan: dict) -> list[dict]:
    """The plan's order as written (a plan written before stages existed: one stage, every run)."""
    return plan.get("order") or plan_order(plan)


def ladder_run(plan: dict, out: Path) -> tuple[Path, str] | None:
    """(its folder, the command that runs it) of the plan's strength ladder; None without one."""
    if not (ladder := plan.get("ladder")):
        return None
    return out / LADDER_DIR, f"{ladder['command']} --runs {out / LADDER_DIR}"


def control_arm(control: dict, arm: str) -> dict | None:
    """A control's own resolution of one arm (its config with the control's settings), or None when
    the control runs every arm's config unchanged."""
    return next((a for a in control.get("arms", []) if a["name"] == arm), None)


def render_plan(plan: dict, out: Path) -> str:
    from tsflash.report.wording import plural

    p, t = plan["primary"], plan["trading"]
    lines = [f"# Pre-registration (plan {plan['plan_hash']})", "",
             f"Written {plan['created']} at commit {plan['git_commit']}, before the run, by `tsflash preregister`; "
             f"[`{PLAN_JSON}`]({PLAN_JSON}) holds the same and each arm's whole resolved config. The run follows it; "
             "the report of each arm lists every departure from it (`tsflash preregister --check RUN`).", ""]
    if plan.get("note"):
        lines += [plan["note"], ""]
    lines += [f"**Data**: `{plan['data']}`, {plan['symbol']}, {plan['range'][0]} .. {plan['range'][1]}.", "",
              "| arm | overrides | config hash | lengths | seeds | folds | model cells | H200 time expected (all cells at max steps) |",
              "|---|---|---|---|---|---|---|---|"]
    for a in plan["arms"]:
        lines.append(f"| {a['name']} | {' '.join(f'`{o}`' for o in a['overrides']) or '-'} | `{a['config_hash']}` "
                     f"| {', '.join(map(str, a['lengths']))} | {', '.join(map(str, a['seeds']))} "
                     f"| {a['folds']} | {a['model_cells']} | {a['gpu_seconds'] / 60:.0f} min "
                     f"({a['gpu_seconds_worst'] / 60:.0f} min) |")
    controls = plan.get("controls", [])
    total, worst = (sum(a[k] for a in [*plan["arms"], *controls]) for k in ("gpu_seconds", "gpu_seconds_worst"))
    lines += ["", f"GPU time, all arms{' and controls' if controls else ''}: {total / 3600:.1f} h expected, "
              f"{worst / 3600:.1f} h if every cell runs its "
              "maximum steps (the calibrated cost table, `tsflash.sweep.progress`).", "",
              "Training recipe: " + "; ".join(f"{a['name']}: {a['recipe']}" for a in plan["arms"]) + ".", ""]
    lines += ["## How the answer will be read", "",
              f"**Primary (question 1)**: over training runs, by the {' and '.join(p['test'])} test "
              f"(`eval.seed_inference`), {p['family']}, family-wise level {p['alpha']:g}. {p['rule']}"
              + (f" {p['pooled']}" if p.get("pooled") else ""), "",
              f"**Nesting check**: each longer N cut to {plan['nesting']['cut']} bars against "
              f"N={plan['nesting']['cut']}. {plan['nesting']['rule']}", ""]
    for a in plan["arms"]:
        if a["nesting_unmeasured"]:
            lines += [f"- {a['name']}: {a['nesting_unmeasured']}.", ""]
    if plan.get("ranking"):
        lines += [f"**Ranking check**: {plan['ranking']['rule']}", ""]
    probe = plan.get("probe", {"arms": []})
    lines += [f"**Linear information probe** (`eval.probe`, per N): "
              + (f"on in {', '.join(probe['arms'])}. {probe['rule']}" if probe["arms"] else "off in every arm."), ""]
    lines += [f"**Question 2 (trading)**: at {t['fee_bps']:g} bps, the selected length must reach DSR >= "
              f"{t['min_dsr']} and PBO <= {t['max_pbo']}.", ""]
    lines += _ledger_markdown(plan, out)
    if controls:
        lines += ["", "## Controls", "",
                  f"Every arm's config on each synthetic market, unchanged but for a control's own settings "
                  f"(runs in `{CONTROLS_DIR}/<control>/<arm>`); their reports list their departures from the plan "
                  "like the arms'.", "",
                  "| control | source | its own settings | the answer it should give | read as | H200 time, all arms (all cells at max steps) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {c['name']} | `{c['source']}` | {' '.join(f'`{o}`' for o in c.get('overrides', [])) or '-'} "
                  f"| {c['expect']} | {c.get('rule', '-')} | {c['gpu_seconds'] / 60:.0f} min ({c['gpu_seconds_worst'] / 60:.0f} min) |"
                  for c in controls]
    if ladder := plan.get("ladder"):
        lines += ["", "## What \"no\" rules out: the strength ladder", "", ladder["rule"], "",
                  f"Its design is the script's default (rungs and replicates chosen by its design study, "
                  f"`reports/controls/power/design/`): {ladder['replicates']} replicates, "
                  f"{ladder['gpu_seconds'] / 3600:.1f} h of one H200 expected, {ladder['gpu_seconds_worst'] / 3600:.1f} h "
                  f"if every longest-N cell runs its maximum steps (`{ladder['cost']}`).", ""]
    lines += ["", "## The order of the runs", "", plan["order_rule"], "",
              "| stage | runs | H200 time expected (all cells at max steps) | by its end |", "|---|---|---|---|"]
    done = done_worst = 0
    for stage in plan["order"]:
        done, done_worst = done + stage["gpu_seconds"], done_worst + stage["gpu_seconds_worst"]
        lines.append(f"| {stage['stage']} | {', '.join(stage['runs'])} | {stage['gpu_seconds'] / 3600:.1f} h "
                     f"({stage['gpu_seconds_worst'] / 3600:.1f} h) | {done / 3600:.1f} h ({done_worst / 3600:.1f} h) |")
    lines += ["", "## The sentence each outcome will produce", ""]
    for o in plan["outcomes"]:
        lines.append(f"- **{o['outcome']}**: \"{o['sentence']}\"")
    lines += ["", "## The commands", "", "In the plan's order; rerun each until its run is complete (a sweep "
              "resumes where it stopped).", "", "```bash"]
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
        raise UserError(f"{out / PLAN_JSON} exists: a pre-registration is written once (plan "
                        f"{read_json(out / PLAN_JSON).get('plan_hash')}); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    atomic_text(out / PLAN_MD, render_plan(plan, out))
    atomic_text(out / PLAN_JSON, json.dumps(plan, indent=1, sort_keys=True) + "\n")  # last: its presence is the plan
    return out / PLAN_JSON, out / PLAN_MD


def plan_for(run_dir: Path) -> Path | None:
    """The PLAN.json a run folder answers to: in its parent folder (OUT/<arm>), or for a control's
    run (OUT/controls/<control>/<arm>) three folders up; None when there is none."""
    run = Path(run_dir).resolve()
    for path in (run.parent / PLAN_JSON,
                 run.parents[2] / PLAN_JSON if len(run.parents) > 2 and run.parents[1].name == CONTROLS_DIR else None):
        if path is not None and path.is_file():
            return path
    return None


def control_of(plan: dict, run_dir: Path) -> dict | None:
    """The plan's control a run folder is (OUT/controls/<control>/<arm>), or None."""
    run = Path(run_dir).resolve()
    if run.parents[1].name != CONTROLS_DIR:
        return None
    return next((c for c in plan.get("controls", []) if c["name"] == run.parent.name), None)


def replicated_run(run_dir: Path) -> Path | None:
    """For the run of a plan's A/A replicate (OUT/controls/aa/<arm>), the arm's own run folder it is
    read against (OUT/<arm>); None for any other run."""
    plan_path = plan_for(run_dir)
    control = control_of(amended_plan(plan_path.parent, resolve=False), run_dir) if plan_path else None
    if control is None or control["kind"] != AA_CONTROL:
        return None
    return run_dir_of(plan_path.parent, Path(run_dir).resolve().name)


def deviations(plan: dict, run_dir: Path) -> tuple[str | None, list[str]]:
    """(the arm this run is, every departure from the plan); the arm is the one named by the
    folder, else the one with the run's config hash."""
    folder = RunFolder(run_dir)
    if not folder.config_json.exists():
        raise UserError(f"{run_dir}: no config.json, not a sweep run folder")
    cfg = config_from_dict(read_json(folder.config_json))
    run = folder.read_run()
    run_hash = run.get("config_hash")  # tsflash.sweep.plan.run_hash of the config, as the sweep recorded it
    arms = {a["name"]: a for a in plan["arms"]}
    arm = arms.get(Path(run_dir).name) or next((a for a in plan["arms"] if a["config_hash"] == run_hash), None)
    if arm is None:
        return None, [f"the run is none of the plan's arms ({', '.join(arms)}): folder {Path(run_dir).name}, "
                      f"config hash {run_hash}"]
    found = []
    from tsflash.report.rescore import flat_overrides  # {"a": {"b": 1}} -> {"a.b": 1}

    control = control_of(plan, run_dir)
    own = control_arm(control, arm["name"]) if control else None
    name = arm["name"] if control is None else f"{control['name']}/{arm['name']}"
    if name in plan.get("not_run", {}):
        file = plan["amendments"][-1]["file"]
        found.append(f"run {name}: {NOT_RUN} ({file}: {plan['not_run'][name]}), yet it ran")
    planned, ran = (flat_overrides(json.loads(json.dumps(c, default=str)))
                    for c in ((own or arm)["config"], cfg.to_dict()))
    for key in sorted(planned.keys() | ran.keys()):
        if planned.get(key) != ran.get(key):
            found.append(f"{key}: planned {planned.get(key)!r}, ran {ran.get(key)!r}")
    # a bar store's folder is where the bars are, not what they are (data.json fingerprints them):
    # only a synthetic source, or a change between synthetic and stored bars, departs
    planned_data = plan["data"] if control is None else control["source"]
    ran_data = run.get("data", planned_data)
    if ran_data != planned_data and (parse_source(ran_data) or parse_source(planned_data)):
        found.append(f"data: planned {planned_data!r}, ran {ran_data!r}")
    if run.get("trials_per_length", plan["trials_per_n"]) != plan["trials_per_n"]:
        found.append(f"trials per N: planned {plan['trials_per_n']}, ran {run.get('trials_per_length')}")
    return arm["name"], found


def check_run(plan_path: Path, run_dir: Path) -> tuple[str | None, list[str], str]:
    """(arm, departures, the report's line): which plan (as amended), which arm, and its departures
    ("none"). A run still in progress is no departure (the sweep writes its report before it marks the
    run complete). Only the run of a control an amendment added needs that control resolved (torch)."""
    run = Path(run_dir).resolve()
    added = {c["name"] for a in read_amendments(plan_path.parent) for c in a.get("add_controls", [])}
    plan = amended_plan(plan_path.parent, resolve=run.parents[1].name == CONTROLS_DIR and run.parent.name in added)
    arm, found = deviations(plan, run_dir)
    return arm, found, _sentence(plan, plan_path, arm, found)


def deviations_sentence(plan_path: Path, run_dir: Path) -> str:
    """The report's line of a pre-registered run (`check_run`)."""
    return check_run(plan_path, run_dir)[2]


def _sentence(plan: dict, plan_path: Path, arm: str | None, found: list[str]) -> str:
    amended = f", {amended_words(plan)}" if plan.get("amendments") else ""
    head = f"Pre-registered: plan {plan.get('plan_hash')} ({plan_path.name} of this run's plan folder{amended})"
    if arm is None:
        return f"{head}; {found[0]}."
    return f"{head}, arm {arm}; deviations from it: " + ("; ".join(found) if found else "none") + "."


# ---------------------------------------------------------------------------------------------
# Amendments: a dated change to a registered plan, written before the runs it changes. PLAN.json
# stays as registered (and its hash with it); every reader applies the amendments over it.

AMENDMENT_MD = "AMENDMENT.md"  # the first amendment; later ones are AMENDMENT-2.md, AMENDMENT-3.md, ...
NOT_RUN = "not run in this edition"  # a not-run row's state: "not run in this edition: <reason>"
_AMENDMENT_KEYS = ("amendment", "date", "plan_hash", "written_at_commit", "order", "add_controls", "not_run",
                   "ledger_removed")
_REQUIRED_KEYS = ("amendment", "date", "plan_hash")
_ADDED_CONTROL_KEYS = ("name", "source", "arms", "lengths", "expect", "oracle_gain")
# the last fenced json block of the file: the amendment's machine-read part
_JSON_BLOCK = re.compile(r"^```json[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def amendment_files(plan_folder: Path) -> list[Path]:
    """The plan folder's amendments in the order they apply: AMENDMENT.md, AMENDMENT-2.md, ...
    A file named otherwise (AMENDMENT-x.md), or a number with none before it, is refused in one line."""
    folder = Path(plan_folder)
    numbered = {1: folder / AMENDMENT_MD} if (folder / AMENDMENT_MD).is_file() else {}
    for path in sorted(folder.glob("AMENDMENT-*.md")):
        k = path.stem.partition("-")[2]
        if not k.isdigit() or int(k) < 2:
            raise UserError(f"{path}: an amendment's file is {AMENDMENT_MD}, then AMENDMENT-2.md, AMENDMENT-3.md, ...")
        numbered[int(k)] = path
    for k in sorted(numbered):
        if k > 1 and k - 1 not in numbered:
            before = AMENDMENT_MD if k == 2 else f"AMENDMENT-{k - 1}.md"
            raise UserError(f"{numbered[k]}: amendment {k} has no {before} before it")
    return [numbered[k] for k in sorted(numbered)]


def _json_block(path: Path) -> dict:
    """The amendment's last fenced json block, parsed."""
    blocks = _JSON_BLOCK.findall(path.read_text(encoding="utf-8"))
    if not blocks:
        raise UserError(f"{path}: no ```json block (an amendment's machine-read part, its last section)")
    try:
        block = json.loads(blocks[-1])
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: its ```json block is not JSON: {exc} (lines counted from the block's first)") from None
    if not isinstance(block, dict):
        raise UserError(f"{path}: its ```json block must be an object {{...}}, got {type(block).__name__}")
    return block


def _need(ok: bool, path: Path, problem: str) -> None:
    """One clear line naming the amendment's file and the problem."""
    if not ok:
        raise UserError(f"{path}: {problem}")


def _is_name(text) -> bool:
    return isinstance(text, str) and bool(text) and text.replace("-", "").replace("_", "").replace(".", "").isalnum()


def _check_added_control(c, path: Path, plan: dict) -> None:
    """One entry of add_controls: its keys and types, a new name, a synthetic source, planned arms, lengths."""
    _need(isinstance(c, dict), path, f"each add_controls entry must be an object, got {c!r}")
    name = c.get("name")
    _need(not (extra := sorted(c.keys() - set(_ADDED_CONTROL_KEYS))), path,
          f"add_controls {name!r}: unknown key {extra[0] if extra else ''!r} (known: {', '.join(_ADDED_CONTROL_KEYS)})")
    _need(_is_name(name), path, f"add_controls: a control's name is letters, digits, '.', '-' and '_', got {name!r}")
    taken = [x["name"] for x in plan.get("controls", [])]
    _need(name not in taken, path, f"add_controls {name!r}: the plan already has a control of that name "
                                   f"({', '.join(taken)})")
    source = c.get("source")
    try:
        synthetic = isinstance(source, str) and parse_source(source) is not None
    except UserError as exc:
        raise UserError(f"{path}: add_controls {name!r}: {exc}") from None
    _need(synthetic, path, f"add_controls {name!r}: source must be a synthetic market "
                           f"(synthetic:KIND[:SEED][:k=v,...]), got {source!r}")
    arms = [a["name"] for a in plan["arms"]]
    given = c.get("arms")
    _need(isinstance(given, list) and bool(given) and all(a in arms for a in given) and len(set(given)) == len(given),
          path, f"add_controls {name!r}: arms must name distinct arms of the plan ({', '.join(arms)}), got {given!r}")
    lengths = c.get("lengths")
    _need(isinstance(lengths, list) and bool(lengths) and len(set(lengths)) == len(lengths)
          and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths), path,
          f"add_controls {name!r}: lengths must be distinct positive integers, got {lengths!r}")
    _need(isinstance(c.get("expect", ""), str), path, f"add_controls {name!r}: expect must be a sentence")


def _check_amendment(block: dict, path: Path, number: int, plan: dict) -> None:
    """Refuse, in one line naming the file, an amendment that is not to this plan or names what it lacks."""
    _need(not (extra := sorted(block.keys() - set(_AMENDMENT_KEYS))), path,
          f"unknown key {extra[0] if extra else ''!r} in its JSON block (known: {', '.join(_AMENDMENT_KEYS)})")
    _need(not (missing := [k for k in _REQUIRED_KEYS if k not in block]), path,
          f"its JSON block lacks {', '.join(missing)}")
    _need(block["amendment"] == number, path, f"\"amendment\": {block['amendment']!r}, but the file is amendment {number}")
    try:
        dt.date.fromisoformat(str(block["date"]))
    except ValueError:
        raise UserError(f"{path}: \"date\" must be YYYY-MM-DD, got {block['date']!r}") from None
    _need(block["plan_hash"] == plan["plan_hash"], path, f"plan_hash {block['plan_hash']!r} is not the plan's: "
                                                         f"{PLAN_JSON} beside it is plan {plan['plan_hash']}")
    added = block.get("add_controls", [])
    _need(isinstance(added, list), path, "add_controls must be a list of controls")
    for c in added:
        _check_added_control(c, path, plan)
    _need(len({c["name"] for c in added}) == len(added), path, "add_controls: the controls' names must differ")
    known = run_names(plan) + [f"{c['name']}/{a}" for c in added for a in c["arms"]]

    def _known(run, where: str) -> None:
        _need(run in known, path, f"{where} names run {run!r}, which is neither in plan {plan['plan_hash']} nor in "
                                  f"its add_controls (runs: {', '.join(known)})")

    order = block.get("order")
    if order is not None:
        _need(isinstance(order, list) and bool(order), path, "order must be a non-empty list of stages")
        seen: list[str] = []
        for stage in order:
            _need(isinstance(stage, dict) and set(stage) == {"stage", "runs"} and _is_name(stage["stage"])
                  and isinstance(stage["runs"], list) and bool(stage["runs"]), path,
                  f"each stage of order is {{\"stage\": NAME, \"runs\": [RUN, ...]}}, got {stage!r}")
            for run in stage["runs"]:
                _known(run, f"order, stage {stage['stage']},")
                _need(run not in seen, path, f"order names run {run!r} twice")
                seen.append(run)
        stages = [st["stage"] for st in order]
        _need(len(set(stages)) == len(stages), path, f"order's stage names must differ, got {', '.join(stages)}")
    not_run = block.get("not_run", {})
    _need(isinstance(not_run, dict), path, "not_run must be an object {RUN: REASON, ...}")
    for run, reason in not_run.items():
        _known(run, "not_run")
        _need(isinstance(reason, str) and bool(reason.strip()), path, f"not_run {run!r}: give its reason, not {reason!r}")
        _need(run not in [r for st in order or () for r in st["runs"]], path,
              f"run {run!r} is both in order and in not_run")
    removed = block.get("ledger_removed", [])
    _need(isinstance(removed, list), path, "ledger_removed must be a list of runs")
    entries = [e["arm"] for e in plan.get("ledger_entries", [])]
    for run in removed:
        _known(run, "ledger_removed")
        _need(_ledger_arm(run) in entries, path, f"ledger_removed names run {run!r}, which has no entry in the plan's "
                                                 f"trial ledger lines ({', '.join(entries) or 'none'})")


def _ledger_arm(run: str) -> str:
    """A run's name ("patch4", "aa/patch4") as its trial ledger entry names it ("patch4", "controls/aa/patch4")."""
    return run if "/" not in run else f"{CONTROLS_DIR}/{run}"


def read_amendments(plan_folder: Path) -> list[dict]:
    """Each amendment of the plan in `plan_folder`, in order: its JSON block (AMENDMENT.md's last
    section) with "file" added, checked against PLAN.json as amended by those before it; refused in
    one line naming the file and the problem. A plan without amendments: []."""
    return [a for a, _ in _amend(Path(plan_folder), resolve=False)]


def amended_plan(plan_folder: Path, *, resolve: bool = True) -> dict:
    """PLAN.json with each amendment applied (module doc of `read_amendments`): its order replaced (each
    stage's H200 seconds summed again), its added controls present as controls resolved per arm at
    their own lengths and source (`_arm`'s machinery: torch, no GPU), its not-run runs in "not_run"
    (name -> reason) and out of the order, the ledger entries it removed gone, and "amendments" listing
    them. The plan hash stays the registered one. `resolve=False` leaves the added controls' configs
    and prices out (no torch): enough to read their names, folders and commands, not their cells."""
    return _amend(Path(plan_folder), resolve=resolve)[-1][1] if amendment_files(plan_folder) else \
        read_json(Path(plan_folder) / PLAN_JSON)


def _amend(folder: Path, resolve: bool) -> list[tuple[dict, dict]]:
    """(amendment, the plan as amended up to it) for each amendment of the folder's plan, in order."""
    plan = read_json(folder / PLAN_JSON)
    out = []
    for number, path in enumerate(amendment_files(folder), start=1):
        block = _json_block(path)
        _check_amendment(block, path, number, plan)
        plan = _apply_amendment(plan, block, path.name, resolve)
        uncovered = [n for n in run_names(plan) if n not in plan["not_run"]
                     and n not in {r for st in plan["order"] for r in st["runs"]}]
        _need(not uncovered, path, f"run {uncovered[0] if uncovered else ''!r} is neither in the amended order nor "
                                   "in not_run: an amendment says where every run goes")
        out.append((block | {"file": path.name}, plan))
    return out


def _apply_amendment(plan: dict, block: dict, file: str, resolve: bool) -> dict:
    """The plan with one checked amendment applied (`amended_plan`)."""
    plan = json.loads(json.dumps(plan))  # a copy: the plan as it stood stays as it was
    plan["controls"] = [*plan.get("controls", []),
                        *(_added_control(plan, c, file, resolve) for c in block.get("add_controls", []))]
    not_run = {n: r for n, r in plan.get("not_run", {}).items()}
    if block.get("order") is not None:
        ordered = {r for st in block["order"] for r in st["runs"]}
        not_run = {n: r for n, r in not_run.items() if n not in ordered}  # a run ordered again is run
        stages = block["order"]
    else:
        stages = [{"stage": st["stage"], "runs": [r for r in st["runs"] if r not in block.get("not_run", {})]}
                  for st in plan_order_of(plan)]
    plan["not_run"] = not_run | block.get("not_run", {})
    seconds = _run_seconds(plan) if resolve else {}
    plan["order"] = [{"stage": st["stage"], "runs": list(st["runs"])}
                     | ({"gpu_seconds": sum(seconds[n][0] for n in st["runs"]),
                         "gpu_seconds_worst": sum(seconds[n][1] for n in st["runs"])} if resolve else {})
                     for st in stages if st["runs"]]
    removed = {_ledger_arm(r) for r in block.get("ledger_removed", [])}
    if removed:
        arms = {a["name"]: a for a in plan["arms"]}
        fewer = sum(len(arms[e["arm"]]["lengths"]) * plan["trials_per_n"]
                    for e in plan.get("ledger_entries", []) if e["arm"] in removed and e["counted"])
        plan["ledger_entries"] = [e for e in plan.get("ledger_entries", []) if e["arm"] not in removed]
        plan["ledger"] = [row | {"with_plan": row["with_plan"] - fewer} for row in plan.get("ledger", [])]
    plan["amendments"] = [*plan.get("amendments", []),
                          {"file": file, "amendment": block["amendment"], "date": block["date"],
                           "written_at_commit": block.get("written_at_commit"),
                           "ledger_removed": list(block.get("ledger_removed", []))}]
    return plan


def _added_control(plan: dict, c: dict, file: str, resolve: bool) -> dict:
    """A control an amendment adds, as a plan's control: on its arms only, resolved per arm at its own
    lengths on its market (`resolve`), else with only each arm's name, lengths and range."""
    from tsflash.report import wording
    from tsflash.report.edition import CONTROL_RULES

    kind = parse_source(c["source"])[0]
    control = {"name": c["name"], "source": c["source"], "kind": kind,
               "expect": c.get("expect") or wording.CONTROL_EXPECTATIONS[kind], "rule": CONTROL_RULES[kind],
               "lengths": list(c["lengths"]), "amendment": file}
    if c.get("oracle_gain") is not None:
        control["oracle_gain"] = c["oracle_gain"]
    arms = {a["name"]: a for a in plan["arms"]}
    if not resolve:
        return control | {"arms": [{"name": a, "lengths": list(c["lengths"]), "range": list(plan["range"])}
                                   for a in c["arms"]]}
    resolved = [json.loads(_resolved_arm(a, tuple(arms[a]["overrides"]), tuple(plan["base_overrides"]),
                                         plan.get("symbol"), tuple(c["lengths"]), c["source"], tuple(plan["range"]),
                                         plan["trials_per_n"]))
                for a in c["arms"]]
    return control | {"arms": resolved, "gpu_seconds": sum(a["gpu_seconds"] for a in resolved),
                      "gpu_seconds_worst": sum(a["gpu_seconds_worst"] for a in resolved)}


@functools.cache
def _resolved_arm(name: str, items: tuple[str, ...], base: tuple[str, ...], symbol: str | None,
                  lengths: tuple[int, ...], data: str, dates: tuple[str, str], trials: int) -> str:
    """One arm resolved by `_arm` at other lengths on another market (JSON: each caller gets a copy);
    cached, since every reader of an amended plan asks again."""
    from tsflash.commands.options import parse_overrides
    from tsflash.config import merge_overrides
    from tsflash.sweep.plan import SweepOptions

    overrides = merge_overrides({"data": {"symbol": symbol}} if symbol else {}, parse_overrides(list(base)))
    opts = SweepOptions(lengths=list(lengths), data=data, start=dates[0], end=dates[1], trials=trials, preset="full",
                        overrides=overrides)
    return json.dumps(_arm(name, list(items), opts))


def _run_seconds(plan: dict) -> dict[str, tuple[int, int]]:
    """Each planned run's H200 seconds (expected, every model cell at its most steps), as the plan priced them."""
    seconds = {name: (resolved["gpu_seconds"], resolved["gpu_seconds_worst"])
               for name, _, resolved, _ in planned_runs(plan, Path())}
    if "ladder" in plan:
        seconds[LADDER_RUN] = (plan["ladder"]["gpu_seconds"], plan["ladder"]["gpu_seconds_worst"])
    return seconds


def amended_words(plan: dict) -> str:
    """"amended 2026-12-06 (AMENDMENT.md)", and each later one ("... and 2026-12-20 (AMENDMENT-2.md)");
    "" for a plan as registered."""
    done = [f"{a['date']} ({a['file']})" for a in plan.get("amendments", [])]
    return "amended " + " and ".join(done) if done else ""


# ---------------------------------------------------------------------------------------------
# The whole plan's state: every planned run folder, read from what its sweep and report wrote


def planned_runs(plan: dict, out: Path) -> list[tuple[str, dict | None, dict, Path]]:
    """(name, control or None, the arm's planned resolution, run folder) of every run the plan
    commands: each arm into OUT/<arm>, each control's arm into OUT/controls/<control>/<arm> (an
    amendment's control: only the arms it names)."""
    runs = [(a["name"], None, a, run_dir_of(out, a["name"])) for a in plan["arms"]]
    for c in plan.get("controls", []):  # on its own resolution of each arm, if it has one; else on every arm
        runs += [(f"{c['name']}/{a['name']}", c, a, run_dir_of(out, a["name"], c)) for a in c.get("arms") or plan["arms"]]
    return runs


def run_names(plan: dict) -> list[str]:
    """Every planned run's name, in `planned_runs` order, the ladder last."""
    return [name for name, *_ in planned_runs(plan, Path())] + ([LADDER_RUN] if "ladder" in plan else [])


def plan_order(plan: dict, stages: list[tuple[str, list[str]]] = ()) -> list[dict]:
    """The order the plan's runs go in: each stage (name, its runs' names or shell patterns) takes the
    runs it matches that no earlier stage took, with its H200 time; the runs no stage names go last, as
    a stage "rest" (without stages, one stage "all"). A pattern that takes no run is refused in one line."""
    names, seconds = run_names(plan), _run_seconds(plan)
    if len({n for n, _ in stages}) != len(stages):
        raise UserError(f"--stage names must differ, got {', '.join(n for n, _ in stages)}")
    left, order = list(names), []
    for stage, patterns in [*stages, ("rest" if stages else "all", ["*"])]:
        taken = []
        for pattern in patterns:
            if not (found := [n for n in left if fnmatch.fnmatchcase(n, pattern) and n not in taken]):
                if pattern == "*":
                    continue
                raise UserError(f"--stage {stage}: {pattern!r} names no planned run left for it (the plan's runs: "
                                f"{', '.join(names)}; not in an earlier stage: {', '.join(left) or 'none'})")
            taken += found
        left = [n for n in left if n not in taken]
        if taken:
            order.append({"stage": stage, "runs": taken, "gpu_seconds": sum(seconds[n][0] for n in taken),
                          "gpu_seconds_worst": sum(seconds[n][1] for n in taken)})
    return order


def _planned_cells(plan: dict, resolved: dict) -> int:
    cfg = resolved["config"]
    return len(cfg["lengths"]) * cfg["splits"]["n_folds"] * len(cfg["train"]["seeds"]) * plan["trials_per_n"]


def plan_state(out: Path) -> list[dict]:
    """One row per planned run: its state (not started, cells saved of those planned, complete), its
    departures, and from its report (questions.json, results.json) question 1's answer over training
    runs, the nesting check's verdict and, for the A/A replicate, its reading; with what the plan
    expects of a control. The plan is read as amended (`amended_plan`): a run an amendment does not
    run is "not run in this edition: <reason>", in no stage ("-")."""
    from tsflash.report.questions import RESULTS_FILE

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


def time_left(out: Path, rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Seconds of one H200 (expected; every model cell at its most steps) that each run not complete
    (`rows`, `plan_state`) still needs, by name, priced as a sweep would price it now: the calibrated
    table of `tsflash.sweep.progress` as it stands (PLAN.json keeps the prices it was written with) and
    the run's own saved cells (`tsflash.sweep.run.work_left`); the ladder's replicates not done at its
    script's price. A run an amendment does not run needs nothing."""
    from tsflash.config import config_from_dict
    from tsflash.sweep.progress import CostModel, prior_rates
    from tsflash.sweep.run import work_left

    plan, state = amended_plan(out), {r["run"]: r["state"] for r in rows}
    calibration = prior_rates(PLAN_DEVICE)
    left: dict[str, tuple[float, float]] = {}
    for name, _, resolved, run_dir in planned_runs(plan, out):
        if state[name] == "complete" or name in plan.get("not_run", {}):
            continue
        cost = CostModel(calibration)
        expected = worst = 0.0
        for work in work_left(RunFolder(run_dir), config_from_dict(resolved["config"]), plan["trials_per_n"], cost):
            seconds = cost.seconds(work)
            expected += seconds
            worst += seconds + (calibration.extra_at_max_steps(work, seconds) if work.kind == "model" else 0.0)
        left[name] = (expected, worst)
    if "ladder" in plan and state[LADDER_RUN] != "complete" and LADDER_RUN not in plan.get("not_run", {}):
        ladder = _ladder_cost(tuple(plan["base_overrides"]), _ladder_lengths(plan["arms"][0]))
        summary = read_json(path) if (path := out / LADDER_DIR / "summary.json").exists() else None
        share = 1 - summary["replicates_done"] / summary["replicates_planned"] if summary else 1.0
        left[LADDER_RUN] = (share * ladder["gpu_seconds"], share * ladder["gpu_seconds_worst"])
    return left


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
    """The A/A column of `plan_state` from a replicate's results.json "aa" (`tsflash.report.replicate`)."""
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
    from tsflash.report import wording

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
    from tsflash.sweep.progress import format_seconds as f

    left = time_left(out, rows)
    expected, worst = (sum(v[i] for v in left.values()) for i in (0, 1))
    runs = next(st["runs"] for st in order if st["stage"] == stage)
    nxt = sum(left[n][0] for n in runs if n in left)
    planned, planned_worst = (sum(st[k] for st in order) for k in ("gpu_seconds", "gpu_seconds_worst"))
    return (f"; left: about {f(expected)} of one H200 expected ({f(worst)} if every model cell runs its most steps), "
            f"{f(nxt)} of it stage {stage}'s, at today's calibrated prices and the runs' saved cells; "
            + (f"PLAN.json and its amendments priced the amended order at " if amended else
               "PLAN.json priced the whole plan at ") + f"{f(planned)} ({f(planned_worst)})")


def render_state(rows: list[dict], plan_path: Path) -> str:
    """`plan_state` as Markdown: a line naming the plan (and its amendments), then a table of the
    planned runs in the plan's order, those an amendment does not run last."""
    from tsflash.report.markdown import markdown_table

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
            + (f"; next: stage {stage}, runs {' '.join(todo)} (`tsflash preregister --next`)" if stage else "")
            + _calls_words(device_calls(plan_path.parent))
            + (_time_left_words(plan_path.parent, rows, order, stage, bool(amended)) if stage else "")
            + ".\n\n" + markdown_table(head, body))
    departing = [f"- {r['run']}: " + "; ".join(r["departures"]) for r in rows if r["departures"]]
    return text + ("\n\nDepartures from the plan:\n" + "\n".join(departing) if departing else "")
