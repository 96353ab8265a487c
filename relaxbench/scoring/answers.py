"""Answer extraction for short-answer tasks: GSM8K's numbers (strict and flexible, as lm-eval does) and
normalised exact match against a reference."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.validation import Spec

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")  # the answer line the prompt asks for
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")  # any number; the last one counts


def normalize_number(text: str) -> str:
    """'$1,234.50.' → '1234.5'; non-numbers are returned stripped."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return cleaned
    return str(int(value)) if value.is_integer() else repr(value)


def strict_answer(text: str) -> str | None:
    match = STRICT.search(text)
    return normalize_number(match.group(1)) if match else None


def flexible_answer(text: str) -> str | None:
    matches = [m.group(0) for m in FLEXIBLE.finditer(text)]
    numbers = [normalize_number(m) for m in matches if any(c.isdigit() for c in m)]
    return numbers[-1] if numbers else None


@register_scorer
class Gsm8kScorer(Scorer):
    """Pass when the extracted number equals the reference. Both extractions are stored; ``primary`` picks the
    one that is the score (default flexible: instruct models rarely keep the '#### N' format exactly)."""

    name = "gsm8k"
    summary = "number after '#### ' (strict) or last number (flexible) equals the reference"
    detail_metrics = ("strict_match", "flexible_match")

    class Args(Spec):
        primary: Literal["strict", "flexible"] = "flexible"

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        reference = normalize_number(item.reference or "")
        strict, flexible = strict_answer(text), flexible_answer(text)
        results = {"strict": strict == reference, "flexible": flexible == reference}
        passed = results[self.args.primary]
        return Score(float(passed), passed, {"reference": reference, "strict_answer": strict,
                                             "flexible_answer": flexible, "strict_match": results["strict"],
                                             "flexible_match": results["flexible"]})

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return details.get(f"{self.args.primary}_answer") is not None

    def outcome(self, item: TaskItem, score: Score) -> Any:
        """The extracted answer itself (AutoJudge's GSM8K rule compares answers, not correctness)."""
        return score.details.get(f"{self.args.primary}_answer")


def normalize_text(text: str) -> str:
    return " ".join(text.strip().casefold().split())


@register_scorer
class ExactMatchScorer(Scorer):
    """Pass when the output equals the reference after case folding and whitespace normalisation."""

    name = "exact-match"
    summary = "output equals the reference (case and whitespace normalised)"

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        passed = normalize_text(text) == normalize_text(item.reference or "")
        return Score(float(passed), passed, {"reference": item.reference})
