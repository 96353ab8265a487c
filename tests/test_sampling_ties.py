"""Exactly tied logits at the top-k and top-p cuts: every rule that filters keeps the tokens the engine its reference
runs on keeps.

vLLM's ``apply_top_k_top_p`` (the Graphcore relaxed-target reference's rejection sampler, vLLM's FLy) and
transformers' ``TopKLogitsWarper``/``TopPLogitsWarper`` (MARS, DIVERSED) agree: top-k keeps every token tied with the
k-th largest; top-p sorts ascending (stable), drops a token while the mass of it and everything below is at most
``1 − top_p``, and keeps the largest, so among tokens tied at the cut the higher ids stay. ``kept_by_reference`` is
our own statement of that rule (a walk over each row, not the engines' code); the per-rule tests hold each rule's
verdicts on tie blocks to its verdicts on the same blocks whose target rows were cut by that statement beforehand,
greedy and sampling, at B = 1 and batched with per-request settings.
"""

from __future__ import annotations

import math

import pytest
import torch

from relaxbench.ops.sampling import BatchSampling, SamplingParams, logits_to_probs, probs_rows, process_logits
from relaxbench.policies import make_policy
from relaxbench.policies.batch import Batch, Block

V = 8


def kept_by_reference(row: list[float], temperature: float, top_k: int, top_p: float,
                      top_p_first: bool = False) -> set[int]:
    """The ids the engines keep from one logit row: tempered (float32), top-k by value (ties with the k-th stay),
    top-p walking up from the least likely token in (logit, id) order, dropping while the float32 cumulative mass
    is at most float32 1 − top_p, the largest always kept. ``top_p_first``: top-p on the full row, then top-k."""
    z = (torch.tensor(row, dtype=torch.float32) / temperature).tolist()
    kept = {i for i in range(len(z)) if math.isfinite(z[i])}

    def top_k_cut(ids: set[int]) -> set[int]:
        if not 0 < top_k < len(z):
            return ids
        kth = sorted((z[i] for i in ids), reverse=True)[min(top_k, len(ids)) - 1]
        return {i for i in ids if z[i] >= kth}

    def top_p_cut(ids: set[int]) -> set[int]:
        if top_p >= 1:
            return ids
        order = sorted(ids, key=lambda i: (z[i], i))  # ascending, ties by id
        probs = torch.softmax(torch.tensor([z[i] for i in order], dtype=torch.float32), dim=0)
        threshold = 1 - torch.tensor(top_p, dtype=torch.float32)
        total, dropped = torch.tensor(0.0, dtype=torch.float32), set()
        for position, i in enumerate(order[:-1]):
            total = total + probs[position]
            if total <= threshold:
                dropped.add(i)
            else:
                break  # the cumulative mass only grows
        return ids - dropped

    return top_k_cut(top_p_cut(kept)) if top_p_first else top_p_cut(top_k_cut(kept))


def kept(logits: torch.Tensor, params: SamplingParams, top_p_first: bool = False) -> set[int]:
    return {int(i) for i in torch.nonzero(torch.isfinite(process_logits(logits, params, top_p_first))).flatten()}


# -- the cut itself ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("row, params, expected", [
    ([3, 1, 1, 1, -1], SamplingParams(1.0, 0, 0.8), {0, 2, 3}),  # vLLM keeps the higher tied ids
    ([0, 0, 0, 0], SamplingParams(1.0, 0, 0.5), {2, 3}),
    ([2, 1, 1, 0], SamplingParams(1.0, 2, 1.0), {0, 1, 2}),  # top-k keeps every tie with the k-th
    ([2, 1, 1, 1, 0], SamplingParams(1.0, 2, 0.7), {0, 2, 3}),  # top-k keeps the three, top-p then cuts id 1
])
def test_hand_worked_tie_cuts(row, params, expected):
    z = torch.tensor([row], dtype=torch.float32)
    assert kept(z[0], params) == expected == kept_by_reference(row, params.temperature, params.top_k, params.top_p)
    rows = probs_rows(z.repeat(3, 1), BatchSampling.of([params, SamplingParams(1.0), params]))  # the per-row path
    assert {int(i) for i in torch.nonzero(rows[0]).flatten()} == expected
    assert {int(i) for i in torch.nonzero(rows[2]).flatten()} == expected
    assert torch.all(rows[1] > 0)


SETTINGS = [SamplingParams(1.0, 0, 0.8), SamplingParams(0.7, 4, 0.9), SamplingParams(1.0, 3, 0.5),
            SamplingParams(1.3, 0, 0.95), SamplingParams(1.0, 2, 1.0), SamplingParams(0.5, 5, 0.6)]


def tie_rows(n: int, seed: int, vocab: int = V) -> torch.Tensor:
    """Integer logits in [−2, 2]: exact ties at the top-k and top-p cuts in most rows."""
    return torch.randint(-2, 3, (n, vocab), generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("top_p_first", [False, True], ids=["top-k-then-top-p", "top-p-then-top-k"])
def test_the_cut_keeps_what_the_engines_keep_on_tie_rows(top_p_first):
    z = tie_rows(600, 3)
    for params in SETTINGS:
        for row in z:
            assert kept(row, params, top_p_first) == kept_by_reference(
                row.tolist(), params.temperature, params.top_k, params.top_p, top_p_first), (row, params)
    mixed = [SETTINGS[i % len(SETTINGS)] for i in range(z.shape[0])]
    batched = probs_rows(z, BatchSampling.of(mixed), top_p_first) > 0
    for row, params, got in zip(z, mixed, batched):
        assert {int(i) for i in torch.nonzero(got).flatten()} == kept_by_reference(
            row.tolist(), params.temperature, params.top_k, params.top_p, top_p_first)


# -- every rule that filters -----------------------------------------------------------------------------------

# (rule, knobs, order of its reference's cuts). casc-tok reads its top set from the raw logits, which pre-cut rows
# would change (a tied raw argmax can be cut), so it is held here where π = p (α < 0; its top set's ties:
# test_casc_tok_alpha_0_is_the_single_first_argmax_and_not_strict); reflective fuses its own rows before processing
# and is held by the cut tests above.
FILTERING = [
    ("mentored", {"alpha": 0.3}, False), ("cactus", {}, False), ("casc-opt", {"alpha": 0.05}, False),
    ("casc-tok", {"alpha": -1.0}, False), ("fuzzy", {}, False), ("ensemble", {}, False),
    ("contrastive", {}, False), ("fly-vllm", {"fly_window_size": 1, "fly_entropy_threshold": 0.1}, False),
    ("margin", {}, True), ("sglang-threshold", {}, False), ("diversed", {}, False),
    ("speculative-sampling", {}, False),
]


def tie_blocks(n: int, seed: int, settings: list[SamplingParams], k: int = 3, with_q: bool = True,
               precut: bool = False, top_p_first: bool = False) -> tuple[list[Block], list]:
    """Blocks with tied target logits, drafts drawn among the tied tokens, uniforms given. ``precut``: the target
    rows tempered and cut by ``kept_by_reference`` (−inf elsewhere) and the settings reduced to temperature 1 with no
    cut, so a rule reads the reference's kept set through an identity processing."""
    g = torch.Generator().manual_seed(seed)
    blocks, uniforms = [], []
    for b in range(n):
        params = settings[b % len(settings)]
        z = torch.randint(-2, 3, (k + 1, V), generator=g).float()
        zd = torch.randint(-2, 3, (k, V), generator=g).float()
        drafts = torch.randint(0, V, (k,), generator=g)
        u = torch.rand(k, generator=g, dtype=torch.float64)
        du = torch.rand((), generator=g, dtype=torch.float64)
        q = logits_to_probs(zd, params) if not params.greedy else None
        if precut and not params.greedy:
            cut = torch.full_like(z, -math.inf)
            for i, row in enumerate(z):
                ids = sorted(kept_by_reference(row.tolist(), params.temperature, params.top_k, params.top_p,
                                               top_p_first))
                cut[i, ids] = (row / params.temperature)[ids]
            z, params = cut, SamplingParams(1.0)
        blocks.append(Block(drafts, z, zd if with_q else None, params, None,
                            draft_probs_given=q if with_q else None))
        uniforms.append((u, du))
    return blocks, uniforms


def outcomes(rule: str, knobs: dict, blocks: list[Block], uniforms: list, batched: bool) -> list:
    policy = make_policy(rule, knobs)
    if batched:
        return policy.decide(Batch.of_blocks(blocks, policy.uniform_dtype, uniforms)).to_host()
    return [policy.decide(Batch.of_blocks([b], policy.uniform_dtype, [u])).to_host()[0]
            for b, u in zip(blocks, uniforms)]


RAW_LOGIT_RULES = ("contrastive", "casc-tok")  # read the raw target logits too: held at temperature 1


@pytest.mark.parametrize("batched", [False, True], ids=["B=1", "batched"])
@pytest.mark.parametrize("rule, knobs, top_p_first", FILTERING, ids=[r for r, _, _ in FILTERING])
def test_sampling_rules_read_the_reference_kept_set_at_ties(rule, knobs, top_p_first, batched):
    settings = [s for s in SETTINGS if s.temperature == 1.0] if rule in RAW_LOGIT_RULES else SETTINGS
    with_q = rule != "sglang-threshold"  # SGLang's target-only rule: point-mass drafts
    blocks, uniforms = tie_blocks(300, 7, settings, with_q=with_q)
    reference_blocks, _ = tie_blocks(300, 7, settings, with_q=with_q, precut=True, top_p_first=top_p_first)
    got = outcomes(rule, knobs, blocks, uniforms, batched)
    expected = outcomes(rule, knobs, reference_blocks, uniforms, batched)
    differing = [i for i, (a, e) in enumerate(zip(got, expected)) if a != e]
    assert not differing, f"{rule}: {len(differing)} of {len(blocks)} tie blocks differ, e.g. block {differing[0]}"


GREEDY_FILTERING = [(rule, knobs) for rule, knobs, _ in FILTERING
                    if rule not in ("contrastive", "sglang-threshold")]  # sampling-only rules


@pytest.mark.parametrize("batched", [False, True], ids=["B=1", "batched"])
@pytest.mark.parametrize("rule, knobs", GREEDY_FILTERING, ids=[r for r, _ in GREEDY_FILTERING])
def test_greedy_rules_ignore_the_cuts_and_break_tied_maxima_by_the_first_id(rule, knobs, batched):
    """Under greedy decoding no rule truncates (vLLM and transformers apply top-k/top-p to sampled requests only),
    and the target's token among tied maxima is the first id, as ``argmax``."""
    blocks, uniforms = tie_blocks(200, 11, [SamplingParams()], with_q=True)
    got = outcomes(rule, knobs, blocks, uniforms, batched)
    for block, outcome in zip(blocks, got):
        argmax = [int(torch.argmax(row)) for row in block.target_logits]
        if outcome.n_accepted < block.k:
            assert outcome.next_token == argmax[outcome.n_accepted] or rule == "diversed"
        else:
            assert outcome.next_token == argmax[block.k]
    if rule not in ("diversed", "fly-vllm"):  # DIVERSED's greedy token is the mixture's argmax, vLLM's FLy defers
        # drafts under greedy decoding; the rest are exact match when greedy
        for block, outcome in zip(blocks, got):
            argmax = [int(torch.argmax(row)) for row in block.target_logits]
            n = next((i for i in range(block.k) if int(block.draft_tokens[i]) != argmax[i]), block.k)
            assert outcome.n_accepted == n


def test_mentored_accepts_a_tied_draft_the_reference_keeps():
    """Logits [3, 1, 1, 1, −1] at top-p 0.8: vLLM keeps {0, 2, 3}, so with α = 0.3 a draft 3 whose q makes the
    acceptance probability p(3)/((1 − α)q(3)) = 0.32 is accepted with u = 0.2 (cutting id 3 instead, as the lower-id
    convention did, rejects it with any u)."""
    z = torch.tensor([3.0, 1, 1, 1, -1])
    params = SamplingParams(1.0, 0, 0.8)
    p3 = math.e / (math.exp(3) + 2 * math.e)
    q = torch.tensor([0.2, 0.1, 0.1, p3 / (0.7 * 0.32), 0.0])
    q[4] = 1 - float(q[:4].sum())
    block = Block(torch.tensor([3]), z.expand(2, -1).clone(), torch.log(q).unsqueeze(0), params, None,
                  draft_probs_given=q.unsqueeze(0))
    policy = make_policy("mentored", {"alpha": 0.3})

    def accepted(u: float) -> int:
        draw = torch.tensor(0.5, dtype=torch.float64)
        batch = Batch.of_blocks([block], policy.uniform_dtype, [(torch.tensor([u]), draw)])
        assert float(batch.p_of_drafts[0, 0]) == pytest.approx(p3, rel=1e-6)
        return policy.decide(batch).to_host()[0].n_accepted

    assert accepted(0.2) == 1
    assert accepted(0.33) == 0
