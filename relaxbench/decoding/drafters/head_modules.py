"""The arithmetic of the EAGLE-3 and MTP draft heads, as modules built from transformers' own Llama (or the
target's) layers, run one sequence at a time on top of a ``DynamicCache``.

Both take, per position t, the pair (embedding of token t+1, a feature of position t) at rotary position t and
return a hidden state (the next step's feature) and logits over the TARGET's vocabulary.

* ``Eagle3Head`` follows SafeAILab/EAGLE ``eagle/model/cnets.py`` (commit 148042c5): ``fc`` fuses the three target
  layers (3H -> H) on target features only; the midlayer norms the feature (``hidden_norm``, the residual) and the
  embedding (``input_layernorm``), attends over their concatenation (q/k/v read 2H), adds the MLP block; logits are
  ``lm_head(norm(h))`` over the draft vocabulary, placed at ``index + d2t[index]`` in the target's (other tokens
  -inf). The feature of the next step is the midlayer's output h (before ``norm``). speculators' variant
  ``norm_before_residual`` (``src/speculators/models/eagle3.py``) takes the normed feature as the residual.
* ``MTPHead`` follows vLLM ``deepseek_mtp.py`` (commit 03356f8c: embedding zeroed at position 0, ``enorm``/``hnorm``,
  ``eh_proj``, the decoder block, logits from ``shared_head`` norm + head, the next feature is the block's output
  before that norm) or ``qwen3_next_mtp.py`` (commit 055e47c2: ``pre_fc_norm_embedding``/``pre_fc_norm_hidden``,
  ``fc``, the layer, ``norm``; logits are the target's ``lm_head`` of the normed output, which is also the next
  feature). The decoder layer and the norms are the target's own classes, so a Qwen3-Next or DeepSeek-V3 target gets
  its own layer arithmetic.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from relaxbench.decoding.drafters.head_files import HeadSpec
from relaxbench.errors import ModelError


class Shared:
    """A module of the target that a head uses without owning it: kept out of the head's submodules, so moving,
    casting or saving the head never touches the target (whose layers may sit on several GPUs)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    @property
    def weight(self) -> torch.Tensor:
        return self.module.weight

    def __call__(self, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The module on ``x`` (moved to its device, floats cast to its dtype), returned on ``like``'s device."""
        w = self.module.weight
        x = x.to(w.device) if not x.is_floating_point() else x.to(device=w.device, dtype=w.dtype)
        return self.module(x).to(like.device)


def causal_mask(n_new: int, past: int, dtype: torch.dtype, device: torch.device,
                width: int | None = None) -> torch.Tensor:
    """[1, 1, n_new, width] additive mask (width: past + n_new, or a static cache's capacity): new position i sees
    cached positions and new ones up to i, and nothing beyond."""
    width = past + n_new if width is None else width
    allowed = torch.ones(n_new, width, dtype=torch.bool, device=device).tril(diagonal=past)
    mask = torch.zeros(n_new, width, dtype=dtype, device=device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


class HeadStaticCache:
    """A draft head's own KV cache, preallocated (``--kv-cache static``): keys and values written at the cache's
    length, a rollback a length change (``crop``, as ``cache.rollback`` calls it), nothing reallocated unless a
    sequence outruns the capacity (``ensure``, called before a forward so the mask and the keys agree in width).
    It answers what the heads' attention asks of a transformers cache: ``update`` and ``get_seq_length``."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length = max(int(capacity), 1), 0
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self._written: dict[int, int] = {}

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def ensure(self, positions: int) -> None:
        if positions <= self.capacity:
            return
        capacity = max(positions, 2 * self.capacity)
        for store in (self.keys, self.values):
            for i, old in store.items():
                grown = old.new_zeros((*old.shape[:2], capacity, old.shape[-1]))
                grown[:, :, : old.shape[2]].copy_(old)
                store[i] = grown
        self.capacity = capacity

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        n = int(key.shape[-2])
        start = self._written.get(layer_idx, self.length)
        if layer_idx not in self.keys:
            shape = (*key.shape[:2], self.capacity)
            self.keys[layer_idx] = key.new_zeros((*shape, key.shape[-1]))
            self.values[layer_idx] = value.new_zeros((*shape, value.shape[-1]))
        self.keys[layer_idx][:, :, start: start + n].copy_(key)
        self.values[layer_idx][:, :, start: start + n].copy_(value)
        self._written[layer_idx] = start + n
        self.length = max(self._written.values())
        return self.keys[layer_idx], self.values[layer_idx]

    def crop(self, tokens: int) -> None:
        """``tokens`` < 0: forget the last -tokens positions (transformers' ``crop`` argument under 5.x)."""
        self.length = max(self.length + tokens, 0)
        self._written = {i: self.length for i in self._written}


def mask_width(cache, past: int, n_new: int) -> int | None:
    """The attention mask's width for a forward of ``n_new`` positions on ``cache``: a static cache's capacity (made
    room for first), else None (past + n_new)."""
    if isinstance(cache, HeadStaticCache):
        cache.ensure(past + n_new)
        return cache.capacity
    return None


def _layer_config(layer_config: dict[str, Any] | Any, cls_name: str = "LlamaConfig"):
    """A transformers config object for one decoder layer (eager attention, so the arithmetic is the plain one)."""
    if not isinstance(layer_config, dict):
        config = copy.deepcopy(layer_config)
    else:
        import transformers

        raw = {k: v for k, v in layer_config.items() if k not in ("architectures", "auto_map")}
        config = getattr(transformers, cls_name)(**raw)
    config._attn_implementation = "eager"
    return config


class Eagle3Head(nn.Module):
    """EAGLE-3's draft model: fc, one midlayer whose attention reads 2H, norm, lm_head over a reduced vocabulary."""

    def __init__(self, spec: HeadSpec, target_hidden: int, target_vocab: int) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaMLP, LlamaRMSNorm,
                                                              LlamaRotaryEmbedding)

        config = _layer_config({k: v for k, v in spec.layer_config.items() if k != "model_type"})
        hidden, eps, heads = config.hidden_size, config.rms_norm_eps, config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        self.config, self.norm_before_residual, self.target_vocab = config, spec.norm_before_residual, target_vocab
        self.embed_tokens: nn.Embedding | None = None  # the checkpoint's own, when it ships one
        self.target_embed: Shared | None = None  # else the target's
        self.fc = nn.Linear(3 * target_hidden, hidden, bias=False)
        self.midlayer = nn.Module()
        attn = LlamaAttention(config, layer_idx=0)
        bias = bool(getattr(config, "attention_bias", False))
        attn.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=bias)
        attn.k_proj = nn.Linear(2 * hidden, config.num_key_value_heads * head_dim, bias=bias)
        attn.v_proj = nn.Linear(2 * hidden, config.num_key_value_heads * head_dim, bias=bias)
        self.midlayer.self_attn, self.midlayer.mlp = attn, LlamaMLP(config)
        self.midlayer.hidden_norm = LlamaRMSNorm(hidden, eps=eps)
        self.midlayer.input_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.midlayer.post_attention_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.norm = LlamaRMSNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, int(spec.draft_vocab), bias=False)
        self.register_buffer("d2t", torch.zeros(int(spec.draft_vocab), dtype=torch.long))
        self.rotary = LlamaRotaryEmbedding(config)

    def load(self, weights: dict[str, torch.Tensor], target_embedding: nn.Embedding) -> None:
        weights = {k: v for k, v in weights.items() if k != "t2d"}
        if "d2t" not in weights and self.d2t.shape[0] == self.target_vocab:
            # a draft vocabulary that is the target's has no map (speculators and vLLM leave ``d2t`` out then)
            weights["d2t"] = torch.zeros_like(self.d2t)
        if "fc.bias" in weights:  # speculators' fc carries a bias
            self.fc.bias = nn.Parameter(torch.zeros(self.fc.out_features))
        embed = weights.pop("embed_tokens.weight", None)
        _load(self, weights, "EAGLE-3", skip=("rotary.",))
        if embed is not None:
            self.embed_tokens = nn.Embedding.from_pretrained(embed, freeze=True)
        else:
            self.target_embed = Shared(target_embedding)

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, cache,
                from_target: bool, mask: torch.Tensor | None = None) -> torch.Tensor:
        """[n, H]: the midlayer's output for the pairs (tokens[i], features[i]) at ``positions`` (``mask``: an
        additive mask for the training's packed and unrolled sequences; else causal)."""
        hidden = self.fc(features) if from_target else features
        embeds = (self.embed_tokens(tokens) if self.embed_tokens is not None else
                  self.target_embed(tokens, hidden)).to(hidden.dtype)
        layer = self.midlayer
        if self.norm_before_residual:
            hidden = layer.hidden_norm(hidden)
            residual = hidden
        else:
            residual, hidden = hidden, layer.hidden_norm(hidden)
        x = torch.cat([layer.input_layernorm(embeds), hidden], dim=-1)[None]
        past = 0 if cache is None else cache.get_seq_length()  # no cache: a whole sequence at once (training)
        rope = self.rotary(x, positions[None])
        if mask is None:
            mask = causal_mask(x.shape[1], past, x.dtype, x.device, mask_width(cache, past, x.shape[1]))
        attn, _ = layer.self_attn(x, position_embeddings=rope, past_key_values=cache, attention_mask=mask)
        hidden = residual + attn[0]
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, V_target] float32: draft logits at ``index + d2t[index]``, -inf for tokens outside the draft vocab."""
        draft = self.lm_head(self.norm(hidden)).float()
        out = draft.new_full((draft.shape[0], self.target_vocab), float("-inf"))
        index = torch.arange(draft.shape[1], device=draft.device) + self.d2t
        return out.index_copy_(1, index, draft)


class MTPHead(nn.Module):
    """One multi-token-prediction layer (DeepSeek-V3 or Qwen3-Next arithmetic) on the target's embedding and head."""

    def __init__(self, spec: HeadSpec, target: nn.Module) -> None:
        super().__init__()
        base = getattr(target, getattr(target, "base_model_prefix", "model"))
        config = copy.deepcopy(target.config)
        config._attn_implementation = "eager"
        config.num_hidden_layers = 1
        if getattr(config, "layer_types", None) is not None:
            config.layer_types = ["full_attention"]
        if hasattr(config, "first_k_dense_replace"):  # DeepSeek-V3's MTP block is an MoE layer
            config.first_k_dense_replace = 0
        hidden, eps = config.hidden_size, getattr(config, "rms_norm_eps", 1e-6)
        norm_cls = type(base.norm)
        self.layout = spec.layout
        self.layer = type(base.layers[0])(config, layer_idx=0)
        if self.layout == "deepseek":
            self.enorm, self.hnorm = norm_cls(hidden, eps=eps), norm_cls(hidden, eps=eps)
            self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        else:  # qwen3_next, and speculators' MTP (the same arithmetic under other names)
            self.pre_fc_norm_embedding, self.pre_fc_norm_hidden = norm_cls(hidden, eps=eps), norm_cls(hidden, eps=eps)
            self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.norm = norm_cls(hidden, eps=eps)
        # DeepSeek-V3's MTP block ships its own embedding and head (registered by ``load``); else the target's
        self.embed_tokens: nn.Module | None = None
        self.lm_head: nn.Module | None = None
        self.target_embed = Shared(target.get_input_embeddings())
        self.target_head = Shared(target.get_output_embeddings())
        self.rotary = type(base.rotary_emb)(config)

    def load(self, weights: dict[str, torch.Tensor]) -> None:
        embed, head = weights.pop("embed_tokens.weight", None), weights.pop("lm_head.weight", None)
        if embed is not None:
            self.embed_tokens = nn.Embedding.from_pretrained(embed, freeze=True)
        if head is not None:
            self.lm_head = nn.Linear(head.shape[1], head.shape[0], bias=False)
            self.lm_head.weight = nn.Parameter(head, requires_grad=False)
        _load(self, weights, "MTP", skip=("rotary.", "embed_tokens.", "lm_head."))

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, cache,
                from_target: bool, mask: torch.Tensor | None = None) -> torch.Tensor:
        """[n, H]: the next step's feature for the pairs (tokens[i], features[i]) at ``positions`` (``mask`` as
        for ``Eagle3Head.forward``)."""
        embeds = (self.embed_tokens(tokens) if self.embed_tokens is not None else
                  self.target_embed(tokens, features)).to(features.dtype)
        if self.layout == "deepseek":
            embeds = torch.where((positions == 0)[:, None], torch.zeros_like(embeds), embeds)
            x = self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(features)], dim=-1))
        else:
            x = self.fc(torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(features)], dim=-1))
        x = x[None]
        past = 0 if cache is None else cache.get_seq_length()
        if mask is None:
            mask = causal_mask(x.shape[1], past, x.dtype, x.device, mask_width(cache, past, x.shape[1]))
        out = self.layer(x, attention_mask=mask,
                         position_ids=positions[None], past_key_values=cache, use_cache=cache is not None,
                         position_embeddings=self.rotary(x, positions[None]))
        out = (out[0] if isinstance(out, tuple) else out)[0]
        return out if self.layout == "deepseek" else self.norm(out)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        normed = self.norm(hidden) if self.layout == "deepseek" else hidden
        return (self.lm_head(normed) if self.lm_head is not None else self.target_head(normed, normed)).float()

    def output_weight(self) -> torch.Tensor:
        """The [V, H] output projection the logits use (the checkpoint's, else the target's)."""
        return (self.lm_head if self.lm_head is not None else self.target_head).weight


def _load(module: nn.Module, weights: dict[str, torch.Tensor], what: str, skip: tuple[str, ...]) -> None:
    """Strict load of our own parameters (those under ``skip`` excepted): a missing or extra key is a one-line
    ``ModelError``."""
    own = {k for k in module.state_dict() if not k.startswith(skip)}
    missing, extra = sorted(own - set(weights)), sorted(set(weights) - own)
    if missing or extra:
        raise ModelError(f"{what} head: checkpoint keys do not match (missing: {', '.join(missing[:4]) or '-'}; "
                         f"unexpected: {', '.join(extra[:4]) or '-'})")
    for key, value in weights.items():
        if module.state_dict()[key].shape != value.shape:
            raise ModelError(f"{what} head: {key} has shape {list(value.shape)}, expected "
                             f"{list(module.state_dict()[key].shape)}")
    module.load_state_dict(weights, strict=False)
