"""Bar intervals, calendar units and durations: one home for microseconds per interval and per
day, for turning a time such as "15m" into bars of an interval, and for saying a bar count as time.

Standard library only, so that every layer (config, store, features, selection, report) can import
it. Times in tsflash are int64 microseconds since the Unix epoch, UTC.

A duration is a whole number and a unit: "2s", "15m", "1h", "30d", "2w" (s = second, m = minute,
h = hour, d = day, w = week; the units of Binance's interval names, so "1m" is a minute). At an
interval it stands for the bars it spans, and must span a whole number of them::

    >>> duration_bars("15m", "1s", "labels.horizon"), duration_bars("15m", "1m", "labels.horizon")
    (900, 15)
    >>> bars_as_time(32768, "1s"), bars_as_time(512, "1m")
    ('9.1 h', '8.5 h')
"""

from __future__ import annotations

import re

from tsflash.errors import UserError

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

UNIT_US: dict[str, int] = {"s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": US_PER_DAY, "w": 7 * US_PER_DAY}
_DURATION_RE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def bars_per_day(interval_us: int) -> int:
    """Bars in one UTC day at this interval (at least 1)."""
    return max(1, US_PER_DAY // interval_us)


def interval_us(interval: str, key: str = "interval") -> int:
    """Microseconds per bar of `interval` ("1s" -> 1_000_000); `key` names the user's setting."""
    if interval not in INTERVAL_US:
        raise UserError(f"{key} must be one of {', '.join(INTERVAL_US)}, got {interval!r}")
    return INTERVAL_US[interval]


def parse_duration(text: str, key: str) -> int:
    """\"15m" -> 900_000_000: a duration in microseconds. `key` names the user's setting."""
    m = _DURATION_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise UserError(
            f'{key}: a duration is a whole number and a unit s, m, h, d or w (such as "15m" or "1h"), got {text!r}'
        )
    return int(m[1]) * UNIT_US[m[2]]


def duration_bars(value, interval: str, key: str) -> int:
    """Bars spanned by `value` at `interval`: an int is already bars; a duration ("15m") must span a
    whole number of bars ("90s" at 1m is 1.5 bars: an error naming `key`)."""
    if not isinstance(value, str):
        return value  # bars as given; the config's own range rules check it
    us, step = parse_duration(value, key), interval_us(interval, "data.interval")
    if us % step:
        raise UserError(f"{key} = {value!r} is not a whole number of {interval} bars ({us / step:g} bars)")
    return us // step


def duration_days(value, key: str) -> int:
    """Days spanned by `value`: an int is already days; a duration ("30d", "2w") must be whole days."""
    if not isinstance(value, str):
        return value
    us = parse_duration(value, key)
    if us % US_PER_DAY:
        raise UserError(f"{key} = {value!r} must be a whole number of days, got {us / US_PER_DAY:g} days")
    return us // US_PER_DAY


def format_duration(us: int) -> str:
    """A length of time for a reader, to two or three significant digits: "15 s", "8.5 min",
    "9.1 h", "36 h", "23 d", "3.7 y". Hours up to two days, days up to two years (365-day)."""
    seconds = us / 1_000_000
    steps = ((60, "s", 1), (3600, "min", 60), (172_800, "h", 3600), (63_072_000, "d", 86_400))
    for limit, unit, size in steps:  # noqa: B007 (unit and size are read after the break)
        if seconds < limit:
            break
    else:
        unit, size = "y", 31_536_000
    value = seconds / size
    return f"{value:.1f} {unit}".replace(".0 ", " ") if value < 10 else f"{value:.0f} {unit}"


def bars_as_time(n_bars: int, interval: str) -> str:
    """`n_bars` bars of `interval` as time: 32768 at "1s" -> "9.1 h"."""
    return format_duration(int(n_bars) * interval_us(interval))


def interval_words(interval: str) -> str:
    """\"1s" -> "1-second", "5m" -> "5-minute", "1h" -> "1-hour": the interval as an adjective."""
    interval_us(interval)
    return f"{interval[:-1]}-{_UNIT_WORDS[interval[-1]]}"
