"""The grading step: an LLM grader grades the stored answers of the tasks that have a grading protocol (a graded
scorer: MT-Bench's ``llm-grader``, the refusal tasks' ``refusal-grader``), after generation — at the end of
``compare --grader ...`` or on a stored run with ``relaxbench rescore`` — so the grader never shares the machine with
timed generation and is loaded once. The protocol builds each request and reads each verdict back; this step is
the same for every protocol.

Every verdict is cached in the store under (grader, prompt, answer) hashes and linked to the samples it grades, as
soon as it arrives: identical answers (a lossless arm reproduces AR's) are graded once, and an interrupted pass, a
rescore or a wider sweep asks only for what is missing. When the grader can disagree with itself (it samples, or it
is a remote server), the AR arm's samples are graded a second time (draw 1: the next seed, in a shuffled order), so
the report can print the grader's agreement with itself.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from relaxbench.data import TaskItem
from relaxbench.errors import DataError
from relaxbench.grading.cache import Progress, VerdictKey, VerdictStore, content_hash
from relaxbench.grading.graders import Grader
from relaxbench.grading.protocol import GradedScorer, GradingRequest

GRADER_ARM = "grader"  # the progress bar of a task's grading


@dataclass(frozen=True)
class GradedTask:
    """A task to grade: its items by id (the questions the stored answers reply to) and its graded scorer."""

    name: str
    items: Mapping[str, TaskItem]
    scorer: GradedScorer

    def check(self) -> None:
        """Every grader prompt and reference answer the items need exists (before any generation)."""
        self.scorer.check_items(list(self.items.values()))


@dataclass
class GradingTally:
    """What one grading pass did."""

    asked: int = 0  # requests sent to the grader
    cached: int = 0  # verdicts found in the store
    failed: int = 0  # calls that failed after their retries (asked again on the next pass)
    unparseable: int = 0  # new verdicts without a rating
    skipped: int = 0  # samples the tasks' protocols do not grade (Spec-Bench's subtasks other than MT-Bench)
    seconds: float = 0.0  # wall time of the grader's calls
    errors: list[str] = field(default_factory=list)  # the first few failure reasons


@dataclass(frozen=True)
class _Work:
    task: str
    key: VerdictKey
    request: GradingRequest
    sample_ids: tuple[int, ...]


def _requests(store: VerdictStore, run_id: int, task: GradedTask, grader_hash: str,
              draws: Sequence[int]) -> tuple[dict[VerdictKey, tuple[GradingRequest, list[int]]], int]:
    """Every verdict the task's samples still lack, deduplicated by key (the same answer to the same question), and
    how many samples the task's protocol does not grade."""
    done = {draw: store.graded_sample_ids(grader_hash, draw) for draw in draws}
    out: dict[VerdictKey, tuple[GradingRequest, list[int]]] = {}
    skipped = 0
    for cell in store.rows("SELECT cell_id, is_baseline FROM cells WHERE run_id=? AND task=? ORDER BY position",
                           (run_id, task.name)):
        samples = store.samples(cell["cell_id"])
        texts = {s.key: s.output_text for s in samples}
        for sample in samples:
            assert sample.sample_id is not None
            missing = [d for d in (draws if cell["is_baseline"] else draws[:1]) if sample.sample_id not in done[d]]
            if not missing:
                continue
            item = task.items.get(sample.item_id)
            if item is None:
                raise DataError(f"task {task.name!r}: stored item {sample.item_id!r} is not in the task's data")
            answers = [texts.get((sample.item_id, t, sample.repeat)) for t in range(sample.turn + 1)]
            if any(a is None for a in answers):
                continue
            request = task.scorer.request(item, sample.turn, answers)
            if request is None:
                skipped += 1
                continue
            prompt_hash, answer_hash = content_hash(request.messages), content_hash(request.answers)
            for draw in missing:
                out.setdefault((grader_hash, prompt_hash, answer_hash, draw), (request, []))[1].append(sample.sample_id)
    return out, skipped


def grade_tasks(store: VerdictStore, run_id: int, tasks: Sequence[GradedTask], grader: Grader, device: str,
                progress: Progress) -> GradingTally:
    """Grade every stored sample of ``tasks`` in run ``run_id`` that lacks a verdict of ``grader``; the grader is
    opened only when something is left to ask, and closed (its model freed) at the end."""
    grader_hash = grader.hash()
    store.ensure_grader(grader_hash, grader.identity(), grader.describe())
    repeat, _ = grader.self_check()
    draws = (0, 1) if repeat else (0,)
    tally = GradingTally()
    protocols = {task.name: task.scorer for task in tasks}
    todo: list[_Work] = []
    for task in tasks:
        found = 0
        requests, skipped = _requests(store, run_id, task, grader_hash, draws)
        tally.skipped += skipped
        for key, (request, sample_ids) in requests.items():
            if store.cached_verdict(key) is not None:
                store.link_verdict(key, sample_ids)
                tally.cached += 1
            else:
                todo.append(_Work(task.name, key, request, tuple(sample_ids)))
                found += 1
        progress.cell(task.name, GRADER_ARM, found, 0)
    if not todo:
        return tally
    grader.open(device)
    try:
        for draw in draws:
            batch = [w for w in todo if w.key[3] == draw]
            if draw:  # the self-check pass asks in another order (a server's batching can change a verdict)
                random.Random(grader.settings.seed + draw).shuffle(batch)
            for index, verdict in grader.grade([w.request.messages for w in batch], draw):
                work = batch[index]
                tally.asked += 1
                tally.seconds += verdict.seconds
                if verdict.text is None:
                    tally.failed += 1
                    if len(tally.errors) < 3 and verdict.error:
                        tally.errors.append(verdict.error)
                else:
                    rating, score = protocols[work.task].parse_verdict(verdict.text)
                    tally.unparseable += score is None
                    store.add_verdict(work.key, work.request.prompt_name, work.request.messages, verdict.text,
                                       rating, score, verdict.seconds, verdict.attempts, work.sample_ids)
                progress.advance(work.task, GRADER_ARM)
    finally:
        grader.close()
    return tally
