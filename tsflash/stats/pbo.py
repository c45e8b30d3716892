"""Overfitting of a selection: the Probability of Backtest Overfitting by Combinatorially Symmetric
Cross-Validation (`pbo_cscv`; Bailey, Borwein, Lopez de Prado & Zhu, 2017, "The Probability of
Backtest Overfitting") with its diagnostics (OOS rank of the in-sample winner, performance
degradation, probability of OOS loss), and the effective number of independent trials among
correlated ones (`effective_trials`). Sharpe ratios are per period (mean / std with `ddof`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy  # scipy.stats loads on first use (SciPy's lazy submodules): tsflash.config imports this module

from tsflash.stats._inputs import SelectionInputError, check_ddof, is_constant, returns_array

CSCV_BLOCKS = 16  # CSCV blocks: C(16, 8) = 12,870 splits
MAX_PBO = 0.5  # the PBO a selection may reach (the gate's max_pbo): its winner no worse than the OOS median
# A column whose variance inside one CSCV half is this small relative to its whole-sample variance
# is constant there: its Sharpe ratio would be rounding noise divided by rounding noise.
_REL_VAR_FLOOR = 1e-12
# Size of one (chunk, K) float64 CSCV array; six live at once, so a chunk stays in the CPU cache.
_CSCV_CHUNK_BYTES = 2**18  # measured: 256 KiB beat 1-16 MiB by 2x on a 2-core CPU


@dataclass
class EffectiveTrials:
    """Effective number of independent trials among correlated ones (see `effective_trials`)."""

    n_effective: float  # in [1, n_columns]
    n_columns: int
    eigenvalues: np.ndarray  # (K,) of the correlation matrix, largest first
    method: str = "participation ratio of the correlation matrix's eigenvalues, (sum l)^2 / sum l^2"

    def to_dict(self) -> dict:
        return {
            "n_effective": self.n_effective,
            "n_columns": self.n_columns,
            "eigenvalues": self.eigenvalues.tolist(),
            "method": self.method,
        }


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
    x = returns_array(returns, name="returns", ndim=2)
    k = x.shape[1]
    if k < 1:
        raise SelectionInputError("effective_trials needs at least one column, got 0")
    sd = x.std(axis=0)
    const = is_constant(sd, x)
    if np.any(const):
        raise SelectionInputError(
            f"effective_trials needs columns with non-zero variance, got constant column(s) {np.flatnonzero(const).tolist()}"
        )
    r = np.corrcoef(x, rowvar=False).reshape(k, k)
    lam = np.sort(np.clip(np.linalg.eigvalsh(r), 0.0, None))[::-1]
    n_eff = float(k * k / np.sum(r * r))
    return EffectiveTrials(n_effective=min(max(n_eff, 1.0), float(k)), n_columns=k, eigenvalues=lam)


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


def _degradation_fit(is_sr: np.ndarray, oos_sr: np.ndarray) -> tuple[float, float, float]:
    """(slope, intercept, R^2) of the OLS fit oos_sr = intercept + slope * is_sr (scipy.stats.linregress);
    slope and R^2 NaN where the winner's IS Sharpe never varies, R^2 NaN where its OOS Sharpe never does."""
    if is_sr.max() == is_sr.min():  # no slope to fit (linregress refuses a constant x)
        return math.nan, float(oos_sr.mean()), math.nan
    fit = scipy.stats.linregress(is_sr, oos_sr)
    r2 = fit.rvalue**2 if oos_sr.max() > oos_sr.min() else math.nan  # linregress says r = 0 there
    return float(fit.slope), float(fit.intercept), float(r2)


def pbo_cscv(
    matrix, n_blocks: int = CSCV_BLOCKS, *, ddof: int = 1
) -> PBOResult:  # long: one vectorised pass, kept whole
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
    x = returns_array(x, name="matrix", ndim=2)
    ddof = check_ddof(ddof, 2)
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
    const = is_constant(np.sqrt(col_var), x)
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
