"""What a ``compare`` run computes: the suite (a YAML file of ``suites/``, command-line flags over it). A suite YAML
may start from others with ``extends:`` (suite names or YAML paths; the rules are ``validation.resolve_extends``'s)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from relaxbench.errors import ConfigError
from relaxbench.models.device import DEVICE_MAPS
from relaxbench.registry import did_you_mean
from relaxbench.validation import (Finite, Flag, Integer, Spec, SpecKind, Text, check_runnable, resolve_extends, validate,
                                   yaml_files)

# fields that do not change what a sample's result is: raising them extends a run instead of starting a new one
VOLATILE_FIELDS = ("limit", "repeats", "warmup", "data_files", "num_fewshot", "include_paths", "apply_chat_template",
                   "limits", "task_repeats", "executor", "executor_options", "device_map", "profiles")

# fields added to the suite after runs were stored: part of the key only when set
ADDED_KEY_FIELDS = ("chat_template_args", "override_task_sampling", "thinking_budget", "thinking_budget_text",
                    "engine_args")

# vLLM engine arguments relaxbench sets itself, and what sets each
OWNED_ENGINE_ARGS = {"model": "--target", "tokenizer": "the target's own, --target", "dtype": "--dtype",
                     "seed": "--seed", "max_num_seqs": "--concurrency", "speculative_config": "--methods and --draft",
                     "disable_log_stats": "it reads vLLM's statistics",
                     "per_request_spec_decode_metrics": "it reads vLLM's per-request metrics",
                     "worker_extension_cls": "its adapter's records"}
# vLLM engine arguments that only size memory or manage processes: left out of the run key (a run resumes with
# other values); every other engine argument can change what is computed, so it enters the key
MEMORY_ENGINE_ARGS = frozenset({"gpu_memory_utilization", "kv_cache_memory_bytes", "swap_space", "cpu_offload_gb",
                                "distributed_executor_backend", "max_parallel_loading_workers"})

def check_not_owned(engine_args: Mapping[str, Any]) -> None:
    """``ValueError`` (one line) for the first engine argument relaxbench sets itself (``compare`` and ``generate``)."""
    owned = [k for k in engine_args if k in OWNED_ENGINE_ARGS]
    if owned:
        raise ValueError(f"{owned[0]!r} is set by relaxbench ({OWNED_ENGINE_ARGS[owned[0]]})")


# fields added with a default: part of the key only away from it, so every run stored before them keeps its key
DEFAULT_KEY_FIELDS: dict[str, Any] = {"engine": "transformers", "concurrency": (1,)}

ENGINES = ("transformers", "vllm")


def split_names(value: Any, what: str) -> tuple[str, ...]:
    """A comma-separated string or a list of names, as a non-empty tuple."""
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v).strip() for v in value]
    names = [n for n in names if n]
    if not names:
        raise ConfigError(f"give at least one {what}")
    return tuple(names)


class SuiteSpec(Spec):
    """Everything that decides what a ``compare`` run computes. Its ``key_fields()`` identify the run in the store:
    rerunning the same suite resumes it. ``limit`` (``limits``: per task, over ``limit``) and ``repeats``
    (``task_repeats``: per task) are not part of the key, so raising them extends a run instead of starting a new
    one (every added sample is still interleaved across all arms). Under sampling a repeat is an independent
    sample (its own seed, from ``seed`` and the sample's key); under greedy decoding it re-times the same output.
    ``chat_template_args`` go to the target's chat template for every task (over a task's own)."""

    target: Text
    draft: Text | None = None
    methods: tuple[Text, ...]
    tasks: tuple[Text, ...]
    limit: Integer | None = Field(None, ge=1)
    repeats: Integer = Field(1, ge=1)
    max_new_tokens: Integer | None = Field(None, ge=1)  # overrides every task's own
    k: Integer | None = Field(None, ge=1)  # overrides every method's own
    temperature: Finite = Field(0.0, ge=0)
    top_k: Integer = Field(0, ge=0)
    top_p: Finite = Field(1.0, gt=0, le=1)
    seed: Integer = Field(0, ge=0)
    # the run's sampling for every task, over a task's own (an lm-eval task's generation kwargs, MT-Bench's
    # temperature per category), which otherwise applies whenever the run leaves temperature, top_k, top_p unset
    override_task_sampling: Flag = False
    # Xia et al.'s thinking-budget forcing (decoding/budget.py): at this many new tokens a sample still thinking gets
    # the closing text and </think> appended, then its answer is generated (0: off)
    thinking_budget: Integer = Field(0, ge=0)
    thinking_budget_text: Text | None = None  # the closing text (default: Xia et al.'s, ending in </think>)
    device: Text = "auto"
    dtype: Text = "auto"
    draft_dtype: Text = "auto"
    warmup: Integer = Field(1, ge=0)
    data_files: dict[str, str] = Field(default_factory=dict)
    # lm_eval:NAME tasks: overrides the task's few-shot count (lm-eval's rules)
    num_fewshot: Integer | None = Field(None, ge=0)
    include_paths: tuple[Text, ...] = ()  # lm_eval:NAME tasks: more folders of lm-eval task YAMLs
    apply_chat_template: Flag = False  # lm_eval:NAME tasks: render prompts with the target's chat template
    limits: dict[str, Integer] = Field(default_factory=dict)  # per-task item limits (task name -> N)
    task_repeats: dict[str, Integer] = Field(default_factory=dict)  # per-task repeats, over ``repeats``
    chat_template_args: dict[str, Any] = Field(default_factory=dict)  # over every task's own (enable_thinking)
    # where the run executes (not part of the run key: a run started in-process resumes on Ray and back)
    executor: Text = "in-process"  # a registered executor: in-process, ray
    executor_options: dict[str, Any] = Field(default_factory=dict)  # checked by the executor's own Options spec
    device_map: Text | None = None  # spread the target over the GPUs (accelerate's strategy: models.DEVICE_MAPS)
    # cost profiles the tables and the report price proxy speed-ups with (device names, profile files): recorded
    # with the run, they change no sample, so they are not part of its key
    profiles: tuple[Text, ...] = ()
    # the decoding engine: relaxbench's own loop (transformers, batch 1) or vLLM (docs/engines.md); and the
    # requests vLLM keeps in flight (its max_num_seqs), one run per value
    engine: Text = "transformers"
    concurrency: tuple[Integer, ...] = (1,)
    # vLLM's engine arguments (EngineArgs fields: tensor_parallel_size, max_model_len, quantization ...), checked
    # against the installed vLLM before a run starts; the vLLM engine only
    engine_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        if value not in ENGINES:
            raise ValueError(f"must be one of {', '.join(ENGINES)}, got {value!r}{did_you_mean(value, list(ENGINES))}")
        return value

    @field_validator("engine_args", mode="before")
    @classmethod
    def _engine_args(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in value):
            raise ValueError("must map vLLM engine argument names (tensor_parallel_size, ...) to values")
        check_not_owned(value)
        return dict(value)

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, str):
            try:
                value = [int(v) for v in value.split(",") if v.strip()]
            except ValueError:
                raise ValueError(f"must be comma-separated positive integers, got {value!r}") from None
        if not isinstance(value, (list, tuple)) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
            raise ValueError(f"must be one or more positive integers, got {value!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"lists a value twice: {value!r}")
        return tuple(value)

    @field_validator("methods", "tasks", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError("must be a non-empty list")
        return tuple(str(v) for v in value)

    @field_validator("profiles", mode="before")
    @classmethod
    def _profiles(cls, value: Any) -> Any:
        value = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
            raise ValueError("must be a profile name or a list of them")
        return value

    @field_validator("include_paths", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        value = [value] if isinstance(value, str) else value
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
            raise ValueError("must be a folder or a list of folders")
        return value

    @field_validator("data_files", mode="before")
    @classmethod
    def _data_files(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("must map task names to files")
        return {str(k): str(v) for k, v in value.items()}

    @field_validator("device_map")
    @classmethod
    def _device_map(cls, value: str | None) -> str | None:
        if value is not None and value not in DEVICE_MAPS:
            raise ValueError(f"must be one of {', '.join(DEVICE_MAPS)}, got {value!r}"
                             f"{did_you_mean(value, list(DEVICE_MAPS))}")
        return value

    @field_validator("limits", "task_repeats")
    @classmethod
    def _limits(cls, value: dict[str, int]) -> dict[str, int]:
        for task, n in value.items():
            if n < 1:
                raise ValueError(f"{task!r} must be a positive integer, got {n!r}")
        return value

    def repeats_for(self, *names: str) -> int:
        """The repeats of a task (its ``task_repeats`` entry under any of its names, else ``repeats``)."""
        return next((self.task_repeats[n] for n in names if n in self.task_repeats), self.repeats)

    def key_fields(self) -> dict[str, Any]:
        """The fields that identify the run. The lm-eval options are left out: what they change is in the tasks'
        records (lm-eval's resolved task config), which the run key includes."""
        data = self.model_dump()
        for volatile in VOLATILE_FIELDS:
            data.pop(volatile)
        data["engine_args"] = {k: v for k, v in data["engine_args"].items() if k not in MEMORY_ENGINE_ARGS}
        for added in ADDED_KEY_FIELDS:  # fields added later stay out of the key at their default: old runs resume
            if not data[added]:
                data.pop(added)
        for name, default in DEFAULT_KEY_FIELDS.items():
            if data[name] == default:
                data.pop(name)
        return data

    def record(self) -> dict[str, Any]:
        return self.model_dump()


# ``extends:`` for suites: the per-task and argument mappings merge key by key (a child suite changes one task's
# limit or one engine argument); the lists (methods, tasks, profiles, include_paths) and every other field replace
SUITE_KIND = SpecKind("suites", "suite", ("data_files", "limits", "task_repeats", "chat_template_args",
                                          "executor_options", "engine_args"))


def suite_file_fields(data: Any, where: str) -> dict[str, Any]:
    """The fields of a suite YAML, its ``extends:`` parents applied (``validation.resolve_extends``), checked by
    name and type (the caller merges command-line flags over them)."""
    data = resolve_extends(data, where, SUITE_KIND)
    probe = {"target": "-", "methods": ["-"], "tasks": ["-"], **{k: v for k, v in data.items() if v is not None}}
    validate(SuiteSpec, probe, where)
    return dict(data)


def suite_path(name: str) -> Path:
    """A suite file: a path, or the name of a shipped suite (``suites/NAME.yaml``, e.g. ``default``)."""
    path = Path(name)
    if path.is_file() or path.suffix in (".yaml", ".yml") or "/" in name:
        check_runnable(path, "suite")
        return path
    shipped = shipped_suites()
    if name not in shipped:
        raise ConfigError(f"unknown suite {name!r}{did_you_mean(name, list(shipped))} "
                          f"(shipped suites: {', '.join(shipped) or 'none'}; or give a YAML path)")
    return shipped[name]


def shipped_suites() -> dict[str, Path]:
    """The shipped suites by name (parent-only files, ``_NAME.yaml``, left out)."""
    return yaml_files("suites")
