"""Speculative sampling is lossless in distribution: the generated tokens follow the target's distribution.

A tiny target/draft pair over a 4-token vocabulary (float64 on CPU); 1,500 generations of 3 tokens with k = 2; the
empirical joint distribution of the 3 tokens is compared with the target's exact joint distribution (enumerated) by
a chi-square test. The check's parts are the GPU kit's (``relaxbench/benchmarks/gpu/lossless.py``), which runs the
same test on a device. A deliberately wrong rule (resample from p instead of the residual (p − q)+ after a rejection)
must fail the same check, which shows the check has the power to catch a broken rule.
"""

from __future__ import annotations

import pytest
import torch

from relaxbench.benchmarks.gpu.lossless import (PROMPT, VOCAB, ResampleFromTarget, chi_square_pvalue,
                                                empirical_joint, exact_joint, small_vocab_model)
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import make_policy


@pytest.fixture(scope="module")
def pair():
    return (small_vocab_model(VOCAB, 11, torch.float64, "cpu"), small_vocab_model(VOCAB, 12, torch.float64, "cpu"))


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
