"""Terminal output: rich consoles that stay readable when piped (no truncated names in a 80-column default), and
progress that a log can follow (a line per finished step with elapsed time and ETA where bars cannot redraw)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A console; when the output is not a terminal, wide enough that tables do not truncate names."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else max(160, shutil.get_terminal_size((160, 24)).columns)
    return Console(stderr=stderr, width=width)


def stderr_is_terminal() -> bool:
    """Whether progress goes to a terminal (bars) or to a file or a pipe (lines)."""
    return Console(stderr=True).is_terminal


def clock(seconds: float) -> str:
    """``H:MM:SS``, as rich's bars show elapsed time and ETA."""
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass
class Eta:
    """Elapsed time and the time left of a count of steps. The speed is that of the steps finished since the
    count started: steps already done when a run resumes count toward the total, not toward the speed."""

    total: int = 0
    done: int = 0
    resumed: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, total: int, done: int = 0) -> None:
        self.total += total
        self.done += done
        self.resumed += done

    def step(self, n: int = 1) -> None:
        self.done += n

    def text(self) -> str:
        """``elapsed H:MM:SS, eta H:MM:SS`` (``eta -`` before the first step of this session)."""
        elapsed = time.monotonic() - self.started
        new, left = self.done - self.resumed, max(0, self.total - self.done)
        eta = clock(elapsed * left / new) if new > 0 else ("0:00:00" if left == 0 else "-")
        return f"elapsed {clock(elapsed)}, eta {eta}"


def plain(markup: str) -> str:
    """A bar's description without its rich markup ("[bold]items" → "items")."""
    from rich.text import Text

    return Text.from_markup(markup).plain


@dataclass
class _LineTask:
    description: str
    total: int
    completed: int
    eta: Eta


class LineProgress:
    """The calls the commands make on ``rich.progress.Progress``, printed as one line per advanced step (its
    description, done/total, elapsed time and ETA) on stderr: bars only redraw in a terminal, so a log would
    otherwise show nothing until the end. Setting ``completed`` directly (a bar within a step) prints nothing."""

    def __init__(self, out: Console | None = None) -> None:
        self.console = out or console(stderr=True)
        self.tasks: dict[int, _LineTask] = {}

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **_: Any) -> int:
        task_id = len(self.tasks)
        eta = Eta()
        eta.add(int(total or 0), int(completed))
        self.tasks[task_id] = _LineTask(plain(description), int(total or 0), int(completed), eta)
        return task_id

    def update(self, task_id: int, *, total: float | None = None, completed: float | None = None,
               advance: float | None = None, description: str | None = None, **_: Any) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task.description = plain(description)
        if total is not None:
            task.eta.total += int(total) - task.total
            task.total = int(total)
        if completed is not None:
            task.completed = int(completed)
        if advance:
            self.advance(task_id, advance)

    def advance(self, task_id: int, advance: float = 1) -> None:
        task = self.tasks[task_id]
        task.completed += int(advance)
        task.eta.step(int(advance))
        self.console.print(f"{task.description}: {task.completed}/{task.total}, {task.eta.text()}", markup=False,
                           highlight=False, soft_wrap=True)

    def remove_task(self, task_id: int) -> None:
        self.tasks.pop(task_id, None)


def progress_bars(**options: Any) -> Any:
    """The one progress display of the commands, on stderr: in a terminal, rich's bars (description, bar,
    done/total, elapsed and ETA; ``options`` go to ``rich.progress.Progress``, e.g. ``speed_estimate_period`` for
    items that take minutes); otherwise a ``LineProgress``, a line per finished step."""
    if not stderr_is_terminal():
        return LineProgress()
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
