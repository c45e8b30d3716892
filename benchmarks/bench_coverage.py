"""Coverage of the training windows on a real fold, by index arithmetic only (no training).

    python benchmarks/bench_coverage.py --data STORE_ROOT [--config default] [--folds 0,4]
        [--lengths 512,4096,32768,131072]

For each fold and N, the expected weight of every fit bar in the loss (how many of all possible
draws score it, over the mean), under the uniform window starts used before issue 17 and under
`tsflash.dataset.windows.BalancedWindows`: the share of fit bars never scored, the lowest and highest
weight, and the mean weight of the last 7 and 30 days before the validation tail's purge.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from tsflash.config import load_config, parse_lengths
from tsflash.data.store import load_bars
from tsflash.dataset.splits import WalkForward
from tsflash.dataset.windows import BalancedWindows, fit_pieces, range_coverage, segment_ids, window_starts
from tsflash.engine import contiguous_runs, split_validation
from tsflash.intervals import INTERVAL_US, bars_per_day
from tsflash.report.markdown import markdown_table


def weights(scheme: str, runs, seg: torch.Tensor, n: int) -> np.ndarray:
    """(T,) expected weight per bar relative to nothing yet: coverage counts over all possible draws."""
    if scheme == "uniform starts":
        starts = torch.cat([window_starts(lo, hi, n, seg) for lo, hi in runs])
        return range_coverage(starts.numpy(), starts.numpy() + n, len(seg)).astype(float)
    return BalancedWindows(*fit_pieces(runs, seg, n), n).coverage(len(seg)).astype(float)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="store root")
    ap.add_argument("--config", default="default")
    ap.add_argument("--folds", default="0,4")
    ap.add_argument("--lengths", default="512,4096,32768,131072")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    per_day = bars_per_day(INTERVAL_US[cfg.data.interval])
    bars = load_bars(args.data, start=cfg.data.start, end=cfg.data.end)
    seg = torch.from_numpy(segment_ids(bars.open_time, INTERVAL_US[cfg.data.interval], cfg.data.max_gap_bars))
    folds = list(WalkForward(n_splits=cfg.splits.n_folds, test_size=cfg.splits.test_days * per_day,
                             purge=cfg.purge).split(len(bars)))
    print(f"{cfg.data.start}..{cfg.data.end}, {len(bars):,} bars, {int(seg.max())} long gaps; val_days "
          f"{cfg.splits.val_days}; weight = expected share of draws scoring a bar / mean over the fold's fit bars\n")
    rows = []
    for k in map(int, args.folds.split(",")):
        fit_idx, _ = split_validation(folds[k][0], cfg.splits.val_days * per_day, cfg.purge)
        runs = contiguous_runs(fit_idx)
        for n in parse_lengths(args.lengths):
            for scheme in ("uniform starts", "balanced"):
                w = weights(scheme, runs, seg, n)[fit_idx]
                w = w / w.mean()
                rows.append([k, f"{len(fit_idx):,}", n, scheme, f"{np.mean(w == 0):.2%}", f"{w.min():.3f}",
                             f"{w.max():.3f}", f"{w[-7 * per_day:].mean():.3f}", f"{w[-30 * per_day:].mean():.3f}"])
    print(markdown_table(["fold", "fit bars", "N", "sampler", "never scored", "min weight", "max weight",
                          "last 7 days", "last 30 days"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
