"""The drafter protocol: where the k proposed tokens of a round come from.

``reset(prompt)`` before a sequence; ``propose(context, k, ...)`` returns up to ``k`` tokens (fewer when, say, an
n-gram lookup finds nothing); ``commit(context)`` after the verdict, with the new committed sequence, so the drafter
can roll its own cache back. A drafter fed by the target (``hidden_layers``) also gets ``observe_target`` after
every target forward, prefill included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate


@dataclass(frozen=True)
class Proposal:
    """A round's drafts and what producing them cost: the sizes of the drafter's model forwards (new tokens fed per
    forward, in order) and its n-gram lookups. The loop records the cost per round, so a deployment's time can be
    priced from the store later (``relaxbench.profiles``)."""

    tokens: torch.Tensor  # [k'] long, k' <= k
    logits: torch.Tensor | None  # [k', V] draft logits, when the drafter has a distribution
    forwards: tuple[int, ...] = ()  # new tokens fed per draft-model forward of this round
    lookups: int = 0  # n-gram lookups of this round
    hidden: torch.Tensor | None = None  # [k', H] the draft model's last hidden state at each draft token's position


@dataclass(frozen=True)
class DrafterInputs:
    """What a drafter may be built from: the target, and the separately loaded draft model if any."""

    target: Any  # LoadedModel
    draft: Any | None  # LoadedModel


class Drafter:
    name: ClassVar[str] = ""
    provides_probs: ClassVar[bool] = False
    provides_hidden: ClassVar[bool] = False  # can return its last hidden state at each draft token
    needs_draft_model: ClassVar[bool] = False
    # drafting does no work a cost profile could price (the oracle's replay): the proxy prices it at zero
    costless: ClassVar[bool] = False
    # drafts with a head checkpoint fed by the target's features (EAGLE-3, MTP): a cost profile prices its forwards
    # with the head's own table (``head_shape_for``)
    uses_head: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    model_name: str | None = None  # the draft model's name, for drafters that are one
    # set by the decoder: return draft logits only when the policy reads q or the run samples, hidden states only
    # when the policy reads them
    keep_logits: bool = False
    keep_hidden: bool = False
    # target hidden states the drafter reads (indices into transformers' ``hidden_states``): the loop asks every
    # target forward for them and hands them over (``observe_target``)
    hidden_layers: tuple[int, ...] = ()

    class Knobs(Spec):
        """No knobs."""

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        self.knobs = knobs

    @classmethod
    def build(cls, raw_knobs: dict[str, Any] | None, inputs: DrafterInputs) -> Drafter:
        if cls.needs_draft_model and inputs.draft is None:
            raise ConfigError(f"drafter {cls.name!r} needs a draft model (--draft NAME)")
        return cls(validate(cls.Knobs, dict(raw_knobs or {}), f"drafter {cls.name!r}", "knob"), inputs)

    @classmethod
    def check_target(cls, raw_knobs: dict[str, Any] | None, target_config: Any) -> None:
        """What the target's config (no weights) settles about building this drafter for it, checked before any
        model loads; raises ``ConfigError``/``ModelError`` in one line. Most drafters have nothing to check."""

    @classmethod
    def head_shape_for(cls, raw_knobs: dict[str, Any] | None, target: str) -> dict[str, Any]:
        """A head drafter's (``uses_head``) checkpoint shape for cost profiles, as a ``ModelShape``'s fields; other
        drafters have no head."""
        raise ConfigError(f"drafter {cls.name!r} drafts with no head")

    def reset(self, prompt: torch.Tensor) -> None:
        pass

    def prepare(self, positions: int, k: int) -> None:
        """Before a sequence is timed: room for ``positions`` cached tokens and, with captured graphs, the graphs of
        the forwards a round of ``k`` drafts makes (a drafter with no cache of its own has nothing to do)."""

    def graph_report(self) -> dict[str, object] | None:
        """What capturing the drafter's graphs cost (``decoding.graphs.GraphReport``), or None without any."""
        return None

    def propose(self, context: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        raise NotImplementedError

    def observe_target(self, start: int, ids: torch.Tensor, layers: tuple[torch.Tensor, ...]) -> None:
        """After a target forward that read ``ids`` at positions ``start``...: ``layers`` holds the asked hidden
        states [len(ids), H] each (only called for a drafter with ``hidden_layers``)."""

    def commit(self, context: torch.Tensor) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"drafter": self.name, **self.knobs.model_dump()}


DRAFTERS: Registry[type[Drafter]] = Registry("drafter", "relaxbench.drafters")


def register_drafter(cls: type[Drafter]) -> type[Drafter]:
    DRAFTERS.add(cls.name, cls)
    return cls
