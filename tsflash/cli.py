"""The `tsflash` command line: `tsflash data|bench|preregister|sweep|report|confirm|runs ...`, `tsflash --version`.

Each subcommand group lives in `tsflash/commands/<group>.py` and exposes `register(subparsers)`,
which adds its parser and sets `func(args) -> int`; options shared by several subcommands and the
type functions that check values are in `tsflash/commands/options.py`. This file wires them
together; they are imported statically, which stays cheap because each command module keeps its
heavy imports (torch among them) inside the functions that run it: `tsflash data --help` loads no
torch. Every user error -- a bad option value found by argparse, or a `UserError` raised while
the command runs, or a file error the user can fix (`tsflash.errors.file_error`: a full disk, no
permission) -- is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

# `import tsflash` (the package, imported before anything here) already set KINETO_LOG_LEVEL,
# which torch's profiler reads when torch loads; see tsflash/__init__.py.
import tsflash
from tsflash.commands import bench, confirm, data, preregister, report, runs, sweep
from tsflash.errors import UsageError, UserError, file_error, reader_left

COMMAND_GROUPS = (data, bench, preregister, sweep, report, confirm, runs)  # in the order `tsflash --help` lists them


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """argparse's usage errors: one line (no usage block), handled like a UserError by main()."""
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tsflash",
        description="Does a longer context help? Long-context transformers on BTC 1-minute bars, "
        "with the cost and the multiple-testing-adjusted benefit of every context length.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging (per-step lines too)")
    parser.add_argument("--version", action="version", version=f"tsflash {tsflash.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def _one_line(text: object) -> str:
    return " ".join(str(text).split("\n"))


def main(argv: list[str] | None = None, func: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run the command `argv` names; `func`, when given, runs in place of the command's own function
    (`python -m lab.preregister`: `tsflash preregister` with the lab's strength ladder)."""
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            datefmt="%H:%M:%S",
        )
        code = int((func or args.func)(args) or 0)
        sys.stdout.flush()  # a reader that left shows here, in the handler below, not at the interpreter's exit
        return code
    except UsageError as exc:
        print(_one_line(exc), file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"tsflash: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tsflash: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout left
        return reader_left()
    except OSError as exc:  # a full disk, a folder that cannot be created, read or written: one line too
        if (error := file_error(exc)) is None:
            raise
        logging.getLogger(__name__).debug("file error", exc_info=True)  # the traceback, with -v
        print(f"tsflash: error: {_one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
