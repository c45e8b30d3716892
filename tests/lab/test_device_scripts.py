"""lab/recipes_h200.sh, with `python3` and `nvidia-smi` stubbed: each job's flags reach
recipes.py as written (split, never globbed), jobs run side by side, the call fails when a
job fails but not when one only reached its time limit, and a BTC job without its bars stops the
call before any job starts. lab/third_edition_h200.sh: each named run of a real plan by its
own command, with the carried bars where the plan's store has none; a run not in the plan stops the
call before any starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def checkout(tmp_path):
    """A bare copy of the device scripts, a stub python3 that records its argv (exit code from the
    job's --candidates: 'fail' exits 3, 'slow' 124) and a stub nvidia-smi."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "lab", root / "lab")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stub(bin_, "python3", 'printf "%s\\n" "$@" > "$ARGV_DIR/$$.argv"\n'
                           'echo "$TSFLASH_GPU_JOBS" > "$ARGV_DIR/$$.jobs"\n'
                           'case "$*" in *"--candidates fail"*) exit 3;; *"--candidates slow"*) exit 124;; esac\n')
    _stub(bin_, "nvidia-smi", "echo stub\n")
    (root / "train.seeds=0").write_text("")  # a file the pattern train.seeds=[0] would glob to
    (tmp_path / "argv").mkdir()
    return root, {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
                  "ARGV_DIR": str(tmp_path / "argv")}


def _run(root: Path, env: dict, jobs: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "lab/recipes_h200.sh"], cwd=root, env=env | {"RECIPES_JOBS": jobs},
                          capture_output=True, text=True, timeout=60)


def test_each_jobs_flags_reach_recipes_as_written(checkout):
    root, env = checkout
    done = _run(root, env, "runs/recipes|ema|long-memory|--set train.seeds=[0]\n"
                           "runs/p16|baseline|long-memory,iid|--set train.seeds=[1,2] --set model.patch=16")
    assert done.returncode == 0, done.stdout + done.stderr
    argvs = sorted(p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv"))
    assert len(argvs) == 2
    by_out = {a[a.index("--out") + 1]: a for a in argvs}
    assert by_out["runs/recipes"][-2:] == ["--set", "train.seeds=[0]"]
    assert by_out["runs/p16"][-4:] == ["--set", "train.seeds=[1,2]", "--set", "model.patch=16"]
    assert by_out["runs/p16"][by_out["runs/p16"].index("--sources") + 1] == "long-memory,iid"


def test_a_failed_job_fails_the_call_and_a_timed_out_one_does_not(checkout):
    root, env = checkout
    assert _run(root, env, "runs/a|slow|iid|").returncode == 0
    failed = _run(root, env, "runs/a|slow|iid|\nruns/b|fail|iid|")
    assert failed.returncode == 3 and "job 2 (fail in runs/b) exit: 3" in failed.stdout


def test_the_default_jobs_name_known_candidates_and_sources_in_their_own_folders():
    import re

    from tests.conftest import load_experiment

    recipes = load_experiment("recipes")
    script = (REPO / "lab" / "recipes_h200.sh").read_text()
    default = re.search(r'RECIPES_JOBS=\$\{RECIPES_JOBS:-"(.*?)"\}', script, re.S).group(1)
    jobs = [line.split("|") for line in default.splitlines()]
    assert jobs and all(c in recipes.CANDIDATES and all(s in recipes.SOURCES for s in src.split(","))
                        for _out, c, src, _extra in jobs)
    assert len({out for out, *_ in jobs}) == len(jobs)  # one folder a job: no shared summary.md


def test_a_call_of_many_jobs_returns_within_the_devices_eight_files(checkout):
    """The device returns at most 8 files from $OUT: the job logs come back as one tarball."""
    import tarfile

    root, env = checkout
    jobs = "\n".join(f"runs/recipes-{i}|ema|iid|--set train.seeds=[{i}]" for i in range(9))
    assert _run(root, env, jobs).returncode == 0
    returned = sorted(p.name for p in Path(env["OUT"]).iterdir())
    assert len(returned) <= 8 and "recipes-logs.tgz" in returned
    with tarfile.open(Path(env["OUT"]) / "recipes-logs.tgz") as logs:
        assert sum(name.endswith(".log") for name in logs.getnames()) == 9
    assert [p.read_text() for p in Path(env["ARGV_DIR"]).glob("*.jobs")] == ["9\n"] * 9  # each says it shared the GPU


def test_a_btc_job_without_its_bars_stops_the_call_before_any_job_starts(checkout):
    root, env = checkout
    jobs = "runs/a|ema|iid|\nruns/b|ema|btc|--set train.seeds=[0] --btc-data .carry/data"
    missing = _run(root, env, jobs)
    assert missing.returncode == 2 and "job 2 (runs/b) reads BTC bars from .carry/data" in missing.stderr
    assert not list(Path(env["ARGV_DIR"]).glob("*.argv"))  # no job started
    (root / ".carry" / "data").mkdir(parents=True)
    assert _run(root, env, jobs).returncode == 0
    assert len(list(Path(env["ARGV_DIR"]).glob("*.argv"))) == 2


@pytest.fixture
def planned(tmp_path):
    """A bare copy of the device scripts with a real plan in reports/third-edition (a BTC arm, the
    iid null, the A/A replicate, whose seeds are one quoted word, and the ladder); python3 is the real one for
    `-m lab.plan` and a stub that records its argv for anything else."""
    import sys

    root = tmp_path / "checkout"
    shutil.copytree(REPO / "lab", root / "lab")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    (root / "data").mkdir()  # the plan's bar store; on the device the checkout's data/ holds no bars
    subprocess.run([sys.executable, "-m", "lab.preregister", "--lengths", "512,32768", "--arm", "per-bar=",
                    "--control", "iid=synthetic:iid:0", "--aa-seeds", "3,4,5", "--ladder",
                    "--stage", "first=per-bar,aa/per-bar", "--out", "reports/third-edition"],
                   cwd=root, env=env, check=True, capture_output=True, timeout=120)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stub(bin_, "python3", f'if [ "$1 $2" = "-m lab.plan" ]; then PYTHONPATH={REPO} exec {sys.executable} "$@"; fi\n'
                           'printf "%s\\n" "$@" > "$ARGV_DIR/$$.argv"\n'
                           'echo "$TSFLASH_GPU_JOBS" > "$ARGV_DIR/$$.jobs"\n')
    _stub(bin_, "nvidia-smi", "echo stub\n")
    (root / ".carry" / "data" / "btcusdt-1m").mkdir(parents=True)  # the BTC bars as device_env.sh unpacks them
    (root / ".carry" / "data" / "btcusdt-1m" / "btcusdt-1m-2021.parquet").write_bytes(b"")
    (tmp_path / "argv").mkdir()
    # KEEP: a warm machine's state between calls, here the test's own (not /tmp/tsflash-keep, shared by every run)
    return root, {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
                  "ARGV_DIR": str(tmp_path / "argv"), "KEEP": str(tmp_path / "keep")}


def _third(root: Path, env: dict, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "lab/third_edition_h200.sh"], cwd=root, env=env | extra,
                          capture_output=True, text=True, timeout=120)


def _state(env: dict) -> tuple[set[str], dict]:
    """The names in the call's state-third.tgz.* parts, and its call record."""
    import io
    import tarfile

    whole = b"".join(p.read_bytes() for p in sorted(Path(env["OUT"]).glob("state-third.tgz.*")))
    with tarfile.open(fileobj=io.BytesIO(whole)) as state:
        (name,) = [n for n in state.getnames() if n.startswith("reports/third-edition/calls/") and n.endswith(".json")]
        return set(state.getnames()), json.loads(state.extractfile(name).read())


def test_the_third_edition_runs_each_named_run_by_its_plans_own_command(planned):
    root, env = planned
    done = _third(root, env, RUNS="per-bar controls/aa/per-bar controls/iid/per-bar ladder", BUDGET_S="300")
    assert done.returncode == 0, done.stdout + done.stderr
    argvs = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    (ladder,) = [a for a in argvs if a[0] == "lab/power_ladder.py"]
    assert ladder[ladder.index("--runs") + 1] == "reports/third-edition/ladder" and ladder[-2:] == ["--time-budget", "300"]
    by_out = {a[a.index("--out") + 1]: a for a in argvs if a is not ladder}
    assert sorted(by_out) == ["reports/third-edition/controls/aa/per-bar", "reports/third-edition/controls/iid/per-bar",
                              "reports/third-edition/per-bar"]
    for out, argv in by_out.items():
        assert argv[:4] == ["-m", "tsflash.cli", "sweep", "--lengths"] and argv[-2:] == ["--time-budget", "300"]
        assert argv[-4:-2] == ["--slice-by", "fold"]  # by default a slice ends between folds
        data = argv[argv.index("--data") + 1]
        assert data == ("synthetic:iid:0" if "iid" in out else ".carry/data")  # the plan's store is not here
    # each run records that its slice shared the GPU with the call's other three
    assert [p.read_text() for p in Path(env["ARGV_DIR"]).glob("*.jobs")] == ["4\n"] * 4
    aa = by_out["reports/third-edition/controls/aa/per-bar"]
    assert aa[aa.index("train.seeds=[3, 4, 5]") - 1] == "--set"  # the plan's quoted word arrives whole
    names, call = _state(env)
    assert {"reports/third-edition/PLAN.json", "reports/third-edition/PLAN.md"} <= names
    # the call's record: what ran, how each ended, for how long, on which GPU (the summary adds them up)
    assert call["runs"] == ["per-bar", "controls/aa/per-bar", "controls/iid/per-bar", "ladder"]
    assert call["exit_codes"] == [0, 0, 0, 0] and call["budget_s"] == 300 and call["gpu"] == "stub"
    assert 0 <= call["seconds"] < 120 and call["started"].endswith("Z")


def test_slice_by_cell_reaches_the_sweeps_and_a_bad_value_stops_the_call_before_any_starts(planned):
    root, env = planned
    done = _third(root, env, RUNS="per-bar ladder", BUDGET_S="300", SLICE_BY="cell")
    assert done.returncode == 0, done.stdout + done.stderr
    argvs = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    (sweep,) = [a for a in argvs if a[0] == "-m"]
    (ladder,) = [a for a in argvs if a[0] == "lab/power_ladder.py"]
    assert sweep[-4:] == ["--slice-by", "cell", "--time-budget", "300"] and "--slice-by" not in ladder
    for p in Path(env["ARGV_DIR"]).glob("*.argv"):
        p.unlink()
    bad = _third(root, env, RUNS="per-bar", SLICE_BY="folds")
    assert bad.returncode == 2 and "SLICE_BY must be fold or cell, got 'folds'" in bad.stderr
    assert not list(Path(env["ARGV_DIR"]).glob("*.argv"))


def test_the_call_lowers_its_limit_and_budget_to_what_the_devices_own_limit_leaves(planned):
    root, env = planned
    done = _third(root, env, RUNS="per-bar", BUDGET_S="530", LIMIT_S="565", DEVICE_S="150")
    assert done.returncode == 0, done.stdout + done.stderr
    _, call = _state(env)
    # the device's limit, less the set-up and the stop's room, is the sweeps' stop; the budget ends before it
    assert 60 <= call["limit_s"] <= 150 - 30 and call["budget_s"] == call["limit_s"] - 20
    assert f"LIMIT_S 565 -> {call['limit_s']}" in done.stdout and f"BUDGET_S 530 -> {call['budget_s']}" in done.stdout
    (argv,) = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert argv[-2:] == ["--time-budget", str(call["budget_s"])]


def test_a_call_whose_device_limit_leaves_no_room_starts_nothing(planned):
    root, env = planned
    done = _third(root, env, RUNS="per-bar", DEVICE_S="80")
    assert done.returncode == 2 and "DEVICE_S=80 leaves" in done.stderr and "nothing started" in done.stderr
    assert not list(Path(env["ARGV_DIR"]).glob("*.argv"))


def test_a_call_within_the_devices_limit_keeps_its_limit_and_budget(planned):
    root, env = planned
    done = _third(root, env, RUNS="per-bar", BUDGET_S="480", LIMIT_S="500")  # room for a slow set-up
    assert done.returncode == 0, done.stdout + done.stderr
    _, call = _state(env)
    assert (call["budget_s"], call["limit_s"]) == (480, 500) and "->" not in done.stdout
    parts = re.search(r"^set-up: (\d+)s environment, (\d+)s restoring, (\d+)s reading the plan$", done.stdout, re.M)
    assert parts and sum(map(int, parts.groups())) <= call["seconds"]  # where a call's first seconds went


def test_a_run_not_in_the_plan_stops_the_call_before_any_starts(planned):
    root, env = planned
    typo = _third(root, env, RUNS="per-bar controls/aa/perbar")
    assert typo.returncode == 2 and "run controls/aa/perbar is not in reports/third-edition/PLAN.json" in typo.stderr
    assert "controls/aa/per-bar" in typo.stderr  # the plan's runs are listed
    assert not list(Path(env["ARGV_DIR"]).glob("*.argv"))


def test_without_runs_named_the_call_runs_the_plans_next_stage(planned):
    root, env = planned
    done = _third(root, env, BUDGET_S="300", RUNS_MAX="2")
    assert done.returncode == 0 and "the plan's next runs: per-bar controls/aa/per-bar" in done.stdout
    argvs = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert sorted(a[a.index("--out") + 1] for a in argvs) == ["reports/third-edition/controls/aa/per-bar",
                                                           "reports/third-edition/per-bar"]


def test_without_runs_named_a_call_takes_at_most_runs_max_of_the_stage(planned):
    """Runs side by side gain no throughput on one H200, and at two runs' pace three N=32768 seeds
    never fit a slice (the script's head): by default one a call, the stage's first not complete,
    the rest held and named in the log."""
    root, env = planned
    done = _third(root, env, BUDGET_S="300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "held for a later call (RUNS_MAX=1 runs a call): controls/aa/per-bar" in done.stdout
    assert "the plan's next runs: per-bar\n" in done.stdout
    argvs = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert [a[a.index("--out") + 1] for a in argvs] == ["reports/third-edition/per-bar"]
    assert [p.read_text() for p in Path(env["ARGV_DIR"]).glob("*.jobs")] == ["1\n"]


def test_on_a_machine_of_several_gpus_each_sweep_takes_a_worker_a_gpu(planned):
    """Where nvidia-smi lists several GPUs (an eight-GPU kind, when lent), the plan's `--device cuda`
    becomes `--devices all` for a sweep (one worker a GPU, the same run key) and `--device all` for the
    ladder's script (its replicates' sweeps likewise), and the call's record says how many GPUs it had;
    on one GPU nothing changes."""
    root, env = planned
    bin_ = Path(env["PATH"].split(":")[0])
    _stub(bin_, "nvidia-smi", 'if [ "$1" = "-L" ]; then for i in 0 1 2 3 4 5 6 7; do '
                              'echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done; else echo stub; fi\n')
    done = _third(root, env, RUNS="per-bar ladder", BUDGET_S="300")
    assert done.returncode == 0, done.stdout + done.stderr
    argvs = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    (ladder,) = [a for a in argvs if a[0] == "lab/power_ladder.py"]
    (sweep,) = [a for a in argvs if a is not ladder]
    assert sweep[sweep.index("--devices") + 1] == "all" and "--device" not in sweep
    assert ladder[ladder.index("--device") + 1] == "all" and "--devices" not in ladder
    parts = sorted(Path(env["OUT"]).glob("state-third.tgz.*"))
    subprocess.run(["tar", "xzf", "-"], input=b"".join(p.read_bytes() for p in parts), cwd=root, check=True)
    (record,) = (root / "reports/third-edition/calls").glob("*.json")
    call = json.loads(record.read_text())
    assert call["gpu_count"] == 8
    from lab.plan_state import device_calls

    record.write_text(json.dumps(call | {"seconds": 10}))  # the stubbed call took no time: 10 s, read back
    assert device_calls(root / "reports/third-edition") | {"gpus": []} == {"calls": 1, "seconds": 10, "gpu_seconds": 80,
                                                                         "gpus": []}
    for p in Path(env["ARGV_DIR"]).glob("*"):
        p.unlink()
    _stub(bin_, "nvidia-smi", "echo stub\n")  # one GPU (or none listed): the plan's own words
    assert _third(root, env, RUNS="per-bar", BUDGET_S="300").returncode == 0
    (sweep,) = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert sweep[sweep.index("--device") + 1] == "cuda" and "--devices" not in sweep


def test_the_call_runs_the_plan_as_amended(planned):
    """With an AMENDMENT.md beside the plan (carried with it), --next and --commands read the plan as
    amended: once the first stage is complete, the call runs the amendment's added control at its own
    lengths and market, and a run it takes out of the edition is not in the plan's runs."""
    from tsflash.config import config_from_dict
    from tsflash.sweep.plan import run_hash

    root, env = planned
    out = root / "reports" / "third-edition"
    plan = json.loads((out / "PLAN.json").read_text())
    block = {"amendment": 1, "date": "2026-12-06", "plan_hash": plan["plan_hash"],
             "order": [{"stage": "first", "runs": ["per-bar", "aa/per-bar"]},
                       {"stage": "bracket", "runs": ["bracket/per-bar"]}],
             "add_controls": [{"name": "bracket", "source": "synthetic:long-memory:1:strength=0.1", "arms": ["per-bar"],
                               "lengths": [512], "oracle_gain": 0.026}],
             "not_run": {"iid/per-bar": "not needed", "ladder": "too dear"}}
    (out / "AMENDMENT.md").write_text(f"# Amendment 1\n\n```json\n{json.dumps(block)}\n```\n")
    for folder, resolved in ((out / "per-bar", plan["arms"][0]), (out / "controls" / "aa" / "per-bar",
                                                                  plan["controls"][-1]["arms"][0])):
        cfg = config_from_dict(resolved["config"])
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
        (folder / "run.json").write_text(json.dumps({"config_hash": run_hash(cfg), "status": "complete",
                                                     "data": plan["data"], "trials_per_length": 1}))
    done = _third(root, env, BUDGET_S="300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the plan's next runs: controls/bracket/per-bar\n" in done.stdout
    (sweep,) = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert sweep[sweep.index("--out") + 1] == "reports/third-edition/controls/bracket/per-bar"
    assert sweep[sweep.index("--lengths") + 1] == "512"
    assert sweep[sweep.index("--data") + 1] == "synthetic:long-memory:1:strength=0.1"
    typo = _third(root, env, RUNS="ladder", BUDGET_S="300")
    assert typo.returncode == 2 and "run ladder is not in reports/third-edition/PLAN.json as amended (AMENDMENT.md); its runs:" in typo.stderr


def test_h200_compile_parity_runs_the_parity_script_on_the_carried_bars(checkout):
    """`bash lab/h200.sh compile-parity`: lab/compile_parity.py on the bars device_env.sh unpacked,
    into the bench folder the summary is published from."""
    root, env = checkout
    done = subprocess.run(["bash", "lab/h200.sh", "compile-parity"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert "compile-parity exit: 0" in done.stdout, done.stdout + done.stderr
    (argv,) = [p.read_text().split("\n")[:-1] for p in Path(env["ARGV_DIR"]).glob("*.argv")]
    assert argv == ["lab/compile_parity.py", "--data", ".carry/data", "--out", "reports/bench/compile-parity"]
