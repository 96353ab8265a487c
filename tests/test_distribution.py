"""Speculative sampling is lossless in distribution: the generated tokens follow the target's distribution.

A tiny target/draft pair over a 4-token vocabulary; 1,500 generations of 3 tokens with k = 2; the empirical
joint distribution of the 3 tokens is compared with the target's exact joint distribution (enumerated) by a
chi-square test. A deliberately wrong rule (resample from p instead of the residual (p − q)+ after a rejection)
must fail the same check, which shows the check has the power to catch a broken rule.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from relaxbench.decoding.drafters import DrafterInputs, DraftModelDrafter
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.ops.rejection import rejection_sample
from relaxbench.ops.sampling import SamplingParams, logits_to_probs
from relaxbench.policies import make_policy
from relaxbench.policies.base import Block, Need, Verdict, VerificationPolicy
from tests.conftest import small_vocab_model

VOCAB, LENGTH, K = 4, 3, 2
PROMPT = [0, 2, 1, 3, 1]


class ResampleFromTarget(VerificationPolicy):
    """WRONG on purpose: after a rejection, draws from p rather than from norm((p − q)+)."""

    name = "wrong-resample"
    needs = frozenset({Need.DRAFT_PROBS})

    def decide(self, block: Block) -> Verdict:
        p = block.target_probs
        return rejection_sample(block.draft_tokens, block.draft_probs, p[:-1], p[:-1] + block.draft_probs,
                                p[-1], block.generator)


@pytest.fixture(scope="module")
def pair():
    return small_vocab_model(VOCAB, seed=11), small_vocab_model(VOCAB, seed=12)


@torch.inference_mode()
def exact_joint(target, sampling: SamplingParams) -> np.ndarray:
    """P(t1, t2, t3 | prompt) under the target, enumerated over every prefix."""
    joint = np.ones([VOCAB] * LENGTH)
    for depth in range(LENGTH):
        for prefix in itertools.product(range(VOCAB), repeat=depth):
            logits = target.model(torch.tensor([PROMPT + list(prefix)])).logits[0, -1]
            probs = logits_to_probs(logits, sampling).numpy()
            for token in range(VOCAB):
                joint[prefix + (token,) + (slice(None),) * (LENGTH - depth - 1)] *= probs[token]
    return joint


def empirical_joint(target, draft, policy, sampling: SamplingParams, n: int) -> np.ndarray:
    counts = np.zeros([VOCAB] * LENGTH)
    drafter = DraftModelDrafter(DraftModelDrafter.Knobs(), DrafterInputs(target, draft))
    for seed in range(n):
        config = DecodeConfig(k=K, max_new_tokens=LENGTH, sampling=sampling, seed=seed)
        out = SpeculativeDecoder(target, drafter, policy, config).generate(PROMPT).output_ids
        counts[tuple(out)] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    """Chi-square goodness of fit; cells with expected count < 5 are pooled into one cell."""
    n = counts.sum()
    expected = expected_probs.ravel() / expected_probs.sum() * n
    observed = counts.ravel()
    small = expected < 5
    if small.any() and expected[small].sum() > 0:
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    else:
        expected, observed = expected[~small], observed[~small]
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("sampling", [SamplingParams(1.0), SamplingParams(0.8, top_k=3, top_p=0.9)],
                         ids=["T=1", "T=0.8,top-k=3,top-p=0.9"])
def test_speculative_sampling_matches_target_distribution(pair, sampling):
    target, draft = pair
    expected = exact_joint(target, sampling)
    counts = empirical_joint(target, draft, make_policy("speculative-sampling"), sampling, n=1500)
    assert counts[expected == 0].sum() == 0  # never emits a token the target's truncation excludes
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_a_wrong_rule_fails_the_same_check(pair):
    target, draft = pair
    sampling = SamplingParams(1.0)
    expected = exact_joint(target, sampling)
    counts = empirical_joint(target, draft, ResampleFromTarget(), sampling, n=1000)
    assert chi_square_pvalue(counts, expected) < 1e-6


def test_draft_and_target_differ_enough_for_the_test_to_mean_something(pair):
    """If q ≈ p, a wrong residual would be invisible; require a real gap between the two."""
    target, draft = pair
    ids = torch.tensor([PROMPT])
    p = torch.softmax(target.model(ids).logits[0, -1], -1)
    q = torch.softmax(draft.model(ids).logits[0, -1], -1)
    assert 0.5 * (p - q).abs().sum() > 0.15
