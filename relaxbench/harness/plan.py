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
from relaxbench.config import DrafterSpec, MethodSpec, SuiteSpec, TaskSpec, load_method, load_task
from relaxbench.data import TaskItem, load_items
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.decoding.sampling import SamplingParams
from relaxbench.errors import ConfigError
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

    def decode_config(self, arm: Arm) -> DecodeConfig:
        return DecodeConfig(k=arm.k, max_new_tokens=self.max_new_tokens, sampling=self.sampling,
                            stop_strings=self.task.stop, seed=self.seed)


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
    tasks = [load_task(name) for name in suite.tasks]
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"task {next(n for n in names if names.count(n) > 1)!r} is listed twice")
    for option, given_names in (("--data-file", suite.data_files), ("--task-limit", suite.limits)):
        unknown = sorted(set(given_names) - set(names) - set(suite.tasks))
        if unknown:
            raise ConfigError(f"{option} names task {unknown[0]!r}, which is not in --tasks "
                              f"({', '.join(names)}){did_you_mean(unknown[0], names)}")
    sampling = SamplingParams(suite.temperature, suite.top_k, suite.top_p)
    jobs = []
    for given, task in zip(suite.tasks, tasks):
        data_file = suite.data_files.get(task.name, suite.data_files.get(given))
        limit = suite.limits.get(task.name, suite.limits.get(given, suite.limit))
        items, fingerprint = load_items(task, data_file, limit)
        jobs.append(TaskJob(task, tuple(items), fingerprint, arms, suite.repeats,
                            suite.max_new_tokens or task.max_new_tokens, sampling, suite.seed))
    return RunPlan(suite, tuple(jobs), run_key(suite, arms, tasks))


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
