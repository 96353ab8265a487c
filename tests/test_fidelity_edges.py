"""The edges where a rule could part from its reference: float64 uniforms on every path that builds a batch, and
the thinking span opened by a prompt's ``<think>``. (Ties at the top-k/top-p cut: tests/test_sampling_ties.py.)

Every boundary case is built on this machine from the draws themselves: p(d) is found as the float32 number the
rule's own processing computes, equal to float32(u) and below u, so no assertion hangs on a CPU's rounding.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from relaxbench.decoding.drafters.base import Drafter, Proposal
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.models.tiny import VOCAB_SIZE
from relaxbench.integrations.vllm_batch import engine_batch, flatten, with_stream_uniforms
from relaxbench.ops.random import stream_uniforms
from relaxbench.ops.sampling import BatchSampling, SamplingParams, logits_to_probs
from relaxbench.policies import make_policy
from relaxbench.policies.base import VerificationPolicy
from relaxbench.policies.batch import Batch, Block
from scripted_lm import ScriptedLM, ScriptedModel

T1 = SamplingParams(1.0)
MARGIN_STRICT = ("margin", {"theta": math.inf}, 1)
FLY_VLLM_STRICT = ("fly-vllm", {"fly_entropy_threshold": math.inf, "fly_window_size": 1}, 2)
DRAFT, OTHERS = 10, (11, 12)  # the draft token and the two tokens of logit 0 (ordinary bytes: never EOS)


def row_for(p32: torch.Tensor, width: int = 3) -> torch.Tensor | None:
    """A logit row ``[x, 0, 0]`` (over ``width`` columns, −inf beyond the three) whose processed p of column 0 is
    exactly ``p32`` as the rules compute it here, or None where no float32 x gives it."""
    p = float(p32)
    x = torch.tensor(math.log(2 * p / (1 - p)), dtype=torch.float32)
    for _ in range(64):
        row = torch.full((1, width), -math.inf)
        row[0, :3] = torch.tensor([float(x), 0.0, 0.0])
        got = logits_to_probs(row, T1)[0, 0]
        if got == p32:
            return row[0]
        x = torch.nextafter(x, torch.tensor(math.inf if got < p32 else -math.inf))
    return None


def boundary_row(u0: float, width: int = 3) -> torch.Tensor | None:
    """The row whose p(d) is float32(u0), where float32(u0) < u0 (else None): a float32 uniform accepts it, the
    float64 one rejects it."""
    p32 = torch.tensor(u0, dtype=torch.float32)
    if float(p32) >= u0:
        return None
    return row_for(p32, width)


def reference_accepts(u0: float, p_d: float) -> bool:
    """MARS's ``u ≤ min(1, p/q)`` (Python floats) and vLLM's ``p/q ≥ u`` (float64), q = 1: the same test."""
    return u0 <= min(1.0, p_d)


def strict_policy(name: str, knobs: dict[str, Any]) -> VerificationPolicy:
    """A rule at its strict end (θ = inf), where the reference's own test decides every draft."""
    return make_policy(name, knobs)


# -- the loop, with a target whose every row is the constructed one ---------------------------------------------

class FixedRowLM(ScriptedLM):
    """Every position's logits are ``row`` (over the scripted vocabulary)."""

    def __init__(self, row: torch.Tensor) -> None:
        super().__init__(lambda _text: None)
        self.row = row

    def forward(self, input_ids: torch.Tensor, past_key_values: Any, use_cache: bool = True, logits_to_keep: int = 0,
                output_hidden_states: bool = False, **_: Any) -> SimpleNamespace:
        new = input_ids.to(torch.float64)[:, None, :, None]
        past_key_values.update(new, new, 0)
        n = int(input_ids.shape[1])
        keep = logits_to_keep or n
        out = SimpleNamespace(logits=self.row.to(torch.float64).expand(1, keep, -1).clone())
        out.hidden_states = None
        return out


class ConstantDrafter(Drafter):
    """Proposes ``DRAFT`` k times, with no distribution (q = 1, as an n-gram drafter); draws nothing."""

    name = "constant"

    def __init__(self) -> None:
        super().__init__(Drafter.Knobs(), None)

    def propose(self, context: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        return Proposal(torch.full((k,), DRAFT, dtype=torch.long), None)


def full_row(row3: torch.Tensor, vocab: int) -> torch.Tensor:
    """``row3``'s three logits at ``DRAFT`` and ``OTHERS``, −inf elsewhere."""
    row = torch.full((vocab,), -math.inf)
    row[[DRAFT, *OTHERS]] = row3[:3]
    return row


def loop_first_round(policy: VerificationPolicy, row: torch.Tensor, k: int, seed: int) -> tuple[int, int]:
    """(accepted, relaxed) of the loop's first round at ``seed``: its first draws are the round's uniforms."""
    model = FixedRowLM(row)
    target = ScriptedModel("fixed", model)
    decoder = SpeculativeDecoder(target, ConstantDrafter(), policy,
                                 DecodeConfig(k=k, max_new_tokens=k + 1, sampling=T1, seed=seed))
    result = decoder.generate([DRAFT, DRAFT])
    return int(result.rounds.accepted[0]), int(result.rounds.relaxed[0])


def engine_decision(policy: VerificationPolicy, block: Block, uniforms: tuple[torch.Tensor, torch.Tensor]):
    """The batched decision the vLLM adapter calls, on vLLM's flattened layout (no vLLM needed), with the
    request's uniforms in the rule's dtype."""
    flat = flatten([block])
    batch = engine_batch(flat["num_draft_tokens"], flat["draft_token_ids"], flat["target_logits_indices"],
                         flat["bonus_logits_indices"], flat["logits"], flat["draft_probs"],
                         BatchSampling.of([block.sampling]), uniforms[0].unsqueeze(0).to(policy.uniform_dtype),
                         uniforms[1].reshape(1))
    return policy.decide(batch).to_host()[0]


BRIEF_CASES = [(MARGIN_STRICT, 11), (MARGIN_STRICT, 14), (FLY_VLLM_STRICT, 15)]


@pytest.mark.parametrize("rule, seed", BRIEF_CASES, ids=["margin-11", "margin-14", "fly-vllm-15"])
def test_float64_uniforms_reach_the_loop_verify_and_the_engine_path(rule, seed):
    name, knobs, k = rule
    policy = strict_policy(name, knobs)
    assert policy.uniform_dtype == torch.float64
    uniforms = policy.uniforms(torch.Generator().manual_seed(seed), k, T1)
    u0 = float(uniforms[0][0])
    assert uniforms[0].dtype == torch.float64
    row3 = boundary_row(u0)
    assert row3 is not None, "these seeds' first uniform rounds down to float32: the brief's cases"
    p_d = float(logits_to_probs(row3.unsqueeze(0), T1)[0, 0])
    assert float(torch.tensor(u0, dtype=torch.float32)) <= p_d < u0  # the boundary: float32(u) ≤ p < u
    assert not reference_accepts(u0, p_d)

    block = Block(torch.full((k,), 0, dtype=torch.long), row3.expand(k + 1, -1).clone(), None, T1,
                  torch.Generator().manual_seed(seed))
    # the test has teeth: the same batch with the uniforms rounded to float32 accepts
    rounded = policy.decide(Batch.of_blocks([block], torch.float32, [uniforms])).to_host()[0]
    assert rounded.n_accepted >= 1

    verified = policy.verify(block)
    given = policy.decide(Batch.of_blocks([block], uniforms=[uniforms])).to_host()[0]  # dtype of the given uniforms
    engine = engine_decision(policy, block, uniforms)
    loop = loop_first_round(strict_policy(name, knobs), full_row(row3, VOCAB_SIZE), k, seed)
    for outcome in (verified, given, engine):
        assert (outcome.n_accepted, outcome.n_relaxed) == (0, 0)
    assert loop == (0, 0)


@pytest.mark.parametrize("rule", [MARGIN_STRICT, FLY_VLLM_STRICT], ids=["margin", "fly-vllm"])
def test_every_boundary_block_from_generator_draws_is_rejected_on_every_path(rule):
    name, knobs, k = rule
    policy = strict_policy(name, knobs)
    built = 0
    for seed in range(300):
        uniforms = policy.uniforms(torch.Generator().manual_seed(seed), k, T1)
        row3 = boundary_row(float(uniforms[0][0]))
        if row3 is None:
            continue
        built += 1
        block = Block(torch.zeros(k, dtype=torch.long), row3.expand(k + 1, -1).clone(), None, T1,
                      torch.Generator().manual_seed(seed))
        for outcome in (policy.verify(block), engine_decision(policy, block, uniforms),
                        policy.decide(Batch.of_blocks([block], uniforms=[uniforms])).to_host()[0]):
            assert (outcome.n_accepted, outcome.n_relaxed) == (0, 0), seed
    assert built >= 50


@pytest.mark.parametrize("rule", [MARGIN_STRICT, FLY_VLLM_STRICT], ids=["margin", "fly-vllm"])
def test_the_engine_streams_float64_uniforms_for_a_float64_rule(rule):
    """The adapter's own uniforms (``with_stream_uniforms``): at a step whose first uniform rounds down in float32,
    p(d) = float32(u) is rejected, as the reference rejects it."""
    name, knobs, k = rule
    policy = strict_policy(name, knobs)
    for seed in range(200):
        seeds, steps = torch.tensor([seed]), torch.tensor([0])
        u0 = float(stream_uniforms(seeds, steps, k, torch.float64)[0, 0])
        row3 = boundary_row(u0)
        if row3 is not None:
            break
    else:
        pytest.fail("no stream uniform rounds down in float32 in 200 seeds")
    block = Block(torch.zeros(k, dtype=torch.long), row3.expand(k + 1, -1).clone(), None, T1, None)
    flat = flatten([block])
    batch = engine_batch(flat["num_draft_tokens"], flat["draft_token_ids"], flat["target_logits_indices"],
                         flat["bonus_logits_indices"], flat["logits"], flat["draft_probs"], BatchSampling.of([T1]),
                         torch.zeros(1, k), torch.zeros(1, dtype=torch.float64))
    streamed = with_stream_uniforms(batch, seeds, steps, policy.uniform_dtype)
    assert streamed.accept_u.dtype == torch.float64 and float(streamed.accept_u[0, 0]) == u0
    assert policy.decide(streamed).to_host()[0].n_accepted == 0
    as_float32 = with_stream_uniforms(batch, seeds, steps, torch.float32)
    assert policy.decide(as_float32).to_host()[0].n_accepted >= 1  # what a float32 stream would have done


def test_fly_vllm_at_its_strict_end_counts_nothing_relaxed_where_u_equals_p():
    """vLLM's native test is ``p/q ≥ u``: where u = p(d) exactly it accepts, and that acceptance is native, not a
    relaxation (the relaxed count is the rule's deferrals)."""
    name, knobs, k = FLY_VLLM_STRICT
    policy = strict_policy(name, knobs)
    row3 = row_for(torch.tensor(0.3, dtype=torch.float32))
    assert row3 is not None
    p_d = logits_to_probs(row3.unsqueeze(0), T1)[0, 0].double()
    block = Block(torch.zeros(k, dtype=torch.long), row3.expand(k + 1, -1).clone(), None, T1, None)
    u = torch.stack([p_d, torch.tensor(0.99, dtype=torch.float64)])
    outcome = policy.decide(Batch.of_blocks([block], uniforms=[(u, torch.tensor(0.5, dtype=torch.float64))]))
    accepted, relaxed = outcome.to_host()[0].n_accepted, outcome.to_host()[0].n_relaxed
    assert (accepted, relaxed) == (1, 0)


# -- the thinking span opened by the prompt ------------------------------------------------------------------------

class TagTokenizer:
    """Tags as single tokens (6 opens, 7 closes), as DeepSeek-R1's and Qwen3's <think> / </think> are."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return {"<think>": [6], "</think>": [7]}.get(text, [0])


def gated_after(prompt: list[int], inner: str, **knobs: Any) -> VerificationPolicy:
    from relaxbench.policies.base import PolicyEnv
    from relaxbench.policies.span import SpanGate

    policy = SpanGate(make_policy(inner, knobs), "thinking")
    policy.bind(PolicyEnv(TagTokenizer(), 8, torch.device("cpu")))
    policy.reset()
    policy.observe(prompt)
    return policy


def within_delta_block() -> Block:
    """One draft (3) that is the target's second token, within δ = 0.6 of the top-1 (0): relaxed-topk-delta accepts
    it inside the span; exact match rejects it."""
    row = torch.log(torch.tensor([0.5, 0.1, 0.05, 0.3, 0.01, 0.02, 0.01, 0.01]))
    return Block(torch.tensor([3]), torch.stack([row, row]), None, SamplingParams(), None)


def test_a_prompt_holding_think_and_its_close_leaves_tensorrt_llms_rule_relaxed():
    """TensorRT-LLM's context phase sets δ when the prompt holds a begin-of-thinking token, whatever follows it: the
    rule that claims its span starts relaxed; a generated </think> then closes the span."""
    prompt = [1, 6, 2, 7, 3]  # ... <think> ... </think> ...
    policy = gated_after(prompt, "relaxed-topk-delta")
    outcome = policy.verify(within_delta_block())
    assert (outcome.n_accepted, outcome.n_relaxed) == (1, 1)
    policy.observe([7])  # a generated </think>
    assert policy.verify(within_delta_block()).n_accepted == 0
    # a prompt without the opening tag: closed, as TensorRT-LLM's δ = 0
    assert gated_after([1, 2, 7, 3], "relaxed-topk-delta").verify(within_delta_block()).n_accepted == 0
    # an opening tag at the prompt's end: open either way
    assert gated_after([1, 6], "relaxed-topk-delta").verify(within_delta_block()).n_accepted == 1


def test_other_rules_read_the_prompts_span_as_text():
    """A rule that does not claim TensorRT-LLM's span reads the prompt as the text it is: <think>…</think> closed."""
    closed = gated_after([1, 6, 2, 7, 3], "margin-greedy", theta=0.0)
    row = torch.tensor([2.0, 0.5, 0.1, 1.9, 0.0, 0.0, 0.0, 0.0])  # draft 3: the runner-up, z2/z1 > 0
    block = Block(torch.tensor([3]), torch.stack([row, row]), None, SamplingParams(), None)
    assert closed.verify(block).n_accepted == 0
    assert gated_after([1, 6, 2], "margin-greedy", theta=0.0).verify(block).n_accepted == 1


# -- the vLLM path's draft distribution --------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["margin", "contrastive"])
def test_the_engine_path_rebuilds_the_draft_logits_from_vllms_untruncated_q(rule):
    """vLLM 0.32 hands its rejection sampler the draft distribution softmax(z/T) of the temperature alone
    (``llm_base_proposer.compute_probs_and_sample_next_token``: top-k/top-p are not applied to the drafts), so
    T·log q is the draft logits up to a constant per row: under top-k/top-p the engine path, which has q only,
    decides as the loop, which has the draft logits, on the same request."""
    policy = make_policy(rule)
    g = torch.Generator().manual_seed(0)
    settings = [SamplingParams(0.7, 5, 0.9), SamplingParams(1.0, 0, 0.8), SamplingParams(1.3, 10, 1.0)]
    vocab, k, differ = 50, 4, 0
    for i in range(300):
        params = settings[i % len(settings)]
        z, zd = torch.randn(k + 1, vocab, generator=g) * 3, torch.randn(k, vocab, generator=g) * 3
        q = torch.softmax(zd / params.temperature, dim=-1)
        drafts = torch.multinomial(q, 1, generator=g).flatten()
        uniforms = (torch.rand(k, generator=g, dtype=policy.uniform_dtype),
                    torch.rand((), generator=g, dtype=torch.float64))
        block = Block(drafts, z, zd, params, None, draft_probs_given=q)
        loop = policy.decide(Batch.of_blocks([block], policy.uniform_dtype, [uniforms])).to_host()[0]
        differ += loop != engine_decision(policy, block, uniforms)
    assert differ == 0
