"""The command line as a user meets it: every bad value of every subcommand is one line on stderr,
exit status 2 and nothing written; benchmarks never overwrite published evidence; the whole
config is checked before a sweep starts; the shared options are defined once."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tsflash import cli
from tsflash.commands import options

REPO = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "--data", "synthetic:random-walk", "--device", "cpu", "--out", "run"]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")

# (argv, the one line on stderr). Run in an empty folder; "nothing written" means it stays empty.
# fmt: off
BAD = [
    # no command, unknown options
    ([], r"tsflash: error: the following arguments are required: COMMAND"),
    (["bench"], r"tsflash bench: error: the following arguments are required: BENCH"),
    (["data", "info", "--bogus"], r"tsflash: error: unrecognized arguments: --bogus"),
    # data import
    (["data", "import", "missing.zip", "--root", "store"], r"tsflash: error: import path does not exist: missing.zip"),
    (["data", "import", "x.zip", "--symbol", "BTC/USDT"],
     r"tsflash data import: error: argument --symbol: must be letters and digits only \(e.g. BTCUSDT\), got 'BTC/USDT'"),
    (["data", "import", "x.zip", "--interval", "7m"],
     r"tsflash data import: error: argument --interval: must be one of 1s, 1m, .*, 3d, got '7m'"),
    # data info
    (["data", "info", "--min-gap", "0"], r"tsflash data info: error: argument --min-gap: must be an integer >= 1, got 0"),
    (["data", "info", "--min-gap", "x"], r"tsflash data info: error: argument --min-gap: must be an integer >= 1, got 'x'"),
    (["data", "info", "--start", "2024-13-01"],
     r"tsflash data info: error: argument --start: expected a date YYYY-MM-DD, got '2024-13-01'"),
    (["data", "info", "--root", "store", "--start", "2024-02-01", "--end", "2024-01-01"],
     r"tsflash: error: --end 2024-01-01 is before --start 2024-02-01"),
    (["data", "info", "--root", "nowhere"], r"tsflash: error: bar store root .*nowhere.* does not exist.*"),
    # data fetch
    (["data", "fetch"], r"tsflash data fetch: error: the following arguments are required: --start"),
    (["data", "fetch", "--start", "yesterday"], r"tsflash data fetch: error: argument --start: expected a date YYYY-MM-DD, got 'yesterday'"),
    (["data", "fetch", "--start", "2024-01-01", "--retries", "-1"],
     r"tsflash data fetch: error: argument --retries: must be an integer >= 0, got -1"),
    (["data", "fetch", "--start", "2024-01-01", "--backoff", "-0.5"],
     r"tsflash data fetch: error: argument --backoff: must be a number >= 0, got -0.5"),
    (["data", "fetch", "--start", "2024-01-01", "--timeout", "0"],
     r"tsflash data fetch: error: argument --timeout: must be a number > 0, got 0"),
    (["data", "fetch", "--start", "2024-01-02", "--end", "2024-01-01", "--root", "store"],
     r"tsflash: error: --end 2024-01-01 is before --start 2024-01-02"),
    (["data", "fetch", "--start", "2024-01-01", "--end", "2024-01-02", "--base-url", "no/mirror", "--root", "store"],
     r"tsflash: error: --base-url local folder does not exist: no/mirror"),
    # data pack / unpack (the refusals of values and checksums are in tests/data/test_transport.py)
    (["data", "pack", "--root", "store"], r"tsflash data pack: error: the following arguments are required: --out"),
    (["data", "pack", "--out", "p", "--start", "21"], r"tsflash data pack: error: argument --start: must be an integer >= 1970, got 21"),
    (["data", "pack", "--root", "store", "--out", "p", "--start", "2025", "--end", "2024"],
     r"tsflash: error: --end 2024 is before --start 2025"),
    (["data", "pack", "--root", "nowhere", "--out", "p"], r"tsflash: error: pack: no BTCUSDT 1m year files in nowhere/btcusdt-1m"),
    (["data", "unpack", "nowhere", "--root", "store"], r"tsflash: error: unpack: packed file not found: nowhere"),
    # bench precision
    (["bench", "precision", "--lengths", "0"],
     r"tsflash bench precision: error: argument --lengths: every length must be a power of two >= 2, got 0"),
    (["bench", "precision", "--lengths", "abc"],
     r"tsflash bench precision: error: argument --lengths: every length must be an integer \(a power of two >= 2\), got 'abc'"),
    (["bench", "precision", "--lengths", "512,"],
     r"tsflash bench precision: error: argument --lengths: give comma-separated powers of two such as 512,4096,32768, got '512,'"),
    (["bench", "precision", "--lengths", "64,64"],
     r"tsflash bench precision: error: argument --lengths: lengths must be distinct, got '64,64'"),
    (["bench", "precision", "--device", "tpu"],
     r"tsflash bench precision: error: argument --device: must be auto, cpu, cuda or cuda:K, got 'tpu'"),
    (["bench", "precision", "--model", "no.pt"], r"tsflash bench precision: error: argument --model: file not found: no.pt"),
    (["bench", "precision", "--features", "0"], r"tsflash bench precision: error: argument --features: must be an integer >= 1, got 0"),
    (["bench", "precision", "--heads", "-1"], r"tsflash bench precision: error: argument --heads: must be an integer >= 1, got -1"),
    (["bench", "precision", "--head-dim", "x"], r"tsflash bench precision: error: argument --head-dim: must be an integer >= 1, got 'x'"),
    (["bench", "precision", "--batch", "0"], r"tsflash bench precision: error: argument --batch: must be an integer >= 1, got 0"),
    (["bench", "precision", "--backend", "turbo"],
     r"tsflash bench precision: error: argument --backend: must be one of auto, cudnn, flash, efficient, math, got 'turbo'"),
    # bench attention
    (["bench", "attention", "--tokens", "0"], r"tsflash bench attention: error: argument --tokens: must be an integer >= 1, got 0"),
    (["bench", "attention", "--batch", "-2"], r"tsflash bench attention: error: argument --batch: must be an integer >= 1, got -2"),
    (["bench", "attention", "--dtype", "float8"],
     r"tsflash bench attention: error: argument --dtype: must be one of auto, bfloat16, bf16, float16, fp16, float32, fp32, got 'float8'"),
    (["bench", "attention", "--backends", "flash,turbo"],
     r"tsflash bench attention: error: argument --backends: a comma-separated subset of cudnn, flash, efficient, got 'flash,turbo'"),
    (["bench", "attention", "--cpu-memory-cap-gib", "0"],
     r"tsflash bench attention: error: argument --cpu-memory-cap-gib: must be a number > 0, got 0"),
    (["bench", "attention", "--min-time", "-1"], r"tsflash bench attention: error: argument --min-time: must be a number >= 0, got -1"),
    (["bench", "attention", "--min-time", "nan"], r"tsflash bench attention: error: argument --min-time: must be a number >= 0, got nan"),
    # bench train
    (["bench", "train", "--steps", "0"], r"tsflash bench train: error: argument --steps: must be an integer >= 1, got 0"),
    (["bench", "train", "--warmup", "-1"], r"tsflash bench train: error: argument --warmup: must be an integer >= 0, got -1"),
    (["bench", "train", "--d-model", "0"], r"tsflash bench train: error: argument --d-model: must be an integer >= 1, got 0"),
    (["bench", "train", "--layers", "0"], r"tsflash bench train: error: argument --layers: must be an integer >= 1, got 0"),
    (["bench", "train", "--tokens-per-step", "-5"],
     r"tsflash bench train: error: argument --tokens-per-step: must be an integer >= 1, got -5"),
    (["bench", "train", "--ceiling-size", "0"], r"tsflash bench train: error: argument --ceiling-size: must be an integer >= 1, got 0"),
    (["bench", "train", "--d-model", "30", "--heads", "4", "--device", "cpu"],
     r"tsflash: error: --d-model=30 must be divisible by --heads=4"),
    (["bench", "train", "--d-model", "12", "--heads", "4", "--device", "cpu"],
     r"tsflash: error: --d-model / --heads must be even \(rotary positions\), got 12/4"),
    (["bench", "train", "--lengths", "64", "--tokens-per-step", "96", "--d-model", "16", "--heads", "2", "--device", "cpu"],
     r"tsflash: error: --tokens-per-step=96 must be a multiple of every length, got N=64"),
    # sweep: options
    ([*SWEEP, "--lengths", "0"], r"tsflash sweep: error: argument --lengths: every length must be a power of two >= 2, got 0"),
    ([*SWEEP, "--lengths", "48"], r"tsflash sweep: error: argument --lengths: every length must be a power of two >= 2, got 48"),
    ([*SWEEP, "--lengths", "abc"],
     r"tsflash sweep: error: argument --lengths: every length must be an integer \(a power of two >= 2\), got 'abc'"),
    ([*SWEEP, "--lengths", "512,"],
     r"tsflash sweep: error: argument --lengths: give comma-separated powers of two such as 512,4096,32768, got '512,'"),
    ([*SWEEP, "--start", "2024-13-01"], r"tsflash sweep: error: argument --start: expected a date YYYY-MM-DD, got '2024-13-01'"),
    ([*SWEEP, "--start", "2024-02-01", "--end", "2024-01-01"], r"tsflash: error: --end 2024-01-01 is before --start 2024-02-01"),
    (["sweep", "--data", "no/such/folder"],
     r"tsflash sweep: error: argument --data: bar store folder not found: no/such/folder \(create it with .*\)"),
    (["sweep", "--data", "synthetic:brownian"],
     r"tsflash sweep: error: argument --data: synthetic sources are synthetic:random-walk\[:SEED\], synthetic:iid\[:SEED\], synthetic:long-memory\[:SEED\]\[:KEY=VALUE,\.\.\.\], synthetic:regime\[:SEED\]\[:KEY=VALUE,\.\.\.\], got 'synthetic:brownian'"),
    (["sweep", "--data", "synthetic:random-walk:x"],
     r"tsflash sweep: error: argument --data: the synthetic seed must be an integer, got 'x' in 'synthetic:random-walk:x'"),
    ([*SWEEP, "--device", "tpu"], r"tsflash sweep: error: argument --device: must be auto, cpu, cuda or cuda:K, got 'tpu'"),
    ([*SWEEP, "--trials", "0"], r"tsflash sweep: error: argument --trials: must be an integer >= 1, got 0"),
    ([*SWEEP, "--seed", "-1"], r"tsflash sweep: error: argument --seed: must be an integer >= 0, got -1"),
    ([*SWEEP, "--time-budget", "0"], r"tsflash sweep: error: argument --time-budget: must be a number > 0, got 0"),
    ([*SWEEP, "--slice-by", "seed"], r"tsflash sweep: error: argument --slice-by: invalid choice: 'seed' \(choose from '?fold'?, '?cell'?\)"),
    ([*SWEEP, "--preset", "gpu"], r"tsflash: error: --preset must be one of auto, full, cpu, got 'gpu'"),
    ([*SWEEP, "--config", "nosuch"], r"tsflash: error: unknown preset 'nosuch'; known presets: .*default.*"),
    ([*SWEEP, "--config", "no.toml"], r"tsflash: error: config file not found: no.toml"),
    ([*SWEEP, "--set", "steps"], r"tsflash sweep: error: argument --set: expected KEY=VALUE such as train.steps=3, got 'steps'"),
    ([*SWEEP, "--set", "train.stepz=3"], r"tsflash sweep: error: argument --set: unknown config key 'train.stepz' \(did you mean 'train.steps'\?\); known keys here: .*steps.*"),
    ([*SWEEP, "--set", "train.steps=many"], r"tsflash sweep: error: argument --set: config key train.steps: expected int, got 'many'"),
    ([*SWEEP, "--set", "no.such=1"], r"tsflash sweep: error: argument --set: unknown config key 'no.such'; known keys here: data, .*train"),
    ([*SWEEP, "--set", "no.such.deeper=1"], r"tsflash sweep: error: argument --set: unknown config key 'no.such.deeper'; known keys here: .*"),
    ([*SWEEP, "--lengths", "512,67108864", "--preset", "full"],
     r"tsflash: error: lengths: N=67108864 is longer than train.tokens_per_step=131072, the tokens of one training step "
     r"\(a step holds tokens_per_step / N >= 1 windows\): use lengths up to 131072, or raise train.tokens_per_step"),
    # sweep: the resolved config, checked before anything is written
    ([*SWEEP, "--set", "train.lr=-1"], r"tsflash: error: train.lr must be > 0, got -1.0"),
    ([*SWEEP, "--set", "train.steps=0"], r"tsflash: error: train.steps must be >= 1, got 0"),
    # a value the reduced CPU preset set, not the command: the error says whose it is
    ([*SWEEP, "--set", "train.restarts=4", "--set", "train.restart_screen=400"],
     r"tsflash: error: train.restart_screen=400 must be at least train.eval_every=3 \(a validation by then\) and below "
     r"train.steps=12 \(0 trains every restart to its end\) \(train.steps=12, train.eval_every=3: the reduced CPU "
     r"preset's, cpu.toml; give a value that fits it, or --preset full for the config's own\)"),
    ([*SWEEP, "--lengths", "512,32768", "--set", "train.short_fraction=0.25"],
     r"tsflash: error: train.short_fraction=0.25 of the batch of 1 windows at N=32768 \(train.tokens_per_step=32768\) is "
     r"0.25 windows: it must be a whole number >= 1 at every N > train.short_length \(train.tokens_per_step=32768: the "
     r"reduced CPU preset's, cpu.toml; give a value that fits it, or --preset full for the config's own\)"),
    ([*SWEEP, "--set", "train.restarts=4", "--set", "train.restart_screen=400", "--set", "train.steps=300"],
     r"tsflash: error: train.restart_screen=400 must be at least train.eval_every=3 \(a validation by then\) and below "
     r"train.steps=300 \(0 trains every restart to its end\) \(train.eval_every=3: the reduced CPU preset's, "
     r"cpu.toml; give a value that fits it, or --preset full for the config's own\)"),
    ([*SWEEP, "--set", "model.d_model=-1"], r"tsflash: error: model.d_model must be >= 1, got -1"),
    ([*SWEEP, "--set", "splits.n_folds=0"], r"tsflash: error: splits.n_folds must be >= 1, got 0"),
    ([*SWEEP, "--set", "splits.test_days=400"], r"tsflash: error: the data range data.start..data.end = .* is too short for "
     r"splits.n_folds=2 test blocks of splits.test_days=400 days, .* \(data.start=2024-07-01, data.end=2025-06-30, "
     r"splits.n_folds=2: the reduced CPU preset's, cpu.toml; give a value that fits it, or --preset full for the config's own\)"),
    # the command gave data.start: the hint names only what the preset set
    ([*SWEEP, "--start", "2025-01-01", "--set", "splits.test_days=400"], r"tsflash: error: the data range "
     r"data.start..data.end = 2025-01-01..2025-06-30 .* \(data.end=2025-06-30, splits.n_folds=2: the reduced CPU preset's, .*\)"),
    # report
    (["report", "run", "--set", "eval.fee=2"], r"tsflash report: error: argument --set: unknown config key 'eval.fee' \(did you mean 'eval.fee_bps'\?\); known keys here: .*fee_bps.*"),
    (["report", "nope"], r"tsflash: error: report: run folder not found: nope"),
    # confirm (the refusals that need a finished run are in tests/sweep/test_confirm.py)
    (["confirm", "run"], r"tsflash confirm: error: the following arguments are required: --start"),
    (["confirm", "run", "--start", "2025-02-30"],
     r"tsflash confirm: error: argument --start: expected a date YYYY-MM-DD, got '2025-02-30'"),
    (["confirm", "run", "--start", "2025-01-01", "--data", "nowhere"],
     r"tsflash confirm: error: argument --data: bar store folder not found: nowhere .*"),
    (["confirm", "nope", "--start", "2025-01-01"], r"tsflash: error: confirm: run folder not found: nope"),
]
# fmt: on


@pytest.mark.parametrize("argv, line", BAD, ids=[" ".join(a) or "(none)" for a, _ in BAD])
def test_a_bad_value_is_one_line_exit_2_and_nothing_written(argv, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert re.fullmatch(line, err.rstrip("\n")), err
    assert out == ""
    assert list(tmp_path.iterdir()) == []  # nothing was started


@NO_CUDA
@pytest.mark.parametrize("group", [["bench", "precision"], ["sweep", "--data", "synthetic:random-walk"]])
def test_cuda_on_a_machine_without_it(group, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*group, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("error: argument --device: cuda: CUDA is not available on this machine (use --device cpu)")


def test_bench_train_steps_0_through_the_console_has_no_traceback(tmp_path):
    """The issue's case: this printed a traceback and exited 1."""
    proc = subprocess.run([sys.executable, "-m", "tsflash.cli", "bench", "train", "--steps", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["tsflash bench train: error: argument --steps: must be an integer >= 1, got 0"]
    assert list(tmp_path.iterdir()) == []


def _subparsers(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*prefix, name))
    if prefix and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        yield prefix, parser


def test_shared_options_are_defined_once_and_typed():
    """--lengths, --device, --data, --set: the same type function everywhere they appear."""
    shared = {"--lengths": options.lengths_type, "--device": options.device_type, "--data": options.data_type,
              "--set": options.override_type}
    seen = {flag: [] for flag in shared}
    for path, parser in _subparsers(cli.build_parser()):
        for action in parser._actions:
            for flag in set(action.option_strings) & set(shared):
                assert action.type is shared[flag], (path, flag)
                seen[flag].append(" ".join(path))
    assert seen["--lengths"] == ["bench precision", "bench attention", "bench train", "preregister", "sweep"]
    assert seen["--device"] == ["bench precision", "bench attention", "bench train", "sweep", "confirm"]
    assert seen["--data"] == ["preregister", "sweep", "confirm"] and seen["--set"] == ["preregister", "sweep", "report"]


def test_each_subcommand_keeps_its_own_default_lengths(capsys):
    """One parent per subcommand: a default set for one never leaks into another."""
    parser = cli.build_parser()
    assert parser.parse_args(["bench", "precision"]).lengths == [512, 4096]
    assert parser.parse_args(["bench", "train"]).lengths == [512, 4096, 32768, 131072]
    assert parser.parse_args(["bench", "attention"]).lengths[0] == 256
    assert parser.parse_args(["sweep", "--data", "synthetic:random-walk"]).lengths is None


@pytest.mark.parametrize("argv", [["--help"], *[[*p, "--help"] for p, _ in _subparsers(cli.build_parser())]])
def test_every_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0 and "usage: tsflash" in capsys.readouterr().out


def test_data_help_loads_no_torch(tmp_path):
    """The command modules are imported statically: each keeps its heavy imports inside functions,
    so building the whole parser (here for `tsflash data --help`) loads neither torch nor optuna."""
    code = ("import sys\nfrom tsflash import cli\ntry:\n    cli.main(['data', '--help'])\nexcept SystemExit as exc:\n"
            "    assert exc.code == 0\nprint([m for m in ('torch', 'optuna', 'matplotlib', 'scipy.stats') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: tsflash data" in proc.stdout and proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_command_groups_are_listed_in_order():
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == ["data", "bench", "preregister", "sweep", "report", "confirm", "runs"]


def test_the_sweep_options_the_cli_names_are_the_planners():
    # the CLI keeps its own copy of --slice-by's choices, so that `tsflash --help` imports no optuna
    from tsflash.sweep.plan import SLICE_BY

    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (slice_by,) = [a for a in sub.choices["sweep"]._actions if "--slice-by" in a.option_strings]
    assert tuple(slice_by.choices) == SLICE_BY and slice_by.default == "fold"


# ---- benchmarks never overwrite published evidence ------------------------------------------------

TINY_PRECISION = ["bench", "precision", "--lengths", "16", "--heads", "1", "--head-dim", "8", "--features", "2",
                  "--device", "cpu"]


def test_bench_writes_to_a_fresh_runs_folder_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(TINY_PRECISION) == 0
    (folder,) = (tmp_path / "runs" / "bench").iterdir()
    assert re.fullmatch(r"\d{8}-\d{6}-precision", folder.name)
    assert json.loads((folder / "precision.json").read_text())["rows"][0]["n"] == 16
    assert f"wrote {Path('runs/bench') / folder.name / 'precision.json'}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_bench_refuses_to_overwrite_a_file_git_tracks_unless_forced(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    (repo / "reports" / "bench").mkdir(parents=True)
    published = repo / "reports" / "bench" / "precision.json"
    published.write_text('{"device": "NVIDIA H200"}\n')
    _git(repo, "init", "-q")
    _git(repo, "add", "reports/bench/precision.json")
    _git(repo, "commit", "-q", "-m", "evidence")
    monkeypatch.chdir(repo)
    assert cli.main([*TINY_PRECISION, "--out", "reports/bench"]) == 2
    assert capsys.readouterr().err == (
        "tsflash: error: --out: refusing to overwrite reports/bench/precision.json, a file tracked by git "
        "(published evidence); choose another --out, or add --force\n"
    )
    assert published.read_text() == '{"device": "NVIDIA H200"}\n'
    # an existing file git does not track is the user's own: overwritten
    (repo / "mine").mkdir()
    (repo / "mine" / "precision.json").write_text("old")
    assert cli.main([*TINY_PRECISION, "--out", "mine"]) == 0
    assert json.loads((repo / "mine" / "precision.json").read_text())["rows"][0]["n"] == 16
    # --force is the explicit consent
    assert cli.main([*TINY_PRECISION, "--out", "reports/bench", "--force"]) == 0
    assert json.loads(published.read_text())["rows"][0]["n"] == 16


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_the_published_benchmarks_of_this_repository_are_protected(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    before = (REPO / "reports/bench/attention.png").read_bytes()
    argv = ["bench", "attention", "--lengths", "16", "--device", "cpu", "--out", "reports/bench"]
    assert cli.main(argv) == 2
    assert "refusing to overwrite reports/bench/attention.json, a file tracked by git" in capsys.readouterr().err
    assert (REPO / "reports/bench/attention.png").read_bytes() == before


# ---- the sweep ---------------------------------------------------------------------------------------

TINY_SWEEP = [
    "data.start=\"2024-01-01\"", "data.end=\"2024-01-08\"", "splits.test_days=2", "splits.n_folds=2", "splits.val_days=0",
    "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=2", "train.tokens_per_step=256",
    "train.warmup_steps=1", "eval.baseline_lags=2", "eval.batch_tokens=4096", "selection.cscv_blocks=4",
]


@pytest.mark.slow
def test_sweep_says_the_preset_once_and_records_the_command(tmp_path):
    argv = ["sweep", "--lengths", "64,32", "--data", "synthetic:random-walk", "--out", "run", "--preset", "cpu",
            "--device", "cpu", "--seed", "0", "--no-precision"]
    for item in TINY_SWEEP:
        argv += ["--set", item]
    proc = subprocess.run([sys.executable, "-m", "tsflash.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("reduced CPU preset (") == 1
    assert "report: run/report.md" in proc.stdout
    command = json.loads((tmp_path / "run" / "run.json").read_text())["command"]
    assert command.startswith("tsflash sweep --lengths 32,64 --data synthetic:random-walk --out run --device cpu --seed 0 "
                              "--preset cpu --set 'data.start=\"2024-01-01\"'")
    assert command.endswith("--set selection.cscv_blocks=4 --no-precision")


# ---- the report ----------------------------------------------------------------------------------------


def test_report_set_reaches_build_report(tmp_path, capsys):
    """`--set` and `--out` reach build_report: this run has summaries but no per-bar cells, so the
    re-scoring is refused in one line and nothing is written (tests/report/test_rescore.py re-scores a
    real tiny sweep through build_report)."""
    from tests.report.test_report import make_run

    run = make_run(tmp_path, drift=0.0)
    out = tmp_path / "fee2"
    assert cli.main(["report", str(run), "--set", "eval.fee_bps=2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.match(r"tsflash: error: report --set: re-scoring needs the per-bar cell files", err)
    assert not out.exists()
    assert not (run / "report.md").exists()  # the run folder is left as it was


# ---- several workers: --devices, and a shared --storage that cannot be reached -----------------------

try:
    import psycopg2  # noqa: F401
    HAS_PSYCOPG2 = True
except ImportError:  # a dev dependency
    HAS_PSYCOPG2 = False

# fmt: off
BAD_WORKERS = [
    ([*SWEEP, "--devices", "cpu,cuda:0"],
     r"tsflash sweep: error: argument --devices: cpu,cuda:0: mixes CPU and CUDA devices; one sweep runs on one kind"),
    ([*SWEEP, "--devices", "cuda:0,cuda:0"],
     r"tsflash sweep: error: argument --devices: cuda:0,cuda:0: cuda:0 is named twice \(one worker per GPU\)"),
    ([*SWEEP, "--devices", "cuda:99"], r"tsflash sweep: error: argument --devices: cuda:99: (CUDA is not available on "
     r"this machine \(use --devices cpu\)|this machine has \d+ CUDA device\(s\))"),
    ([*SWEEP, "--devices", "gpu0"], r"tsflash sweep: error: argument --devices: each device must be cpu, cuda or cuda:K, got 'gpu0'"),
    ([*SWEEP, "--devices", "cpu,"],
     r"tsflash sweep: error: argument --devices: give all, or comma-separated devices such as cuda:0,cuda:1, got 'cpu,'"),
    ([*SWEEP, "--devices", "cpu,cpu"], r"tsflash: error: --device cpu and --devices cpu,cpu: give one of them "
     r"\(--devices cuda:0 is one GPU\)"),
    pytest.param([*SWEEP, "--storage", "postgresql://ann:s3cret@127.0.0.1:9/tsflash"],
                 r"tsflash: error: --storage: cannot reach the postgresql server at 127\.0\.0\.1:9 for database "
                 r"'tsflash': [^\n]*refused[^\n]*", marks=pytest.mark.skipif(not HAS_PSYCOPG2, reason="needs psycopg2")),
]
# fmt: on


@pytest.mark.parametrize("argv, line", BAD_WORKERS)
def test_bad_devices_or_storage_are_one_line_exit_2_and_nothing_written(argv, line, tmp_path, monkeypatch, capsys):
    test_a_bad_value_is_one_line_exit_2_and_nothing_written(argv, line, tmp_path, monkeypatch, capsys)


@NO_CUDA
def test_devices_all_on_a_machine_without_cuda(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "--data", "synthetic:random-walk", "--devices", "all"]) == 2
    assert capsys.readouterr().err == ("tsflash sweep: error: argument --devices: all: this machine has no CUDA device "
                                       "(use --devices cpu)\n")
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """`tsflash ... | head` closes the pipe before the command has written: the command stops with
    128 + SIGPIPE and no traceback, as Unix tools do."""
    proc = subprocess.Popen([sys.executable, "-m", "tsflash.cli", "preregister", "--check", "reports/third-edition/per-bar"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the interpreter has even imported tsflash: every write meets a closed pipe
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
