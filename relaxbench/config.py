"""Typed, frozen specifications loaded from YAML: methods (``methods/*.yaml``) and, later, tasks and suites.

YAML errors carry the file and line number; unknown fields get did-you-mean suggestions.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
