"""tsflash.runfolder: trial keys round-trip, paths are spelled once."""

from __future__ import annotations

import pytest

from tsflash.errors import UserError
from tsflash.runfolder import (
    DamagedFile,
    RunFolder,
    decode_trial_key,
    encode_trial_key,
    load_npz,
    read_json,
    read_parquet,
)


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


def test_a_damaged_json_or_npz_file_is_one_user_error_naming_it(tmp_path):
    import numpy as np

    (tmp_path / "a.json").write_text('{"n": ')
    with pytest.raises(DamagedFile, match=r"a\.json is damaged: not valid JSON \(JSONDecodeError: ") as caught:
        read_json(tmp_path / "a.json")
    # the CLI's one line (UserError), and still what callers that skip unreadable folders catch
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ValueError)
    (tmp_path / "b.json").write_bytes(b"\xff\xfe{}")  # not UTF-8
    with pytest.raises(DamagedFile, match="UnicodeDecodeError"):
        read_json(tmp_path / "b.json")
    np.savez(tmp_path / "c.npz", x=np.arange(1000.0))
    with load_npz(tmp_path / "c.npz") as z:
        assert z["x"].sum() == 499500.0
    with pytest.raises(KeyError), load_npz(tmp_path / "c.npz") as z:  # the block's own errors pass unchanged
        z["y"]
    data = bytearray((tmp_path / "c.npz").read_bytes())
    data[400:408] = b"\xff" * 8
    (tmp_path / "d.npz").write_bytes(bytes(data))
    with pytest.raises(DamagedFile, match=r"d\.npz is damaged: an array cannot be read \(BadZipFile: Bad CRC-32"), \
            load_npz(tmp_path / "d.npz") as z:
        z["x"]
    (tmp_path / "e.npz").write_bytes(bytes(data[:300]))
    with pytest.raises(DamagedFile, match=r"e\.npz is damaged: not a readable \.npz archive \(BadZipFile: "):
        load_npz(tmp_path / "e.npz").__enter__()
    with pytest.raises(FileNotFoundError):  # a missing file is not a damaged one
        load_npz(tmp_path / "f.npz").__enter__()


def test_a_damaged_parquet_file_is_one_user_error_naming_it(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"x": np.random.default_rng(0).normal(size=5000)})
    pq.write_table(table, tmp_path / "a.parquet", write_page_checksum=True, compression="none")
    assert read_parquet(tmp_path / "a.parquet").equals(table)
    data = (tmp_path / "a.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedFile, match=r"cut\.parquet is damaged: not a readable Parquet file \(ArrowInvalid: "):
        read_parquet(tmp_path / "cut.parquet")
    # a changed value inside a page: decodes, so only the page's CRC tells (without it, a wrong number is read)
    flipped = bytearray(data)
    flipped[len(data) // 3 : len(data) // 3 + 8] = b"\x00" * 8
    (tmp_path / "flip.parquet").write_bytes(bytes(flipped))
    with pytest.raises(DamagedFile, match=r"flip\.parquet is damaged: not a readable Parquet file \(OSError: .*CRC"):
        read_parquet(tmp_path / "flip.parquet")
    with pytest.raises(FileNotFoundError):  # a missing file is not a damaged one
        read_parquet(tmp_path / "none.parquet")


def test_the_notebook_api_names_a_damaged_run_file(tmp_path):
    from tsflash import api

    (tmp_path / "run.json").write_text('{"status": "complete"}')
    (tmp_path / "results.json").write_text('{"verdict": ')
    with pytest.raises(DamagedFile, match=r"results\.json is damaged: not valid JSON"):
        api.SweepResult.of(tmp_path)
    (tmp_path / "results.json").unlink()
    res = api.SweepResult.of(tmp_path)  # unfinished parts are None, not errors
    assert res.complete and res.results is None and res.report is None
