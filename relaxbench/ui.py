"""Terminal output: rich consoles that stay readable when piped (no truncated names in a 80-column default)."""

from __future__ import annotations

import shutil

from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A console; when the output is not a terminal, wide enough that tables do not truncate names."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else max(160, shutil.get_terminal_size((160, 24)).columns)
    return Console(stderr=stderr, width=width)
