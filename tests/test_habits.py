"""The files of a maintained package are there and agree with pyproject.toml: the LICENSE (the license
pyproject names), the CHANGELOG, `tsflash/py.typed` shipped as package data, and ruff and mypy in the
`dev` extra that `.ci/run` installs and runs before the tests. The lint and the type check themselves
run in CI (`.ci/run`), not here."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_license_file_is_the_license_pyproject_names():
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} the tsflash authors$", text, flags=re.M)
    assert "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND" in text


def test_the_changelog_lists_unreleased_changes_first_and_every_edition():
    text = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "[Unreleased]"
    assert [h.split(" (")[0].split(",")[0] for h in headings[1:]] == ["Third edition", "Second edition", "First edition"]


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert (REPO / "tsflash" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["tsflash"]


def test_ci_installs_ruff_and_mypy_and_runs_them_before_the_tests():
    dev = [re.split(r"[<>=\[ ]", req, maxsplit=1)[0] for req in PYPROJECT["project"]["optional-dependencies"]["dev"]]
    assert {"ruff", "mypy"} <= set(dev)
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    install, lint, types, tests = (ci.index(step) for step in (
        'pip install -e ".[dev]" torch==2.13.0', "ruff check tsflash lab tests benchmarks notebooks", "mypy tsflash lab", "python -m pytest -q"))
    assert install < lint < tests and install < types < tests
    assert 'ruff format --check tsflash --extend-exclude "$TRAINING_PATH" "${FORMATTED[@]}"' in ci


def test_the_format_check_holds_back_only_the_training_path_and_names_files_that_exist():
    text = (REPO / ".ci" / "run").read_text()
    held = re.search(r"^TRAINING_PATH=(\S+)$", text, flags=re.M)[1].split(",")
    assert held and all((REPO / path).exists() for path in held), [p for p in held if not (REPO / p).exists()]
    listed = re.search(r"^FORMATTED=\((.*?)^\)", text, flags=re.S | re.M)[1].split()
    assert listed and all((REPO / path).is_file() for path in listed), [p for p in listed if not (REPO / p).is_file()]
    # FORMATTED adds back the held-back modules that conform; every other module is checked already
    assert all(any(path == h or path.startswith(f"{h}/") for h in held) for path in listed)
