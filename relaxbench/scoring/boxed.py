"""Integer final answers from ``\\boxed{}`` (AIME), as Xia et al. score them, with nested braces handled.

Xia et al. (``relaxed-spec-dec-repro`` ``tasks/aime_2024.py``), after the thinking is removed: (1) the boxes from
last to first, the last integer in the first box that holds one; (2) else the first of the markers "Therefore,
the final answer is:", "Final answer:", "Answer:" that matches, the last integer after it; (3) else the last
integer in the text. Both sides are normalised (commas dropped, a sign and digits only, leading zeros stripped,
at most three digits) and compared as strings, so "025" equals "25".

One deviation, by default: their box pattern ``\\\\boxed\\{([^{}]+)\\}`` cannot match a box with braces inside
(``\\boxed{\\text{25}}``, ``\\boxed{{25}}``), which then falls through to the markers; here a box's contents are
read with balanced braces. ``boxes: flat`` restores their pattern exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.thinking import split_thinking
from relaxbench.validation import Flag, Integer, Spec

FLAT_BOX = re.compile(r"\\boxed\{([^{}]+)\}")
BOX_START = re.compile(r"\\boxed\s*\{")
MARKERS = (re.compile(r"Therefore, the final answer is:\s*(.+)", re.IGNORECASE),
           re.compile(r"Final answer:\s*(.+)", re.IGNORECASE),
           re.compile(r"Answer:\s*(.+)", re.IGNORECASE))
INTEGER = re.compile(r"[-+]?\d+")


def boxed_contents(text: str, braces: Literal["balanced", "flat"] = "balanced") -> list[str]:
    """The contents of every ``\\boxed{...}`` in order; ``balanced`` reads nested braces, ``flat`` only boxes
    without inner braces (Xia et al.'s pattern). An unclosed box is left out."""
    if braces == "flat":
        return FLAT_BOX.findall(text)
    out = []
    for start in BOX_START.finditer(text):
        depth, i = 1, start.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[start.end():i - 1])
    return out


def normalize_integer(value: object, max_digits: int = 3) -> str | None:
    """'025' → '25', '-0' → '0', '1,000' → None with three digits allowed; None for anything not an integer."""
    if value is None:
        return None
    text = str(value).strip().replace(",", "")
    if not re.fullmatch(r"[-+]?\d+", text):
        return None
    negative = text.startswith("-")
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > max_digits:
        return None
    return f"-{digits}" if negative and digits != "0" else digits


def last_integer(text: str, max_digits: int) -> str | None:
    found = INTEGER.findall(text)
    return normalize_integer(found[-1], max_digits) if found else None


def extract_integer(text: str, braces: Literal["balanced", "flat"] = "balanced",
                    max_digits: int = 3) -> tuple[str | None, str]:
    """(the answer, where it came from: 'boxed', 'marker', 'last integer' or 'none')."""
    for box in reversed(boxed_contents(text, braces)):
        answer = last_integer(box, max_digits)
        if answer is not None:
            return answer, "boxed"
    for marker in MARKERS:
        match = marker.search(text)
        if match is not None:
            answer = last_integer(match.group(1), max_digits)
            if answer is not None:
                return answer, "marker"
    answer = last_integer(text, max_digits)
    return answer, "last integer" if answer is not None else "none"


class BoxedArgs(Spec):
    boxes: Literal["balanced", "flat"] = "balanced"  # flat: Xia et al.'s exact box pattern
    max_digits: Integer = 3  # AIME answers are 0..999
    strip_thinking: Flag = True


@register_scorer
class BoxedIntegerScorer(Scorer):
    """Pass when the integer extracted from the answer (after the thinking) equals the reference integer."""

    name = "boxed-integer"
    summary = "last \\boxed{} integer (else answer markers, else the last integer), compared as an integer (AIME)"
    Args = BoxedArgs

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        split = split_thinking(text) if self.args.strip_thinking else None
        answer_text = split.answer if split is not None else text
        reference = normalize_integer(item.reference, self.args.max_digits)
        answer, source = extract_integer(answer_text, self.args.boxes, self.args.max_digits)
        passed = reference is not None and answer == reference
        if passed:
            why = f"{source} answer {answer} equals the reference"
        elif split is not None and split.thinking == "unclosed":
            why = "the output ended inside its thinking: no answer"
        elif answer is None:
            why = "no integer found after the thinking"
        else:
            why = f"{source} answer {answer} ≠ reference {reference}"
        details: dict[str, object] = {"reference": reference, "answer": answer, "source": source, "why": why}
        if split is not None:
            details.update(split.details())
        return Score(float(passed), passed, details)

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return details.get("thinking") != "unclosed" and details.get("answer") is not None
