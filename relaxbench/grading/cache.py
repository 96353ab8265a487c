"""What the grading step needs from the results store: the verdict cache (verdicts keyed by grader, prompt, answer
and draw, and which verdict grades which sample), the stored answers, and somewhere to report progress. Declared
here as protocols, so the step lives beside the graders and protocols it runs and the store (``harness.store``,
which implements them) stays the one owner of the tables."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

VerdictKey = tuple[str, str, str, int]  # (grader hash, prompt hash, answer hash, draw)


def content_hash(value: Any) -> str:
    """The cache key of a prompt or of the answers graded: SHA-256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class StoredAnswer(Protocol):
    """A stored sample as the step reads it (``harness.store.SampleRow``)."""

    sample_id: int | None
    item_id: str
    turn: int
    repeat: int
    output_text: str

    @property
    def key(self) -> tuple[str, int, int]: ...


class VerdictStore(Protocol):
    """The verdict cache and the stored answers (``harness.store.Store``)."""

    def ensure_grader(self, grader_hash: str, identity: Mapping[str, Any], description: Mapping[str, Any]) -> None: ...

    def cached_verdict(self, key: VerdictKey) -> Any: ...

    def graded_sample_ids(self, grader_hash: str, draw: int) -> set[int]: ...

    def add_verdict(self, key: VerdictKey, prompt_name: str, messages: Any, verdict: str, rating: float,
                    score: float | None, seconds: float, attempts: int, sample_ids: Iterable[int]) -> None: ...

    def link_verdict(self, key: VerdictKey, sample_ids: Iterable[int]) -> None: ...

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> Sequence[Any]: ...

    def samples(self, cell_id: int) -> Sequence[StoredAnswer]: ...


class Progress(Protocol):
    """Where the step reports progress (``harness.runner.ProgressSink``)."""

    def cell(self, task: str, arm: str, total: int, done: int) -> None: ...

    def advance(self, task: str, arm: str) -> None: ...
