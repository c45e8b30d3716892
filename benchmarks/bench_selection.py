"""Benchmark of tsflash.stats.pbo and .gate: PBO via CSCV (target: S = 16, 12,870 splits, on a 1,000 x 100
matrix in at most 1 s), plus the gate and a naive one-split-at-a-time CSCV for comparison.

    .venv/bin/python benchmarks/bench_selection.py [--repeats 5] [--naive]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import time
from functools import partial

import numpy as np

from tsflash.stats.gate import Gate
from tsflash.stats.pbo import pbo_cscv


def best_of(fn, repeats: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process); CPU time is the steadier figure on a
    machine shared with other jobs."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def naive_pbo(m: np.ndarray, s: int) -> float:
    """The paper's loop, one split at a time (numpy inside each split), for comparison only."""
    t, k = m.shape
    blocks = np.split(m[t % s :], s)
    overfit = []
    for c in itertools.combinations(range(s), s // 2):
        j = np.concatenate([blocks[i] for i in c])
        jb = np.concatenate([blocks[i] for i in range(s) if i not in c])
        r, rb = j.mean(0) / j.std(0, ddof=1), jb.mean(0) / jb.std(0, ddof=1)
        rank = 1 + np.sum(rb < rb[np.argmax(r)])
        overfit.append(rank <= (k + 1) / 2)
    return float(np.mean(overfit))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--naive", action="store_true", help="also time the naive loop (slow)")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), numpy {np.__version__}")
    rng = np.random.default_rng(0)
    for t, k, s in [(1000, 100, 16), (1000, 100, 8), (2000, 500, 16), (1000, 1000, 16)]:
        m = rng.standard_normal((t, k)) * 0.01
        pbo_cscv(m, n_blocks=s)  # warm-up
        sec, cpu = best_of(partial(pbo_cscv, m, n_blocks=s), args.repeats)
        res = pbo_cscv(m, n_blocks=s)
        print(
            f"pbo_cscv T={t:5d} K={k:5d} S={s:2d} splits={math.comb(s, s // 2):6d}: "
            f"wall {sec * 1e3:7.1f} ms, cpu {cpu * 1e3:7.1f} ms (best of {args.repeats})  pbo={res.pbo:.3f}"
        )
        if args.naive and (t, k, s) == (1000, 100, 16):
            t0 = time.perf_counter()
            p = naive_pbo(m, s)
            sec_naive = time.perf_counter() - t0
            print(f"naive loop     T={t:5d} K={k:5d} S={s:2d}: wall {sec_naive * 1e3:7.1f} ms  pbo={p:.3f}  speedup x{sec_naive / sec:.0f}")
    # the sweep's case: ~900 daily returns, a handful of context lengths
    cands = {f"n={2**i}": rng.standard_normal(900) * 0.01 for i in range(6, 16)}
    sec, cpu = best_of(lambda: Gate().evaluate(cands), args.repeats)
    print(f"Gate.evaluate 10 candidates x 900 days, S=16: wall {sec * 1e3:.1f} ms, cpu {cpu * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
