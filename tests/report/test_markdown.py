"""tsflash.report.markdown: the one Markdown table renderer and cell rule, the same text as the
report's jinja2 table macro."""

from __future__ import annotations

from tsflash.report.markdown import format_cell, markdown_table, table
from tsflash.report.render import environment


def test_markdown_table_writes_a_header_a_rule_per_column_and_a_line_per_row():
    text = markdown_table(["N", "step ms", "note"], [[512, "13.4", ""], ["all", None, "a|b"]])
    assert text == "| N | step ms | note |\n|---|---|---|\n| 512 | 13.4 |  |\n| all | | a\\|b |"
    assert markdown_table(["only"], []) == "| only |\n|---|"


def test_markdown_table_is_the_text_of_the_reports_table_macro():
    t = table(["configuration", "log-loss"], [["N=512", 1.0426], ["N=4096", "1.0401 ± 0.002"]])
    macro = environment().from_string('{% import "macros.md.j2" as m %}{{ m.table(t) }}').render(t=t)
    assert macro.strip() == markdown_table(t["header"], t["rows"])
    assert t["rows"][0] == ["N=512", "1.0426"]  # every cell as text


def test_format_cell():
    assert format_cell(None, ".2f") == "-"
    assert format_cell(0.01234, ".1f", 1e3) == "12.3"
    assert format_cell(0.4567, ".1%") == "45.7%" and format_cell(131072, ".4g") == "1.311e+05"
    assert format_cell("flash", ".2f") == "flash" and format_cell(3) == "3"
