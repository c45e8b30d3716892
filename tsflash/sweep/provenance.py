"""Where a run came from: run.json (command, options, device, git commit, package versions, the
job's peak memory) and data.json (data source, fingerprint, gaps, folds with dates)."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from tsflash.data.store import Bars, find_gaps, fingerprint, iso
from tsflash.device import device_name, process_peak_bytes
from tsflash.errors import UserError
from tsflash.runfolder import RUN_FORMAT, RunFolder, read_json, write_json
from tsflash.sweep.ledger import SEARCH_SPACE_DOC
from tsflash.sweep.plan import SweepPlan, run_hash

# The project's own checkout: the folder holding pyproject.toml and tsflash/.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tsflash", "torch", "numpy", "pyarrow", "scikit-learn", "optuna", "matplotlib", "polars")


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def worker_id(pid: int | None = None) -> str:
    """host:pid:process-start of this process (or of `pid` on this host): who ran an invocation."""
    pid = os.getpid() if pid is None else pid
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "?"
    return f"{socket.gethostname()}:{pid}:{start}"


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=root)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(root: Path = PROJECT_ROOT) -> str:
    """$TSFLASH_GIT_COMMIT when set: whoever copied the code says which commit it is (a copy on
    another machine may hold a stale .git of its own, which must not be believed). Otherwise HEAD
    (+ "-dirty" with uncommitted changes to tracked files) of the project's OWN checkout: only
    when `root` is the top of its git work tree, since a copy of the project inside another
    repository must not report that repository's commit. Else "unknown".
    """
    if stated := os.environ.get("TSFLASH_GIT_COMMIT"):
        return stated
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is not None and Path(top).resolve() == Path(root).resolve():
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
        if head:
            return head + ("-dirty" if dirty else "")
    return "unknown"


GPU_JOBS_ENV = "TSFLASH_GPU_JOBS"


def gpu_jobs() -> int | None:
    """$TSFLASH_GPU_JOBS: how many jobs a device script started side by side on this invocation's GPU
    (lab/*_h200.sh set it), so that a report can say its wall-clock and throughput were
    shared; None when nothing says."""
    text = os.environ.get(GPU_JOBS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"${GPU_JOBS_ENV} must be a whole number of jobs >= 1, got {text!r}")
    return int(text)


def package_versions() -> dict:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def redact(url: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db (run.json is published)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def write_run_json(plan: SweepPlan) -> None:
    """run.json: created once, then each invocation appended; config.json on the first one."""
    folder = plan.folder
    meta = folder.read_run() if folder.exists() else {}
    opts = plan.options
    commit = git_commit()
    jobs = gpu_jobs()
    invocations = meta.get("invocations", []) + [
        {
            "started": now_utc(),
            "command": opts.command,
            "worker": worker_id(),
            "git_commit": commit,
        }  # a resumed run may run newer code
        | ({"gpu_jobs": jobs} if jobs else {})
    ]
    meta.update(
        {
            "format": RUN_FORMAT,
            "run_key": plan.run_key,
            "config_hash": meta.get("config_hash", run_hash(plan.cfg)),
            "status": meta.get("status", "running"),
            "created": meta.get("created", now_utc()),
            "command": meta.get("command", opts.command),
            "invocations": invocations,
            "lengths": plan.cfg.lengths,
            "data": opts.data,
            "trials_per_length": opts.trials,
            "search_space": SEARCH_SPACE_DOC if opts.trials > 1 else None,
            "preset": plan.preset,
            "preset_note": plan.preset_note,
            "device": plan.device,
            "device_name": device_name(plan.device),
            "devices": plan.devices,
            "seeds": plan.cfg.train.seeds,
            "storage": redact(plan.storage) if plan.shared else "sqlite (run folder)/optuna.db",
            "study_name": plan.study_name,
            "git_commit": meta.get("git_commit", commit),
            "packages": package_versions(),
        }
    )
    write_json(folder.run_json, meta)
    if not folder.config_json.exists():
        write_json(folder.config_json, plan.cfg.stored())


def record_kernel_choices(folder: RunFolder, choices: dict) -> None:
    """Merge this host's attention `auto` decisions (tsflash.model.attention.auto_report: kernel, checks,
    median timings, runner-up, margin) into run.json's "kernel_choices" (under the run folder's
    lock: workers share run.json)."""
    meta = folder.read_run()
    host = socket.gethostname()
    merged = meta.get("kernel_choices", {}) | {f"{host} {key}": choice for key, choice in choices.items()}
    if merged != meta.get("kernel_choices"):
        meta["kernel_choices"] = merged
        write_json(folder.run_json, meta)


def kept_kernel_choices(folder: RunFolder) -> dict[str, dict]:
    """run.json's attention decisions by decision key, the host dropped: where hosts differ on a key,
    the first recorded wins (the one the run's first cells trained under). For `attention.pin`."""
    kept: dict[str, dict] = {}
    if not folder.run_json.exists():
        return kept
    for host_key, record in folder.read_run().get("kernel_choices", {}).items():
        kept.setdefault(host_key.split(" ", 1)[-1], record)
    return kept


PEAK_MEMORY_RULE = (
    "the job's peak resident set on this host: the larger of this process's VmHWM and the "
    "largest child's ru_maxrss (tsflash.device.process_peak_bytes), every phase included"
)


def record_peak_memory(folder: RunFolder, through: str) -> int:
    """Write the job's peak memory so far (`process_peak_bytes`: data, cells, precision check and,
    once it ran, the report) into run.json's "peak_memory", the largest of this host's
    invocations; `through` names the last phase it covers. Returns this invocation's peak."""
    peak = process_peak_bytes()
    meta = folder.read_run()
    host = socket.gethostname()
    hosts = meta.get("peak_memory", {}).get("hosts", {})
    hosts[host] = max(hosts.get(host, 0), peak)
    meta["peak_memory"] = {"bytes": max(hosts.values()), "through": through, "rule": PEAK_MEMORY_RULE, "hosts": hosts}
    write_json(folder.run_json, meta)
    return peak


def mark_complete(folder: RunFolder) -> None:
    meta = read_json(folder.run_json)
    meta["status"] = "complete"
    meta["finished"] = now_utc()
    write_json(folder.run_json, meta)


def write_data_json(folder: RunFolder, cfg, bars: Bars, source: dict, folds, prep_s: float) -> None:
    """data.json: source, fingerprint, gaps and every fold's train/test dates."""
    gaps = find_gaps(bars.open_time, bars.interval_us)
    t = bars.open_time
    fold_rows = [
        {
            "fold": k,
            "train_start": iso(t[tr[0]]),
            "train_end": iso(t[tr[-1]]),
            "test_start": iso(t[te[0]]),
            "test_end": iso(t[te[-1]]),
            "n_train": int(len(tr)),
            "n_test": int(len(te)),
        }
        for k, (tr, te) in enumerate(folds)
    ]
    write_json(
        folder.data_json,
        {
            **source,
            "symbol": bars.symbol,
            "interval": bars.interval,
            "range": [cfg.data.start, cfg.data.end],
            "fingerprint": fingerprint(bars),
            "n_gaps": int(len(gaps)),
            "missing_bars": int(gaps.missing.sum()) if len(gaps) else 0,
            "folds": fold_rows,
            "prepare_seconds": prep_s,
        },
    )
