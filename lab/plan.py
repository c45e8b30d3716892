"""The state of a pre-registered plan's runs, for the studies' device calls and their notes.

    python -m lab.plan --check reports/third-edition      # every planned run: state, departures, answers
    python -m lab.plan --commands reports/third-edition   # each planned run's folder and command, in order
    python -m lab.plan --next reports/third-edition       # the runs the next device call runs
    python -m lab.plan --summary reports/third-edition    # SUMMARY.md: every figure of the complete stages

Every reader takes the plan as amended: PLAN.json with AMENDMENT.md (then AMENDMENT-2.md, ...) beside
it applied (`tsflash.sweep.preregister.amended_plan`). A user error is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab import plan_state
from tsflash.errors import UserError, reader_left
from tsflash.report.registration import NOT_RUN, PLAN_JSON
from tsflash.sweep import preregister


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m lab.plan", description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", type=Path, metavar="PLAN", help="every planned run of the plan in folder PLAN: its "
                      "state, departures, question 1's answer, nesting and ranking checks and A/A reading, as one "
                      "table (exit status 1 when a run departs from the plan)")
    what.add_argument("--commands", type=Path, metavar="PLAN", help="each planned run in the plan's order: its run "
                      "folder, a tab, the command that runs it (add --time-budget to slice a sweep)")
    what.add_argument("--next", type=Path, metavar="PLAN", help="the folders (relative to PLAN) of the runs not "
                      "complete in the plan's first stage not complete, on one line; nothing when every stage is")
    what.add_argument("--summary", type=Path, metavar="PLAN", help="write SUMMARY.md and summary.json into PLAN: "
                      "every figure of the plan's complete stages, and each control against its stated rule")
    return ap.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    folder = args.check or args.commands or args.next or args.summary
    flag = next(f"--{k}" for k in ("check", "commands", "next", "summary") if getattr(args, k) is not None)
    if not (folder / PLAN_JSON).is_file():
        raise UserError(f"{flag} {folder}: no {PLAN_JSON} there (write one with `tsflash preregister --out`)")
    if args.summary is not None:
        from lab.edition import write_summary

        md, js, summary = write_summary(args.summary)
        done = sum(st["complete"] for st in summary["stages"])
        print(f"{md}\n{js}\n{done} of {len(summary['stages'])} stages read"
              + (f"; not run: {', '.join(summary['not_run'])}" if summary["not_run"] else "")
              + (f"; {NOT_RUN}: {', '.join(summary['not_run_in_edition'])}" if summary["not_run_in_edition"] else ""))
        return 0
    if args.commands is not None:
        for _, run_dir, command in preregister.ordered_commands(preregister.amended_plan(folder), folder):
            print(f"{run_dir}\t{command}")
        return 0
    if args.next is not None:
        stage, todo = plan_state.next_runs(folder)
        if stage is None:
            print("every stage of the plan is complete", file=sys.stderr)
        else:
            print(" ".join(todo))
        return 0
    rows = plan_state.plan_state(folder)
    print(plan_state.render_state(rows, folder / PLAN_JSON))
    return 1 if any(r["departures"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        code = run(parse_args(argv))
        sys.stdout.flush()  # a reader that left shows here, in the handler below
        return code
    except UserError as exc:
        print(f"python -m lab.plan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m lab.plan --check PLAN | head`
        return reader_left()


if __name__ == "__main__":
    sys.exit(main())
