"""The sweep's bars: read the store for the configured range (fetching what is missing), or build
seeded synthetic bars of the same bar count (`--data synthetic:random-walk[:SEED]`, the noise
control; `--data synthetic:iid[:SEED]`, the clean null; `--data synthetic:long-memory[:SEED][:KEY=VALUE,...]`
and `synthetic:regime[:SEED][:KEY=VALUE,...]`, the positive controls; see tsflash.data.synthetic)."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import TypeGuard

from tsflash.config import ExperimentConfig
from tsflash.data import fetch
from tsflash.data.store import Bars, load_bars, to_us, verified_files, year_files, year_start_us
from tsflash.data.synthetic import SOURCE_PREFIX, synthetic_bars
from tsflash.errors import UserError
from tsflash.intervals import INTERVAL_US, US_PER_DAY

log = logging.getLogger(__name__)

IMPORT_HINT = "import a local folder instead: tsflash data import FOLDER"


def configured_bar_count(cfg: ExperimentConfig) -> int:
    """Bars in [data.start, data.end] (whole end day) on the interval grid, without gaps."""
    days = (dt.date.fromisoformat(cfg.data.end) - dt.date.fromisoformat(cfg.data.start)).days + 1
    return days * (US_PER_DAY // INTERVAL_US[cfg.data.interval])


def load_data(cfg: ExperimentConfig, data: str, default_seed: int) -> tuple[Bars, dict]:
    """Bars for the sweep and a description of their source.

    A store folder is read for [start, end]; when it holds no bars for (part of) the range, the
    missing range is fetched from the Binance archive, then read again. A `synthetic:...` source
    builds seeded bars with the same bar count as the configured range (its seed defaults to
    `default_seed`).
    """
    if data.startswith(SOURCE_PREFIX):
        return synthetic_bars(
            data,
            configured_bar_count(cfg),
            default_seed,
            start=cfg.data.start,
            interval=cfg.data.interval,
            symbol=cfg.data.symbol,
        )
    root = Path(data)
    bars = _read_store(root, cfg)
    if not _covers(bars, cfg):
        _fetch(root, cfg)
        bars = _read_store(root, cfg)
        if bars is None or len(bars) == 0:
            raise UserError(
                f"--data {root}: no {cfg.data.symbol} {cfg.data.interval} bars for {cfg.data.start}..{cfg.data.end} "
                "even after fetching; import them with `tsflash data import FOLDER`"
            )
    return bars, {"kind": "store", "source": str(root)}


def check_data(cfg: ExperimentConfig, data: str) -> None:
    """Before a sweep creates anything: the store's year files for the configured range match its
    manifest (tsflash.data._manifest). A store that lacks the dataset is left to `load_data` (it fetches)."""
    if data.startswith(SOURCE_PREFIX):
        return
    root = Path(data)
    if not year_files(root, cfg.data.symbol, cfg.data.interval):
        return
    lo, hi = to_us(cfg.data.start), to_us(cfg.data.end, end=True)
    verified_files(
        root,
        cfg.data.symbol,
        cfg.data.interval,
        lambda year: year_start_us(year) <= hi and year_start_us(year + 1) > lo,
    )


def _read_store(root: Path, cfg: ExperimentConfig) -> Bars | None:
    """The configured range from the store; None when the store does not hold the dataset yet."""
    try:
        return load_bars(root, cfg.data.symbol, cfg.data.interval, cfg.data.start, cfg.data.end)
    except UserError:
        if any(root.iterdir()) and (root / f"{cfg.data.symbol.lower()}-{cfg.data.interval}").exists():
            raise  # the dataset is there but broken: say so rather than fetch over it
        return None


def _covers(bars: Bars | None, cfg: ExperimentConfig) -> TypeGuard[Bars]:
    """Do the bars reach (within a day) both ends of the configured range? (True: they are not None.)"""
    if bars is None or len(bars) == 0:
        return False
    lo, hi = to_us(cfg.data.start), to_us(cfg.data.end, end=True)
    return bars.open_time[0] < lo + US_PER_DAY and bars.open_time[-1] >= hi - US_PER_DAY


def _fetch(root: Path, cfg: ExperimentConfig) -> None:
    """Fetch the configured range into the store; offline -> one line saying how to import."""
    log.info("the store %s lacks %s..%s: fetching from the Binance archive", root, cfg.data.start, cfg.data.end)
    try:
        fetch.fetch(
            symbol=cfg.data.symbol, interval=cfg.data.interval, start=cfg.data.start, end=cfg.data.end, root=root
        )
    except UserError as exc:
        raise UserError(
            f"could not fetch {cfg.data.symbol} {cfg.data.interval} {cfg.data.start}..{cfg.data.end} ({exc}); "
            f"offline? {IMPORT_HINT}"
        ) from None
    except OSError as exc:
        raise UserError(
            f"could not reach the Binance archive ({exc.__class__.__name__}: {exc}); {IMPORT_HINT}"
        ) from None
