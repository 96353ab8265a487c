"""The one rejection sampler of the sampling-mode rules, batched.

In the "relaxed target" framework (Xia et al., arXiv 2607.08690) a rule defines ``π_accept`` (the acceptance test)
and ``π_residual`` (after a rejection): a draft ``x ~ q`` is accepted iff ``u·q(x) < π_accept(x)`` (probability
``min(1, π_accept(x)/q(x))``); at the first rejection the next token is drawn from ``norm((π_residual − q)+)``; after
a full accept from the bonus distribution. Strict speculative sampling is ``π_accept = π_residual = p``, bonus ``p``;
then the output follows ``p`` exactly.

Here every position of every request is tested at once with the batch's uniforms, and the one token a request draws
comes from one row per request (the residual at its first rejection, or its bonus row), selected by index and drawn
by ``sample_rows`` with the request's draw uniform.

* ``point_mass`` (a drafter without a distribution, or a rule that ignores it) treats each draft as a point mass
  (``q(d) = 1``): strict speculative sampling then accepts ``d`` with probability ``p(d)``, and its residual
  ``norm((p − δ_d)+)`` is ``p`` with ``d`` removed.
* ``relax`` maps the per-position acceptance mask to a looser one before the accepted prefix is taken (FLy's window
  looks ahead within the block). It may only add acceptances, so a rejected position is one the acceptance test
  itself rejected, and the residual there is still the right conditional distribution.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from relaxbench.ops.sampling import sample_rows
from relaxbench.policies.batch import Batch
from relaxbench.policies.verdict import Judgement

__all__ = ["draw_after", "draw_at", "rejection_judgement", "residual_weights"]

RowsAt = Callable[[torch.Tensor], torch.Tensor]  # positions n [B] -> one row per request [B, V]


def residual_weights(pi: torch.Tensor, q: torch.Tensor | None, drafts: torch.Tensor) -> torch.Tensor:
    """[B, V] ``norm((π − q)+)`` of one row per request (``q`` None: point-mass drafts, ``drafts`` [B] removed);
    where the residual has no mass (a rejection of probability 0, reachable only through rounding), ``π`` itself."""
    if q is not None:
        residual = (pi - q).clamp_min_(0)
    else:
        residual = pi.scatter(-1, drafts.unsqueeze(-1), 0.0)
    total = residual.sum(dim=-1, keepdim=True)
    # normalised in place, and the fallback written over it: the residual is this function's own tensor
    return torch.where(total > 0, residual.div_(total), pi / pi.sum(dim=-1, keepdim=True), out=residual)


def draw_after(batch: Batch, residual: RowsAt, bonus: RowsAt) -> Callable[[torch.Tensor], torch.Tensor]:
    """n → one token per request: drawn from ``residual(n)`` (already normalised) where n < k, else from
    ``bonus(n)``, with the request's draw uniform."""
    return lambda n: draw_at(batch, n, residual(n), bonus(n))


def draw_at(batch: Batch, n: torch.Tensor, residual_rows: torch.Tensor, bonus_rows: torch.Tensor) -> torch.Tensor:
    """One token per request: from its ``residual_rows`` row where n < k, else from its ``bonus_rows`` row.
    ``residual_rows`` is the caller's own tensor (a new one, as every residual here is): the bonus rows are written
    over it."""
    at_bonus = (n >= batch.num_drafts).unsqueeze(-1)
    return sample_rows(torch.where(at_bonus, bonus_rows, residual_rows, out=residual_rows), batch.draw_u)


def rejection_judgement(
    batch: Batch,
    pi_accept: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],  # [B, K] π_accept(d), or a test of u·q(d)
    pi_residual: RowsAt,  # n -> [B, V] π_residual at position n
    bonus: RowsAt,  # n -> [B, V] the bonus distribution (read where n = k)
    point_mass: bool = False,
    strict_p: torch.Tensor | None = None,  # [B, K] p(d): the strict test, to mark relaxed acceptances
    relax: Callable[[torch.Tensor], torch.Tensor] | None = None,  # [B, K] bool -> [B, K] bool: acceptances to add
    strict_accept: torch.Tensor | None = None,  # [B, K] bool: the rule's own strict test, where it is not u·q < p
) -> Judgement:
    """One step of (relaxed) speculative sampling for every request: ``u·q(d) < π_accept(d)`` at every position
    (``pi_accept`` may instead be a function of ``u·q(d)`` for a rule whose test is not a single comparison).

    ``relaxed`` marks acceptances the strict test rejects: ``strict_accept`` when given (a rule whose native test
    is its reference's, e.g. vLLM's ``p/q ≥ u``, so that at its strict end nothing is ever counted relaxed, not
    even where ``u·q = p`` exactly), else ``u·q(d) < strict_p``."""
    drafts = batch.drafts
    scaled = batch.accept_u if point_mass else batch.accept_u * batch.q_of_drafts
    accept = pi_accept(scaled) if callable(pi_accept) else scaled < pi_accept
    if relax is not None:
        accept = accept | relax(accept)
    if strict_accept is not None:
        relaxed = accept & ~strict_accept
    elif strict_p is not None:
        relaxed = accept & ~(scaled < strict_p)
    else:
        relaxed = torch.zeros_like(accept)

    bonus_is_pi = bonus == pi_residual  # strict speculative sampling, FLy, …: the π rows at n = k are the bonus rows

    def next_token(n: torch.Tensor) -> torch.Tensor:
        position = n.clamp_max(batch.width - 1)
        q = None if point_mass else batch.q_at(position)
        pi = pi_residual(n)
        rows = residual_weights(pi, q, drafts.gather(1, position.unsqueeze(-1)).squeeze(-1))
        return draw_at(batch, n, rows, pi if bonus_is_pi else bonus(n))  # one gather of π's rows, not two

    # a bonus from the batch's processed p is the plain step's draw for a request with no drafts
    return Judgement(accept, relaxed, next_token, plain_when_empty=bonus == batch.p_at)
