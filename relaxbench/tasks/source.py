"""The one interface between a task and the harness: ``TaskSource``.

A source says what its items are, what identifies it (stored with every cell and hashed into the run key), how
answers are generated (max new tokens, stop strings, and its own sampling when it has one), how a prompt is
tokenized for the target, how an answer is scored, and whether it is scored by the target's likelihoods alone
(then no rule can change a score, and the harness scores each item once, in the AR cell).

Sources are found by the prefix of a task name: ``lm_eval:gsm8k`` is the ``lm_eval`` loader's (a plug-in,
registered through the entry-point group ``relaxbench.task_sources``); a name without a prefix is one of
relaxbench's own YAML tasks (``yaml_tasks``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from relaxbench.data.items import TaskItem
from relaxbench.ops.sampling_params import SamplingParams
from relaxbench.registry import Registry
from relaxbench.scoring.base import Score, Scorer


@dataclass(frozen=True)
class Generation:
    """How a task's answers are generated, the same for every arm. ``sampling`` is the task's own decoding setting
    (an lm-eval task's generation kwargs); None means the run's (--temperature/--top-k/--top-p)."""

    max_new_tokens: int
    stop: tuple[str, ...] = ()
    sampling: SamplingParams | None = None


class TaskSource(ABC):
    """One compare task. ``likelihood_only`` tasks are answered by the target's likelihoods (``score_likelihoods``);
    the others by generation (``encode`` a prompt, generate, ``scorer().score`` the text)."""

    name: str
    items: tuple[TaskItem, ...]
    fingerprint: str  # a hash of the whole data set: a changed data file is noticed on resume
    scorer_name: str
    likelihood_only: bool = False
    truncates_prompts: bool = False  # a prompt too long for the context keeps its last tokens instead of refused

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """What identifies the task (stored as the cells' task record; part of the run key)."""

    @abstractmethod
    def generation(self) -> Generation:
        """Generation settings (for a likelihood-only task, those of the cells' records)."""

    @abstractmethod
    def scorer(self) -> Scorer:
        """The scorer of a generated answer."""

    @abstractmethod
    def encode(self, target: Any, item: TaskItem, turn: int, history: Sequence[str], max_new_tokens: int) -> list[int]:
        """Prompt ids of ``turn`` of ``item`` for ``target`` (a loaded model), after this arm's own answers to the
        earlier turns (``history``), leaving room for ``max_new_tokens`` where the source keeps prompts short."""

    def item_sampling(self, item: TaskItem) -> SamplingParams | None:
        """The task's own sampling for ``item`` when it varies by item (MT-Bench's temperature per category);
        None: the task's ``generation().sampling`` or the run's applies."""
        return None

    def grader_scorer(self) -> Scorer | None:
        """The graded scorer that grades the task's capability after generation when a grader is given (None: the
        task has no grading protocol)."""
        return None

    def score_likelihoods(self, target: Any, item: TaskItem) -> Score:
        """Score ``item`` by the target's likelihoods (likelihood-only sources)."""
        raise NotImplementedError(f"task {self.name!r} is scored by generation")

    def notes(self) -> list[str]:
        """What a user should know before the run starts."""
        return []

    def description(self) -> str:
        return str(self.record().get("description", ""))


@dataclass(frozen=True)
class LoadRequest:
    """What a loader needs from the run: the target (a tokenizer may shape the prompts), item limits, data files
    and the suite's remaining fields (``options``), of which each loader reads its own."""

    target: str
    limit: int | None = None
    limits: Mapping[str, int] = field(default_factory=dict)
    data_files: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def limit_for(self, *names: str) -> int | None:
        return next((self.limits[n] for n in names if n in self.limits), self.limit)

    def data_file_for(self, *names: str) -> str | None:
        return next((self.data_files[n] for n in names if n in self.data_files), None)


@dataclass(frozen=True)
class TaskFacts:
    """What the analysis needs to know of a stored task, read back from its record: whether it was scored by the
    target's likelihoods alone, which keys of a sample's score details are metrics (averaged in summaries), what
    its own scorer measures ("capability", or "fidelity" to the AR output), whether a sample's stored details
    say the scorer found an answer (``Scorer.answered``; None: the task has no notion of one), and how its scorer
    scores a grader's verdict that stands in for its own classifier (``Scorer.score_verdict``; None: a grader's
    verdict is the score itself)."""

    likelihood_only: bool = False
    detail_metrics: tuple[str, ...] = ()
    measure: str = "capability"
    answered: Callable[[Mapping[str, Any]], bool | None] | None = None
    score_verdict: Callable[[float | None, str, Mapping[str, Any]], Score] | None = None


class TaskLoader(Protocol):
    """Loads the tasks it owns (given name → its tasks; a group may give several), and reads its own stored
    records back (``facts``)."""

    reads_data_files: bool

    def load(self, names: Sequence[str], request: LoadRequest) -> dict[str, list[TaskSource]]: ...

    def facts(self, record: Mapping[str, Any], scorer: str) -> TaskFacts: ...


TASK_SOURCES: Registry[TaskLoader] = Registry("task source", "relaxbench.task_sources")
