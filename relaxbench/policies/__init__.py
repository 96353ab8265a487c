"""Verification policies. Importing this package registers every built-in policy.

The interface (``base``): ``VerificationPolicy`` with its ``Origin``, ``Modes`` and ``needs`` records, ``Block`` and
the registry; what the engine derives from a policy (``arm``): ``drafter_duties`` and ``check_arm``; the strict
baseline (``strict``): ``lossless_verdict`` and ``strict_policy``.
"""

from relaxbench.policies import (  # noqa: F401  (each import registers its rules)
    exact,
    fly,
    margin,
    none,
    reflective,
    relaxed_target,
    relaxed_topk_delta,
    sglang_threshold,
    speculative_sampling,
    topk,
    trained_judge,
    typical,
)
from relaxbench.policies.arm import DrafterDuties, check_arm, drafter_duties
from relaxbench.policies.base import (
    POLICIES,
    Block,
    Fidelity,
    Modes,
    Need,
    Origin,
    PolicyEnv,
    Verdict,
    VerificationPolicy,
    make_policy,
    policy_key_name,
    register_policy,
)
from relaxbench.policies.strict import lossless_verdict, strict_policy

__all__ = ["POLICIES", "Block", "DrafterDuties", "Fidelity", "Modes", "Need", "Origin", "PolicyEnv", "Verdict",
           "VerificationPolicy", "check_arm", "drafter_duties", "lossless_verdict", "make_policy", "policy_key_name",
           "register_policy", "strict_policy"]
