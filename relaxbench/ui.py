"""Terminal output: rich consoles that stay readable when piped (no truncated names in a 80-column default)."""

from __future__ import annotations

import shutil
from typing import Any

from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A console; when the output is not a terminal, wide enough that tables do not truncate names."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else max(160, shutil.get_terminal_size((160, 24)).columns)
    return Console(stderr=stderr, width=width)


def progress_bars(**options: Any) -> Any:
    """The one progress display of the commands, on stderr: description, bar, done/total, elapsed and ETA.
    ``options`` go to ``rich.progress.Progress`` (e.g. ``speed_estimate_period`` for items that take minutes)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(), console=console(stderr=True), **options)
