"""The package as a user installs it (`pip install .`, or from a wheel), not as this checkout runs
it: the wheel carries everything read at run time (the presets, the trial ledger, the report
templates), so a copy installed elsewhere loads `default` without the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from tests.conftest import REPO
from tsflash.config import load_config, preset_names

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]

# Run with `python -S` (site-packages' .pth files are not read, so this environment's editable
# install of the checkout is invisible), PYTHONPATH = the install target, then this environment's
# site-packages folders for the dependencies (numpy, pyarrow ...), from a folder outside the checkout.
INSTALLED = """
import json, sys
from importlib import resources
from pathlib import Path
import tsflash
from tsflash.config import load_config, preset_names
repo = Path(sys.argv[1]).resolve()
dependencies = {Path(p).resolve() for p in sys.argv[2:]}  # an environment may live in the checkout (.venv)
inside = [p for p in sys.path if Path(p or ".").resolve().is_relative_to(repo) and Path(p).resolve() not in dependencies]
templates = sorted(t.name for t in (resources.files("tsflash") / "report" / "templates").iterdir())
print(json.dumps({"file": tsflash.__file__, "inside": inside, "presets": preset_names(),
                  "default": load_config("default").to_dict(), "templates": templates}))
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built offline from a copy of the sources (a build in the checkout would leave
    build/ and *.egg-info there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO / "tsflash", src / "tsflash", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    _run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(src)])
    (built,) = (tmp / "dist").glob("tsflash-*.whl")
    return built


def test_the_wheel_carries_the_presets_and_the_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"tsflash/presets/{p}.toml" for p in preset_names()} <= names
    assert {"tsflash/presets/default.toml", "tsflash/presets/cpu.toml"} <= names
    templates = {f"tsflash/report/templates/{t.name}" for t in (resources.files("tsflash") / "report" / "templates").iterdir()
                 if t.name.endswith(".j2")}
    assert templates and templates <= names


def test_the_wheel_carries_the_typed_marker(wheel):
    """tsflash/py.typed (PEP 561): a user's type checker reads the installed package's annotations."""
    assert "tsflash/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_the_wheel_carries_the_trial_ledger(wheel):
    """The DSR reads its trial count from tsflash/stats/trials.toml at run time: the wheel's copy is
    the checkout's, byte for byte."""
    from tsflash.stats.gate import TRIALS_FILE

    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("tsflash/stats/trials.toml") == TRIALS_FILE.read_bytes()


def test_an_installed_copy_loads_default_outside_the_checkout(wheel, tmp_path):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _run([*PIP, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)])
    dependencies = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    proc = _run([sys.executable, "-S", "-c", INSTALLED, str(REPO), *dependencies], cwd=elsewhere,
                env={"PYTHONPATH": os.pathsep.join([str(site), *dependencies]), "PATH": ""})
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).resolve().is_relative_to(site.resolve()) and got["inside"] == []
    assert got["presets"] == ["btc-1s", "cpu", "default", "first-edition"] == preset_names()
    assert got["default"] == json.loads(json.dumps(load_config("default").to_dict()))  # tuples as JSON lists
    assert got["templates"] == sorted(t.name for t in (resources.files("tsflash") / "report" / "templates").iterdir())
