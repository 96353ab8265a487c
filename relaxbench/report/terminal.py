"""The report's tables in the terminal (rich): what ``relaxbench compare`` prints at the end and ``relaxbench
summary`` prints from a stored run. The same ``Table`` objects as the HTML and the PDF, so every count reads the
same everywhere. By default a table shows its essential columns and fits ``TERMINAL_WIDTH`` columns (a line under it
names the columns left out); ``wide`` shows every column. After a run's own tables come the speed-against-concurrency
tables of the runs that differ from it only in concurrency, when the store holds any."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text

from relaxbench.report.tables import Table, task_tables

TERMINAL_WIDTH = 120  # a default terminal table is never wider
WIDE_FLAG = "--wide"
UNBOUNDED = 100_000  # the width a --wide table is measured at when the output is a file or a pipe


def header(name: str) -> str:
    """A column name as a terminal header: an interval's bracket (" [95% CI]") on a line of its own, so the column
    is as wide as its figures rather than its name."""
    head, bracket, tail = name.partition(" [")
    return f"{head}\n[{tail}" if bracket else name


def rich_table(table: Table) -> RichTable:
    """``table`` as a rich table: the title above, the note as its caption, the first column (the arm) and the
    table's ``unbroken`` ones never wrapped, numeric columns right-aligned, the AR row bold, an alert cell red.
    Text is never read as markup (arm names carry ``[knob=value]``)."""
    out = RichTable(title=escape(table.title), title_justify="left", caption=escape(table.note) or None,
                    caption_justify="left")
    for i, name in enumerate(table.columns):
        numeric = any(row.cells[i].numeric for row in table.rows if i < len(row.cells))
        out.add_column(escape(header(name)), justify="right" if numeric else "left",
                       no_wrap=i == 0 or name in table.unbroken)
    for row in table.rows:
        out.add_row(*(Text(cell.text, style="red" if cell.alert else "") for cell in row.cells),
                    style="bold" if row.emphasis else None)
    return out


def hidden_line(table: Table) -> str:
    """The line under a narrowed table: which columns it leaves out, and how to see them ('' when none)."""
    hidden = table.hidden()
    if not hidden:
        return ""
    return f"Not shown to fit {TERMINAL_WIDTH} columns: {', '.join(hidden)} ({WIDE_FLAG} shows every column)."


def print_table(table: Table, console: Console, wide: bool = False) -> None:
    """One table: its essential columns within ``TERMINAL_WIDTH`` columns (and the line naming those left out), or
    with ``wide`` every column, as wide as they need when the output is not a terminal (a terminal wraps them)."""
    if wide:
        shown = rich_table(table)
        if console.is_terminal:  # the terminal's width: rich wraps what does not fit
            console.print(shown)
            return
        natural = Measurement.get(console, console.options.update_width(UNBOUNDED), shown).maximum
        width = console.width
        console.width = max(width, natural)  # a file or a pipe: as wide as the table needs, nothing wrapped
        try:
            console.print(shown)
        finally:
            console.width = width
        return
    console.print(rich_table(table.narrow()), width=min(console.width, TERMINAL_WIDTH))
    line = hidden_line(table)
    if line:
        console.print(line, width=min(console.width, TERMINAL_WIDTH), style="dim", markup=False, highlight=False)


def print_run(path: str | Path, console: Console, run_id: int | None = None, profiles: Sequence[str] = (),
              wide: bool = False, agree: Sequence[tuple[str, str]] = ()) -> None:
    """Every task's tables of the stored run at ``path`` (a run folder or its results.sqlite), with a proxy column
    per cost profile (``profiles``; default: this-machine and those recorded with the run) and the agreement of the
    pairs of arms in ``agree`` and of those a rule declares, then, when the store holds runs that differ from it only
    in concurrency, the speed-against-concurrency tables; ``wide``: every column."""
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.agreement import run_agreements
    from relaxbench.analysis.concurrency import concurrency_points, concurrency_runs
    from relaxbench.analysis.drafters import run_drafter_gains
    from relaxbench.analysis.proxy import choose_profiles
    from relaxbench.report.concurrency import concurrency_tables

    run = load_run(path, run_id)
    agreements = run_agreements(run, agree)
    chosen = choose_profiles(run, profiles).profiles
    summaries = summarize_run(run, chosen)
    gains = run_drafter_gains(run, summaries, chosen)
    for summary in summaries:
        for table in task_tables(summary, agreements.get(summary.task, ()), gains.get(summary.task, ())):
            print_table(table, console, wide)
    for table in concurrency_tables(concurrency_points(concurrency_runs(path, run))):
        print_table(table, console, wide)
