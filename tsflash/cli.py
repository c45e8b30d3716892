"""The `tsflash` command line: `tsflash data|bench|sweep|report ...`.

Each subcommand group lives in `tsflash/commands/<group>.py` and exposes `register(subparsers)`,
which adds its parser and sets `func(args) -> int`. This file only wires them together and turns
a `UserError` into one line on stderr and exit status 2 (no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tsflash.errors import UserError

COMMAND_GROUPS = ("data", "bench", "sweep", "report")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors: one line, exit 2, like UserError
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tsflash",
        description="Does a longer context help? Long-context transformers on BTC 1-minute bars, "
        "with the cost and the multiple-testing-adjusted benefit of every context length.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for group in COMMAND_GROUPS:
        module = importlib.import_module(f"tsflash.commands.{group}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"tsflash: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tsflash: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
