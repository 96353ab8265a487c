"""The scorer interface: one generated text (one turn of one item) in, a ``Score`` out.

A score is a number (``value``, higher is better), a pass/fail flag when the metric is binary (``passed``, used
for McNemar's test), and JSON-able ``details`` (what was extracted, why a program failed, secondary metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from relaxbench.data.items import TaskItem
from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate


@dataclass(frozen=True)
class Score:
    value: float
    passed: bool | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoringContext:
    """What a scorer may read beyond the text: the AR arm's output for the same item and turn (None when scoring
    the AR arm itself) and the target's mean log-likelihood of this output (computed on demand)."""

    turn_index: int
    baseline_text: str | None = None
    mean_logprob: Callable[[], float] | None = None


class NoArgs(Spec):
    """A scorer without arguments."""


class Scorer:
    """Subclasses set ``name``, ``summary`` and implement ``score``; ``Args`` (a ``Spec``) validates the task's
    ``scorer_args`` into ``self.args``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Args: ClassVar[type[Spec]] = NoArgs
    needs_baseline: ClassVar[bool] = False  # reads the AR arm's text
    needs_logprob: ClassVar[bool] = False  # reads the target's log-likelihood of the output
    detail_metrics: ClassVar[tuple[str, ...]] = ()  # keys of ``details`` that summaries average
    # what the score measures: "capability" (how good the answer is) or "fidelity" (how close it stays to the AR
    # output); a rule is ranked within a capability-loss budget by capability only
    measure: ClassVar[str] = "capability"
    # graded after generation by an LLM grader given on the command line (a task's ``grader:``), not per sample
    graded: ClassVar[bool] = False
    # where the task's grader classifies what this scorer classifies (refusal), a grader's verdict stands in for the
    # scorer's own classifier and ``score_verdict`` gives the sample's score; otherwise a grader's verdict is the
    # score itself (MT-Bench's rating)
    scores_verdicts: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | Spec | None = None) -> None:
        self.args: Any = args if isinstance(args, self.Args) else self.check_args(args)

    @classmethod
    def check_args(cls, args: Mapping[str, Any] | None, where: str = "") -> Spec:
        """``args`` validated (one-line errors name ``where``, e.g. the task file, and the scorer)."""
        prefix = f"{where}: " if where else ""
        return validate(cls.Args, dict(args or {}), f"{prefix}scorer {cls.name!r}", "argument")

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        raise NotImplementedError

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        """Whether the scorer found an answer in the output it scored (``details`` as stored): False for "no
        answer" (nothing extracted, or the output ended inside its thinking), None where the scorer has no notion
        of an answer (agreement with AR, a judge). Read from stored details, so every stored run has it."""
        return False if details.get("thinking") == "unclosed" else None

    def score_verdict(self, rating: float | None, grader: str, details: Mapping[str, Any]) -> Score:
        """The score of a sample classified by a grader (``scores_verdicts``): ``rating`` as the task's graded scorer
        parsed the verdict (None when there is no usable verdict: then only the returned details are read, and the
        sample has no score), ``grader`` the grader's name for the details' label, ``details`` the sample's stored
        details (its own classifier's)."""
        raise NotImplementedError(f"scorer {self.name!r} does not score a grader's verdicts")

    # -- what mining a trained judge's labels reads (relaxbench judge mine) ---------------------------------------
    def has_outcome(self, item: TaskItem) -> bool:
        """Whether scores of ``item`` carry an automatic outcome (pass/fail, an extracted answer); agreement with
        the AR output is not one."""
        return not self.needs_baseline

    def outcome(self, item: TaskItem, score: Score) -> Any:
        """The part of a score that must stay the same for a changed answer to count as the same result: pass/fail
        by default (AutoJudge's rule for code); None when there is none."""
        return score.passed

    def settled(self, item: TaskItem, text: str) -> bool:
        """True when no continuation of ``text`` can change its score (a closed code block the scorer extracts),
        so a generation scored only for its outcome may stop there. False unless a scorer knows better."""
        return False


SCORERS: Registry[type[Scorer]] = Registry("scorer", "relaxbench.scorers")


def register_scorer(cls: type[Scorer]) -> type[Scorer]:
    SCORERS.add(cls.name, cls)
    return cls
