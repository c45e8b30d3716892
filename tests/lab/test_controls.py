"""The positive and the noise control at toy size through the whole pipeline (tsflash.sweep.run.run_sweep),
and lab/controls.py's summary.

Toy long-memory market: the echo lag is 48 bars (the full-size default is 10080) with a strong drift
(strength 0.3, full size 0.06), so that a 1-layer d_model-32 model finds it in 100 steps of 2048
tokens on one CPU thread. Lengths 16, 32, 128: a 15-bar forward return from bar t is tilted by the
moves over bars t-61 .. t-33, which N=128 always sees (every scored bar has >= 65 bars of context)
and N=16, 32 never do. The N=128 model must beat both on per-bar test log-loss, in every fold; on
the random walk, with the same settings, no N may beat another.

Toy slow regime (the second positive control, another mechanism): a hidden state of about 1000
bars tilts every return's drift by 0.15 of its volatility (full size: four weeks, 0.0125); a
window of N bars estimates the state the better the longer it is, so the lengths must rank in the
order of the information they hold, N=16 worst and N=128 best, in every fold. The clean iid null
says no, as the random walk does.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_experiment, one_thread
from tsflash.config import parse_overrides
from tsflash.sweep.run import SweepOptions, run_sweep

LENGTHS = [16, 32, 128]
SOURCES = {"long-memory": "synthetic:long-memory:1:lag=48,strength=0.3", "random-walk": "synthetic:random-walk:1"}
TOY = [
    'data.start="2024-01-01"', 'data.end="2024-04-30"', "splits.n_folds=2", "splits.test_days=10", "splits.val_days=0",
    "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "train.seeds=[0]",
    "train.steps=100", "train.tokens_per_step=2048", "train.warmup_steps=10", "train.lr=3e-3",
    "eval.baseline_lags=1",
]
HOUR_US = 3600 * 10**6


@pytest.fixture(scope="module")
def controls():
    return load_experiment("controls")


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory) -> dict[str, Path]:
    """Both toy sweeps (one CPU thread: on a small shared machine torch's thread pool is slower)."""
    runs, t0 = {}, time.process_time()
    with one_thread():
        for name, data in SOURCES.items():
            runs[name] = run_sweep(SweepOptions(lengths=LENGTHS, data=data, out=tmp_path_factory.mktemp(name) / "run",
                                                device="cpu", preset="cpu", precision=False,
                                                overrides=parse_overrides(TOY)))
    runs["cpu_seconds"] = time.process_time() - t0  # CPU time: wall time on a shared machine says little
    for name in SOURCES:  # shown with pytest -s
        print(name, {n: round(float(np.mean(np.concatenate([v[0] for v in bar_losses(runs[name], n).values()]))), 4)
                     for n in LENGTHS}, f"({runs['cpu_seconds']:.0f} s CPU for both)")
    return runs


MORE_SOURCES = {"regime": "synthetic:regime:1:duration=1000,tilt=0.15", "iid": "synthetic:iid:1"}


@pytest.fixture(scope="module")
def more_toy_runs(tmp_path_factory) -> dict[str, Path]:
    """The toy regime and the clean null, as `toy_runs` (their CPU seconds each under "<name>_seconds")."""
    runs = {}
    with one_thread():
        for name, data in MORE_SOURCES.items():
            t0 = time.process_time()
            runs[name] = run_sweep(SweepOptions(lengths=LENGTHS, data=data, out=tmp_path_factory.mktemp(name) / "run",
                                                device="cpu", preset="cpu", precision=False,
                                                overrides=parse_overrides(TOY)))
            runs[f"{name}_seconds"] = time.process_time() - t0
    return runs


def bar_losses(run: Path, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per fold: (log-loss of every labelled test bar, its hour) from the saved cells."""
    out = {}
    for path in sorted((run / "cells" / f"n{n}").glob("fold*-seed*.npz")):
        with np.load(path) as z:
            y, keep = z["y_true"].astype(np.int64), z["y_true"] >= 0
            loss = -np.log(np.clip(z["y_prob"][keep, y[keep]], 1e-12, None))
            out[path.name.split("-")[0]] = (loss, z["test_time"][keep] // HOUR_US)
    return out


def paired_difference(short: dict, long: dict) -> tuple[float, float, dict]:
    """Mean per-bar log-loss of `short` minus `long` over all folds (> 0: long is better), its
    standard error over hourly blocks (the 15-bar labels overlap), and the mean per fold."""
    assert short.keys() == long.keys() and len(short) == 2
    d = np.concatenate([short[k][0] - long[k][0] for k in short])
    _, block = np.unique(np.concatenate([short[k][1] for k in short]), return_inverse=True)
    means = np.bincount(block, d) / np.bincount(block)
    return float(d.mean()), float(means.std(ddof=1) / math.sqrt(len(means))), \
        {k: float((short[k][0] - long[k][0]).mean()) for k in short}


def test_toy_long_memory_is_found_by_the_length_that_reaches_it(toy_runs):
    loss = {n: bar_losses(toy_runs["long-memory"], n) for n in LENGTHS}
    for short in (16, 32):
        mean, se, per_fold = paired_difference(loss[short], loss[128])
        # a clear margin (measured: 0.026 - 0.034 nats per bar, z 7 - 8) in every fold
        assert mean > 5 * se and min(per_fold.values()) > 0.01, (short, mean, se, per_fold)


def test_toy_regime_ranks_the_lengths_in_the_order_of_their_information(more_toy_runs):
    loss = {n: bar_losses(more_toy_runs["regime"], n) for n in LENGTHS}
    for short, long in ((16, 32), (32, 128)):
        mean, se, per_fold = paired_difference(loss[short], loss[long])
        # measured: 16 vs 32 +0.014 (z 4.8), 32 vs 128 +0.036 (z 8), every fold
        assert mean > 3 * se and min(per_fold.values()) > 0, (short, long, mean, se, per_fold)


@pytest.mark.parametrize("null", ["random-walk", "iid"])
def test_toy_nulls_have_no_winning_length(toy_runs, more_toy_runs, null):
    loss = {n: bar_losses((toy_runs | more_toy_runs)[null], n) for n in LENGTHS}
    for i, a in enumerate(LENGTHS):
        for b in LENGTHS[i + 1:]:
            mean, se, per_fold = paired_difference(loss[a], loss[b])
            # within noise (measured: |z| <= 1, |mean| < 0.001), and far below the long-memory margin
            assert abs(mean) < 3 * se and abs(mean) < 0.005, (a, b, mean, se, per_fold)


def test_toy_runs_fit_in_a_minute(toy_runs, more_toy_runs):
    assert toy_runs["cpu_seconds"] < 60  # measured: about 30 s of one core for both sweeps
    for name in MORE_SOURCES:
        assert more_toy_runs[f"{name}_seconds"] < 60  # measured: about 17 s of one core each


def test_summary_of_the_toy_runs(toy_runs, controls, tmp_path):
    out = tmp_path / "controls"
    for name in SOURCES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).symlink_to(toy_runs[name])
    # finished runs are not trained again: the script goes straight to the summary
    assert controls.main(["--out", str(out), "--lengths", "16,32,128", "--device", "cpu", "--preset", "cpu"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    lm, rw = summary["runs"]
    assert lm["source"] == "long-memory" and rw["source"] == "random-walk" and lm["complete"] and rw["complete"]
    assert lm["data"] == "synthetic:long-memory:1:lag=48,strength=0.3"
    # pooled log-loss from the cell summaries = the per-bar mean from the cells
    for run, root in ((lm, toy_runs["long-memory"]), (rw, toy_runs["random-walk"])):
        for n in LENGTHS:
            losses = np.concatenate([v[0] for v in bar_losses(root, n).values()])
            assert run["per_n"][str(n)]["log_loss"] == pytest.approx(losses.mean(), rel=1e-6)
    assert lm["per_n"]["128"]["hit_rate"] > lm["per_n"]["16"]["hit_rate"] + 0.05
    # the oracle (sign of the planted drift) is the ceiling of the direction hit rate
    assert 0.7 < lm["oracle"]["hit_rate"] and lm["oracle"]["hit_rate"] > lm["per_n"]["128"]["hit_rate"] - 0.02
    pair = next(p for p in lm["pairs"] if (p["short"], p["long"]) == (32, 128))
    assert pair["log_loss"]["pairs"] == 2 and pair["log_loss"]["longer_better"] == 2 and pair["log_loss"]["mean"] > 0.01
    md = (out / "summary.md").read_text()
    assert "## long-memory (synthetic:long-memory:1:lag=48,strength=0.3)" in md and "| 32 vs 128 | 2 |" in md
    assert "tsflash sweep --data synthetic:long-memory:0 --lengths 16,32,128" in md  # how to rerun it


def test_an_arm_beside_its_base_run(toy_runs, controls, tmp_path):
    """--against: an arm (one knob changed, fewer cells) beside the same cells of the base run."""
    import shutil

    base, arm = tmp_path / "base", tmp_path / "arm"
    (base / "long-memory").parent.mkdir()
    (base / "long-memory").symlink_to(toy_runs["long-memory"])
    shutil.copytree(toy_runs["long-memory"], arm / "long-memory")
    cfg = json.loads((arm / "long-memory" / "config.json").read_text())
    cfg["train"]["patience"] += 3
    (arm / "long-memory" / "config.json").write_text(json.dumps(cfg))
    kept = sorted((arm / "long-memory" / "cells" / "n128").glob("*.cell.json"))[0]
    for path in (arm / "long-memory" / "cells").glob("n*/*.cell.json"):
        if path != kept:
            path.unlink()
    cell = json.loads(kept.read_text())
    cell["metrics"]["log_loss"] -= 0.01
    kept.write_text(json.dumps(cell))
    assert controls.main(["--out", str(arm), "--against", str(base)]) == 0
    (result,) = json.loads((arm / "against.json").read_text())
    assert result["changed"] == {"train.patience": [cfg["train"]["patience"] - 3, cfg["train"]["patience"]]}
    (row,) = result["cells"]
    assert row["n"] == 128 and row["cell"] == kept.name.removesuffix(".cell.json")
    assert row["arm_log_loss"] == pytest.approx(row["base_log_loss"] - 0.01)
    assert row["arm_hit_rate"] == row["base_hit_rate"] and row["arm_found"] == row["base_found"]
    md = (arm / "against.md").read_text()
    assert "changed: `train.patience`" in md and f"| 128 | {row['cell']} |" in md
    assert "Test log-loss, arm minus base over 1 cells: mean -0.01000, mean absolute 0.01000" in md
    assert "Nothing changed" not in md
    assert not (arm / "summary.md").exists()  # --against writes only its comparison
    with pytest.raises(SystemExit, match="no control run in both"):
        controls.main(["--out", str(tmp_path / "empty"), "--against", str(base)])


# ---------------------------------------------------------------------------------------------
# The summary's arithmetic on hand-made cells


def fake_cell(n: int, fold: int, seed: int, log_loss: float, confusion, n_scored: int = 100) -> dict:
    return {"n": n, "fold": fold, "seed": seed,
            "metrics": {"log_loss": log_loss, "confusion": confusion, "n_scored": n_scored}}


def test_direction_counts_and_pooling(controls):
    c = [[5, 1, 2], [0, 9, 0], [3, 1, 7]]  # rows true down/flat/up, columns predicted
    assert controls.direction_counts(c) == (12, 17)
    rows = controls.cell_rows([fake_cell(8, 0, 0, 1.0, c, 100), fake_cell(8, 1, 0, 0.5, c, 300)])
    assert list(rows) == [8] and rows[8][(1, 0)] == {"log_loss": 0.5, "n_scored": 300, "hits": 12, "directional": 17}
    p = controls.pooled(rows[8])
    assert p["log_loss"] == pytest.approx((100 * 1.0 + 300 * 0.5) / 400) and p["hit_rate"] == pytest.approx(12 / 17)


def test_cells_that_found_the_echo_with_their_stopping_and_far_context(controls):
    c = [[5, 1, 2], [0, 9, 0], [3, 1, 7]]  # hit rate 12/17 = 0.706
    coin = [[5, 0, 5], [0, 9, 0], [5, 0, 5]]  # 0.5
    found = dict(fake_cell(64, 0, 0, 0.95, c), cost={"best_step": 600, "stop_step": 600},
                 far_context={"512": {"log_loss": 1.01}, "16": {"log_loss": 1.02}})
    rows = controls.cell_rows([found, fake_cell(64, 0, 1, 1.04, coin)])[64]
    assert rows[(0, 0)]["best_step"] == 600 and list(rows[(0, 0)]["cut"]) == [16, 512]
    assert "cut" not in rows[(0, 1)] and "best_step" not in rows[(0, 1)]
    # half-way from a coin flip to an oracle at 0.8 is 0.65: one cell of two
    assert controls.found(rows, 0.8) == 1 and controls.found(rows, 0.95) == 0
    summary = {"runs": [{"source": "long-memory", "data": "synthetic:long-memory", "description": "d", "complete": True,
                         "verdict": {"expected": "x", "as_expected": True}, "pairs": [],
                         "per_n": {64: controls.pooled(rows) | {"found": 1, "per_cell": {
                             f"fold{k}-seed{s}": r for (k, s), r in rows.items()}}},
                         "oracle": {"hit_rate": 0.8}}]}
    md = controls.render_markdown(summary)
    assert "Cells that found the echo (direction hit rate >= 0.6500, half-way from a coin flip to the oracle): " \
           "N=64: 1 of 2." in md
    assert "| 64 | fold0-seed0 | 0.9500 | 0.7059 | 600 / 600 | 16: 1.0200, 512: 1.0100 |" in md
    assert "| 64 | fold0-seed1 | 1.0400 | 0.5000 | n/a | - |" in md


def test_paired_differences_and_verdicts(controls):
    ok = [[1, 0, 1], [0, 1, 0], [1, 0, 1]]
    good = [[3, 0, 1], [0, 1, 0], [1, 0, 3]]
    cells = []
    for fold in range(4):
        for seed in range(2):
            wiggle = 0.001 * (fold - seed)
            cells += [fake_cell(16, fold, seed, 1.00 + wiggle, ok), fake_cell(64, fold, seed, 0.98 + wiggle + 0.002 * seed, good)]
    pairs = controls.compare(controls.cell_rows(cells))
    (p,) = pairs
    diffs = [0.02 - 0.002 * seed for fold in range(4) for seed in range(2)]
    assert p["short"] == 16 and p["long"] == 64 and p["log_loss"]["pairs"] == 8 and p["log_loss"]["longer_better"] == 8
    assert p["log_loss"]["mean"] == pytest.approx(np.mean(diffs)) and p["log_loss"]["p"] < 1e-6
    assert p["hit_rate"]["mean"] == pytest.approx(6 / 8 - 2 / 4) and p["hit_rate"]["p"] != p["hit_rate"]["p"]  # no spread: NaN
    assert controls.verdict("long-memory", pairs)["as_expected"]
    assert not controls.verdict("random-walk", pairs)["as_expected"]
    # the mirror image: the longer length worse -> not as expected for the positive control
    flipped = [dict(c, n={16: 64, 64: 16}[c["n"]]) for c in cells]
    assert not controls.verdict("long-memory", controls.compare(controls.cell_rows(flipped)))["as_expected"]
    # noise: no difference beyond chance -> as expected for the noise control
    noise = iter([0.010, -0.012, 0.008, -0.009, 0.011, -0.010, 0.007, -0.006])
    noisy = [c for f in range(4) for s in range(2)
             for c in (fake_cell(16, f, s, 1.0, ok), fake_cell(64, f, s, 1.0 + next(noise), ok))]
    noisy_pairs = controls.compare(controls.cell_rows(noisy))
    assert noisy_pairs[0]["log_loss"]["p"] > 0.05 and controls.verdict("random-walk", noisy_pairs)["as_expected"]


def test_the_sweep_commands(controls, tmp_path):
    import argparse

    args = argparse.Namespace(seed=3, long_memory="strength=0.1", lengths="512,4096,32768", out=tmp_path, device="cuda",
                              preset="full", config="first-edition", overrides=["train.steps=400"])
    assert controls.sweep_argv("long-memory", args, 123.4) == [
        "sweep", "--data", "synthetic:long-memory:3:strength=0.1", "--lengths", "512,4096,32768", "--out",
        str(tmp_path / "long-memory"), "--device", "cuda", "--preset", "full", "--config", "first-edition", "--no-precision", "--set",
        "train.steps=400",
        "--time-budget", "123"]
    assert controls.sweep_argv("random-walk", args, None)[:3] == ["sweep", "--data", "synthetic:random-walk:3"]
    assert "--time-budget" not in controls.sweep_argv("random-walk", args, None)
    assert controls._order("random-walk, long-memory") == ["random-walk", "long-memory"]
    with pytest.raises(argparse.ArgumentTypeError, match="name each of long-memory, random-walk once"):
        controls._order("random-walk")
