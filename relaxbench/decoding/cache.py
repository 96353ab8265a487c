"""KV-cache creation, forward passes and the one rollback helper.

``rollback`` is the only caller of transformers' ``Cache.crop``, whose argument (under the pinned transformers 5.x)
is a negative number of tokens to remove.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from relaxbench.decoding.bf16_rows import fp32_linears_for_wide_rows


def new_cache(model: torch.nn.Module):
    """An empty dynamic cache laid out for ``model`` (sliding-window layers included)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def rollback(cache, keep: int) -> None:
    """Drop every cached position at index >= ``keep``."""
    current = cache_length(cache)
    if keep > current or keep < 0:
        raise ValueError(f"cannot roll a cache of length {current} back to {keep}")
    if keep == current:
        return
    cache.crop(keep - current)


@dataclass(frozen=True)
class ForwardOutput:
    logits: torch.Tensor  # [n_logits, V], float32
    hidden: torch.Tensor | None  # [n_logits, H] last-layer hidden states, when asked for


def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache, n_logits: int,
            want_hidden: bool = False, fp32_wide_rows: bool = True) -> ForwardOutput:
    """Run ``input_ids`` (1-D) through ``model`` on top of ``cache``; logits for the last ``n_logits`` positions.
    A bf16 model on a CPU without bf16 units computes a wide forward's linear layers in fp32 (``bf16_rows``;
    ``fp32_wide_rows=False`` keeps bf16's own kernel, for ``relaxbench bench forward`` to compare the two)."""
    rows = int(input_ids.shape[0]) if fp32_wide_rows else 0
    with fp32_linears_for_wide_rows(model, rows):
        out = model(
            input_ids=input_ids.unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=max(n_logits, 1),
            output_hidden_states=want_hidden,
        )
    logits = out.logits[0, -n_logits:].float() if n_logits > 0 else out.logits[0, :0].float()
    hidden = out.hidden_states[-1][0, -n_logits:] if want_hidden else None
    return ForwardOutput(logits, hidden)


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of leading positions where the 1-D tensors ``a`` and ``b`` agree."""
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n


class CachedLM:
    """A causal LM, its KV cache and the ids that cache holds.

    Keeping the ids next to the cache makes rollback exact and general: after any round, the cache is cut back to
    the longest prefix it shares with the committed sequence (a cached position depends only on the tokens up to
    it, so every kept entry is valid), whatever the drafter or policy fed.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = model.get_input_embeddings().weight.device  # the first layer's (a model may span GPUs)
        self.cache = new_cache(model)
        self.ids = torch.empty(0, dtype=torch.long, device=self.device)

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    def reset(self) -> None:
        self.cache = new_cache(self.model)
        self.ids = self.ids[:0]

    def run(self, new_ids: torch.Tensor, n_logits: int, want_hidden: bool = False) -> ForwardOutput:
        """Append ``new_ids`` to the cache; return logits (and hidden states) for the last ``n_logits`` of them."""
        out = forward(self.model, new_ids, self.cache, n_logits, want_hidden)
        self.ids = torch.cat([self.ids, new_ids])
        return out

    def truncate(self, keep: int) -> None:
        rollback(self.cache, keep)
        self.ids = self.ids[:keep]

    def sync_to(self, context: torch.Tensor) -> None:
        """Keep the longest valid prefix of the cache for ``context``, leaving at least its last token unfed
        (the next forward must produce logits for the position after it)."""
        keep = min(common_prefix_length(self.ids, context), context.shape[0] - 1)
        if keep < self.length:
            self.truncate(keep)

    def pending(self, context: torch.Tensor) -> torch.Tensor:
        """The ids of ``context`` not yet in the cache (``sync_to`` first)."""
        return context[self.length:]
