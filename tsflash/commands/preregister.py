"""`tsflash preregister`: fix a sweep's design and its reading before it runs, and check a run against it.

    tsflash preregister --lengths 512,4096,32768 --arm per-bar= --arm patch16=model.patch=16 --out reports/third-edition
    tsflash preregister --check reports/third-edition/per-bar      # its departures from the plan (exit 1 if any)
    tsflash preregister --check reports/third-edition              # every planned run: state, departures, answers
    tsflash preregister --commands reports/third-edition           # each planned run's folder and sweep command
    tsflash preregister --next reports/third-edition               # the runs the next device call runs

Every reader takes the plan as amended: PLAN.json with AMENDMENT.md (then AMENDMENT-2.md, ...) beside
it applied (`tsflash.sweep.preregister.amended_plan`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tsflash.commands import options
from tsflash.commands.options import parse_overrides
from tsflash.commands.sweep import with_symbol


def _arm_type(text: str) -> tuple[str, list[str]]:
    from tsflash.sweep.preregister import parse_arm

    name, items = options._argument(parse_arm, text, "--arm")
    for item in items:
        options.override_type(item)
    return name, items


def _control_set_type(text: str) -> tuple[str, str]:
    from tsflash.sweep.preregister import parse_control_set

    return options._argument(parse_control_set, text, "--control-set")


def _seeds_type(text: str) -> list[int]:
    seeds = [t.strip() for t in text.split(",") if t.strip()]
    if not seeds or not all(t.isdigit() for t in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expects distinct non-negative integers separated by commas, e.g. 3,4,5; "
                                         f"got {text!r}")
    return [int(t) for t in seeds]


def _stage_type(text: str) -> tuple[str, list[str]]:
    from tsflash.sweep.preregister import parse_stage

    return options._argument(parse_stage, text, "--stage")


def _control_type(text: str) -> tuple[str, str]:
    from tsflash.sweep.preregister import parse_control

    return options._argument(parse_control, text, "--control")


def register(sub) -> None:
    p = sub.add_parser(
        "preregister",
        help="write a sweep's pre-registration (PLAN.md, PLAN.json) before it runs, or check a run against it",
        description="Resolve each arm's config as `tsflash sweep --device cuda --preset full` would (nothing is "
        "trained or read but the presets and the trial ledger) and write PLAN.json and PLAN.md into --out: the "
        "config hashes and run keys, seeds, folds, the primary test and its level, the nesting check, the trading "
        "gates, the trial count, the sentence each outcome will produce, the expected GPU time and the sweep "
        "commands (each arm into OUT/<arm>). A plan is written once; a dated AMENDMENT.md beside it changes its "
        "order, adds controls or takes runs out, and every reader below applies it. With --check RUN, list the run's departures "
        "from the PLAN.json in its parent folder (the report lists them too); with --summary PLAN, write the plan's "
        "answer from its complete stages' reports (SUMMARY.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            options.lengths_option(None, "comma-separated context lengths, powers of two (default: the config's)"),
            options.data_option(default=None),  # read only when a plan is written: --check and the rest need none
            options.set_option("override a config field for every arm, e.g. --set train.ema_decay=0.995 (repeatable)"),
            options.design_options(),
        ],
    )
    p.add_argument("--arm", type=_arm_type, action="append", default=[], metavar="NAME=KEY=VALUE[,...]",
                   help="one arm of the plan: a name and its own overrides, e.g. patch16=model.patch=16, or "
                   "per-bar= for none (repeatable; default: one arm 'per-bar')")
    p.add_argument("--control-set", type=_control_set_type, action="append", default=[], metavar="NAME=KEY=VALUE",
                   help="a setting of one control's own on top of every arm's config, e.g. "
                        "regime=splits.n_folds=10 or regime=data.start=2018-07-06 (repeatable)")
    p.add_argument("--control", type=_control_type, action="append", default=[], metavar="NAME=SOURCE",
                   help="a control: every arm's config on a synthetic market, e.g. "
                   "echo=synthetic:long-memory:0:strength=0.2 (repeatable; runs go to OUT/controls/NAME/<arm>)")
    p.add_argument("--ladder", action="store_true",
                   help="add the strength ladder (lab/power_ladder.py at the plan's --set overrides): what a "
                        "\"no\" rules out, its command and the sentence each of its outcomes will produce")
    p.add_argument("--aa-seeds", type=_seeds_type, default=None, metavar="S,S,...",
                   help="add the A/A replicate: every arm's config on the plan's own bars with these seeds (disjoint "
                   "from the arms'), a control named aa (runs go to OUT/controls/aa/<arm>)")
    p.add_argument("--stage", type=_stage_type, action="append", default=[], metavar="NAME=RUN[,RUN...]",
                   help="the order the runs go in: a stage and its runs by their --check names (an arm, CONTROL/ARM, "
                   "ladder) or patterns, e.g. first=per-bar,aa/per-bar,echo/per-bar (repeatable, in order; the runs no "
                   "stage names go last). If the device time ends first, only complete stages are read")
    p.add_argument("--note", default="", help="a sentence for the plan's head: why this run, what it follows")
    p.add_argument("--out", type=Path, help="the plan's folder (the arms' run folders go inside it)")
    p.add_argument("--check", type=Path, metavar="RUN", help="list RUN's departures from the plan in its parent folder; "
                   "given the plan's folder, every planned run's state, departures, question 1's answer, nesting "
                   "check and A/A reading, as one table")
    p.add_argument("--commands", type=Path, metavar="PLAN", help="print each planned run of the plan in folder PLAN, "
                   "in the plan's order: its run folder, a tab, the command that runs it (an arm's or control's "
                   "tsflash sweep, or the ladder's; add --time-budget to slice a sweep)")
    p.add_argument("--next", type=Path, metavar="PLAN", help="print the folders (relative to PLAN) of the runs not "
                   "complete in the plan's first stage not complete, on one line: what the next device call runs; "
                   "nothing when every stage is complete")
    p.add_argument("--summary", type=Path, metavar="PLAN", help="write SUMMARY.md and summary.json into PLAN: every "
                   "figure of the plan's complete stages, per arm and N, and each control against the rule the plan "
                   "stated for it, read from the runs' reports")
    p.set_defaults(func=run)


def run(args) -> int:
    from tsflash.errors import UserError
    from tsflash.sweep import preregister
    from tsflash.sweep.plan import SweepOptions

    for flag, folder in (("--commands", args.commands), ("--next", args.next)):
        if folder is not None and not (folder / preregister.PLAN_JSON).is_file():
            raise UserError(f"{flag} {folder}: no {preregister.PLAN_JSON} there (write one with --out)")
    if args.summary is not None:
        from tsflash.report.edition import write_summary

        md, js, summary = write_summary(args.summary)
        done = sum(st["complete"] for st in summary["stages"])
        print(f"{md}\n{js}\n{done} of {len(summary['stages'])} stages read"
              + (f"; not run: {', '.join(summary['not_run'])}" if summary["not_run"] else "")
              + (f"; {preregister.NOT_RUN}: {', '.join(summary['not_run_in_edition'])}"
                 if summary["not_run_in_edition"] else ""))
        return 0
    if args.commands is not None:  # the plan as amended (AMENDMENT.md beside PLAN.json), in its order
        for _, run_dir, command in preregister.ordered_commands(preregister.amended_plan(args.commands),
                                                                args.commands):
            print(f"{run_dir}\t{command}")
        return 0
    if args.next is not None:
        stage, todo = preregister.next_runs(args.next)
        if stage is None:
            print("every stage of the plan is complete", file=sys.stderr)
        else:
            print(" ".join(todo))
        return 0
    if args.check is not None and (args.check / preregister.PLAN_JSON).is_file():  # the plan's folder: every run
        rows = preregister.plan_state(args.check)
        print(preregister.render_state(rows, args.check / preregister.PLAN_JSON))
        return 1 if any(r["departures"] for r in rows) else 0
    if args.check is not None:
        plan_path = preregister.plan_for(args.check)
        if plan_path is None:
            raise UserError(f"--check {args.check}: no {preregister.PLAN_JSON} in its parent folder "
                            f"{args.check.resolve().parent}")
        from tsflash.runfolder import RunFolder

        arm, found, sentence = preregister.check_run(plan_path, args.check)
        folder = RunFolder(args.check)
        print(sentence + ("" if folder.is_complete() else " (The run is not complete yet.)"))
        if preregister.replicated_run(args.check) is not None and folder.cell_summaries()[0]:
            from tsflash.report.replicate import replicate_check
            from tsflash.report.rundata import load_run
            from tsflash.report.wording import aa_sentence

            print(aa_sentence(replicate_check(load_run(args.check))))  # its reading against the arm's run
        return 1 if found or arm is None else 0
    if args.out is None:
        raise UserError("preregister: give --out FOLDER to write a plan, or --check RUN to check a run against one")
    data = args.data
    if data is None:  # the default store, checked here: --check and the other readers need none
        try:
            data = options.data_type("data")
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"argument --data: {exc}") from None
    opts = SweepOptions(lengths=args.lengths, config=args.config, data=data, start=args.start, end=args.end,
                        trials=args.trials, preset="full",
                        overrides=with_symbol(parse_overrides(args.overrides), args.symbol))
    plan = preregister.build_plan(opts, args.arm, base=tuple(args.overrides), note=args.note, controls=args.control,
                                  control_sets=args.control_set, ladder=args.ladder, aa_seeds=args.aa_seeds,
                                  stages=args.stage)
    plan_json, plan_md = preregister.write_plan(plan, args.out)
    print(f"plan {plan['plan_hash']}: {plan_md}")
    print(f"      {plan_json}")
    return 0
