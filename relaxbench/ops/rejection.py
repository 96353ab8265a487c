"""The one rejection-sampling helper, shared by speculative sampling and every sampling-mode rule, and the
``Verdict`` every policy returns.

In the "relaxed target" framework (Xia et al., arXiv 2607.08690) a rule defines ``pi_accept`` (used in the
acceptance test) and ``pi_residual`` (used after a rejection): a draft ``x ~ q`` is accepted with probability
``min(1, pi_accept(x)/q(x))``; at the first rejection the next token is drawn from ``norm((pi_residual − q)+)``;
if every draft is accepted the bonus token is drawn from ``bonus``. Strict speculative sampling is
``pi_accept = pi_residual = p``, ``bonus = p_k``; then the output follows ``p`` exactly.

Two extensions serve rules that do not read a draft distribution (FLy, typical acceptance, a judge on n-gram
drafts):

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

from relaxbench.ops.sampling import sample

Row = Callable[[int], torch.Tensor]


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification round."""

    n_accepted: int  # length of the accepted draft prefix, 0..k
    next_token: int  # correction token (n < k) or bonus token (n == k)
    n_relaxed: int = 0  # accepted tokens that strict verification would have rejected


def accepted_prefix_length(accept: torch.Tensor) -> int:
    """Length of the leading run of True in a 1-D bool tensor (on the host: k is small, tensor ops are not)."""
    flags = accept.tolist()
    return next((i for i, flag in enumerate(flags) if not flag), len(flags))


def _at_drafts(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``values`` [k, V] read at the draft tokens, or ``values`` itself when already gathered ([k])."""
    return values if values.dim() == 1 else values.gather(-1, idx).squeeze(-1)


def rejection_sample(
    draft_tokens: torch.Tensor,  # [k]
    q: torch.Tensor | None,  # [k, V] draft distribution; None: point-mass (deterministic) drafts
    pi_accept: torch.Tensor,  # [k, V], or [k] already read at the draft tokens
    pi_residual: torch.Tensor | Row,  # [k, V], or row(n) -> [V] (only the rejected row is ever needed)
    bonus: torch.Tensor,  # [V] distribution of the token after k accepted drafts
    generator: torch.Generator | None,
    strict_p: torch.Tensor | None = None,  # [k, V] or [k]: target p, to count relaxed acceptances
    relax: Callable[[torch.Tensor], torch.Tensor] | None = None,  # [k] bool -> [k] bool, adds acceptances
) -> Verdict:
    k = int(draft_tokens.shape[0])
    idx = draft_tokens.unsqueeze(-1)
    device = pi_accept.device
    q_x = q.gather(-1, idx).squeeze(-1) if q is not None else torch.ones(k, device=device, dtype=pi_accept.dtype)
    u = torch.rand(k, generator=generator, device=device, dtype=q_x.dtype)
    # u < pi/q  <=>  u*q < pi  (no division; q_x > 0 for a token the drafter sampled)
    accept = u * q_x < _at_drafts(pi_accept, idx)
    if relax is not None:
        relaxed = relax(accept)
        if bool((accept & ~relaxed).any()):
            raise AssertionError("a relax function may only add acceptances")
        accept = relaxed
    n = accepted_prefix_length(accept)
    n_relaxed = 0
    if strict_p is not None and n:
        strict = u[:n] * q_x[:n] < _at_drafts(strict_p, idx)[:n]
        n_relaxed = int((~strict).sum())
    if n == k:
        return Verdict(n, int(sample(bonus, generator)), n_relaxed)
    row = pi_residual(n) if callable(pi_residual) else pi_residual[n]
    if q is not None:
        residual = (row - q[n]).clamp_min(0)
    else:  # (row − δ_d)+: the rejected draft token loses all its mass
        residual = row.clone()
        residual[draft_tokens[n]] = 0
    total = residual.sum()
    # a zero residual means the rejection had probability 0 (only reachable through rounding): fall back to pi
    residual = residual / total if total > 0 else row / row.sum()
    return Verdict(n, int(sample(residual, generator)), n_relaxed)
