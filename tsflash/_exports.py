"""Lazy re-exports for the package `__init__` files.

A package names its public objects once (name -> submodule); they are imported on first access
(PEP 562), so `import tsflash.data` does not load torch, and `tsflash bench`'s argument parsing
does not load polars.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable, Callable]:
    """(__getattr__, __dir__) for `package`, resolving `name` from `package.<exports[name]>`."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
