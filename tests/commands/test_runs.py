"""`tsflash runs`: one line a run folder, newest first; a damaged run.json, config.json or
questions.json is named in its row, and the other rows are listed as before."""

from __future__ import annotations

import shutil

from tests.report.test_report import make_run
from tsflash import cli


def rows(capsys) -> dict[str, str]:
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["run", "created", "(UTC)"]
    return {line.split()[0]: line for line in out[1:]}


def test_runs_lists_each_folder_with_its_status_and_answer(tmp_path, capsys):
    root = tmp_path / "runs"
    shutil.move(make_run(tmp_path, drift=0.0), root / "20240101-000000-aaa")
    assert cli.main(["runs", "--root", str(root)]) == 0
    (row,) = rows(capsys).values()
    assert row.split()[1] == "?"  # no creation time recorded
    assert row.split()[2:] == ["default", "?", "finished", "-"]  # no lengths recorded, no report yet: no answer


def test_a_damaged_file_is_named_in_its_row_and_the_others_are_listed(tmp_path, capsys):
    root = tmp_path / "runs"
    for name in ("20240101-000000-aaa", "20240102-000000-bbb", "20240103-000000-ccc"):
        shutil.move(make_run(tmp_path, drift=0.0), root / name)
    (root / "20240102-000000-bbb" / "run.json").write_text('{"status": ')
    (root / "20240103-000000-ccc" / "config.json").write_bytes(b"\xff{}")
    (root / "20240103-000000-ccc" / "questions.json").write_text("{")
    assert cli.main(["runs", "--root", str(root)]) == 0
    listed = rows(capsys)
    assert list(listed) == ["20240103-000000-ccc", "20240102-000000-bbb", "20240101-000000-aaa"]  # newest first
    assert "damaged run.json (10 cells trained)" in listed["20240102-000000-bbb"]
    assert "damaged config.json" in listed["20240103-000000-ccc"]
    assert listed["20240103-000000-ccc"].endswith("damaged questions.json")
    assert "damaged" not in listed["20240101-000000-aaa"]
