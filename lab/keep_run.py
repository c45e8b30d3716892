"""Keep a run's record under reports/ (`tsflash.runfolder.RunFolder.copy_record`): everything but
its per-bar files, checkpoints and rendered figures; an unfinished run keeps what a resume reads
back (fold scores, series, loss tables), so that resuming from the copy trains no finished cell.

    python lab/keep_run.py runs/recipes-emafast-regime1/short-mix-ema-fast/regime \\
        reports/recipes/pools/regime-seed1/short-mix-ema-fast/regime

Several pairs may follow one another (RUN DEST RUN DEST ...). Each DEST is written whole or not at
all and never overwritten.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash.errors import UserError  # noqa: E402
from tsflash.runfolder import RunFolder  # noqa: E402

log = logging.getLogger("keep_run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", type=Path, metavar="RUN DEST", help="a run folder, then where its record goes")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if len(args.pairs) % 2:
        ap.error(f"RUN DEST come in pairs, got {len(args.pairs)} paths")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    try:
        for run, dest in pairs:  # every pair checked before the first copy: nothing half-done
            RunFolder(run).check_record_copy(dest)
        for run, dest in pairs:
            kept = RunFolder(run).copy_record(dest)
            state = ("complete" if kept["complete"] else
                     f"unfinished, {kept['resumable_cells']} of {kept['cells']} finished cells resume without training")
            log.info("kept %s -> %s (%s; %.1f MB)", run, dest, state, kept["bytes"] / 1e6)
            if not kept["complete"] and kept["resumable_cells"] < kept["cells"]:
                log.warning("%s: %d finished cell(s) of folds not yet scored will train again on resume", dest,
                            kept["cells"] - kept["resumable_cells"])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
