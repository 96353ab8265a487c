"""Behaviour stays: on the fixture store (tests/report_fixture.py), ``relaxbench summary`` (narrow and ``--wide``)
and every table, definition, notice and summary line of the report are what the code printed before the metric
schema replaced the hand-kept column lists. The expected copies in tests/data/tables_before/ were captured from that
code; the tables added since (``ADDED``: acceptance by category) are left out of the comparison, every other table
must read as it did. A change to what a table says is deliberate only when they are regenerated with

    python tests/test_tables_unchanged.py
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = ROOT / "tests" / "data" / "tables_before"
FILES = ("summary.txt", "summary_wide.txt", "report.json")
# tables added after the capture, by the end of their key / the start of their title after "TASK: "
ADDED = {"-acceptance-categories": "acceptance by category", "-acceptance-positions": "acceptance by draft position"}
# the store stamps sessions with the time the fixture was written: not part of what a table says
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(\+00:00|Z)?")


def _number(value: float | None) -> float | None:
    """A figure at 10 significant digits: the last bits of a float sum may differ between CPUs."""
    return None if value is None else float(f"{float(value):.10g}")


def _table(table: Any) -> dict[str, Any] | None:
    if table is None:
        return None
    return {"key": table.key, "title": table.title, "columns": list(table.columns), "note": table.note,
            "essential": list(table.essential),
            "rows": [{"key": r.key, "emphasis": r.emphasis,
                      "cells": [[c.text, c.metric, _number(c.value), _number(c.low), _number(c.high), c.numeric,
                                 c.alert] for c in r.cells]} for r in table.rows]}


def without_added(text: str) -> str:
    """The terminal output less the blocks of the tables in ``ADDED`` (a block runs from its title line, the line
    above a table's top border, to the next title line)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i in range(len(lines) - 1) if lines[i + 1].startswith("┏")] + [len(lines)]
    kept = lines[:starts[0]]
    for start, end in zip(starts, starts[1:]):
        title = lines[start].split(": ", 1)[-1]
        if not any(title.startswith(words) for words in ADDED.values()):
            kept += lines[start:end]
    return "".join(kept)


def capture(run_dir: Path) -> dict[str, str]:
    """What the commands and the report say about the run in ``run_dir``: file name → text."""
    from relaxbench.cli import main
    from relaxbench.report.content import load_report

    out = {}
    for name, flags in (("summary.txt", []), ("summary_wide.txt", ["--wide"])):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["summary", str(run_dir), *flags]) == 0
        out[name] = without_added(buffer.getvalue())
    report = load_report(run_dir)
    document = {
        "title": report.title, "run_key": report.run_key, "budget": report.budget,
        "summary_lines": list(report.summary_lines), "summary_table": _table(report.summary_table),
        "tasks": [{"task": t.task, "description": t.description, "scorer": t.scorer, "n_units": t.n_units,
                   "headline": t.headline,
                   "tables": [_table(x) for x in t.tables if not x.key.endswith(tuple(ADDED))],
                   "notices": [[n.level, n.text] for n in t.notices]} for t in report.tasks],
        "methods_table": _table(report.methods_table), "setup_table": _table(report.setup_table),
        "tasks_table": _table(report.tasks_table), "environment_table": _table(report.environment_table),
        "sessions_table": _table(report.sessions_table), "profiles_table": _table(report.profiles_table),
        "notices": [[n.level, n.text] for n in report.notices], "definitions": [list(d) for d in report.definitions],
        "sections": [list(s) for s in report.sections],
    }
    out["report.json"] = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    return {name: TIMESTAMP.sub("<time>", text) for name, text in out.items()}


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, str]:
    from tests.report_fixture import build_fixture_run

    return capture(build_fixture_run(tmp_path_factory.mktemp("unchanged") / "fixture"))


@pytest.mark.parametrize("name", FILES)
def test_summary_and_report_tables_are_unchanged(captured, name):
    expected = (EXPECTED / name).read_text()
    assert captured[name] == expected, (f"{name} differs from tests/data/tables_before/{name}; if the change is "
                                        "deliberate, retake the baselines with `make baselines` (and say so in "
                                        "CHANGELOG.md)")


def regenerate() -> None:
    import tempfile

    from tests.report_fixture import build_fixture_run

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in capture(build_fixture_run(Path(tmp) / "fixture")).items():
            (EXPECTED / name).write_text(text)
            print(f"wrote {(EXPECTED / name).relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    regenerate()
