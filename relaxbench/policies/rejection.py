"""The one rejection-sampling helper, shared by speculative sampling and every sampling-mode relaxed rule.

In the "relaxed target" framework (Xia et al., arXiv 2607.08690) a rule defines ``pi_accept`` (used in the
acceptance test) and ``pi_residual`` (used after a rejection): a draft ``x ~ q`` is accepted with probability
``min(1, pi_accept(x)/q(x))``; at the first rejection the next token is drawn from ``norm((pi_residual − q)+)``;
if every draft is accepted the bonus token is drawn from ``bonus``. Strict speculative sampling is
``pi_accept = pi_residual = p``, ``bonus = p_k``; then the output follows ``p`` exactly.
"""

from __future__ import annotations

import torch

from relaxbench.decoding.sampling import sample
from relaxbench.policies.base import Verdict, accepted_prefix_length


def rejection_sample(
    draft_tokens: torch.Tensor,  # [k]
    q: torch.Tensor,  # [k, V] draft distribution
    pi_accept: torch.Tensor,  # [k, V]
    pi_residual: torch.Tensor,  # [k, V]
    bonus: torch.Tensor,  # [V] distribution of the token after k accepted drafts
    generator: torch.Generator | None,
    strict_p: torch.Tensor | None = None,  # [k, V] target p, to count relaxed acceptances with the same uniforms
) -> Verdict:
    k = int(draft_tokens.shape[0])
    idx = draft_tokens.unsqueeze(-1)
    q_x = q.gather(-1, idx).squeeze(-1)
    u = torch.rand(k, generator=generator, device=q.device, dtype=q.dtype)
    # u < pi/q  <=>  u*q < pi  (no division; q_x > 0 for a token the drafter sampled)
    accept = u * q_x < pi_accept.gather(-1, idx).squeeze(-1)
    n = accepted_prefix_length(accept)
    n_relaxed = 0
    if strict_p is not None and n:
        strict = u[:n] * q_x[:n] < strict_p[:n].gather(-1, idx[:n]).squeeze(-1)
        n_relaxed = int((~strict).sum())
    if n == k:
        return Verdict(n, int(sample(bonus, generator)), n_relaxed)
    residual = (pi_residual[n] - q[n]).clamp_min(0)
    total = residual.sum()
    # a zero residual means the rejection had probability 0 (only reachable through rounding): fall back to pi
    residual = residual / total if total > 0 else pi_residual[n] / pi_residual[n].sum()
    return Verdict(n, int(sample(residual, generator)), n_relaxed)
