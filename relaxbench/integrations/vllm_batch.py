"""vLLM's flattened verification batch as a relaxbench ``Batch``, and verdicts written back in vLLM's output layout,
with tensor operations only. Pure torch (no vLLM import), so the replay tests check it without vLLM.

vLLM's layout (``SpecDecodeMetadata``): request i drafted ``num_draft_tokens[i]`` tokens (a host list),
concatenated in ``draft_token_ids``; ``logits`` holds every request's draft-position rows and its bonus row, found
through ``target_logits_indices`` (one per draft token) and ``bonus_logits_indices`` (one per request);
``draft_probs`` (None for n-gram drafts) has one row per draft token. ``engine_batch`` keeps those tensors and only
builds the index maps ([B, K + 1] and [B, K]) from them; ``output_tokens`` writes ``[B, max_spec_len + 1]``: the
accepted drafts, then the correction or bonus token, the rest ``placeholder``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from relaxbench.ops.random import stream_uniforms
from relaxbench.ops.sampling import BatchSampling, probs_rows
from relaxbench.policies import Batch, Block, Rows, Verdict

__all__ = ["DRAW_OFFSET", "engine_batch", "flatten", "output_tokens", "select", "with_stream_uniforms"]

DRAW_OFFSET = 1 << 20  # the index of a step's token-drawing uniform in its request's stream


def engine_batch(num_draft_tokens: Sequence[int], draft_token_ids: torch.Tensor, target_logits_indices: torch.Tensor,
                 bonus_logits_indices: torch.Tensor, logits: torch.Tensor, draft_probs: torch.Tensor | None,
                 sampling: BatchSampling, accept_u: torch.Tensor, draw_u: torch.Tensor,
                 cu_num_draft_tokens: torch.Tensor | None = None) -> Batch:
    """The ``Batch`` of one vLLM verification step. The drafts are scattered into [B, K]; the logits and the draft
    probabilities stay as vLLM holds them (``draft_probs``: the distribution the drafts were sampled from,
    softmax(z/T), which the run's top-k/top-p do not truncate). ``cu_num_draft_tokens``: vLLM's cumulative counts
    on the device (else the host counts are copied over)."""
    device = logits.device
    if cu_num_draft_tokens is not None:
        cumulative = cu_num_draft_tokens.to(device=device, dtype=torch.long)
        counts = torch.diff(cumulative, prepend=torch.zeros(1, dtype=torch.long, device=device))
    else:
        counts = torch.as_tensor(list(num_draft_tokens), dtype=torch.long, device=device)
    size, total = len(num_draft_tokens), int(sum(num_draft_tokens))
    width = max(num_draft_tokens, default=0)
    requests = torch.arange(size, device=device).repeat_interleave(counts, output_size=total)
    starts = torch.cumsum(counts, 0) - counts
    positions = torch.arange(total, device=device) - starts[requests]
    drafts = torch.zeros(size, width, dtype=torch.long, device=device)
    drafts = drafts.index_put((requests, positions), draft_token_ids.long())
    target_index = bonus_logits_indices.long().unsqueeze(-1).repeat(1, width + 1)  # padded positions: the bonus row
    target_index = target_index.index_put((requests, positions), target_logits_indices.long())
    draft_index = (starts.unsqueeze(-1) + torch.arange(width, device=device)).clamp(0, max(total - 1, 0))
    return Batch(drafts, counts, total, Rows(logits, target_index), sampling, accept_u, draw_u,
                 draft_probs=None if draft_probs is None else Rows(draft_probs, draft_index),
                 any_empty=any(n == 0 for n in num_draft_tokens))


def select(batch: Batch, requests: torch.Tensor, counts: Sequence[int], sampling: BatchSampling) -> Batch:
    """The requests ``requests`` [G] of ``batch`` (one rule's group), their draft ``counts`` (host) and settings:
    index maps and per-request rows selected, the logits and draft rows untouched."""
    def rows(source: Rows | None) -> Rows | None:
        return None if source is None else Rows(source.source, source.index[requests])

    width = max(counts, default=0)
    return Batch(batch.drafts[requests, :width], batch.num_drafts[requests], int(sum(counts)),
                 Rows(batch.target.source, batch.target.index[requests, : width + 1]), sampling,
                 batch.accept_u[requests, :width], batch.draw_u[requests],
                 draft_logits=None if batch.draft_logits is None else Rows(batch.draft_logits.source,
                                                                         batch.draft_logits.index[requests, :width]),
                 draft_probs=None if batch.draft_probs is None else Rows(batch.draft_probs.source,
                                                                       batch.draft_probs.index[requests, :width]),
                 extras={key: rows(value) for key, value in batch.extras.items()},
                 any_empty=any(n == 0 for n in counts))


def with_stream_uniforms(batch: Batch, seeds: torch.Tensor, steps: torch.Tensor, uniform_dtype: torch.dtype) -> Batch:
    """``batch`` with each request's uniforms for this step from its counter-based stream (``stream_uniforms``):
    the acceptance uniforms in the rule's ``uniform_dtype`` (float64 for a rule whose reference draws float64, so
    the engine tests ``u ≤ p/q`` with the same u as the loop and the reference), the token's uniform in float64."""
    return replace(batch, accept_u=stream_uniforms(seeds, steps, batch.width, uniform_dtype),
                   draw_u=stream_uniforms(seeds, steps, 1, torch.float64, DRAW_OFFSET)[:, 0])


def output_tokens(batch: Batch, verdict: Verdict, width: int, placeholder: int) -> torch.Tensor:
    """[B, width] int32: each request's accepted drafts, its next token, then ``placeholder``."""
    columns = torch.arange(width, device=batch.device)
    drafts = torch.nn.functional.pad(batch.drafts, (0, width - batch.width))
    accepted = verdict.accepted.unsqueeze(-1)
    out = torch.where(columns < accepted, drafts, torch.full_like(drafts, placeholder))
    out = out.scatter(1, accepted, verdict.next_token.unsqueeze(-1))
    return out.to(torch.int32)


def flatten(blocks: Sequence[Block]) -> dict[str, torch.Tensor | list[int] | None]:
    """The inverse, as vLLM lays a batch out: every request's draft rows then its bonus row, in request order, and
    the distributions the drafts were sampled from (the draft logits processed with the block's settings where the
    block names none), which is what the replay tests feed ``engine_batch``."""
    counts = [b.k for b in blocks]
    target_idx, bonus_idx, rows, start = [], [], [], 0
    for b in blocks:
        target_idx += list(range(start, start + b.k))
        bonus_idx.append(start + b.k)
        rows.append(b.target_logits)
        start += b.k + 1
    has_q = all(b.draft_logits is not None for b in blocks if b.k) and any(counts)
    q = None
    if has_q:
        q = torch.cat([b.draft_probs_given if b.draft_probs_given is not None
                       else probs_rows(b.draft_logits, BatchSampling.of([b.sampling] * b.k))
                       for b in blocks if b.k])
    return {"num_draft_tokens": counts, "draft_token_ids": torch.cat([b.draft_tokens for b in blocks]),
            "target_logits_indices": torch.tensor(target_idx, dtype=torch.int32),
            "bonus_logits_indices": torch.tensor(bonus_idx, dtype=torch.int32), "logits": torch.cat(rows),
            "draft_probs": q}
