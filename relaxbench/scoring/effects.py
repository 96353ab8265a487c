"""ACPBench Hard's progression task (Kokel et al. 2503.24378): an action's positive and negative effects as two
bracketed lists of ground atoms, "[(holding key0-0)] [(arm-empty), (at key0-0 f0-1f)]".

Scored as lm-eval's ``acp_prog_gen`` (``acpbench/gen_2shot/acp_utils.py``): a response naming "positive effects"
and "negative effects" without brackets is rewritten into the bracket form; then the lists are read; one list
only counts as an empty second list; each side is compared with the gold atoms as a set, lower-cased; the score is
1 only when both sides are equal. lm-eval reads the lists with a Lark grammar and error recovery; this is a
tolerant regular-expression reader of the same shapes (atoms "(name arg ...)", lists in square brackets, anything
else ignored), so responses that only the grammar's recovery repairs (an unclosed last bracket is closed here
too) may be read differently in edge cases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer

LIST = re.compile(r"\[([^\[\]]*)(?:\]|$)")
ATOM = re.compile(r"\(\s*([a-zA-Z][a-zA-Z0-9_-]*(?:\s+[a-zA-Z][a-zA-Z0-9_-]*)*)\s*\)")


def rewrite_headings(text: str) -> str:
    """lm-eval's rewrite of "**Positive Effects**: ... **Negative Effects**: ..." into "[ ... ] [ ... ]"."""
    lowered = text.lower()
    if "positive effects" in lowered and "negative effects" in lowered and "[" not in text:
        lowered = lowered.replace("*", "").replace("positive effects", "[").replace("negative effects", "] [")
        return lowered + "]"
    return text


def atoms(text: str) -> list[str]:
    """'(at k1 d2), (hand-free)' → ['(at k1 d2)', '(hand-free)'] (lower case, single spaces)."""
    return ["(" + " ".join(m.group(1).lower().split()) + ")" for m in ATOM.finditer(text)]


def read_lists(text: str) -> list[list[str]] | None:
    """The bracketed atom lists of a response (None when there is none)."""
    text = rewrite_headings(text.replace("\n", " "))
    lists = [atoms(body) for body in LIST.findall(text)]
    return lists or None


@register_scorer
class ProgressionScorer(Scorer):
    """Pass when the positive and the negative effects both equal the gold atoms as sets."""

    name = "acp-progression"
    summary = "two bracketed atom lists (positive, negative effects) equal the gold lists as sets (ACPBench)"

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        gold = item.fields.get("answer") or {}
        want = {side: {_clean(atom) for atom in gold.get(key, [])} for side, key in (("positive", "pos"),
                                                                                   ("negative", "neg"))}
        lists = read_lists(text)
        if lists is None or len(lists) > 2:
            why = "no bracketed list found" if lists is None else f"{len(lists)} lists, expected two"
            return Score(0.0, False, {"positive": None, "negative": None, "why": why})
        got = {"positive": set(lists[0]), "negative": set(lists[1]) if len(lists) == 2 else set()}
        wrong = [side for side in ("positive", "negative") if got[side] != want[side]]
        passed = not wrong
        why = "both lists equal the gold effects" if passed else f"{' and '.join(wrong)} effects differ"
        return Score(float(passed), passed, {"positive": sorted(got["positive"]), "negative": sorted(got["negative"]),
                                             "lists_found": len(lists), "why": why})

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return details.get("positive") is not None


def _clean(atom: str) -> str:
    return " ".join(atom.lower().split())
