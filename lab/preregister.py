"""`tsflash preregister` with the strength ladder: what a "no" on question 1 rules out.

    python -m lab.preregister --lengths 512,4096,32768 --set train.restarts=4 --ladder --out reports/next-edition

Every option is `tsflash preregister`'s (`tsflash preregister --help`); --ladder adds the ladder
(lab/power_ladder.py at the plan's --set overrides, N=512 against the first arm's longest N): its
command, its price and the sentence each of its outcomes will produce. A user error is one line,
exit status 2, and no plan is written.
"""

from __future__ import annotations

import logging
import sys

from lab import power_ladder
from tsflash import cli
from tsflash.commands import preregister as command
from tsflash.errors import UsageError, UserError, file_error


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ladder = "--ladder" in argv
    try:
        args = cli.build_parser().parse_args(["preregister", *[a for a in argv if a != "--ladder"]])
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            datefmt="%H:%M:%S")
        return command.run(args, ladder=power_ladder.plan_entry if ladder else None)
    except UsageError as exc:  # argparse's own line, "tsflash preregister: error: ..."
        print(exc, file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"python -m lab.preregister: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that cannot be written: one line, as tsflash says it
        if (error := file_error(exc)) is None:
            raise
        print(f"python -m lab.preregister: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
