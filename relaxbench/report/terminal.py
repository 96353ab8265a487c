"""The report's tables in the terminal (rich): what ``relaxbench compare`` prints at the end and ``relaxbench
summary`` prints from a stored run. The same ``Table`` objects as the HTML and the PDF, so every count reads the
same everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from relaxbench.report.tables import Table, task_tables


def rich_table(table: Table) -> RichTable:
    """``table`` as a rich table: the title above, the note as its caption, the first column (the arm) never
    wrapped, numeric columns right-aligned, the AR row bold. Text is escaped (arm names carry ``[knob=value]``)."""
    out = RichTable(title=escape(table.title), title_justify="left", caption=escape(table.note) or None,
                    caption_justify="left")
    for i, name in enumerate(table.columns):
        numeric = any(row.cells[i].numeric for row in table.rows if i < len(row.cells))
        out.add_column(escape(name), justify="right" if numeric else "left", no_wrap=i == 0)
    for row in table.rows:
        out.add_row(*(escape(cell.text) for cell in row.cells), style="bold" if row.emphasis else None)
    return out


def print_run(path: str | Path, console: Console, run_id: int | None = None, profiles: Sequence[str] = ()) -> None:
    """Every task's tables of the stored run at ``path`` (a run folder or its results.sqlite), with a proxy column
    per cost profile (``profiles``; default: this-machine and those recorded with the run)."""
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.proxy import choose_profiles

    run = load_run(path, run_id)
    for summary in summarize_run(run, choose_profiles(run, profiles).profiles):
        for table in task_tables(summary):
            console.print(rich_table(table))
