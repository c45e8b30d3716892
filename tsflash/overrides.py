"""The text of --lengths and --set, parsed for every layer that reads them: the command line, the
sweep's pre-registration and cost model, the benchmarks and the lab's scripts.

It sits just above `tsflash.config` (whose rule a length obeys), so a module below the command line
parses an override without importing `tsflash.commands`.
"""

from __future__ import annotations

import tomllib

from tsflash import config
from tsflash.errors import UserError


def parse_lengths(text: str, flag: str = "--lengths") -> list[int]:
    """"512,4096" -> [512, 4096]: powers of two >= 2 (`tsflash.config.check_context_length`),
    distinct, sorted."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(p == "" for p in parts):
        raise UserError(f"{flag}: give comma-separated powers of two such as 512,4096,32768, got {text!r}")
    out = []
    for p in parts:
        try:
            n = int(p)
        except ValueError:
            raise UserError(f"{flag}: every length must be an integer (a power of two >= 2), got {p!r}") from None
        out.append(config.check_context_length(n, flag))
    if len(set(out)) != len(out):
        raise UserError(f"{flag}: lengths must be distinct, got {text!r}")
    return sorted(out)


def parse_overrides(items: list[str]) -> dict:
    """["train.steps=3", "model.d_model=16"] -> {"train": {"steps": 3}, "model": {"d_model": 16}}.

    Values are TOML literals (3, 1e-3, true, [0, 1], "text"); a bare word is taken as a string.
    """
    out: dict = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set: expected KEY=VALUE such as train.steps=3, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out
