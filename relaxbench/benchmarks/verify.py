"""Batched verification: what one decision of a whole batch costs, in operations, synchronisations and host time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from relaxbench.benchmarks.policies import BENCH_PAIR, _CountingTokenizer, bench_knobs
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import PolicyEnv, VerificationPolicy


def bench_policies(names: Iterable[str] | None, folder: Path, vocab: int,
                   device: torch.device | str = "cpu") -> dict[str, VerificationPolicy]:
    """Every registered rule (or those named) but the autoregressive baseline, built with the bench's knobs (a
    trained judge gets a random head written to ``folder``) and bound."""
    chosen = list(names) if names else [name for name in POLICIES.names() if name != "none"]
    out = {}
    for name in chosen:
        policy = make_policy(name, bench_knobs(name, folder))
        policy.bind(PolicyEnv(_CountingTokenizer(), vocab, torch.device(device), *BENCH_PAIR))
        out[policy.name] = policy
    return out


def decision_modes(policies: dict[str, VerificationPolicy]) -> list[tuple[str, str]]:
    """(rule, mode) for every mode each rule runs in."""
    return [(name, mode) for name, policy in policies.items() for mode in policy.modes]
