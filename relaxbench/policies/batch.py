"""What a rule decides: one verification step of a whole batch of requests, as tensors on the device.

A serving engine hands its verifier flattened rows: every request's draft positions and its bonus position, one logit
row each, with index maps saying which row is whose (vLLM's ``target_logits_indices``/``bonus_logits_indices``).
``Batch`` keeps the rows as the engine holds them and adds the maps: ``Rows(source [N, X], index [B, J])``, so a rule
reduces each row to what it reads (argmax, p(d), entropy, top values) and gathers per request, never copying a padded
[B, K + 1, V] tensor. Request b drafted ``num_drafts[b] ≤ K`` tokens (0 allowed); its positions past that repeat a
valid row and are masked by ``valid``.

Everything a rule may branch on without synchronising with the device is host data: the shapes (B, K), the sampling
facts (``BatchSampling``: all greedy, one shared setting) and ``any_empty``. Everything else is a tensor, and a rule
turns data-dependent steps into masks, so a decision costs the same number of operations at B = 1 and B = 256.

The random numbers are inputs (``accept_u`` for the acceptance tests, ``draw_u`` for the one token a request draws):
the transformers loop draws them from a request's generator, the vLLM adapter from a counter-based stream
(``ops/random.py``), a test from whatever it compares against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import row_max
from relaxbench.ops.sampling import BatchSampling, SamplingParams, probs_rows

__all__ = ["Batch", "Block", "Rows", "draw_uniforms"]


@dataclass(frozen=True)
class Rows:
    """Per-position rows read through an index map: ``source`` [N, X] as the engine holds it and ``index`` [B, J]
    (long) the source row of each request's position j."""

    source: torch.Tensor
    index: torch.Tensor

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """The rows at ``positions`` ([B] → [B, X]; [B, m] → [B, m, X]): one gather of B (× m) rows (whole rows
        are gathered with ``index_select`` here and in ``Batch``: on a CPU a third of advanced indexing's cost)."""
        flat = positions.unsqueeze(-1) if positions.dim() == 1 else positions
        picked = self.index.gather(1, flat)
        rows = self.source.index_select(0, picked.reshape(-1)).unflatten(0, picked.shape)
        return rows.squeeze(1) if positions.dim() == 1 else rows

    def of(self, reduced: torch.Tensor) -> torch.Tensor:
        """A per-source-row value ``reduced`` [N, ...] laid out per position: [B, J, ...]."""
        return reduced[self.index]

    def values(self, columns: torch.Tensor) -> torch.Tensor:
        """[B, m] ``source[row of position j, columns[b, j]]`` for the first m positions: a value per position
        (the draft token's logit, p(d)), without touching the rest of a row."""
        m = int(columns.shape[1])
        return self.source[self.index[:, :m], columns]

    def row_owner(self, valid: torch.Tensor) -> torch.Tensor:
        """[N] the request each source row belongs to, read from the positions ``valid`` [B, J] marks as the
        request's own (a padded position may point at another request's row); rows no valid position reads:
        request 0."""
        b, j = self.index.shape
        owner = torch.zeros(int(self.source.shape[0]), dtype=torch.long, device=self.index.device)
        requests = torch.arange(b, device=self.index.device).unsqueeze(-1).expand(b, j)
        claims = torch.where(valid[:, :j], requests, torch.full_like(requests, -1))
        return owner.scatter_reduce(0, self.index.reshape(-1), claims.reshape(-1), "amax")


@dataclass(frozen=True, eq=False)
class Batch:
    """One verification step of B requests (see the module docstring).

    ``total_drafts``: T = Σ num_drafts, host data (the engine knows it), so per-draft work runs on the T real draft
    positions (``pairs``) without padding.
    ``target``: the target's logits, index [B, K + 1] (position ``num_drafts[b]`` is request b's bonus row).
    ``draft_logits`` / ``draft_probs``: the drafter's rows, index [B, K] (either or both; None for drafters without
    a distribution: point-mass drafts). ``extras``: what a rule's ``needs`` asked for, as ``Rows``:
    ``hidden_states`` (index [B, K + 1], aligned with ``target``), ``draft_hidden_states`` (index [B, K]),
    ``extra_logits`` (the target's logits at the rule's extra verify tokens, index [B, E]), and a span-gated rule's
    state. ``segment_end`` [B, K]: the end (exclusive) of the run of positions each position belongs to, for a rule
    that looks ahead within a block (default: the request's draft count)."""

    drafts: torch.Tensor
    num_drafts: torch.Tensor
    total_drafts: int
    target: Rows
    sampling: BatchSampling
    accept_u: torch.Tensor
    draw_u: torch.Tensor
    draft_logits: Rows | None = None
    draft_probs: Rows | None = None
    extras: Mapping[str, Rows] = field(default_factory=dict)
    segment_end: torch.Tensor | None = None
    any_empty: bool = False

    # -- shape (host) -------------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """B: the number of requests."""
        return int(self.drafts.shape[0])

    @property
    def width(self) -> int:
        """K: the longest draft of the batch (host data: a tensor's shape)."""
        return int(self.drafts.shape[1])

    @property
    def device(self) -> torch.device:
        return self.drafts.device

    @property
    def has_draft_distribution(self) -> bool:
        return self.draft_probs is not None or self.draft_logits is not None

    def with_segments(self, segment_end: torch.Tensor) -> Batch:
        return replace(self, segment_end=segment_end)

    # -- positions ------------------------------------------------------------------------------------------------
    @cached_property
    def positions(self) -> torch.Tensor:
        """[K] 0..K−1."""
        return torch.arange(self.width, device=self.device)

    @cached_property
    def valid(self) -> torch.Tensor:
        """[B, K] bool: the position holds one of the request's own drafts."""
        return self.positions < self.num_drafts.unsqueeze(-1)

    @cached_property
    def ends(self) -> torch.Tensor:
        """[B, K] the end of each position's run (``segment_end``, or the request's draft count)."""
        if self.segment_end is not None:
            return self.segment_end
        return self.num_drafts.unsqueeze(-1).expand(-1, self.width)

    @cached_property
    def pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(request [T], position [T]) of every real draft position, in request order: per-draft rows are gathered
        for these T positions only (no padded [B, K, V] copy)."""
        requests = torch.arange(self.size, device=self.device).repeat_interleave(
            self.num_drafts, output_size=self.total_drafts)
        starts = torch.cumsum(self.num_drafts, 0) - self.num_drafts
        return requests, torch.arange(self.total_drafts, device=self.device) - starts[requests]

    def per_position(self, values: torch.Tensor, fill: float | bool = 0) -> torch.Tensor:
        """Per-draft ``values`` [T, ...] laid out as [B, K, ...] (``fill`` at the padded positions)."""
        requests, positions = self.pairs
        out = values.new_full((self.size, self.width, *values.shape[1:]), fill)
        return out.index_put((requests, positions), values)

    @cached_property
    def pair_of(self) -> torch.Tensor:
        """[B, K] the index into ``pairs`` of each position (padded positions: the request's last draft, or 0)."""
        starts = torch.cumsum(self.num_drafts, 0) - self.num_drafts
        last = (self.num_drafts - 1).clamp_min(0).unsqueeze(-1)
        return (starts.unsqueeze(-1) + torch.minimum(self.positions, last)).clamp(0, max(self.total_drafts - 1, 0))

    def target_rows_of_pairs(self) -> torch.Tensor:
        """[T] the target's row of each real draft position."""
        requests, positions = self.pairs
        return self.target.index[requests, positions]

    @cached_property
    def target_draft_rows(self) -> torch.Tensor:
        """[T, V] the target's logits at the real draft positions: a rule that judges drafts by a per-row reduction
        (an entropy, the top values) reduces these T rows, not the bonus rows as well, and lays the result out with
        ``per_position``."""
        return self.target.source.index_select(0, self.target_rows_of_pairs())

    # -- the target's rows, reduced -------------------------------------------------------------------------------
    @cached_property
    def target_max(self) -> tuple[torch.Tensor, torch.Tensor]:
        """([N] each target row's largest logit, [N] its first index): one reduction shared by every reader of a
        row's argmax or maximum."""
        return row_max(self.target.source)

    @cached_property
    def target_argmax(self) -> torch.Tensor:
        """[B, K + 1] the target's greedy token at each position (first index of the maximum)."""
        return self.target.of(self.target_max[1])

    @cached_property
    def matches(self) -> torch.Tensor:
        """[B, K] bool: the draft is the target's argmax (the exact-match test)."""
        return self.drafts == self.target_argmax[:, :-1]

    @cached_property
    def target_logit_of_drafts(self) -> torch.Tensor:
        """[B, K] float32: the target's logit of each draft token."""
        return self.target.values(self.drafts).float()

    @cached_property
    def row_sampling(self) -> BatchSampling:
        """The settings of each target row (its request's)."""
        if self.sampling.uniform is not None:
            return self.sampling
        own = torch.arange(self.width + 1, device=self.device) <= self.num_drafts.unsqueeze(-1)
        return self.sampling.take(self.target.row_owner(own))

    @cached_property
    def pair_sampling(self) -> BatchSampling:
        """The settings of each real draft position's request (T entries; the batch's own when every request shares
        one): what a rule that processes the T draft rows alone reads."""
        if self.sampling.uniform is not None:
            return self.sampling
        return self.sampling.take(self.pairs[0])

    @cached_property
    def p(self) -> torch.Tensor:
        """[N, V] each target row's distribution after its request's temperature, top-k and top-p (softmax of the
        raw logits for greedy requests)."""
        return probs_rows(self.target.source, self.row_sampling)

    @cached_property
    def p_of_drafts(self) -> torch.Tensor:
        """[B, K] p(d) at each draft position."""
        return self.p[self.target.index[:, :-1], self.drafts]

    @property
    def tempered_is_p(self) -> bool:
        """Host data: the batch shares one setting and it is a temperature alone (no top-k, no top-p), so
        ``tempered`` is ``p`` itself."""
        uniform = self.sampling.uniform
        return uniform is not None and SamplingParams(uniform.temperature) == uniform

    @cached_property
    def tempered(self) -> torch.Tensor:
        """[N, V] softmax(z / T): the temperature alone, for rules whose authors apply only it (``p`` when no
        request truncates)."""
        if self.tempered_is_p:
            return self.p
        return probs_rows(self.target.source, self.row_sampling.tempered())

    # -- the drafter's rows -----------------------------------------------------------------------------------------
    def _draft_rows(self) -> Rows:
        rows = self.draft_probs or self.draft_logits
        if rows is None:
            raise ConfigError("this rule needs draft probabilities but the drafter provides none")
        return rows

    @cached_property
    def q(self) -> torch.Tensor:
        """[M, V] the distribution each draft was sampled from: the engine's own (``draft_probs``), or the draft
        logits processed with the request's settings."""
        if self.draft_probs is not None:
            return self.draft_probs.source.float()
        rows = self._draft_rows()
        settings = self.sampling if self.sampling.uniform is not None else \
            self.sampling.take(rows.row_owner(self.valid))
        return probs_rows(rows.source, settings)

    @cached_property
    def q_index(self) -> torch.Tensor:
        """[B, K] the row of ``q`` of each draft position."""
        return self._draft_rows().index

    def q_rows_of_pairs(self) -> torch.Tensor:
        """[T] the row of ``q`` of each real draft position."""
        requests, positions = self.pairs
        return self.q_index[requests, positions]

    @cached_property
    def q_of_drafts(self) -> torch.Tensor:
        """[B, K] q(d) at each draft position."""
        return self.q[self.q_index, self.drafts]

    def q_at(self, positions: torch.Tensor) -> torch.Tensor:
        """[B, V] q at one position per request (clamped into the block: a bonus position reads the last row)."""
        rows = self.q_index.gather(1, positions.clamp(0, self.width - 1).unsqueeze(-1)).squeeze(-1)
        return self.q.index_select(0, rows)

    def p_at(self, positions: torch.Tensor) -> torch.Tensor:
        """[B, V] p at one position per request."""
        return self.p.index_select(0, self.target.index.gather(1, positions.unsqueeze(-1)).squeeze(-1))

    @cached_property
    def draft_logit_rows(self) -> torch.Tensor:
        """[M, V] the drafter's logits up to a constant per row: as given, or T·log q from the engine's q."""
        if self.draft_logits is not None:
            return self.draft_logits.source.float()
        rows = self._draft_rows()
        temperature = self.sampling.take(rows.row_owner(self.valid)).temperature if self.sampling.uniform is None else \
            torch.full((int(rows.source.shape[0]),), self.sampling.uniform.temperature, device=self.device)
        scale = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).unsqueeze(-1)
        return torch.log(rows.source.float()).mul_(scale)

    # -- building -------------------------------------------------------------------------------------------------
    @classmethod
    def of_blocks(cls, blocks: Sequence[Block], uniform_dtype: torch.dtype | None = None,
                  uniforms: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Batch:
        """A batch of one-request ``Block``s (tests, benchmarks, the transformers loop at B = 1): their rows
        concatenated, their uniforms drawn from each block's generator as ``draw_uniforms`` does (or given).

        ``uniform_dtype``: the dtype the acceptance uniforms are drawn and kept in (the rule's ``uniform_dtype``).
        None keeps given uniforms in their own dtype (float32 when they are drawn here), so a rule's float64
        uniforms are never rounded to float32 on the way in: float32(u) ≤ p(d)/q(d) < u would accept a draft the
        rule's reference (MARS, vLLM) rejects."""
        if not blocks:
            raise ValueError("a batch needs at least one request")
        device = blocks[0].draft_tokens.device
        width = max(b.k for b in blocks)
        size = len(blocks)
        if uniform_dtype is None:
            uniform_dtype = torch.float32 if uniforms is None else _common_dtype([u for u, _ in uniforms])
        if uniforms is None:
            uniforms = [draw_uniforms(b.generator, b.k, b.sampling, uniform_dtype) for b in blocks]
        accept_u = torch.zeros(size, width, dtype=uniform_dtype, device=device)
        for i, (u, _) in enumerate(uniforms):
            accept_u[i, : u.shape[0]] = u.to(uniform_dtype)
        draw_u = torch.stack([torch.as_tensor(d, dtype=torch.float64, device=device) for _, d in uniforms])
        drafts = torch.zeros(size, width, dtype=torch.long, device=device)
        target_index = torch.zeros(size, width + 1, dtype=torch.long, device=device)
        draft_index = torch.zeros(size, width, dtype=torch.long, device=device)
        start = draft_start = 0
        for i, b in enumerate(blocks):
            drafts[i, : b.k] = b.draft_tokens
            target_index[i] = start + torch.arange(width + 1, device=device).clamp_max(b.k)
            draft_index[i] = draft_start + torch.arange(width, device=device).clamp(0, max(b.k - 1, 0))
            start += b.k + 1
            draft_start += b.k
        draft_index = draft_index.clamp_max(max(draft_start - 1, 0))  # a request with no drafts reads any row
        with_q = [b for b in blocks if b.k]
        has_q = bool(with_q) and all(b.draft_logits is not None for b in with_q)
        draft_logits = Rows(_joined([b.draft_logits for b in with_q]), draft_index) if has_q else None
        engine_q = has_q and all(b.draft_probs_given is not None for b in with_q)
        draft_probs = Rows(_joined([b.draft_probs_given for b in with_q]), draft_index) if engine_q else None
        extras = _block_extras(blocks, width)
        return cls(drafts, torch.tensor([b.k for b in blocks], dtype=torch.long, device=device),
                   sum(b.k for b in blocks), Rows(_joined([b.target_logits for b in blocks]), target_index),
                   BatchSampling.of([b.sampling for b in blocks], device), accept_u, draw_u,
                   draft_logits=draft_logits, draft_probs=draft_probs, extras=extras,
                   any_empty=any(b.k == 0 for b in blocks))


def _block_extras(blocks: Sequence[Block], width: int) -> dict[str, Rows]:
    """The blocks' extras as ``Rows``: hidden states aligned with the target's positions, the draft model's with
    the draft positions, extra logits by their own count."""
    device = blocks[0].draft_tokens.device
    extras: dict[str, Rows] = {}
    offsets = {"hidden_states": (1, width + 1), "draft_hidden_states": (0, width)}
    for key in sorted({k for b in blocks for k in b.extras}):
        if any(key not in b.extras for b in blocks):
            raise ValueError(f"extra {key!r} is missing from some blocks of the batch")
        sources, index, start = [], [], 0
        if key in offsets:
            extra_rows, columns = offsets[key]
            for b in blocks:
                value = b.extras[key]
                sources.append(value)
                index.append(start + torch.arange(columns, device=device).clamp_max(max(b.k + extra_rows - 1, 0)))
                start += int(value.shape[0])
        else:
            longest = max(int(b.extras[key].shape[0]) for b in blocks)
            for b in blocks:
                value = b.extras[key]
                sources.append(value)
                index.append(start + torch.arange(longest, device=device).clamp_max(max(int(value.shape[0]) - 1, 0)))
                start += int(value.shape[0])
        extras[key] = Rows(_joined(sources), torch.stack(index).clamp_max(max(start - 1, 0)))
    return extras


def _common_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """The dtype every one of ``tensors`` promotes to (float32 for none)."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, torch.as_tensor(tensor).dtype)
    return dtype


def _joined(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The rows of ``tensors`` in one tensor (a single one as it is: the loop's batch of one copies nothing)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors))


def draw_uniforms(generator: torch.Generator | None, k: int, sampling: SamplingParams,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """One request's uniforms for a round from its generator: ``k`` acceptance uniforms of ``dtype``, then the
    float64 uniform of the token it draws; nothing is drawn under greedy decoding (zeros)."""
    if sampling.greedy or generator is None:
        return torch.zeros(k, dtype=dtype), torch.zeros((), dtype=torch.float64)
    device = generator.device
    accept = torch.rand(k, generator=generator, dtype=dtype, device=device) if k else torch.zeros(0, dtype=dtype,
                                                                                                  device=device)
    return accept, torch.rand((), generator=generator, dtype=torch.float64, device=device)


@dataclass(frozen=True)
class Block:
    """One request's round, as the tests, the benchmarks and the transformers loop describe it: ``draft_tokens``
    [k], ``target_logits`` [k + 1, V] (row i for draft position i, row k the bonus position), ``draft_logits``
    [k, V] or None, its sampling settings and random stream, and its extras (``hidden_states`` [k + 1, H],
    ``draft_hidden_states`` [k, H], ``extra_logits`` [E, V]). ``Batch.of_blocks`` turns blocks into a batch.
    ``draft_probs_given``: the distribution the engine sampled the drafts from, when it is not the draft logits
    processed with the run's settings (vLLM's q: softmax(z / T), untruncated)."""

    draft_tokens: torch.Tensor
    target_logits: torch.Tensor
    draft_logits: torch.Tensor | None
    sampling: SamplingParams
    generator: torch.Generator | None
    extras: Mapping[str, torch.Tensor] = field(default_factory=dict)
    draft_probs_given: torch.Tensor | None = None

    @property
    def k(self) -> int:
        return int(self.draft_tokens.shape[0])

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy
