"""lab/carry_inputs.py, with pip and the packer stubbed: the five wheels are fetched for the
device's Python at the versions installed here, only those missing, the bars packed once, and the
carry added up against the device's 64 MiB; bad input and a full carry are one line, exit 2."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest

from tests.conftest import load_experiment

carry_inputs = load_experiment("carry_inputs")


def _wheel_name(pin: str) -> str:
    name, version = pin.split("==")
    return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """An empty git checkout as the working folder (the carry counts its files)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Runner:
    """Stands in for subprocess.run: records each command and makes what it would make."""

    def __init__(self, fetch: bool = True):
        self.commands, self.fetch = [], fetch

    def __call__(self, command):
        self.commands.append(command)
        if "download" in command and self.fetch:
            dest = Path(command[command.index("--dest") + 1])
            dest.mkdir(parents=True, exist_ok=True)
            for pin in [c for c in command if "==" in c]:
                (dest / _wheel_name(pin)).write_bytes(b"w" * 1000)
        if "pack" in command:
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "btcusdt-1m-2021.packed.parquet").write_bytes(b"p" * 5000)
        return subprocess.CompletedProcess(command, 0)


def test_the_wheels_are_the_five_at_this_environments_versions_for_the_devices_python():
    pins = carry_inputs.pinned()
    assert [p.split("==")[0] for p in pins] == ["optuna", "alembic", "mako", "colorlog", "sqlalchemy"]
    assert pins[0] == f"optuna=={importlib.metadata.version('optuna')}"
    command = carry_inputs.wheel_command(pins, Path(".whl"))
    assert command[command.index("--python-version") + 1] == "3.12" and "--no-deps" in command
    assert "--only-binary=:all:" in command and command[-5:] == pins


def test_only_what_is_missing_is_made_and_the_carry_is_added_up(checkout, capsys):
    run = Runner()
    assert carry_inputs.main(["--data", str(checkout)], run=run) == 0
    fetched, packed = run.commands
    assert [c for c in fetched if "==" in c] == carry_inputs.pinned()
    assert packed[packed.index("--root") + 1] == str(checkout) and packed[-4:] == ["--start", "2021", "--end", "2025"]
    out = capsys.readouterr().out
    assert "the call carries 0.0 of 64 MiB (checkout without reports/ 0.0 MiB, .whl 0.0 MiB, .carry 0.0 MiB)" in out
    # a second time: nothing fetched or packed; one wheel at another version: that one alone
    again = Runner()
    assert carry_inputs.main(["--data", str(checkout)], run=again) == 0 and again.commands == []
    stale = Path(".whl") / _wheel_name(carry_inputs.pinned()[2])
    stale.rename(stale.with_name("mako-0.0.1-py3-none-any.whl"))
    assert carry_inputs.missing_wheels(Path(".whl")) == [carry_inputs.pinned()[2]]
    third = Runner()
    assert carry_inputs.main(["--data", str(checkout)], run=third) == 0
    assert [[c for c in cmd if "==" in c] for cmd in third.commands] == [[carry_inputs.pinned()[2]]]


def test_bad_input_and_a_full_carry_are_one_line(checkout, capsys):
    run = Runner()
    assert carry_inputs.main(["--data", "nowhere"], run=run) == 2
    assert capsys.readouterr().err == "error: --data nowhere: no such folder (the bar store to pack from)\n"
    assert run.commands == [] and not Path(".whl").exists()  # refused before anything is fetched
    assert carry_inputs.main(["--data", str(checkout)], run=Runner(fetch=False)) == 2  # pip fetched nothing
    assert capsys.readouterr().err.startswith("error: pip could not fetch optuna==")
    assert not Path(".carry/packed").exists()
    assert carry_inputs.main(["--data", str(checkout), "--limit-mib", "0.001"], run=Runner()) == 2
    assert "no room for a run's state" in capsys.readouterr().err
