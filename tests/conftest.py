"""Shared fixtures. Real data comes from ../shared/data beside the repository (tests skip,
saying why, where it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: btcusdt-1m/ (one Parquet a year) and binance-raw/ (two real archives)."""
    if not (SHARED_DATA / "btcusdt-1m").is_dir():
        pytest.skip(f"real data not present: {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_store(shared_data: Path) -> Path:
    """The shared folder is laid out as a canonical store root: <root>/btcusdt-1m/btcusdt-1m-YYYY.parquet."""
    return shared_data
