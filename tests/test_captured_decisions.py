"""Captured batched decisions: one graph per batch layout, replayed on static buffers, the eager verdicts.

On a CPU the capture is the stand-in (``graphs.replay_capture``: the captured callable replayed on the static
buffers), which holds the buffer management and the layout keys; on a CUDA device the real graphs are held to the
eager verdicts for every rule and mode (skipped here)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from relaxbench.benchmarks.op_count import random_batch
from relaxbench.decoding.captured_decisions import CapturedDecisions, layout_key
from relaxbench.decoding.graphs import replay_capture
from relaxbench.policies import POLICIES, PolicyEnv, make_policy

SIMPLE = [(name, mode) for name, cls in POLICIES.items() if name != "none" for mode in sorted(cls.modes)
          if name not in ("autojudge", "judge-decoding")]  # their trained heads: tests/test_batched_rules.py


class _Tokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1, 2, 3]


def bound(name: str, vocab: int, device: str):
    policy = make_policy(name, None)
    policy.bind(PolicyEnv(_Tokenizer(), vocab, torch.device(device), "tiny-random-target", "tiny-random-draft"))
    return policy


def verdicts_match(policy, captured: CapturedDecisions, batch) -> None:
    eager = policy.decide(batch).to_host()
    assert captured.decide(batch).to_host() == eager


@pytest.mark.parametrize("name,mode", SIMPLE, ids=[f"{n}-{m}" for n, m in SIMPLE])
def test_replayed_decisions_equal_eager_ones_batch_after_batch(name, mode):
    policy = bound(name, 64, "cpu")
    captured = CapturedDecisions(policy, replay_capture)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):  # the same layout: captured once, then replayed on new data
        batch = random_batch(policy, 4, 3, 64, sampling=mode == "sampling", generator=gen, mixed_k=False)
        verdicts_match(policy, captured, batch)
    assert len(captured.graphs) == 1
    (entry,) = captured.graphs.values()
    assert entry.graph.replays == 3


def test_a_new_layout_is_captured_again_and_the_old_one_replayed():
    policy = bound("exact", 64, "cpu")
    captured = CapturedDecisions(policy, replay_capture)
    gen = torch.Generator().manual_seed(2)
    a = random_batch(policy, 4, 3, 64, sampling=False, generator=gen, mixed_k=False)
    b = random_batch(policy, 8, 3, 64, sampling=False, generator=gen, mixed_k=False)  # another B
    c = random_batch(policy, 4, 3, 64, sampling=False, generator=gen, mixed_k=True)  # another T, an empty request
    assert len({layout_key(a), layout_key(b), layout_key(c)}) == 3
    for batch in (a, b, c, a):
        verdicts_match(policy, captured, batch)
    assert len(captured.graphs) == 3


def test_a_verdict_is_a_copy_not_the_graphs_output():
    policy = bound("exact", 64, "cpu")
    captured = CapturedDecisions(policy, replay_capture)
    gen = torch.Generator().manual_seed(3)
    batches = [random_batch(policy, 4, 3, 64, sampling=False, generator=gen, mixed_k=False) for _ in range(2)]
    first = captured.decide(batches[0])
    kept = first.to_host()
    captured.decide(batches[1])
    assert first.to_host() == kept


class _Reporting:
    """Exact match reporting one per-round fact with its verdict (``Verdict.facts``)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def decide(self, batch):
        verdict = self.inner.decide(batch)
        return dataclasses.replace(verdict, facts={"rejected": batch.num_drafts - verdict.accepted})


def test_a_rules_facts_are_replayed_by_name():
    policy = _Reporting(bound("exact", 64, "cpu"))
    captured = CapturedDecisions(policy, replay_capture)
    gen = torch.Generator().manual_seed(4)
    for _ in range(2):
        batch = random_batch(policy.inner, 4, 3, 64, sampling=False, generator=gen, mixed_k=True)
        eager, replayed = policy.decide(batch), captured.decide(batch)
        assert replayed.columns() == eager.columns() and replayed.columns()[-1] == "rejected"
        assert replayed.to_host() == eager.to_host()
        assert [o.facts["rejected"] for o in replayed.to_host()] == (batch.num_drafts - eager.accepted).tolist()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: real graph capture of a decision")
@pytest.mark.parametrize("name,mode", SIMPLE, ids=[f"{n}-{m}" for n, m in SIMPLE])
def test_cuda_graph_decisions_equal_eager_ones(name, mode):
    policy = bound(name, 512, "cuda")
    captured = CapturedDecisions(policy)
    gen = torch.Generator().manual_seed(4)  # random_batch draws its seeds on the CPU
    for size in (1, 8, 64):
        for _ in range(2):
            batch = random_batch(policy, size, 4, 512, sampling=mode == "sampling", device="cuda", generator=gen,
                                 mixed_k=False)
            verdicts_match(policy, captured, batch)
