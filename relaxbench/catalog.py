"""The built-in policies' and drafters' declarations as data (the catalog), so that ``relaxbench list`` and the
refusal of a misspelt rule, drafter or knob answer without importing torch.

Every rule module imports torch at its top (a rule is tensor code), and importing the registry imports every rule:
a second or more before a command could say "unknown policy". The catalog is what the registries declare — each
rule's summary, source, modes, strict setting, aliases and knobs (type, bounds, default), each drafter's summary,
knobs and whether it needs a draft model. It is computed on first use and cached, never committed: the first
command that needs it builds it from the live registries in a child interpreter (``python -m relaxbench.catalog
PATH``, so the caller stays free of torch) and writes it to ``$RELAXBENCH_CACHE/catalog/<fingerprint>.json``, where
the fingerprint is a digest of the rule and drafter modules' source; an edit of a rule makes a new fingerprint, so a
stale catalog is never read. A test holds what it builds equal to the registries.

Correctness never rests on the catalog: it answers only while it describes the code beside it (its fingerprint
matches), only while the registry itself is not imported (then the registry answers, rules registered in-process
included), and only for the built-in names — a name it does not know goes to the live registry when a plug-in could
provide it (an entry point of the registry's group), and a listing with plug-ins installed is the registry's. Where
the cache cannot be written or the build fails, the registry answers. Knob checks rebuild each spec from its fields
with the same types of ``relaxbench.validation``, so a refusal reads exactly as the registry's; what a field
declaration cannot carry (a model validator, a field of another type) is checked by the registry when the run is
assembled, before any model loads, and a spec with such a field asks the registry for the wording of any refusal.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from relaxbench.errors import ConfigError
from relaxbench.paths import cache_root
from relaxbench.registry import unknown_name
from relaxbench.validation import Finite, Flag, Integer, Number, PositiveInteger, Spec, Text, validate

PACKAGE = Path(__file__).resolve().parent
BUILD_TIMEOUT_S = 300  # the child interpreter that imports the registries and writes the catalog
# the source the catalog describes: a change to any of these files makes the catalog stale (the registry answers)
SOURCES = ("policies", "decoding/drafters")
# kind -> (the package whose import registers the built-ins, the registry's name in it, the built-ins' module prefix)
KINDS = {"policies": ("relaxbench.policies", "POLICIES", "relaxbench.policies."),
         "drafters": ("relaxbench.decoding.drafters", "DRAFTERS", "relaxbench.decoding.drafters.")}
VALUE_TYPES = {"number": Number, "finite": Finite, "integer": Integer, "positive-integer": PositiveInteger,
               "flag": Flag, "text": Text}
OPAQUE = "opaque"  # a field the catalog cannot rebuild: the registry checks it


@dataclass(frozen=True)
class PolicyFacts:
    """What the listings say about one policy class, in words."""

    name: str
    summary: str
    fidelity: str  # "as reference", "as paper (no code)", "variant", "lossless baseline", ...
    reference: str
    modes: frozenset[str]
    greedy_is_exact: bool  # exact match under greedy decoding at every knob setting, as its reference
    lossy_modes: frozenset[str]  # modes without a lossless end
    knobs: Mapping[str, Any]  # knob -> default (REQUIRED when it has none)
    strict_knobs: Mapping[str, Any]  # the setting at which the rule is its lossless baseline
    lossless: bool
    module: str
    aliases: tuple[str, ...] = ()  # other names the rule answers to (e.g. its name before a rename)


REQUIRED = object()


def policy_facts(cls: Any) -> PolicyFacts:
    """The one reader of a live policy class's declarations for the listings and the catalog."""
    from pydantic_core import PydanticUndefined

    from relaxbench.policies import POLICIES

    origin, modes = cls.origin, cls.modes
    knobs = {name: (REQUIRED if field.default is PydanticUndefined else field.default)
             for name, field in cls.Knobs.model_fields.items()}
    return PolicyFacts(
        name=cls.name, summary=origin.summary, reference=origin.reference, fidelity=origin.fidelity.value,
        modes=frozenset(modes.supported), greedy_is_exact=bool(modes.greedy_is_exact),
        lossy_modes=frozenset(modes.lossy),
        knobs=knobs, strict_knobs=dict(modes.strict_knobs), lossless=bool(modes.lossless), module=cls.__module__,
        aliases=tuple(POLICIES.aliases_of(cls.name)))


# -- reading ------------------------------------------------------------------------------------------------------

def fingerprint(root: Path = PACKAGE) -> str:
    """A digest of the source the catalog describes (line endings normalised)."""
    digest = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((root / folder).glob("*.py")):
            digest.update(f"{folder}/{path.name}\n".encode())
            digest.update(path.read_bytes().replace(b"\r\n", b"\n"))
    return digest.hexdigest()


def catalog_path(root: Path = PACKAGE) -> Path:
    """Where the catalog of the source under ``root`` is cached (named by its fingerprint: an edit makes another)."""
    return cache_root() / "catalog" / f"{fingerprint(root)[:24]}.json"


def read_catalog(path: Path, root: Path = PACKAGE) -> dict[str, Any] | None:
    """The catalog at ``path`` while it describes the source under ``root``; None when it is missing, unreadable or
    stale (its fingerprint is not the source's)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("fingerprint") == fingerprint(root) else None


def build_catalog(path: Path) -> None:
    """Write the catalog to ``path`` from the live registries in a child interpreter (this process stays free of
    torch); a failure leaves no file (the registry answers)."""
    subprocess.run([sys.executable, "-m", "relaxbench.catalog", str(path)], capture_output=True, check=False,
                   timeout=BUILD_TIMEOUT_S)


@functools.cache
def _catalog() -> dict[str, Any] | None:
    path = catalog_path()
    data = read_catalog(path)
    if data is None:
        try:
            build_catalog(path)
        except (OSError, subprocess.SubprocessError):
            return None
        data = read_catalog(path)
    return data


def _plugins(groups: list[str]) -> bool:
    """Whether any package installs an entry point in one of the registry's plug-in groups."""
    return any(entry_points(group=group) for group in groups)


def _section(kind: str) -> dict[str, Any] | None:
    """The catalog's section for ``kind``, or None when the live registry must answer (it is imported already, the
    catalog is stale)."""
    if KINDS[kind][0] in sys.modules:
        return None
    catalog = _catalog()
    return None if catalog is None else catalog[kind]


def _registry(kind: str) -> Any:
    import importlib

    package, attribute, _ = KINDS[kind]
    return getattr(importlib.import_module(package), attribute)


def _entry(kind: str, name: str) -> dict[str, Any] | None:
    """The catalog's entry for ``name`` (an alias resolved), None when the live registry must answer; an unknown name
    with no plug-in installed that could provide it is the registry's one-line error."""
    section = _section(kind)
    if section is None:
        return None
    name = section["aliases"].get(name, name)
    if name in section["entries"]:
        return section["entries"][name]
    if _plugins(section["groups"]):
        return None
    raise unknown_name(section["what"], name, sorted(section["entries"]))


def names(kind: str) -> list[str]:
    """The registered names of ``kind`` (as ``Registry.names``)."""
    section = _section(kind)
    if section is None or _plugins(section["groups"]):
        return _registry(kind).names()
    return sorted(section["entries"])


def knows(kind: str, name: str) -> bool:
    """Whether ``name`` (or an alias) is registered (as ``name in Registry``)."""
    section = _section(kind)
    if section is None or _plugins(section["groups"]):
        return name in _registry(kind)
    return name in section["entries"] or name in section["aliases"]


def canonical(kind: str, name: str) -> str:
    """The registered name ``name`` resolves to (an alias to its rule); an unknown name is the registry's error."""
    entry = _entry(kind, name)
    return entry["name"] if entry is not None else _registry(kind).get(name).name


def check_knobs(kind: str, name: str, knobs: Mapping[str, Any], where: str) -> None:
    """``knobs`` validated against the knob spec of the ``kind`` entry ``name``, refused in the registry's words
    (``where`` starts the message); a spec the catalog cannot rebuild whole asks the registry how to say a refusal."""
    entry = _entry(kind, name)
    if entry is None:
        validate(_registry(kind).get(name).Knobs, dict(knobs), where, "knob")
        return
    try:
        validate(_knob_model(kind, entry["name"]), dict(knobs), where, "knob")
    except ConfigError:
        if not entry["knobs_complete"]:
            validate(_registry(kind).get(name).Knobs, dict(knobs), where, "knob")
        raise


def needs_draft_model(name: str) -> bool:
    """Whether the drafter ``name`` drafts with a draft model."""
    entry = _entry("drafters", name)
    return bool(entry["needs_draft_model"] if entry is not None else _registry("drafters").get(name).needs_draft_model)


def drafter_rows() -> list[tuple[str, str]]:
    """(name, summary) of every drafter."""
    section = _section("drafters")
    if section is None or _plugins(section["groups"]):
        return [(name, cls.summary) for name, cls in _registry("drafters").items()]
    return [(name, entry["summary"]) for name, entry in sorted(section["entries"].items())]


def listed(policies: Any) -> list[tuple[str, type]]:
    """The rules of every engine: an engine's own arm (the vLLM engine's ``native``, registered with that engine)
    is not listed, whether or not it was registered in this process."""
    return [(name, cls) for name, cls in policies.items() if not cls.__module__.startswith("relaxbench.integrations.")]


def listed_policies() -> list[PolicyFacts]:
    """The facts of every rule ``relaxbench list rules`` shows (``listed``), by name."""
    section = _section("policies")
    if section is None or _plugins(section["groups"]):
        return [policy_facts(cls) for _, cls in listed(_registry("policies"))]
    return [_facts(entry) for _, entry in sorted(section["entries"].items())]


def _facts(entry: Mapping[str, Any]) -> PolicyFacts:
    return PolicyFacts(
        name=entry["name"], summary=entry["summary"], fidelity=entry["fidelity"], reference=entry["reference"],
        modes=frozenset(entry["modes"]), greedy_is_exact=entry["greedy_is_exact"],
        lossy_modes=frozenset(entry["lossy_modes"]),
        knobs={f["name"]: (_decode(f["default"]) if "default" in f else REQUIRED) for f in entry["knobs"]},
        strict_knobs={k: _decode(v) for k, v in entry["strict_knobs"].items()}, lossless=entry["lossless"],
        module=entry["module"], aliases=tuple(entry["aliases"]))


@functools.cache
def _knob_model(kind: str, name: str) -> type[Spec]:
    """The knob spec of a catalog entry, rebuilt from its fields with ``relaxbench.validation``'s types."""
    from pydantic import Field, create_model

    fields: dict[str, Any] = {}
    for knob in _catalog()[kind]["entries"][name]["knobs"]:  # type: ignore[index]
        kind_of = knob["type"]
        if kind_of == OPAQUE:
            annotation: Any = Any
        elif kind_of == "literal":
            annotation = Literal[tuple(knob["choices"])]
        else:
            annotation = VALUE_TYPES[kind_of]
        if knob.get("nullable"):
            annotation = typing.Optional[annotation]  # noqa: UP007  (a runtime annotation)
        default = _decode(knob["default"]) if "default" in knob else ...
        fields[knob["name"]] = (annotation, Field(default, **knob.get("bounds", {})))
    return create_model(f"{name} knobs", __base__=Spec, **fields)


# -- writing ------------------------------------------------------------------------------------------------------

def _encode(value: Any) -> Any:
    """A knob value as JSON (a tuple tagged, so it reads back as one; infinities as Python's json writes them)."""
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a knob value of type {type(value).__name__} cannot go into the catalog: {value!r}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(_decode(v) for v in value["tuple"])
    return value


def _knob_field(name: str, field: Any) -> dict[str, Any]:
    """One knob's declaration: its value type from ``relaxbench.validation`` (or OPAQUE), bounds and default."""
    from annotated_types import Ge, Gt, Le, Lt
    from pydantic import BeforeValidator
    from pydantic_core import PydanticUndefined

    out: dict[str, Any] = {"name": name}
    annotation, nullable = field.annotation, False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            annotation, nullable = args[0], True
    metadata = list(field.metadata)
    if typing.get_origin(annotation) is typing.Annotated:
        metadata += list(annotation.__metadata__)
        annotation = typing.get_args(annotation)[0]
    bounds = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in metadata
              if type(m) in (Ge, Gt, Le, Lt)}
    validators = [m for m in metadata if isinstance(m, BeforeValidator)]
    plain = len(validators) + len(bounds) == len(metadata) and field.alias is None
    kind = OPAQUE
    if plain and typing.get_origin(annotation) is Literal and not validators:
        kind, out["choices"] = "literal", list(typing.get_args(annotation))
    elif plain and len(validators) == 1:
        for token, alias in VALUE_TYPES.items():
            if typing.get_args(alias)[0] is annotation and alias.__metadata__[0].func is validators[0].func:
                kind = token
    out["type"] = kind
    if nullable:
        out["nullable"] = True
    if bounds and kind != OPAQUE:
        out["bounds"] = bounds
    if field.default is not PydanticUndefined:
        out["default"] = _encode(field.default)
    return out


def _knobs(spec: type[Spec]) -> tuple[list[dict[str, Any]], bool]:
    """A knob spec's fields, and whether the fields alone say every refusal (no field of another type, no field
    validator, no validator that runs before the fields, the base spec's settings)."""
    decorators = spec.__pydantic_decorators__
    fields = [_knob_field(name, field) for name, field in spec.model_fields.items()]
    complete = (all(f["type"] != OPAQUE for f in fields) and not decorators.field_validators
                and not decorators.field_serializers and spec.model_config == Spec.model_config
                and all(d.info.mode == "after" for d in decorators.model_validators.values()))
    return fields, complete


def generate() -> dict[str, Any]:
    """The catalog of the live registries' built-in entries (rules registered elsewhere, by a plug-in, an
    integration or a test, are left out)."""
    out: dict[str, Any] = {"fingerprint": fingerprint()}
    for kind, (_, _, prefix) in KINDS.items():
        registry = _registry(kind)
        entries: dict[str, Any] = {}
        aliases: dict[str, str] = {}
        for name, cls in registry.items():
            if not cls.__module__.startswith(prefix):
                continue
            knobs, complete = _knobs(cls.Knobs)
            aliases.update({alias: name for alias in registry.aliases_of(name)})
            entry: dict[str, Any] = {"name": cls.name}
            if kind == "policies":
                facts = policy_facts(cls)
                entry.update(summary=facts.summary, fidelity=facts.fidelity, reference=facts.reference,
                             modes=sorted(facts.modes), greedy_is_exact=facts.greedy_is_exact,
                             lossy_modes=sorted(facts.lossy_modes), lossless=facts.lossless,
                             strict_knobs={k: _encode(v) for k, v in facts.strict_knobs.items()},
                             module=facts.module, aliases=list(facts.aliases))
            else:
                entry.update(summary=cls.summary, needs_draft_model=bool(cls.needs_draft_model))
            entry.update(knobs=knobs, knobs_complete=complete)
            entries[name] = entry
        out[kind] = {"what": registry.kind, "groups": list(registry.entry_point_groups),
                     "aliases": dict(sorted(aliases.items())),
                     "entries": entries}
    return out


def render() -> str:
    return json.dumps(generate(), indent=1, ensure_ascii=False) + "\n"


def write_catalog(path: Path) -> None:
    """Write the catalog of the live registries to ``path`` (atomically: a reader sees the whole file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(render(), encoding="utf-8")
    os.replace(partial, path)


if __name__ == "__main__":  # the child interpreter of ``build_catalog``
    write_catalog(Path(sys.argv[1]))
