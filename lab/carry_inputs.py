"""The inputs every device call carries, made in one step at the start of a session with a device:

    python lab/carry_inputs.py --data PATH/TO/STORE      # default: data, the project's bar store

* `.whl/`: optuna and the four packages it needs that the lent machine lacks (alembic, mako,
  colorlog, sqlalchemy; the lent machine's notes, gpu.md), as wheels for the device's Python 3.12
  on x86-64 Linux, at the versions installed here, so the device schedules cells with the optuna
  the tests ran (`lab/device_env.sh` installs them there);
* `.carry/packed/`: the BTCUSDT 1-minute years the sweeps need (2021-2025), packed by
  `tsflash data pack` (35 MB; the store's own files would not fit the 64 MiB carry).

What is there already is kept: a wheel present at its version is not fetched again, and a packed
folder is not rebuilt. It then adds up the carry as `lab/carry_state.py` does and says how
much of the 64 MiB is left for a run's state, refusing in one line (exit status 2) when nothing is.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash and lab

from lab.carry_state import LIMIT_MIB, carry_bytes  # noqa: E402

WHEELS = ("optuna", "alembic", "mako", "colorlog", "sqlalchemy")  # what the lent machine lacks (gpu.md)
DEVICE_PYTHON = "3.12"
# sqlalchemy's compiled wheel; the other four are pure Python ("any"), which pip accepts under any platform
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
WHEEL_DIR, PACKED_DIR = Path(".whl"), Path(".carry/packed")


def pinned() -> list[str]:
    """Each wheel at the version installed here: "optuna==5.1.0", ..."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]


def missing_wheels(folder: Path) -> list[str]:
    """The pins of `pinned()` with no wheel of that name and version in `folder` (names compared as
    wheel files spell them: lower case, "-" as "_")."""
    have = {"-".join(p.name.lower().split("-")[:2]) for p in folder.glob("*.whl")} if folder.is_dir() else set()
    return [pin for pin in pinned() if "-".join(pin.lower().replace("-", "_").split("==")) not in have]


def wheel_command(pins: list[str], dest: Path) -> list[str]:
    """pip download of `pins` as wheels for the device's Python and platform, without dependencies
    (the machine has the rest: its notes, gpu.md)."""
    platforms = [arg for platform in DEVICE_PLATFORMS for arg in ("--platform", platform)]
    return [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps",
            "--python-version", DEVICE_PYTHON, "--implementation", "cp", *platforms, "--dest", str(dest), *pins]


def pack_command(data: Path, start: int, end: int) -> list[str]:
    return [sys.executable, "-m", "tsflash.cli", "data", "pack", "--root", str(data), "--out", str(PACKED_DIR),
            "--start", str(start), "--end", str(end)]


def main(argv: list[str] | None = None, run=subprocess.run) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data"),
                    help="the bar store to pack from (default: data, where `tsflash data fetch` puts bars)")
    ap.add_argument("--start", type=int, default=2021, help="first year packed (default 2021)")
    ap.add_argument("--end", type=int, default=2025, help="last year packed (default 2025)")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help=f"the carry's limit (default {LIMIT_MIB:g})")
    args = ap.parse_args(argv)
    if not PACKED_DIR.is_dir() and not args.data.is_dir():  # checked before anything is fetched
        print(f"error: --data {args.data}: no such folder (the bar store to pack from)", file=sys.stderr)
        return 2
    if pins := missing_wheels(WHEEL_DIR):
        print(f"{WHEEL_DIR}: fetching {' '.join(pins)} for Python {DEVICE_PYTHON} on x86-64 Linux", flush=True)
        if run(wheel_command(pins, WHEEL_DIR)).returncode != 0 or missing_wheels(WHEEL_DIR):
            print(f"error: pip could not fetch {' '.join(missing_wheels(WHEEL_DIR))} into {WHEEL_DIR}", file=sys.stderr)
            return 2
    if not PACKED_DIR.is_dir():
        print(f"{PACKED_DIR}: packing {args.start}..{args.end} from {args.data}", flush=True)
        if run(pack_command(args.data, args.start, args.end)).returncode != 0:
            return 2
    parts = carry_bytes(Path.cwd(), replacing=Path(".carry/none"))
    total = sum(parts.values()) / 2**20
    text = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items())
    if total >= args.limit_mib:
        print(f"error: the carry is already {total:.1f} MiB of the device's {args.limit_mib:g} MiB ({text}): "
              "no room for a run's state", file=sys.stderr)
        return 2
    print(f"the call carries {total:.1f} of {args.limit_mib:g} MiB ({text}); "
          f"{args.limit_mib - total:.1f} MiB left for a run's state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
