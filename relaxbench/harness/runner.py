"""Run one task's cells: warm up, calibrate, then for every item, repeat and turn run the arms interleaved
(AR, method 1, method 2, AR, ...) so machine drift hits every arm alike; score and commit each sample at once.

The ``Worker`` holds the loaded models and the store; an ``Executor`` (executor.py) decides where jobs run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import torch

from relaxbench.arms import build_decoder
from relaxbench.data import TaskItem
from relaxbench.decoding.cache import forward, new_cache
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.loop import SpeculativeDecoder
from relaxbench.decoding.records import GenerationResult
from relaxbench.harness.calibrate import calibrate
from relaxbench.harness.plan import Arm, TaskJob
from relaxbench.harness.store import CellDefinition, SampleRow, Store
from relaxbench.policies import POLICIES
from relaxbench.scoring import Score, Scorer, ScoringContext
from relaxbench.timing import Clock

WARMUP_TOKENS = 8


class ProgressSink(Protocol):
    """Where the runner reports progress (the CLI draws rich bars; tests may pass a silent sink)."""

    def cell(self, task: str, arm: str, total: int, done: int) -> None: ...

    def advance(self, task: str, arm: str) -> None: ...

    def note(self, message: str) -> None: ...


class SilentProgress:
    def cell(self, task: str, arm: str, total: int, done: int) -> None:
        pass

    def advance(self, task: str, arm: str) -> None:
        pass

    def note(self, message: str) -> None:
        pass


@dataclass
class Output:
    """One arm's generation for one (item, turn, repeat): new or read back from the store."""

    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    score: Score | None = None


@dataclass
class Worker:
    """Runs jobs against loaded models and one store session."""

    target: Any
    draft: Any | None
    draft_name: str | None
    store: Store
    run_id: int
    session_id: int
    warmup: int = 1

    def prepare(self, job: TaskJob, progress: ProgressSink) -> TaskRun | LikelihoodRun:
        """Register the job's cells (in the store and with the progress display); run it later with ``run()``."""
        return LikelihoodRun(self, job, progress) if job.source.likelihood_only else TaskRun(self, job, progress)


def cell_definition(job: TaskJob, position: int, arm: Arm) -> CellDefinition:
    policy = POLICIES.get(arm.method.policy)
    decode = job.decode_config(arm)
    return CellDefinition(
        task=job.name, arm=arm.name, position=position, is_baseline=arm.is_baseline,
        method=arm.base_method, policy=arm.method.policy, lossless=bool(policy.lossless),
        knobs=dict(arm.method.knobs),
        method_spec={**arm.method.record(), **({"provenance": dict(arm.provenance)} if arm.provenance else {})},
        drafter=None if arm.drafter is None else arm.drafter.model_dump(), k=arm.k, decode=asdict(decode),
        task_spec=job.source.record(), scorer=job.source.scorer_name, data_fingerprint=job.source.fingerprint)


class TaskRun:
    def __init__(self, worker: Worker, job: TaskJob, progress: ProgressSink) -> None:
        self.w, self.job, self.progress = worker, job, progress
        self.scorer: Scorer = job.source.scorer()
        self.cells = {arm.name: worker.store.ensure_cell(worker.run_id, cell_definition(job, i, arm))
                      for i, arm in enumerate(job.arms)}
        self.done = {arm.name: worker.store.done_keys(self.cells[arm.name]) for arm in job.arms}
        self.decoders: dict[str, SpeculativeDecoder] = {}
        keys = self.keys()
        self.todo = {arm.name: sum((item.item_id, turn, repeat) not in self.done[arm.name]
                                   for item, repeat, turn in keys) for arm in job.arms}
        for arm in job.arms:
            progress.cell(job.name, arm.name, len(keys), len(keys) - self.todo[arm.name])

    def keys(self) -> list[tuple[TaskItem, int, int]]:
        """Every (item, repeat, turn) in run order."""
        return [(item, repeat, turn) for item in self.job.items for repeat in range(self.job.repeats)
                for turn in range(len(item.turns))]

    def run(self) -> None:
        keys = self.keys()
        if not any(self.todo.values()):
            return
        for arm in self.job.arms:
            self.decoders[arm.name] = build_decoder(arm.method, self.w.target, self.w.draft,
                                                    self.job.decode_config(arm), self.w.draft_name)
        first_prompt = self._encode(self.job.items[0], 0, [])
        self._warm_up(first_prompt)
        self._calibrate(first_prompt)
        for item, repeat, turn in keys:
            self._run_sample(item, repeat, turn)

    # -------------------------------------------------------------------------------------- before timing

    def _warm_up(self, prompt_ids: list[int]) -> None:
        """A few untimed generations per arm: first-call costs (allocations, kernel selection) stay out of the
        timings."""
        for arm in self.job.arms:
            cfg = self.job.decode_config(arm)
            decoder = build_decoder(arm.method, self.w.target, self.w.draft,
                                    replace(cfg, max_new_tokens=min(WARMUP_TOKENS, cfg.max_new_tokens)),
                                    self.w.draft_name)
            for _ in range(self.w.warmup):
                decoder.generate(prompt_ids)

    def _calibrate(self, prompt_ids: list[int]) -> None:
        for arm in self.job.arms:
            decoder = self.decoders[arm.name]
            result = calibrate(self.w.target, decoder.drafter, arm.k, prompt_ids, sampling=self.job.sampling)
            self.w.store.add_calibration(self.cells[arm.name], self.w.session_id, result.context_tokens, result.k,
                                         result.t_target_step, result.t_verify, result.t_draft_step, result.raw)

    # -------------------------------------------------------------------------------------- samples

    def _encode(self, item: TaskItem, turn: int, history: list[str]) -> list[int]:
        """Prompt ids for ``turn``: earlier turns with this arm's own answers, then this turn's message (the task
        source decides how)."""
        return self.job.source.encode(self.w.target, item, turn, history, self.job.max_new_tokens)

    def _stored(self, arm: Arm, key: tuple[str, int, int]) -> Output | None:
        row = self.w.store.sample(self.cells[arm.name], key)
        if row is None:
            return None
        score = Score(row.score, row.passed, row.score_details)
        return Output(list(row.prompt_ids), list(row.output_ids), row.output_text, score)

    def _run_sample(self, item: TaskItem, repeat: int, turn: int) -> None:
        baseline: Output | None = None
        for arm in self.job.arms:
            key = (item.item_id, turn, repeat)
            out = self._stored(arm, key)
            if out is None:
                history = [self._history(arm, item, t, repeat) for t in range(turn)]
                self.w.store.mark_started(self.w.session_id)
                prompt_ids = self._encode(item, turn, history)
                result = self.decoders[arm.name].generate(prompt_ids)
                out = self._finish(arm, item, repeat, turn, result, baseline)
                self.progress.advance(self.job.name, arm.name)
            if arm.is_baseline:
                baseline = out

    def _history(self, arm: Arm, item: TaskItem, turn: int, repeat: int) -> str:
        stored = self._stored(arm, (item.item_id, turn, repeat))
        assert stored is not None, "earlier turns are generated first"
        return stored.text

    def _finish(self, arm: Arm, item: TaskItem, repeat: int, turn: int, result: GenerationResult,
                baseline: Output | None) -> Output:
        """Score, compare with AR, and commit one sample."""
        out = Output(result.prompt_ids, result.output_ids, result.text)
        out.score = self._score(arm, item, repeat, turn, out, baseline)
        matches, divergence = self._against_baseline(arm, out, baseline)
        self.w.store.add_sample(SampleRow.from_generation(
            result, cell_id=self.cells[arm.name], session_id=self.w.session_id, item_id=item.item_id,
            item_index=self.job.items.index(item), turn=turn, repeat=repeat, category=item.category,
            score=out.score.value, passed=out.score.passed, score_details=out.score.details,
            matches_baseline=None if matches is None else bool(matches), divergence=divergence))
        return out

    def _score(self, arm: Arm, item: TaskItem, repeat: int, turn: int, out: Output,
               baseline: Output | None) -> Score:
        if repeat > 0:  # a repeat that reproduced its first run keeps that run's score (no second sandbox run)
            first = self._stored(arm, (item.item_id, turn, 0))
            if first is not None and first.output_ids == out.output_ids and first.score is not None:
                return first.score
        logprob: Callable[[], float] | None = None
        if self.scorer.needs_logprob:
            def logprob() -> float:
                return mean_logprob(self.w.target, out.prompt_ids, out.output_ids)
        context = ScoringContext(turn, None if arm.is_baseline or baseline is None else baseline.text, logprob)
        return self.scorer.score(item, out.text, context)

    def _against_baseline(self, arm: Arm, out: Output, baseline: Output | None) -> tuple[int | None, Any]:
        """Did this arm reproduce AR? For a lossless rule under greedy decoding a difference is diagnosed
        (numerical near-tie or not); it is reported, never counted as relaxation."""
        if arm.is_baseline or baseline is None:
            return None, None
        matches = out.output_ids == baseline.output_ids
        lossless = POLICIES.get(arm.method.policy).lossless and self.job.sampling.greedy
        if matches or not lossless:
            return int(matches), None
        if out.prompt_ids != baseline.prompt_ids:
            return 0, {"identical": False, "inherited": True,
                       "why": "an earlier turn differed, so this turn's prompt differs from AR's"}
        found = diagnose_divergence(self.w.target, out.prompt_ids, baseline.output_ids, out.output_ids)
        return 0, found.to_record()


class LikelihoodRun:
    """A task answered by the target's likelihoods (a likelihood-only source: multiple choice, log-likelihood).
    The target alone computes them, so no verification rule can change a score: each item is scored once, in the
    AR cell, and every method's cell is registered with no samples (its score is AR's by definition; the summaries
    say so and show no speed figures). A sample's ``time_total`` is the measured time of its likelihood forwards."""

    def __init__(self, worker: Worker, job: TaskJob, progress: ProgressSink) -> None:
        self.w, self.job, self.progress = worker, job, progress
        self.cells = {arm.name: worker.store.ensure_cell(worker.run_id, cell_definition(job, i, arm))
                      for i, arm in enumerate(job.arms)}
        self.baseline = next(arm for arm in job.arms if arm.is_baseline)
        done = worker.store.done_keys(self.cells[self.baseline.name])
        self.todo = [item for item in job.items if (item.item_id, 0, 0) not in done]
        progress.cell(job.name, self.baseline.name, len(job.items), len(job.items) - len(self.todo))

    def run(self) -> None:
        if not self.todo:
            return
        clock = Clock(self.w.target.device)
        for item in self.todo:
            self.w.store.mark_started(self.w.session_id)
            start = clock.now()
            score = self.job.source.score_likelihoods(self.w.target, item)
            seconds = clock.now() - start
            self.w.store.add_sample(SampleRow.likelihood_only(
                seconds, cell_id=self.cells[self.baseline.name], session_id=self.w.session_id, item_id=item.item_id,
                item_index=self.job.items.index(item), category=item.category, score=score.value,
                passed=score.passed, score_details=score.details))
            self.progress.advance(self.job.name, self.baseline.name)


@torch.inference_mode()
def mean_logprob(target: Any, prompt_ids: list[int], output_ids: list[int]) -> float | None:
    """The target's mean log-probability (natural log, temperature 1) of ``output_ids`` after ``prompt_ids``."""
    if not output_ids:
        return None
    ids = torch.tensor(prompt_ids + output_ids, dtype=torch.long, device=target.device)
    logits = forward(target.model, ids[:-1], new_cache(target.model), n_logits=len(output_ids)).logits
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    picked = logprobs.gather(1, ids[len(prompt_ids):].unsqueeze(1))
    return float(picked.mean())
