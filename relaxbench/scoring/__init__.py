"""Scoring: answer extraction, sandboxed code execution and agreement with the AR output, per sample. Importing this
package registers every built-in per-sample scorer; the grading protocols (scorers that an LLM grader runs after
generation) are ``relaxbench.grading``, which registers them here when imported (``relaxbench.tasks`` does)."""

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
    livecodebench,
    patterns,
    recall,
    refusal,
)
from relaxbench.scoring.base import SCORERS, Score, Scorer, ScoringContext, register_scorer


def make_scorer(name: str, args: Mapping[str, Any] | None = None) -> Scorer:
    """A scorer by registered name, its arguments validated."""
    return SCORERS.get(name)(args)


__all__ = ["SCORERS", "Score", "Scorer", "ScoringContext", "make_scorer", "register_scorer"]
