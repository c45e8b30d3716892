"""Selection statistics for a model-selection search: Sharpe, PSR, DSR, MinTRL, PBO (CSCV), gates.

Sweeping the context length N (and any searched hyperparameter) is a search over many noisy
backtests; the best of them has an inflated Sharpe ratio. This module measures how much of the
winner survives that search:

- `psr`: Probabilistic Sharpe Ratio, P[true SR > SR*] (Bailey & Lopez de Prado, 2012, "The Sharpe
  Ratio Efficient Frontier").
- `expected_max_sharpe` and `deflated_sharpe`: the Deflated Sharpe Ratio, PSR against the Sharpe
  ratio the best of N skill-less trials is expected to reach (Bailey & Lopez de Prado, 2014, "The
  Deflated Sharpe Ratio").
- `min_track_record_length`: periods needed before PSR(SR*) reaches a confidence level (2012).
- `pbo_cscv`: Probability of Backtest Overfitting by Combinatorially Symmetric Cross-Validation
  (Bailey, Borwein, Lopez de Prado & Zhu, 2017, "The Probability of Backtest Overfitting").
- `Gate`: thresholds on DSR and PBO; its `Verdict` holds numbers, flags and `Reason` codes (the
  report writes the sentences).
- `select_run`: one sweep's selection (trial ledger, candidates aligned on common days, every
  candidate's DSR, the gates): the one place where a run's DSR and PBO are computed.
- `daily_returns` / `daily_series`: per-bar returns -> compounded UTC-daily returns, the
  frequency the statistics are applied to (see its docstring for why).

Conventions (each function's docstring repeats the ones it uses; tests pin them):

- Sharpe ratios inside every formula are PER PERIOD (per day for daily returns), never
  annualised. `annualize_sharpe` / `deannualize_sharpe` convert with an explicit periods-per-year.
- Kurtosis in the PSR/DSR/MinTRL variance term is RAW kurtosis (normal = 3). An excess-kurtosis
  input (normal = 0) is accepted only through the `excess_kurtosis=` keyword and converted as
  raw = excess + 3. A raw kurtosis below 1 + skew**2 is impossible and raises, which catches the
  usual mistake of passing excess kurtosis where raw is meant.
- From returns: SR = mean / std with std using `ddof` (default 1); skewness = m3 / m2**1.5 and raw
  kurtosis = m4 / m2**2 with the 1/T central moments m_k (scipy.stats.skew(bias=True),
  scipy.stats.kurtosis(fisher=False, bias=True)). T = number of returns.
- The trial ledger's variance of Sharpe ratios uses ddof = 1 (sample variance over the trials).
- No risk-free rate is subtracted: the returns are strategy returns of a self-financing position.
- Bad input raises `SelectionInputError`, which is both a `tsflash.errors.UserError` (the CLI prints
  it) and a `ValueError`; the message names the rule and the values.

Only numpy and the standard library's `statistics.NormalDist` are used.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from tsflash.errors import UserError
from tsflash.intervals import US_PER_DAY

log = logging.getLogger(__name__)

__all__ = [
    "EULER_GAMMA",
    "SelectionInputError",
    "sharpe",
    "annualize_sharpe",
    "deannualize_sharpe",
    "skew_kurtosis",
    "psr",
    "expected_max_sharpe",
    "DSRResult",
    "deflated_sharpe",
    "min_track_record_length",
    "min_passing_sharpe",
    "DMResult",
    "diebold_mariano",
    "newey_west_variance",
    "holm",
    "EffectiveTrials",
    "effective_trials",
    "PBOResult",
    "pbo_cscv",
    "daily_returns",
    "Reason",
    "Gate",
    "Verdict",
    "complete_trials",
    "RunSelection",
    "Deflation",
    "deflation",
    "select_run",
]

EULER_GAMMA = 0.5772156649015329  # Euler-Mascheroni constant
_NORMAL = NormalDist()
# A column whose variance inside one CSCV half is this small relative to its whole-sample variance
# is constant there: its Sharpe ratio would be rounding noise divided by rounding noise.
_REL_VAR_FLOOR = 1e-12
# A series is constant when its std is at this level relative to its largest |value|: the mean of
# a constant series is not exact in floating point, so its computed std is ~1e-18, not 0.
_REL_STD_FLOOR = 1e-12
# Size of one (chunk, K) float64 CSCV array; six live at once, so a chunk stays in the CPU cache.
_CSCV_CHUNK_BYTES = 2**18  # measured: 256 KiB beat 1-16 MiB by 2x on a 2-core CPU


class SelectionInputError(UserError, ValueError):
    """Bad input to a selection statistic; the message names the rule and the offending values."""


# --------------------------------------------------------------------------------------------
# validation helpers


def _returns_array(returns, name: str = "returns", ndim: int = 1, min_len: int = 2) -> np.ndarray:
    x = np.asarray(returns, dtype=np.float64)
    if x.ndim != ndim:
        raise SelectionInputError(f"{name} must be a {ndim}-D array, got shape {x.shape}")
    if x.shape[0] < min_len:
        raise SelectionInputError(f"{name} needs at least {min_len} periods, got {x.shape[0]}")
    bad = ~np.isfinite(x)
    if bad.any():
        where = np.argwhere(bad)[0].tolist()
        raise SelectionInputError(
            f"{name} must be finite (no NaN or inf), got {int(bad.sum())} non-finite value(s), "
            f"first at index {where[0] if ndim == 1 else tuple(where)}"
        )
    return x


def _check_ddof(ddof, t: int) -> int:
    if ddof not in (0, 1):
        raise SelectionInputError(f"ddof must be 0 or 1, got {ddof}")
    if t - ddof < 1:
        raise SelectionInputError(f"the standard deviation needs more periods than ddof={ddof}, got {t}")
    return int(ddof)


def _check_kurtosis(skew: float, kurtosis: float) -> None:
    # Raw kurtosis of any distribution is >= 1 + skew**2 (equality: two-point distributions).
    if not (math.isfinite(skew) and math.isfinite(kurtosis)):
        raise SelectionInputError(f"skew and kurtosis must be finite, got skew={skew}, kurtosis={kurtosis}")
    if kurtosis < 1.0 + skew * skew - 1e-9:
        raise SelectionInputError(
            f"raw kurtosis must be >= 1 + skew**2 (normal = 3; pass an excess kurtosis as "
            f"excess_kurtosis=), got kurtosis={kurtosis} with skew={skew}"
        )


# --------------------------------------------------------------------------------------------
# Sharpe ratio and moments


def sharpe(returns, ddof: int = 1) -> float | np.ndarray:
    """Per-period Sharpe ratio mean / std (no risk-free rate, not annualised).

    Parameters
    ----------
    returns : array of shape (T,) or (T, K)
        Per-period returns; a 2-D array gives one Sharpe ratio per column.
    ddof : 0 or 1, default 1
        Degrees of freedom of the standard deviation (1 = sample standard deviation).

    Returns
    -------
    float for 1-D input, ndarray of shape (K,) for 2-D input.

    Raises `SelectionInputError` on NaN/inf, fewer than two periods, or zero variance (the Sharpe
    ratio of a constant series is undefined), naming the offending column(s).

    >>> round(sharpe([0.01, -0.01, 0.02, 0.0]), 6)
    0.387298
    """
    x = np.asarray(returns, dtype=np.float64)
    x = _returns_array(x, ndim=x.ndim if x.ndim in (1, 2) else 1)
    ddof = _check_ddof(ddof, x.shape[0])
    sd = x.std(axis=0, ddof=ddof)
    zero = sd <= _REL_STD_FLOOR * np.abs(x).max(axis=0)
    if np.any(zero):
        which = "" if x.ndim == 1 else f" in column(s) {np.flatnonzero(zero).tolist()}"
        raise SelectionInputError(
            f"the Sharpe ratio needs returns with non-zero variance, got a constant series{which}"
        )
    sr = x.mean(axis=0) / sd
    return float(sr) if x.ndim == 1 else sr


def skew_kurtosis(returns) -> tuple[float, float]:
    """(skewness, RAW kurtosis) of 1-D returns, with the 1/T central moments m_k.

    skew = m3 / m2**1.5, kurtosis = m4 / m2**2 (normal = 3, NOT excess). Equal to
    scipy.stats.skew(x) and scipy.stats.kurtosis(x, fisher=False) (both bias=True).
    """
    x = _returns_array(returns)
    d = x - x.mean()
    m2 = float(np.mean(d * d))
    if math.sqrt(m2) <= _REL_STD_FLOOR * float(np.abs(x).max()):
        raise SelectionInputError("skewness and kurtosis need returns with non-zero variance, got a constant series")
    m3 = float(np.mean(d**3))
    m4 = float(np.mean(d**4))
    return m3 / m2**1.5, m4 / (m2 * m2)


def annualize_sharpe(sr, periods_per_year: float):
    """Annualised Sharpe ratio = per-period SR * sqrt(periods_per_year) (i.i.d. scaling).

    periods_per_year is explicit on purpose: 252 or 250 for exchange trading days, 365 for a
    market that trades every day (crypto daily returns), 525600 for 1-minute bars.
    """
    if not (periods_per_year > 0 and math.isfinite(periods_per_year)):
        raise SelectionInputError(f"periods_per_year must be a positive number, got {periods_per_year}")
    return sr * math.sqrt(periods_per_year)


def deannualize_sharpe(sr_annual, periods_per_year: float):
    """Per-period Sharpe ratio = annualised SR / sqrt(periods_per_year); inverse of `annualize_sharpe`."""
    if not (periods_per_year > 0 and math.isfinite(periods_per_year)):
        raise SelectionInputError(f"periods_per_year must be a positive number, got {periods_per_year}")
    return sr_annual / math.sqrt(periods_per_year)


def _sr_inputs(returns_or_sr, t, skew, kurtosis, excess_kurtosis, ddof, need_t: bool = True):
    """Resolve (sr, t, skew, raw kurtosis) from either a returns array or a scalar Sharpe ratio."""
    if excess_kurtosis is not None and kurtosis is not None:
        raise SelectionInputError(
            f"give either kurtosis= (raw, normal = 3) or excess_kurtosis= (normal = 0), not both, "
            f"got kurtosis={kurtosis}, excess_kurtosis={excess_kurtosis}"
        )
    if np.ndim(returns_or_sr) == 0:
        sr = float(returns_or_sr)
        if not math.isfinite(sr):
            raise SelectionInputError(f"the Sharpe ratio must be finite, got {sr}")
        if need_t:
            if t is None:
                raise SelectionInputError(
                    "a scalar Sharpe ratio needs t= (the number of returns it was estimated from)"
                )
            if not (float(t) > 1):
                raise SelectionInputError(f"t (number of returns) must be > 1, got {t}")
        skew = 0.0 if skew is None else float(skew)
        if excess_kurtosis is not None:
            kurtosis = float(excess_kurtosis) + 3.0  # explicit excess -> raw conversion
        kurtosis = 3.0 if kurtosis is None else float(kurtosis)
        _check_kurtosis(skew, kurtosis)
        return sr, (None if t is None else float(t)), skew, kurtosis
    moments = dict(t=t, skew=skew, kurtosis=kurtosis, excess_kurtosis=excess_kurtosis)
    given = {k: v for k, v in moments.items() if v is not None}
    if given:
        raise SelectionInputError(
            f"with a returns array, t/skew/kurtosis are estimated from it; do not pass them, got {given}"
        )
    x = _returns_array(returns_or_sr)
    sr = sharpe(x, ddof=ddof)
    sk, ku = skew_kurtosis(x)
    return sr, float(x.shape[0]), sk, ku


def _sr_variance_term(sr: float, skew: float, kurtosis: float) -> float:
    # (T - 1) * Var[SR_hat] for non-normal i.i.d. returns (Mertens 2002; Bailey & LdP 2012).
    v = 1.0 - skew * sr + (kurtosis - 1.0) / 4.0 * sr * sr
    if not v > 0:
        raise SelectionInputError(
            f"1 - skew*SR + (kurtosis-1)/4*SR**2 must be > 0 (it reaches 0 only at the bound "
            f"kurtosis = 1 + skew**2 with SR = 2/skew), got {v} (SR={sr}, skew={skew}, kurtosis={kurtosis})"
        )
    return v


# --------------------------------------------------------------------------------------------
# PSR, DSR, MinTRL


def psr(
    returns_or_sr,
    sr_star: float = 0.0,
    *,
    t: float | None = None,
    skew: float | None = None,
    kurtosis: float | None = None,
    excess_kurtosis: float | None = None,
    ddof: int = 1,
) -> float:
    """Probabilistic Sharpe Ratio: P[true SR > sr_star] (Bailey & Lopez de Prado, 2012).

        PSR(SR*) = Phi( (SR - SR*) * sqrt(T - 1) / sqrt(1 - skew*SR + (kurtosis - 1)/4 * SR**2) )

    Conventions: SR and sr_star are PER PERIOD (the period of the returns), never annualised;
    kurtosis is RAW (normal = 3). T is the number of returns.

    Parameters
    ----------
    returns_or_sr : array of shape (T,) or float
        Either per-period returns (SR = mean/std with `ddof`, skew and raw kurtosis from the 1/T
        moments, T = len), or a per-period Sharpe ratio with `t`, `skew` (default 0) and
        `kurtosis` (raw, default 3) given explicitly.
    sr_star : float, default 0
        Benchmark Sharpe ratio, per period.
    excess_kurtosis : float, optional
        Use instead of `kurtosis` for an excess kurtosis (normal = 0); converted to raw as + 3.

    >>> round(psr(0.1, t=100), 4)   # normal returns, SR 0.1 per period over 100 periods
    0.8395
    """
    sr, t, skew, kurtosis = _sr_inputs(returns_or_sr, t, skew, kurtosis, excess_kurtosis, ddof)
    v = _sr_variance_term(sr, skew, kurtosis)
    z = (sr - float(sr_star)) * math.sqrt(t - 1.0) / math.sqrt(v)
    return _NORMAL.cdf(z)


def expected_max_sharpe(n_trials: int, sr_variance: float) -> float:
    """Expected maximum Sharpe ratio of `n_trials` independent skill-less trials (true SR = 0).

        E[max SR] ~= sqrt(V[SR]) * ((1 - g) * Phi^-1(1 - 1/N) + g * Phi^-1(1 - 1/(N e)))

    with g the Euler-Mascheroni constant (Bailey & Lopez de Prado, 2014, eq. for SR0). The result
    is in the units of `sr_variance`'s square root: give the variance of PER-PERIOD Sharpe ratios
    to get a per-period threshold. N = 1 gives 0 (one skill-less trial is expected to score 0).
    """
    if isinstance(n_trials, bool) or not float(n_trials).is_integer() or n_trials < 1:
        raise SelectionInputError(f"n_trials must be an integer >= 1, got {n_trials}")
    if not (math.isfinite(sr_variance) and sr_variance >= 0):
        raise SelectionInputError(f"sr_variance must be a finite number >= 0, got {sr_variance}")
    n = int(n_trials)
    if n == 1:
        return 0.0
    z1 = _NORMAL.inv_cdf(1.0 - 1.0 / n)
    z2 = _NORMAL.inv_cdf(1.0 - 1.0 / (n * math.e))
    return math.sqrt(sr_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2)


@dataclass
class DSRResult:
    """Deflated Sharpe Ratio and the inputs it was computed from (all Sharpe ratios per period)."""

    dsr: float  # PSR(sr0): probability that the true SR exceeds the best-of-N noise threshold
    sr: float  # Sharpe ratio of the selected trial, per period
    sr0: float  # expected maximum SR of n_trials skill-less trials, per period
    n_trials: int  # number of trials actually run (the whole search, not just the reported ones)
    sr_variance: float  # variance of the trials' per-period Sharpe ratios (ddof = 1)
    t: float  # number of returns of the selected trial
    skew: float
    kurtosis: float  # raw (normal = 3)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def deflated_sharpe(
    returns_or_sr,
    n_trials: int | None = None,
    sr_variance: float | None = None,
    *,
    trial_sharpes=None,
    t: float | None = None,
    skew: float | None = None,
    kurtosis: float | None = None,
    excess_kurtosis: float | None = None,
    ddof: int = 1,
) -> DSRResult:
    """Deflated Sharpe Ratio DSR = PSR(SR0), SR0 = expected_max_sharpe(N, V[SR]) (Bailey & LdP 2014).

    Conventions: Sharpe ratios and `sr_variance` are PER PERIOD (variance of per-period Sharpe
    ratios: an annualised variance V_a converts as V_a / periods_per_year); kurtosis is RAW
    (normal = 3; `excess_kurtosis=` converts + 3).

    The trial ledger is given either as
      - `trial_sharpes`: per-period Sharpe ratios of the trials; V[SR] is their sample variance
        (ddof = 1), so at least two are needed; `n_trials` defaults to their count and may be
        larger (trials run whose Sharpe ratio was not kept), never smaller; or
      - `n_trials` and `sr_variance` explicitly. With n_trials >= 2 the variance must be > 0 (zero
        variance means identical trials, i.e. a broken ledger); n_trials = 1 needs no variance
        and gives SR0 = 0, DSR = PSR(0).

    `returns_or_sr` is the selected trial's per-period returns, or its per-period SR with `t`,
    `skew`, `kurtosis` as in `psr`.

    Published example (Bailey & LdP 2014): annual SR 2.5 over T = 1250 days (250 a year), skew -3,
    raw kurtosis 10, N = 100 trials with annualised-SR variance 0.5 -> SR0 = 0.1132 per day
    (1.7894 annualised), DSR = 0.9004:

    >>> r = deflated_sharpe(2.5 / 250**0.5, 100, 0.5 / 250, t=1250, skew=-3, kurtosis=10)
    >>> round(r.sr0 * 250**0.5, 4), round(r.dsr, 4)
    (1.7894, 0.9004)
    """
    if trial_sharpes is not None:
        if sr_variance is not None:
            raise SelectionInputError(
                f"give either trial_sharpes= or sr_variance=, not both, got sr_variance={sr_variance}"
            )
        ts = np.asarray(trial_sharpes, dtype=np.float64).ravel()
        if ts.size < 2:
            raise SelectionInputError(
                f"the variance of the trials' Sharpe ratios needs at least two trials, got {ts.size}"
            )
        if not np.all(np.isfinite(ts)):
            raise SelectionInputError(f"trial_sharpes must be finite, got {ts[~np.isfinite(ts)][:5].tolist()}")
        sr_variance = float(ts.var(ddof=1))
        if n_trials is None:
            n_trials = int(ts.size)
        elif n_trials < ts.size:
            raise SelectionInputError(
                f"n_trials must be >= the number of trial Sharpe ratios given, got n_trials={n_trials} < {ts.size}"
            )
    if n_trials is None:
        raise SelectionInputError("deflated_sharpe needs n_trials= (and sr_variance=) or trial_sharpes=")
    if isinstance(n_trials, bool) or not float(n_trials).is_integer() or n_trials < 1:
        raise SelectionInputError(f"n_trials must be an integer >= 1, got {n_trials}")
    n_trials = int(n_trials)
    if n_trials >= 2:
        if sr_variance is None:
            raise SelectionInputError(f"n_trials={n_trials} >= 2 needs sr_variance= or trial_sharpes=")
        if not (math.isfinite(sr_variance) and sr_variance > 0):
            raise SelectionInputError(
                f"the variance of the trials' Sharpe ratios must be > 0 with n_trials={n_trials} >= 2 "
                f"(zero means identical trials), got sr_variance={sr_variance}"
            )
    else:
        sr_variance = 0.0 if sr_variance is None else float(sr_variance)
    sr, t, sk, ku = _sr_inputs(returns_or_sr, t, skew, kurtosis, excess_kurtosis, ddof)
    sr0 = expected_max_sharpe(n_trials, sr_variance)
    value = psr(sr, sr0, t=t, skew=sk, kurtosis=ku)
    return DSRResult(
        dsr=value, sr=sr, sr0=sr0, n_trials=n_trials, sr_variance=float(sr_variance), t=t, skew=sk, kurtosis=ku
    )


def min_track_record_length(
    returns_or_sr,
    sr_star: float = 0.0,
    *,
    confidence: float = 0.95,
    skew: float | None = None,
    kurtosis: float | None = None,
    excess_kurtosis: float | None = None,
    ddof: int = 1,
) -> float:
    """Minimum track record length: periods needed for PSR(sr_star) to reach `confidence`.

        MinTRL = 1 + (1 - skew*SR + (kurtosis - 1)/4 * SR**2) * (Phi^-1(confidence) / (SR - SR*))**2

    (Bailey & Lopez de Prado, 2012). It is in PERIODS of the returns (days for daily returns) and
    is the exact inverse of `psr` in T: psr(SR, SR*, t=MinTRL, ...) == confidence. SR and sr_star
    are per period; kurtosis is RAW (normal = 3; `excess_kurtosis=` converts + 3). Requires
    SR > sr_star (otherwise no track record length suffices).
    """
    if not (0.0 < confidence < 1.0):
        raise SelectionInputError(f"confidence must be in (0, 1), got {confidence}")
    sr, _, sk, ku = _sr_inputs(returns_or_sr, None, skew, kurtosis, excess_kurtosis, ddof, need_t=False)
    if not sr > sr_star:
        raise SelectionInputError(
            f"the minimum track record length needs SR > sr_star, got SR={sr} <= sr_star={sr_star}"
        )
    v = _sr_variance_term(sr, sk, ku)
    z = _NORMAL.inv_cdf(confidence)
    return 1.0 + v * (z / (sr - sr_star)) ** 2


def min_passing_sharpe(t: float, sr0: float, *, confidence: float = 0.95, skew: float = 0.0,
                       kurtosis: float = 3.0) -> float:
    """Smallest per-period Sharpe ratio SR whose PSR(sr0) reaches `confidence` over `t` returns:
    the power of the DSR gate (what a "no" rules out).

    Solves (SR - SR0)**2 * (T - 1) = z**2 * (1 - skew*SR + (kurtosis - 1)/4 * SR**2), z =
    Phi^-1(confidence), for its larger root (SR > SR0): the quadratic
    A SR**2 + B SR + C = 0 with A = (T - 1) - z**2 (kurtosis - 1)/4, B = z**2 skew - 2 (T - 1) SR0,
    C = (T - 1) SR0**2 - z**2. It is the inverse of `psr` in SR: psr(result, sr0, t=t, skew=skew,
    kurtosis=kurtosis) == confidence. Per period; kurtosis raw (normal = 3, the default).

    >>> round(min_passing_sharpe(1001, 0.0), 6)   # normal returns, SR0 = 0: about z / sqrt(T - 1)
    0.05205
    """
    if not (0.5 < confidence < 1.0):
        raise SelectionInputError(f"confidence must be in (0.5, 1), got {confidence}")
    if not (math.isfinite(t) and t > 1):
        raise SelectionInputError(f"t (number of returns) must be > 1, got {t}")
    if not math.isfinite(sr0):
        raise SelectionInputError(f"sr0 must be finite, got {sr0}")
    _check_kurtosis(skew, kurtosis)
    z2 = _NORMAL.inv_cdf(confidence) ** 2
    a = (t - 1.0) - z2 * (kurtosis - 1.0) / 4.0
    b = z2 * skew - 2.0 * (t - 1.0) * sr0
    c = (t - 1.0) * sr0 * sr0 - z2
    disc = b * b - 4.0 * a * c
    if a <= 0 or disc < 0:
        raise SelectionInputError(
            f"no Sharpe ratio reaches PSR(sr0) = {confidence} with t={t} returns (kurtosis={kurtosis}): "
            "the track record is too short"
        )
    return (-b + math.sqrt(disc)) / (2.0 * a)


# --------------------------------------------------------------------------------------------
# paired forecast comparison: Diebold-Mariano and Holm


@dataclass(frozen=True)
class DMResult:
    """Diebold-Mariano test of equal expected loss (see `diebold_mariano`)."""

    statistic: float  # mean_diff / se (times the HLN factor with hln=True)
    pvalue: float  # two-sided
    mean_diff: float  # mean of loss_a - loss_b (negative: a has the lower loss)
    se: float  # Newey-West standard error of mean_diff, sqrt(S / T)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _paired_losses(loss_a, loss_b, lag) -> tuple[np.ndarray, int]:
    a = np.asarray(loss_a, dtype=np.float64)
    b = np.asarray(loss_b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise SelectionInputError(f"loss_a and loss_b must be 1-D, got shapes {a.shape} and {b.shape}")
    if a.shape != b.shape:
        raise SelectionInputError(f"loss_a and loss_b must have the same length, got {a.size} and {b.size}")
    if a.size < 2:
        raise SelectionInputError(f"the Diebold-Mariano test needs at least 2 paired losses, got {a.size}")
    bad = ~(np.isfinite(a) & np.isfinite(b))
    if bad.any():
        raise SelectionInputError(
            f"losses must be finite (no NaN or inf), got {int(bad.sum())} non-finite pair(s), first at index "
            f"{int(np.flatnonzero(bad)[0])}"
        )
    if isinstance(lag, bool) or not float(lag).is_integer() or not 0 <= lag < a.size:
        raise SelectionInputError(f"lag must be an integer with 0 <= lag < T={a.size}, got lag={lag}")
    return a - b, int(lag)


def newey_west_variance(x, lag: int) -> float:
    """Long-run variance S = g0 + 2 * sum_{k=1..lag} (1 - k/(lag+1)) * g_k of a 1-D series, with
    autocovariances g_k = (1/T) * sum_{t>k} (x_t - mean)(x_{t-k} - mean) (Newey & West 1987:
    Bartlett weights, so S >= 0). `lag` must satisfy 0 <= lag < T."""
    x = np.asarray(x, dtype=np.float64)
    e = x - x.mean()
    t = e.size
    s = float(e @ e) / t
    for k in range(1, lag + 1):  # O(T * lag), each term one vectorised dot product
        s += 2.0 * (1.0 - k / (lag + 1.0)) * float(e[k:] @ e[:-k]) / t
    return max(s, 0.0)


def diebold_mariano(loss_a, loss_b, lag: int, *, hln: bool = False) -> DMResult:
    """Diebold-Mariano (1995) test that two forecasts of the same targets have equal expected loss.

    d_t = loss_a[t] - loss_b[t], t = 1..T (the two forecasts of the SAME target, paired):

        statistic = mean(d) / sqrt(S / T)
        S   = g0 + 2 * sum_{k=1..lag} (1 - k / (lag + 1)) * g_k            (Newey-West, Bartlett)
        g_k = (1/T) * sum_{t>k} (d_t - mean(d)) (d_{t-k} - mean(d))

    with a two-sided p-value from the standard normal. Use lag >= the forecast horizon minus one
    (losses of h-step forecasts overlap for h - 1 steps); here, lag >= the label horizon.

    hln=True applies the Harvey, Leybourne & Newbold (1997) small-sample correction: the
    statistic is multiplied by sqrt((T + 1 - 2h + h(h - 1)/T) / T) with h = lag + 1, and the
    p-value comes from Student's t with T - 1 degrees of freedom (`se` stays the Newey-West one).

    Identical losses (S = 0 and mean 0) give statistic 0 and p-value 1; a constant non-zero
    difference gives an infinite statistic and p-value 0.

    Raises `SelectionInputError` (one line) for lengths that differ, NaN/inf, T < 2 or a lag
    outside 0 <= lag < T.

    >>> r = diebold_mariano([1, 3, 2, 4, 0], [0, 0, 0, 0, 0], lag=1)   # S = 1, worked in the tests
    >>> round(r.statistic ** 2, 9), round(r.se ** 2, 9)
    (20.0, 0.2)
    """
    d, lag = _paired_losses(loss_a, loss_b, lag)
    t = d.size
    mean = float(d.mean())
    se = math.sqrt(newey_west_variance(d, lag) / t)
    if se <= _REL_STD_FLOOR * max(float(np.abs(d).max()), 1e-300):
        stat = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        return DMResult(statistic=stat, pvalue=1.0 if mean == 0.0 else 0.0, mean_diff=mean, se=0.0)
    stat = mean / se
    if not hln:
        # 2 * (1 - Phi(|z|)) = erfc(|z| / sqrt 2), accurate far in the tail (NormalDist.cdf rounds it to 0)
        return DMResult(statistic=stat, pvalue=math.erfc(abs(stat) / math.sqrt(2.0)), mean_diff=mean, se=se)
    from scipy import stats  # only for the t distribution of the corrected statistic

    h = lag + 1
    stat *= math.sqrt(max(0.0, (t + 1 - 2 * h + h * (h - 1) / t) / t))
    return DMResult(statistic=stat, pvalue=float(2.0 * stats.t.sf(abs(stat), t - 1)), mean_diff=mean, se=se)


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in the order given.

    With p_(1) <= ... <= p_(m) sorted: adjusted p_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)),
    so the adjusted values are monotone in the raw ones and capped at 1; rejecting where the
    adjusted p <= alpha is Holm's procedure at family-wise error rate alpha (Holm 1979).

    >>> holm([0.01, 0.04, 0.03, 0.005]).round(3).tolist()   # Wikipedia's example: reject 1st, 4th
    [0.03, 0.06, 0.06, 0.02]
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise SelectionInputError(f"holm needs a 1-D array of p-values, got shape {p.shape}")
    bad = ~(np.isfinite(p) & (p >= 0) & (p <= 1))
    if bad.any():
        raise SelectionInputError(f"p-values must be in [0, 1], got {p[bad][:5].tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


# --------------------------------------------------------------------------------------------
# effective number of trials


@dataclass
class EffectiveTrials:
    """Effective number of independent trials among correlated ones (see `effective_trials`)."""

    n_effective: float  # in [1, n_columns]
    n_columns: int
    eigenvalues: np.ndarray  # (K,) of the correlation matrix, largest first
    method: str = "participation ratio of the correlation matrix's eigenvalues, (sum l)^2 / sum l^2"

    def to_dict(self) -> dict:
        return {"n_effective": self.n_effective, "n_columns": self.n_columns,
                "eigenvalues": self.eigenvalues.tolist(), "method": self.method}


def effective_trials(returns) -> EffectiveTrials:
    """Effective number of independent trials from the trials' (T, K) return matrix.

    Method: the participation ratio of the eigenvalues l_i of the K x K correlation matrix R of
    the columns, N_eff = (sum l_i)**2 / sum l_i**2 = K**2 / ||R||_F**2. It is K for uncorrelated
    trials, 1 for perfectly (or perfectly anti-) correlated ones, and k for k uncorrelated groups
    of equal size whose members are identical; in between it counts how many directions the
    trials' returns really span. With finite T, sample correlations of independent trials pull it slightly below K
    (about K / (1 + (K - 1) / T)).

    >>> h = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]])   # two uncorrelated columns
    >>> round(effective_trials(h[:, [0, 0, 1, 1]]).n_effective, 6)  # each twice: 2 groups
    2.0
    """
    x = _returns_array(returns, name="returns", ndim=2)
    k = x.shape[1]
    if k < 1:
        raise SelectionInputError("effective_trials needs at least one column, got 0")
    sd = x.std(axis=0)
    const = sd <= _REL_STD_FLOOR * np.abs(x).max(axis=0)
    if np.any(const):
        raise SelectionInputError(
            f"effective_trials needs columns with non-zero variance, got constant column(s) {np.flatnonzero(const).tolist()}"
        )
    r = np.corrcoef(x, rowvar=False).reshape(k, k)
    lam = np.sort(np.clip(np.linalg.eigvalsh(r), 0.0, None))[::-1]
    n_eff = float(k * k / np.sum(r * r))
    return EffectiveTrials(n_effective=min(max(n_eff, 1.0), float(k)), n_columns=k, eigenvalues=lam)


# --------------------------------------------------------------------------------------------
# PBO via CSCV


@dataclass
class PBOResult:
    """Probability of Backtest Overfitting and the CSCV diagnostics (Bailey et al. 2017).

    Arrays of length n_splits follow the lexicographic order of `is_blocks`.
    """

    pbo: float  # share of splits whose IS winner ranks at or below the OOS median (logit <= 0)
    logits: np.ndarray  # (n_splits,) log(w / (1 - w)), w = OOS rank of the IS winner / (K + 1)
    oos_rank: np.ndarray  # (n_splits,) OOS rank of the IS winner, 1 = worst, K = best (ties averaged)
    rank_histogram: np.ndarray  # (K,) int: splits whose IS winner had OOS rank 1..K (half ranks floored)
    winner: np.ndarray  # (n_splits,) int: column index of the IS winner
    is_sharpe: np.ndarray  # (n_splits,) IS Sharpe ratio of the winner, per period
    oos_sharpe: np.ndarray  # (n_splits,) OOS Sharpe ratio of the winner, per period
    slope: float  # performance degradation: OLS oos_sharpe = intercept + slope * is_sharpe
    intercept: float
    r2: float
    prob_oos_loss: float  # share of splits whose IS winner has OOS Sharpe < 0
    is_blocks: np.ndarray  # (n_splits, S/2) int: the IS block indices of each split
    n_blocks: int
    block_size: int
    n_dropped: int  # oldest rows dropped so that n_blocks divides T
    n_columns: int

    @property
    def n_splits(self) -> int:
        return int(self.logits.size)

    def to_dict(self) -> dict:
        """JSON-friendly summary (scalars and the rank histogram; per-split arrays left out)."""
        return {
            "pbo": self.pbo,
            "prob_oos_loss": self.prob_oos_loss,
            "slope": self.slope,
            "intercept": self.intercept,
            "r2": self.r2,
            "n_splits": self.n_splits,
            "n_blocks": self.n_blocks,
            "block_size": self.block_size,
            "n_dropped": self.n_dropped,
            "n_columns": self.n_columns,
            "logit_median": float(np.median(self.logits)),
            "rank_histogram": self.rank_histogram.tolist(),
        }


def _degradation_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy, sxy = float(dx @ dx), float(dy @ dy), float(dx @ dy)
    if sxx <= 0:  # the winner's IS Sharpe never varies: no slope to fit
        return math.nan, float(y.mean()), math.nan
    slope = sxy / sxx
    r2 = sxy * sxy / (sxx * syy) if syy > 0 else math.nan
    return slope, float(y.mean() - slope * x.mean()), r2


def pbo_cscv(matrix, n_blocks: int = 16, *, ddof: int = 1) -> PBOResult:  # long: one vectorised pass, kept whole
    """Probability of Backtest Overfitting by Combinatorially Symmetric Cross-Validation.

    Bailey, Borwein, Lopez de Prado & Zhu (2017). The performance measure is the per-period Sharpe
    ratio (mean / std with `ddof`, default 1).

    Procedure and conventions:

    1. Blocks: the T x K matrix (rows = aligned periods, oldest first; columns = trials) is cut
       into S = `n_blocks` CONTIGUOUS blocks of EQUAL size T // S. When S does not divide T, the
       oldest T mod S rows are dropped (reported as `n_dropped`), so the most recent data is
       kept. Example, T = 10, S = 4 (block size 2, rows 0 and 1 dropped)::

           row:    0 1 | 2 3 | 4 5 | 6 7 | 8 9
           block:  - - | 0 0 | 1 1 | 2 2 | 3 3

    2. Splits: every choice of S/2 blocks is an in-sample (IS) set, its complement the
       out-of-sample (OOS) set: C(S, S/2) splits (12,870 for S = 16), each complement included.
    3. For each split, the IS winner n* = argmax of the IS Sharpe ratios (ties: the first column).
       Its OOS rank among the K OOS Sharpe ratios is 1 (worst) .. K (best); tied OOS values get
       the average of their ranks. w = rank / (K + 1), as in the paper, so the logit
       log(w / (1 - w)) is always finite.
    4. PBO = share of splits with logit <= 0, i.e. the IS winner at or below the OOS median.
       On pure noise PBO is near 0.5 but biased upward (an IS winner's OOS half is, by symmetry,
       the complement of its lucky IS half).
    5. Diagnostics: histogram of the winner's OOS rank; performance degradation, the OLS fit of
       the winner's OOS Sharpe on its IS Sharpe across splits (slope, intercept, R^2); and the
       probability of OOS loss, the share of splits where the winner's OOS Sharpe is < 0.

    Vectorised: the block sums of x and x**2 (S x K) are combined by one (splits x S) membership
    matrix product per chunk of splits; no Python loop runs over observations or columns.

    Raises `SelectionInputError` for: K < 2, S odd or < 2 or > T, too few rows per half, NaN/inf,
    a constant column, or a column constant inside one half (its Sharpe ratio is undefined).
    """
    x = np.asarray(matrix, dtype=np.float64)
    if x.ndim != 2:
        raise SelectionInputError(f"pbo_cscv needs a 2-D (T, K) matrix of returns, got shape {x.shape}")
    t_all, k = x.shape
    if k < 2:
        raise SelectionInputError(f"PBO ranks trials against each other and needs at least 2 columns, got K={k}")
    if isinstance(n_blocks, bool) or not float(n_blocks).is_integer():
        raise SelectionInputError(f"n_blocks must be an even integer, got {n_blocks}")
    s = int(n_blocks)
    if s < 2 or s % 2:
        raise SelectionInputError(f"n_blocks (S) must be even and >= 2, got S={s}")
    if s > t_all:
        raise SelectionInputError(f"n_blocks (S) must be <= the number of rows T, got S={s} > T={t_all}")
    x = _returns_array(x, name="matrix", ndim=2)
    ddof = _check_ddof(ddof, 2)
    size = t_all // s
    n_dropped = t_all - s * size
    half_n = (s // 2) * size
    if half_n - ddof < 1:
        raise SelectionInputError(
            f"each CSCV half needs more than ddof={ddof} rows, got {half_n} (T={t_all}, S={s}); use a smaller S"
        )
    x = x[n_dropped:]
    mu = x.mean(axis=0)  # (K,)
    xc = x - mu  # centring keeps the sum-of-squares variance below free of cancellation
    col_var = (xc * xc).mean(axis=0)
    const = np.sqrt(col_var) <= _REL_STD_FLOOR * np.abs(x).max(axis=0)
    if np.any(const):
        raise SelectionInputError(
            f"every column needs non-zero variance for a Sharpe ratio, "
            f"got constant column(s) {np.flatnonzero(const).tolist()}"
        )
    b1 = xc.reshape(s, size, k).sum(axis=1)  # (S, K)
    b2 = (xc * xc).reshape(s, size, k).sum(axis=1)  # (S, K)
    tot1, tot2 = b1.sum(axis=0), b2.sum(axis=0)  # (K,)

    n_splits = math.comb(s, s // 2)
    combos = itertools.chain.from_iterable(itertools.combinations(range(s), s // 2))
    is_blocks = np.fromiter(combos, dtype=np.int64, count=n_splits * (s // 2)).reshape(n_splits, s // 2)
    member = np.zeros((n_splits, s), dtype=np.float64)  # (C, S)
    np.put_along_axis(member, is_blocks, 1.0, axis=1)

    winner = np.empty(n_splits, dtype=np.int64)
    is_sr = np.empty(n_splits)
    oos_sr = np.empty(n_splits)
    oos_rank = np.empty(n_splits)
    # Within one half of n rows: SR = (a1 + n*mu) / n / sqrt(ssd / (n - ddof)), with a1 = sum of the
    # centred returns and ssd = a2 - a1**2 / n the sum of squared deviations. The constant factor
    # sqrt(n - ddof) / n changes no argmax and no rank, so the (c, K) arrays skip it and only the
    # winners' values are rescaled.
    scale = math.sqrt(half_n - ddof) / half_n
    n_mu = half_n * mu  # (K,)
    ssd_floor = _REL_VAR_FLOOR * half_n * col_var  # (K,)

    def scaled_sharpe(a1: np.ndarray, a2: np.ndarray, lo: int) -> np.ndarray:  # overwrites a1, a2
        sq = a1 * a1
        sq *= 1.0 / half_n
        np.subtract(a2, sq, out=a2)  # ssd, (c, K)
        if np.any(a2.min(axis=0) <= ssd_floor):
            c_bad, k_bad = np.argwhere(a2 <= ssd_floor)[0]
            raise SelectionInputError(
                f"column {int(k_bad)} is constant inside one CSCV half (split {lo + int(c_bad)}, "
                f"blocks of {size} rows), so its Sharpe ratio is undefined; use fewer blocks or drop the column"
            )
        a1 += n_mu
        np.sqrt(a2, out=a2)
        a1 /= a2
        return a1

    # Chunks of splits small enough for the (c, K) arrays to stay in cache.
    chunk = max(1, _CSCV_CHUNK_BYTES // (8 * k))
    for lo in range(0, n_splits, chunk):  # a loop over chunks of splits, never over observations
        hi = min(lo + chunk, n_splits)
        m = member[lo:hi]  # (c, S)
        a1_in, a2_in = m @ b1, m @ b2  # (c, K) IS sums
        a1_out, a2_out = tot1 - a1_in, tot2 - a2_in  # (c, K) OOS sums: the complement
        sr_in = scaled_sharpe(a1_in, a2_in, lo)  # (c, K)
        sr_out = scaled_sharpe(a1_out, a2_out, lo)  # (c, K)
        rows = np.arange(hi - lo)
        w = np.argmax(sr_in, axis=1)  # (c,) first column on ties
        w_out = sr_out[rows, w][:, None]  # (c, 1)
        below = np.count_nonzero(sr_out < w_out, axis=1)
        at_or_below = np.count_nonzero(sr_out <= w_out, axis=1)  # includes the winner itself
        winner[lo:hi] = w
        is_sr[lo:hi] = scale * sr_in[rows, w]
        oos_sr[lo:hi] = scale * w_out[:, 0]
        oos_rank[lo:hi] = 0.5 * (below + at_or_below + 1)  # average rank over ties: 1 + below + ties/2

    omega = oos_rank / (k + 1)
    logits = np.log(omega / (1.0 - omega))
    # logit <= 0  <=>  rank <= (K + 1) / 2; compared on the ranks so that rounding cannot flip it
    overfit = oos_rank <= (k + 1) / 2
    hist = np.bincount(np.floor(oos_rank).astype(np.int64) - 1, minlength=k)
    slope, intercept, r2 = _degradation_fit(is_sr, oos_sr)
    return PBOResult(
        pbo=float(overfit.mean()),
        logits=logits,
        oos_rank=oos_rank,
        rank_histogram=hist,
        winner=winner,
        is_sharpe=is_sr,
        oos_sharpe=oos_sr,
        slope=slope,
        intercept=intercept,
        r2=r2,
        prob_oos_loss=float((oos_sr < 0).mean()),
        is_blocks=is_blocks,
        n_blocks=s,
        block_size=size,
        n_dropped=n_dropped,
        n_columns=k,
    )


# --------------------------------------------------------------------------------------------
# sampling frequency


def daily_returns(times_us, per_bar_returns) -> tuple[np.ndarray, np.ndarray]:
    """Compound per-bar returns into UTC-daily returns.

    Why daily: the statistics in this module assume (close to) i.i.d. returns and a Sharpe
    ratio estimated from T of them. Minute returns of a strategy are neither: positions held over
    a multi-bar horizon make consecutive bar returns strongly autocorrelated, microstructure
    (bid-ask bounce, fee bursts at position changes) and volatility clustering make them
    heavy-tailed and heteroskedastic, and with T in the millions the sqrt(T - 1) in PSR/DSR turns
    any tiny edge (or any small dependence the formulas ignore) into "significance". Daily
    returns are much closer to independent, their moments are estimable, and T (hundreds to a
    few thousand days) matches the information actually in the sample. CSCV blocks of days are
    also long enough for serial dependence not to leak across block edges. So the sweep applies
    every statistic to daily NET returns, with Sharpe ratios per day (annualise with 365:
    BTC trades every day).

    Parameters
    ----------
    times_us : int64 array of shape (M,)
        Bar times in microseconds since the Unix epoch (UTC), strictly increasing. The day of a
        bar is the UTC day of this time (use the bar's open time consistently).
    per_bar_returns : float array of shape (M,)
        Simple (not log) returns of each bar.

    Returns
    -------
    days : datetime64[D] array of shape (D,)
        The UTC days that have at least one bar, increasing (days without bars are absent, not 0).
    returns : float64 array of shape (D,)
        prod(1 + r) - 1 over each day's bars.
    """
    t = np.asarray(times_us)
    if t.ndim != 1 or not np.issubdtype(t.dtype, np.integer):
        raise SelectionInputError(
            f"times_us must be a 1-D integer array (microseconds UTC), got dtype {t.dtype}, shape {t.shape}"
        )
    r = np.asarray(per_bar_returns, dtype=np.float64)
    if r.shape != t.shape:
        raise SelectionInputError(
            f"times_us and per_bar_returns must have the same length, got {t.shape[0]} and {r.shape}"
        )
    if t.size == 0:
        raise SelectionInputError("daily_returns needs at least one bar, got 0")
    r = _returns_array(r, name="per_bar_returns", min_len=1)
    t = t.astype(np.int64)
    steps = np.diff(t)
    if np.any(steps <= 0):
        i = int(np.flatnonzero(steps <= 0)[0])
        raise SelectionInputError(
            f"times_us must be strictly increasing, got {int(t[i])} then {int(t[i + 1])} at index {i}"
        )
    day = t // US_PER_DAY  # floor division: correct UTC day also before 1970
    starts = np.flatnonzero(np.r_[True, day[1:] != day[:-1]])  # (D,)
    growth = np.multiply.reduceat(1.0 + r, starts)  # (D,)
    return day[starts].astype("datetime64[D]"), growth - 1.0


# --------------------------------------------------------------------------------------------
# gates


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
        out = {f: getattr(self, f) for f in ("selected", "sharpe", "dsr", "sr0", "pbo", "n_trials", "passes_dsr",
                                             "passes_pbo", "passed", "min_dsr", "max_pbo", "error")}
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

    min_dsr: float = 0.95
    max_pbo: float = 0.5
    n_blocks: int = 16
    periods_per_year: float = 365.0

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
        cols = [_returns_array(candidates[name], name=f"candidate {name!r}") for name in names]
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
        reasons = (Reason.DSR_MET if passes_dsr else Reason.DSR_BELOW_MIN,
                   Reason.PBO_MET if passes_pbo else Reason.PBO_ABOVE_MAX,
                   Reason.PASSED if passed else Reason.NOT_PASSED)
        log.info("gate verdict: %s, DSR %.3f, PBO %.3f: %s", names[best], d.dsr, p.pbo, ", ".join(reasons))
        return Verdict(selected=names[best], sharpe=d.sr, dsr=d.dsr, sr0=d.sr0, pbo=p.pbo, n_trials=d.n_trials,
                       passes_dsr=passes_dsr, passes_pbo=passes_pbo, passed=passed, reasons=reasons,
                       min_dsr=self.min_dsr, max_pbo=self.max_pbo, table=table, dsr_result=d, pbo_result=p)


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
    """

    effective: EffectiveTrials
    n_trials_effective: int
    dsr_effective: DSRResult
    t: int
    confidence: float
    min_sharpe: float | None  # per period, raw count; None when min_dsr <= 0.5 (no finite bound)
    min_sharpe_effective: float | None
    min_trl: float


def _min_passing(t: int, sr0: float, confidence: float) -> float | None:
    try:
        return min_passing_sharpe(t, sr0, confidence=confidence)
    except SelectionInputError:
        return None


def deflation(mat: np.ndarray, selected: int, v: Verdict) -> Deflation:
    """`Deflation` of a gate verdict `v` over the gated candidates' (T, K) returns `mat`."""
    eff = effective_trials(mat)
    n_eff = max(1, round(eff.n_effective * v.n_trials / mat.shape[1]))
    x = mat[:, selected]
    d_eff = deflated_sharpe(x, n_trials=n_eff, sr_variance=v.dsr_result.sr_variance if n_eff > 1 else None)
    t = mat.shape[0]
    trl = (min_track_record_length(x, v.sr0, confidence=v.min_dsr) if v.sharpe > v.sr0 and v.min_dsr > 0
           else math.inf)
    return Deflation(effective=eff, n_trials_effective=n_eff, dsr_effective=d_eff, t=t, confidence=v.min_dsr,
                     min_sharpe=_min_passing(t, v.sr0, v.min_dsr),
                     min_sharpe_effective=_min_passing(t, d_eff.sr0, v.min_dsr), min_trl=trl)


def _aligned(series: Mapping[str, tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(days (T,), matrix (T, K)) of the series' returns on the days common to all of them."""
    common = None
    for days, _ in series.values():
        common = days if common is None else np.intersect1d(common, days)
    cols = [np.asarray(r, dtype=np.float64)[np.isin(d, common)] for d, r in series.values()]
    return common, np.stack(cols, axis=1)


def _undefined_row(key: str, x: np.ndarray, error: str) -> dict:
    nan = math.nan
    return {"key": key, "n_periods": int(len(x)), "mean": float(np.mean(x)) if len(x) else nan,
            "total": float(np.prod(1 + x) - 1) if len(x) else nan, "sharpe": nan, "sharpe_annual": nan,
            "psr": nan, "dsr": nan, "sr0": nan, "error": error}


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


def _no_gate(reason: Reason, rows: list[dict], selected: str | None, n_trials: int, min_dsr: float,
             max_pbo: float, error: str | None = None) -> Verdict:
    row = next((r for r in rows if r["key"] == selected), {})
    return Verdict(selected=selected, sharpe=row.get("sharpe", math.nan), dsr=row.get("dsr", math.nan),
                   sr0=row.get("sr0", math.nan), pbo=None, n_trials=n_trials, passes_dsr=False, passes_pbo=False,
                   passed=False, reasons=(reason, Reason.NOT_PASSED), min_dsr=min_dsr, max_pbo=max_pbo, error=error)


def select_run(series: Mapping[str, tuple], trials, *, min_dsr: float = 0.95, max_pbo: float = 0.5,
               n_blocks: int = 16, periods_per_year: float = 365.0) -> RunSelection:
    """The selection of one sweep: the candidates' daily statistics, the DSR against the trial
    ledger and the gates (DSR of the highest-Sharpe candidate, PBO of the set).

    series : {key: (days datetime64[D] (D,), daily net returns (D,))}, in the order to report;
        aligned here on their common days.
    trials : the ledger's trials (dicts with state, value, slot/key); `complete_trials` counts
        them. n_trials = max(complete trials, candidates); V[SR] from the trials' values.
    A candidate whose daily Sharpe ratio is undefined (constant or too short series) is left out
    of the gates (`dropped`); with fewer than 2 left, or inputs the gate refuses, the verdict is
    reached without the gates. CSCV uses at most as many blocks as there are (even) common days.
    """
    complete = complete_trials(trials)
    keys = list(series)
    n_trials = max(len(complete), len(keys))
    ledger = np.array([t["value"] for t in complete], dtype=float)
    ledger = ledger if len(ledger) >= max(2, len(keys)) else None  # the ledger is missing: use the candidates
    sr_var = float(np.var(ledger, ddof=1)) if ledger is not None else None
    out = RunSelection([], None, n_trials, sr_var, np.empty(0, "datetime64[D]"), int(n_blocks), None, [])
    if not keys:
        out.verdict = _no_gate(Reason.NO_CANDIDATE, [], None, n_trials, min_dsr, max_pbo)
        return out
    out.days, mat = _aligned(series)
    errors = {k: _sharpe_error(mat[:, j]) for j, k in enumerate(keys)}
    usable = [k for k in keys if errors[k] is None]
    out.dropped = [k for k in keys if errors[k] is not None]
    out.n_profitable = int(np.sum(mat.mean(axis=0) > 0)) if len(mat) else 0
    reason, error = Reason.TOO_FEW_CANDIDATES, None
    if len(usable) >= 2:
        t = mat.shape[0]
        out.n_blocks_used = n_used = min(int(n_blocks), t - t % 2)
        gate = Gate(min_dsr=min_dsr, max_pbo=max_pbo, n_blocks=n_used, periods_per_year=periods_per_year)
        try:
            v = gate.evaluate({k: mat[:, keys.index(k)] for k in usable}, n_trials=n_trials, trial_sharpes=ledger)
        except SelectionInputError as exc:
            reason, error = Reason.GATE_ERROR, str(exc)
        else:  # the gate's table: every candidate's statistics against the one ledger
            by_name = {r["name"]: r | {"key": r["name"]} for r in v.table}
            out.candidates = [by_name.get(k) or _undefined_row(k, mat[:, j], errors[k]) for j, k in enumerate(keys)]
            out.verdict = v
            gated = mat[:, [keys.index(k) for k in usable]]
            out.deflation = deflation(gated, usable.index(v.selected), v)
            return out
    out.candidates = [_row_without_gate(k, mat[:, j], n_trials, ledger, periods_per_year) for j, k in enumerate(keys)]
    sharpes = {r["key"]: r["sharpe"] for r in out.candidates if r["key"] in usable}
    best = max(usable, key=sharpes.get) if usable else keys[0]
    out.verdict = _no_gate(reason, out.candidates, best, n_trials, min_dsr, max_pbo, error=error)
    return out
