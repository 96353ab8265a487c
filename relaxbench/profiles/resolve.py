"""What ``--profile REF`` means for a stored run: ``this-machine`` (the profile the run measured at the start of its
latest session), a shipped device name (an analytic roofline of the run's own models, and of the draft heads its
arms drafted with, on that device, at the batch sizes the run was decoded at), or a profile file (measured or
analytic; it must describe the run's models, and it prices only the batch sizes it was made at)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from relaxbench.errors import ConfigError
from relaxbench.methods import MODEL_FREE_DRAFTS
from relaxbench.models.shape import ModelShape
from relaxbench.profiles.analytic import analytic_profile
from relaxbench.profiles.devices import device_names
from relaxbench.profiles.measure import MACHINE_PROFILE
from relaxbench.profiles.spec import Profile, check_models, load_profile, profile_from_mapping
from relaxbench.registry import did_you_mean

ShapeOf = Callable[[str], ModelShape]


def is_file_ref(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).is_file()


def check_profile_ref(ref: str) -> None:
    """Fail early (before anything runs) on a reference that names nothing: a missing or malformed file, or an
    unknown device."""
    if ref == MACHINE_PROFILE:
        return
    if is_file_ref(ref):
        load_profile(ref)
        return
    names = device_names()
    if ref not in names:
        raise ConfigError(f"unknown profile {ref!r}{did_you_mean(ref, [*names, MACHINE_PROFILE])} (a device: "
                          f"{', '.join(names)}; {MACHINE_PROFILE}; or a profile file .yaml)")


def run_draft_model(draft: str | None) -> str | None:
    """The run's draft model, if it used one (``--draft ngram`` / ``layerskip`` use none)."""
    return None if draft is None or draft in MODEL_FREE_DRAFTS else draft


def recorded_shape(environment: Mapping[str, Any] | None, role: str) -> ModelShape | None:
    """A model's shape as a ``compare`` session recorded it (None for stores made before shapes were recorded)."""
    described = (environment or {}).get(role)
    shape = described.get("shape") if isinstance(described, Mapping) else None
    return ModelShape(**shape) if isinstance(shape, Mapping) else None


def resolve_profile(ref: str, target: str, draft: str | None, machine: Mapping[str, Any] | None,
                    shape_of: ShapeOf, batch_sizes: Sequence[int] = (1,),
                    heads: Mapping[str, ModelShape] | None = None) -> Profile:
    """The profile ``ref`` names for a run of ``target`` (and ``draft``) decoded at ``batch_sizes``: see the module
    docstring. ``shape_of`` gives a model's shape by name (recorded with the run, else read from its config);
    ``heads`` the shapes of the draft heads the run's arms drafted with (drafter label → shape), which an analytic
    profile prices (a measured one has no head costs)."""
    draft_model = run_draft_model(draft)
    if ref == MACHINE_PROFILE:
        if machine is None:
            raise ConfigError(f"this run has no {MACHINE_PROFILE} profile (it was stored by a relaxbench that did not "
                              "measure one); measure one with `relaxbench profile` and pass its file")
        return profile_from_mapping(machine, f"the run's {MACHINE_PROFILE} profile")
    if is_file_ref(ref):
        profile = load_profile(ref)
        check_models(profile, target, draft_model, ref)
        return profile
    check_profile_ref(ref)
    return analytic_profile(ref, target, shape_of(target), draft_model,
                            shape_of(draft_model) if draft_model is not None else None, batch_sizes=batch_sizes,
                            heads=heads)
