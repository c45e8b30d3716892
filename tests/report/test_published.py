"""Nothing published changes: every run folder under reports/ that has a results.json rebuilds,
from its stored files, with the numbers it published (issue 57, deliverable 7).

A run folder (one with run.json) is rebuilt from itself; a re-report beside a run (a folder with
results.json and no run.json, made by `tsflash report <run> --out <folder>`) from the nearest
folder above it that holds a run. The report's numbers are computed as `build_report` computes
them and written into a temporary folder (results.json, questions.json, fold_metrics.parquet);
figures and the Markdown and HTML are not drawn, since they hold no number of their own.

Where a folder's published numbers already differed from what the code computed when this test
was written, the differences are frozen in published_departures.json, each group with its reason;
anything else that differs fails. Regenerate the file (after deciding a change is meant) with

    python -m tests.report.test_published --write
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tsflash import atomic
from tsflash.report import questions
from tsflash.report.compute import compute
from tsflash.report.context import caveats, smoke_line, with_caveats
from tsflash.report.outputs import write_all
from tsflash.report.rundata import load_run
from tsflash.report.wording import LEAD_WORDS, sentences

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reports"
DEPARTURES = Path(__file__).with_name("published_departures.json")
RTOL, ATOL = 1e-12, 1e-15  # ATOL only for numbers printed as 0 beside a rounding residue
JSON_FILES = ("results.json", questions.RESULTS_FILE)
FOLD_FILE = "fold_metrics.parquet"

# Why a group of departures exists, by cause; `cause` assigns each departure one of them.
REASONS = {
    "cells only": "The folder keeps its cells' summaries but not their daily series (series/) or per-day loss sums: "
                  "the trading numbers, the selection gates and the paired tests cannot be recomputed from it; its "
                  "fold_metrics.parquet rebuilds unchanged.",
    "trial ledger": "The DSR's trial count comes from the trial ledger (tsflash/stats/trials.toml), which has grown "
                    "since publication by later plans' configurations on the same test days: every number that "
                    "follows the count (SR0, DSR, the pass lines, MinTRL, the gates) moves with it.",
    "probe rows": "The probe baselines of a probe re-report were fitted into a scratch copy of the run "
                  "(lab/probe_rereport.py) and are not stored in the run folder it is rebuilt from.",
    "per-bar parts": "Published from per-bar probabilities (cells/**/*.npz) that are not committed: rebuilt from the "
                     "cell summaries and per-day sums, the direction parts (the decomposition's direction columns, "
                     "the nesting check's split) differ or are absent.",
    "mixed": "questions.json's forecast.mixed now belongs to the answer over training runs; the file was written "
             "before that test, when it held the forecast-level answer's (now forecast.dm_mixed).",
}
# the numbers that follow the DSR's trial count (the "trial ledger" cause)
LEDGER_KEYS = {"n_trials", "sr0", "dsr", "dsr_effective", "passed", "passes_dsr", "min_sharpe_annual",
               "min_sharpe_effective_annual", "min_trl_days", "pass_line_null_annual", "power80_sharpe_annual",
               "power80_sharpe_null_annual", "n_trials_effective"}
COLLAPSE = 12  # more departing numbers than this under one two-level prefix are frozen as a count


def published_folders() -> list[Path]:
    """Every folder under reports/ with a results.json, sorted."""
    return sorted(p.parent for p in REPORTS.rglob("results.json"))


def source_of(folder: Path) -> Path | None:
    """The run folder a report was built from: the folder itself, or the nearest one above it with
    a run.json (a re-report); None where there is none."""
    for p in (folder, *folder.parents):
        if (p / "run.json").exists():
            return p
        if p == REPORTS:
            break
    return None


def rebuild(source: Path, out: Path) -> None:
    """results.json, questions.json and fold_metrics.parquet of `source`, as `build_report` computes
    them, written into `out` (nothing is written into `source`)."""
    rd = load_run(source)
    nums = compute(rd)
    words = with_caveats(sentences(nums), caveats(rd, nums), smoke_line(rd, nums))
    out.mkdir(parents=True, exist_ok=True)
    write_all(rd, nums, words, out)
    atomic.write_json(out / questions.RESULTS_FILE, atomic.json_safe(questions.results(nums, words)))


def numbers(obj, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    """(path, value) of every number, bool and null of a JSON document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from numbers(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from numbers(v, (*path, i))
    elif obj is None or isinstance(obj, (bool, int, float)):
        yield path, obj


def same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))
    return a == b


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(), parse_constant=lambda c: float(c))  # NaN / Infinity as floats


def differences(folder: Path, rebuilt: Path) -> dict[str, dict[str, object]]:
    """{file: {path: [published, rebuilt]}} of every published number the rebuild does not match;
    a path the rebuild lacks reads "missing". Parquet columns: {column: {"rows": k}} rows that differ."""
    out: dict[str, dict[str, object]] = {}
    for name in JSON_FILES:
        if not (folder / name).exists():
            continue
        now = dict(numbers(_read_json(rebuilt / name))) if (rebuilt / name).exists() else {}
        for path, value in numbers(_read_json(folder / name)):
            got = now.get(path, "missing")
            if got == "missing" or not same(value, got):
                out.setdefault(name, {})["/".join(map(str, path))] = [value, got]
    if (folder / FOLD_FILE).exists():
        was, now = pq.read_table(folder / FOLD_FILE).to_pylist(), pq.read_table(rebuilt / FOLD_FILE).to_pylist()
        columns = list(was[0]) if was else []
        for col in columns:
            if len(was) != len(now):
                rows = max(len(was), len(now))
            else:
                rows = sum(not same(a.get(col), b.get(col, "missing")) for a, b in zip(was, now, strict=True))
            if rows:
                out.setdefault(FOLD_FILE, {})[col] = {"rows": rows}
    return out


LEADS: dict[str, list[str]] = {}  # each rebuilt source's two lead sentences, for the test of their length


def measure(folders: list[Path]) -> dict[str, dict]:
    """{folder relative to the repository: differences} for every folder, each source rebuilt once."""
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        built: dict[Path, Path] = {}
        for folder in folders:
            source = source_of(folder)
            key = folder.relative_to(REPO).as_posix()
            if source is None:
                found[key] = {"*": {"*": "no run folder to rebuild from"}}
                continue
            if source not in built:
                built[source] = Path(tmp) / str(len(built))
                rebuild(source, built[source])
                answers = _read_json(built[source] / questions.RESULTS_FILE)
                LEADS[source.relative_to(REPO).as_posix()] = [answers[q]["lead"] for q in ("forecast", "trading")]
            if diff := differences(folder, built[source]):
                found[key] = diff
    return found


def cause(folder: str, name: str, path: str) -> str | None:
    """The REASONS key of one departure, or None (an unexplained difference)."""
    source = source_of(REPO / folder)
    if source is not None and not (source / "series").is_dir():
        return "cells only"
    if folder.endswith("-probe") and (name == FOLD_FILE or path.startswith(("baselines/baseline-probe-", "probe/",
                                                                             "trading/rows/"))):
        return "probe rows"
    key = next((part for part in reversed(path.split("/")) if not part.isdigit() and part != "*"), path)
    if key in LEDGER_KEYS:
        return "trial ledger"
    if path.startswith(("forecast/decomposition/", "nesting/", "forecast/nesting/")):
        return "per-bar parts"
    if path == "forecast/mixed":
        return "mixed"
    return None


def collapsed(found: dict[str, dict]) -> dict[str, dict]:
    """`found` with every two-level prefix of more than COLLAPSE departing numbers in one file
    replaced by "<prefix>/*": {"numbers": k}."""
    out: dict[str, dict] = {}
    for folder, files in found.items():
        for name, paths in files.items():
            prefix = {p: "/".join(p.split("/")[:2]) for p in paths}
            counts: dict[str, int] = {}
            for p in paths:
                counts[prefix[p]] = counts.get(prefix[p], 0) + 1
            entries = out.setdefault(folder, {}).setdefault(name, {})
            for p, value in paths.items():
                if name != FOLD_FILE and counts[prefix[p]] > COLLAPSE:
                    entries[prefix[p] + "/*"] = {"numbers": counts[prefix[p]]}
                else:
                    entries[p] = value
    return out


def grouped(found: dict[str, dict]) -> list[dict]:
    """The departures as groups of one reason each: {"cause", "reason", "folders": {folder: {file: {path: ...}}}}."""
    groups: dict[str, dict] = {}
    missing = []
    for folder, files in sorted(collapsed(found).items()):
        for name, paths in sorted(files.items()):
            for path, value in sorted(paths.items()):
                why = cause(folder, name, path)
                if why is None:
                    missing.append(f"{folder} {name} {path}: {value}")
                    continue
                g = groups.setdefault(why, {"cause": why, "reason": REASONS[why], "folders": {}})
                g["folders"].setdefault(folder, {}).setdefault(name, {})[path] = value
    if missing:
        raise SystemExit("departures with no cause:\n" + "\n".join(missing[:50])
                         + (f"\n... and {len(missing) - 50} more" if len(missing) > 50 else ""))
    return sorted(groups.values(), key=lambda g: g["cause"])


def frozen() -> dict[str, dict]:
    """published_departures.json as {folder: {file: {path: value}}}."""
    out: dict[str, dict] = {}
    for g in json.loads(DEPARTURES.read_text())["groups"]:
        for folder, files in g["folders"].items():
            for name, paths in files.items():
                out.setdefault(folder, {}).setdefault(name, {}).update(paths)
    return out


def _matches(want, got, why: str | None) -> bool:
    """A frozen departure matches: the same published number and the same rebuilt one; for the trial
    ledger's numbers, the published one only (the ledger grows with every plan that runs)."""
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got) == 2:
        return same(want[0], got[0]) and (why == "trial ledger" or same(want[1], got[1]))
    return want == got


FOLDERS = published_folders()
# a sparse checkout without the published folders (only CI's full clone must have them)
needs_reports = pytest.mark.skipif(not (REPORTS / "h200-btcusdt-1m-second-edition" / "results.json").exists(),
                                   reason="the published run folders are not checked out")


@needs_reports
@pytest.mark.slow  # all the published folders, each run's numbers once: about 15 s on 2 cores
def test_every_published_folder_rebuilds_with_its_numbers():
    assert len(FOLDERS) >= 70, "the published run folders and their re-reports"
    found, expected = collapsed(measure(FOLDERS)), frozen()
    unexpected = {}
    for folder in sorted(set(found) | set(expected)):
        got, want = found.get(folder, {}), expected.get(folder, {})
        for name in sorted(set(got) | set(want)):
            g, w = got.get(name, {}), want.get(name, {})
            for path in sorted(set(g) | set(w)):
                if not _matches(w.get(path), g.get(path), cause(folder, name, path)):
                    unexpected[f"{folder} {name} {path}"] = {"frozen": w.get(path), "now": g.get(path)}
    assert not unexpected, json.dumps(dict(list(unexpected.items())[:20]), indent=1)
    # every published run, rebuilt, leads each question with one sentence of at most 40 words
    assert len(LEADS) >= 60
    long = {k: lead for k, leads in LEADS.items() for lead in leads if len(lead.split()) > LEAD_WORDS}
    assert not long, long


@needs_reports
def test_every_frozen_departure_has_a_reason():
    groups = json.loads(DEPARTURES.read_text())["groups"]
    assert [g["cause"] for g in groups] == sorted({g["cause"] for g in groups}), "one group per cause"
    for g in groups:
        assert g["reason"] == REASONS[g["cause"]] and g["folders"], g["cause"]
        for folder, files in g["folders"].items():
            assert (REPO / folder / "results.json").exists(), folder
            for name, paths in files.items():
                assert all(cause(folder, name, p) == g["cause"] for p in paths), (folder, name)


@needs_reports
def test_a_re_report_is_rebuilt_from_the_run_above_it():
    nested = [f for f in FOLDERS if not (f / "run.json").exists()]
    assert nested, "the committed re-reports"
    for folder in nested:
        assert source_of(folder) == folder.parent, folder


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python -m tests.report.test_published --write", file=sys.stderr)
        return 2
    groups = grouped(measure(FOLDERS))
    atomic.write_json(DEPARTURES, {"rtol": RTOL, "atol": ATOL, "groups": groups}, end="\n")
    n = sum(len(p) for g in groups for files in g["folders"].values() for p in files.values())
    print(f"{DEPARTURES.name}: {len(groups)} groups, {n} departures, {len(FOLDERS)} folders")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
