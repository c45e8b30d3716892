"""Intervals and durations: bars per day, times such as "15m" in bars of an interval, bar counts as
time, and the config's duration-valued fields (time strings converted, plain integers as before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tsflash.config import DURATIONS, ExperimentConfig, check_overrides, config_from_dict, load_config, validate
from tsflash.errors import UserError
from tsflash.intervals import (
    INTERVAL_US,
    US_PER_DAY,
    bars_as_time,
    bars_per_day,
    duration_bars,
    duration_days,
    format_duration,
    interval_words,
    parse_duration,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("interval, per_day", [("1s", 86_400), ("1m", 1440), ("5m", 288), ("1h", 24), ("1d", 1), ("3d", 1)])
def test_bars_per_day(interval, per_day):
    assert bars_per_day(INTERVAL_US[interval]) == per_day


def test_parse_duration():
    assert parse_duration("2s", "k") == 2_000_000
    assert parse_duration("15m", "k") == 900_000_000
    assert parse_duration(" 1h ", "k") == 3_600_000_000
    assert parse_duration("30d", "k") == 30 * US_PER_DAY
    assert parse_duration("2w", "k") == 14 * US_PER_DAY
    for bad in ("15", "m", "1.5h", "-1h", "15 minutes", "1mo", "", 15):
        with pytest.raises(UserError, match=r"^labels\.horizon: a duration is a whole number and a unit s, m, h, d or w "
                                             r"\(such as \"15m\" or \"1h\"\), got "):
            parse_duration(bad, "labels.horizon")


@pytest.mark.parametrize("text, interval, bars", [
    ("15m", "1s", 900), ("15m", "1m", 15), ("15m", "5m", 3), ("1h", "1s", 3600), ("1h", "1m", 60), ("1h", "5m", 12),
    ("1h", "1h", 1), ("2s", "1s", 2), ("30d", "1h", 720), ("1w", "1d", 7),
])  # fmt: skip
def test_duration_bars(text, interval, bars):
    assert duration_bars(text, interval, "labels.horizon") == bars


def test_duration_bars_errors_and_plain_ints():
    assert duration_bars(15, "1s", "labels.horizon") == 15  # an int is already bars
    with pytest.raises(UserError, match=r"^labels\.horizon = '90s' is not a whole number of 1m bars \(1\.5 bars\)$"):
        duration_bars("90s", "1m", "labels.horizon")
    with pytest.raises(UserError, match=r"^data\.max_gap_bars = '30m' is not a whole number of 1h bars \(0\.5 bars\)$"):
        duration_bars("30m", "1h", "data.max_gap_bars")
    with pytest.raises(UserError, match=r"^data\.interval must be one of 1s, 1m, .*got '7q'$"):
        duration_bars("1h", "7q", "labels.horizon")


def test_duration_days():
    assert duration_days(182, "splits.test_days") == 182
    assert duration_days("30d", "splits.test_days") == 30
    assert duration_days("4w", "splits.test_days") == 28
    assert duration_days("48h", "splits.test_days") == 2
    with pytest.raises(UserError, match=r"^splits\.test_days = '36h' must be a whole number of days, got 1\.5 days$"):
        duration_days("36h", "splits.test_days")


def test_n_as_time():
    """The issue's own numbers: at 1 s, N = 512 is 8.5 minutes, 32768 is 9.1 hours, 131072 is 36
    hours; on 1-minute bars the same N span 8.5 hours to 91 days."""
    assert [bars_as_time(n, "1s") for n in (512, 4096, 32768, 131072)] == ["8.5 min", "1.1 h", "9.1 h", "36 h"]
    assert [bars_as_time(n, "1m") for n in (512, 4096, 32768, 131072)] == ["8.5 h", "2.8 d", "23 d", "91 d"]
    assert bars_as_time(512, "5m") == "43 h" and bars_as_time(32768, "1h") == "3.7 y"
    assert [format_duration(us) for us in (15_000_000, 60_000_000, 90_000_000, 3_600_000_000)] == ["15 s", "1 min", "1.5 min", "1 h"]
    assert [interval_words(i) for i in ("1s", "1m", "5m", "1h", "1d")] == ["1-second", "1-minute", "5-minute", "1-hour", "1-day"]


# --------------------------------------------------------------------------- the config's duration fields


def test_config_durations_are_converted_for_the_interval():
    overrides = {"data": {"interval": "1s", "start": "2025-01-01", "end": "2025-03-31", "max_gap_bars": "1h"},
                 "labels": {"horizon": "15s"}, "splits": {"test_days": "2w", "purge": "1m", "embargo": "30s", "val_days": 0}}
    cfg = load_config("default", overrides)
    assert (cfg.data.max_gap_bars, cfg.labels.horizon, cfg.splits.test_days, cfg.splits.purge, cfg.splits.embargo) == (
        3600, 15, 14, 60, 30)
    cfg = load_config("default", {"labels": {"horizon": "1h"}, "data": {"max_gap_bars": "2h"}})  # at 1m
    assert (cfg.labels.horizon, cfg.data.max_gap_bars) == (60, 120)
    # the interval is read after every override, wherever it was set
    cfg = load_config("default", {"labels": {"horizon": "15m"}, "data": {"interval": "5m"}})
    assert cfg.labels.horizon == 3
    rolling = load_config("default", {"splits": {"scheme": "rolling", "train_days": "52w"}})
    assert rolling.splits.train_days == 364
    assert set(DURATIONS) == {"data.max_gap_bars", "labels.horizon", "splits.purge", "splits.embargo",
                              "splits.test_days", "splits.train_days"}


def test_config_duration_errors_name_the_key():
    with pytest.raises(UserError, match=r"^labels\.horizon = '90s' is not a whole number of 1m bars \(1\.5 bars\)$"):
        load_config("default", {"labels": {"horizon": "90s"}})
    with pytest.raises(UserError, match=r"^splits\.test_days = '36h' must be a whole number of days, got 1\.5 days$"):
        load_config("default", {"splits": {"test_days": "36h"}})
    with pytest.raises(UserError, match=r"^labels\.horizon: a duration is a whole number and a unit"):
        check_overrides({"labels": {"horizon": "15 minutes"}})  # the format is checked at once
    with pytest.raises(UserError, match=r"^labels\.horizon must be >= 1, got 0$"):
        load_config("default", {"labels": {"horizon": "0s"}})  # then the field's own rule, in bars
    with pytest.raises(UserError, match=r"^splits\.purge=30 must be >= labels\.horizon=60"):
        load_config("default", {"labels": {"horizon": "1h"}, "splits": {"purge": "30m"}})
    with pytest.raises(UserError, match=r"^config key data\.interval: expected str, got 60$"):
        load_config("default", {"data": {"interval": 60}})
    with pytest.raises(UserError, match=r"^config key model\.d_model: expected int, got '1h'$"):
        load_config("default", {"model": {"d_model": "1h"}})  # only the duration fields take times


def test_plain_integers_keep_their_meaning_and_hash():
    """Every preset and the published run's config.json load as before: ints are bars and days."""
    published = json.loads((REPO / "reports" / "h200-btcusdt-1m" / "config.json").read_text())
    cfg = config_from_dict(published)
    for key in DURATIONS:
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == published[section][name]
    assert cfg.hash() == config_from_dict(published).hash() == load_config(
        "first-edition", {"name": "default"}).hash()  # its settings, under the name it ran with
    for preset in sorted((REPO / "tsflash" / "presets").glob("*.toml")):
        load_config(preset)
    # validate converts in place, once; a converted config validates to itself
    cfg = ExperimentConfig()
    cfg.labels.horizon = "30m"
    assert validate(cfg).labels.horizon == 30 and validate(cfg).labels.horizon == 30
    assert "1m" not in json.dumps(cfg.to_dict()["labels"])
