"""``--items``: which of a task's items to mine, so mining and evaluation items can be kept disjoint.

A selection is a comma-separated list of parts, each either a half-open range of positions in the task's item
order (``20:40``, ``20:``, ``:10``; 0-based, as Python slices) or an item id (``HumanEval/7``). Parts are joined
in the task's order, without repeats.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from relaxbench.data.items import TaskItem
from relaxbench.errors import ConfigError
from relaxbench.registry import did_you_mean

RANGE = re.compile(r"^(\d*):(\d*)$")


def select_items(items: Sequence[TaskItem], spec: str | None, limit: int | None = None) -> list[TaskItem]:
    """The items ``spec`` names (all when None), in the task's order, then the first ``limit`` of them."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    chosen = list(range(len(items))) if spec is None else _positions(items, spec)
    picked = [items[i] for i in chosen]
    return picked[:limit] if limit else picked


def _positions(items: Sequence[TaskItem], spec: str) -> list[int]:
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    if not parts:
        raise ConfigError("--items is empty (give ranges like 20:40 or item ids)")
    index = {item.item_id: i for i, item in enumerate(items)}
    chosen: set[int] = set()
    for part in parts:
        match = RANGE.match(part)
        if match:
            start = int(match.group(1)) if match.group(1) else 0
            stop = int(match.group(2)) if match.group(2) else len(items)
            if start >= stop or start >= len(items):
                raise ConfigError(f"--items {part}: an empty range (the task has {len(items)} items, positions "
                                  f"0..{len(items) - 1})")
            chosen.update(range(start, min(stop, len(items))))
        elif part in index:
            chosen.add(index[part])
        else:
            raise ConfigError(f"--items: no item {part!r} in the task{did_you_mean(part, list(index))} (give "
                              "ranges of positions like 20:40, or item ids)")
    return sorted(chosen)
