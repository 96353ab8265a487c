"""Verification policies. Importing this package registers every built-in policy."""

from relaxbench.policies import (  # noqa: F401  (each import registers its rules)
    exact,
    fly,
    judge,
    margin,
    none,
    relaxed_target,
    speculative_sampling,
    topk,
    trained_judge,
    typical,
)
from relaxbench.policies.base import (
    POLICIES,
    Block,
    Need,
    PolicyEnv,
    Verdict,
    VerificationPolicy,
    make_policy,
    register_policy,
)

__all__ = ["POLICIES", "Block", "Need", "PolicyEnv", "Verdict", "VerificationPolicy", "make_policy",
           "register_policy"]
