"""The contract of a *graded* scorer: a task's grading protocol, run by an LLM grader after generation
(``relaxbench.grading.step``) rather than per sample.

A graded scorer builds the request the grader is sent for one (item, turn) of one arm (``request``) and reads the
grader's verdict text back (``parse_verdict``: its rating and score, or ``UNPARSEABLE``). The grading phase stays
the same for every protocol — requests deduplicated and cached by hash, verdicts stored as they arrive — so a new
protocol (MT-Bench's rating in ``llm_grader.py``, the refusal classification in ``refusal_grader.py``) is one
subclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext

UNPARSEABLE = -1.0  # the rating of a verdict the protocol cannot read: stored and counted, left out of every average


@dataclass(frozen=True)
class GradingRequest:
    """What is sent to the grader for one (item, turn) of one arm: the protocol's prompt name, the chat messages,
    and the answers being graded (part of the cache key)."""

    prompt_name: str
    messages: tuple[Mapping[str, str], ...]
    answers: tuple[str, ...]


class GradedScorer(Scorer):
    """A grading protocol (a task's ``grader:``): requests out, verdicts in. It never scores inline."""

    graded = True

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        raise NotImplementedError(f"{self.name} grades after generation (relaxbench.grading.step), not per sample")

    def check_items(self, items: Sequence[TaskItem]) -> None:
        """Raise a one-line ``DataError`` when something the items need is missing (before any generation)."""

    def request(self, item: TaskItem, turn: int, answers: Sequence[str]) -> GradingRequest | None:
        """The grader request for ``turn`` of ``item`` given the arm's answers to turns 1..turn+1 (``answers``);
        None when the protocol grades no such turn."""
        raise NotImplementedError

    def parse_verdict(self, verdict: str) -> tuple[float, float | None]:
        """(rating, score) of a verdict text: the score is a fraction (shown ×100 as points), None with the rating
        ``UNPARSEABLE`` when the verdict cannot be read."""
        raise NotImplementedError
