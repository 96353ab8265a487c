"""Multiple-choice letters from free text (GPQA), as Xia et al. extract them.

After the thinking is removed (``relaxed-spec-dec-repro`` ``tasks/gpqa_diamond.py``): (1) the last
``\\boxed{X}`` (also ``\\boxed{\\text{(X)}}``, ``\\boxed{X.}``); (2) else the last "final answer / correct answer /
answer" followed by "is", ":" or "=" and the letter (so "The answer is (C)" and "Answer: C"); (3) else the last
parenthesised letter anywhere. Letters are A-D, case-insensitive; the answer is compared with the gold letter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.thinking import split_thinking
from relaxbench.validation import Flag, Spec

BOXED = re.compile(r"\\boxed\{\s*(?:\\(?:text|mathrm)\{\s*)?\(?\s*([A-D])(?:\s*\)|[.)])?[^{}]*(?:\})?\s*\}",
                   re.IGNORECASE)
STATED = re.compile(r"(?:final\s+answer|correct\s+answer|answer)\s*(?:is|:|=)\s*(?:\*\*)?\(?\s*([A-D])\s*\)?",
                    re.IGNORECASE)
PARENTHESISED = re.compile(r"\(([A-D])\)", re.IGNORECASE)
RULES = (("boxed", BOXED), ("stated answer", STATED), ("last parenthesised letter", PARENTHESISED))


def extract_choice(text: str) -> tuple[str | None, str]:
    """(the letter, upper case, or None; which rule found it)."""
    for rule, pattern in RULES:
        found = pattern.findall(text)
        if found:
            return found[-1].upper(), rule
    return None, "none"


class ChoiceArgs(Spec):
    strip_thinking: Flag = True


@register_scorer
class ChoiceScorer(Scorer):
    """Pass when the extracted letter (A-D) is the item's gold letter."""

    name = "choice-letter"
    summary = "letter A-D from \\boxed{X}, else 'answer is (X)', else the last '(X)'; equals the gold letter (GPQA)"
    Args = ChoiceArgs

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        split = split_thinking(text) if self.args.strip_thinking else None
        letter, rule = extract_choice(split.answer if split is not None else text)
        gold = (item.reference or "").strip().strip("()").upper()
        passed = letter is not None and letter == gold
        if passed:
            why = f"({letter}) by {rule} is the gold letter"
        elif split is not None and split.thinking == "unclosed":
            why = "the output ended inside its thinking: no answer"
        elif letter is None:
            why = "no choice letter found"
        else:
            why = f"({letter}) by {rule} ≠ gold ({gold})"
        details: dict[str, object] = {"answer": letter, "gold": gold, "rule": rule, "why": why}
        if split is not None:
            details.update(split.details())
        return Score(float(passed), passed, details)

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return details.get("thinking") != "unclosed" and details.get("answer") is not None
