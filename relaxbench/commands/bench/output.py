"""What the benchmarks print: tables in the one table model (``relaxbench.report.tables``), rendered by the
report's terminal renderer with every column (a benchmark's columns are all its figures), and its verdicts.

The table model is imported inside each helper: it reads the analysis layer (scipy, torch), which only a running
benchmark needs, not ``relaxbench --help`` or a refused flag."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relaxbench.report.tables import Cell, Table


def text(value: str) -> Cell:
    from relaxbench.report.tables import Cell

    return Cell(value)


def figure(value: str) -> Cell:
    """A right-aligned figure."""
    from relaxbench.report.tables import Cell

    return Cell(value, numeric=True)


def verdict(holds: bool | None, unchecked: str = "-") -> Cell:
    """'yes', 'NO' (red in a terminal) or ``unchecked`` when the row is not held to a target."""
    from relaxbench.report.tables import Cell

    if holds is None:
        return figure(unchecked)
    return Cell("yes" if holds else "NO", numeric=True, alert=not holds)


def table(key: str, title: str, columns: tuple[str, ...], rows: list[tuple[Cell, ...]], note: str = "") -> Table:
    """A benchmark table: one row per line of figures, keyed by its first cell."""
    from relaxbench.report.tables import Row, Table

    return Table(key, title, columns, tuple(Row(cells[0].text, cells) for cells in rows), note)


def print_table(shown: Table) -> None:
    """Every column, on stdout (as wide as it needs when piped; a terminal wraps what does not fit)."""
    from relaxbench.report.terminal import print_table as render
    from relaxbench.ui import console

    render(shown, console(), wide=True)
