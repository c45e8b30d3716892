"""`tsflash preregister` with the strength ladder: what a "no" on question 1 rules out.

    python -m lab.preregister --lengths 512,4096,32768 --set train.restarts=4 --ladder --out reports/next-edition

Every option is `tsflash preregister`'s (`tsflash preregister --help`); --ladder adds the ladder
(lab/power_ladder.py at the plan's --set overrides, N=512 against the first arm's longest N): its
command, its price and the sentence each of its outcomes will produce. A user error is one line,
exit status 2, and no plan is written (`tsflash.cli.main` runs it).
"""

from __future__ import annotations

import functools
import sys

from lab import power_ladder
from tsflash import cli
from tsflash.commands import preregister as command


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ladder = power_ladder.plan_entry if "--ladder" in argv else None
    rest = [a for a in argv if a != "--ladder"]
    return cli.main(["preregister", *rest], func=functools.partial(command.run, ladder=ladder))


if __name__ == "__main__":
    sys.exit(main())
