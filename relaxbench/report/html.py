"""The HTML report: one self-contained file (jinja2 template shipped as package data, figures inline as SVG, CSS
inline, no script, nothing fetched over the network)."""

from __future__ import annotations

from pathlib import Path

import jinja2

from relaxbench import __version__
from relaxbench.report.content import Report


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("relaxbench.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False)


def render_html(report: Report) -> str:
    return _environment().get_template("report.html.j2").render(report=report, version=__version__)


def write_html(report: Report, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report), encoding="utf-8")
    return path
