"""The strict baseline of a round and of a rule: what "verify strictly" means, in one place.

``lossless_verdict(block)`` is the lossless verdict of a block in its mode — exact match under greedy decoding,
speculative sampling under sampling (point-mass drafts when the drafter has no distribution). ``strict_policy``
gives a rule's own strict end when it has one in a mode, so a rule that relaxes only part of a text (a span) can
verify the rest strictly without knowing which rule it wraps.
"""

from __future__ import annotations

from tests.oracle.rejection import Verdict, rejection_sample
from tests.oracle.base import Block, VerificationPolicy, make_policy
from tests.oracle.greedy import greedy_verdict

__all__ = ["lossless_verdict", "strict_policy"]


def lossless_verdict(block: Block) -> Verdict:
    """Exact match under greedy decoding; speculative sampling against ``p`` under sampling (``q`` from the block's
    draft logits, or point-mass drafts without them). ``block.k ≥ 1``."""
    if block.greedy:
        return greedy_verdict(block)
    p = block.p_rows
    q = block.q_rows if block.draft_logits is not None else None
    return rejection_sample(block.draft_tokens, q, p, p, lambda: p[block.k], block.generator)


def strict_policy(policy: VerificationPolicy | type[VerificationPolicy], mode: str) -> VerificationPolicy | None:
    """The rule at its lossless setting in ``mode``: itself for a lossless baseline, a fresh instance at its
    ``strict_knobs`` (over the instance's other knobs) for a relaxed rule, None when it has no lossless setting
    there (an unsupported or lossy mode; use ``lossless_verdict`` then)."""
    if not policy.modes.strict_in(mode):
        return None
    cls = policy if isinstance(policy, type) else type(policy)
    if policy.modes.lossless:
        return policy if isinstance(policy, VerificationPolicy) else make_policy(cls.name)
    knobs = {} if isinstance(policy, type) else policy.knobs.model_dump()
    return cls.from_knobs({**knobs, **policy.modes.strict_knobs})
