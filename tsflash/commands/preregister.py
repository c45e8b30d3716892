"""`tsflash preregister`: fix a sweep's design and its reading before it runs, and check a run against it.

    tsflash preregister --lengths 512,4096,32768 --arm per-bar= --arm patch16=model.patch=16 --out reports/third-edition
    tsflash preregister --check reports/third-edition/per-bar      # its departures from the plan (exit 1 if any)

A run is checked against the plan as amended: PLAN.json with AMENDMENT.md (then AMENDMENT-2.md, ...)
beside it applied (`tsflash.report.registration`). A plan's state as a whole, its next runs, its
commands and its summary are the studies' bookkeeping: `python -m lab.plan` in a checkout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tsflash.commands import options
from tsflash.commands.sweep import with_symbol
from tsflash.config import parse_overrides


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
        raise argparse.ArgumentTypeError(
            f"expects distinct non-negative integers separated by commas, e.g. 3,4,5; got {text!r}"
        )
    return [int(t) for t in seeds]


def _stage_type(text: str) -> tuple[str, list[str]]:
    from tsflash.sweep.preregister import parse_stage

    return options._argument(parse_stage, text, "--stage")


def _control_type(text: str) -> tuple[str, str]:
    from tsflash.sweep.preregister import parse_control

    return options._argument(parse_control, text, "--control")


LAB_FLAGS = ("--commands", "--next", "--summary")


def register(sub) -> None:
    p = sub.add_parser(
        "preregister",
        help="write a sweep's pre-registration (PLAN.md, PLAN.json) before it runs, or check a run against it",
        description="Resolve each arm's config as `tsflash sweep --device cuda --preset full` would (nothing is "
        "trained or read but the presets and the trial ledger) and write PLAN.json and PLAN.md into --out: the "
        "config hashes and run keys, seeds, folds, the primary test and its level, the nesting check, the trading "
        "gates, the trial count, the sentence each outcome will produce, the expected GPU time and the sweep "
        "commands (each arm into OUT/<arm>). A plan is written once; a dated AMENDMENT.md beside it changes its "
        "order, adds controls or takes runs out, and every reader applies it. With --check RUN, list the run's departures "
        "from the PLAN.json in its parent folder (the report lists them too).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            options.lengths_option(None, "comma-separated context lengths, powers of two (default: the config's)"),
            options.data_option(default=None),  # read only when a plan is written: --check and the rest need none
            options.set_option("override a config field for every arm, e.g. --set train.ema_decay=0.995 (repeatable)"),
            options.design_options(),
        ],
    )
    p.add_argument(
        "--arm",
        type=_arm_type,
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE[,...]",
        help="one arm of the plan: a name and its own overrides, e.g. patch16=model.patch=16, or "
        "per-bar= for none (repeatable; default: one arm 'per-bar')",
    )
    p.add_argument(
        "--control-set",
        type=_control_set_type,
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE",
        help="a setting of one control's own on top of every arm's config, e.g. "
        "regime=splits.n_folds=10 or regime=data.start=2018-07-06 (repeatable)",
    )
    p.add_argument(
        "--control",
        type=_control_type,
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="a control: every arm's config on a synthetic market, e.g. "
        "echo=synthetic:long-memory:0:strength=0.2 (repeatable; runs go to OUT/controls/NAME/<arm>)",
    )
    p.add_argument("--ladder", action="store_true", help=argparse.SUPPRESS)  # a lab study: run() says where
    p.add_argument(
        "--aa-seeds",
        type=_seeds_type,
        default=None,
        metavar="S,S,...",
        help="add the A/A replicate: every arm's config on the plan's own bars with these seeds (disjoint "
        "from the arms'), a control named aa (runs go to OUT/controls/aa/<arm>)",
    )
    p.add_argument(
        "--stage",
        type=_stage_type,
        action="append",
        default=[],
        metavar="NAME=RUN[,RUN...]",
        help="the order the runs go in: a stage and its runs by their --check names (an arm, CONTROL/ARM, "
        "ladder) or patterns, e.g. first=per-bar,aa/per-bar,echo/per-bar (repeatable, in order; the runs no "
        "stage names go last). If the device time ends first, only complete stages are read",
    )
    p.add_argument("--note", default="", help="a sentence for the plan's head: why this run, what it follows")
    p.add_argument("--out", type=Path, help="the plan's folder (the arms' run folders go inside it)")
    p.add_argument("--check", type=Path, metavar="RUN", help="list RUN's departures from the plan in its parent folder")
    for flag in LAB_FLAGS:  # moved to the lab: each says where, in one line
        p.add_argument(flag, type=Path, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args, ladder=None) -> int:
    """`ladder`: the strength ladder's plan entry (`tsflash.sweep.preregister.LadderEntry`), given by
    `python -m lab.preregister --ladder`."""
    from tsflash.errors import UserError
    from tsflash.report import registration
    from tsflash.report.registration import PLAN_JSON
    from tsflash.sweep import preregister
    from tsflash.sweep.plan import SweepOptions

    moved = [(f, getattr(args, f[2:])) for f in LAB_FLAGS] + [("--check", args.check)]
    for flag, folder in moved:
        if folder is not None and (flag != "--check" or (folder / PLAN_JSON).is_file()):
            raise UserError(
                f"preregister {flag} {folder}: a plan's state, next runs, commands and summary are "
                f"the studies' bookkeeping now: run `python -m lab.plan {flag} {folder}` in a checkout"
            )
    if args.ladder:
        raise UserError(
            "preregister --ladder: the strength ladder is a study of the lab: run `python -m "
            "lab.preregister` with the same options in a checkout"
        )
    if args.check is not None:
        plan_path = registration.plan_for(args.check)
        if plan_path is None:
            raise UserError(f"--check {args.check}: no {PLAN_JSON} in its parent folder {args.check.resolve().parent}")
        from tsflash.runfolder import RunFolder

        arm, found, sentence = preregister.check_run(plan_path, args.check)
        folder = RunFolder(args.check)
        print(sentence + ("" if folder.is_complete() else " (The run is not complete yet.)"))
        if registration.replicated_run(args.check) is not None and folder.cell_summaries()[0]:
            from tsflash.report.diagnostics.replicate import aa_sentence, replicate_check
            from tsflash.report.rundata import load_run

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
    opts = SweepOptions(
        lengths=args.lengths,
        config=args.config,
        data=data,
        start=args.start,
        end=args.end,
        trials=args.trials,
        preset="full",
        overrides=with_symbol(parse_overrides(args.overrides), args.symbol),
    )
    plan = preregister.build_plan(
        opts,
        args.arm,
        base=tuple(args.overrides),
        note=args.note,
        controls=args.control,
        control_sets=args.control_set,
        ladder=ladder,
        aa_seeds=args.aa_seeds,
        stages=args.stage,
    )
    plan_json, plan_md = preregister.write_plan(plan, args.out)
    print(f"plan {plan['plan_hash']}: {plan_md}")
    print(f"      {plan_json}")
    return 0
