"""Scoring: answer extraction, sandboxed code execution, agreement with the AR output. Importing this package
registers every built-in scorer."""

from relaxbench.scoring import agreement, answers, code  # noqa: F401  (registration)
from relaxbench.scoring.base import SCORERS, Score, Scorer, ScoringContext, make_scorer, register_scorer

__all__ = ["SCORERS", "Score", "Scorer", "ScoringContext", "make_scorer", "register_scorer"]
