"""vLLM's flattened verification batch cut into relaxbench ``Block``s, and verdicts written back in vLLM's output
layout. Pure torch (no vLLM import), so the replay tests check it against relaxbench's own loop without vLLM.

vLLM's layout (``SpecDecodeMetadata``): request i drafted ``num_draft_tokens[i]`` tokens, concatenated in
``draft_token_ids``; ``logits`` holds every request's draft-position rows and its bonus row, found through
``target_logits_indices`` (one per draft token) and ``bonus_logits_indices`` (one per request); ``draft_probs``
(None for n-gram drafts) has one row per draft token. The output is ``[B, max_spec_len + 1]``: the accepted drafts,
then the correction or bonus token, the rest ``placeholder``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from relaxbench.ops.rejection import Verdict
from relaxbench.ops.rows import LazyRows, row_chunk
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import Block


def _same(rows: torch.Tensor) -> torch.Tensor:
    return rows


@dataclass(frozen=True)
class EngineBlock(Block):
    """A ``Block`` whose draft distribution is the one the engine sampled the drafts from (vLLM's draft
    probabilities: softmax(z/T), which the run's top-k/top-p do not truncate), not one recomputed from draft logits.
    ``draft_logits`` are T·log q: the drafter's logits up to a constant per row."""

    engine_q: torch.Tensor | None = None

    @cached_property
    def q_rows(self) -> LazyRows:
        if self.engine_q is None:
            return super().q_rows
        return LazyRows(self.engine_q, _same, row_chunk(self.engine_q.device, int(self.engine_q.shape[0])))


def request_block(i: int, num_draft_tokens: Sequence[int], draft_token_ids: torch.Tensor,
                  target_logits_indices: torch.Tensor, bonus_logits_indices: torch.Tensor, logits: torch.Tensor,
                  draft_probs: torch.Tensor | None, sampling: SamplingParams,
                  generator: torch.Generator | None) -> Block:
    """Request ``i``'s ``Block``: its drafts, its k + 1 target rows (float32) and, when the drafter has them, its
    draft distributions."""
    lo = sum(num_draft_tokens[:i])
    hi = lo + num_draft_tokens[i]
    rows = torch.cat([logits[target_logits_indices[lo:hi].long()],
                      logits[bonus_logits_indices[i: i + 1].long()]]).float()
    if draft_probs is None or hi == lo:
        return EngineBlock(draft_token_ids[lo:hi].long(), rows, None, sampling, generator)
    q = draft_probs[lo:hi].float()
    scale = sampling.temperature if sampling.temperature > 0 else 1.0
    return EngineBlock(draft_token_ids[lo:hi].long(), rows, torch.log(q) * scale, sampling, generator, engine_q=q)


def output_row(block: Block, verdict: Verdict, width: int, placeholder: int) -> torch.Tensor:
    """One request's row of the output: accepted drafts, the next token, then ``placeholder``."""
    row = torch.full((width,), placeholder, dtype=torch.int32)
    tokens = block.draft_tokens[: verdict.n_accepted].tolist() + [verdict.next_token]
    row[: len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
    return row


def flatten(blocks: Sequence[Block]) -> dict[str, torch.Tensor | list[int] | None]:
    """The inverse, as vLLM lays a batch out: every request's draft rows then its bonus row, in request order, and
    the distributions the drafts were sampled from (what the replay tests feed ``request_block``)."""
    counts = [b.k for b in blocks]
    target_idx, bonus_idx, rows = [], [], []
    for b in blocks:
        start = sum(r.shape[0] for r in rows)
        target_idx += list(range(start, start + b.k))
        bonus_idx.append(start + b.k)
        rows.append(b.target_logits)
    has_q = all(b.draft_logits is not None for b in blocks if b.k)
    q = torch.cat([b.draft_probs for b in blocks if b.k]) if has_q and any(counts) else None
    return {"num_draft_tokens": counts, "draft_token_ids": torch.cat([b.draft_tokens for b in blocks]),
            "target_logits_indices": torch.tensor(target_idx, dtype=torch.int32),
            "bonus_logits_indices": torch.tensor(bonus_idx, dtype=torch.int32), "logits": torch.cat(rows),
            "draft_probs": q}
