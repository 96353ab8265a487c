"""Draft heads fed by the target's hidden states: EAGLE-3 and native MTP.

The loop hands the drafter the target's hidden states at every position a target forward reads (prefill and each
verify forward, ``Drafter.observe_target``). The drafter keeps them for the committed prefix only, as the target's
own cache is kept (``CachedLM.sync_to``'s rule), and keeps its own KV cache holding the pairs (token t+1, target
feature of t) for committed positions. A round feeds the pairs the last verify added in one forward, then chains
k-1 single steps on its own output feature (EAGLE-3's and vLLM's chain drafting); the chained positions are
rolled back at once, since their features are the head's and not the target's (EAGLE's ``stable_kv``).

The first draft of a round predicts the token after the context's last one from the feature of the position
before it: the loop's pending token is the target's latest sample (EAGLE's bonus token), not yet fed to the target.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from relaxbench.decoding.cache import common_prefix_length, kv_settings, rollback
from relaxbench.decoding.drafters.base import Drafter, DrafterInputs, Proposal, register_drafter
from relaxbench.decoding.drafters.head_files import classify_head, describe_head, head_dir, head_shape, read_weights
from relaxbench.decoding.drafters.head_modules import Eagle3Head, HeadStaticCache, MTPHead
from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import next_token
from relaxbench.validation import Spec, Text, validate


class FeatureHeadDrafter(Drafter):
    """Shared state of the heads: target features of the committed prefix, the head's cache and its pairs."""

    provides_probs = True
    uses_head = True

    class Knobs(Spec):
        # local folder or hub id of the head checkpoint, or ``trained``: the head ``relaxbench drafter train``
        # cached for this target (an MTP head: default the target's own checkpoint)
        head: Text | None = None

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        super().__init__(knobs, inputs)
        target = inputs.target
        source = knobs.head if knobs.head is not None else self._default_head(target.model.config)
        # the target as the user named it (a half-precision copy of a packaged model loads from another folder)
        named = str(getattr(target, "name", None) or target.model.config.name_or_path)
        path, hub_id = head_dir(source, self.name, named)
        self.spec = describe_head(path, target.model.config, int(target.logit_dim), self.name)
        self.spec.hub_id = hub_id
        self.hidden_layers = self.spec.aux_layers  # indices into transformers' ``hidden_states`` tuple
        self.head = self._build(target)  # weights are read only now, after the config fits
        self.head.to(device=target.device, dtype=target.dtype).eval()
        self.device = target.device
        self.model_name = f"{self.name}:{source}"
        self.static, self.capacity = kv_settings().kv_cache == "static", 256  # the head's own cache (prepare sizes it)
        self.reset(torch.empty(0, dtype=torch.long))

    @classmethod
    def check_target(cls, raw_knobs: dict[str, Any] | None, target_config: Any) -> None:
        """The head's config.json against the target's config, before the target loads."""
        knobs = validate(cls.Knobs, dict(raw_knobs or {}), f"drafter {cls.name!r}", "knob")
        source = knobs.head if knobs.head is not None else cls._default_head(target_config)
        describe_head(head_dir(source, cls.name, str(target_config.name_or_path))[0], target_config,
                      int(target_config.vocab_size), cls.name)

    @classmethod
    def head_shape_for(cls, raw_knobs: dict[str, Any] | None, target: str) -> dict[str, Any]:
        """The shape of the head these knobs name for ``target`` (the name a run records), from the head's
        config and its weight files' headers (no tensor is read; ``head_shape``'s fields): what an analytic cost
        profile prices its forwards with. Raises ``ModelError``/``ConfigError`` when the head's files are not at
        hand."""
        knobs = validate(cls.Knobs, dict(raw_knobs or {}), f"drafter {cls.name!r}", "knob")
        source = knobs.head if knobs.head is not None else target  # MTP's default: the target's own checkpoint
        path, hub_id = head_dir(source, cls.name, target)
        spec = classify_head(path)
        spec.hub_id = hub_id
        return head_shape(spec)

    @classmethod
    def _default_head(cls, target_config: Any) -> str:
        raise ConfigError(f"drafter {cls.name!r} needs its head checkpoint: --drafter-knob head=PATH_OR_HUB_ID, "
                          f"or head=trained for the one `relaxbench drafter train {cls.name}` cached for the target "
                          "(or head: in a method file's drafter)")

    def _build(self, target: Any) -> torch.nn.Module:
        raise NotImplementedError

    def reset(self, prompt: torch.Tensor) -> None:
        from transformers import DynamicCache

        self.features = None  # [n, F] target features of positions 0..n-1
        self.feature_ids = torch.empty(0, dtype=torch.long, device=getattr(self, "device", "cpu"))
        self.cache = HeadStaticCache(self.capacity) if getattr(self, "static", False) else DynamicCache()
        self.pair_ids = self.feature_ids[:0]  # token fed with each cached pair (token t+1 at position t)

    def prepare(self, positions: int, k: int) -> None:
        """With the static layout, the head's cache is preallocated for ``positions`` pairs (the committed ones and a
        round's chained steps) when the next sequence resets it."""
        self.capacity = max(self.capacity, positions)

    def observe_target(self, start: int, ids: torch.Tensor, layers: tuple[torch.Tensor, ...]) -> None:
        """The target read ``ids`` at positions ``start``...: keep their features after the first ``start``."""
        feats = torch.cat([layer.to(self.device) for layer in layers], dim=-1)  # layers may sit on several GPUs
        kept = feats[:0] if self.features is None else self.features[:start]
        self.features = torch.cat([kept, feats])
        self.feature_ids = torch.cat([self.feature_ids[:start], ids])

    def commit(self, context: torch.Tensor) -> None:
        keep = min(common_prefix_length(self.feature_ids, context), int(context.shape[0]) - 1)
        self.feature_ids = self.feature_ids[:keep]
        if self.features is not None:
            self.features = self.features[:keep]
        pairs = min(keep, common_prefix_length(self.pair_ids, context[1:]))
        self._truncate_pairs(pairs)

    def _truncate_pairs(self, n: int) -> None:
        if n < self.cache.get_seq_length():
            rollback(self.cache, n)
        self.pair_ids = self.pair_ids[:n]

    def propose(self, context, k, sampling, generator) -> Proposal:
        length = int(context.shape[0])
        have = 0 if self.features is None else min(int(self.features.shape[0]), length - 1)
        empty = context[:0]
        if have < length - 1 or length < 2 or k < 1:  # no target feature yet (a one-token prompt's first round)
            return Proposal(empty, context.new_empty((0, 0), dtype=torch.float32) if self.keep_logits else None)
        start = min(int(self.pair_ids.shape[0]), length - 2)  # re-feed one pair when nothing is new
        self._truncate_pairs(start)
        positions = torch.arange(start, length - 1, device=context.device)
        hidden = self.head(context[start + 1:], self.features[start: length - 1], positions, self.cache, True)
        self.pair_ids = context[1:length]
        forwards, tokens, rows = [length - 1 - start], [], []
        last = hidden[-1:]
        for step in range(k):
            logits = self.head.logits(last)[0]
            token = next_token(logits, sampling, generator)
            tokens.append(token)
            if self.keep_logits:
                rows.append(logits)
            if step + 1 < k:
                position = torch.full((1,), length - 1 + step, dtype=torch.long, device=context.device)
                last = self.head(token.view(1), last, position, self.cache, False)
                forwards.append(1)
        self._truncate_pairs(length - 1)  # chained positions carry the head's features: never kept
        return Proposal(torch.stack(tokens), torch.stack(rows) if rows else None, tuple(forwards))

    def describe(self) -> dict[str, Any]:
        card = self.spec.path / "card.json"  # a head trained here: which training produced these weights
        trained = json.loads(card.read_text()) if card.is_file() else {}
        return {**super().describe(), "layout": self.spec.layout, "target_layers": list(self.hidden_layers),
                "head_path": str(self.spec.path),
                **({"head_card": {key: trained.get(key) for key in ("trained_at", "steps", "heldout_acceptance")}}
                   if trained else {})}


@register_drafter
class Eagle3Drafter(FeatureHeadDrafter):
    """EAGLE-3: a one-layer head over three fused target layers, chain drafting with its own distribution."""

    name = "eagle3"
    summary = "EAGLE-3 head fed by three target layers (its checkpoint: head=PATH or hub id), chain drafting"

    def _build(self, target: Any) -> torch.nn.Module:
        head = Eagle3Head(self.spec, int(target.model.config.hidden_size), int(target.logit_dim))
        head.load(read_weights(self.spec), target.model.get_input_embeddings())
        return head


@register_drafter
class MTPDrafter(FeatureHeadDrafter):
    """Native multi-token prediction: the target's MTP layer (DeepSeek-V3 or Qwen3-Next layout), chained."""

    name = "mtp"
    summary = "native MTP layer fed by the target's last hidden state (head=PATH, default the target's checkpoint)"

    @classmethod
    def _default_head(cls, target_config: Any) -> str:
        """The target's own checkpoint (its MTP module is read from its weight files)."""
        return str(target_config.name_or_path)

    def _build(self, target: Any) -> torch.nn.Module:
        head = MTPHead(self.spec, target.model)
        head.load(read_weights(self.spec))
        return head
