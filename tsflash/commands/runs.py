"""`tsflash runs`: the run folders under runs/ (or --root), newest first, one line each: when it
was made, its config, N, finished or not, and its answer line (from questions.json once the
report is written). Reads run.json, config.json and questions.json only: no torch, nothing written.

    tsflash runs
    tsflash runs --root reports
"""

from __future__ import annotations

from pathlib import Path

from tsflash.runfolder import DEFAULT_RUNS_ROOT, DamagedFile, RunFolder, iter_run_folders, read_json

HEADER = ("run", "created (UTC)", "config", "lengths", "status", "answer")


def register(sub) -> None:
    p = sub.add_parser(
        "runs",
        help="list past runs under runs/: date, config, lengths, finished or not, answer",
        description="List the sweep run folders under --root, newest first.",
    )
    p.add_argument("--root", type=Path, default=DEFAULT_RUNS_ROOT, help="folder of run folders (default: %(default)s)")
    p.set_defaults(func=run)


DAMAGED = "damaged"  # a file there but not valid JSON: the listing says so rather than guess


def _read(path: Path) -> dict:
    """The JSON file at `path`; {} when it is missing or unreadable, {DAMAGED: name} when it is not JSON."""
    try:
        return read_json(path)
    except OSError:
        return {}
    except DamagedFile:
        return {DAMAGED: path.name}


def read_questions(folder: RunFolder) -> dict:
    """questions.json as the report wrote it: both answers as words and sentences; {} before the report exists."""
    return _read(folder.root / "questions.json")


def answer_sentences(folder: RunFolder) -> list[str]:
    """Question 1's and question 2's lead sentences, one line each, from questions.json (the whole
    sentence where a report was written before the leads); [] before the report exists."""
    questions = read_questions(folder)
    if not questions:
        return []
    if DAMAGED in questions:
        return [f"{folder.root / questions[DAMAGED]} is damaged: not valid JSON (`tsflash report` rewrites it)"]
    forecast, trading = questions.get("forecast", {}), questions.get("trading", {})
    return [
        f"question 1 (forecasting): {forecast.get('lead') or forecast.get('sentence') or '-'}",
        f"question 2 (trading): {trading.get('lead') or trading.get('sentence') or '-'}",
    ]


def answer_line(folder: RunFolder) -> str:
    """'forecast: worse; trading: no' from questions.json; '-' before the report exists."""
    questions = read_questions(folder)
    if not questions:
        return "-"
    if DAMAGED in questions:
        return f"{DAMAGED} {questions[DAMAGED]}"
    trading = questions.get("trading", {})
    traded = trading.get("answer") or ("yes" if trading.get("passed") else "no")
    return f"forecast: {questions.get('forecast', {}).get('answer') or '-'}; trading: {traded}"


def run_row(folder: RunFolder) -> list[str]:
    meta, cfg = _read(folder.run_json), _read(folder.config_json)
    name = f"{DAMAGED} {cfg[DAMAGED]}" if DAMAGED in cfg else cfg.get("name", "?")
    status = meta.get("status", "?")
    status = "finished" if status == "complete" else f"unfinished ({folder.n_finished_cells()} cells trained)"
    if DAMAGED in meta:
        status = f"{DAMAGED} {meta[DAMAGED]} ({folder.n_finished_cells()} cells trained)"
    created = str(meta.get("created", "?")).replace("T", " ")[:16]
    lengths = ",".join(map(str, meta.get("lengths", []))) or "?"
    return [folder.root.name, created, name, lengths, status, answer_line(folder)]


def format_table(rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(str(r[i])) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *rows]
    )


def run(args) -> int:
    rows = [run_row(f) for f in iter_run_folders(args.root)]
    if not rows:
        print(f"no runs under {args.root}/ yet: `tsflash sweep --lengths 512,4096,32768` makes one")
        return 0
    print(format_table(rows))
    return 0
