"""Scoring: answer extraction, sandboxed code execution, agreement with the AR output, and grading by an LLM grader
(the protocols ``llm_grader`` and ``refusal_grader``, run by the graders of ``graders``). Importing this package
registers every built-in scorer and grader."""

from collections.abc import Mapping
from typing import Any

from relaxbench.scoring import (  # noqa: F401  (registration)
    agreement,
    answers,
    boxed,
    choices,
    code,
    effects,
    evalplus,
    graders,
    livecodebench,
    llm_grader,
    patterns,
    recall,
    refusal,
    refusal_grader,
)
from relaxbench.scoring.base import SCORERS, Score, Scorer, ScoringContext, register_scorer


def make_scorer(name: str, args: Mapping[str, Any] | None = None) -> Scorer:
    """A scorer by registered name, its arguments validated."""
    return SCORERS.get(name)(args)


__all__ = ["SCORERS", "Score", "Scorer", "ScoringContext", "make_scorer", "register_scorer"]
