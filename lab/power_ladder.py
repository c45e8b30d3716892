"""The strength ladder (issue 29, item 6): what a "no" of question 1 rules out.

One planted far-context mechanism at several strengths, each rung run as independent replicates
(a market seed each) of N=512 against the longest N only, and for each rung the rate at which the
run-level test (`tsflash.stats.runs.run_level_test`, the longest N against 512 over the folds)
says "better", with its exact binomial interval (`scipy.stats.binomtest`), beside the planted
effect's size (the oracle's direction gain, nats per moved bar). From the rates, the smallest
effect found with 80 % power. A null rung on `synthetic:iid` (nothing to find) gives the test's
false-positive rate on the same design.

The mechanism: the long-memory echo's strength (`tsflash.data.synthetic.LongMemory`), not the
regime's tilt. The echo's information is nil below its lag (10080 bars) and whole beyond it, so
the difference N=32768 minus N=512 is exactly the planted far-context effect and the oracle's
gain is its size, with no partial information at 512 to subtract; that gain grows as strength^2
(0.0094 nats per moved bar at 0.06), so the rungs are placed by their size; and it extends the
one measured point (strength 0.2: found by 5 of 15 N=32768 runs). The regime market holds some of
its information at every N, so its N=512 arm would carry part of the effect.

Rungs (default): eight strengths from 0.02 to 0.2, each sqrt(2) times the last (oracle gains
about 0.001, BTC's own direction skill, to 0.10 nats per moved bar, each twice the last; the gain
is about 2.6 strength^2, measured on 2.4M bars by `echo_oracle_gain`'s rule), and the iid null;
3 replicates a rung. The design study chose that (`--design-study`, reports/controls/power/design/):
read as one detection curve, eight rungs of 3 replicates place the 80 % point within a factor of
about 4-5 (95 %, a t test's slope) for 27 replicates, where four rungs of 5 (25 replicates) give
7-9 and four of 10 (50) give 3. Design: N in {512, 32768},
3 folds (df 2), two seeds a replicate, its own (replicate k: seeds 2k and 2k+1, so the
replicates average over initial weights, which decide who finds the echo), the default protocol otherwise (validated stopping, 600 steps at
most), no precision check, no context cuts. Replicates are interleaved (replicate r of every rung
before r + 1), so a partial ladder is balanced. Detected: the crossed test's verdict "better"
(`tsflash.stats.runs.crossed_seed_test`, folds and seeds as crossed random effects; p < 0.05,
two-sided, in the longer N's favour) on each score (log-loss per labelled bar, direction score per
moved bar); the fold t's verdict stands beside it. Why the crossed test: the third edition's primary
test is the crossed one over 5 folds x 3 seeds, and the ladder's sentence is about that test. The
same test on fewer folds and seeds (3 x 2) has less power, so the ladder's 80 % point is a
conservative bound on the primary test's; the fold t ignores the seeds' effect (which decides who
finds the echo), so on 3 x 2 it can claim more power than the crossed test has on 5 x 3, and a
point read from it would not bound the primary test's. The 80 % point, two readings: the detection rates made monotone in strength
(isotonic regression weighted by replicates, `sklearn.isotonic`), then linear in log(effect)
between the two rungs around 0.8 ("at most the weakest rung" or "beyond the strongest" when it
does not cross inside); and one detection curve over every rung (`detection_curve`: floor +
(1 - floor) logistic(slope (log effect - location)), its posterior on a grid, the null rung
informing the floor), which gives the point an interval. Beside it, the model-based power of the
crossed test at the full protocol (5 folds x 3 seeds, `tsflash.stats.runs.crossed_power`) at the
rung's mean estimate, from the replicates' variance components of the paired table.

GPU cost plan (one H200; `--plan` prints it from the calibrated cost table,
`tsflash.sweep.progress.prior_rates("cuda")` and `CostModel`, whose cuda rows are the real-bar and
A/A sweeps): one replicate at the default protocol (6 cells at N=512 of about 8 s, 6 at N=32768 of
about 32 s, 3 folds' baselines of about 8 s) is estimated at 269 s, 447 s when every N=32768 cell
runs its 600 steps; at the recipes' rule (`--set train.short_fraction=0.25 --set
train.ema_decay=0.98 --set train.restarts=4 --set train.restart_screen=400`) 1,016 s (1,180 s),
priced from the rule's own cells measured alone on the H200 (the cost table's rows of its training
protocol), so the default ladder (9 rungs x 3 replicates) is about 7.6 h of one H200 (8.8 h in the
worst case; 5.6 h and 9.6 h before those rows, as the third edition's plan states it) and runs
over sessions: each call resumes where the last stopped (`--time-budget 400` in a
10-minute call: no new cell after 400 s, nor one expected to end after it). Compiled training
(train.compile) is left off: it is not calibrated, and it must not change the conclusions.

On the device, from the repository root (like lab/controls_h200.sh: source
lab/device_env.sh, carry the runs folder back as a tar):

    timeout --signal=INT 560 python lab/power_ladder.py --device cuda --time-budget 400

    python lab/power_ladder.py --plan                               # the cost plan, no training
    python lab/power_ladder.py --device cuda --time-budget 400      # rerun until done
    python lab/power_ladder.py --summary-only --out reports/controls/power   # publish the summary

The runs go to --runs (default runs/power-ladder/<rung>/rep<k>/<market>); summary.md and
summary.json go to --out (default: the --runs folder), so nothing under reports/ is written
unless --out names it. The sweeps run through `lab/controls.py`'s helpers.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import math
import shlex
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash import cli  # noqa: E402
from tsflash.atomic import write_json, write_text  # noqa: E402
from tsflash.report import wording  # noqa: E402
from tsflash.report.compute import SCORES  # noqa: E402  (score -> its loss and count columns)
from tsflash.runfolder import RunFolder, read_json  # noqa: E402
from tsflash.stats.runs import (  # noqa: E402
    CrossedComponents,
    CrossedTestResult,
    RunTestInputError,
    RunTestResult,
    crossed_power,
    crossed_seed_test,
    run_level_test,
    runs_from_table,
    verdict_of,
)


def _controls():
    """lab/controls.py (the experiment scripts are not a package): its sweep helpers."""
    path = Path(__file__).with_name("controls.py")
    spec = importlib.util.spec_from_file_location("controls", path)
    if spec is None or spec.loader is None:  # a .py path always has a loader: a clear error if not
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


controls = _controls()
log = logging.getLogger("power_ladder")

DEFAULT_STRENGTHS = "0.02,0.028,0.04,0.057,0.08,0.113,0.16,0.2"  # gains 2x apart (module doc)
DEFAULT_LENGTHS = "512,32768"
NULL = "iid"  # the null rung's market
ECHO = "long-memory"
DESIGN = ("splits.n_folds=3", "eval.context_cuts=[]")  # fewer folds, no cuts; two seeds a replicate:
# Draw 0 of the echo market is the one the training rule was chosen on (reports/recipes): the
# ladder's replicates are draws nobody screened on, as the third edition's controls are.
FIRST_MARKET_SEED = 1
SEEDS_PER_REPLICATE = 2  # replicate k trains seeds 2k, 2k+1: its own initial weights (`replicate_args`)
TARGET_POWER = 0.8
FULL_PROTOCOL = (5, 3)  # folds, seeds of the default protocol: the design BTC's answer is tested on
LEVEL = 0.95  # of the binomial intervals


# ---------------------------------------------------------------------------------------------
# Rungs and their run folders


class Rung(NamedTuple):  # a NamedTuple: this script is loaded outside sys.modules, which dataclasses need
    """One step of the ladder: the echo at `strength`, or the null market (strength None)."""

    strength: float | None

    @property
    def name(self) -> str:
        return NULL if self.strength is None else f"strength-{self.strength:g}"

    @property
    def source(self) -> str:
        return NULL if self.strength is None else ECHO


def rungs_of(strengths: list[float], with_null: bool = True) -> list[Rung]:
    return [Rung(s) for s in strengths] + ([Rung(None)] if with_null else [])


def replicate_args(args, rung: Rung, k: int) -> argparse.Namespace:
    """The arguments `controls.sweep_argv` reads, for replicate k of `rung`: market seed seed + k, and
    training seeds 2k, 2k+1 (the caller's --set after them wins)."""
    echo = ",".join(x for x in (args.echo, "" if rung.strength is None else f"strength={rung.strength:g}") if x)
    # A seed is one set of initial weights for every fold, and at N=32768 the seed decides who finds
    # the echo (reports/recipes, "Seeds as initial weights"): replicates that shared seeds 0 and 1
    # would measure the detection rate of those two initial weights, not of training at N.
    return argparse.Namespace(out=args.runs / rung.name / f"rep{k:02d}", lengths=args.lengths, device=args.device,
                              preset=args.preset, config=args.config, seed=args.seed + k, long_memory=echo,
                              overrides=[*DESIGN, replicate_seeds(k), *args.overrides])


def replicate_seeds(k: int) -> str:
    """The --set item of replicate k's training seeds (2k, 2k+1)."""
    return "train.seeds=[" + ", ".join(str(SEEDS_PER_REPLICATE * k + j) for j in range(SEEDS_PER_REPLICATE)) + "]"


def run_root(args, rung: Rung, k: int) -> Path:
    rep = replicate_args(args, rung, k)
    return rep.out / rung.source


def is_complete(root: Path) -> bool:
    return RunFolder(root).exists() and RunFolder(root).is_complete()


def schedule(args) -> list[tuple[Rung, int]]:
    """Every (rung, replicate), replicate-major: a partial ladder has every rung at equal depth."""
    return [(rung, k) for k in range(args.replicates) for rung in rungs_of(args.strengths, not args.no_null)]


def run_ladder(args) -> bool:
    """Continue the replicates in `schedule` order within --time-budget; True when all are complete."""
    t0 = time.monotonic()
    for rung, k in schedule(args):
        if is_complete(run_root(args, rung, k)):
            continue
        left = None if args.time_budget is None else args.time_budget - (time.monotonic() - t0)
        if left is not None and left <= 0:
            log.info("time budget used before %s replicate %d: run this command again to continue", rung.name, k)
            return False
        if (rc := cli.main(controls.sweep_argv(rung.source, replicate_args(args, rung, k), left))) != 0:
            raise SystemExit(rc)
    return all(is_complete(run_root(args, r, k)) for r, k in schedule(args))


# ---------------------------------------------------------------------------------------------
# One replicate: the run-level test and the oracle's gain


class Reading(NamedTuple):
    """One replicate on one score: the crossed test (its detection: the third edition's primary test),
    the fold t beside it, and the paired table's variance components (None with one seed a fold)."""
    crossed: CrossedTestResult
    fold_t: RunTestResult
    components: CrossedComponents | None = None

    @property
    def verdict(self) -> str:
        return verdict_of(self.crossed.estimate, self.crossed.p)

    @property
    def detected(self) -> bool:
        return self.verdict == "better"


def replicate_tests(root: Path, min_seeds_per_fold: int = 1) -> dict[str, Reading]:
    """{score: the longest N (B) against the shortest (A)} of a complete run folder."""
    from tsflash.scoring.daily import read_losses

    folder = RunFolder(root)
    cells, _ = folder.cell_summaries()
    keys = {int(c["n"]): c["key"] for c in cells}
    short, long = min(keys), max(keys)
    tables = {}
    for n in (short, long):
        if (table := read_losses(folder, keys[n])) is None:
            raise RunTestInputError(f"{root}: no loss table (forecasts/) for {keys[n]!r}, N={n}")
        tables[n] = table
    out = {}
    for score, (loss, count) in SCORES.items():
        a, b = (runs_from_table(tables[n], keys[n], loss=loss, count=count, label=f"N={n}") for n in (short, long))
        try:
            components = CrossedComponents.from_runs(a, b)
        except RunTestInputError:  # one seed a fold: no seed part to estimate
            components = None
        out[score] = Reading(crossed_seed_test(a, b), run_level_test(a, b, min_seeds_per_fold=min_seeds_per_fold),
                             components)
    return out


def echo_oracle_gain(root: Path) -> float | None:
    """The planted echo's size in the replicate's bars: the direction log-loss gain (nats per moved
    bar, over the class prior) of the calibrated sign of the planted drift (`echo_signal`) on every
    bar whose echo source exists, the flat third fitted on them (`direction_gain`). None on the null."""
    from tsflash.config import config_from_dict
    from tsflash.data.synthetic import INTERVAL_US, LongMemory, direction_gain, echo_signal, grid_returns
    from tsflash.sweep.source import load_data

    folder = RunFolder(root)
    data = read_json(folder.data_json)
    if "params" not in data:
        return None
    cfg = config_from_dict(read_json(folder.config_json))
    bars, _ = load_data(cfg, data["source"], default_seed=int(data["seed"]))
    p, h, step = LongMemory(**data["params"]), cfg.labels.horizon, INTERVAL_US[cfg.data.interval]
    g, slots = grid_returns(bars.open_time, bars.close, step)
    signal = echo_signal(g, p, h)[slots]
    t = np.arange(len(slots) - h)
    t = t[(slots[t] >= p.lag + p.window) & (slots[t + h] - slots[t] == h)]  # source exists, no gap in the horizon
    lc = np.log(bars.close)
    fwd = lc[t + h] - lc[t]
    moved = np.abs(fwd) > np.quantile(np.abs(fwd), cfg.labels.flat_fraction)
    return direction_gain(signal[t[moved]], fwd[moved] > 0)


# ---------------------------------------------------------------------------------------------
# The ladder's statistics (pure functions: tests/lab/test_power_ladder.py checks them)


def detection_rate(k: int, n: int, level: float = LEVEL) -> dict:
    """k detections in n replicates: the rate and its exact (Clopper-Pearson) interval, scipy.stats.binomtest."""
    from scipy.stats import binomtest

    if n == 0:
        return {"k": 0, "n": 0, "rate": math.nan, "ci": [math.nan, math.nan]}
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return {"k": int(k), "n": int(n), "rate": k / n, "ci": [float(ci.low), float(ci.high)]}


def effect_at_power(effects, rates, weights, target: float = TARGET_POWER) -> dict:
    """The smallest effect detected with probability `target`: the rates made non-decreasing in
    the effect (isotonic regression, weighted by replicates), then linear in log(effect) between
    the two rungs around `target`. {"effect": value or None, "how": "interpolated" | "at most the
    weakest rung" | "beyond the strongest rung"}."""
    from sklearn.isotonic import IsotonicRegression

    order = np.argsort(effects)
    x = np.log(np.asarray(effects, float)[order])
    fitted = IsotonicRegression(increasing=True).fit_transform(x, np.asarray(rates, float)[order],
                                                               sample_weight=np.asarray(weights, float)[order])
    above = np.flatnonzero(fitted >= target)
    if len(above) == 0:
        return {"effect": None, "how": "beyond the strongest rung", "fitted": fitted.tolist()}
    i = int(above[0])
    if i == 0:
        return {"effect": float(np.exp(x[0])), "how": "at most the weakest rung", "fitted": fitted.tolist()}
    w = (target - fitted[i - 1]) / (fitted[i] - fitted[i - 1])
    return {"effect": float(np.exp(x[i - 1] + w * (x[i] - x[i - 1]))), "how": "interpolated", "fitted": fitted.tolist()}


# The detection curve's grid (`detection_curve`): location over the rungs' log range widened by
# CURVE_WIDEN on each side, slope (per unit of log effect) log-spaced over CURVE_SLOPES, the floor (the
# test's rate of "better" with nothing planted) over [0, CURVE_FLOOR_MAX]
CURVE_WIDEN = 3.0
CURVE_SLOPES = (0.3, 20.0)
CURVE_FLOOR_MAX = 0.3
CURVE_GRID = (81, 40, 16)  # location, slope, floor points


def _detection_probability(x, location, slope, floor):
    """floor + (1 - floor) / (1 + exp(-slope (x - location))), broadcast: x is log(effect)."""
    from scipy.special import expit

    return floor + (1 - floor) * expit(slope * (x - location))


def detection_curve(effects, detected, replicates, null: tuple[int, int] = (0, 0), target: float = TARGET_POWER,
                    level: float = LEVEL) -> dict | None:
    """Detection against effect as one curve, so that every rung informs the 80 % point (the rungs'
    own intervals need ten replicates each to say much): P(detect) = floor + (1 - floor) *
    logistic(slope * (log effect - location)), monotone by construction, its posterior on a grid
    (`CURVE_GRID`; flat in location, log slope and floor; the null rung's `null` = (detections,
    replicates) informs the floor). Returns the effect detected with probability `target`: posterior
    median and equal-tailed `level` interval (nats per moved bar), and `p_within`, the posterior
    probability that it is at most the strongest rung's effect (below 0.5: "beyond the strongest
    rung", the upper end is then the grid's, not the data's). None without a planted replicate."""
    from scipy.special import logit

    effects, detected, replicates = (np.asarray(a, float) for a in (effects, detected, replicates))
    keep = replicates > 0
    if not keep.any():
        return None
    x, k, n = np.log(effects[keep]), detected[keep], replicates[keep]
    n_loc, n_slope, n_floor = CURVE_GRID
    location = np.linspace(x.min() - CURVE_WIDEN, x.max() + CURVE_WIDEN, n_loc)
    slope = np.geomspace(*CURVE_SLOPES, n_slope)
    floor = np.linspace(0, CURVE_FLOOR_MAX, n_floor)
    p = _detection_probability(x[None, None, None, :], location[None, None, :, None], slope[None, :, None, None],
                               floor[:, None, None, None])
    p = np.clip(p, 1e-12, 1 - 1e-12)
    loglik = (k * np.log(p) + (n - k) * np.log1p(-p)).sum(-1)
    k0, n0 = null
    loglik = loglik + (k0 * np.log(np.clip(floor, 1e-12, None)) + (n0 - k0) * np.log1p(-floor))[:, None, None]
    weight = np.exp(loglik - loglik.max())
    # where the curve crosses target: location + logit((target - floor) / (1 - floor)) / slope
    with np.errstate(divide="ignore", invalid="ignore"):  # floors at or above target: masked out below
        crossing = location[None, None, :] + logit((target - floor) / (1 - floor))[:, None, None] / slope[None, :, None]
    ok = np.broadcast_to(floor[:, None, None] < target, crossing.shape)
    values, w = crossing[ok], weight[ok]
    order = np.argsort(values)
    values, cdf = values[order], np.cumsum(w[order]) / w.sum()
    tail = (1 - level) / 2
    lo, median, hi = (float(np.exp(values[min(np.searchsorted(cdf, q), len(values) - 1)])) for q in (tail, 0.5, 1 - tail))

    def mass_at_most(v):
        return float(cdf[np.searchsorted(values, v, side="right") - 1]) if values[0] <= v else 0.0

    p_within, p_below = mass_at_most(x.max()), mass_at_most(x.min())
    how = ("at most the weakest rung" if p_below >= 0.5 else "within the ladder" if p_within >= 0.5
           else "beyond the strongest rung")
    return {"effect": median, "ci": [lo, hi], "level": level, "p_within": p_within, "how": how}


def design_study(effects, true_points, slopes, replicates, sims: int = 300, floor: float = 0.025, seed: int = 0,
                 target: float = TARGET_POWER) -> list[dict]:
    """How many replicates a rung the ladder needs, before any GPU time: ladders simulated from known
    curves (true 80 % point, slope, floor; `_detection_probability`), each read by `detection_curve`.
    Per (true point, slope, replicates): the interval's coverage of the true point, its median width
    (upper over lower), the median of |log(posterior median / true)|, and how often the reading
    says "within the ladder"."""
    from scipy.special import logit

    rng = np.random.default_rng(seed)
    x = np.log(np.asarray(effects, float))
    rows = []
    for true in true_points:
        for b in slopes:
            location = math.log(true) - logit((target - floor) / (1 - floor)) / b
            p = _detection_probability(x, location, b, floor)
            for r in replicates:
                covered, widths, errors, within = 0, [], [], 0
                for _ in range(sims):
                    k = rng.binomial(r, p)
                    fit = detection_curve(effects, k, [r] * len(effects), (int(rng.binomial(r, floor)), r), target)
                    assert fit is not None  # every rung has r >= 1 replicates: a curve is always fitted
                    covered += fit["ci"][0] <= true <= fit["ci"][1]
                    widths.append(fit["ci"][1] / fit["ci"][0])
                    errors.append(abs(math.log(fit["effect"] / true)))
                    within += fit["how"] != "beyond the strongest rung"
                rows.append({"true_effect": true, "slope": b, "replicates": r, "sims": sims, "coverage": covered / sims,
                             "median_width": float(np.median(widths)), "median_log_error": float(np.median(errors)),
                             "within": within / sims})
    return rows


def rung_summary(results: list[dict[str, Reading]], gains: list[float | None], n_sims: int = 2000) -> dict:
    """Detections per score over a rung's complete replicates (by the crossed test; by the fold t
    beside it), the mean estimate (longest N minus 512), the replicates' mean variance components
    of the paired table, and from them the crossed test's power at the full protocol (5 folds x 3
    seeds, `crossed_power`) at the rung's mean estimate: a model's reading beside the counts."""
    out: dict = {"replicates": len(results)}
    valid = [g for g in gains if g is not None]
    out["oracle_gain"] = float(np.mean(valid)) if valid else None
    for score in SCORES:
        readings = [r[score] for r in results]
        res = [r.fold_t for r in readings]
        mean = float(np.mean([r.estimate for r in res])) if res else math.nan
        parts = [r.components for r in readings if r.components is not None]
        comps = (CrossedComponents(*(float(np.mean([getattr(c, f) for c in parts]))
                                     for f in ("fold", "seed", "residual"))) if parts else None)
        model = (crossed_power(comps, *FULL_PROTOCOL, n_sims=n_sims, at=mean)
                 if comps is not None and comps.fold + comps.seed + comps.residual > 0 else None)
        out[score] = {"detected": detection_rate(sum(r.detected for r in readings), len(readings)),
                      "detected_fold_t": detection_rate(sum(r.verdict == "better" for r in res), len(res)),
                      "rejected": detection_rate(sum(r.verdict != "no better" for r in readings), len(readings)),
                      "mean_estimate": mean, "p": [r.crossed.p for r in readings], "p_fold_t": [r.p for r in res],
                      "estimates": [r.estimate for r in res],
                      "components": None if comps is None else dataclasses.asdict(comps),
                      "power_full_protocol": math.nan if model is None else model.power_at,
                      "detectable_full_protocol": math.nan if model is None else model.detectable}
    return out


def summarize(args) -> dict:
    """The ladder from the complete replicates under --runs (unfinished ones are counted, not used)."""
    rungs, done = [], 0
    for rung in rungs_of(args.strengths, not args.no_null):
        roots = [run_root(args, rung, k) for k in range(args.replicates)]
        complete = [r for r in roots if is_complete(r)]
        done += len(complete)
        results = [replicate_tests(r) for r in complete]
        gains = [echo_oracle_gain(r) for r in complete[:1]]  # one market's bars suffice: the size is the strength's
        rungs.append({"rung": rung.name, "strength": rung.strength, **rung_summary(results, gains)})
    planted = [r for r in rungs if r["strength"] is not None and r["replicates"] and r["oracle_gain"]]
    power = {score: effect_at_power([r["oracle_gain"] for r in planted],
                                    [r[score]["detected"]["rate"] for r in planted],
                                    [r["replicates"] for r in planted]) if planted else None
             for score in SCORES}
    null = next((r for r in rungs if r["strength"] is None and r["replicates"]), None)
    curve = {score: detection_curve([r["oracle_gain"] for r in planted], [r[score]["detected"]["k"] for r in planted],
                                    [r["replicates"] for r in planted],
                                    (null[score]["detected"]["k"], null["replicates"]) if null else (0, 0))
             if planted else None for score in SCORES}
    return {"rungs": rungs, "power_80": power, "curve_80": curve, "replicates_done": done,
            "replicates_planned": len(schedule(args)), "complete": done == len(schedule(args)),
            "lengths": args.lengths, "design": list(DESIGN) + list(args.overrides), "echo": args.echo,
            "commands": [command_line(args)]}


# ---------------------------------------------------------------------------------------------
# summary.md


_f = controls._f  # a number in `spec`, "n/a" for None or NaN


def _rate(d: dict) -> str:
    return f"{d['k']}/{d['n']} ({_f(d['ci'][0], '.2f')}-{_f(d['ci'][1], '.2f')})" if d["n"] else "n/a"


def render_markdown(s: dict) -> str:
    short, long = s["lengths"].split(",")[0], s["lengths"].split(",")[-1]
    lines = ["# What a \"no\" rules out: the strength ladder", "",
             f"The one-week echo (`synthetic:long-memory`) planted at each strength, N={long} against N={short} by "
             "the crossed test (`tsflash.stats.runs.crossed_seed_test`, folds and seeds as crossed random effects: the "
             "third edition's primary test, here on fewer folds and seeds, so a conservative reading; the fold t, "
             "`run_level_test`, beside it), one market seed per "
             f"replicate; the null rung is `synthetic:iid`. Design: {', '.join(s['design'])} on the default protocol. "
             "Detected: the verdict \"better\" at alpha 0.05 (two-sided, the longer N ahead); interval: exact binomial "
             f"95 % (scipy.stats.binomtest). Effect: the oracle's direction gain, nats per moved bar "
             f"(`lab/power_ladder.py`).{'' if s['complete'] else ' **Unfinished**'} "
             f"({s['replicates_done']} of {s['replicates_planned']} replicates).", "",
             "| rung | effect (nats / moved bar) | replicates | detected, log-loss | detected, direction score "
             "| by the fold t: log-loss, direction | mean estimate, direction "
             "| crossed test's power at 5 folds x 3 seeds (model) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in s["rungs"]:
        d = r["direction"]
        lines.append(f"| {r['rung']} | {_f(r['oracle_gain'], '.5f') if r['strength'] is not None else '0 (null)'} "
                     f"| {r['replicates']} | {_rate(r['log_loss']['detected'])} | {_rate(d['detected'])} "
                     f"| {_rate(r['log_loss']['detected_fold_t'])}, {_rate(d['detected_fold_t'])} "
                     f"| {_f(d['mean_estimate'], '+.5f')} | {_f(d['power_full_protocol'], '.2f')} |")
    lines.append("")
    for score, p in (s["power_80"] or {}).items():
        if p is None:
            continue
        name = {"log_loss": "log-loss", "direction": "direction score"}[score]
        what = (f"{_f(p['effect'], '.5f')} nats per moved bar ({p['how']})" if p["effect"] is not None
                else f"not reached ({p['how']})")
        lines.append(f"- Smallest effect found with 80 % power on the {name}: {what}.")
        if c := (s.get("curve_80") or {}).get(score):
            gains = [r["oracle_gain"] for r in s["rungs"] if r["strength"] is not None and r["oracle_gain"]]
            lines.append(f"  As one detection curve over the rungs (`detection_curve`; posterior probability "
                         f"{c['p_within']:.2f} that its 80 % point is at most the strongest rung's effect): "
                         + wording.ladder_sentence(c, max(gains), min(gains)))
    lines += ["", "## How it was run", "", "```", *s["commands"], "```", ""]
    return "\n".join(lines)


def write_summary(args) -> dict:
    summary = summarize(args)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "summary.json", summary)
    write_text(args.out / "summary.md", render_markdown(summary))
    return summary


# ---------------------------------------------------------------------------------------------
# The design study: replicates a rung, chosen before the GPU time is spent

ECHO_GAIN_PER_STRENGTH2 = 2.6  # the oracle's gain ~ 2.6 strength^2 nats per moved bar (0.0094 at 0.06: module doc)
STUDY_TRUE_POINTS = (0.01, 0.04)  # true 80 % points, nats per moved bar: between the rungs
STUDY_SLOPES = (1.5, 3.0)  # per unit of log effect: a t test's power rises 20 % -> 80 % over ~2.5x (slope ~3)
STUDY_REPLICATES = (3, 5, 10)


def write_design_study(args, sims: int = 300) -> dict:
    effects = [ECHO_GAIN_PER_STRENGTH2 * s**2 for s in args.strengths]
    rows = design_study(effects, STUDY_TRUE_POINTS, STUDY_SLOPES, STUDY_REPLICATES, sims=sims, seed=args.seed)
    plan = cost_plan(args)
    rungs = len(args.strengths) + (0 if args.no_null else 1)
    study = {"effects": effects, "rows": rows, "replicate_s": plan["replicate_s"], "replicate_worst_s": plan["replicate_worst_s"],
             "rungs": rungs, "overrides": list(args.overrides), "seed": args.seed}
    lines = ["# The strength ladder's design: replicates a rung", "",
             "Ladders simulated from known detection curves (`lab/power_ladder.py` `design_study`; floor 0.025, "
             f"the test's rate of \"better\" with nothing planted), {sims} a setting, each read as one detection curve "
             "(`detection_curve`, 95 % intervals). Rungs at effects "
             + ", ".join(f"{e:.4f}" for e in effects) + " nats per moved bar (the default strengths, gain ~ 2.6 "
             "strength^2), the null rung with as many replicates. GPU time from the calibrated H200 cost table at "
             f"the overrides {' '.join(args.overrides) or '(none)'}: {plan['replicate_s']:.0f} s a replicate "
             f"({plan['replicate_worst_s']:.0f} s at every longest-N cell's maximum steps).", "",
             "| true 80 % point | slope | replicates a rung | coverage | median width (upper / lower) "
             "| median abs log error | not \"beyond\" | H200 hours (worst) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hours = r["replicates"] * rungs * plan["replicate_s"] / 3600
        worst = r["replicates"] * rungs * plan["replicate_worst_s"] / 3600
        lines.append(f"| {r['true_effect']:g} | {r['slope']:g} | {r['replicates']} | {r['coverage']:.2f} "
                     f"| {r['median_width']:.1f}x | {r['median_log_error']:.2f} | {r['within']:.2f} | {hours:.1f} ({worst:.1f}) |")
    lines += ["", "```", shlex.join(["python", "lab/power_ladder.py", "--design-study", "--out", str(args.out),
                                     "--strengths", ",".join(f"{s:g}" for s in args.strengths), "--seed", str(args.seed),
                                     *[x for item in args.overrides for x in ("--set", item)]]), "```", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "design.json", study)
    write_text(args.out / "design.md", "\n".join(lines))
    return study


# ---------------------------------------------------------------------------------------------
# The cost plan


def cost_plan(args, usable_s: float = 1200.0) -> dict:
    """Estimated seconds of one replicate on one H200 from the calibrated cost table (cuda rows),
    as estimated and with every longest-N cell at its maximum steps, how many fit in `usable_s`, and
    the whole ladder's (`schedule`: every rung's replicates) both ways."""
    from tsflash.config import parse_overrides
    from tsflash.sweep.plan import SweepOptions, resolve_config
    from tsflash.sweep.progress import CostModel, fresh_works, prior_rates

    opts = SweepOptions(lengths=[int(n) for n in args.lengths.split(",")], preset="full", config=args.config,
                        overrides=parse_overrides([*DESIGN, replicate_seeds(0), *args.overrides]))
    cfg = resolve_config(opts, "cuda")[0]
    cost, calibration = CostModel(prior_rates("cuda")), prior_rates("cuda")
    works = fresh_works(cfg, precision=False)
    expected = sum(cost.seconds(w) for w in works)
    longest = max(cfg.lengths)
    worst = expected + sum(calibration.extra_at_max_steps(w, cost.seconds(w))
                           for w in works if w.kind == "model" and w.n == longest)
    planned = len(schedule(args))
    return {"cells": sum(w.kind == "model" for w in works), "replicate_s": expected, "replicate_worst_s": worst,
            "usable_s": usable_s, "replicates": int(usable_s // expected), "replicates_worst": int(usable_s // worst),
            "replicates_planned": planned, "ladder_s": planned * expected, "ladder_worst_s": planned * worst}


LADDER_SCRIPT = "lab/power_ladder.py"


def ladder_command(base: tuple[str, ...], *flags: str) -> str:
    """This script with `flags`, at a plan's shared overrides (the arms' training rule)."""
    return shlex.join(["python", LADDER_SCRIPT, *flags, *[w for item in base for w in ("--set", item)]])


def ladder_lengths(arm: dict) -> str:
    """The ladder's --lengths: the shortest and the longest N of a plan's first arm."""
    return f"{min(arm['lengths'])},{max(arm['lengths'])}"


def ladder_cost(base: tuple[str, ...], lengths: str) -> dict:
    """The ladder's GPU seconds (every rung's replicates, expected and with every longest-N cell at its
    maximum steps) and its replicates, by `cost_plan` at a plan's overrides."""
    cost = cost_plan(parse_args(["--lengths", lengths, *[w for i in base for w in ("--set", i)]]))
    return {"gpu_seconds": round(cost["ladder_s"]), "gpu_seconds_worst": round(cost["ladder_worst_s"]),
            "replicates": cost["replicates_planned"]}


def plan_entry(base: tuple[str, ...], arm: dict) -> dict:
    """The ladder's entry of a plan (`tsflash.sweep.preregister.LadderEntry`): N=512 against the plan's
    longest N, at its shared overrides, resumable in slices like the arms; its design (rungs,
    replicates) is this script's default, chosen by its design study."""
    lengths = ladder_lengths(arm)
    return {"command": ladder_command(base, "--device", "cuda", "--lengths", lengths, "--time-budget", "400"),
            "cost": ladder_command(base, "--plan")} | ladder_cost(base, lengths)


def command_line(args) -> str:
    parts = ["python", LADDER_SCRIPT, "--runs", str(args.runs), "--lengths", args.lengths,
             "--strengths", ",".join(f"{s:g}" for s in args.strengths), "--replicates", str(args.replicates),
             "--seed", str(args.seed), "--device", args.device, "--preset", args.preset]
    parts += ["--echo", args.echo] if args.echo else []
    parts += [x for item in args.overrides for x in ("--set", item)]
    return shlex.join(parts)


def _strengths(text: str) -> list[float]:
    values = [float(x) for x in text.split(",") if x.strip()]
    if not values or any(not 0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"strengths must be in (0, 1), comma-separated, got {text!r}")
    return sorted(values)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's arguments (`main`'s; `ladder_cost` prices a plan's ladder with them)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=Path("runs/power-ladder"), help="folder of the replicates' run folders")
    ap.add_argument("--out", type=Path, default=None, help="where summary.md and .json go (default: --runs)")
    ap.add_argument("--strengths", type=_strengths, default=_strengths(DEFAULT_STRENGTHS),
                    help=f"echo strengths of the rungs (default {DEFAULT_STRENGTHS})")
    ap.add_argument("--echo", default="", metavar="KEY=VALUE,...", help="other echo parameters, e.g. lag=48 (toy)")
    ap.add_argument("--no-null", action="store_true", help="leave out the iid null rung")
    ap.add_argument("--replicates", type=int, default=3, help="replicates per rung (default 3: the design study)")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS, help=f"the short and the long N (default {DEFAULT_LENGTHS})")
    ap.add_argument("--seed", type=int, default=FIRST_MARKET_SEED,
                    help=f"market seed of replicate 0 (replicate k: seed + k; default {FIRST_MARKET_SEED})")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:K; all or cuda:0,cuda:1: one sweep worker each")
    ap.add_argument("--preset", default="full")
    ap.add_argument("--config", default="default")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override (repeatable)")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds after which no new cell starts")
    ap.add_argument("--summary-only", action="store_true", help="only (re)write the summary")
    ap.add_argument("--plan", action="store_true", help="print the GPU cost plan and exit")
    ap.add_argument("--design-study", action="store_true",
                    help="simulate ladders from known detection curves (replicates a rung against the interval "
                         "on the 80 %% point), write design.md/.json into --out and exit; no training")
    args = ap.parse_args(argv)
    if len(args.lengths.split(",")) != 2:
        ap.error(f"--lengths takes the short and the long N, got {args.lengths!r}")
    args.out = args.out or args.runs
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.plan:
        print(json.dumps(cost_plan(args), indent=1))
        return 0
    if args.design_study:
        write_design_study(args)
        log.info("design study: %s", args.out / "design.md")
        return 0
    done = True if args.summary_only else run_ladder(args)
    summary = write_summary(args)
    log.info("summary: %s (%d of %d replicates)", args.out / "summary.md", summary["replicates_done"],
             summary["replicates_planned"])
    print(json.dumps({"complete": done and summary["complete"], "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
