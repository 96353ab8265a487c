"""What a ``compare`` run computes: the suite (a YAML file of ``suites/``, command-line flags over it). A suite YAML
may start from others with ``extends:`` (suite names or YAML paths; the rules are ``validation.resolve_extends``'s)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from relaxbench.errors import ConfigError
from relaxbench.models.device import DEVICE_MAPS
from relaxbench.registry import did_you_mean
from relaxbench.validation import (Finite, Flag, Integer, Option, Spec, SpecKind, Text, check_runnable, resolve_extends,
                                   spec_options, validate, yaml_files)


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

    target: Annotated[Text, Option("target model: local dir, .gguf, packaged alias or hub id")]
    draft: Annotated[Text | None, Option("draft model name, or 'ngram' for prompt lookup")] = None
    methods: Annotated[tuple[Text, ...], Option(
        "comma-separated methods (methods/*.yaml names, YAML paths, or policy names); each sweep point is its own arm",
        form="csv")]
    tasks: Annotated[tuple[Text, ...], Option(
        "comma-separated tasks (tasks/*.yaml names or YAML paths, or lm_eval:NAME for an lm-evaluation-harness task)",
        form="csv")]
    limit: Annotated[Integer | None, Option("first N items of each task (default: all)", key="no")] = Field(
        None, ge=1)
    repeats: Annotated[Integer, Option(
        "R samples per item and turn, arms interleaved (default 1): independent samples under sampling (scored as "
        "avg@R), the same output re-timed under greedy decoding", key="no")] = Field(1, ge=1)
    max_new_tokens: Annotated[Integer | None, Option("override every task's max_new_tokens")] = Field(None, ge=1)
    k: Annotated[Integer | None, Option("draft tokens per round (default: each method's, else 5)", short="-k")] = Field(
        None, ge=1)
    temperature: Annotated[Finite, Option("0 = greedy (default)")] = Field(0.0, ge=0)
    top_k: Annotated[Integer, Option("keep the k likeliest tokens when sampling (default 0: all)")] = Field(0, ge=0)
    top_p: Annotated[Finite, Option("nucleus sampling's p (default 1: off)")] = Field(1.0, gt=0, le=1)
    seed: Annotated[Integer, Option("the run's seed (each sample's own comes from it and the sample's key)")] = Field(
        0, ge=0)
    # the run's sampling for every task, over a task's own (an lm-eval task's generation kwargs, MT-Bench's
    # temperature per category), which otherwise applies whenever the run leaves temperature, top_k, top_p unset
    override_task_sampling: Annotated[Flag, Option(
        "decode every task with the run's sampling (greedy unless --temperature), over a task's own (MT-Bench's "
        "temperature per category, an lm-eval task's generation kwargs)", form="switch", key="when-set")] = False
    # Xia et al.'s thinking-budget forcing (decoding/budget.py): at this many new tokens a sample still thinking gets
    # the closing text and </think> appended, then its answer is generated (0: off)
    thinking_budget: Annotated[Integer, Option(
        "Xia et al.'s thinking-budget forcing: at N new tokens a sample still thinking gets their closing text and "
        "</think> appended, then its answer is generated (0: off; on in the xia-paper suites)", metavar="N",
        key="when-set")] = Field(0, ge=0)
    # the closing text (default: Xia et al.'s, ending in </think>)
    thinking_budget_text: Annotated[Text | None, Option(flag=None, key="when-set")] = None
    device: Annotated[Text, Option("cpu, cuda, cuda:1 ... (default: cuda if available)")] = "auto"
    dtype: Annotated[Text, Option("target dtype (default: per device; see docs/performance.md)")] = "auto"
    draft_dtype: Annotated[Text, Option("draft model dtype (default: per device)")] = "auto"
    warmup: Annotated[Integer, Option("untimed warm-up generations per arm (default 1)", key="no")] = Field(1, ge=0)
    data_files: Annotated[dict[str, str], Option(
        "a local JSONL file for TASK (repeatable)", flag="--data-file", metavar="TASK=PATH", form="assign",
        key="no")] = Field(default_factory=dict)
    # lm_eval:NAME tasks: overrides the task's few-shot count (lm-eval's rules)
    num_fewshot: Annotated[Integer | None, Option(
        "lm_eval:NAME tasks: few-shot examples (lm-eval's rules: a task that sets 0 keeps 0)", key="no")] = Field(
        None, ge=0)
    include_paths: Annotated[tuple[Text, ...], Option(
        "lm_eval:NAME tasks: a folder of lm-eval task YAMLs, searched first (repeatable)", flag="--include-path",
        metavar="DIR", form="append", key="no")] = ()
    apply_chat_template: Annotated[Flag, Option(
        "lm_eval:NAME tasks: render prompts with the target's chat template, few-shot examples as turns (as "
        "lm-eval's --apply_chat_template)", form="switch", key="no")] = False
    limits: Annotated[dict[str, Integer], Option(
        "first N items of TASK, over --limit (repeatable)", flag="--task-limit", metavar="TASK=N", form="assign",
        key="no")] = Field(default_factory=dict)
    task_repeats: Annotated[dict[str, Integer], Option(
        "R repeats for TASK, over --repeats (repeatable)", flag="--task-repeats", metavar="TASK=R", form="assign",
        key="no")] = Field(default_factory=dict)
    chat_template_args: Annotated[dict[str, Any], Option(
        "an argument of the target's chat template for every task, over the tasks' own (e.g. enable_thinking=false; "
        "repeatable)", flag="--chat-template-arg", metavar="KEY=VALUE", form="assign", key="when-set")] = Field(
        default_factory=dict)
    # where the run executes (not part of the run key: a run started in-process resumes on Ray and back)
    executor: Annotated[Text, Option(
        "where jobs run: in-process (default) or ray (docs/cluster.md; needs relaxbench[ray])", key="no")] = \
        "in-process"
    # checked by the executor's own Options spec; set by the executor's flags (--ray-address, --workers, ...)
    executor_options: Annotated[dict[str, Any], Option(flag=None, key="no")] = Field(default_factory=dict)
    device_map: Annotated[Text | None, Option(
        "spread the target over the GPUs a worker has (auto, balanced, balanced_low_0, sequential: accelerate's "
        "placement); the draft stays on the first", metavar="STRATEGY", key="no")] = None
    # cost profiles the tables and the report price proxy speed-ups with (device names, profile files): recorded
    # with the run, they change no sample, so they are not part of its key
    profiles: Annotated[tuple[Text, ...], Option(
        "price proxy speed-ups on a cost profile: a device (relaxbench profile --list), a profile file (relaxbench "
        "profile ... --out FILE) or this-machine; repeatable; recorded with the run, so summary and report use it "
        "too", flag="--profile", metavar="NAME|FILE", form="append", key="no")] = ()
    # the decoding engine: relaxbench's own loop (transformers, batch 1), vLLM (docs/engines.md) or one an executor
    # plug-in runs (the executor cards say which there are: harness/executor.engine_card refuses any other); and the
    # requests vLLM keeps in flight (its max_num_seqs), one run per value
    engine: Annotated[Text, Option(
        "decoding engine: relaxbench's own loop (transformers, default), vLLM (docs/engines.md; `make install` "
        "sets it up) or one an executor plug-in registers", key="off-default")] = "transformers"
    concurrency: Annotated[tuple[Integer, ...], Option(
        "vllm: requests in flight (vLLM's max_num_seqs), one run per value (default 1)", metavar="N[,M,...]",
        form="csv", key="off-default")] = (1,)
    # vLLM's engine arguments (EngineArgs fields: tensor_parallel_size, max_model_len, quantization ...), checked
    # against the installed vLLM before a run starts; the vLLM engine only
    engine_args: Annotated[dict[str, Any], Option(
        "vllm: an argument of vLLM's engine (tensor_parallel_size=2, gpu_memory_utilization=0.9, max_model_len=8192, "
        "quantization=fp8, enforce_eager=false), checked against the installed vLLM before anything starts "
        "(repeatable; docs/engines.md)", flag="--engine-arg", metavar="KEY=VALUE", form="assign",
        key="when-set")] = Field(default_factory=dict)

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
        """The fields that identify the run, as each field's declaration (``Option.key``) says. The lm-eval options
        are left out: what they change is in the tasks' records (lm-eval's resolved task config), which the run key
        includes. vLLM's engine arguments that only size memory are left out too."""
        data = self.model_dump()
        if "engine_args" in data:
            data["engine_args"] = {k: v for k, v in data["engine_args"].items() if k not in MEMORY_ENGINE_ARGS}
        for name, option in spec_options(type(self)).items():
            if (option.key == "no" or (option.key == "when-set" and not data[name])
                    or (option.key == "off-default" and data[name] == type(self).model_fields[name].default)):
                data.pop(name)
        return data

    def record(self) -> dict[str, Any]:
        return self.model_dump()


# what each field changes in the run key, read from its declaration (``Option.key``): the fields that do not change
# what a sample's result is (raising them extends a run instead of starting a new one); those added after runs were
# stored (part of the key only when set); those added with a default (part of the key only away from it), so every
# run stored before them keeps its key
VOLATILE_FIELDS = tuple(name for name, option in spec_options(SuiteSpec).items() if option.key == "no")
ADDED_KEY_FIELDS = tuple(name for name, option in spec_options(SuiteSpec).items() if option.key == "when-set")
DEFAULT_KEY_FIELDS: dict[str, Any] = {name: SuiteSpec.model_fields[name].default
                                      for name, option in spec_options(SuiteSpec).items() if option.key == "off-default"}


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
