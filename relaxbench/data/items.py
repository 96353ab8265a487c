"""One problem of a task, in the shape every scorer and the runner understand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskItem:
    """One problem. ``turns`` are the user messages before templating (two for MT-Bench, one elsewhere)."""

    item_id: str
    turns: tuple[str, ...]
    reference: str | None = None  # expected answer (GSM8K's number, a JSONL reference)
    test: str | None = None  # code run after the completion (code tasks)
    entry_point: str | None = None  # the function the tests call (HumanEval, JSONL)
    code_prefix: str | None = None  # code the completion continues (HumanEval's signature and docstring)
    category: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)  # the raw row, for prompt templates
