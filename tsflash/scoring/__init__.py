"""Forecasts to scores: classification and per-bar strategy measures (`metrics`), the trading
rules and their break-even fee (`strategy`), and scoring at a fee into seed portfolios, daily
series, trial values and per-day loss sums (`daily`), on UTC days (`days`). Torch-free."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "classification_metrics": "metrics",
    "apply_fees": "metrics",
    "bar_losses": "metrics",
    "direction_metrics": "metrics",
    "Strategy": "strategy",
    "break_even_fee": "strategy",
    "daily_series": "daily",
    "seed_portfolio": "daily",
    "objective_value": "daily",
    "fold_losses": "daily",
    "daily_returns": "days",
    "utc_days": "days",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
