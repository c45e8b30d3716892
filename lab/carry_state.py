"""The state a device call of the third edition carries, made here and checked against the carry's
64 MiB before the call (issue 33; lab/third_edition_h200.sh unpacks it on the device).

    python lab/carry_state.py reports/third-edition                  # the plan's next runs
    python lab/carry_state.py reports/third-edition per-bar controls/aa/per-bar

writes .carry/state-third.tar (gzip-compressed; `tar xf` reads it) with the plan, its amendments
(AMENDMENT.md, ...: the device reads the plan as amended) and the named runs
(default: `python -m lab.plan --next`, the runs the device script runs by default):

* a run not complete: what a resume reads back (cell summaries, fold scores, daily series, loss
  tables, the optuna ledger), not its per-bar cell files, checkpoints, figures or HTML (as
  `tsflash.runfolder.RunFolder.copy_record` keeps an unfinished run);
* a complete run inside a named folder (the ladder's finished replicates): only what skipping and
  reading it needs (run.json, config.json, data.json, the cell summaries and the loss tables), so
  that the ladder's device-side summary is right and its 27 replicates fit.

Then it adds up what the call carries (the tracked and untracked files outside reports/, which
stays behind, and .whl/ and .carry/) and refuses, in one line and with exit status 2, a carry over
the device's 64 MiB, naming the parts; the tar is written whole or not at all.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from lab.plan_state import next_runs  # noqa: E402
from tsflash.errors import UserError  # noqa: E402
from tsflash.report import registration  # noqa: E402
from tsflash.runfolder import RunFolder, left_out_of_record  # noqa: E402
from tsflash.sweep import preregister  # noqa: E402

log = logging.getLogger("carry_state")

LIMIT_MIB = 64.0  # the device's carry: the checkout and the ignored paths it carries (the device tool's README)
CARRIED = (".whl", ".carry")  # the ignored paths a device call carries
READ_ONLY = ("run.json", "config.json", "data.json", "cells", "forecasts")  # a complete run, to skip and read it


def run_files(root: Path) -> list[Path]:
    """The files of one run folder to carry (module doc): a resume's, or a complete run's reading set."""
    complete = RunFolder(root).is_complete()
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        parts = path.relative_to(root).parts
        # an unfinished run as its kept record (what a resume reads); a finished one: READ_ONLY of that
        if left_out_of_record(parts, complete=False) or (complete and parts[0] not in READ_ONLY):
            continue
        out.append(path)
    return out


def state_files(plan_dir: Path, runs: list[str]) -> list[Path]:
    """The plan, its amendments (the device reads the plan as amended) and every run folder under each
    named run (a sweep's, or the ladder's replicates)."""
    files = [plan_dir / registration.PLAN_JSON, plan_dir / registration.PLAN_MD,
             *registration.amendment_files(plan_dir)]
    for run in runs:
        folder = plan_dir / run
        found = sorted({p.parent for p in folder.rglob("run.json")}) if folder.is_dir() else []
        roots = [r for r in found if not any(o in r.parents for o in found)]  # a run's own sub-folders are its
        for root in roots:
            files += run_files(root)
        # the ladder's own files beside its replicates (its summary), never a replicate's twice
        files += [p for p in sorted(folder.glob("*")) if p.is_file() and folder not in roots]
    return files


def write_partial(files: list[Path], tar_path: Path, base: Path) -> Path:
    """The files into a gzip tar beside `tar_path` (renamed onto it once the carry is checked), paths
    relative to `base`."""
    partial = tar_path.with_name(f".{tar_path.name}.partial")
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(partial, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=Path(os.path.relpath(path.resolve(), base.resolve())).as_posix(), recursive=False)
    return partial


def _git_files(repo: Path, *args: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=repo, capture_output=True, check=True).stdout
    return [repo / name for name in out.decode().split("\0") if name]


def carry_bytes(repo: Path, replacing: Path) -> dict[str, int]:
    """What a device call carries, by part: the checkout outside reports/ (tracked and untracked, not
    ignored) and each carried ignored path, without `replacing` (the state tar a new one replaces)."""
    code = [p for p in _git_files(repo) + _git_files(repo, "--others", "--exclude-standard")
            if p.is_file() and p.relative_to(repo).parts[0] != "reports"]
    parts = {"checkout without reports/": sum(p.stat().st_size for p in code)}
    for name in CARRIED:
        files = [p for p in (repo / name).rglob("*") if p.is_file() and p.resolve() != replacing.resolve()] \
            if (repo / name).is_dir() else []
        parts[name] = sum(p.stat().st_size for p in files)
    return parts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", type=Path, help="the plan's folder (its PLAN.json), relative to the repository root")
    ap.add_argument("runs", nargs="*", help="run folders relative to the plan (default: the plan's next runs)")
    ap.add_argument("--out", type=Path, default=Path(".carry/state-third.tar"), help="the state tar")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help=f"the carry's limit (default {LIMIT_MIB:g})")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        if not (args.plan / registration.PLAN_JSON).is_file():
            raise UserError(f"{args.plan}: no {registration.PLAN_JSON} there")
        if Path(CARRIED[1]).resolve() not in args.out.resolve().parents:
            raise UserError(f"--out must lie in {CARRIED[1]}/, which the call carries, got {args.out}")
        runs = args.runs or next_runs(args.plan)[1]
        if not runs:
            raise UserError(f"{args.plan}: every stage of the plan is complete; nothing to carry")
        planned = {str(f.relative_to(args.plan)) for _, f, _ in preregister.ordered_commands(
            preregister.amended_plan(args.plan), args.plan)}
        if unknown := [r for r in runs if r not in planned]:
            amendments = [p.name for p in registration.amendment_files(args.plan)]
            amended = f" as amended ({', '.join(amendments)})" if amendments else ""
            raise UserError(f"run {unknown[0]} is not in {args.plan / registration.PLAN_JSON}{amended}; its runs: "
                            f"{' '.join(sorted(planned))}")
        files = state_files(args.plan, runs)
        partial = write_partial(files, args.out, Path.cwd())
        size = partial.stat().st_size
        parts = carry_bytes(Path.cwd(), replacing=args.out)  # the partial lies in .carry: counted
        total = sum(parts.values())
        text = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items())
        if total > args.limit_mib * 2**20:
            partial.unlink()
            raise UserError(f"the carry would be {total / 2**20:.1f} MiB, over the device's {args.limit_mib:g} MiB "
                            f"({text}; the state {size / 2**20:.1f} MiB): carry fewer runs, or leave .carry/packed "
                            f"out of a call without BTC bars; {args.out} is unchanged")
        partial.rename(args.out)
        print(f"{args.out}: {len(files)} files of {', '.join(runs)}, {size / 2**20:.1f} MiB; the call carries "
              f"{total / 2**20:.1f} of {args.limit_mib:g} MiB ({text})")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
