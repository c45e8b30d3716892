"""Options shared by several subcommands, and the argparse type functions that check values.

A type function turns the text of one option into its value or raises
`argparse.ArgumentTypeError`, so argparse reports a bad value as one line,
``tsflash bench train: error: argument --steps: must be an integer >= 1, got 0``, and exits 2.
Where the project already has the rule (context lengths, devices, dates, overrides, symbols),
the type function calls it: `_argument` turns its UserError into the argparse error. The text
forms of two options are parsed below them, in `tsflash.config` (`parse_lengths`, `parse_overrides`),
so that the sweep and the benchmarks read --lengths and --set without importing the command line.

The shared options are parent parsers made by a function each (`lengths_option`, `device_option`,
`data_option`, `set_option`): a fresh parent per subcommand, because argparse shares a parent's
argument objects with every child, and one child's default would otherwise change the others'.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path

from tsflash import config
from tsflash.config import parse_lengths, parse_overrides
from tsflash.data.store import check_pair
from tsflash.data.synthetic import parse_source
from tsflash.errors import UserError


def _argument(check: Callable, text: str, flag: str):
    """`check(text)`, with a UserError turned into the argparse error. The project's checkers name
    the flag themselves ("--lengths: ..."); argparse names it again, so that prefix is dropped."""
    try:
        return check(text)
    except UserError as exc:
        message = str(exc)
        for prefix in (f"{flag}: ", f"{flag} "):
            message = message.removeprefix(prefix)
        raise argparse.ArgumentTypeError(message) from None


# ---- type functions --------------------------------------------------------------------------


def lengths_type(text: str) -> list[int]:
    """\"512,4096" -> [512, 4096] (`parse_lengths`: powers of two >= 2, distinct, sorted)."""
    return _argument(parse_lengths, text, "--lengths")


def device_type(text: str) -> str:
    """auto | cpu | cuda | cuda:K, checked by tsflash.device.resolve_device (CUDA present, index
    in range); the text is kept, the command resolves it."""
    from tsflash.device import resolve_device  # torch loads only for commands that take --device

    _argument(resolve_device, text, "--device")
    return text


def devices_type(text: str) -> list[str]:
    """One worker per device: cuda:0,cuda:1 | all | cpu | cpu,cpu (tsflash.device.parse_devices:
    one kind, no GPU twice, every GPU present)."""
    from tsflash.device import parse_devices  # torch loads only for commands that take --devices

    return _argument(parse_devices, text, "--devices")


def date_type(text: str) -> str:
    """A UTC day YYYY-MM-DD, returned in that form."""
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def int_type(minimum: int) -> Callable[[str], int]:
    """An integer >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"int_at_least_{minimum}"
    return parse


def float_type(minimum: float, *, strict: bool) -> Callable[[str], float]:
    """A finite number > minimum (strict) or >= minimum."""
    rule = f"{'>' if strict else '>='} {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {rule}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a number {rule}, got {text}")
        return value

    parse.__name__ = f"float_{'above' if strict else 'at_least'}_{minimum:g}"
    return parse


positive_int = int_type(1)
non_negative_int = int_type(0)
positive_float = float_type(0, strict=True)
non_negative_float = float_type(0, strict=False)


def choice_type(choices: tuple[str, ...]) -> Callable[[str], str]:
    """One of `choices` (argparse's own `choices=` message lists quoted reprs; this keeps ours)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"file not found: {text}" if not path.exists() else f"not a file: {text}")
    return path


# Quote assets of Binance spot pairs: a symbol is a base asset followed by one of these.
def symbol_type(text: str) -> str:
    """A Binance spot pair such as BTCUSDT (`check_pair`), upper-cased."""
    return _argument(lambda t: check_pair(t, "--symbol"), text, "--symbol")


def interval_type(text: str) -> str:
    if text not in config.INTERVAL_US:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(config.INTERVAL_US)}, got {text!r}")
    return text


def override_type(text: str) -> str:
    """One KEY=VALUE of --set: the syntax, the key and the value's type are checked now against the
    config's fields; the rules (ranges, fields together) when the whole config is resolved."""
    _argument(lambda t: config.check_overrides(parse_overrides([t])), text, "--set")
    return text


def data_type(text: str) -> str:
    """A bar store folder, or synthetic:random-walk[:SEED] (tsflash.data.synthetic.parse_source)."""
    if _argument(parse_source, text, "--data") is None and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(
            f"bar store folder not found: {text} (create it with `tsflash data import FOLDER` or "
            "`tsflash data fetch`, or use --data synthetic:random-walk)"
        )
    return text


# ---- shared options (parent parsers) -----------------------------------------------------------


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def lengths_option(
    default: str | None, help: str = "comma-separated context lengths N, powers of two"
) -> argparse.ArgumentParser:
    p = _parent()
    shown = f" (default: {default})" if default else ""
    p.add_argument("--lengths", type=lengths_type, default=default, metavar="N,N,...", help=help + shown)
    return p


def device_option() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--device", type=device_type, default="auto", help="auto | cpu | cuda | cuda:K (default: auto)")
    return p


def data_option(default: str | None = "data") -> argparse.ArgumentParser:
    """--data; a string default is checked like a given value (argparse converts it), None is not."""
    p = _parent()
    p.add_argument(
        "--data",
        type=data_type,
        default=default,
        help="bar store folder (default: data), or synthetic:random-walk[:SEED] for the noise control",
    )
    return p


def set_option(help: str) -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument(
        "--set", dest="overrides", type=override_type, action="append", default=[], metavar="KEY=VALUE", help=help
    )
    return p


def design_options() -> argparse.ArgumentParser:
    """What a sweep's design is made of beyond --lengths, --data and --set: the preset, the symbol,
    the date range and the trials per N (`tsflash sweep` runs it, `tsflash preregister` plans it)."""
    p = _parent()
    p.add_argument(
        "--config", default="default", help="preset name in tsflash/presets/ or a .toml path (default: default)"
    )
    p.add_argument(
        "--symbol",
        type=symbol_type,
        default=None,
        help="Binance spot pair, e.g. ETHUSDT (upper-cased; default: the config's data.symbol, BTCUSDT)",
    )
    p.add_argument("--start", type=date_type, help="first UTC day YYYY-MM-DD (default: the config's)")
    p.add_argument("--end", type=date_type, help="last UTC day YYYY-MM-DD, inclusive (default: the config's)")
    p.add_argument(
        "--trials",
        type=positive_int,
        default=1,
        help="trials per N: 1 = N only (default); K > 1 also searches lr and weight decay within each N",
    )
    return p
