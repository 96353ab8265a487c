"""Spec-Bench (Xia et al., ACL Findings 2024; hemingkx/Spec-Bench ``data/spec_bench/question.jsonl``): 480
questions in six subtasks, MT-Bench's 80 two-turn questions and 80 each of translation, summarization, QA, math
reasoning and RAG. A row is ``question_id``, ``category``, ``turns`` (the user messages) and, for some,
``reference``.

The item's category is the subtask Spec-Bench reports speed and acceptance by (``evaluation/speed.py``): MT-Bench's
eight categories (writing, roleplay, ...) read as one, ``mt_bench``; the row's own category stays in the fields
(``category``) for a prompt template. A two-turn question is a two-turn conversation (the arm answers turn 1, then
turn 2 with its own first answer in the context), as Spec-Bench's ``evaluation/eval.py`` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaxbench.data.formats import FORMATS, _need
from relaxbench.data.items import TaskItem
from relaxbench.errors import DataError

# evaluation/speed.py's mt_bench_list: the rows of these categories are Spec-Bench's MT-Bench subtask
MT_BENCH_CATEGORIES = frozenset({"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                                 "humanities"})
MT_BENCH = "mt_bench"


def user_turns(row: Mapping[str, Any], index: int) -> tuple[str, ...]:
    """The row's ``turns`` as user messages: a non-empty list of non-empty strings."""
    turns = row["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise DataError(f"row {index + 1}: 'turns' must be a non-empty list of non-empty strings")
    return tuple(turns)


def subtask(category: str) -> str:
    """The Spec-Bench subtask of a row's category."""
    return MT_BENCH if category in MT_BENCH_CATEGORIES else category


@FORMATS.register("spec-bench")
def spec_bench(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question_id", "category", "turns")
    category = str(row["category"])
    return TaskItem(str(row["question_id"]), user_turns(row, index), category=subtask(category), fields=dict(row))
