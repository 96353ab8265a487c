"""The rules serving engines ship, held to their references: TensorRT-LLM's relaxed top-K/δ acceptance (hand-built
blocks for every branch of ``mtpRelaxedAcceptanceKernel``), SGLang's target-only thresholds (a chi-square test of
the joint (accepted length, next token) against a slow float64 implementation of the kernel's formula), and
``relax_in``: relaxation gated to the thinking span, a block that crosses a boundary split at it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from relaxbench.decoding.loop import DecodeConfig
from relaxbench.methods import MethodSpec
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import make_policy
from relaxbench.policies.base import Block, PolicyEnv
from relaxbench.policies.relaxed_topk_delta import within_top_k_and_delta
from relaxbench.policies.span import SpanGate, SpanTracker, gate, run_ends, span_flags
from tests.test_conformance import (
    KS,
    STAT_SAMPLINGS,
    TRIALS,
    VS,
    assert_same_distribution,
    chain,
    np_process,
    np_softmax,
    outcome_counts,
    sampling_case,
)

GREEDY = SamplingParams()
V = 8


def logits_of(probs: dict[int, float]) -> torch.Tensor:
    """Logits whose softmax is ``probs`` on the named tokens (the rest share what is left)."""
    rest = (1.0 - sum(probs.values())) / (V - len(probs))
    return torch.tensor([math.log(probs.get(t, rest)) for t in range(V)])


def greedy_block(rows: list[dict[int, float]], drafts: list[int]) -> Block:
    return Block(torch.tensor(drafts), torch.stack([logits_of(r) for r in rows]), None, GREEDY, None)


def topk_delta(rows, drafts, **knobs):
    v = make_policy("relaxed-topk-delta", knobs).verify(greedy_block(rows, drafts))
    return v.n_accepted, v.next_token, v.n_relaxed


FLAT = {0: 0.5, 1: 0.3, 2: 0.1}  # top-1 0.5, runner-up 0.3
BONUS = {5: 0.9}


# ------------------------------------------------------------------------------------------------ TensorRT-LLM


def test_the_top_1_is_always_accepted_and_the_bonus_is_the_top_1():
    assert topk_delta([FLAT, FLAT, BONUS], [0, 0], topk=10, delta=0.0) == (2, 5, 0)


def test_a_candidate_within_delta_of_the_top_1_is_accepted_and_counted_relaxed():
    assert topk_delta([FLAT, BONUS], [1], topk=10, delta=0.25) == (1, 5, 1)  # 0.3 >= 0.5 - 0.25
    assert topk_delta([FLAT, BONUS], [1], topk=10, delta=0.15) == (0, 0, 0)  # 0.3 < 0.35: the walk breaks
    assert topk_delta([FLAT, BONUS], [2], topk=10, delta=0.41) == (1, 5, 1)  # 0.1 >= 0.09
    assert topk_delta([FLAT, BONUS], [2], topk=10, delta=0.39) == (0, 0, 0)


def test_a_token_within_delta_but_outside_the_top_k_is_rejected():
    rows = [{0: 0.3, 1: 0.25, 2: 0.24, 3: 0.2}, BONUS]
    assert topk_delta(rows, [3], topk=3, delta=0.2) == (0, 0, 0)  # 4th most likely
    assert topk_delta(rows, [3], topk=4, delta=0.2) == (1, 5, 1)
    assert topk_delta(rows, [2], topk=3, delta=0.2) == (1, 5, 1)


def test_a_tie_with_the_kth_probability_is_in_the_top_k():
    rows = [{0: 0.4, 1: 0.25, 2: 0.25}, BONUS]
    assert topk_delta(rows, [2], topk=2, delta=0.3) == (1, 5, 1)  # by value (a documented deviation)


def test_the_first_rejection_ends_the_round_with_the_top_1():
    rows = [FLAT, {3: 0.6, 4: 0.1}, FLAT, BONUS]
    assert topk_delta(rows, [1, 4, 1], topk=10, delta=0.3) == (1, 3, 1)  # position 1: 0.1 < 0.3
    assert topk_delta(rows, [1, 4, 1], topk=10, delta=0.55) == (3, 5, 3)  # 0.1 >= 0.05, off the boundary


def test_at_exactly_p_top_minus_delta_the_draft_is_accepted():
    # the kernel's `>=`: dyadic probabilities make p(top-1) - delta exact in every float format on every CPU
    top = torch.tensor([[0.75, 0.25]])
    assert within_top_k_and_delta(torch.tensor([0.25]), top, 0.5).tolist() == [True]
    below = torch.nextafter(torch.tensor([0.25]), torch.tensor([0.0]))
    assert within_top_k_and_delta(below, top, 0.5).tolist() == [False]


def test_topk_1_is_exact_match_and_the_defaults_are_maxs_preset():
    policy = make_policy("relaxed-topk-delta")
    assert (policy.knobs.topk, policy.knobs.delta) == (10, 0.6)
    assert policy.modes.relax_in == "thinking" and policy.modes.supported == {"greedy"}
    rows = [FLAT, FLAT, BONUS]
    exact = make_policy("exact").verify(greedy_block(rows, [1, 0]))
    assert topk_delta(rows, [1, 0], topk=1, delta=1.0) == (exact.n_accepted, exact.next_token, 0)


def test_by_default_the_rule_is_gated_to_the_thinking_span():
    gated = gate(make_policy("relaxed-topk-delta"), None)
    assert isinstance(gated, SpanGate) and gated.relax_in == "thinking"
    assert gate(make_policy("fly"), None).name == "fly" and not isinstance(gate(make_policy("fly"), None), SpanGate)
    assert gate(make_policy("fly"), "all").relax_in == "all"


# ------------------------------------------------------------------------------------------------ SGLang


def slow_sglang(target, draft, drafts, sampling, single, acc) -> np.ndarray:
    """P(n accepted, next token) from the kernel's formula in float64: per position accept iff coin < p(d)/acc or
    p(d) >= single (with a draft distribution q: u·q(d) < p(d)/acc), residual p without the draft (relu(p − q)
    with q), bonus from p."""
    p = [np_softmax(np_process(target[i], sampling)) for i in range(len(drafts) + 1)]
    accept, residual = [], []
    for i, d in enumerate(drafts):
        q = None if draft is None else np_softmax(np_process(draft[i], sampling))
        pd = p[i][d]
        ratio = pd / max(acc, 1e-9) / (1.0 if q is None else q[d])
        accept.append(1.0 if pd >= single else min(1.0, ratio))
        if q is None:
            r = p[i].copy()
            r[d] = 0.0
        else:
            r = p[i] - q
        residual.append(r)
    return chain(accept, residual, p[-1])


SGLANG_CASES = [(1.0, 1.0), (1.0, 0.5), (0.3, 1.0), (0.4, 0.3)]


@pytest.mark.parametrize("sampling", STAT_SAMPLINGS, ids=["T=1", "T=0.8,top-k,top-p"])
@pytest.mark.parametrize("single,acc", SGLANG_CASES)
@pytest.mark.parametrize("point_mass", [True, False], ids=["target-only", "with-q"])
@pytest.mark.slow
def test_sglang_thresholds_follow_the_kernel_in_distribution(sampling, single, acc, point_mass):
    target, draft, _, drafts = sampling_case(7)
    draft = None if point_mass else draft
    expected = slow_sglang(target, draft, drafts, sampling, single, acc)
    counts = outcome_counts("sglang-threshold", {"threshold_single": single, "threshold_acc": acc}, target, draft,
                            drafts, sampling, TRIALS)
    assert_same_distribution(counts, expected)
    assert counts.shape == (KS + 1, VS)


def test_sglang_strict_setting_is_speculative_sampling_verdict_for_verdict():
    target, draft, _, drafts = sampling_case(3)
    t, dl = torch.as_tensor(target, dtype=torch.float32), torch.as_tensor(draft, dtype=torch.float32)
    strict = make_policy("sglang-threshold", {"threshold_single": 1.0, "threshold_acc": 1.0})
    for seed in range(50):
        for q in (dl, None):
            blocks = [Block(torch.tensor(drafts), t, q, SamplingParams(1.0), torch.Generator().manual_seed(seed))
                      for _ in range(2)]
            assert strict.verify(blocks[0]) == make_policy("speculative-sampling").verify(blocks[1])


# ------------------------------------------------------------------------------------------------ relax_in


class TagTokenizer:
    """Tags as single tokens (6 opens, 7 closes), as Qwen3's <think> / </think> are."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return {"<think>": [6], "</think>": [7]}.get(text, [0])


def gated(relax_in: str, inner: str = "relaxed-topk-delta", context: list[int] = (), **knobs) -> SpanGate:
    """A gated rule that has read ``context`` (the committed tokens, prompt included)."""
    policy = SpanGate(make_policy(inner, knobs), relax_in)
    policy.bind(PolicyEnv(TagTokenizer(), V, torch.device("cpu")))
    policy.reset()
    policy.observe(list(context))
    return policy


WITHIN = {0: 0.5, 3: 0.3}  # the draft 3 is within δ = 0.6 of the top-1 (0)
CLOSE = {7: 0.9}


def test_a_block_crossing_the_end_of_thinking_is_split_there():
    # inside the span (the prompt opened it): a relaxable mismatch, the drafted </think>, a relaxable mismatch
    rows, drafts, context = [WITHIN, CLOSE, WITHIN, BONUS], [3, 7, 3], [1, 6, 2]
    v = gated("thinking", context=context).verify(greedy_block(rows, drafts))
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (2, 0, 1)  # after </think> the mismatch is verified exactly
    assert (v.emitted_in_span, v.relaxed_in_span) == (2, 1)  # d_0 and </think> inside; the correction outside
    v = gated("all", context=context).verify(greedy_block(rows, drafts))
    assert (v.n_accepted, v.next_token, v.n_relaxed, v.emitted_in_span, v.relaxed_in_span) == (3, 5, 2, 2, 1)
    v = gated("answer", context=context).verify(greedy_block(rows, drafts))
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (0, 0, 0)


def test_a_block_opening_the_span_relaxes_only_after_the_tag():
    rows, context = [WITHIN, {6: 0.9}, WITHIN, BONUS], [1, 2]
    v = gated("thinking", context=context).verify(greedy_block(rows, [3, 6, 3]))
    assert (v.n_accepted, v.next_token) == (0, 0)  # outside: exact
    v = gated("thinking", context=context).verify(greedy_block(rows, [0, 6, 3]))
    assert (v.n_accepted, v.next_token, v.n_relaxed, v.relaxed_in_span) == (3, 5, 1, 1)


def test_the_span_is_tracked_across_rounds_of_a_sequence_and_reset_between_sequences():
    policy = gated("thinking", context=[1, 2])
    rows = [WITHIN, BONUS]
    assert policy.verify(greedy_block(rows, [3])).n_accepted == 0  # outside
    policy.observe([6, 0])
    assert policy.verify(greedy_block(rows, [3])).n_accepted == 1  # a committed <think> opened it
    policy.observe([3, 5, 7])
    assert policy.verify(greedy_block(rows, [3])).n_accepted == 0  # and </think> closed it
    policy.reset()
    policy.observe([6])
    assert policy.verify(greedy_block(rows, [3])).n_accepted == 1


def test_multi_token_tags_and_runs():
    tracker = SpanTracker([1, 2], [3, 4])
    tracker.advance([9, 1, 2, 5])
    assert tracker.inside
    assert span_flags(tracker, torch.tensor([[3, 4, 1]])).tolist() == [[True, True, False, False]]
    tracker.advance([3])  # half a closing tag: still inside, and the next draft completes it
    assert tracker.inside and span_flags(tracker, torch.tensor([[4]])).tolist() == [[True, False]]
    flags = torch.tensor([[True, True, False, True], [False, False, False, False]])
    assert run_ends(flags, torch.tensor([4, 3])).tolist() == [[2, 2, 3, 4], [3, 3, 3, 3]]


def test_outside_the_span_sampling_rules_are_strict_speculative_sampling():
    target, draft, _, drafts = sampling_case(5)
    t, dl = torch.as_tensor(target, dtype=torch.float32), torch.as_tensor(draft, dtype=torch.float32)
    policy = gated("thinking", "sglang-threshold", context=[0, 1], threshold_acc=0.1)
    for seed in range(40):
        blocks = [Block(torch.tensor(drafts), t, dl, SamplingParams(1.0), torch.Generator().manual_seed(seed))
                  for _ in range(2)]
        v = policy.verify(blocks[0])
        reference = make_policy("speculative-sampling").verify(blocks[1])
        assert (v.n_accepted, v.next_token, v.n_relaxed) == (reference.n_accepted, reference.next_token, 0)


def test_relax_in_is_a_method_option_kept_out_of_old_keys(tiny_target, tiny_draft):
    from relaxbench.decoders import build_decoder
    from relaxbench.errors import ConfigError

    plain = MethodSpec(name="m", policy="fly")
    assert "relax_in" not in plain.identity() and "thinking_tags" not in plain.record()
    method = MethodSpec(name="m", policy="relaxed-topk-delta", knobs={"delta": 1.0}, relax_in="thinking")
    assert method.identity()["relax_in"] == "thinking"
    prompt = tiny_target.tokenizer("Hello there")["input_ids"]
    config = DecodeConfig(k=4, max_new_tokens=24)
    ar = build_decoder(MethodSpec(name="ar", policy="none", drafter={"kind": "model"}), tiny_target, None,
                       DecodeConfig(k=0, max_new_tokens=24)).generate(prompt)
    # the tiny model never thinks: gated to the thinking span, the rule is exact match everywhere
    result = build_decoder(method, tiny_target, tiny_draft, config, "tiny-random-draft").generate(prompt)
    assert result.output_ids == ar.output_ids and sum(result.rounds.relaxed) == 0
    assert all(e == 0 for e in result.rounds.emitted_in_span if e is not None)
    loose = build_decoder(method.model_copy(update={"relax_in": "all"}), tiny_target, tiny_draft, config,
                          "tiny-random-draft").generate(prompt)
    assert sum(loose.rounds.relaxed) > 0
    with pytest.raises(ConfigError, match="relax_in applies to relaxed rules"):
        gate(make_policy("exact"), "thinking")
