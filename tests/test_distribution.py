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
@pytest.mark.slow
def test_speculative_sampling_matches_target_distribution(pair, sampling):
    target, draft = pair
    expected = exact_joint(target, sampling)
    counts = empirical_joint(target, draft, make_policy("speculative-sampling"), sampling, n=1500)
    assert counts[expected == 0].sum() == 0  # never emits a token the target's truncation excludes
    assert chi_square_pvalue(counts, expected) > 1e-3


@pytest.mark.slow
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


def inverse_cdf(weights: torch.Tensor, u: float) -> int:
    """One row's draw, the plain way: the first token whose float64 cumulative mass exceeds u × total."""
    cumulative = weights.double().cumsum(0)
    return int(torch.searchsorted(cumulative, torch.tensor([u * float(cumulative[-1])], dtype=torch.float64),
                                  right=True))


def test_sample_rows_is_the_inverse_cdf_across_slices_and_never_draws_a_token_of_zero_mass():
    """The batched two-level draw against a one-level inverse CDF, row by row, at vocabularies under, at and over one
    slice; rows with zero-mass runs and tails; uniforms at the top of [0, 1), where rounding can land past a
    slice's mass."""
    from relaxbench.ops.sampling import SAMPLE_CHUNK, sample_rows

    g = torch.Generator().manual_seed(5)
    top = float(torch.nextafter(torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)))
    for vocab in (7, 1000, SAMPLE_CHUNK, 3 * SAMPLE_CHUNK + 5):
        weights = torch.softmax(3 * torch.randn(48, vocab, generator=g), -1)
        weights = weights.masked_fill(torch.rand(48, vocab, generator=g) < 0.5, 0.0)
        weights[:, 0] += 0.01  # every row keeps some mass
        weights[::3, -min(vocab - 1, 9):] = 0.0  # a zero tail (token 0 keeps its mass): the mass ends before it
        u = torch.rand(48, generator=g, dtype=torch.float64)
        u[::4] = top
        drawn = sample_rows(weights, u)
        assert bool((weights.gather(1, drawn.unsqueeze(-1)) > 0).all()), vocab
        for row in range(48):
            if u[row] < top:  # inside the mass the two agree token for token
                assert int(drawn[row]) == inverse_cdf(weights[row], float(u[row])), (vocab, row)
            else:  # at the top: the last token of mass
                assert int(drawn[row]) == int(torch.nonzero(weights[row] > 0).flatten()[-1]), (vocab, row)


def test_sample_rows_takes_the_last_token_of_mass_where_rounding_lands_past_the_slice():
    """A row whose slice total, summed in lanes, exceeds its sequential cumulative mass (a thousand masses of 1e-17
    vanish one by one into 1.0): a uniform at the top of [0, 1) then lands past the row's mass, and the draw must
    fall back to its last token of mass, not to the zero-mass padding beyond it."""
    from relaxbench.ops.sampling import SAMPLE_CHUNK, sample_rows

    weights = torch.zeros(2, 1000)
    weights[:, 0], weights[:, 1:990], weights[:, 990] = 1.0, 1e-17, 0.5  # tokens 991.. have no mass
    total = float(weights[0].sum(dtype=torch.float64))
    sequential = float(weights[0].double().cumsum(0)[-1])
    top = torch.nextafter(torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64))
    if not float(top) * total > sequential:
        pytest.skip("this CPU's float64 sum adds the masses in order: rounding cannot land past the row's mass")
    drawn = sample_rows(weights, torch.stack([top, torch.tensor(0.25, dtype=torch.float64)]))
    assert drawn.tolist() == [990, 0] and SAMPLE_CHUNK > 990
