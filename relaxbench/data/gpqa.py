"""GPQA (Rein et al. 2311.12022) as four-way multiple choice with shuffled options.

The shuffle is the one Xia et al. use (``graphcore-research/relaxed-spec-dec-repro`` ``scripts/prepare_data.py``,
which follows lm-eval's ``gpqa`` ``process_docs``): one ``random.Random(0)`` walks the split's rows in order and
shuffles ``[incorrect 1, incorrect 2, incorrect 3, correct]`` for each. Row i's order therefore depends only on
its position, so it is fixed per item: the format replays the i earlier shuffles (a shuffle of four consumes the
same randomness whatever the four are) instead of keeping state between rows.

Rows already prepared that way (``choices`` and ``answer`` "(B)") are taken as they are.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from functools import cache
from typing import Any

from relaxbench.data.formats import FORMATS, _need
from relaxbench.data.items import TaskItem
from relaxbench.errors import DataError

LETTERS = "ABCD"
SHUFFLE_SEED = 0


@cache
def _orders(seed: int, count: int) -> tuple[tuple[int, ...], ...]:
    """The permutation applied to rows 0..count-1 (indices into [inc1, inc2, inc3, correct])."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        order = [0, 1, 2, 3]
        rng.shuffle(order)
        out.append(tuple(order))
    return tuple(out)


def shuffled_choices(row: Mapping[str, Any], index: int, seed: int = SHUFFLE_SEED) -> tuple[list[str], str]:
    """(the four options in shown order, the gold letter) for the index-th row of the split."""
    raw = [row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"], row["Correct Answer"]]
    order = _orders(seed, index + 1)[index]
    choices = [str(raw[i]) for i in order]
    return choices, LETTERS[order.index(3)]


@FORMATS.register("gpqa")
def gpqa(row: Mapping[str, Any], index: int) -> TaskItem:
    """``Idavidrein/gpqa`` rows (``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``), or
    prepared rows (``question``, ``choices``, ``answer`` "(X)")."""
    if "choices" in row:
        _need(row, index, "question", "choices", "answer")
        choices = [str(c) for c in row["choices"]]
        letter = str(row["answer"]).strip().strip("()").upper()
        item_id = str(row.get("sample_id", row.get("id", index)))
        question = str(row["question"])
    else:
        _need(row, index, "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
              "Incorrect Answer 3")
        choices, letter = shuffled_choices(row, index)
        item_id = str(row.get("Record ID") or f"gpqa-{index:03d}")
        question = str(row["Question"])
    if len(choices) != 4 or letter not in LETTERS:
        raise DataError(f"row {index + 1}: need four choices and an answer letter A-D")
    fields = {"question": question, "choices": choices, "answer": f"({letter})"}
    return TaskItem(item_id, (question,), reference=letter, fields=fields)
