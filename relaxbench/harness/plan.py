"""What a ``compare`` run does, decided before any model is loaded: the arms, the tasks' items, the run key.

Everything here is validated up front, so bad input (an unknown method or task, a malformed YAML file, a missing
or empty data file) fails in seconds, before a model loads and before the store is touched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relaxbench.decoders import check_method, effective_drafter, resolve_k
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.decoding.budget import ThinkingBudget
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.harness.suite import SuiteSpec
from relaxbench.methods import DrafterSpec, MethodSpec, load_method
from relaxbench.ops.sampling_params import SamplingParams
from relaxbench.paths import TRAINED, trained_head_dir
from relaxbench.policies import POLICIES, make_policy
from relaxbench.registry import did_you_mean
from relaxbench.tasks import LoadRequest, TaskSource, load_sources, loader_for, source_prefix
from relaxbench.tasks.yaml_tasks import YAML_LOADER

BASELINE_ARM = "ar"


@dataclass(frozen=True)
class Arm:
    """One column of the grid: a method at one sweep point, or the AR baseline."""

    name: str  # unique in a run: the sweep point's name ("fly[theta=0.3]"), or "ar"
    method: MethodSpec
    base_method: str  # the method before sweep expansion (groups a curve)
    drafter: DrafterSpec | None  # after --draft ngram substitution; None for AR
    k: int  # 0 for AR
    provenance: Mapping[str, Any] = field(default_factory=dict)  # the policy's (a trained head's file and data)

    @property
    def is_baseline(self) -> bool:
        return self.name == BASELINE_ARM

    def needs_draft_model(self) -> bool:
        return self.drafter is not None and DRAFTERS.get(self.drafter.kind).needs_draft_model


@dataclass(frozen=True)
class TaskJob:
    """One task's share of a run: its source (items, prompts, scorer), every arm and the decoding settings; the
    unit an executor hands out."""

    source: TaskSource
    arms: tuple[Arm, ...]
    repeats: int
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    # the task's own sampling of items whose sampling differs from ``sampling`` (MT-Bench's per category)
    item_sampling: Mapping[str, SamplingParams] = field(default_factory=dict)
    # the task's own decoding the suite overrode ("max_new_tokens", "sampling"), for the report to say so
    overridden: tuple[str, ...] = ()
    thinking_budget: ThinkingBudget | None = None  # Xia et al.'s forcing (decoding/budget.py); None: off

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def items(self) -> tuple[Any, ...]:
        return self.source.items

    def sampling_for(self, item_id: str | None) -> SamplingParams:
        """The sampling of one item (the task's own for that item, else the job's)."""
        return self.item_sampling.get(item_id, self.sampling) if item_id is not None else self.sampling

    def samplings(self) -> tuple[SamplingParams, ...]:
        """Every distinct sampling this job decodes with, the job's first."""
        return tuple(dict.fromkeys((self.sampling, *self.item_sampling.values())))

    def decode_config(self, arm: Arm, item_id: str | None = None) -> DecodeConfig:
        """The arm's decoding settings for an item (the run seed; each sample's generation is seeded with
        ``sample_seed``)."""
        return DecodeConfig(k=arm.k, max_new_tokens=self.max_new_tokens, sampling=self.sampling_for(item_id),
                            stop_strings=self.source.generation().stop, seed=self.seed)

    def decode_record(self, arm: Arm) -> dict[str, Any]:
        """The decoding settings stored with a cell: the job's, the items' own where they differ (by category),
        and which of the task's own settings the suite overrode."""
        record: dict[str, Any] = asdict(self.decode_config(arm))
        if self.item_sampling:
            by_category = {item.category: asdict(self.sampling_for(item.item_id)) for item in self.items
                           if item.item_id in self.item_sampling}
            record["sampling_by_category"] = dict(sorted(by_category.items()))
        if self.overridden:
            record["overrides_task"] = list(self.overridden)
        if self.thinking_budget is not None:
            record["thinking_budget"] = self.thinking_budget.record()
        return record

    def sample_seed(self, item_id: str, turn: int, repeat: int) -> int:
        """The seed of one sample's random stream. Under sampling it is derived from the run seed and the sample's
        key, so every (item, turn, repeat) draws its own stream (repeats are independent samples) and every arm
        draws the same stream for it; under greedy decoding it is the run seed, as it always was."""
        if self.sampling_for(item_id).greedy:
            return self.seed
        return derive_seed(self.seed, self.name, item_id, turn, repeat)


def derive_seed(run_seed: int, task: str, item_id: str, turn: int, repeat: int) -> int:
    """A stable 63-bit seed from the run seed and a sample's key (sha256, so it is the same on every machine and
    Python version, unlike ``hash``)."""
    payload = json.dumps([run_seed, task, item_id, turn, repeat]).encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class RunPlan:
    suite: SuiteSpec
    jobs: tuple[TaskJob, ...]
    key: str

    @property
    def arms(self) -> tuple[Arm, ...]:
        return self.jobs[0].arms if self.jobs else ()

    def needs_draft_model(self) -> bool:
        return any(arm.needs_draft_model() for arm in self.arms)

    def notes(self) -> list[str]:
        """What a user should know before the run starts: each task source's notes, and a draft length the task's
        budget cuts."""
        notes = [note for job in self.jobs for note in job.source.notes()]
        for job in self.jobs:
            usable = max(job.max_new_tokens - 1, 0)
            over = sorted({arm.k for arm in job.arms if arm.k > usable})
            if over:
                notes.append(f"{job.name}: k {', '.join(map(str, over))} is more than max_new_tokens "
                             f"{job.max_new_tokens} can use; rounds draft at most {usable} tokens")
        return notes


def build_arms(suite: SuiteSpec) -> tuple[Arm, ...]:
    """The AR baseline first, then every sweep point of every method, in the order given."""
    baseline = MethodSpec(name=BASELINE_ARM, policy="none", source="baseline")
    arms = [Arm(BASELINE_ARM, baseline, BASELINE_ARM, None, 0)]
    seen = {BASELINE_ARM: "the AR baseline"}
    for name in suite.methods:
        method = load_method(name)
        if method.policy == "none":
            raise ConfigError(f"method {name!r} is the AR baseline (rule 'none'), which every run includes; "
                              "leave it out of --methods")
        if method.sweeps_k and suite.k is not None:
            raise ConfigError(f"method {name!r} sweeps the draft length k, which -k {suite.k} would override for "
                              "every point; leave -k out or use a method without a k sweep")
        for point in method.expand():
            if point.name in seen:
                raise ConfigError(f"arm {point.name!r} appears twice (from {seen[point.name]} and {name!r})")
            seen[point.name] = repr(name)
            drafter = effective_drafter(point, suite.draft)
            policy = make_policy(point.policy, point.knobs)  # knobs checked here, early
            if point.relax_in is not None and policy.modes.lossless:
                raise ConfigError(f"method {point.name!r}: relax_in applies to relaxed rules; {point.policy!r} is "
                                  "lossless")
            provenance = dict(policy.provenance())
            arms.append(Arm(point.name, point, method.name, drafter, resolve_k(point, suite.k), provenance))
    return tuple(arms)


def check_task_options(suite: SuiteSpec) -> None:
    """--data-file and --task-limit must name tasks of the run (a did-you-mean otherwise); a data file must name a
    task whose source reads one."""
    given = list(suite.tasks)
    own = [name for name in given if source_prefix(name) is None]
    readers = {n for names in YAML_LOADER.names(own).values() for n in names} | set(own)
    for option, named, allowed in (("--data-file", suite.data_files, readers),
                                   ("--task-limit", suite.limits, readers | set(given)),
                                   ("--task-repeats", suite.task_repeats, readers | set(given))):
        unknown = sorted(set(named) - allowed)
        if unknown:
            name = unknown[0]
            prefix = source_prefix(name)
            why = (f"; {prefix}:NAME tasks read their own data" if option == "--data-file" and prefix is not None
                   and name in given and not loader_for(name).reads_data_files else "")
            raise ConfigError(f"{option} names task {name!r}, which is not in --tasks "
                              f"({', '.join(given)}){did_you_mean(name, given)}{why}")


def build_plan(suite: SuiteSpec) -> RunPlan:
    """Validate the suite and load every task's items (no model is loaded here)."""
    arms = build_arms(suite)  # the suite's own settings were checked when it was validated (SuiteSpec's bounds)
    check_task_options(suite)
    request = LoadRequest(target=suite.target, limit=suite.limit, limits=suite.limits, data_files=suite.data_files,
                          options=suite.model_dump())
    loaded = load_sources(suite.tasks, request)
    given = [(name, source) for name in suite.tasks for source in loaded[name]]
    sources = [source for _, source in given]
    names = [source.name for source in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"task {next(n for n in names if names.count(n) > 1)!r} is listed twice")
    check_held_out(arms, sources)
    run_sampling = SamplingParams(suite.temperature, suite.top_k, suite.top_p)
    jobs = []
    for name, source in given:
        generation = source.generation()
        # a task's own sampling (an lm-eval task's generation kwargs, a YAML task's temperature per category)
        # applies unless the run sets one or the suite overrides it
        runs_own = run_sampling == SamplingParams() and not suite.override_task_sampling
        sampling = generation.sampling if runs_own and generation.sampling is not None else run_sampling
        per_item = {item.item_id: own for item in source.items if (own := source.item_sampling(item)) is not None}
        overridden = []
        if suite.max_new_tokens is not None and suite.max_new_tokens != generation.max_new_tokens:
            overridden.append("max_new_tokens")
        if not runs_own and (generation.sampling is not None or per_item) and \
                ({generation.sampling, *per_item.values()} - {None, run_sampling}):
            overridden.append("sampling")
        item_sampling = {i: s for i, s in per_item.items() if s != sampling} if runs_own else {}
        job = TaskJob(source, arms, suite.repeats_for(source.name, name),
                      suite.max_new_tokens or generation.max_new_tokens, sampling, suite.seed, item_sampling,
                      tuple(overridden), thinking_budget(suite))
        if job.thinking_budget is not None:
            try:
                job.thinking_budget.check(job.max_new_tokens)
            except ConfigError as exc:
                raise ConfigError(f"task {job.name!r}: {exc}") from None
        for arm in arms[1:]:  # the AR baseline has no drafter
            check_method(arm.name, arm.method, suite.draft, job.sampling)
        check_modes(job)
        jobs.append(job)
    return RunPlan(suite, tuple(jobs), run_key(suite, arms, sources))


def thinking_budget(suite: SuiteSpec) -> ThinkingBudget | None:
    """The suite's thinking budget (None when off)."""
    if suite.thinking_budget < 0:
        raise ConfigError(f"--thinking-budget must be >= 0 (0: off), got {suite.thinking_budget}")
    if not suite.thinking_budget:
        return None
    if suite.thinking_budget_text is not None:
        return ThinkingBudget(suite.thinking_budget, suite.thinking_budget_text)
    return ThinkingBudget(suite.thinking_budget)


def check_modes(job: TaskJob) -> None:
    """Every arm's rule supports every decoding mode the task uses (a task that samples some items, as MT-Bench's
    per-category temperatures do, needs rules that run under sampling): checked before any model loads."""
    modes = {"greedy" if s.greedy else "sampling" for s in job.samplings()}
    for arm in job.arms:
        missing = sorted(modes - set(POLICIES.get(arm.method.policy).modes))
        if missing:
            how = (" (the task's own temperatures sample some items: decode it with the run's sampling with "
                   "--override-task-sampling, override_task_sampling: true in a suite)" if job.item_sampling else "")
            raise ConfigError(f"method {arm.name!r} (rule {arm.method.policy!r}) does not support {missing[0]} "
                              f"decoding, which task {job.name!r} uses{how}")


def check_held_out(arms: tuple[Arm, ...], sources: list[TaskSource]) -> None:
    """An arm whose policy was trained on some items (a trained judge's head) must not be evaluated on them: the
    same task (by name or by data set fingerprint) sharing an item id is a configuration error."""
    for arm in arms:
        for trained in arm.provenance.get("trained_on", ()):
            seen = set(map(str, trained.get("item_ids", ())))
            for source in sources:
                if source.name != trained.get("task") and source.fingerprint != trained.get("data_fingerprint"):
                    continue
                overlap = [item.item_id for item in source.items if item.item_id in seen]
                if overlap:
                    raise ConfigError(
                        f"arm {arm.name!r} was trained on {len(overlap)} of the items of task {source.name!r} this "
                        f"run evaluates ({', '.join(overlap[:3])}{', ...' if len(overlap) > 3 else ''}); evaluate on "
                        "items disjoint from the mining items (mine with `judge mine --items`, e.g. from the end of "
                        "the task, and compare with --limit)")


def run_key(suite: SuiteSpec, arms: tuple[Arm, ...], sources: list[TaskSource]) -> str:
    """A hash of everything that decides the results: the suite (less limit/repeats/warm-up) and the resolved
    method and task records (so an edited YAML starts a new run instead of mixing results)."""
    payload: dict[str, Any] = {
        "suite": suite.key_fields(),
        "arms": [_arm_identity(a, suite.target) for a in arms],
        "tasks": [_task_identity(s.record()) for s in sources],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def trained_head_card(target: str, drafter: DrafterSpec | None) -> str | None:
    """The sha256 of the card of the head ``head=trained`` names for ``target`` (None for any other drafter, or
    before one is trained): a head trained again has other weights, so the run it drafts for is a new one."""
    if drafter is None or drafter.knobs.get("head") != TRAINED:
        return None
    card = trained_head_dir(target, drafter.kind) / "card.json"
    return hashlib.sha256(card.read_bytes()).hexdigest()[:16] if card.is_file() else None


def _arm_identity(arm: Arm, target: str | None = None) -> dict[str, Any]:
    method = arm.method.identity()
    identity = {"name": arm.name, "method": method, "k": arm.k,
                "drafter": None if arm.drafter is None else arm.drafter.model_dump()}
    revision = POLICIES.get(arm.method.policy).origin.revision
    if revision:  # a rule whose verdicts changed: its earlier runs are not resumed as this one (0 keeps old keys)
        identity["policy_revision"] = revision
    if arm.provenance:  # a trained head: which one (its file's hash, pair, data) decides the verdicts
        identity["provenance"] = dict(arm.provenance)
    card = None if target is None else trained_head_card(target, arm.drafter)
    if card is not None:  # a draft head trained here: which training made its weights decides the drafts
        identity["trained_head"] = card
    return identity


def _task_identity(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in ("origin", "description")}


def default_out_dir(suite: SuiteSpec) -> Path:
    """``runs/<target>_vs_<draft>``: deterministic, so the same command resumes into the same folder."""
    def clean(name: str | None) -> str:
        return "".join(c if c.isalnum() or c in "-._" else "-" for c in Path(name or "none").name)

    return Path("runs") / f"{clean(suite.target)}_vs_{clean(suite.draft)}"
