"""The selection gates and a sweep's selection: `Gate` (the highest-Sharpe candidate's DSR >= min_dsr
and the candidate set's PBO <= max_pbo) with its `Verdict` of numbers, flags and `Reason` codes
(the report writes the sentences), and `select_run`, which reads the trial ledger
(`complete_trials`), aligns the candidates' daily returns on their common days, measures every
candidate's DSR against the one ledger and runs the gates: the one place where a run's DSR and
PBO are computed, with what a "no" rules out (`Deflation`: effective trials and power). The DSR's
trial count also reads the ledger across runs (`TrialLedger`, the package's trials.toml: every
configuration scored on the same test bars), and `pbo_informative` says when PBO's null
distribution for few candidates leaves a PBO uninformative.
"""

from __future__ import annotations

import enum
import logging
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from tsflash.stats._inputs import SelectionInputError, returns_array
from tsflash.stats.pbo import CSCV_BLOCKS, MAX_PBO, EffectiveTrials, PBOResult, effective_trials, pbo_cscv
from tsflash.stats.sharpe import (
    DSR_CONFIDENCE,
    PERIODS_PER_YEAR,
    DSRResult,
    annualize_sharpe,
    deflated_sharpe,
    expected_max_sharpe,
    min_passing_sharpe,
    min_track_record_length,
    psr,
    sharpe,
    skew_kurtosis,
)

log = logging.getLogger(__name__)

TRIALS_FILE = Path(__file__).with_name("trials.toml")  # the trial ledger across runs (package data)
POWER = 0.8  # the power of the true Sharpe ratio the report gives beside the pass line
PBO_NULL_RANGE = (0.05, 0.95)  # a PBO inside these quantiles of its null distribution is not informative


class Reason(enum.StrEnum):
    """Why a verdict came out as it did; the report turns each code into a sentence."""

    DSR_MET = "dsr_met"  # the selected candidate's DSR >= min_dsr
    DSR_BELOW_MIN = "dsr_below_min"
    PBO_MET = "pbo_met"  # the candidate set's PBO <= max_pbo
    PBO_ABOVE_MAX = "pbo_above_max"
    PASSED = "passed"  # both gates
    NOT_PASSED = "not_passed"
    NO_CANDIDATE = "no_candidate"  # no trial finished
    TOO_FEW_CANDIDATES = "too_few_candidates"  # < 2 with a Sharpe ratio: PBO cannot rank them
    GATE_ERROR = "gate_error"  # the inputs were refused; the message is in Verdict.error


@dataclass
class Verdict:
    """Outcome of `Gate.evaluate` (or of `select_run`): numbers, flags and reason codes only.

    "No candidate passes" is a normal verdict. Sharpe ratios are per period (per day for daily
    returns). A verdict reached without the gates (too few candidates, refused inputs) has
    passes_* False, `pbo` None and no `pbo_result`.
    """

    selected: str | None  # candidate with the highest per-period Sharpe ratio (first on ties)
    sharpe: float  # its per-period Sharpe ratio (NaN when undefined)
    dsr: float  # its Deflated Sharpe Ratio (NaN when undefined)
    sr0: float  # the best-of-n_trials noise threshold its DSR is measured against
    pbo: float | None
    n_trials: int  # trials counted by the DSR (the whole search)
    passes_dsr: bool
    passes_pbo: bool
    passed: bool  # passes_dsr and passes_pbo
    reasons: tuple[Reason, ...]  # one code per gate, then the overall outcome
    min_dsr: float
    max_pbo: float
    table: list[dict] = field(default_factory=list)  # one row per candidate, in the order given
    dsr_result: DSRResult | None = field(default=None, repr=False)
    pbo_result: PBOResult | None = field(default=None, repr=False)
    error: str | None = None  # the refused input's message, with Reason.GATE_ERROR

    def to_dict(self) -> dict:
        out = {
            f: getattr(self, f)
            for f in (
                "selected",
                "sharpe",
                "dsr",
                "sr0",
                "pbo",
                "n_trials",
                "passes_dsr",
                "passes_pbo",
                "passed",
                "min_dsr",
                "max_pbo",
                "error",
            )
        }
        out["reasons"] = [str(r) for r in self.reasons]
        out["table"] = [dict(row) for row in self.table]
        out["dsr_detail"] = self.dsr_result.to_dict() if self.dsr_result else None
        out["pbo_detail"] = self.pbo_result.to_dict() if self.pbo_result else None
        return out


def _candidate_row(name: str, x: np.ndarray, d: DSRResult, periods_per_year: float) -> dict:
    """Daily statistics of one candidate (per-period Sharpe ratios; `d` its DSR against the ledger)."""
    return {
        "name": name,
        "n_periods": int(len(x)),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)),
        "total": float(np.prod(1 + x) - 1),  # compounded over all periods
        "sharpe": d.sr,
        "sharpe_annual": annualize_sharpe(d.sr, periods_per_year),
        "skew": d.skew,
        "kurtosis": d.kurtosis,
        "psr": psr(d.sr, 0.0, t=len(x), skew=d.skew, kurtosis=d.kurtosis),
        "dsr": d.dsr,
        "sr0": d.sr0,
        "selected": False,
    }


@dataclass
class Gate:
    """Selection gate: the highest-Sharpe candidate must have DSR >= min_dsr, and the candidate set
    PBO <= max_pbo.

    Candidates are aligned per-period (daily) net returns. The DSR's trial ledger is the whole
    search: `n_trials` is the number of trials actually run (it may exceed the number of
    candidates evaluated here), and V[SR] is the sample variance (ddof = 1) of the trials'
    per-period Sharpe ratios, taken from `trial_sharpes` when given, else from the candidates.
    Every candidate's DSR is measured against that same ledger. PBO uses CSCV over the
    candidates' return matrix with `n_blocks` blocks. `periods_per_year` only annualises the
    table's Sharpe ratios (365: BTC trades daily).
    """

    min_dsr: float = DSR_CONFIDENCE
    max_pbo: float = MAX_PBO
    n_blocks: int = CSCV_BLOCKS
    periods_per_year: float = PERIODS_PER_YEAR

    @classmethod
    def from_config(cls, selection) -> Gate:
        """Gate from `tsflash.config.SelectionConfig` (min_dsr, max_pbo, cscv_blocks)."""
        return cls(min_dsr=selection.min_dsr, max_pbo=selection.max_pbo, n_blocks=selection.cscv_blocks)

    def _matrix(self, candidates: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
        if not (0.0 <= self.min_dsr <= 1.0 and 0.0 <= self.max_pbo <= 1.0):
            raise SelectionInputError(
                f"Gate thresholds must be probabilities in [0, 1], got min_dsr={self.min_dsr}, max_pbo={self.max_pbo}"
            )
        names = list(candidates)
        if len(names) < 2:
            raise SelectionInputError(
                f"the gate needs at least 2 candidates (PBO ranks them against each other), got {len(names)}: {names}"
            )
        lengths = {n: (len(candidates[n]) if np.ndim(candidates[n]) == 1 else None) for n in names}
        bad_dim = [n for n, v in lengths.items() if v is None]
        if bad_dim:
            raise SelectionInputError(f"every candidate must be a 1-D returns array, got other shapes for {bad_dim}")
        if len(set(lengths.values())) != 1:
            raise SelectionInputError(f"candidates must be aligned (same number of periods), got lengths {lengths}")
        cols = [returns_array(candidates[name], name=f"candidate {name!r}") for name in names]
        return names, np.stack(cols, axis=1)  # (T, K)

    def evaluate(
        self,
        candidates: Mapping[str, np.ndarray],
        *,
        n_trials: int | None = None,
        trial_sharpes=None,
    ) -> Verdict:
        """Select the highest-Sharpe candidate and test it; see the class docstring.

        candidates : {name: per-period returns of shape (T,)}, all the same length T and aligned.
        n_trials : trials actually run; default the number of trial Sharpe ratios (>= candidates).
        trial_sharpes : per-period Sharpe ratios of all trials run; default the candidates'.
        """
        names, mat = self._matrix(candidates)
        srs = np.empty(len(names))
        for j, name in enumerate(names):
            try:
                srs[j] = sharpe(mat[:, j])
            except SelectionInputError as e:
                raise SelectionInputError(f"candidate {name!r}: {e}") from None
        if n_trials is not None and n_trials < len(names):
            raise SelectionInputError(
                f"n_trials counts every trial run and must be >= the number of candidates, "
                f"got n_trials={n_trials} < {len(names)}"
            )
        ledger = srs if trial_sharpes is None else trial_sharpes
        dsrs = [deflated_sharpe(mat[:, j], n_trials=n_trials, trial_sharpes=ledger) for j in range(len(names))]
        table = [_candidate_row(name, mat[:, j], dsrs[j], self.periods_per_year) for j, name in enumerate(names)]
        best = int(np.argmax(srs))  # first candidate on ties
        table[best]["selected"] = True
        d, p = dsrs[best], pbo_cscv(mat, n_blocks=self.n_blocks)
        passes_dsr, passes_pbo = bool(d.dsr >= self.min_dsr), bool(p.pbo <= self.max_pbo)
        passed = passes_dsr and passes_pbo
        reasons = (
            Reason.DSR_MET if passes_dsr else Reason.DSR_BELOW_MIN,
            Reason.PBO_MET if passes_pbo else Reason.PBO_ABOVE_MAX,
            Reason.PASSED if passed else Reason.NOT_PASSED,
        )
        log.info("gate verdict: %s, DSR %.3f, PBO %.3f: %s", names[best], d.dsr, p.pbo, ", ".join(reasons))
        return Verdict(
            selected=names[best],
            sharpe=d.sr,
            dsr=d.dsr,
            sr0=d.sr0,
            pbo=p.pbo,
            n_trials=d.n_trials,
            passes_dsr=passes_dsr,
            passes_pbo=passes_pbo,
            passed=passed,
            reasons=reasons,
            min_dsr=self.min_dsr,
            max_pbo=self.max_pbo,
            table=table,
            dsr_result=d,
            pbo_result=p,
        )


# --------------------------------------------------------------------------------------------
# a run's selection: the ledger, the candidates' daily returns, the gate


def complete_trials(trials) -> list[Mapping]:
    """The ledger's COMPLETE trials with a value, one per configuration slot.

    Two workers of a shared study can both run a slot (they enqueue it before either sees the
    other's); a repeat is not a new trial, so only its first completion counts.
    """
    out, seen = [], set()
    for t in trials:
        slot = t.get("slot") or t.get("key") or t.get("number")
        if t.get("state") == "COMPLETE" and t.get("value") is not None and slot not in seen:
            seen.add(slot)
            out.append(t)
    return out


@dataclass
class RunSelection:
    """Everything `select_run` decided, as numbers: the DSR/PBO of a run are computed here only."""

    candidates: list[dict]  # per candidate (in the order given): key and `_candidate_row` fields
    verdict: Verdict
    n_trials: int  # DSR trial count: complete trials in the ledger (at least the candidates)
    sr_variance: float | None  # sample variance (ddof 1) of the ledger's trial Sharpe ratios
    days: np.ndarray  # datetime64[D] (T,): the days common to every candidate
    n_blocks: int  # CSCV blocks configured
    n_blocks_used: int | None  # fewer when the common days are fewer; None when the gates were not tried
    dropped: list[str]  # candidates left out of the gates (no daily Sharpe ratio)
    n_profitable: int = 0  # candidates whose mean daily net return is > 0
    deflation: Deflation | None = None  # effective trials, DSR with them, power (when the gates ran)
    trial_count: TrialCount | None = None  # where n_trials came from


@dataclass
class Deflation:
    """What the DSR gate rules out, and the DSR with the effective number of trials.

    The gated candidates' daily net returns give `effective` (see `effective_trials`); scaled to
    the whole ledger (n_trials / candidates; trials without a series are taken as correlated as
    the candidates) and rounded to an integer >= 1, it is `n_trials_effective`, the count of the
    selected candidate's second DSR (same V[SR]). The gate itself uses the raw count. Power: the
    smallest per-period Sharpe ratio that passes the DSR gate over these `t` periods with normal
    returns (`min_passing_sharpe`), with the raw and the effective count; `min_trl`: periods the
    selected candidate's record needs for PSR(SR0) >= min_dsr (inf when its SR <= SR0).

    A pass line is the Sharpe ratio an *observed* one must cross: a candidate whose true Sharpe
    ratio sits on it passes about half the time. `power_sharpe` is the true Sharpe ratio that
    passes with probability POWER (`true_sharpe_for_power`). `min_sharpe_null` is the pass line
    with SR0 from the null variance of a Sharpe ratio over T periods, 1/T, instead of the trials'
    measured variance: what the count alone implies, whatever the trials' spread.
    """

    effective: EffectiveTrials
    n_trials_effective: int
    dsr_effective: DSRResult
    t: int
    confidence: float
    min_sharpe: float | None  # per period, raw count; None when min_dsr <= 0.5 (no finite bound)
    min_sharpe_effective: float | None
    min_trl: float
    min_sharpe_null: float | None = None  # the pass line with the null variance of the Sharpe ratio, 1/T
    power_sharpe: float | None = None  # the true Sharpe ratio that crosses min_sharpe with probability POWER
    power_sharpe_null: float | None = None  # the same for min_sharpe_null


def _min_passing(t: int, sr0: float, confidence: float) -> float | None:
    try:
        return min_passing_sharpe(t, sr0, confidence=confidence)
    except SelectionInputError:
        return None


def true_sharpe_for_power(t: int, pass_line: float | None, power: float = POWER) -> float | None:
    """The true per-period Sharpe ratio whose estimate over `t` normal returns crosses `pass_line`
    with probability `power`: SR = pass_line + z_power sqrt((1 + SR^2 / 2) / (t - 1)), the
    estimate's asymptotic variance for normal returns (Lo 2002), solved by fixed point."""
    if pass_line is None or not math.isfinite(pass_line) or t < 2:
        return None
    z, sr = NormalDist().inv_cdf(power), pass_line
    for _ in range(50):  # a contraction: the slope of the right side is about z SR / (2 (t - 1))
        sr = pass_line + z * math.sqrt((1 + sr * sr / 2) / (t - 1))
    return sr


def deflation(mat: np.ndarray, selected: int, v: Verdict) -> Deflation:
    """`Deflation` of a gate verdict `v` over the gated candidates' (T, K) returns `mat`."""
    eff = effective_trials(mat)
    n_eff = max(1, round(eff.n_effective * v.n_trials / mat.shape[1]))
    x = mat[:, selected]
    sr_variance = None
    if n_eff > 1:
        assert v.dsr_result is not None  # a gated verdict (Gate.evaluate) carries it
        sr_variance = v.dsr_result.sr_variance
    d_eff = deflated_sharpe(x, n_trials=n_eff, sr_variance=sr_variance)
    t = mat.shape[0]
    trl = min_track_record_length(x, v.sr0, confidence=v.min_dsr) if v.sharpe > v.sr0 and v.min_dsr > 0 else math.inf
    line = _min_passing(t, v.sr0, v.min_dsr)
    sr0_null = expected_max_sharpe(v.n_trials, 1.0 / t) if v.n_trials > 1 else 0.0
    line_null = _min_passing(t, sr0_null, v.min_dsr)
    return Deflation(
        effective=eff,
        n_trials_effective=n_eff,
        dsr_effective=d_eff,
        t=t,
        confidence=v.min_dsr,
        min_sharpe=line,
        min_sharpe_effective=_min_passing(t, d_eff.sr0, v.min_dsr),
        min_trl=trl,
        min_sharpe_null=line_null,
        power_sharpe=true_sharpe_for_power(t, line),
        power_sharpe_null=true_sharpe_for_power(t, line_null),
    )


# --------------------------------------------------------------------------------------------
# the trial ledger across runs


@dataclass(frozen=True)
class TrialCount:
    """The DSR's trial count and where it came from: a period of the ledger across runs
    (`period` its key, `entries` one line per trial counted) or the run's own study."""

    n_trials: int
    source: str
    period: str | None = None
    entries: tuple[str, ...] = ()
    not_counted: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrialLedger:
    """The trial ledger across runs (trials.toml): per test period (the data's fingerprint and the
    common test days), every configuration scored on those bars."""

    periods: tuple[dict, ...]
    path: Path

    @classmethod
    def read(cls, path: Path | str = TRIALS_FILE) -> TrialLedger:
        path = Path(path)
        try:
            periods = tomllib.loads(path.read_text())["period"]
        except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
            raise SelectionInputError(f"the trial ledger {path} cannot be read: {exc}") from None
        return cls(tuple(periods), path)

    def count_for(
        self, fingerprint: str | None, days: np.ndarray, config_hash: str | None = None, own: int = 0
    ) -> TrialCount | None:
        """The count of the period whose fingerprint, first and last day and number of days match
        the run's common test days; None when none does. A run whose config hash (run.json's
        `config_hash`) the period lists nowhere, as a trial or as not counted, scored its `own`
        configurations on these bars too: they are added, so a run left out of the ledger is never
        counted against fewer trials than it makes."""
        if fingerprint is None or not len(days):
            return None
        first, last = str(np.datetime64(days[0], "D")), str(np.datetime64(days[-1], "D"))
        for p in self.periods:
            if (p["fingerprint"], str(p["first_day"]), str(p["last_day"]), int(p["n_days"])) == (
                fingerprint,
                first,
                last,
                len(days),
            ):
                trials, skipped = p.get("trial", []), p.get("not_counted", [])
                entries = tuple(f"{t['run']} {t['config']} ({t['note']})" for t in trials)
                source, count = f'the trial ledger {self.path.name}, period "{p["key"]}"', len(trials)
                if (
                    config_hash is not None
                    and own
                    and config_hash not in {t.get("config_hash") for t in (*trials, *skipped)}
                ):
                    entries += (
                        f"this run's {own} configuration{'s' if own != 1 else ''} (config hash "
                        f"{config_hash}, not in the ledger)",
                    )
                    source, count = f"{source} and this run, which it does not list", count + own
                return TrialCount(count, source, p["key"], entries, tuple(f"{t['run']} ({t['note']})" for t in skipped))
        return None


def pbo_informative(null_values: np.ndarray, observed: float) -> bool:
    """Does a PBO say more than noise would: is `observed` outside the central PBO_NULL_RANGE of
    PBO's null distribution for the same candidate count, days and blocks (`null_values`, e.g.
    `tsflash.stats.runs.pbo_null(...).values`)? With few candidates the winner's out-of-sample rank
    takes few values and PBO on noise spreads over most of [0, 1] (K = 3, T = 911: 5 % to 95 %
    from 0.13 to 0.99), so a PBO inside that range cannot tell overfitting from noise."""
    lo, hi = np.quantile(np.asarray(null_values, dtype=float), PBO_NULL_RANGE)
    return not (lo <= observed <= hi)


def _aligned(series: Mapping[str, tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(days (T,), matrix (T, K)) of the series' returns on the days common to all of them."""
    common: Any = None  # the first series' days, then the days common to all so far
    for days, _ in series.values():
        common = days if common is None else np.intersect1d(common, days)
    cols = [np.asarray(r, dtype=np.float64)[np.isin(d, common)] for d, r in series.values()]
    return common, np.stack(cols, axis=1)


def _undefined_row(key: str, x: np.ndarray, error: str | None) -> dict:
    nan = math.nan
    return {
        "key": key,
        "n_periods": int(len(x)),
        "mean": float(np.mean(x)) if len(x) else nan,
        "total": float(np.prod(1 + x) - 1) if len(x) else nan,
        "sharpe": nan,
        "sharpe_annual": nan,
        "psr": nan,
        "dsr": nan,
        "sr0": nan,
        "error": error,
    }


def _sharpe_error(x: np.ndarray) -> str | None:
    """Why the series has no daily Sharpe ratio (constant, too short), or None when it has one."""
    try:
        sharpe(x)
        skew_kurtosis(x)
    except SelectionInputError as exc:
        return str(exc)
    return None


def _row_without_gate(key: str, x: np.ndarray, n_trials: int, ledger, periods_per_year: float) -> dict:
    """A candidate's row where the gate does not rank it: its DSR against the ledger when the
    ledger has a spread, else PSR(0) (one trial); NaN statistics with the reason when undefined."""
    try:
        if n_trials >= 2 and ledger is not None and np.var(ledger, ddof=1) > 0:
            d = deflated_sharpe(x, n_trials=n_trials, trial_sharpes=ledger)
        else:
            d = deflated_sharpe(x, n_trials=1)
    except SelectionInputError as exc:
        return _undefined_row(key, x, str(exc))
    return _candidate_row(key, x, d, periods_per_year) | {"key": key}


def _no_gate(
    reason: Reason,
    rows: list[dict],
    selected: str | None,
    n_trials: int,
    min_dsr: float,
    max_pbo: float,
    error: str | None = None,
) -> Verdict:
    row = next((r for r in rows if r["key"] == selected), {})
    return Verdict(
        selected=selected,
        sharpe=row.get("sharpe", math.nan),
        dsr=row.get("dsr", math.nan),
        sr0=row.get("sr0", math.nan),
        pbo=None,
        n_trials=n_trials,
        passes_dsr=False,
        passes_pbo=False,
        passed=False,
        reasons=(reason, Reason.NOT_PASSED),
        min_dsr=min_dsr,
        max_pbo=max_pbo,
        error=error,
    )


def select_run(
    series: Mapping[str, tuple],
    trials,
    *,
    min_dsr: float = DSR_CONFIDENCE,
    max_pbo: float = MAX_PBO,
    n_blocks: int = CSCV_BLOCKS,
    periods_per_year: float = PERIODS_PER_YEAR,
    ledger: TrialLedger | None = None,
    fingerprint: str | None = None,
    config_hash: str | None = None,
) -> RunSelection:  # long: one decision, three returns that name the run's fields
    """The selection of one sweep: the candidates' daily statistics, the DSR against the trial
    ledger and the gates (DSR of the highest-Sharpe candidate, PBO of the set).

    series : {key: (days datetime64[D] (D,), daily net returns (D,))}, in the order to report;
        aligned here on their common days.
    trials : the ledger's trials (dicts with state, value, slot/key); `complete_trials` counts
        them. n_trials = max(complete trials, candidates); V[SR] from the trials' values.
    A candidate whose daily Sharpe ratio is undefined (constant or too short series) is left out
    of the gates (`dropped`); with fewer than 2 left, or inputs the gate refuses, the verdict is
    reached without the gates. CSCV uses at most as many blocks as there are (even) common days.
    ledger, fingerprint : the trial ledger across runs and the data's fingerprint; where a period
        of it matches the common days, n_trials is at least its count (`out.trial_count` says
        which); V[SR] stays the study's trials' variance.
    config_hash : the run's (run.json); a run the ledger's period does not list adds its own trials
        to the period's (`TrialLedger.count_for`).
    """
    complete = complete_trials(trials)
    keys = list(series)
    n_trials = max(len(complete), len(keys))
    ledger_values = np.array([t["value"] for t in complete], dtype=float)
    # else None: the study's ledger is missing, the candidates stand in
    values = ledger_values if len(ledger_values) >= max(2, len(keys)) else None
    sr_var = float(np.var(values, ddof=1)) if values is not None else None
    trial_count = TrialCount(n_trials, "the run's own study (complete trials in ledger.json)")

    # the RunSelection of every return below, from the names each path has set by then
    def selection(rows: list[dict], verdict: Verdict, dfl: Deflation | None = None) -> RunSelection:
        return RunSelection(
            candidates=rows,
            verdict=verdict,
            n_trials=n_trials,
            sr_variance=sr_var,
            days=days,
            n_blocks=int(n_blocks),
            n_blocks_used=n_used,
            dropped=dropped,
            n_profitable=n_profitable,
            deflation=dfl,
            trial_count=trial_count,
        )

    if not keys:
        days, n_used, dropped, n_profitable = np.empty(0, "datetime64[D]"), None, [], 0
        return selection([], _no_gate(Reason.NO_CANDIDATE, [], None, n_trials, min_dsr, max_pbo))
    days, mat = _aligned(series)
    across = ledger.count_for(fingerprint, days, config_hash, n_trials) if ledger is not None else None
    if across is not None and across.n_trials >= n_trials:
        n_trials, trial_count = across.n_trials, across
    errors = {k: _sharpe_error(mat[:, j]) for j, k in enumerate(keys)}
    usable = [k for k in keys if errors[k] is None]
    dropped = [k for k in keys if errors[k] is not None]
    n_profitable = int(np.sum(mat.mean(axis=0) > 0)) if len(mat) else 0
    reason, error, n_used = Reason.TOO_FEW_CANDIDATES, None, None

    if len(usable) >= 2:
        t = mat.shape[0]
        n_used = min(int(n_blocks), t - t % 2)
        gate = Gate(min_dsr=min_dsr, max_pbo=max_pbo, n_blocks=n_used, periods_per_year=periods_per_year)
        try:
            v = gate.evaluate({k: mat[:, keys.index(k)] for k in usable}, n_trials=n_trials, trial_sharpes=values)
        except SelectionInputError as exc:
            reason, error = Reason.GATE_ERROR, str(exc)
        else:  # the gate's table: every candidate's statistics against the one ledger
            by_name = {r["name"]: r | {"key": r["name"]} for r in v.table}
            rows = [by_name.get(k) or _undefined_row(k, mat[:, j], errors[k]) for j, k in enumerate(keys)]
            gated = mat[:, [keys.index(k) for k in usable]]
            assert v.selected is not None  # Gate.evaluate always selects one
            return selection(rows, v, deflation(gated, usable.index(v.selected), v))
    rows = [_row_without_gate(k, mat[:, j], n_trials, values, periods_per_year) for j, k in enumerate(keys)]
    sharpes = {r["key"]: r["sharpe"] for r in rows if r["key"] in usable}
    best = max(usable, key=sharpes.__getitem__) if usable else keys[0]  # every key has a row
    verdict = _no_gate(reason, rows, best, n_trials, min_dsr, max_pbo, error=error)
    return selection(rows, verdict)
