"""Tables as text: the one rule for a table's cells and the one Markdown renderer.

`table` is a table as the report's jinja2 macros take it (header and cells as text); the
report's sections build theirs with it. `markdown_table` writes a table as Markdown, the
format of those macros (`| a | b |`, then `|---|` per column), for the tables the bench
publishes (reports/bench/*.md) and the FP8 oracle's; `format_cell` is how a measured value
becomes a cell ("-" where there is none), for those and for the bench's plain-text tables.
Standard library only: the bench imports it without the report's dependencies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def format_cell(value, spec: str = "", scale: float = 1.0) -> str:
    """One cell: "-" for a missing value (None); a number (times `scale`) in the format `spec`
    ("" = as text); anything else as text."""
    if value is None:
        return "-"
    if spec and isinstance(value, (int, float)):
        return format(value * scale if scale != 1 else value, spec)
    return str(value)


def table(header: list[str], rows: Iterable[Iterable]) -> dict:
    """{"header": header, "rows": every cell as text}: a table for the report's templates."""
    return {"header": header, "rows": [[str(c) for c in r] for r in rows]}


def markdown_table(header: Sequence, rows: Iterable[Sequence]) -> str:
    """The Markdown text of a table (no newline at the end): the header line, a `|---|` rule
    per column, a line per row. Cells are written as text with a bare | escaped (it would end
    the cell), as the report's templates write theirs; None is an empty cell, `| |` (an empty
    string keeps the usual padding, `|  |`)."""
    return "\n".join([_line(header), "|" + "---|" * len(header), *(_line(r) for r in rows)])


def _line(cells: Sequence) -> str:
    return "|" + "|".join(" " if c is None else f" {_escape(c)} " for c in cells) + "|"


def _escape(cell) -> str:
    return str(cell).replace("|", "\\|")  # a bare | would end the cell
