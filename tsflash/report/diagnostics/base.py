"""What every report diagnostic provides (`Diagnostic`), and the section the report lays out from it.

A diagnostic owns its numbers (`compute`, from the run's data and the numbers computed before it,
with the statistics of `tsflash.stats`), its table (`rows`), its sentences (`sentences`) and what
results.json holds of it (`to_json`). `placement` says where the report shows it: OWN, under its own
heading in question 1's section, after the baselines; RUNS, inside question 1's "Over training runs"
(its bold sentences after the runs' table, its notes after theirs); TRADING, after question 2's
trading rule (its notes after the trial count's).
"""

from __future__ import annotations

from typing import Any, Protocol

OWN, RUNS, TRADING = "own", "runs", "trading"


class Diagnostic(Protocol):
    @property
    def name(self) -> str:
        """Its key in `Numbers.diagnostics`, in the context and in results.json."""
        ...

    @property
    def heading(self) -> str:
        """Its heading in the report (OWN)."""
        ...

    @property
    def placement(self) -> str:
        """OWN, RUNS or TRADING."""
        ...

    def compute(self, rd: Any, nums: Any) -> Any:
        """Its numbers, from the run's data (`RunData`) and the report's numbers so far (`Numbers`)."""
        ...

    def rows(self, numbers: Any) -> dict | None:
        """Its table ({"header": [...], "rows": [[...]]}), or None."""
        ...

    def sentences(self, numbers: Any) -> dict[str, list[str]]:
        """{"lead": bold sentences before the table, "after": bold ones after it, "notes": plain ones}."""
        ...

    def to_json(self, numbers: Any) -> dict | None:
        """What results.json holds under `name`, or None (nothing)."""
        ...


def section(d: Diagnostic, numbers: Any) -> dict:
    """The context of one diagnostic: its heading, placement, sentences and table; `shown` when it
    has a sentence or a table to show."""
    words = d.sentences(numbers)
    out: dict[str, Any] = {
        "name": d.name,
        "heading": d.heading,
        "placement": d.placement,
        "table": d.rows(numbers),
        "lead": [t for t in words.get("lead", []) if t],
        "after": [t for t in words.get("after", []) if t],
        "notes": [t for t in words.get("notes", []) if t],
    }
    out["shown"] = bool(out["lead"] or out["table"] or out["after"] or out["notes"])
    return out
