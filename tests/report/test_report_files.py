"""`tsflash report RUN`: a run folder that cannot be read or written, or that a newer tsflash wrote,
is one line and exit 2, with nothing written."""

from __future__ import annotations

import errno
import json
import re

import pytest

from tests.report.test_report import make_run
from tsflash import cli


def one_line(capsys, pattern: str) -> None:
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert re.fullmatch(pattern, err.rstrip("\n")), err


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path, drift=0.0)


def test_an_out_folder_that_cannot_be_created(run, tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "a-file" / "report")]) == 2
    one_line(capsys, r"tsflash: error: report: cannot write the report into .*a-file/report: .*a-file/report: Not a "
                     r"directory \(a part of the path is a file, not a folder; nothing half-written was kept\)")
    assert not (run / "report.md").exists()


def test_a_run_folder_that_cannot_be_written(run, capsys, monkeypatch):
    import tempfile

    def denied(dir=None, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(dir))

    monkeypatch.setattr(tempfile, "TemporaryFile", denied)
    assert cli.main(["report", str(run)]) == 2
    one_line(capsys, r"tsflash: error: report: cannot write the report into .*: .*: Permission denied \(check the "
                     r"permissions, or choose a path you can use; nothing half-written was kept\)")
    assert not (run / "report.md").exists()


def test_a_run_folder_that_cannot_be_read(run, capsys):
    (run / "run.json").unlink()
    (run / "run.json").mkdir()  # a folder where the file should be: reading it fails
    assert cli.main(["report", str(run)]) == 2
    one_line(capsys, r"tsflash: error: .*run\.json: Is a directory \(a file was expected, the path is a folder; "
                     r"nothing half-written was kept\)")


def test_a_damaged_run_json(run, capsys):
    (run / "run.json").write_text('{"run_key": ')
    assert cli.main(["report", str(run)]) == 2
    one_line(capsys, r"tsflash: error: report: .*run\.json is damaged: not valid JSON \(JSONDecodeError: .*\)")


def test_a_run_folder_of_a_newer_version(run, capsys):
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(meta | {"format": 2}))
    assert cli.main(["report", str(run)]) == 2
    one_line(capsys, r"tsflash: error: .*run\.json was written by a newer tsflash \(run folder format 2; tsflash "
                     r"\S+ reads formats up to 1\): use the version that wrote it \(run\.json \"git_commit\"\)")
    assert not (run / "report.md").exists()
