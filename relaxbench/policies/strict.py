"""The strict baseline of a step and of a rule: what "verify strictly" means, in one place.

``lossless_judgement(batch)`` judges a batch losslessly in each request's mode — exact match under greedy decoding,
speculative sampling under sampling (point-mass drafts when the drafter has no distribution). ``strict_policy``
gives a rule's own strict end when it has one in a mode, so a rule that relaxes only part of a text (a span) can
verify the rest strictly without knowing which rule it wraps.
"""

from __future__ import annotations

from relaxbench.policies.base import Batch, Judgement, Verdict, VerificationPolicy, make_policy
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.policies.verdict import by_mode, finish, plain_verdict

__all__ = ["lossless_judgement", "lossless_verdict", "strict_policy"]


def speculative_sampling(batch: Batch) -> Judgement:
    """Speculative sampling against ``p`` (``q`` from the batch, or point-mass drafts without one)."""
    return rejection_judgement(batch, batch.p_of_drafts, batch.p_at, batch.p_at,
                               point_mass=not batch.has_draft_distribution)


def lossless_judgement(batch: Batch) -> Judgement:
    """Exact match for greedy requests, speculative sampling for the others."""
    return by_mode(batch, lambda: greedy_judgement(batch), lambda: speculative_sampling(batch))


def lossless_verdict(batch: Batch) -> Verdict:
    """The lossless verdict of every request of ``batch`` (a plain step where a request drafted nothing)."""
    if batch.width == 0:
        return plain_verdict(batch)
    judgement = lossless_judgement(batch)
    verdict = finish(batch, judgement)
    if batch.any_empty and not judgement.plain_when_empty:
        verdict = plain_verdict(batch).where(batch.num_drafts == 0, verdict)
    return verdict


def strict_policy(policy: VerificationPolicy | type[VerificationPolicy], mode: str) -> VerificationPolicy | None:
    """The rule at its lossless setting in ``mode``: itself for a lossless baseline, a fresh instance at its
    ``strict_knobs`` (over the instance's other knobs) for a relaxed rule, None when it has no lossless setting
    there (an unsupported or lossy mode; use ``lossless_judgement`` then)."""
    if not policy.modes.strict_in(mode):
        return None
    cls = policy if isinstance(policy, type) else type(policy)
    if policy.modes.lossless:
        return policy if isinstance(policy, VerificationPolicy) else make_policy(cls.name)
    knobs = {} if isinstance(policy, type) else policy.knobs.model_dump()
    return cls.from_knobs({**knobs, **policy.modes.strict_knobs})
