"""Fetch from a Binance-style archive mirror served on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import datetime as dt
import hashlib
import http.server
import shutil
import threading
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from tsflash.data import fetch, ingest, store
from tsflash.errors import UserError

DAILY = "data/spot/daily/klines/BTCUSDT/1m"
MONTHLY = "data/spot/monthly/klines/BTCUSDT/1m"


def publish(mirror: Path, folder: str, name: str, csv: bytes) -> Path:
    """Write <mirror>/<folder>/<name>.zip and its .CHECKSUM the way Binance does."""
    d = mirror / folder
    d.mkdir(parents=True, exist_ok=True)
    z = d / f"{name}.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{name}.csv", csv)
    digest = hashlib.sha256(z.read_bytes()).hexdigest()
    (d / f"{name}.zip.CHECKSUM").write_text(f"{digest}  {name}.zip\n")
    return z


def synthetic_day(day: dt.date, n: int = 60, seed: int = 0) -> store.Bars:
    rng = np.random.default_rng(seed + day.toordinal())
    close = np.round(30000 + np.cumsum(rng.normal(0, 5, n)), 2)
    open_ = np.r_[close[0], close[:-1]]
    t0 = store.to_us(day.isoformat())
    return store.Bars(
        open_time=t0 + store.INTERVAL_US["1m"] * np.arange(n, dtype=np.int64), open=open_,
        high=np.maximum(open_, close) + 1, low=np.minimum(open_, close) - 1, close=close,
        volume=np.full(n, 2.0), trades=np.full(n, 10, np.int64), taker_buy_base=np.full(n, 1.0),
    )  # fmt: skip


class MirrorServer:
    """http.server over a folder on 127.0.0.1:<free port>, with injectable failures."""

    def __init__(self, folder: Path):
        self.requests: list[str] = []
        self.fail_first: dict[str, int] = {}  # path -> number of 503 answers before success
        self.truncate: set[str] = set()  # paths whose body is cut in half
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                path = self.path.lstrip("/")
                outer.requests.append(path)
                if outer.fail_first.get(path, 0) > 0:
                    outer.fail_first[path] -= 1
                    self.send_error(503, "try later")
                    return
                if path in outer.truncate:
                    body = (folder / path).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def zip_requests(self) -> list[str]:
        return [r for r in self.requests if r.endswith(".zip")]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(folder: Path) -> MirrorServer:
        servers.append(MirrorServer(folder))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def tiny_mirror(tmp_path) -> Path:
    """Synthetic dailies 2024-01-01..03 (60 bars each, ms)."""
    m = tmp_path / "mirror"
    for d in (1, 2, 3):
        day = dt.date(2024, 1, d)
        publish(m, DAILY, f"BTCUSDT-1m-{day}", ingest.binance_csv(synthetic_day(day)))
    return m


def fetch_quiet(**kw):
    kw.setdefault("progress", False)
    kw.setdefault("backoff", 0.0)
    return fetch.fetch(**kw)


# --------------------------------------------------------------------------- planning


def test_plan_prefers_monthly_and_fills_current_month_with_dailies():
    plan = fetch.plan_archives("BTCUSDT", "1m", dt.date(2023, 12, 15), dt.date(2024, 3, 31), today=dt.date(2024, 3, 4))
    assert [p.name for p in plan] == [
        "BTCUSDT-1m-2023-12.zip", "BTCUSDT-1m-2024-01.zip", "BTCUSDT-1m-2024-02.zip",
        "BTCUSDT-1m-2024-03-01.zip", "BTCUSDT-1m-2024-03-02.zip", "BTCUSDT-1m-2024-03-03.zip",
    ]  # fmt: skip
    assert plan[0].rel == f"{MONTHLY}/BTCUSDT-1m-2023-12.zip"
    assert plan[-1].rel == f"{DAILY}/BTCUSDT-1m-2024-03-03.zip"
    # a past range is monthly only
    assert [p.kind for p in fetch.plan_archives("BTCUSDT", "1m", dt.date(2020, 1, 1), dt.date(2020, 2, 29), dt.date(2024, 1, 1))] == ["monthly"] * 2


def test_plan_at_one_second_uses_binance_1s_paths():
    plan = fetch.plan_archives("BTCUSDT", "1s", dt.date(2024, 12, 31), dt.date(2025, 2, 2), today=dt.date(2025, 2, 3))
    assert [p.rel for p in plan] == [
        "data/spot/monthly/klines/BTCUSDT/1s/BTCUSDT-1s-2024-12.zip",
        "data/spot/monthly/klines/BTCUSDT/1s/BTCUSDT-1s-2025-01.zip",
        "data/spot/daily/klines/BTCUSDT/1s/BTCUSDT-1s-2025-02-01.zip",
        "data/spot/daily/klines/BTCUSDT/1s/BTCUSDT-1s-2025-02-02.zip",
    ]


def test_a_1s_daily_archive_in_us_from_a_file_url(tmp_path):
    """The current month's 1-second dailies (us), fetched through file:// and verified."""
    mirror = tmp_path / "mirror"
    day = dt.date(2025, 2, 1)
    bars = synthetic_day(day, n=600)
    bars.open_time = store.to_us(day.isoformat()) + 1_000_000 * np.arange(600, dtype=np.int64)
    bars.interval = "1s"
    publish(mirror, "data/spot/daily/klines/BTCUSDT/1s", "BTCUSDT-1s-2025-02-01", ingest.binance_csv(bars, "us"))
    rep = fetch_quiet(interval="1s", start="2025-02-01", end="2025-02-01", root=tmp_path / "s",
                      base_url=mirror.as_uri(), today=dt.date(2025, 2, 2))
    assert rep.downloaded == ["data/spot/daily/klines/BTCUSDT/1s/BTCUSDT-1s-2025-02-01.zip"]
    assert rep.imported.units == {"us": 1} and rep.imported.added == {("BTCUSDT", "1s", 2025): 600}
    assert fetch.is_verified(tmp_path / "s" / fetch.CACHE_DIR / rep.downloaded[0])
    assert store.fingerprint(store.load_bars(tmp_path / "s", interval="1s")) == store.fingerprint(bars)


def test_parse_checksum():
    h = "ab" * 32
    assert fetch.parse_checksum(f"{h}  X.zip\n".encode(), "X.zip") == h
    with pytest.raises(UserError, match=r"X\.zip\.CHECKSUM must name X\.zip, names Y\.zip"):
        fetch.parse_checksum(f"{h}  Y.zip".encode(), "X.zip")
    with pytest.raises(UserError, match=r"X\.zip\.CHECKSUM must hold '<sha256>  X\.zip'"):
        fetch.parse_checksum(b"nonsense", "X.zip")


# --------------------------------------------------------------------------- against the real data


@pytest.fixture(scope="module")
def real_mirror(shared_data, tmp_path_factory) -> Path:
    """Monthly 2023-02 and dailies 2023-03-01..23 made from the shared Parquet, plus the real
    2023-03-24 archive from binance-raw."""
    m = tmp_path_factory.mktemp("real_mirror")
    feb = store.load_bars(shared_data, start="2023-02-01", end="2023-02-28")
    publish(m, MONTHLY, "BTCUSDT-1m-2023-02", ingest.binance_csv(feb))
    for d in range(1, 24):
        day = dt.date(2023, 3, d).isoformat()
        publish(m, DAILY, f"BTCUSDT-1m-{day}", ingest.binance_csv(store.load_bars(shared_data, start=day, end=day)))
    for f in ("BTCUSDT-1m-2023-03-24.zip", "BTCUSDT-1m-2023-03-24.zip.CHECKSUM"):
        shutil.copy(shared_data / "binance-raw" / f, m / DAILY / f)
    return m


def test_fetch_over_http_equals_shared_parquet(real_mirror, shared_data, serve, tmp_path):
    server = serve(real_mirror)
    root = tmp_path / "store"
    report = fetch_quiet(start="2023-02-15", end="2023-03-24", root=root, base_url=server.url, today=dt.date(2023, 3, 25))
    assert len(report.downloaded) == 1 + 24 and report.cached == [] and report.missing == []
    assert sorted(server.zip_requests())[0] == f"{DAILY}/BTCUSDT-1m-2023-03-01.zip"
    assert f"{MONTHLY}/BTCUSDT-1m-2023-02.zip" in server.zip_requests()
    got = store.load_bars(root)
    want = store.load_bars(shared_data, start="2023-02-15", end="2023-03-24")
    assert store.fingerprint(got) == store.fingerprint(want)  # trimmed to the range, bit-identical
    assert store.gap_table(root).missing.tolist() == [80]
    assert (root / "_archive" / DAILY / "BTCUSDT-1m-2023-03-24.zip").is_file()

    # a second fetch finds every file verified in the cache: no download, nothing changes
    server.requests.clear()
    year_file = store.year_path(root, "BTCUSDT", "1m", 2023)
    before = year_file.stat().st_mtime_ns
    again = fetch_quiet(start="2023-02-15", end="2023-03-24", root=root, base_url=server.url, today=dt.date(2023, 3, 25))
    assert again.downloaded == [] and len(again.cached) == 25
    assert server.requests == []
    assert again.imported.added == {} and year_file.stat().st_mtime_ns == before


def test_unpublished_monthly_falls_back_to_dailies(real_mirror, serve, tmp_path):
    server = serve(real_mirror)
    report = fetch_quiet(start="2023-03-20", end="2023-03-24", root=tmp_path, base_url=server.url, today=dt.date(2023, 4, 2))
    assert f"{MONTHLY}/BTCUSDT-1m-2023-03.zip" in server.requests[0]  # asked for the monthly first (its .CHECKSUM)
    assert [Path(r).name for r in report.downloaded] == [f"BTCUSDT-1m-2023-03-{d}.zip" for d in range(20, 25)]
    assert report.imported.bars_added == 4 * 1440 + 1360


def test_local_folder_and_file_url(real_mirror, shared_data, tmp_path):
    want = store.load_bars(shared_data, start="2023-03-23", end="2023-03-24")
    for i, base in enumerate([real_mirror, real_mirror.as_uri()]):
        root = tmp_path / f"s{i}"
        fetch_quiet(start="2023-03-23", end="2023-03-24", root=root, base_url=base, today=dt.date(2023, 3, 25))
        assert store.fingerprint(store.load_bars(root)) == store.fingerprint(want)


# --------------------------------------------------------------------------- failures (synthetic mirror)


def test_checksum_mismatch_rejected_nothing_imported(tiny_mirror, serve, tmp_path):
    bad = tiny_mirror / DAILY / "BTCUSDT-1m-2024-01-02.zip"
    good_bytes = bad.read_bytes()
    other = synthetic_day(dt.date(2024, 1, 2), seed=99)
    with zipfile.ZipFile(bad, "w") as zf:  # same name, different content, old .CHECKSUM
        zf.writestr("BTCUSDT-1m-2024-01-02.csv", ingest.binance_csv(other))
    server = serve(tiny_mirror)
    root = tmp_path / "s"
    with pytest.raises(UserError, match=r"checksum mismatch for data/spot/daily/klines/BTCUSDT/1m/BTCUSDT-1m-2024-01-02\.zip: \.CHECKSUM says [0-9a-f]{64}, .* \(after 3 attempts\); nothing was imported"):
        fetch_quiet(start="2024-01-01", end="2024-01-03", root=root, base_url=server.url, today=dt.date(2024, 1, 4), retries=2)
    assert store.list_datasets(root) == []
    assert server.zip_requests().count(f"{DAILY}/BTCUSDT-1m-2024-01-02.zip") == 3
    cache = root / "_archive" / DAILY
    assert (cache / "BTCUSDT-1m-2024-01-01.zip").is_file()  # the verified one stays cached
    assert not (cache / "BTCUSDT-1m-2024-01-02.zip").exists()
    # once the mirror is fixed, a rerun downloads only what is missing and imports everything
    bad.write_bytes(good_bytes)
    server.requests.clear()
    report = fetch_quiet(start="2024-01-01", end="2024-01-03", root=root, base_url=server.url, today=dt.date(2024, 1, 4))
    assert [Path(r).name for r in report.cached] == ["BTCUSDT-1m-2024-01-01.zip"]
    assert len(report.downloaded) == 2 and report.imported.bars_added == 180


def test_truncated_download_rejected(tiny_mirror, serve, tmp_path):
    server = serve(tiny_mirror)
    server.truncate.add(f"{DAILY}/BTCUSDT-1m-2024-01-03.zip")
    root = tmp_path / "s"
    with pytest.raises(UserError, match=r"truncated download of .*BTCUSDT-1m-2024-01-03\.zip.*\(after 2 attempts\)"):
        fetch_quiet(start="2024-01-01", end="2024-01-03", root=root, base_url=server.url, today=dt.date(2024, 1, 4), retries=1)
    assert store.list_datasets(root) == []
    assert not (root / "_archive" / DAILY / "BTCUSDT-1m-2024-01-03.zip").exists()


def test_transient_errors_are_retried(tiny_mirror, serve, tmp_path, monkeypatch):
    sleeps = []
    monkeypatch.setattr(fetch.time, "sleep", sleeps.append)
    server = serve(tiny_mirror)
    server.fail_first[f"{DAILY}/BTCUSDT-1m-2024-01-02.zip"] = 2
    server.fail_first[f"{DAILY}/BTCUSDT-1m-2024-01-03.zip.CHECKSUM"] = 1
    report = fetch.fetch(
        start="2024-01-01", end="2024-01-03", root=tmp_path, base_url=server.url, today=dt.date(2024, 1, 4),
        retries=3, backoff=0.5, progress=False,
    )  # fmt: skip
    assert report.retries == 3 and len(report.downloaded) == 3
    assert sleeps == [0.5, 1.0, 0.5]  # exponential backoff per file
    assert report.imported.bars_added == 180


def test_missing_days_are_reported_not_invented(tiny_mirror, serve, tmp_path):
    server = serve(tiny_mirror)
    report = fetch_quiet(start="2024-01-02", end="2024-01-05", root=tmp_path, base_url=server.url, today=dt.date(2024, 1, 9))
    assert [Path(r).name for r in report.missing] == ["BTCUSDT-1m-2024-01-04.zip", "BTCUSDT-1m-2024-01-05.zip"]
    assert report.imported.bars_added == 120
    with pytest.raises(UserError, match=r"holds no BTCUSDT 1m klines between 2024-02-01 and 2024-02-03"):
        fetch_quiet(start="2024-02-01", end="2024-02-03", root=tmp_path, base_url=server.url, today=dt.date(2024, 2, 9))


def test_argument_errors(tiny_mirror, tmp_path):
    kw = dict(root=tmp_path, today=dt.date(2024, 1, 4))
    with pytest.raises(UserError, match=r"--base-url must be http\(s\)://, file:// or a local folder, got 'ftp://x'"):
        fetch_quiet(start="2024-01-01", base_url="ftp://x", **kw)
    with pytest.raises(UserError, match=r"--base-url local folder does not exist: .*nope"):
        fetch_quiet(start="2024-01-01", base_url=tmp_path / "nope", **kw)
    with pytest.raises(UserError, match=r"--end 2023-12-01 is before --start 2024-01-01"):
        fetch_quiet(start="2024-01-01", end="2023-12-01", base_url=tiny_mirror, **kw)
    with pytest.raises(UserError, match=r"--start 2024-01-04 must be before today 2024-01-04"):
        fetch_quiet(start="2024-01-04", base_url=tiny_mirror, **kw)
    with pytest.raises(UserError, match=r"--start must be a date YYYY-MM-DD, got 'soon'"):
        fetch_quiet(start="soon", base_url=tiny_mirror, **kw)


def test_wrong_checksum_name_is_rejected(tiny_mirror, tmp_path):
    ck = tiny_mirror / DAILY / "BTCUSDT-1m-2024-01-01.zip.CHECKSUM"
    ck.write_text(ck.read_text().replace("2024-01-01.zip", "2024-01-09.zip"))
    with pytest.raises(UserError, match=r"BTCUSDT-1m-2024-01-01\.zip\.CHECKSUM must name BTCUSDT-1m-2024-01-01\.zip"):
        fetch_quiet(start="2024-01-01", end="2024-01-01", root=tmp_path, base_url=tiny_mirror, today=dt.date(2024, 1, 4))
    assert store.list_datasets(tmp_path) == []


def test_an_unknown_symbol_is_refused_after_two_requests(tiny_mirror, serve, tmp_path):
    server = serve(tiny_mirror)
    with pytest.raises(UserError, match=r"holds no NOPEUSDT 1m klines between 2023-01-01 and 2024-01-03 \(neither "
                                        r"NOPEUSDT-1m-2023-01\.zip, the range's first archive file, nor "
                                        r"NOPEUSDT-1m-2024-01-03\.zip, its last day, is published\): is NOPEUSDT a "
                                        r"Binance spot pair") as e:
        fetch_quiet(symbol="NOPEUSDT", start="2023-01-01", end="2024-01-03", root=tmp_path, base_url=server.url,
                    today=dt.date(2024, 1, 4))
    assert "\n" not in str(e.value)
    assert server.requests == ["data/spot/monthly/klines/NOPEUSDT/1m/NOPEUSDT-1m-2023-01.zip.CHECKSUM",
                               "data/spot/daily/klines/NOPEUSDT/1m/NOPEUSDT-1m-2024-01-03.zip.CHECKSUM"]


def test_a_range_that_starts_before_the_listing_still_fetches(tiny_mirror, serve, tmp_path):
    server = serve(tiny_mirror)
    report = fetch_quiet(start="2023-12-30", end="2024-01-03", root=tmp_path, base_url=server.url, today=dt.date(2024, 1, 4))
    assert report.imported.bars_added == 180
    assert len(server.requests) > 2  # the monthly 2023-12 and its dailies were looked for, then January's
