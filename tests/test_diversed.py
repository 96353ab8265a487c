"""``diversed`` against transformers itself (our pinned dependency): its ``_speculative_sampling`` with
``assistant_ensemble_weight`` under sampling, and its greedy comparison against the mixture's argmax, on random
blocks with the same uniforms: 0 disagreements. Then how it parts from ``ensemble`` (the same sampling rule, exact
match under greedy decoding)."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers.generation.utils import _speculative_sampling

from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import make_policy
from relaxbench.policies.batch import Batch, Block

GREEDY = SamplingParams()
SAMPLED = SamplingParams(1.0)
BLOCKS = 6_000  # per weight: 95 % power against a disagreement on f >= 5.0e-4 of blocks
CHUNK = 500  # blocks per batch on our side
PREFIX = 3  # prompt tokens before the drafts in transformers' candidate_input_ids


def random_case(seed: int, vocab: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(drafts [k], target logits [k + 1, V], draft logits [k, V]) with k in 1..6 and the drafts sampled from q."""
    g = torch.Generator().manual_seed(seed)
    k = int(torch.randint(1, 7, (), generator=g))
    target = torch.randn(k + 1, vocab, generator=g) * (0.5 + 2 * torch.rand((), generator=g))
    draft = target[:k] + torch.randn(k, vocab, generator=g) * (0.3 + 2 * torch.rand((), generator=g))
    drafts = torch.multinomial(draft.softmax(-1), 1, generator=g).squeeze(-1)
    return drafts, target, draft


@functools.lru_cache(maxsize=None)
def chunk_of_cases(start: int) -> tuple:
    """The random cases of seeds ``start`` .. ``start + CHUNK - 1``, made once for every weight and both tests (the
    same blocks as making them per test: the checks keep their power, 0 disagreements in BLOCKS blocks per weight;
    a rule that parted from transformers on a fraction f >= 5.0e-4 of blocks fails with probability >= 0.95)."""
    return tuple(random_case(seed) for seed in range(start, start + CHUNK))


def transformers_sampling(case, w: float, seed: int) -> tuple[int, int, torch.Tensor]:
    """(n_matches, next token, our uniforms): transformers' ``_speculative_sampling`` with the global generator
    seeded; its acceptance uniforms are its first draw (``torch.rand_like`` of the float32 ratio [k]), so the same
    seed gives ours."""
    drafts, target, draft = case
    k = int(drafts.shape[0])
    ids = torch.cat([torch.zeros(PREFIX, dtype=torch.long), drafts]).unsqueeze(0)
    torch.manual_seed(seed)
    valid, n_matches = _speculative_sampling(ids, draft.unsqueeze(0), k, target.unsqueeze(0),
                                             assistant_ensemble_weight=w)
    torch.manual_seed(seed)
    uniforms = torch.rand(k, dtype=torch.float32)
    return int(n_matches), int(valid[0, -1]), uniforms


def transformers_greedy(case, w: float) -> tuple[int, int]:
    """(n_matches, next token): transformers' greedy branch of ``_assisted_decoding`` under
    ``assistant_ensemble_weight`` (selected tokens = argmax of the mixture, then the bonus argmax), run on the case."""
    drafts, target, draft = case
    k = int(drafts.shape[0])
    new_logits, candidate_logits = target.unsqueeze(0), draft.unsqueeze(0)
    p_probs = new_logits[:, :k, :].softmax(dim=-1)
    q_probs = candidate_logits.softmax(dim=-1)
    nu_probs = w * p_probs + (1.0 - w) * q_probs
    selected = torch.cat([nu_probs.argmax(dim=-1), new_logits[:, k:, :].argmax(dim=-1)], dim=-1)
    n_matches = ((~(drafts.unsqueeze(0) == selected[:, :-1])).cumsum(dim=-1) < 1).sum()
    return int(n_matches), int(selected[0, n_matches])


def ours(policy, cases, sampling: SamplingParams, uniforms=None):
    blocks = [Block(d, t, q, sampling, None) for d, t, q in cases]
    given = None if uniforms is None else [(u, torch.tensor(0.5, dtype=torch.float64)) for u in uniforms]
    return policy.decide(Batch.of_blocks(blocks, uniforms=given)).to_host()


@pytest.mark.parametrize("w", [0.95, 0.5, 0.2])
@pytest.mark.slow
def test_sampling_matches_transformers_speculative_sampling(w):
    policy = make_policy("diversed", {"assistant_ensemble_weight": w})
    disagreements = relaxed = 0
    for start in range(0, BLOCKS, CHUNK):
        cases = chunk_of_cases(start)
        theirs = [transformers_sampling(case, w, seed) for seed, case in zip(range(start, start + CHUNK), cases)]
        mine = ours(policy, cases, SAMPLED, [u for _, _, u in theirs])
        for (n, token, _), case, outcome in zip(theirs, cases, mine):
            disagreements += outcome.n_accepted != n
            relaxed += outcome.n_relaxed
            # the next token transformers drew lies where our residual (or bonus) distribution has mass
            drafts, target, draft = case
            p = target[n].softmax(-1)
            weights = p if n == drafts.shape[0] else (p - draft[n].softmax(-1)).clamp_min(0)
            assert weights[token] > 0 or weights.sum() <= torch.finfo(torch.float32).tiny
    assert disagreements == 0
    assert relaxed > 0  # the mixture relaxes: acceptances speculative sampling would have rejected


@pytest.mark.parametrize("w", [0.95, 0.5, 0.2])
def test_greedy_matches_transformers_mixture_argmax(w):
    policy = make_policy("diversed", {"assistant_ensemble_weight": w})
    disagreements = 0
    for start in range(0, BLOCKS, CHUNK):
        cases = chunk_of_cases(start)
        for case, outcome in zip(cases, ours(policy, cases, GREEDY)):
            disagreements += (outcome.n_accepted, outcome.next_token) != transformers_greedy(case, w)
    assert disagreements == 0


def test_strict_end_is_exact_match_and_speculative_sampling():
    strict = make_policy("diversed", {"assistant_ensemble_weight": 1.0})
    cases = [random_case(seed) for seed in range(300)]
    assert ours(strict, cases, GREEDY) == ours(make_policy("exact"), cases, GREEDY)
    uniforms = [torch.rand(int(c[0].shape[0]), generator=torch.Generator().manual_seed(s)) for s, c in enumerate(cases)]
    assert ([o.n_accepted for o in ours(strict, cases, SAMPLED, uniforms)]
            == [o.n_accepted for o in ours(make_policy("speculative-sampling"), cases, SAMPLED, uniforms)])


def test_diversed_and_ensemble_agree_under_sampling_and_part_under_greedy():
    cases = [random_case(seed) for seed in range(2000)]
    uniforms = [torch.rand(int(c[0].shape[0]), generator=torch.Generator().manual_seed(s)) for s, c in enumerate(cases)]
    for w in (0.95, 0.2):
        diversed = make_policy("diversed", {"assistant_ensemble_weight": w})
        ensemble = make_policy("ensemble", {"w": w})
        assert ([o.n_accepted for o in ours(diversed, cases, SAMPLED, uniforms)]
                == [o.n_accepted for o in ours(ensemble, cases, SAMPLED, uniforms)])
        greedy_d, greedy_e = ours(diversed, cases, GREEDY), ours(ensemble, cases, GREEDY)
        parted = sum(a != b for a, b in zip(greedy_d, greedy_e))
        assert parted > 0  # ensemble is exact match under greedy decoding; diversed compares with the mixture
        assert all(o.n_relaxed == 0 for o in greedy_e)
        assert any(o.n_relaxed > 0 for o in greedy_d)
