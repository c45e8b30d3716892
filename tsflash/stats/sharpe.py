"""Sharpe ratios and the tests of one: the per-period Sharpe ratio and its moments, annualising,
the Probabilistic Sharpe Ratio (`psr`, Bailey & Lopez de Prado 2012), the Deflated Sharpe Ratio
against the best of N skill-less trials (`expected_max_sharpe`, `deflated_sharpe`, Bailey & Lopez
de Prado 2014), the minimum track record length and the power of the DSR gate
(`min_passing_sharpe`). Conventions, repeated in each docstring and pinned by the tests: Sharpe
ratios are PER PERIOD inside every formula (never annualised), mean / std with `ddof` (default
1) and no risk-free rate; skewness and kurtosis use the 1/T central moments, and kurtosis is RAW
(normal = 3; an excess kurtosis goes through `excess_kurtosis=`, raw = excess + 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import cast

import numpy as np
import scipy  # scipy.stats loads on first use (SciPy's lazy submodules): tsflash.config imports this module

from tsflash.stats._inputs import SelectionInputError, check_ddof, is_constant, returns_array

PERIODS_PER_YEAR = 365.0  # of daily returns: BTC trades every day
DSR_CONFIDENCE = 0.95  # the DSR a selection must reach (the gate's min_dsr), and MinTRL's and the power's level

_NORMAL = NormalDist()


def _check_kurtosis(skew: float, kurtosis: float) -> None:
    # Raw kurtosis of any distribution is >= 1 + skew**2 (equality: two-point distributions).
    if not (math.isfinite(skew) and math.isfinite(kurtosis)):
        raise SelectionInputError(f"skew and kurtosis must be finite, got skew={skew}, kurtosis={kurtosis}")
    if kurtosis < 1.0 + skew * skew - 1e-9:
        raise SelectionInputError(
            f"raw kurtosis must be >= 1 + skew**2 (normal = 3; pass an excess kurtosis as "
            f"excess_kurtosis=), got kurtosis={kurtosis} with skew={skew}"
        )


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
    x = returns_array(x, ndim=x.ndim if x.ndim in (1, 2) else 1)
    ddof = check_ddof(ddof, x.shape[0])
    sd = x.std(axis=0, ddof=ddof)
    zero = is_constant(sd, x)
    if np.any(zero):
        which = "" if x.ndim == 1 else f" in column(s) {np.flatnonzero(zero).tolist()}"
        raise SelectionInputError(
            f"the Sharpe ratio needs returns with non-zero variance, got a constant series{which}"
        )
    sr = x.mean(axis=0) / sd
    return float(sr) if x.ndim == 1 else sr


def skew_kurtosis(returns) -> tuple[float, float]:
    """(skewness, RAW kurtosis) of 1-D returns, with the 1/T central moments m_k:
    skew = m3 / m2**1.5, kurtosis = m4 / m2**2 (normal = 3, NOT excess), i.e.
    scipy.stats.skew(x, bias=True) and scipy.stats.kurtosis(x, fisher=False, bias=True).

    Raises `SelectionInputError` on a constant series (scipy would return NaN).
    """
    x = returns_array(returns)
    if is_constant(x.std(), x):
        raise SelectionInputError("skewness and kurtosis need returns with non-zero variance, got a constant series")
    return float(scipy.stats.skew(x, bias=True)), float(scipy.stats.kurtosis(x, fisher=False, bias=True))


def _check_periods_per_year(periods_per_year: float) -> float:
    if not (periods_per_year > 0 and math.isfinite(periods_per_year)):
        raise SelectionInputError(f"periods_per_year must be a positive number, got {periods_per_year}")
    return periods_per_year


def annualize_sharpe(sr, periods_per_year: float):
    """Annualised Sharpe ratio = per-period SR * sqrt(periods_per_year) (i.i.d. scaling).

    periods_per_year is explicit on purpose: 252 or 250 for exchange trading days, 365 for a
    market that trades every day (crypto daily returns, `PERIODS_PER_YEAR`), 525600 for 1-minute bars.
    """
    return sr * math.sqrt(_check_periods_per_year(periods_per_year))


def deannualize_sharpe(sr_annual, periods_per_year: float):
    """Per-period Sharpe ratio = annualised SR / sqrt(periods_per_year); inverse of `annualize_sharpe`."""
    return sr_annual / math.sqrt(_check_periods_per_year(periods_per_year))


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
    x = returns_array(returns_or_sr)
    sr = cast(float, sharpe(x, ddof=ddof))  # 1-D returns: one Sharpe ratio
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


def _check_n_trials(n_trials) -> None:
    if isinstance(n_trials, bool) or not float(n_trials).is_integer() or n_trials < 1:
        raise SelectionInputError(f"n_trials must be an integer >= 1, got {n_trials}")


def expected_max_sharpe(n_trials: int, sr_variance: float) -> float:
    """Expected maximum Sharpe ratio of `n_trials` independent skill-less trials (true SR = 0).

        E[max SR] ~= sqrt(V[SR]) * ((1 - g) * Phi^-1(1 - 1/N) + g * Phi^-1(1 - 1/(N e)))

    with g the Euler-Mascheroni constant (Bailey & Lopez de Prado, 2014, eq. for SR0). The result
    is in the units of `sr_variance`'s square root: give the variance of PER-PERIOD Sharpe ratios
    to get a per-period threshold. N = 1 gives 0 (one skill-less trial is expected to score 0).
    """
    _check_n_trials(n_trials)
    if not (math.isfinite(sr_variance) and sr_variance >= 0):
        raise SelectionInputError(f"sr_variance must be a finite number >= 0, got {sr_variance}")
    n = int(n_trials)
    if n == 1:
        return 0.0
    z1 = _NORMAL.inv_cdf(1.0 - 1.0 / n)
    z2 = _NORMAL.inv_cdf(1.0 - 1.0 / (n * math.e))
    return math.sqrt(sr_variance) * ((1.0 - np.euler_gamma) * z1 + np.euler_gamma * z2)


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
    _check_n_trials(n_trials)
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
    confidence: float = DSR_CONFIDENCE,
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


def min_passing_sharpe(
    t: float, sr0: float, *, confidence: float = DSR_CONFIDENCE, skew: float = 0.0, kurtosis: float = 3.0
) -> float:
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
