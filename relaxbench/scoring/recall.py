"""Needle-in-a-haystack recall (RULER, Hsieh et al. 2404.06654): the share of the hidden values the answer names.

RULER's ``string_match_all`` (``scripts/eval/synthetic/constants.py``): per item, the number of gold values that
occur in the prediction as case-insensitive substrings, divided by the number of values: partial credit, so the
score is not pass/fail. The prediction is stripped and its control characters are replaced by newlines first (its
``evaluate.py``). The all-values rate (every value recalled) is stored as a detail metric.
"""

from __future__ import annotations

import re

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer

CONTROL = re.compile(r"[\x00-\x1f]")


@register_scorer
class RecallScorer(Scorer):
    """Score = share of the item's ``outputs`` found in the answer (RULER's string_match_all)."""

    name = "recall-all"
    summary = "share of the hidden values found in the answer (RULER string_match_all, partial credit)"
    detail_metrics = ("all_found",)

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        prediction = CONTROL.sub("\n", text.strip()).lower()
        values = [str(v) for v in item.fields.get("outputs", [])]
        found = [v for v in values if v.lower() in prediction]
        share = len(found) / len(values) if values else 0.0
        missing = [v for v in values if v not in found]
        return Score(share, None, {"found": len(found), "of": len(values), "missing": missing,
                                   "all_found": float(len(found) == len(values) and bool(values)),
                                   "why": f"{len(found)} of {len(values)} values recalled"})
