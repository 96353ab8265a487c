"""Verification policies. Importing this package registers every built-in policy."""

from relaxbench.policies import exact, none, speculative_sampling  # noqa: F401
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
