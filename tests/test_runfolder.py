"""tsflash.runfolder: trial keys round-trip, paths are spelled once."""

from __future__ import annotations

import pytest

from tsflash.runfolder import RunFolder, decode_trial_key, encode_trial_key


@pytest.mark.parametrize("params", [
    {"n": 512},
    {"n": 64, "lr": 3e-4, "weight_decay": 0.05},
    {"n": 131072, "lr": 1e-05, "weight_decay": 0.0},  # an exponent's "-" is not a separator
])
def test_trial_keys_round_trip(params):
    key = encode_trial_key(params)
    assert decode_trial_key(key) == pytest.approx(params)


def test_trial_key_examples_and_errors():
    assert encode_trial_key({"n": 64, "weight_decay": 0.05, "lr": 3e-4}) == "n64-lr0.0003-wd0.05"
    assert encode_trial_key({"n": 512, "lr": 1e-5}) == "n512-lr1e-05"
    with pytest.raises(ValueError, match=r"not a trial key: 'baseline-logreg'"):
        decode_trial_key("baseline-logreg")


def test_cell_paths(tmp_path):
    f = RunFolder(tmp_path)
    assert f.cell_marker("n64", 1, 2) == tmp_path / "cells" / "n64" / "fold1-seed2.cell.json"
    assert f.baseline_marker(0) == tmp_path / "cells" / "baselines" / "fold0.cell.json"
    assert f.n_finished_cells() == 0 and f.cell_summaries() == ([], [])


def test_the_run_folder_writes_json_with_the_one_writer(tmp_path):
    """One JSON writer for the project (tsflash.atomic.write_json): run-folder state keeps NaN, which
    reads back as the same float."""
    import json
    import math

    from tsflash import atomic, runfolder

    assert runfolder.write_json is atomic.write_json
    path = runfolder.write_json(tmp_path / "cells" / "x.cell.json", {"hit_rate": math.nan, "n": 3})
    assert path.read_text() == '{\n "hit_rate": NaN,\n "n": 3\n}'
    assert math.isnan(runfolder.read_json(path)["hit_rate"]) and json.loads(path.read_text())["n"] == 3
