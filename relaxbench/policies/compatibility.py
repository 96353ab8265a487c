"""Whether a rule can run with a drafter in a decoding mode, and what it requires of that drafter: derived from the
rule's declarations alone (no model loaded).

``check_compatibility`` refuses a rule that cannot run with the drafter in the mode; ``drafter_duties`` says what the
drafter must provide each round. Both read ``needs`` and ``modes`` from the object they are given, a policy class or an
instance (a wrapping rule may set them on the instance), so every engine — relaxbench's loop, an engine adapter —
configures a drafter the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies.base import MODES, Need, VerificationPolicy, mode_of

__all__ = ["DrafterDuties", "DrafterFacts", "check_compatibility", "drafter_duties"]

AUTOREGRESSIVE = "none"  # the policy name of the autoregressive baseline, which takes no drafter


class DrafterFacts(Protocol):
    """What ``check_compatibility`` reads of a drafter: a drafter class (``DRAFTERS.get(kind)``) or instance has
    them."""

    name: str
    provides_probs: bool
    provides_hidden: bool


@dataclass(frozen=True)
class DrafterDuties:
    """What the drafter a rule runs with must do each round.

    ``sampling``: the settings it drafts with (the run's, or greedy for a rule that verifies the drafter's top-1
    path); ``keep_logits``: return its logits (the policy reads q, or the drafter samples); ``keep_hidden``:
    return its last hidden state at each draft token."""

    sampling: SamplingParams
    keep_logits: bool
    keep_hidden: bool


def drafter_duties(policy: VerificationPolicy | type[VerificationPolicy], sampling: SamplingParams) -> DrafterDuties:
    """The drafter's duties for ``policy`` in a run with ``sampling``: the one derivation every engine uses."""
    needs, modes = policy.needs, policy.modes
    draft_sampling = SamplingParams() if modes.greedy_drafts else sampling
    keep_logits = (Need.DRAFT_PROBS in needs or not draft_sampling.greedy
                   or (Need.DRAFT_PROBS_IF_ANY in needs and not sampling.greedy))
    return DrafterDuties(draft_sampling, keep_logits, Need.DRAFT_HIDDEN_STATES in needs)


def check_compatibility(policy: VerificationPolicy | type[VerificationPolicy], mode: str | SamplingParams,
                        drafter: DrafterFacts | None) -> None:
    """Refuse, with one ``ConfigError`` line, a policy that cannot run in ``mode`` ('greedy', 'sampling' or the
    run's ``SamplingParams``) with ``drafter`` (a drafter class or instance; None for no drafter). Needs only
    classes, so a run can be checked before any model loads."""
    name = policy.name
    if isinstance(mode, SamplingParams):
        mode = mode_of(mode)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if name == AUTOREGRESSIVE and drafter is not None:
        raise ConfigError(f"rule {AUTOREGRESSIVE!r} is the autoregressive baseline and takes no drafter")
    if mode not in policy.modes:
        raise ConfigError(f"rule {name!r} does not support {mode} decoding "
                          f"(supports: {', '.join(sorted(policy.modes.supported))})")
    needs = policy.needs
    if drafter is not None and Need.DRAFT_PROBS in needs and not drafter.provides_probs:
        raise ConfigError(f"rule {name!r} needs {Need.DRAFT_PROBS.value}, but drafter {drafter.name!r} "
                          "has no distribution; use a draft model")
    if Need.DRAFT_HIDDEN_STATES in needs and (drafter is None or not drafter.provides_hidden):
        raise ConfigError(f"rule {name!r} needs {Need.DRAFT_HIDDEN_STATES.value}, but "
                          f"{'there is no drafter' if drafter is None else f'drafter {drafter.name!r} has none'}; "
                          "use a draft model (drafter 'model')")

