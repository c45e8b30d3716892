"""Markdown and HTML from the one report context, through the jinja2 templates in templates/."""

from __future__ import annotations

import base64
import functools
import re
from pathlib import Path

import jinja2


def _md_cell(value) -> str:
    return str(value).replace("|", "\\|")  # a bare | would end the Markdown table cell


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tsflash.report", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,  # a context key the template misspells is an error, not a blank
    )
    env.filters["md_cell"] = _md_cell
    env.filters["data_uri"] = _data_uri
    return env


def render(context: dict, template: str) -> str:
    """`template` is "report.md.j2" or "report.html.j2"; runs of blank lines are collapsed to one."""
    text = environment().get_template(template).render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
