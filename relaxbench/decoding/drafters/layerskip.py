"""Layer-skip self-speculation: the target's first N decoder layers, its final norm and LM head draft for it.

The shallow model is a new module object of the target's own class, built on the ``meta`` device from a copy of
the config with ``num_hidden_layers = N``, whose submodules are then set to the *target's* modules (embeddings,
rotary embedding, the first N decoder layers, final norm, LM head). No weight is copied and transformers is not
patched: the shallow model runs the library's own forward and cache code, and each reused layer keeps its layer
index, which is its slot in the shallow model's own KV cache. Early exit from an untrained model drafts poorly
(LayerSkip trains for it); with ``layers`` equal to the target's depth the drafts are the target's own greedy
tokens, which the tests use as a check.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from pydantic import Field

from relaxbench.decoding.cache import CachedLM
from relaxbench.decoding.drafters.base import DrafterInputs, register_drafter
from relaxbench.decoding.drafters.model import LMDrafter
from relaxbench.errors import ConfigError
from relaxbench.validation import Integer, Spec


def shallow_model(target: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """A causal LM made of ``target``'s first ``n_layers`` decoder layers (weights shared, not copied)."""
    base_name = getattr(target, "base_model_prefix", "model")
    base = getattr(target, base_name, None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ConfigError(f"drafter 'layerskip' needs a decoder with {base_name}.layers "
                          f"({type(target).__name__} has none)")
    total = len(layers)
    if not 1 <= n_layers <= total:
        raise ConfigError(f"drafter 'layerskip': layers must be in 1..{total} for this target, got {n_layers}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = n_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n_layers]
    with torch.device("meta"):
        shallow = type(target)(config)
    shallow_base = getattr(shallow, base_name)
    for name, child in base.named_children():
        setattr(shallow_base, name, torch.nn.ModuleList(list(child)[:n_layers]) if name == "layers" else child)
    for name, child in target.named_children():
        if name != base_name:
            setattr(shallow, name, child)
    left_on_meta = [name for name, t in [*shallow.named_parameters(), *shallow.named_buffers()] if t.is_meta]
    if left_on_meta:
        raise ConfigError(f"drafter 'layerskip' cannot share every weight of {type(target).__name__} "
                          f"(unshared: {', '.join(left_on_meta[:3])})")
    shallow.generation_config = target.generation_config
    return shallow.eval()


@register_drafter
class LayerSkipDrafter(LMDrafter):
    """Self-speculation with the target's first ``layers`` decoder layers and its own KV cache."""

    name = "layerskip"
    provides_probs = True
    summary = "self-speculation: the target's first N layers + final norm + LM head (shared weights, own cache)"

    class Knobs(Spec):
        # leading decoder layers to draft with; default: half the target's depth
        layers: Integer | None = Field(None, ge=1)

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        super().__init__(knobs, inputs)
        target = inputs.target.model
        depth = int(target.config.num_hidden_layers)
        self.n_layers = knobs.layers if knobs.layers is not None else max(1, depth // 2)
        self.lm = CachedLM.configured(shallow_model(target, self.n_layers))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "layers": self.n_layers}
