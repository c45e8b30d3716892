"""A pre-registered plan read back: the report's line of a planned run (its departures from
PLAN.json), the plan's amendments applied, its planned runs, their folders and their order.

`tsflash.sweep.preregister` writes PLAN.json and PLAN.md; this module reads them for the report
(`deviations_sentence`, `replicated_run`) and for every other reader. A plan is changed only by a
dated amendment beside it (AMENDMENT.md, then AMENDMENT-2.md, ...): its last section, a fenced json
block, replaces the order, adds controls, or takes runs out of the edition with their reasons
(`read_amendments`, `amended_plan`). PLAN.json and its hash stay as registered; every reader here
takes the plan as amended.

Resolving an amendment's added control (its config and price) needs the sweep (torch); a reader that
needs it is handed `resolve` (`tsflash.sweep.preregister.resolved_arm`), so this module imports nothing
above the report.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from tsflash.config import read_run_config
from tsflash.data.synthetic import parse_source
from tsflash.errors import UserError
from tsflash.report import wording
from tsflash.report.rescore import flat_overrides
from tsflash.runfolder import RunFolder, read_json

PLAN_JSON, PLAN_MD = "PLAN.json", "PLAN.md"
AA_CONTROL = "aa"  # the A/A replicate's control name (`--aa-seeds`): runs in OUT/controls/aa/<arm>
CONTROLS_DIR = "controls"  # a control's runs: OUT/controls/<control>/<arm>
LADDER_DIR = "ladder"  # the ladder's replicates and summary: OUT/ladder (its command's --runs in PLAN.md)
LADDER_RUN = "ladder"  # the ladder's name among the planned runs (--check, --stage, PLAN.json's order)

# (name, items, base, symbol, lengths, source, (start, end), trials) -> one arm resolved, as JSON
ArmResolver = Callable[
    [str, tuple[str, ...], tuple[str, ...], str | None, tuple[int, ...], str, tuple[str, str], int], str
]

NO_FALSE_POSITIVE = (
    'met when question 1 over training runs does not say "better" and no length passes the trading gates'
)
# How each control's expectation (wording.CONTROL_EXPECTATIONS) is read as met or not: stated in the
# plan beside it (PLAN.md's controls table) and applied to the control's report when a plan is collated.
CONTROL_RULES = {
    "long-memory": 'met when question 1 over training runs says "better"',
    "regime": f"met when the ranking check {wording.FOLLOWS} (the linear probe's order)",
    "random-walk": NO_FALSE_POSITIVE,
    "iid": NO_FALSE_POSITIVE,
    AA_CONTROL: 'met when the A/A comparisons are calibrated: "differ" at most as often as the level allows',
}


def run_dir_of(out: Path, arm: str, control: dict | None = None) -> Path:
    """Where a plan's run goes: one arm into OUT/<arm>, or on a control's market into
    OUT/controls/<control>/<arm> (`plan_for` and `control_of` read the same layout back)."""
    return out / arm if control is None else out / CONTROLS_DIR / control["name"] / arm


def plan_order_of(plan: dict) -> list[dict]:
    """The plan's order as written (a plan written before stages existed: one stage, every run)."""
    return plan.get("order") or plan_order(plan)


def control_arm(control: dict, arm: str) -> dict | None:
    """A control's own resolution of one arm (its config with the control's settings), or None when
    the control runs every arm's config unchanged."""
    return next((a for a in control.get("arms", []) if a["name"] == arm), None)


def plan_for(run_dir: Path) -> Path | None:
    """The PLAN.json a run folder answers to: in its parent folder (OUT/<arm>), or for a control's
    run (OUT/controls/<control>/<arm>) three folders up; None when there is none."""
    run = Path(run_dir).resolve()
    for path in (
        run.parent / PLAN_JSON,
        run.parents[2] / PLAN_JSON if len(run.parents) > 2 and run.parents[1].name == CONTROLS_DIR else None,
    ):
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
    control = control_of(amended_plan(plan_path.parent), run_dir) if plan_path else None
    if plan_path is None or control is None or control["kind"] != AA_CONTROL:
        return None
    return run_dir_of(plan_path.parent, Path(run_dir).resolve().name)


def deviations(plan: dict, run_dir: Path) -> tuple[str | None, list[str]]:
    """(the arm this run is, every departure from the plan); the arm is the one named by the
    folder, else the one with the run's config hash."""
    folder = RunFolder(run_dir)
    if not folder.config_json.exists():
        raise UserError(f"{run_dir}: no config.json, not a sweep run folder")
    cfg = read_run_config(run_dir)  # a newer config is refused naming the folder
    run = folder.read_run()
    run_hash = run.get("config_hash")  # tsflash.sweep.plan.run_hash of the config, as the sweep recorded it
    arms = {a["name"]: a for a in plan["arms"]}
    arm = arms.get(Path(run_dir).name) or next((a for a in plan["arms"] if a["config_hash"] == run_hash), None)
    if arm is None:
        return None, [
            f"the run is none of the plan's arms ({', '.join(arms)}): folder {Path(run_dir).name}, "
            f"config hash {run_hash}"
        ]
    found = []  # flat_overrides: {"a": {"b": 1}} -> {"a.b": 1}

    control = control_of(plan, run_dir)
    own = control_arm(control, arm["name"]) if control else None
    name = arm["name"] if control is None else f"{control['name']}/{arm['name']}"
    if name in plan.get("not_run", {}):
        file = plan["amendments"][-1]["file"]
        found.append(f"run {name}: {NOT_RUN} ({file}: {plan['not_run'][name]}), yet it ran")
    planned, ran = (
        flat_overrides(json.loads(json.dumps(c, default=str))) for c in ((own or arm)["config"], cfg.to_dict())
    )
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


def check_run(plan_path: Path, run_dir: Path, resolve: ArmResolver | None = None) -> tuple[str | None, list[str], str]:
    """(arm, departures, the report's line): which plan (as amended), which arm, and its departures
    ("none"). A run still in progress is no departure (the sweep writes its report before it marks the
    run complete). Only the run of a control an amendment added needs that control resolved: by
    `resolve` (`tsflash.sweep.preregister.resolved_arm`, torch), refused in one line without it."""
    run = Path(run_dir).resolve()
    added = {c["name"] for a in read_amendments(plan_path.parent) for c in a.get("add_controls", [])}
    needs = run.parents[1].name == CONTROLS_DIR and run.parent.name in added
    if needs and resolve is None:
        raise UserError(
            f"{run_dir}: a control added by an amendment is checked against its resolved config; "
            "check it with `tsflash preregister --check RUN`"
        )
    plan = amended_plan(plan_path.parent, resolve=resolve if needs else None)
    arm, found = deviations(plan, run_dir)
    return arm, found, _sentence(plan, plan_path, arm, found)


def deviations_sentence(plan_path: Path, run_dir: Path, resolve: ArmResolver | None = None) -> str:
    """The report's line of a pre-registered run (`check_run`)."""
    return check_run(plan_path, run_dir, resolve)[2]


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
_AMENDMENT_KEYS = (
    "amendment",
    "date",
    "plan_hash",
    "written_at_commit",
    "order",
    "add_controls",
    "not_run",
    "ledger_removed",
)
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
        n = path.stem.partition("-")[2]
        if not n.isdigit() or int(n) < 2:
            raise UserError(f"{path}: an amendment's file is {AMENDMENT_MD}, then AMENDMENT-2.md, AMENDMENT-3.md, ...")
        numbered[int(n)] = path
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
        raise UserError(
            f"{path}: its ```json block is not JSON: {exc} (lines counted from the block's first)"
        ) from None
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
    _need(
        not (extra := sorted(c.keys() - set(_ADDED_CONTROL_KEYS))),
        path,
        f"add_controls {name!r}: unknown key {extra[0] if extra else ''!r} (known: {', '.join(_ADDED_CONTROL_KEYS)})",
    )
    _need(_is_name(name), path, f"add_controls: a control's name is letters, digits, '.', '-' and '_', got {name!r}")
    taken = [x["name"] for x in plan.get("controls", [])]
    _need(
        name not in taken,
        path,
        f"add_controls {name!r}: the plan already has a control of that name ({', '.join(taken)})",
    )
    source = c.get("source")
    try:
        synthetic = isinstance(source, str) and parse_source(source) is not None
    except UserError as exc:
        raise UserError(f"{path}: add_controls {name!r}: {exc}") from None
    _need(
        synthetic,
        path,
        f"add_controls {name!r}: source must be a synthetic market (synthetic:KIND[:SEED][:k=v,...]), got {source!r}",
    )
    arms = [a["name"] for a in plan["arms"]]
    given = c.get("arms")
    _need(
        isinstance(given, list) and bool(given) and all(a in arms for a in given) and len(set(given)) == len(given),
        path,
        f"add_controls {name!r}: arms must name distinct arms of the plan ({', '.join(arms)}), got {given!r}",
    )
    lengths = c.get("lengths")
    _need(
        isinstance(lengths, list)
        and bool(lengths)
        and len(set(lengths)) == len(lengths)
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths),
        path,
        f"add_controls {name!r}: lengths must be distinct positive integers, got {lengths!r}",
    )
    _need(isinstance(c.get("expect", ""), str), path, f"add_controls {name!r}: expect must be a sentence")


def _check_amendment(block: dict, path: Path, number: int, plan: dict) -> None:  # long: one check a refusal
    """Refuse, in one line naming the file, an amendment that is not to this plan or names what it lacks."""
    _need(
        not (extra := sorted(block.keys() - set(_AMENDMENT_KEYS))),
        path,
        f"unknown key {extra[0] if extra else ''!r} in its JSON block (known: {', '.join(_AMENDMENT_KEYS)})",
    )
    _need(
        not (missing := [k for k in _REQUIRED_KEYS if k not in block]),
        path,
        f"its JSON block lacks {', '.join(missing)}",
    )
    _need(
        block["amendment"] == number, path, f'"amendment": {block["amendment"]!r}, but the file is amendment {number}'
    )
    try:
        dt.date.fromisoformat(str(block["date"]))
    except ValueError:
        raise UserError(f'{path}: "date" must be YYYY-MM-DD, got {block["date"]!r}') from None
    _need(
        block["plan_hash"] == plan["plan_hash"],
        path,
        f"plan_hash {block['plan_hash']!r} is not the plan's: {PLAN_JSON} beside it is plan {plan['plan_hash']}",
    )
    added = block.get("add_controls", [])
    _need(isinstance(added, list), path, "add_controls must be a list of controls")
    for c in added:
        _check_added_control(c, path, plan)
    _need(len({c["name"] for c in added}) == len(added), path, "add_controls: the controls' names must differ")
    known = run_names(plan) + [f"{c['name']}/{a}" for c in added for a in c["arms"]]

    def _known(run, where: str) -> None:
        _need(
            run in known,
            path,
            f"{where} names run {run!r}, which is neither in plan {plan['plan_hash']} nor in "
            f"its add_controls (runs: {', '.join(known)})",
        )

    order = block.get("order")
    if order is not None:
        _need(isinstance(order, list) and bool(order), path, "order must be a non-empty list of stages")
        seen: list[str] = []
        for stage in order:
            _need(
                isinstance(stage, dict)
                and set(stage) == {"stage", "runs"}
                and _is_name(stage["stage"])
                and isinstance(stage["runs"], list)
                and bool(stage["runs"]),
                path,
                f'each stage of order is {{"stage": NAME, "runs": [RUN, ...]}}, got {stage!r}',
            )
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
        _need(
            isinstance(reason, str) and bool(reason.strip()), path, f"not_run {run!r}: give its reason, not {reason!r}"
        )
        _need(
            run not in [r for st in order or () for r in st["runs"]],
            path,
            f"run {run!r} is both in order and in not_run",
        )
    removed = block.get("ledger_removed", [])
    _need(isinstance(removed, list), path, "ledger_removed must be a list of runs")
    entries = [e["arm"] for e in plan.get("ledger_entries", [])]
    for run in removed:
        _known(run, "ledger_removed")
        _need(
            _ledger_arm(run) in entries,
            path,
            f"ledger_removed names run {run!r}, which has no entry in the plan's "
            f"trial ledger lines ({', '.join(entries) or 'none'})",
        )


def _ledger_arm(run: str) -> str:
    """A run's name ("patch4", "aa/patch4") as its trial ledger entry names it ("patch4", "controls/aa/patch4")."""
    return run if "/" not in run else f"{CONTROLS_DIR}/{run}"


def read_amendments(plan_folder: Path) -> list[dict]:
    """Each amendment of the plan in `plan_folder`, in order: its JSON block (AMENDMENT.md's last
    section) with "file" added, checked against PLAN.json as amended by those before it; refused in
    one line naming the file and the problem. A plan without amendments: []."""
    return [a for a, _ in _amend(Path(plan_folder), resolve=None)]


def amended_plan(plan_folder: Path, *, resolve: ArmResolver | None = None) -> dict:
    """PLAN.json with each amendment applied (module doc of `read_amendments`): its order replaced (each
    stage's GPU seconds summed again), its added controls present as controls resolved per arm at
    their own lengths and source (`_arm`'s machinery: torch, no GPU), its not-run runs in "not_run"
    (name -> reason) and out of the order, the ledger entries it removed gone, and "amendments" listing
    them. The plan hash stays the registered one. Without `resolve` the added controls' configs and
    prices are left out (no torch): enough to read their names, folders and commands, not their cells."""
    return (
        _amend(Path(plan_folder), resolve=resolve)[-1][1]
        if amendment_files(plan_folder)
        else read_json(Path(plan_folder) / PLAN_JSON)
    )


def _amend(folder: Path, resolve: ArmResolver | None) -> list[tuple[dict, dict]]:
    """(amendment, the plan as amended up to it) for each amendment of the folder's plan, in order."""
    plan = read_json(folder / PLAN_JSON)
    out = []
    for number, path in enumerate(amendment_files(folder), start=1):
        block = _json_block(path)
        _check_amendment(block, path, number, plan)
        plan = _apply_amendment(plan, block, path.name, resolve)
        uncovered = [
            n
            for n in run_names(plan)
            if n not in plan["not_run"] and n not in {r for st in plan["order"] for r in st["runs"]}
        ]
        _need(
            not uncovered,
            path,
            f"run {uncovered[0] if uncovered else ''!r} is neither in the amended order nor "
            "in not_run: an amendment says where every run goes",
        )
        out.append((block | {"file": path.name}, plan))
    return out


def _apply_amendment(plan: dict, block: dict, file: str, resolve: ArmResolver | None) -> dict:
    """The plan with one checked amendment applied (`amended_plan`)."""
    plan = json.loads(json.dumps(plan))  # a copy: the plan as it stood stays as it was
    plan["controls"] = [
        *plan.get("controls", []),
        *(_added_control(plan, c, file, resolve) for c in block.get("add_controls", [])),
    ]
    not_run = {n: r for n, r in plan.get("not_run", {}).items()}
    if block.get("order") is not None:
        ordered = {r for st in block["order"] for r in st["runs"]}
        not_run = {n: r for n, r in not_run.items() if n not in ordered}  # a run ordered again is run
        stages = block["order"]
    else:
        stages = [
            {"stage": st["stage"], "runs": [r for r in st["runs"] if r not in block.get("not_run", {})]}
            for st in plan_order_of(plan)
        ]
    plan["not_run"] = not_run | block.get("not_run", {})
    seconds = _run_seconds(plan) if resolve is not None else {}
    plan["order"] = [
        {"stage": st["stage"], "runs": list(st["runs"])}
        | (
            {
                "gpu_seconds": sum(seconds[n][0] for n in st["runs"]),
                "gpu_seconds_worst": sum(seconds[n][1] for n in st["runs"]),
            }
            if resolve is not None
            else {}
        )
        for st in stages
        if st["runs"]
    ]
    removed = {_ledger_arm(r) for r in block.get("ledger_removed", [])}
    if removed:
        arms = {a["name"]: a for a in plan["arms"]}
        fewer = sum(
            len(arms[e["arm"]]["lengths"]) * plan["trials_per_n"]
            for e in plan.get("ledger_entries", [])
            if e["arm"] in removed and e["counted"]
        )
        plan["ledger_entries"] = [e for e in plan.get("ledger_entries", []) if e["arm"] not in removed]
        plan["ledger"] = [row | {"with_plan": row["with_plan"] - fewer} for row in plan.get("ledger", [])]
    plan["amendments"] = [
        *plan.get("amendments", []),
        {
            "file": file,
            "amendment": block["amendment"],
            "date": block["date"],
            "written_at_commit": block.get("written_at_commit"),
            "ledger_removed": list(block.get("ledger_removed", [])),
        },
    ]
    return plan


def _added_control(plan: dict, c: dict, file: str, resolve: ArmResolver | None) -> dict:
    """A control an amendment adds, as a plan's control: on its arms only, resolved per arm at its own
    lengths on its market (`resolve`), else with only each arm's name, lengths and range."""
    kind = cast(tuple[str, int | None], parse_source(c["source"]))[0]  # synthetic: `_check_added_control` saw to it
    control = {
        "name": c["name"],
        "source": c["source"],
        "kind": kind,
        "expect": c.get("expect") or wording.CONTROL_EXPECTATIONS[kind],
        "rule": CONTROL_RULES[kind],
        "lengths": list(c["lengths"]),
        "amendment": file,
    }
    if c.get("oracle_gain") is not None:
        control["oracle_gain"] = c["oracle_gain"]
    arms = {a["name"]: a for a in plan["arms"]}
    if resolve is None:
        return control | {
            "arms": [{"name": a, "lengths": list(c["lengths"]), "range": list(plan["range"])} for a in c["arms"]]
        }
    resolved = [
        json.loads(
            resolve(
                a,
                tuple(arms[a]["overrides"]),
                tuple(plan["base_overrides"]),
                plan.get("symbol"),
                tuple(c["lengths"]),
                c["source"],
                tuple(plan["range"]),
                plan["trials_per_n"],
            )
        )
        for a in c["arms"]
    ]
    return control | {
        "arms": resolved,
        "gpu_seconds": sum(a["gpu_seconds"] for a in resolved),
        "gpu_seconds_worst": sum(a["gpu_seconds_worst"] for a in resolved),
    }


def _run_seconds(plan: dict) -> dict[str, tuple[int, int]]:
    """Each planned run's GPU seconds (expected, every model cell at its most steps), as the plan priced them."""
    seconds = {
        name: (resolved["gpu_seconds"], resolved["gpu_seconds_worst"])
        for name, _, resolved, _ in planned_runs(plan, Path())
    }
    if "ladder" in plan:
        seconds[LADDER_RUN] = (plan["ladder"]["gpu_seconds"], plan["ladder"]["gpu_seconds_worst"])
    return seconds


def amended_words(plan: dict) -> str:
    """\"amended 2026-12-06 (AMENDMENT.md)", and each later one ("... and 2026-12-20 (AMENDMENT-2.md)");
    "" for a plan as registered."""
    done = [f"{a['date']} ({a['file']})" for a in plan.get("amendments", [])]
    return "amended " + " and ".join(done) if done else ""


# ---------------------------------------------------------------------------------------------
# The whole plan's state: every planned run folder, read from what its sweep and report wrote


def planned_runs(plan: dict, out: Path) -> list[tuple[str, dict | None, dict, Path]]:
    """(name, control or None, the arm's planned resolution, run folder) of every run the plan
    commands: each arm into OUT/<arm>, each control's arm into OUT/controls/<control>/<arm> (an
    amendment's control: only the arms it names)."""
    runs: list[tuple[str, dict | None, dict, Path]] = [
        (a["name"], None, a, run_dir_of(out, a["name"])) for a in plan["arms"]
    ]
    for c in plan.get("controls", []):  # on its own resolution of each arm, if it has one; else on every arm
        runs += [
            (f"{c['name']}/{a['name']}", c, a, run_dir_of(out, a["name"], c)) for a in c.get("arms") or plan["arms"]
        ]
    return runs


def run_names(plan: dict) -> list[str]:
    """Every planned run's name, in `planned_runs` order, the ladder last."""
    return [name for name, *_ in planned_runs(plan, Path())] + ([LADDER_RUN] if "ladder" in plan else [])


def plan_order(plan: dict, stages: Sequence[tuple[str, list[str]]] = ()) -> list[dict]:
    """The order the plan's runs go in: each stage (name, its runs' names or shell patterns) takes the
    runs it matches that no earlier stage took, with its GPU time; the runs no stage names go last, as
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
                raise UserError(
                    f"--stage {stage}: {pattern!r} names no planned run left for it (the plan's runs: "
                    f"{', '.join(names)}; not in an earlier stage: {', '.join(left) or 'none'})"
                )
            taken += found
        left = [n for n in left if n not in taken]
        if taken:
            order.append(
                {
                    "stage": stage,
                    "runs": taken,
                    "gpu_seconds": sum(seconds[n][0] for n in taken),
                    "gpu_seconds_worst": sum(seconds[n][1] for n in taken),
                }
            )
    return order
