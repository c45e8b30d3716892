"""Bar intervals and calendar units: one home for microseconds per interval and per day.

Standard library only, so that every layer (store, features, selection, report) can import it.
Times in tsflash are int64 microseconds since the Unix epoch, UTC.
"""

from __future__ import annotations

US_PER_DAY = 86_400_000_000

# Fixed-length Binance kline intervals (1w/1mo are calendar-based and not supported).
INTERVAL_US: dict[str, int] = {
    "1s": 1_000_000,
    "1m": 60_000_000,
    "3m": 180_000_000,
    "5m": 300_000_000,
    "15m": 900_000_000,
    "30m": 1_800_000_000,
    "1h": 3_600_000_000,
    "2h": 7_200_000_000,
    "4h": 14_400_000_000,
    "6h": 21_600_000_000,
    "8h": 28_800_000_000,
    "12h": 43_200_000_000,
    "1d": US_PER_DAY,
    "3d": 259_200_000_000,
}


def bars_per_day(interval_us: int) -> int:
    """Bars in one UTC day at this interval (at least 1)."""
    return max(1, US_PER_DAY // interval_us)
