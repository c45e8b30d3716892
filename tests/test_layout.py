"""The package's layout rules, checked on the source tree: few modules at the top,
every subpackage says what it owns and names its public objects in `__all__`, the tests mirror
the packages, no function runs over about 80 lines without a written reason, the source names no
issue numbers, and the flat `tsflash.selection` is gone, as the CHANGELOG says."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "tsflash"
MAX_TOP_LEVEL_MODULES = 12
MAX_FUNCTION_LINES = 80
REASON = "# long:"  # on the def line(s) of a longer function: why it is kept whole


def subpackages() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def test_at_most_twelve_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@pytest.mark.parametrize("name", subpackages())
def test_each_package_says_what_it_owns_and_names_its_public_objects(name):
    package = importlib.import_module(f"tsflash.{name}")
    doc = package.__doc__ or ""
    assert len(doc.split()) >= 30, f"tsflash.{name}: a paragraph saying what the package owns"
    assert isinstance(package.__all__, list) and len(set(package.__all__)) == len(package.__all__)
    missing = [n for n in package.__all__ if not hasattr(package, n)]
    assert not missing, f"tsflash.{name}.__all__ names what it does not export: {missing}"


@pytest.mark.parametrize("name", subpackages())
def test_the_tests_mirror_the_packages(name):
    assert list((REPO / "tests" / name).glob("test_*.py")), f"tests/{name}/ for tsflash/{name}/"


def long_functions(root: Path) -> list[tuple[str, int]]:
    """(place, lines) of each function longer than MAX_FUNCTION_LINES (decorators excluded, docstring
    included) whose def lines carry no REASON."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            head = lines[node.lineno - 1:node.body[0].lineno - 1]  # `def` to the line before the body
            if length > MAX_FUNCTION_LINES and not any(REASON in line for line in head):
                found.append((f"{path.relative_to(root.parent)}:{node.lineno} {node.name}", length))
    return found


def test_no_function_over_80_lines_without_a_written_reason():
    assert long_functions(PACKAGE) == []


def test_the_rule_finds_a_long_function_and_accepts_a_reason(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\ndef kept():  {REASON} one pass\n{body}")
    assert long_functions(tmp_path) == [(f"{tmp_path.name}/m.py:1 long", MAX_FUNCTION_LINES + 1)]


# The issue tracker's history belongs in CHANGELOG.md and docs/, not in the package's words. Held:
# modules of the training path, unchanged while the third edition's pre-registered runs train.
HISTORY = re.compile(r"\bissues? \d+", re.IGNORECASE)
HELD_HISTORY = {"tsflash/engine/_train.py", "tsflash/dataset/probe.py"}


def issue_references(root: Path) -> list[str]:
    return [f"{path.relative_to(root.parent)}:{i}" for path in sorted(root.rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if HISTORY.search(line)]


def test_the_package_speaks_of_the_product_not_of_its_issues():
    found = issue_references(PACKAGE)
    assert [f for f in found if f.split(":")[0] not in HELD_HISTORY] == []
    assert {f.split(":")[0] for f in found} == HELD_HISTORY  # a held file that drops its reference leaves the list


def test_the_history_rule_finds_an_issue_number(tmp_path):
    (tmp_path / "m.py").write_text('"""The nesting check (issue 29)."""\nx = 1  # Issues 3 and 4\ny = "tissue 5"\n')
    assert issue_references(tmp_path) == [f"{tmp_path.name}/m.py:1", f"{tmp_path.name}/m.py:2"]


def test_the_flat_selection_module_is_gone_as_the_changelog_says():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tsflash.selection")
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "`from tsflash.selection import ...` and the like now fail" in changelog


def readme_layout() -> dict[str, set[str]]:
    """{folder: the modules its row of the README's layout table names}."""
    rows = {}
    for line in (REPO / "README.md").read_text().splitlines():
        m = re.match(r"\| `(tsflash/(?:\w+/)?)` \| ([^|]+) \|", line)
        if m:
            rows[m[1]] = set(re.findall(r"`(\w+)/?`", m[2]))
    return rows


def test_the_readmes_layout_table_names_every_public_module_and_no_other():
    rows = readme_layout()
    folders = ["tsflash/", *(f"tsflash/{name}/" for name in subpackages())]
    assert sorted(rows) == sorted(folders)
    for folder, named in rows.items():
        modules = {p.stem for p in (REPO / folder).glob("*.py")} - {"__init__"}
        extra = {p.name for p in (REPO / folder).iterdir() if p.is_dir() and p.name != "__pycache__"} - set(subpackages())
        assert {m for m in modules if not m.startswith("_")} <= named, folder
        assert named <= modules | extra, folder  # no module that is not there (templates/ is a folder)
