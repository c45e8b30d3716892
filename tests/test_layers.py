"""Imports flow one way (issue 57): no import circle between tsflash's modules or its subpackages,
no import up the layer table below (the one docs/layout.md draws), and the package never imports
the lab beside it. Every import is read with `ast`, those inside functions too: a lazy import
is still an arrow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tsflash"

# Top to bottom: a unit imports only units on lower rows (or its own package's modules). A unit is a
# subpackage or a top-level module; "tsflash" is the package's own __init__ (its version, its lazy names).
LAYERS = [
    ("cli", "api"),
    ("commands",),
    ("sweep",),
    ("bench",),
    ("report",),
    ("engine",),
    ("config_docs",),
    ("config",),
    ("dataset",),
    ("scoring", "model"),
    ("stats", "data", "runfolder"),
    ("device", "intervals", "atomic", "identity", "tsflash"),
    ("errors", "_exports"),
]
RANK = {unit: len(LAYERS) - i for i, row in enumerate(LAYERS) for unit in row}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The modules (of any package) `name` imports; `from pkg import sub` names pkg.sub when sub is a module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names}
    return found


GRAPH = {name: {m for m in _imports(name) if m in MODULES and m != name} for name in MODULES}


def _unit(module: str) -> str:
    """tsflash.report.compute -> "report"; tsflash.config -> "config"; tsflash -> "tsflash"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tsflash"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer():
    assert {_unit(m) for m in MODULES} == set(RANK), "add the new module or subpackage to LAYERS (and docs/layout.md)"


def test_no_import_circle_between_modules():
    assert _cycles(GRAPH) == []


def test_no_import_circle_between_subpackages():
    units = {_unit(m): set() for m in MODULES}
    for m, targets in GRAPH.items():
        units[_unit(m)] |= {_unit(t) for t in targets if _unit(t) != _unit(m)}
    assert _cycles(units) == []


def test_imports_go_down_the_layers():
    up = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in sorted(targets)
          if _unit(t) != _unit(m) and RANK[_unit(t)] >= RANK[_unit(m)]]
    assert up == []


def test_the_package_never_imports_the_lab():
    assert [m for m in MODULES if any(i == "lab" or i.startswith("lab.") for i in _imports(m))] == []
    # nor loads one of its files by path, round the import statement
    assert [m for m, path in MODULES.items() if "spec_from_file_location" in path.read_text()] == []


@pytest.mark.parametrize("module", ["tsflash.report.registration", "tsflash.report.context"])
def test_the_report_reads_a_plan_without_the_sweep(module):
    """The plan read-back the report needs lives in the report: the old circle report -> sweep -> report."""
    assert not [i for i in _imports(module) if i.startswith("tsflash.sweep")]
