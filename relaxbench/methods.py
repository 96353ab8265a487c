"""Method variants (``methods/*.yaml``): a verification policy with knobs, a drafter, a draft length ``k`` and an
optional ``sweep`` (every point of which is its own arm). A sweep varies policy knobs by name, the draft length
as ``k``, the drafter itself as ``drafter`` (kinds, e.g. ``[model, eagle3, mtp, ngram]``: which rule pays with which
drafter) and drafter knobs as ``drafter.NAME`` (e.g. ``drafter.max_ngram``); several keys sweep their grid.

A method YAML may start from others with ``extends: NAME`` or ``extends: [NAME, ...]`` (method names, policy names
or YAML paths; ``validation.resolve_extends``): ``knobs`` and ``sweep`` are merged key by key (the extending file's
win), every other field given replaces the parents'. Sweeps are written that way, so the sweep of a rule keeps its
authors' drafter and defaults in one place, and a paper's grid is its rule's sweep plus a shared draft-length grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from relaxbench import catalog
from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean
from relaxbench.validation import (PositiveInteger, Spec, SpecKind, Text, check_runnable, load_yaml, resolve_extends,
                                   validate, yaml_files)

# ``--draft`` values that name a drafter needing no separate draft model (the heads read their checkpoint from a
# drafter knob) instead of a draft model
MODEL_FREE_DRAFTS = ("ngram", "layerskip", "eagle3", "mtp")
DRAFTER_PREFIX = "drafter."  # a sweep key that sets a drafter knob
DRAFTER_KEY = "drafter"  # a sweep key that replaces the drafter (a kind, or a kind with its knobs)


class DrafterSpec(Spec):
    """Which drafter a method uses, with its knobs. ``model`` is the draft model given on the command line."""

    kind: Text = "model"
    knobs: dict[str, Any] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        """``eagle3`` or ``ngram(max_ngram=3)``: how a sweep point names it."""
        knobs = ",".join(f"{key}={value}" for key, value in sorted(self.knobs.items()))
        return f"{self.kind}({knobs})" if knobs else self.kind


def drafter_fields(value: Any) -> Any:
    """``drafter: ngram`` or ``drafter: {kind: ngram, max_ngram: 4}`` (knobs inline) as a DrafterSpec's fields."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, Mapping) and not set(value) <= {"kind", "knobs"}:
        return {"kind": value.get("kind", "model"), "knobs": {k: v for k, v in value.items() if k != "kind"}}
    return value


ADDED_METHOD_FIELDS = ("relax_in", "thinking_tags")  # left out of records and keys while unset


class MethodSpec(Spec):
    """A method variant. ``source`` is the file it came from (not part of a run's identity)."""

    name: Text
    policy: Text
    knobs: dict[str, Any] = Field(default_factory=dict)
    drafter: DrafterSpec = Field(default_factory=DrafterSpec)
    k: PositiveInteger | None = None
    # where the rule relaxes (policies/span.py): all, thinking (between the thinking tags) or answer; None: the
    # rule's own default; thinking_tags: the (open, close) tags, default <think> and </think>
    relax_in: Literal["all", "thinking", "answer"] | None = None
    thinking_tags: tuple[Text, Text] | None = None
    sweep: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    description: Text = ""
    source: Text = ""

    @field_validator("drafter", mode="before")
    @classmethod
    def _drafter(cls, value: Any) -> Any:
        return drafter_fields(value)

    @field_validator("sweep", mode="before")
    @classmethod
    def _sweep(cls, value: Any) -> Any:
        if not isinstance(value, Mapping) or not all(isinstance(v, (list, tuple)) and v for v in value.values()):
            raise ValueError("must map knob names to non-empty lists")
        for k in value.get("k", ()):
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ValueError(f"'k' values must be positive integers, got {k!r}")
        if any(key.startswith(DRAFTER_PREFIX) and not key[len(DRAFTER_PREFIX):] for key in value):
            raise ValueError(f"'{DRAFTER_PREFIX}' must be followed by a drafter knob name")
        for drafter in value.get(DRAFTER_KEY, ()):
            if not (isinstance(drafter, str) and drafter) and not (isinstance(drafter, Mapping) and drafter.get("kind")):
                raise ValueError(f"'{DRAFTER_KEY}' values must be drafter kinds (eagle3) or mappings with a kind "
                                 f"({{kind: ngram, max_ngram: 3}}), got {drafter!r}")
        return value

    def expand(self) -> list[MethodSpec]:
        """One spec per point of the sweep grid (the spec itself when there is no sweep): ``k`` sets the draft
        length, ``drafter`` replaces the drafter whole (its knobs belong to its kind), ``drafter.NAME`` sets a
        drafter knob (after the replacement), any other key a policy knob."""
        if not self.sweep:
            return [self]
        keys = sorted(self.sweep)
        points = []
        for values in itertools.product(*(self.sweep[key] for key in keys)):
            point = dict(zip(keys, values))
            base = DrafterSpec(**drafter_fields(point[DRAFTER_KEY])) if DRAFTER_KEY in point else self.drafter
            label = ",".join(f"{key}={base.label if key == DRAFTER_KEY else value}" for key, value in point.items())
            knobs, drafter_knobs, k = dict(self.knobs), dict(base.knobs), self.k
            for key, value in point.items():
                if key == "k":
                    k = value
                elif key == DRAFTER_KEY:
                    continue
                elif key.startswith(DRAFTER_PREFIX):
                    drafter_knobs[key[len(DRAFTER_PREFIX):]] = value
                else:
                    knobs[key] = value
            drafter = DrafterSpec(kind=base.kind, knobs=drafter_knobs)
            points.append(self.model_copy(update={"name": f"{self.name}[{label}]", "sweep": {}, "knobs": knobs,
                                                  "drafter": drafter, "k": k}))
        return points

    @property
    def sweeps_k(self) -> bool:
        return "k" in self.sweep

    def record(self) -> dict[str, Any]:
        """The full spec as stored with a cell (description and source file included; fields added later only when
        set, so an older method's record and run key are unchanged)."""
        data = self.model_dump()
        for added in ADDED_METHOD_FIELDS:
            if data[added] is None:
                data.pop(added)
        return data

    def identity(self) -> dict[str, Any]:
        """What decides an arm's results: the spec less its description and source file."""
        data = self.record()
        data.pop("source")
        data.pop("description")
        return data


def _policy_defaults() -> dict[str, dict[str, Any]]:
    return {name: {"policy": name} for name in catalog.names("policies")}


# ``extends:`` for methods: knobs and sweep merge key by key; the drafter is replaced whole (its knobs belong to its
# kind). A bare rule name is a parent too (the rule at its defaults). A file names its rule ``rule:``; the field,
# which stored records and run keys hold, keeps its first name ``policy`` (a file that says ``policy:`` still reads).
METHOD_KIND = SpecKind("methods", "method", ("knobs", "sweep"), _policy_defaults, renamed={"rule": "policy"})


def method_from_dict(data: Any, where: str, default_name: str, extra_dirs: tuple[Path, ...] = ()) -> MethodSpec:
    """A method from a YAML mapping, its ``extends:`` parents applied first (``validation.resolve_extends``)."""
    data = resolve_extends(data, where, METHOD_KIND, extra_dirs)
    if "policy" not in data:
        raise ConfigError(f"{where}: missing field 'rule' (the rule the method verifies with, e.g. rule: exact)")
    data.setdefault("name", default_name)
    for key in ("knobs", "sweep"):
        if data.get(key) is None:
            data[key] = {}
    if "drafter" in data and data["drafter"] is None:
        data["drafter"] = {}
    return validate(MethodSpec, {**data, "source": where}, where)


def method_files(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Method name → YAML file, from the built-in folder then ``extra_dirs`` (later folders win); parent-only files
    (``_NAME.yaml``) are left out."""
    return yaml_files("methods", extra_dirs)


def load_method(name: str, extra_dirs: tuple[Path, ...] = ()) -> MethodSpec:
    """A method by YAML path, by name in the method folders, or a bare policy name with default knobs."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        check_runnable(path, "method")
        return method_from_dict(load_yaml(path), str(path), path.stem, extra_dirs)
    files = method_files(extra_dirs)
    if name in files:
        return method_from_dict(load_yaml(files[name]), str(files[name]), name, extra_dirs)
    if catalog.knows("policies", name):
        return MethodSpec(name=name, policy=name, source="rule defaults")
    known = sorted(set(files) | set(catalog.names("policies")))
    raise UnknownNameError(f"unknown method {name!r}{did_you_mean(name, known)} (methods: {', '.join(sorted(files))})")


def with_overrides(method: MethodSpec, knobs: Mapping[str, Any], drafter_kind: str | None,
                   drafter_knobs: Mapping[str, Any], draft_name: str | None) -> MethodSpec:
    """``method`` with a user's overrides applied, the one rule for ``generate`` and the lm-eval model: policy knobs
    over the method's; ``drafter_kind`` replaces the drafter; ``--draft ngram``/``layerskip`` stands in for a draft
    model; drafter knobs are merged over the drafter's."""
    drafter = method.drafter
    if drafter_kind is not None:
        drafter = DrafterSpec(kind=drafter_kind, knobs=dict(drafter_knobs))
    elif draft_name in MODEL_FREE_DRAFTS and drafter.kind == "model":
        drafter = DrafterSpec(kind=draft_name, knobs=dict(drafter_knobs))
    elif drafter_knobs:
        drafter = DrafterSpec(kind=drafter.kind, knobs={**drafter.knobs, **drafter_knobs})
    return method.model_copy(update={"knobs": {**method.knobs, **knobs}, "drafter": drafter})


def effective_drafter(method: MethodSpec, draft_name: str | None) -> DrafterSpec | None:
    """The drafter an arm really uses. ``--draft ngram`` / ``--draft layerskip`` stand in for a draft model: a
    method whose drafter is the plain draft model then runs with prompt lookup / the target's own first layers.
    The AR baseline has none."""
    if method.policy == "none":
        return None
    if draft_name in MODEL_FREE_DRAFTS and method.drafter.kind == "model":
        return DrafterSpec(kind=draft_name)
    return method.drafter


def check_method_spec(name: str, method: MethodSpec, draft_name: str | None, policy_where: str | None = None) -> bool:
    """What the registries' declarations alone settle about ``method`` with ``--draft draft_name``, read from the
    catalog (no torch) unless the registries are loaded: the rule's name and knobs, the drafter's name and knobs,
    a drafter that needs a draft model given none. ``name`` (an arm or method) starts a drafter's message;
    ``policy_where`` a knob's (default ``rule 'NAME'`` as the method names it). Whether it drafts with the draft
    model (so the draft's vocabulary must be the target's)."""
    catalog.check_knobs("policies", method.policy, method.knobs, policy_where or f"rule {method.policy!r}")
    drafter = effective_drafter(method, draft_name)
    if drafter is None:
        return False
    catalog.check_knobs("drafters", drafter.kind, drafter.knobs, f"method {name!r}: drafter {drafter.kind!r}")
    needs_model = catalog.needs_draft_model(drafter.kind)
    if needs_model and (draft_name is None or draft_name in MODEL_FREE_DRAFTS):
        given = "no --draft was given" if draft_name is None else f"--draft {draft_name} is model-free"
        raise ConfigError(f"method {name!r} drafts with {drafter.kind!r}, which needs a draft model, and {given}: "
                          "pass --draft MODEL (a model sharing the target's vocabulary)")
    return needs_model


def check_methods(names: list[str] | tuple[str, ...], draft_name: str | None) -> bool:
    """Every sweep point of every method a run names, checked as ``check_method_spec`` (a knob refused in the words
    the run's own check uses, the rule's registered name first): ``compare`` calls it before anything heavy loads,
    and the run checks everything again, modes and drafter compatibility included, when it assembles its arms.
    Whether any point drafts with the draft model."""
    needs_model = False
    for name in names:
        for point in load_method(name).expand():
            if point.policy != "none":
                needs_model |= check_method_spec(point.name, point, draft_name,
                                                 f"rule {catalog.canonical('policies', point.policy)!r}")
    return needs_model
