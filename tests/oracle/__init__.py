"""The oracle: relaxbench's per-request verification rules as they were before every rule became one batched
decision, kept as the reference the batched rules are held to (tests/test_batched_rules.py).

These implementations passed differential checks against their authors' code (docs/conformance.md). They decide one
request at a time, walking its positions and reading rows lazily, and draw their random numbers from the request's
generator in a fixed order (the acceptance uniforms, then the token's). The batched rules take the uniforms as
inputs, so a test draws them from an identically seeded generator in the same order and both sides see the same
numbers.

Changed from the rules as they were, and only this: vocabulary sums of products (Medusa's entropy, the relaxed-target
divergences) are taken as ``(a * b).sum(-1)``, the batched code's form, instead of ``torch.dot`` on a single row —
the two round differently in the last bits, which could flip a verdict that sits on a threshold.

Nothing in ``relaxbench/`` imports this package.
"""

from __future__ import annotations

from typing import Any

from tests.oracle.base import POLICIES, Block, PolicyEnv, Verdict  # noqa: F401  (re-exported)


def oracle_policy(name: str, knobs: dict[str, Any] | None = None):
    """The oracle's rule ``name`` with ``knobs``."""
    import tests.oracle.rules  # noqa: F401  (registers the oracle rules)

    return POLICIES.get(name).from_knobs(knobs)
