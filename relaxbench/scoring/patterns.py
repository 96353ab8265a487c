"""Regex answer extraction and exact match, with lm-eval's semantics, configured per task.

lm-eval's ``regex`` filter: ``findall`` the pattern, take the match at ``group_select`` (0 = first, -1 = last);
a match with several groups gives its first non-empty group; no match gives ``[invalid]``. Its ``exact_match``
metric then deletes each ``regexes_to_ignore`` pattern from prediction and reference, lower-cases both
(``ignore_case``), removes ASCII punctuation (``ignore_punctuation``) and compares the strings. Tasks set these
as in their lm-eval YAML: GSM8K chain-of-thought (``gsm8k_cot``, FLy's ``gsm8k_cot_llama``) and MGSM's
native-language chain-of-thought tasks (one "answer is" phrase per language) are configurations of this scorer.
Both filters lm-eval reports (``strict-match``, ``flexible-extract``) are stored; ``primary`` picks the score.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import field_validator

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.thinking import split_thinking
from relaxbench.validation import Flag, Spec, Text

FALLBACK = "[invalid]"
ANY_NUMBER = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"  # lm-eval's flexible-extract: the last number-like run
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def extract(pattern: re.Pattern[str], text: str, select: Literal["first", "last"]) -> str:
    """lm-eval's ``regex`` filter: the selected match (its first non-empty group), stripped; FALLBACK if none."""
    matches = pattern.findall(text)
    if not matches:
        return FALLBACK
    match = matches[0 if select == "first" else -1]
    if isinstance(match, tuple):
        match = next((group for group in match if group), FALLBACK)
    return match.strip()


def regex_text(value: str) -> str:
    """``value`` when it compiles as a regular expression (a validation error otherwise)."""
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"is not a regular expression ({exc})") from None
    return value


class PatternArgs(Spec):
    """The extraction and comparison of one task (lm-eval YAML names in comments)."""

    strict: Text  # the strict-match filter's regex_pattern
    strict_select: Literal["first", "last"] = "first"  # its group_select: 0 or -1
    flexible: Text = ANY_NUMBER  # the flexible-extract filter's regex (last match)
    ignore: tuple[Text, ...] = ()  # the metric's regexes_to_ignore
    ignore_case: Flag = True
    ignore_punctuation: Flag = False
    primary: Literal["strict", "flexible"] = "strict"
    strip_thinking: Flag = False  # read only the text after a reasoning model's thinking

    @field_validator("strict", "flexible")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return regex_text(value)

    @field_validator("ignore")
    @classmethod
    def _ignores_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(regex_text(pattern) for pattern in value)


@register_scorer
class PatternScorer(Scorer):
    """Pass when the extracted answer equals the reference after lm-eval's normalisation; both extractions and
    the normalised strings are stored, with why the primary one failed."""

    name = "answer-match"
    summary = "lm-eval regex extraction (strict pattern, flexible last number) and normalised exact match"
    Args = PatternArgs
    detail_metrics = ("strict_match", "flexible_match")

    def normalize(self, text: str) -> str:
        for pattern in self.args.ignore:
            text = re.sub(pattern, "", text)
        if self.args.ignore_case:
            text = text.lower()
        if self.args.ignore_punctuation:
            text = text.translate(_PUNCTUATION)
        return text

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        details: dict[str, object] = {}
        if self.args.strip_thinking:
            split = split_thinking(text)
            text = split.answer
            details.update(split.details())
        reference = self.normalize(item.reference or "")
        answers = {"strict": extract(re.compile(self.args.strict), text, self.args.strict_select),
                   "flexible": extract(re.compile(self.args.flexible), text, "last")}
        matched = {kind: self.normalize(answer) == reference for kind, answer in answers.items()}
        primary = self.args.primary
        if matched[primary]:
            why = f"{primary} answer {answers[primary]!r} equals the reference"
        elif answers[primary] == FALLBACK:
            why = f"no {primary} answer: the pattern found nothing"
        else:
            why = f"{primary} answer {answers[primary]!r} ≠ reference {item.reference!r} after normalisation"
        details.update(reference=item.reference, normalized_reference=reference, strict_answer=answers["strict"],
                       flexible_answer=answers["flexible"], strict_match=matched["strict"],
                       flexible_match=matched["flexible"], primary=primary, why=why)
        return Score(float(matched[primary]), matched[primary], details)

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        primary = details.get("primary", self.args.primary)
        return details.get("thinking") != "unclosed" and details.get(f"{primary}_answer") not in (None, FALLBACK)
