"""Importing this module registers every oracle rule in the oracle's own registry (``tests.oracle.base.POLICIES``)."""

from tests.oracle import (  # noqa: F401  (each import registers its rules)
    exact,
    fly,
    margin,
    reflective,
    relaxed_target,
    relaxed_topk_delta,
    sglang_threshold,
    speculative_sampling,
    topk,
    trained_judge,
    typical,
)
