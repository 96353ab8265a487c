"""SPEED-Bench's qualitative split (Abramovich et al., arXiv 2604.09557; ``nvidia/SPEED-Bench``, configuration
``qualitative``, split ``test``): 880 prompts, 80 in each of 11 categories chosen for semantic diversity. A row is
``question_id``, ``category``, ``sub_category``, ``turns`` (the user messages; several for a multi-turn row),
``source``, ``src_id``, ``difficulty`` and ``multiturn``.

The published split holds a placeholder in place of the prompt text of rows whose source data set does not allow
redistribution (``turns`` starting with ``PLACEHOLDER``); NVIDIA's ``prepare_data.py`` (NVIDIA/Model-Optimizer,
``examples/specdec_bench``) fetches those sources (one of them, ``cais/hle``, gated) and fills them in. Such a row
is withheld (``WithheldRow``): the task runs the rows that hold their text and says how many it left out; a
resolved file given with ``--data-file speed-bench=PATH`` runs them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaxbench.data.formats import FORMATS, WithheldRow, _need
from relaxbench.data.items import TaskItem
from relaxbench.data.spec_bench import user_turns

PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
RESOLVE = ("the published split withholds their text (a placeholder); resolve it with NVIDIA's prepare_data.py "
           "(NVIDIA/Model-Optimizer examples/specdec_bench) and pass the rows as JSONL with "
           "--data-file speed-bench=PATH")


@FORMATS.register("speed-bench")
def speed_bench(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question_id", "category", "turns")
    turns = user_turns(row, index)
    if any(PLACEHOLDER in turn for turn in turns):
        raise WithheldRow(f"row {index + 1} ({row['question_id']}, from {row.get('source', '?')}) is a placeholder",
                          RESOLVE, str(row["category"]))
    return TaskItem(str(row["question_id"]), turns, category=str(row["category"]), fields=dict(row))
