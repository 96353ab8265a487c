"""Row formats: how one raw row of each data set becomes a ``TaskItem``. One function per format, registered."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from relaxbench.data.items import TaskItem
from relaxbench.errors import DataError
from relaxbench.registry import Registry

RowFormat = Callable[[Mapping[str, Any], int], TaskItem]
FORMATS: Registry[RowFormat] = Registry("row format", "relaxbench.formats")


def _need(row: Mapping[str, Any], index: int, *keys: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DataError(f"row {index + 1} has no field {', '.join(repr(k) for k in missing)} "
                        f"(its fields: {', '.join(sorted(map(str, row))) or 'none'})")


@FORMATS.register("humaneval")
def humaneval(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "task_id", "prompt", "test", "entry_point")
    return TaskItem(str(row["task_id"]), (str(row["prompt"]),), test=str(row["test"]),
                    entry_point=str(row["entry_point"]), code_prefix=str(row["prompt"]), fields=dict(row))


@FORMATS.register("mbpp")
def mbpp(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "task_id", "test_list")
    text = row.get("text", row.get("prompt"))
    if text is None:
        raise DataError(f"row {index + 1} has neither 'text' nor 'prompt'")
    tests = [str(t) for t in row["test_list"]]
    setup = str(row.get("test_setup_code") or "")
    fields = {**row, "tests": "\n".join(tests)}
    return TaskItem(str(row["task_id"]), (str(text),), test=(setup + "\n" if setup else "") + "\n".join(tests),
                    fields=fields)


GSM8K_ANSWER = re.compile(r"####\s*(-?[0-9.,]+)")


@FORMATS.register("gsm8k")
def gsm8k(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question", "answer")
    answer = str(row["answer"])
    match = GSM8K_ANSWER.search(answer)
    reference = match.group(1).replace(",", "").rstrip(".") if match else answer.strip()
    return TaskItem(str(row.get("id", index)), (str(row["question"]),), reference=reference, fields=dict(row))


@FORMATS.register("mt-bench")
def mt_bench(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question_id", "turns")
    turns = row["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise DataError(f"row {index + 1}: 'turns' must be a non-empty list of strings")
    return TaskItem(str(row["question_id"]), tuple(turns), category=row.get("category"), fields=dict(row))


@FORMATS.register("jsonl")
def jsonl(row: Mapping[str, Any], index: int) -> TaskItem:
    """A user's file: ``prompt`` (a string, or a list of user turns) and optional ``id``, ``reference``,
    ``test`` (code run after the completion), ``entry_point``, ``category``."""
    _need(row, index, "prompt")
    prompt = row["prompt"]
    turns = (prompt,) if isinstance(prompt, str) else tuple(prompt) if isinstance(prompt, list) else None
    if not turns or not all(isinstance(t, str) for t in turns):
        raise DataError(f"row {index + 1}: 'prompt' must be a string or a non-empty list of strings")
    optional = {key: (None if row.get(key) is None else str(row[key]))
                for key in ("reference", "test", "entry_point", "category")}
    return TaskItem(str(row.get("id", index)), turns, fields=dict(row), **optional)
