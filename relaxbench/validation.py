"""The one validation mechanism: every spec, knob set, scorer/drafter argument set and model-argument set is a
pydantic v2 model derived from ``Spec`` (frozen, unknown fields forbidden), validated through ``validate``.

Why pydantic: typed frozen models with field defaults and validators are what every spec here needs, and its
structured errors (location, error type, input) let ``validate`` turn any failure into the same one-line message
with a did-you-mean for a misspelt name, whichever spec failed. Values are checked as a user means them: a number
field takes an int, a float or ``inf``/``-inf`` (the way a command line or YAML writes infinity) but not NaN, a bool
or a numeric string (``Finite`` refuses the infinities too, for settings where they mean nothing); an integer field
takes neither a bool nor a float; lists become tuples. Bounds are stated on the field (``Field(ge=0, lt=1)``) and
read back as ``must be >= 0, got -1``.

Also here, because every layer reads specs from files: ``load_yaml`` (errors name the file and line),
``builtin_dir`` (the shipped ``methods/``, ``tasks/`` and ``suites/`` folders) and ``resolve_extends``, the one
implementation of ``extends:`` for methods, tasks and suites (docs/specs.md): a spec file names one parent or a
list of them; the parents' fields are taken in order, then the file's own; the mapping fields its kind lists in
``SpecKind.merged`` are merged key by key (recursively; a key given as null removes the parent's), every other field
given replaces the parent's (lists included), and a field given as null falls back to its default. A file named
``_NAME.yaml`` is a parent only: ``extends:`` finds it, nothing lists, loads or runs it by itself.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INFINITIES = {"inf": float("inf"), "+inf": float("inf"), "infinity": float("inf"), "-inf": float("-inf"),
              "-infinity": float("-inf")}


def _number(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in INFINITIES:
        return INFINITIES[value.strip().lower()]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"must be a number, got {value!r}")
    return float(value)


def _finite(value: Any) -> Any:
    value = _number(value)
    if math.isinf(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return value


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {value!r}")
    return value


def _positive_integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


def _flag(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _text(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


Number = Annotated[float, BeforeValidator(_number)]
Finite = Annotated[float, BeforeValidator(_finite)]
Integer = Annotated[int, BeforeValidator(_integer)]
PositiveInteger = Annotated[int, BeforeValidator(_positive_integer)]
Flag = Annotated[bool, BeforeValidator(_flag)]
Text = Annotated[str, BeforeValidator(_text)]


class Spec(BaseModel):
    """Base of every validated spec: immutable, and a field it does not declare is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` applied and validated again."""
        return type(self).model_validate({**self.model_dump(), **changes})


S = TypeVar("S", bound=BaseModel)


FORMS = ("value", "switch", "csv", "append", "assign")
KEY_ROLES = ("yes", "no", "when-set", "off-default")


@dataclass(frozen=True)
class Option:
    """A spec field's one declaration of how it is set and what it changes, written with the field
    (``Annotated[Integer, Option(...)]``): the command line's flag is built from it (``commands/options.py``), a
    refused value names that flag, and the run key reads ``key``.

    ``form``: ``value`` (one value, typed as the field), ``switch`` (given or not), ``csv`` (a comma-separated
    string, split by the field's validator), ``append`` (repeatable, a list), ``assign`` (repeatable ``KEY=VALUE``,
    merged over the suite file's mapping). ``key``: whether the field is part of the run's identity — ``yes``;
    ``no`` (raising it extends a run); ``when-set`` (added after runs were stored: in the key only when set);
    ``off-default`` (in the key only away from its default). ``flag=None``: a field no flag sets."""

    help: str = ""
    flag: str | None = ""  # "" = --field-name; None = no flag
    short: str = ""
    metavar: str | None = None
    form: str = "value"
    key: str = "yes"

    def __post_init__(self) -> None:
        if self.form not in FORMS or self.key not in KEY_ROLES:
            raise ValueError(f"Option: form must be one of {FORMS} and key one of {KEY_ROLES}")

    def flag_name(self, field_name: str) -> str:
        return self.flag or "--" + field_name.replace("_", "-")


def spec_options(model: type[BaseModel]) -> dict[str, Option]:
    """Every field of ``model`` with its ``Option`` declaration, in field order (a field without one: ``Option()``,
    no help, a flag of its own name, part of the key)."""
    out = {}
    for name, info in model.model_fields.items():
        out[name] = next((m for m in info.metadata if isinstance(m, Option)), Option())
    return out


def validate(model: type[S], data: Any, where: str, what: str = "field") -> S:
    """``model`` validated from ``data``; any failure is a ``ConfigError`` of one line, prefixed with ``where``
    (``"rule 'fly'"``, ``"methods/fly.yaml"``) and naming the offending ``what`` (``knob``, ``field``, ...).
    Field names written with dashes (``max-ngram``) are read as underscores."""
    if isinstance(data, Mapping):
        data = {(k.replace("-", "_") if isinstance(k, str) else k): v for k, v in data.items()}
    elif data is not None and not isinstance(data, model):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ConfigError(one_line(exc, model, where, what)) from None


def one_line(exc: ValidationError, model: type[BaseModel], where: str, what: str = "field") -> str:
    """The first error of ``exc`` as one line: an unknown name gets a did-you-mean and the known names."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    name = ".".join(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        known = _field_names(model, loc[:-1])
        return (f"{where}: unknown {what} {loc[-1]!r}{did_you_mean(loc[-1], known)} "
                f"({what}s: {', '.join(known) or 'none'})")
    if kind == "missing":
        return f"{where}: missing {what} {name!r}"
    if kind == "literal_error":
        allowed = [a.strip().strip("'") for a in str(error.get("ctx", {}).get("expected", "")).replace(" or ", ", ")
                   .split(",") if a.strip()]
        given = str(error.get("input"))
        return (f"{where}: unknown {loc[-1]} {given!r}{did_you_mean(given, allowed)} "
                f"({loc[-1]}s: {', '.join(allowed)})")
    message = str(error.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if not loc:  # a model validator: the message says everything
        return f"{where}: {message}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        message = f"must be {_expected(kind)}, got {error.get('input')!r}"
    elif kind in BOUNDS:
        bound = next(iter(error.get("ctx", {}).values()), "?")
        message = f"must be {BOUNDS[kind]} {bound}, got {error.get('input')!r}"
    if what == "flag":  # a command-line flag, named as its declaration (``Option``) names it
        option = spec_options(model).get(loc[0]) if loc[0] in model.model_fields else None
        if option is not None and option.flag is not None:
            flag = option.short or option.flag_name(loc[0])
        else:
            flag = loc[0].replace("_", "-")
            flag = ("-" if len(flag) == 1 else "--") + flag
        return f"{where}: {flag} {message}"
    return f"{where}: {what} {name!r} {message}"


BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def _expected(kind: str) -> str:
    return {"dict_type": "a mapping", "list_type": "a list", "tuple_type": "a list", "string_type": "a string",
            "int_type": "an integer", "int_parsing": "an integer", "float_type": "a number",
            "float_parsing": "a number", "bool_type": "true or false", "bool_parsing": "true or false"}.get(
        kind, kind.removesuffix("_type").removesuffix("_parsing"))


def _field_names(model: type[BaseModel], path: list[str]) -> list[str]:
    """The field names of the (nested) model at ``path``."""
    current: Any = model
    for part in path:
        field = getattr(current, "model_fields", {}).get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        current = annotation
    return sorted(getattr(current, "model_fields", {}))


def builtin_dir(kind: str) -> Path:
    """The shipped ``methods/``, ``tasks/`` or ``suites/`` folder: the source checkout's, else the installed data
    files."""
    for candidate in (PROJECT_ROOT / kind, Path(sys.prefix) / "share" / "relaxbench" / kind):
        if candidate.is_dir():
            return candidate
    return PROJECT_ROOT / kind


PARENT_PREFIX = "_"  # ``_NAME.yaml``: a parent only, for ``extends:``


def is_parent_only(path: Path) -> bool:
    """Whether a spec file is a parent only (named ``_NAME.yaml``): it need not be complete, and is never run."""
    return path.stem.startswith(PARENT_PREFIX)


def yaml_files(kind: str, extra_dirs: tuple[Path, ...] = (), parents: bool = False) -> dict[str, Path]:
    """Name → YAML file of the shipped ``kind`` folder (``methods``, ``tasks``, ``suites``), then ``extra_dirs``
    (later folders win). Parent-only files (``_NAME.yaml``) only with ``parents``."""
    found: dict[str, Path] = {}
    for folder in (builtin_dir(kind), *extra_dirs):
        for path in sorted(folder.glob("*.yaml")):
            if parents or not is_parent_only(path):
                found[path.stem] = path
    return found


def check_runnable(path: Path, what: str) -> None:
    """A parent-only file given to be run is an error that says what it is for."""
    if is_parent_only(path):
        raise ConfigError(f"{path}: a file named {PARENT_PREFIX}NAME.yaml is a parent {what} for 'extends:', "
                          f"not a {what} of its own")


@dataclass(frozen=True)
class SpecKind:
    """What ``extends:`` needs to know of one kind of spec file."""

    folder: str  # the shipped folder parents are looked up in by name: methods, tasks, suites
    what: str  # method, task, suite (in messages)
    merged: Collection[str]  # the mapping fields merged key by key; every other field replaces the parent's
    # parents that are not files (a bare policy name for methods): name → fields, read only when a name is no file's
    builtins: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
    # another spelling of a field → the field's name: an earlier name still read, or the word the files use where
    # the stored field keeps its first name (a method's ``rule:`` is its ``policy`` field, which run keys hold)
    renamed: Mapping[str, str] = field(default_factory=dict)


NOT_INHERITED = ("name", "extends")  # a spec's name is its own (its file's stem unless it sets one)


def resolve_extends(data: Any, where: str, kind: SpecKind, extra_dirs: tuple[Path, ...] = (),
                    _chain: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """The fields of a spec file's mapping ``data`` (read from ``where``) with its ``extends:`` parents applied
    (the rules are in this module's docstring). A parent is a name in ``kind``'s folders or a YAML path (relative to
    the extending file's folder, else to the working directory); an unknown parent, a cycle or a malformed
    ``extends`` is a one-line ``ConfigError`` naming the file."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a {kind.what} must be a mapping")
    both = [(key, field_) for key, field_ in kind.renamed.items() if key in data and field_ in data]
    if both:
        raise ConfigError(f"{where}: '{both[0][0]}' and '{both[0][1]}' are one field; give one")
    data = {kind.renamed.get(key, key): value for key, value in data.items()}
    parents = data.pop("extends", None)
    if not _chain:
        _chain = ((_identity(where), Path(where).stem),)
    if parents is None:
        return data
    names = [parents] if isinstance(parents, str) else parents
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise ConfigError(f"{where}: 'extends' must name a {kind.what} or list {kind.what}s, got {parents!r}")
    resolved: dict[str, Any] = {}
    for name in names:
        parent_where, parent_data = _parent(name.strip(), where, kind, extra_dirs)
        identity = _identity(parent_where)
        if any(identity == seen for seen, _ in _chain):
            loop = " -> ".join([label for _, label in _chain] + [name])
            raise ConfigError(f"{where}: 'extends' loops ({loop})")
        layer = resolve_extends(parent_data, parent_where, kind, extra_dirs, (*_chain, (identity, name)))
        resolved = merge_fields(resolved, {k: v for k, v in layer.items() if k not in NOT_INHERITED}, kind.merged)
    return merge_fields(resolved, data, kind.merged)


def merge_fields(base: Mapping[str, Any], child: Mapping[str, Any], merged: Collection[str]) -> dict[str, Any]:
    """``child``'s fields over ``base``'s: a ``merged`` mapping field key by key, any other field replaced; a field
    given as null is dropped (so it takes its default)."""
    out = dict(base)
    for key, value in child.items():
        if value is None:
            out.pop(key, None)
        elif key in merged and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def merge_patch(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` over ``base`` key by key, recursively, as a JSON Merge Patch (RFC 7386): a mapping merges into a
    mapping, null removes the key, any other value (a list too) replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def _identity(where: str) -> str:
    path = Path(where)
    return str(path.resolve()) if path.suffix in (".yaml", ".yml") else where


def _parent(name: str, where: str, kind: SpecKind, extra_dirs: tuple[Path, ...]) -> tuple[str, Any]:
    """A parent's file (or built-in name) and its mapping."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        near = Path(where).parent / path
        path = near if not path.is_absolute() and near.is_file() else path
        return str(path), load_yaml(path)
    files = yaml_files(kind.folder, extra_dirs, parents=True)
    if name in files:
        return str(files[name]), load_yaml(files[name])
    builtins = kind.builtins() if kind.builtins is not None else {}
    if name in builtins:
        return name, builtins[name]
    known = sorted(set(files) | set(builtins))
    raise UnknownNameError(f"{where}: 'extends' names an unknown {kind.what} {name!r}{did_you_mean(name, known)} "
                           f"({kind.what}s: {', '.join(sorted(files))}; or a YAML path)")


def load_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error names the file and the line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{at}: malformed YAML ({problem})") from None


def parse_assignments(items: list[str] | tuple[str, ...] | None, what: str) -> dict[str, Any]:
    """``key=value`` pairs from a command line or model args; values are YAML scalars/lists (``0.3``, ``true``,
    ``inf``, ``[1, 2]``)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} is not of the form key=value")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"{what} {item!r}: cannot parse the value") from None
    return out
