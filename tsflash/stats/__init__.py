"""The statistics of tsflash, applied to daily returns and per-day losses (numpy and scipy, no
torch): Sharpe ratios and the tests of one, PSR, DSR, MinTRL and the DSR gate's power (`sharpe`);
paired forecast comparison by Diebold-Mariano with Newey-West variance and Holm's adjustment, and
question 1's "better / no better / worse" rule (`forecasts`); the probability of backtest
overfitting by CSCV and the effective number of trials (`pbo`); and the DSR and PBO gates with a
sweep's selection from its trial ledger (`gate`); and question 1 over training runs, with its A/A
calibration, power and PBO's null for few candidates (`runs`). Bad input raises `SelectionInputError`, a
`tsflash.errors.UserError` and a `ValueError`. The names below are re-exported eagerly (the
package is light; `tsflash.config` imports its defaults); the Sharpe ratio itself is
`tsflash.stats.sharpe.sharpe`, since the package's `sharpe` is its module.
"""

from tsflash.stats._inputs import SelectionInputError
from tsflash.stats.forecasts import ALPHA, DMResult, diebold_mariano, forecast_answer, holm, newey_west_variance
from tsflash.stats.gate import (
    Deflation,
    Gate,
    Reason,
    RunSelection,
    Verdict,
    complete_trials,
    deflation,
    select_run,
)
from tsflash.stats.pbo import CSCV_BLOCKS, MAX_PBO, EffectiveTrials, PBOResult, effective_trials, pbo_cscv
from tsflash.stats.runs import (
    CrossedComponents,
    CrossedTestResult,
    Runs,
    RunTestResult,
    aa_tests,
    crossed_power,
    crossed_seed_test,
    min_detectable_difference,
    pbo_null,
    run_level_test,
)
from tsflash.stats.sharpe import (
    DSR_CONFIDENCE,
    PERIODS_PER_YEAR,
    DSRResult,
    annualize_sharpe,
    deannualize_sharpe,
    deflated_sharpe,
    expected_max_sharpe,
    min_passing_sharpe,
    min_track_record_length,
    psr,
    skew_kurtosis,
)

__all__ = [
    "CrossedComponents",
    "CrossedTestResult",
    "RunTestResult",
    "Runs",
    "aa_tests",
    "crossed_power",
    "crossed_seed_test",
    "min_detectable_difference",
    "pbo_null",
    "run_level_test",
    "ALPHA",
    "CSCV_BLOCKS",
    "DMResult",
    "DSRResult",
    "DSR_CONFIDENCE",
    "Deflation",
    "EffectiveTrials",
    "Gate",
    "MAX_PBO",
    "PBOResult",
    "PERIODS_PER_YEAR",
    "Reason",
    "RunSelection",
    "SelectionInputError",
    "Verdict",
    "annualize_sharpe",
    "complete_trials",
    "deannualize_sharpe",
    "deflated_sharpe",
    "deflation",
    "diebold_mariano",
    "effective_trials",
    "expected_max_sharpe",
    "forecast_answer",
    "holm",
    "min_passing_sharpe",
    "min_track_record_length",
    "newey_west_variance",
    "pbo_cscv",
    "psr",
    "select_run",
    "skew_kurtosis",
]
