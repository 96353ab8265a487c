"""What a ``compare`` run does, decided before any model is loaded: the arms, the tasks' items, the run key.

Everything here is validated up front, so bad input (an unknown method or task, a malformed YAML file, a missing
or empty data file) fails in seconds, before a model loads and before the store is touched.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from relaxbench.arms import effective_drafter, resolve_k
from relaxbench.config import DrafterSpec, MethodSpec, SuiteSpec, TaskSpec, is_lm_eval_name, load_method, load_task
from relaxbench.data import TaskItem, load_items
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.registry import did_you_mean

BASELINE_ARM = "ar"


@dataclass(frozen=True)
class Arm:
    """One column of the grid: a method at one sweep point, or the AR baseline."""

    name: str  # unique in a run: the sweep point's name ("fly[theta=0.3]"), or "ar"
    method: MethodSpec
    base_method: str  # the method before sweep expansion (groups a curve)
    drafter: DrafterSpec | None  # after --draft ngram substitution; None for AR
    k: int  # 0 for AR

    @property
    def is_baseline(self) -> bool:
        return self.name == BASELINE_ARM

    def needs_draft_model(self) -> bool:
        from relaxbench.decoding.drafters import DRAFTERS

        return self.drafter is not None and DRAFTERS.get(self.drafter.kind).needs_draft_model


@dataclass(frozen=True)
class TaskJob:
    """One task's share of a run: its items and every arm; the unit an executor hands out."""

    task: TaskSpec
    items: tuple[TaskItem, ...]
    fingerprint: str
    arms: tuple[Arm, ...]
    repeats: int
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    lm_eval: Any = None  # for lm_eval:NAME tasks, the LmEvalTask (integrations/lm_eval_source.py)

    def decode_config(self, arm: Arm) -> DecodeConfig:
        return DecodeConfig(k=arm.k, max_new_tokens=self.max_new_tokens, sampling=self.sampling,
                            stop_strings=self.task.stop, seed=self.seed)

    @property
    def target_alone(self) -> bool:
        """An lm-eval task answered by the target's likelihoods: no generation, the same for every arm."""
        return self.lm_eval is not None and self.lm_eval.target_alone


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
        """What a user should know before the run starts (settings of lm-eval tasks that compare reads but
        does not act on, tasks that only the target scores)."""
        out = []
        for job in self.jobs:
            if job.lm_eval is None:
                continue
            if job.lm_eval.ignored_gen_kwargs:
                out.append(f"{job.task.name}: generation kwargs ignored by relaxbench's engine: "
                           f"{', '.join(job.lm_eval.ignored_gen_kwargs)}")
            if job.target_alone:
                out.append(f"{job.task.name}: {job.lm_eval.output_type} task, scored by the target's likelihoods "
                           "once (in the AR cell); every method scores the same by definition")
        return out


def split_names(value: str | tuple[str, ...] | list[str], what: str) -> tuple[str, ...]:
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v).strip() for v in value]
    names = [n for n in names if n]
    if not names:
        raise ConfigError(f"give at least one {what}")
    return tuple(names)


def build_arms(suite: SuiteSpec) -> tuple[Arm, ...]:
    """The AR baseline first, then every sweep point of every method, in the order given."""
    baseline = MethodSpec(name=BASELINE_ARM, policy="none", source="baseline")
    arms = [Arm(BASELINE_ARM, baseline, BASELINE_ARM, None, 0)]
    seen = {BASELINE_ARM: "the AR baseline"}
    for name in suite.methods:
        method = load_method(name)
        if method.policy == "none":
            raise ConfigError(f"method {name!r} is the AR baseline (policy 'none'), which every run includes; "
                              "leave it out of --methods")
        for point in method.expand():
            if point.name in seen:
                raise ConfigError(f"arm {point.name!r} appears twice (from {seen[point.name]} and {name!r})")
            seen[point.name] = repr(name)
            drafter = effective_drafter(point, suite.draft)
            if drafter is not None and drafter.kind == "model" and suite.draft is None:
                raise ConfigError(f"method {point.name!r} drafts with a draft model: pass --draft NAME "
                                  "(or --draft ngram for prompt lookup)")
            arms.append(Arm(point.name, point, method.name, drafter, resolve_k(point, suite.k)))
    return tuple(arms)


def build_plan(suite: SuiteSpec) -> RunPlan:
    """Validate the suite and load every task's items (no model is loaded here)."""
    if suite.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {suite.repeats}")
    if suite.max_new_tokens is not None and suite.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {suite.max_new_tokens}")
    if suite.k is not None and suite.k < 1:
        raise ConfigError(f"-k must be >= 1, got {suite.k}")
    arms = build_arms(suite)
    if suite.limit is not None and suite.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {suite.limit}")
    own = [name for name in suite.tasks if not is_lm_eval_name(name)]
    tasks = {name: load_task(name) for name in own}
    lm_eval_tasks = _load_lm_eval_tasks(suite)
    names = [tasks[n].name for n in own] + [t.name for loaded in lm_eval_tasks.values() for t in loaded]
    if len(set(names)) != len(names):
        raise ConfigError(f"task {next(n for n in names if names.count(n) > 1)!r} is listed twice")
    readers = {tasks[n].name for n in own} | set(own)
    unknown = sorted(set(suite.data_files) - readers)
    if unknown:
        raise ConfigError(f"--data-file names task {unknown[0]!r}, which is not in --tasks "
                          f"({', '.join(names)}){did_you_mean(unknown[0], names)}"
                          + ("; lm_eval:NAME tasks read lm-eval's own data" if is_lm_eval_name(unknown[0]) else ""))
    unknown = sorted(set(suite.limits) - readers - set(suite.tasks))
    if unknown:
        raise ConfigError(f"--task-limit names task {unknown[0]!r}, which is not in --tasks "
                          f"({', '.join(names)}){did_you_mean(unknown[0], names)}")
    sampling = SamplingParams(suite.temperature, suite.top_k, suite.top_p)
    jobs = []
    for given in suite.tasks:
        if given in lm_eval_tasks:
            jobs.extend(_lm_eval_job(task, arms, suite, sampling) for task in lm_eval_tasks[given])
            continue
        task = tasks[given]
        data_file = suite.data_files.get(task.name, suite.data_files.get(given))
        limit = suite.limits.get(task.name, suite.limits.get(given, suite.limit))
        items, fingerprint = load_items(task, data_file, limit)
        jobs.append(TaskJob(task, tuple(items), fingerprint, arms, suite.repeats,
                            suite.max_new_tokens or task.max_new_tokens, sampling, suite.seed))
    return RunPlan(suite, tuple(jobs), run_key(suite, arms, [job.task for job in jobs]))


def _load_lm_eval_tasks(suite: SuiteSpec) -> dict[str, list[Any]]:
    """Every ``lm_eval:NAME`` of the suite, loaded through lm-eval: given name → its tasks (a group or tag gives
    several). lm-eval is imported only when a suite asks for one of its tasks."""
    given = [name for name in suite.tasks if is_lm_eval_name(name)]
    if not given:
        return {}
    from relaxbench.integrations.lm_eval_source import ChatTemplate, load_lm_eval_tasks

    chat = None
    if suite.apply_chat_template:  # prompts rendered with the target's chat template need its tokenizer (only)
        from relaxbench.models import load_tokenizer

        chat = ChatTemplate(load_tokenizer(suite.target), suite.target.replace("/", "__"))
    by_limit: dict[int | None, list[str]] = {}  # one load per distinct item limit (--task-limit)
    for name in given:
        by_limit.setdefault(suite.limits.get(name, suite.limit), []).append(name)
    loaded: dict[str, list[Any]] = {}
    for limit, names in by_limit.items():
        loaded.update(load_lm_eval_tasks(names, include_paths=suite.include_paths, limit=limit,
                                         num_fewshot=suite.num_fewshot, chat=chat))
    return {name: loaded[name] for name in given}


def _lm_eval_job(task: Any, arms: tuple[Arm, ...], suite: SuiteSpec, sampling: SamplingParams) -> TaskJob:
    """A job for an lm-eval task. Its generation settings are the task's (stop strings, max_gen_toks, sampling),
    as in an ``lm_eval`` run; --max-new-tokens overrides max_gen_toks, and --temperature/--top-k/--top-p override
    the task's sampling when any of them is set away from greedy decoding's defaults."""
    spec = task.task_spec()
    task_sampling = task.settings.sampling if task.settings is not None else SamplingParams()
    return TaskJob(spec, tuple(task.items()), task.fingerprint, arms, suite.repeats,
                   suite.max_new_tokens or spec.max_new_tokens,
                   sampling if sampling != SamplingParams() else task_sampling, suite.seed, lm_eval=task)


def run_key(suite: SuiteSpec, arms: tuple[Arm, ...], tasks: list[TaskSpec]) -> str:
    """A hash of everything that decides the results: the suite (less limit/repeats/warm-up) and the resolved
    method and task specs (so an edited YAML starts a new run instead of mixing results)."""
    payload: dict[str, Any] = {
        "suite": suite.key_fields(),
        "arms": [{"name": a.name, "method": _spec_record(a.method), "k": a.k,
                  "drafter": None if a.drafter is None else asdict(a.drafter)} for a in arms],
        "tasks": [_task_record(t) for t in tasks],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _spec_record(method: MethodSpec) -> dict[str, Any]:
    data = asdict(method)
    data.pop("source", None)
    data.pop("description", None)
    return data


def _task_record(task: TaskSpec) -> dict[str, Any]:
    data = task.to_record()
    data.pop("origin", None)
    data.pop("description", None)
    return data


def method_record(method: MethodSpec) -> dict[str, Any]:
    """The full method spec as stored with a cell (description and source file included)."""
    return asdict(method)


def default_out_dir(suite: SuiteSpec) -> Path:
    """``runs/<target>_vs_<draft>``: deterministic, so the same command resumes into the same folder."""
    def clean(name: str | None) -> str:
        return "".join(c if c.isalnum() or c in "-._" else "-" for c in Path(name or "none").name)

    return Path("runs") / f"{clean(suite.target)}_vs_{clean(suite.draft)}"
