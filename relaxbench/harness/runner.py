"""Run one task's cells: warm up, measure this machine's cost profile, then for every item, repeat and turn run
the arms interleaved (AR, method 1, method 2, AR, ...) so machine drift hits every arm alike; score and commit each
sample at once.

Untimed work is done once per session, not per task or per arm: one profile of the machine
(``relaxbench.profiles.measure``: the grid of forward costs the run's arms need, on the first prompt's context,
each shape run untimed first), stored as the session's ``this-machine`` profile, which prices every arm's proxy
speed-up; then a minimal warm-up generation per arm (a few tokens on a few-token prompt), for the code paths the
profile does not run (drafting, the policy, the cache bookkeeping): the profile already warmed the forward shapes.

The ``Worker`` holds the loaded models and a ``SampleSink``; an ``Executor`` (executor.py) decides where jobs run.
The sink separates computing a sample from storing it: in-process it is the ``Store`` itself; on a Ray worker it
is an in-memory view of one shard (shard.py) whose writes stream back to the driver, the store's one writer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from relaxbench.decoders import build_decoder
from relaxbench.data import TaskItem
from relaxbench.decoding.budget import generate_with_budget
from relaxbench.decoding.cache import forward, new_cache
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.loop import SpeculativeDecoder
from relaxbench.decoding.prompts import check_fits_context, context_window, prompt_room
from relaxbench.decoding.records import GenerationResult
from relaxbench.harness.plan import Arm, RunPlan, TaskJob
from relaxbench.harness.store import CellDefinition, SampleKey, SampleRow, Store
from relaxbench.policies import POLICIES
from relaxbench.ops.sampling import SamplingParams
from relaxbench.profiles.measure import MACHINE_PROFILE, Grid, measure_profile, power_grid
from relaxbench.scoring import Score, Scorer, ScoringContext
from relaxbench.timing import Clock

WARMUP_TOKENS = 3  # a warm-up generation's new tokens: a draft round and a verify for every arm
WARMUP_PROMPT_TOKENS = 8  # a warm-up generation's prompt: its first tokens (the profile warmed the model shapes)
PROFILE_REPEATS = 3  # timed forwards per grid point of the session's machine profile (median), after 1 untimed
PROFILE_PREFILL_REPEATS = 2  # timed prefills per length, none untimed (a sample's prefill is a first call too)


def check_fits(job: TaskJob, target: Any, item: TaskItem, turn: int, prompt_ids: Sequence[int]) -> None:
    """One sample's prompt against the target's context, with the job's max_new_tokens and largest draft length."""
    check_fits_context(target, f"task {job.name!r} item {item.item_id!r} turn {turn + 1}", len(prompt_ids),
                       job.max_new_tokens, job_k(job))


def job_k(job: TaskJob) -> int:
    """The largest draft length a round of this job runs: an arm's k, cut to what max_new_tokens can use (the loop
    drafts at most max_new_tokens - 1 tokens per round)."""
    return min(max((arm.k for arm in job.arms), default=0), max(job.max_new_tokens - 1, 0))


def fit_prompt(job: TaskJob, target: Any, item: TaskItem, turn: int, prompt_ids: list[int]) -> list[int]:
    """The prompt as it runs: unchanged when it fits the target's context; its last tokens when the task truncates
    prompts (and some room is left); else refused (``check_fits``)."""
    room = prompt_room(target, job.max_new_tokens, job_k(job))
    if job.source.truncates_prompts and room is not None and 0 < room < len(prompt_ids):
        return prompt_ids[-room:]
    check_fits(job, target, item, turn, prompt_ids)
    return prompt_ids


def check_prompts_fit(plan: RunPlan, target: Any) -> None:
    """Every item's first prompt checked against the target's context as soon as its tokenizer is loaded, before
    the store is opened (later turns, which follow generated answers, are checked as they are encoded)."""
    if context_window(target) is None:
        return
    for job in plan.jobs:
        if job.source.likelihood_only:
            continue
        for item in job.items:
            fit_prompt(job, target, item, 0, job.source.encode(target, item, 0, [], job.max_new_tokens))


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


class SampleSink(Protocol):
    """What the runner reads (finished keys, a sample: an earlier turn's answer, AR's output for the same unit, the
    first repeat) and writes (a started generation, a finished sample, the session's machine profile). ``Store`` is
    one; a Ray worker's ``ShardView`` another. Cells are created beforehand by the driver (``register_job``)."""

    def done_keys(self, cell_id: int) -> set[SampleKey]: ...

    def sample(self, cell_id: int, key: SampleKey) -> SampleRow | None: ...

    def mark_started(self, session_id: int) -> None: ...

    def add_sample(self, row: SampleRow) -> None: ...

    def add_machine_profile(self, session_id: int, profile: Mapping[str, Any]) -> None: ...


@dataclass
class Worker:
    """Loaded models and the sink of one session; runs jobs (or shards of them) against them."""

    target: Any
    draft: Any | None
    draft_name: str | None
    store: SampleSink
    session_id: int
    warmup: int = 1
    profile_repeats: int = PROFILE_REPEATS
    warmed: set[str] = field(default_factory=set)  # arms warmed up in this session
    profiled: bool = False  # whether this session measured its machine profile (a Ray worker runs several shards)


def cell_definition(job: TaskJob, position: int, arm: Arm) -> CellDefinition:
    policy = POLICIES.get(arm.method.policy)
    return CellDefinition(
        task=job.name, arm=arm.name, position=position, is_baseline=arm.is_baseline,
        method=arm.base_method, policy=arm.method.policy, lossless=bool(policy.modes.lossless),
        knobs=dict(arm.method.knobs),
        method_spec={**arm.method.record(), **({"provenance": dict(arm.provenance)} if arm.provenance else {})},
        drafter=None if arm.drafter is None else arm.drafter.model_dump(), k=arm.k, decode=job.decode_record(arm),
        task_spec=job.source.record(), scorer=job.source.scorer_name, data_fingerprint=job.source.fingerprint)


def sampled_arms(job: TaskJob) -> tuple[Arm, ...]:
    """The arms that store samples: every arm, or AR alone for a likelihood-only task (see ``LikelihoodRun``)."""
    return tuple(arm for arm in job.arms if arm.is_baseline) if job.source.likelihood_only else job.arms


def item_keys(job: TaskJob, item: TaskItem) -> list[SampleKey]:
    """An item's units as stored keys, in run order: every turn of every repeat ((item, 0, 0) for a
    likelihood-only task)."""
    if job.source.likelihood_only:
        return [(item.item_id, 0, 0)]
    return [(item.item_id, turn, repeat) for repeat in range(job.repeats) for turn in range(len(item.turns))]


def register_job(store: Store, run_id: int, job: TaskJob, progress: ProgressSink) -> dict[str, int]:
    """Create (or find) the job's cells, arm name → cell id, and put each cell's total and finished units on the
    progress display. The driver does this for every job before anything runs, so the ETA covers the whole run."""
    cells = {arm.name: store.ensure_cell(run_id, cell_definition(job, i, arm)) for i, arm in enumerate(job.arms)}
    keys = [key for item in job.items for key in item_keys(job, item)]
    for arm in sampled_arms(job):
        done = store.done_keys(cells[arm.name])
        progress.cell(job.name, arm.name, len(keys), sum(key in done for key in keys))
    return cells


def missing_items(job: TaskJob, cells: Mapping[str, int], sink: SampleSink) -> list[TaskItem]:
    """The job's items with a unit that some arm has not stored yet, in data order: what is left to run."""
    done = {arm.name: sink.done_keys(cells[arm.name]) for arm in sampled_arms(job)}
    return [item for item in job.items
            if any(key not in done[arm] for arm in done for key in item_keys(job, item))]


def run_job(worker: Worker, job: TaskJob, cells: Mapping[str, int], progress: ProgressSink,
            items: Sequence[TaskItem] | None = None) -> None:
    """Run the missing units of ``items`` (default: all of the job's) with every arm, storing through the worker's
    sink."""
    runner = LikelihoodRun if job.source.likelihood_only else TaskRun
    runner(worker, job, cells, progress, items).run()


class TaskRun:
    def __init__(self, worker: Worker, job: TaskJob, cells: Mapping[str, int], progress: ProgressSink,
                 items: Sequence[TaskItem] | None = None) -> None:
        self.w, self.job, self.cells, self.progress = worker, job, dict(cells), progress
        self.items = job.items if items is None else tuple(items)
        self.scorer: Scorer = job.source.scorer()
        self.done = {arm.name: worker.store.done_keys(self.cells[arm.name]) for arm in job.arms}
        self.decoders: dict[tuple[str, SamplingParams], SpeculativeDecoder] = {}  # per arm and sampling
        self.truncation_noted = False
        keys = self.keys()
        self.todo = {arm.name: sum((item.item_id, turn, repeat) not in self.done[arm.name]
                                   for item, repeat, turn in keys) for arm in job.arms}

    def keys(self) -> list[tuple[TaskItem, int, int]]:
        """Every (item, repeat, turn) of this run's items, in run order."""
        return [(item, repeat, turn) for item in self.items for repeat in range(self.job.repeats)
                for turn in range(len(item.turns))]

    def run(self) -> None:
        keys = self.keys()
        if not any(self.todo.values()):
            return
        for arm in self.job.arms:
            for sampling in self.job.samplings():
                self.decoders[arm.name, sampling] = build_decoder(
                    arm.method, self.w.target, self.w.draft, replace(self.job.decode_config(arm), sampling=sampling),
                    self.w.draft_name)
        first_prompt = self._encode(self.job.items[0], 0, [])
        self._measure_machine(first_prompt)  # once per session
        self._warm_up(first_prompt)  # once per arm and session
        for item, repeat, turn in keys:
            self._run_sample(item, repeat, turn)

    # -------------------------------------------------------------------------------------- before timing

    def _warm_up(self, prompt_ids: list[int]) -> None:
        """A minimal untimed generation per arm, once per session: the first calls of its code paths (drafting,
        the policy, rollback) stay out of the timings; the machine profile measured just before ran every forward
        shape the arms use."""
        prompt = prompt_ids[:WARMUP_PROMPT_TOKENS]
        for arm in self.job.arms:
            for sampling in self.job.samplings():
                key = arm.name if sampling == self.job.sampling else f"{arm.name} {sampling}"
                if key in self.w.warmed:
                    continue
                cfg = replace(self.job.decode_config(arm), sampling=sampling)
                decoder = build_decoder(arm.method, self.w.target, self.w.draft,
                                        replace(cfg, max_new_tokens=min(WARMUP_TOKENS, cfg.max_new_tokens)),
                                        self.w.draft_name)
                for _ in range(self.w.warmup):
                    decoder.generate(prompt)
                self.w.warmed.add(key)

    def profile_grid(self, prompt_ids: list[int]) -> Grid:
        """The forward sizes this task's arms run, on the first prompt's context: target forwards of 1 token and
        each arm's full verify block (k + 1 + the policy's extra tokens, k cut to what max_new_tokens can use, so a
        k beyond the budget never times a block no round feeds; shorter blocks are interpolated), draft
        forwards of 1, 2 (and up to 8 for n-gram+LM drafting) tokens, at the prompt's context and that plus
        max_new_tokens; prefill at half and all of the prompt; n-gram lookups when an arm copies n-grams."""
        verify = {1}
        draft_sizes = {1, 2}
        lookups = False
        usable = max(1, self.job.max_new_tokens - 1)  # a round drafts at most this many (the plan's notice says so)
        for arm in self.job.arms:
            decoder = self.decoders[arm.name, self.job.sampling]
            if arm.k:
                k = min(arm.k, usable)
                extra = decoder.policy.extra_verify_tokens(torch.zeros(k, dtype=torch.long))
                verify.add(k + 1 + (0 if extra is None else int(extra.shape[0])))
            kind = None if arm.drafter is None else arm.drafter.kind
            if kind in ("ngram", "ngram+lm"):
                lookups = True
            if kind == "ngram+lm":
                draft_sizes.update(power_grid(8))
        context = max(1, len(prompt_ids) - 1)
        contexts = (context, context + self.job.max_new_tokens)
        return Grid(new_tokens=tuple(sorted(verify)), context=contexts,
                    prefill=tuple(sorted({max(1, context // 2), context})), draft_new_tokens=tuple(sorted(draft_sizes)),
                    lookup_context=contexts if lookups else ())

    def _measure_machine(self, prompt_ids: list[int]) -> None:
        """This machine's cost profile, once per session, shared by every arm (stored as ``this-machine``)."""
        if self.w.profiled:
            return
        grid = self.profile_grid(prompt_ids)
        draft = self.w.draft if any(arm.needs_draft_model() for arm in self.job.arms) else None
        self.progress.cell(MACHINE_PROFILE, "cost profile", grid.steps(draft is not None), 0)
        profile = measure_profile(self.w.target, draft, grid, repeats=self.w.profile_repeats,
                                  advance=lambda _: self.progress.advance(MACHINE_PROFILE, "cost profile"),
                                  source=prompt_ids, prefill_repeats=PROFILE_PREFILL_REPEATS, prefill_warmup=0)
        self.w.store.add_machine_profile(self.w.session_id, profile.record())
        self.w.profiled = True

    # -------------------------------------------------------------------------------------- samples

    def _encode(self, item: TaskItem, turn: int, history: list[str]) -> list[int]:
        """Prompt ids for ``turn``: earlier turns with this arm's own answers, then this turn's message (the task
        source decides how)."""
        prompt_ids = self.job.source.encode(self.w.target, item, turn, history, self.job.max_new_tokens)
        fitted = fit_prompt(self.job, self.w.target, item, turn, prompt_ids)
        if len(fitted) < len(prompt_ids) and not self.truncation_noted:  # said once per task
            self.truncation_noted = True
            self.progress.note(f"{self.job.name}: prompts longer than the target's context allows are cut to their "
                               f"last {len(fitted)} tokens (truncate_prompt; first: item {item.item_id!r}, "
                               f"{len(prompt_ids)} tokens)")
        return fitted

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
                decoder = self.decoders[arm.name, self.job.sampling_for(item.item_id)]
                seed = self.job.sample_seed(*key)
                budget = self.job.thinking_budget
                result = (decoder.generate(prompt_ids, seed=seed) if budget is None else
                          generate_with_budget(decoder, prompt_ids, budget, seed))
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
        matches, divergence = self._against_baseline(arm, item, out, baseline)
        self.w.store.add_sample(SampleRow.from_generation(
            result, cell_id=self.cells[arm.name], session_id=self.w.session_id, item_id=item.item_id,
            item_index=self.job.items.index(item), turn=turn, repeat=repeat, category=item.category,
            score=out.score.value, passed=out.score.passed, score_details=out.score.details,
            matches_baseline=None if matches is None else bool(matches), divergence=divergence,
            seed=self.job.sample_seed(item.item_id, turn, repeat)))
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

    def _against_baseline(self, arm: Arm, item: TaskItem, out: Output,
                          baseline: Output | None) -> tuple[int | None, Any]:
        """Did this arm reproduce AR? For a lossless rule under greedy decoding a difference is diagnosed
        (numerical near-tie or not); it is reported, never counted as relaxation."""
        if arm.is_baseline or baseline is None:
            return None, None
        matches = out.output_ids == baseline.output_ids
        lossless = POLICIES.get(arm.method.policy).modes.lossless and self.job.sampling_for(item.item_id).greedy
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

    def __init__(self, worker: Worker, job: TaskJob, cells: Mapping[str, int], progress: ProgressSink,
                 items: Sequence[TaskItem] | None = None) -> None:
        self.w, self.job, self.cells, self.progress = worker, job, dict(cells), progress
        self.baseline = next(arm for arm in job.arms if arm.is_baseline)
        done = worker.store.done_keys(self.cells[self.baseline.name])
        self.todo = [item for item in (job.items if items is None else items) if (item.item_id, 0, 0) not in done]

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
