"""Download Binance public kline archives, verify them, then import them into the store.

Binance's archive (https://data.binance.vision) lays files out as

    data/spot/monthly/klines/<SYMBOL>/<INTERVAL>/<SYMBOL>-<INTERVAL>-YYYY-MM.zip
    data/spot/daily/klines/<SYMBOL>/<INTERVAL>/<SYMBOL>-<INTERVAL>-YYYY-MM-DD.zip

each beside a `<zip>.CHECKSUM` holding `<sha256>  <zip name>`, for every interval tsflash knows,
1-second bars included (`1s`: about 90 MB a month, 2.6 M bars; microsecond timestamps from 2025
on, milliseconds before: the import reads both, and streams a month rather than holding it in
memory). A month before the current one is fetched as its monthly archive (one request instead
of ~30); the current month, and a past month whose monthly archive is not published yet, is
filled with daily archives up to yesterday (today's file does not exist until the day ends).

Downloads land in a cache inside the store, `<root>/_archive/<same layout>`, written through a
temporary name and kept only after their SHA-256 matches the .CHECKSUM; a file already there and
matching is not downloaded again. Network errors, 5xx answers, truncated bodies and checksum
mismatches are retried with exponential backoff; a file still failing after the last attempt
stops the fetch with a UserError BEFORE anything is imported. `base_url` may be http(s)://,
file:// or a local folder laid out the same way (a mirror).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tsflash import atomic
from tsflash.data import store
from tsflash.errors import UserError

log = logging.getLogger(__name__)

ARCHIVE_URL = "https://data.binance.vision"
CACHE_DIR = "_archive"  # inside the store root
_CHECKSUM_RE = re.compile(r"^\s*([0-9a-fA-F]{64})\s+\*?(\S+)\s*$")


@dataclass(frozen=True)
class ArchiveFile:
    """One archive zip: "monthly" or "daily", and its path relative to the archive base."""

    kind: str
    rel: str  # data/spot/daily/klines/BTCUSDT/1m/BTCUSDT-1m-2024-03-05.zip

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]


@dataclass
class FetchReport:
    """What a fetch did: files downloaded, found already verified in the cache, not published."""

    downloaded: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    retries: int = 0
    files: list[Path] = field(default_factory=list)  # verified zips, in the cache
    imported: object = None  # tsflash.data.ingest.ImportReport


class NotFound(Exception):
    """The archive does not hold the file (HTTP 404 or no such local file): not retried."""


class Retryable(Exception):
    """A transient failure (network, 5xx, truncated body, checksum mismatch): retried."""


# ---------------------------------------------------------------------------------------------
# What to download


def monthly_file(symbol: str, interval: str, year: int, month: int) -> ArchiveFile:
    name = f"{symbol}-{interval}-{year:04d}-{month:02d}.zip"
    return ArchiveFile("monthly", f"data/spot/monthly/klines/{symbol}/{interval}/{name}")


def daily_file(symbol: str, interval: str, day: dt.date) -> ArchiveFile:
    name = f"{symbol}-{interval}-{day.isoformat()}.zip"
    return ArchiveFile("daily", f"data/spot/daily/klines/{symbol}/{interval}/{name}")


def _month_days(year: int, month: int, start: dt.date, end: dt.date) -> list[dt.date]:
    first = max(dt.date(year, month, 1), start)
    nxt = dt.date(year + month // 12, month % 12 + 1, 1)
    last = min(nxt - dt.timedelta(days=1), end)
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def plan_archives(symbol: str, interval: str, start: dt.date, end: dt.date, today: dt.date) -> list[ArchiveFile]:
    """Monthly archives for months before today's month; daily ones for the current month.

    Days from today on are left out (not published yet). Months are listed whole: the import
    trims the bars to [start, end].
    """
    end = min(end, today - dt.timedelta(days=1))
    plan = []
    y, m = start.year, start.month
    while (y, m) <= (end.year, end.month):
        if (y, m) < (today.year, today.month):
            plan.append(monthly_file(symbol, interval, y, m))
        else:
            plan += [daily_file(symbol, interval, d) for d in _month_days(y, m, start, end)]
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return plan


# ---------------------------------------------------------------------------------------------
# Getting bytes


def _resolve_base(base_url: str | os.PathLike) -> tuple[str, str | Path]:
    """("http", url) or ("local", folder)."""
    s = str(base_url)
    scheme = urllib.parse.urlparse(s).scheme.lower()
    if scheme in ("http", "https"):
        return "http", s.rstrip("/")
    if scheme == "file":
        s = urllib.request.url2pathname(urllib.parse.urlparse(s).path)
    elif scheme and len(scheme) > 1:  # a one-letter scheme is a Windows drive
        raise UserError(f"--base-url must be http(s)://, file:// or a local folder, got {s!r}")
    folder = Path(s)
    if not folder.is_dir():
        raise UserError(f"--base-url local folder does not exist: {folder}")
    return "local", folder


def _get(base: tuple[str, str | Path], rel: str, timeout: float) -> bytes:
    """The bytes of one file; NotFound or Retryable on failure."""
    kind, where = base
    if kind == "local":
        path = Path(where, *rel.split("/"))
        if not path.is_file():
            raise NotFound(str(path))
        return path.read_bytes()
    url = f"{where}/{rel}"
    req = urllib.request.Request(url, headers={"User-Agent": "tsflash"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            expected = resp.headers.get("Content-Length")
            data = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NotFound(url) from None
        if exc.code in (408, 425, 429) or exc.code >= 500:
            raise Retryable(f"HTTP {exc.code} from {url}") from None
        raise UserError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except http.client.IncompleteRead as exc:
        raise Retryable(
            f"truncated download of {url}: got {len(exc.partial)} bytes, {exc.expected} more expected"
        ) from None
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError) as exc:
        raise Retryable(f"network error for {url}: {exc}") from None
    if expected is not None and expected.isdigit() and len(data) != int(expected):
        raise Retryable(f"truncated download of {url}: got {len(data)} of {expected} bytes")
    return data


def parse_checksum(text: bytes, name: str) -> str:
    """The hex SHA-256 from a Binance .CHECKSUM file (`<sha256>  <name>`), which must name `name`."""
    m = _CHECKSUM_RE.match(text.decode("utf-8", "replace"))
    if m is None:
        raise UserError(f"{name}.CHECKSUM must hold '<sha256>  {name}', got {text[:100]!r}")
    if m[2] != name:
        raise UserError(f"{name}.CHECKSUM must name {name}, names {m[2]}")
    return m[1].lower()


def _atomic_write(path: Path, data: bytes) -> None:
    atomic.write_bytes(path, data)


def is_verified(zip_path: Path) -> bool:
    """True when the cached zip and its cached .CHECKSUM agree."""
    ck = zip_path.with_name(zip_path.name + ".CHECKSUM")
    if not (zip_path.is_file() and ck.is_file()):
        return False
    try:
        want = parse_checksum(ck.read_bytes(), zip_path.name)
    except UserError:
        return False
    digest = hashlib.sha256()
    with open(zip_path, "rb") as f:  # in blocks: a 1-second month is ~90 MB
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest() == want


def download_verified(
    base, item: ArchiveFile, cache: Path, retries: int, backoff: float, timeout: float, report: FetchReport
) -> Path:
    """Download `item` and its .CHECKSUM into `cache`, verifying SHA-256; returns the zip path.

    Raises NotFound when the archive lacks the file, UserError after `retries` failed retries.
    """
    dest = cache.joinpath(*item.rel.split("/"))
    if is_verified(dest):
        report.cached.append(item.rel)
        return dest
    last = None
    for attempt in range(retries + 1):
        if attempt:
            report.retries += 1
            delay = backoff * 2 ** (attempt - 1)
            log.warning("retry %d/%d of %s in %.1f s: %s", attempt, retries, item.name, delay, last)
            time.sleep(delay)
        try:
            want = parse_checksum(_get(base, item.rel + ".CHECKSUM", timeout), item.name)
            data = _get(base, item.rel, timeout)
            got = hashlib.sha256(data).hexdigest()
            if got != want:
                raise Retryable(
                    f"checksum mismatch for {item.rel}: .CHECKSUM says {want}, the {len(data)} bytes "
                    f"downloaded hash to {got}"
                )
        except Retryable as exc:
            last = exc
            continue
        _atomic_write(dest, data)
        # the .CHECKSUM goes last: its presence beside a matching zip marks the pair verified
        _atomic_write(dest.with_name(dest.name + ".CHECKSUM"), f"{want}  {item.name}\n".encode())
        report.downloaded.append(item.rel)
        return dest
    raise UserError(f"{last} (after {retries + 1} attempts); nothing was imported") from None


# ---------------------------------------------------------------------------------------------
# The fetch


def _as_date(value, what: str) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise UserError(f"--{what} must be a date YYYY-MM-DD, got {value!r}") from None


def _refuse_unknown(
    base, base_url, symbol: str, interval: str, start: dt.date, last: dt.date, first: ArchiveFile, timeout: float
) -> None:
    """The range's first archive file is not published: ask for the .CHECKSUM of its last day. When
    that is missing too, no file of the range is likely there (an unknown or unlisted symbol, a
    range before its listing): one line now, rather than a request for every day of the range."""
    probe = daily_file(symbol, interval, last)
    try:
        _get(base, probe.rel + ".CHECKSUM", timeout)
    except NotFound:
        raise UserError(
            f"the archive at {base_url} holds no {symbol} {interval} klines between {start} and {last} (neither "
            f"{first.name}, the range's first archive file, nor {probe.name}, its last day, is published): is "
            f"{symbol} a Binance spot pair, traded in that range? Nothing was imported"
        ) from None
    except Retryable:
        pass  # the network, not the archive: the files themselves are tried, with retries


def fetch(
    symbol: str = "BTCUSDT",
    interval: str = "1m",
    start="2024-01-01",
    end=None,
    root: Path | str = store.DEFAULT_ROOT,
    base_url: str | os.PathLike = ARCHIVE_URL,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60.0,
    progress: bool = True,
    today: dt.date | None = None,
    do_import: bool = True,
) -> FetchReport:
    """Download (or find cached) and verify every archive for [start, end], then import them.

    end defaults to yesterday (UTC). Nothing is imported unless every available file verified;
    days or months the archive does not hold are listed in `report.missing` (and logged). When the
    range's first file and its last day are both unpublished, UserError after those two requests
    (`_refuse_unknown`: e.g. an unknown symbol).
    """
    from tqdm.auto import tqdm

    symbol = store.check_symbol(symbol)
    store.check_interval(interval)
    today = today or dt.datetime.now(dt.UTC).date()
    start = _as_date(start, "start")
    if start >= today:
        raise UserError(f"--start {start} must be before today {today} (UTC): today's archive is not published yet")
    end = _as_date(end, "end") if end is not None else today - dt.timedelta(days=1)
    if end < start:
        raise UserError(f"--end {end} is before --start {start}")
    if retries < 0:
        raise UserError(f"--retries must be >= 0, got {retries}")
    base = _resolve_base(base_url)
    cache = Path(root) / CACHE_DIR
    plan = plan_archives(symbol, interval, start, end, today)
    report = FetchReport()
    log.info("fetching %d archive files for %s %s %s..%s from %s", len(plan), symbol, interval, start, end, base_url)
    bar = tqdm(total=len(plan), unit="file", desc=f"fetch {symbol} {interval}", disable=not progress)
    try:
        queue = list(plan)
        while queue:
            item = queue.pop(0)
            bar.set_postfix_str(item.name, refresh=False)
            try:
                report.files.append(download_verified(base, item, cache, retries, backoff, timeout, report))
            except NotFound:
                if item is plan[0]:
                    _refuse_unknown(
                        base, base_url, symbol, interval, start, min(end, today - dt.timedelta(days=1)), item, timeout
                    )
                if item.kind == "monthly":
                    # not published yet (early in a month) or never: try the month's daily files
                    y, m = map(int, item.name.rsplit(".", 1)[0].rsplit("-", 2)[-2:])
                    days = [
                        daily_file(symbol, interval, d)
                        for d in _month_days(y, m, start, min(end, today - dt.timedelta(days=1)))
                    ]
                    log.info("%s not in the archive; trying %d daily files", item.name, len(days))
                    queue = days + queue
                    bar.total += len(days)
                else:
                    report.missing.append(item.rel)
                    log.warning("%s is not in the archive; that day stays a gap", item.name)
            bar.update(1)
    finally:
        bar.close()
    if not report.files:
        raise UserError(
            f"the archive at {base_url} holds no {symbol} {interval} klines between {start} and {end} "
            f"(looked for {plan[0].rel} and {len(plan) - 1} more)"
        )
    if do_import:
        from tsflash.data.ingest import import_paths

        report.imported = import_paths(
            report.files, root, symbol, interval, start=start.isoformat(), end=end.isoformat()
        )
    return report
