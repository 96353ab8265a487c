"""The one rejection-sampling helper, shared by speculative sampling and every sampling-mode rule, and the
``Verdict`` every policy returns.

In the "relaxed target" framework (Xia et al., arXiv 2607.08690) a rule defines ``pi_accept`` (used in the
acceptance test) and ``pi_residual`` (used after a rejection): a draft ``x ~ q`` is accepted with probability
``min(1, pi_accept(x)/q(x))``; at the first rejection the next token is drawn from ``norm((pi_residual − q)+)``;
if every draft is accepted the bonus token is drawn from ``bonus``. Strict speculative sampling is
``pi_accept = pi_residual = p``, ``bonus = p_k``; then the output follows ``p`` exactly.

The rows a rule gives may be ``LazyRows`` (or functions of the row): the walk stops at the first rejection, so a
rule pays only for the rows up to it and the residual row.

Two extensions serve rules that do not read a draft distribution (FLy, a judge on n-gram drafts):

* ``q=None`` treats each draft as a point mass (``q(d_i) = 1``), which is what a deterministic drafter proposes.
  Then strict speculative sampling accepts ``d`` with probability ``p(d)`` — the same as "``d`` equals a sample
  from ``p``" — and its residual ``norm((p − δ_d)+)`` is ``p`` with ``d`` removed.
* ``relax`` maps the per-position acceptance mask to a looser one *before* the accepted prefix is taken
  (FLy's window looks ahead within the block). It may only add acceptances, so a rejected position is always one
  the acceptance test itself rejected, and the residual there is still the right conditional distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tests.oracle.rows import LazyRows
from tests.oracle.sampling import sample

Row = Callable[[int], torch.Tensor]  # row n -> [V]
AtDraft = Callable[[int], torch.Tensor]  # row i -> the value at the draft token of row i (a 0-d tensor)
Rows = torch.Tensor | LazyRows  # [k, V], read one row at a time


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification round."""

    n_accepted: int  # length of the accepted draft prefix, 0..k
    next_token: int  # correction token (n < k) or bonus token (n == k)
    n_relaxed: int = 0  # accepted tokens that strict verification would have rejected
    # a rule gated to a span of the text (policies/span.py): of the emitted tokens (accepted drafts and the next
    # token) those inside the thinking span, and of the relaxed acceptances those inside it (None: not gated)
    emitted_in_span: int | None = None
    relaxed_in_span: int | None = None


def accepted_prefix_length(accept: torch.Tensor) -> int:
    """Length of the leading run of True in a 1-D bool tensor (on the host: k is small, tensor ops are not)."""
    flags = accept.tolist()
    return next((i for i, flag in enumerate(flags) if not flag), len(flags))


@dataclass(frozen=True)
class AcceptTest:
    """A rule's own acceptance test of position i, given ``u_i·q_i(d_i)`` (a 0-d float32 tensor): True iff
    ``u_i·q_i(d_i) < pi_i(d_i)``. For rules that can often decide without building pi (pi's possible values at
    the draft already agree on the verdict)."""

    accepts: Callable[[int, torch.Tensor], bool]


def at_draft(values: Rows | AtDraft, tokens: list[int]) -> AtDraft:
    """Row i -> ``values`` at draft token ``tokens[i]``: rows [k, V] (a tensor or ``LazyRows``, read lazily), a
    [k] tensor already read at the drafts, or a function of the row."""
    if isinstance(values, torch.Tensor) and values.dim() == 1:
        return lambda i: values[i]
    if isinstance(values, (torch.Tensor, LazyRows)):
        return lambda i: values[i][tokens[i]]
    return values


def _row(values: Rows | Row, n: int) -> torch.Tensor:
    return values(n) if callable(values) else values[n]


def rejection_sample(
    draft_tokens: torch.Tensor,  # [k]
    q: Rows | None,  # [k, V] draft distribution; None: point-mass (deterministic) drafts
    pi_accept: Rows | AtDraft | AcceptTest,  # [k, V], [k] read at the drafts, row i -> pi_i(d_i), or a test
    pi_residual: Rows | Row,  # [k, V], or row(n) -> [V] (only the rejected row is ever needed)
    bonus: torch.Tensor | Callable[[], torch.Tensor],  # [V] distribution of the token after k accepted drafts
    generator: torch.Generator | None,
    strict_p: Rows | AtDraft | None = None,  # target p (any form of pi_accept), to count relaxed acceptances
    relax: Callable[[torch.Tensor], torch.Tensor] | None = None,  # [k] bool -> [k] bool, adds acceptances
) -> Verdict:
    """One round of (relaxed) speculative sampling. The uniforms of all k positions are drawn first; then the
    positions are judged in order and the walk stops at the first rejection, so lazily given rows after it are
    never computed. With ``relax`` every position is judged first (the relaxation looks ahead)."""
    k = int(draft_tokens.shape[0])
    tokens = draft_tokens.tolist()
    u = torch.rand(k, generator=generator, device=draft_tokens.device, dtype=torch.float32)
    q_at = at_draft(q, tokens) if q is not None else None

    def scaled(i: int) -> torch.Tensor:  # u < pi/q  <=>  u*q < pi  (q_x > 0 for a drafted token)
        return u[i] * q_at(i) if q_at is not None else u[i]

    def passes(i: int, target_at: AtDraft) -> bool:
        return bool(scaled(i) < target_at(i))

    if isinstance(pi_accept, AcceptTest):
        def accepted(i: int) -> bool:
            return pi_accept.accepts(i, scaled(i))
    else:
        pi_at = at_draft(pi_accept, tokens)

        def accepted(i: int) -> bool:
            return passes(i, pi_at)

    if relax is None:
        n = next((i for i in range(k) if not accepted(i)), k)
    else:
        if isinstance(pi_accept, torch.Tensor) and pi_accept.dim() == 1 and q is None:  # one op for the block
            accept = u < pi_accept
        else:
            accept = torch.tensor([accepted(i) for i in range(k)], dtype=torch.bool, device=draft_tokens.device)
        relaxed = relax(accept)
        if bool((accept & ~relaxed).any()):
            raise AssertionError("a relax function may only add acceptances")
        n = accepted_prefix_length(relaxed)
    n_relaxed = 0
    if strict_p is not None and n:
        strict_at = at_draft(strict_p, tokens)
        n_relaxed = sum(not passes(i, strict_at) for i in range(n))
    if n == k:
        return Verdict(n, int(sample(bonus() if callable(bonus) else bonus, generator)), n_relaxed)
    row = _row(pi_residual, n)
    if q is not None:
        residual = (row - q[n]).clamp_min(0)
    else:  # (row − δ_d)+: the rejected draft token loses all its mass
        residual = row.clone()
        residual[tokens[n]] = 0
    total = residual.sum()
    # a zero residual means the rejection had probability 0 (only reachable through rounding): fall back to pi
    residual = residual / total if total > 0 else row / row.sum()
    return Verdict(n, int(sample(residual, generator)), n_relaxed)
