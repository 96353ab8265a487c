"""The loop's bookkeeping: stop conditions, draft-length capping, counters, extra verify tokens, divergence."""

from __future__ import annotations

import pytest
import torch

from relaxbench.decoders import build_decoder
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.drafters import prompt_lookup
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.ops.sampling import SamplingParams, logits_to_probs
from relaxbench.policies import make_policy
from relaxbench.policies.base import Batch, Judgement, VerificationPolicy
from relaxbench.policies.greedy import greedy_judgement

AR = MethodSpec(name="ar", policy="none")
EXACT = MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="model"))


def run(method, target, draft, prompt, **config):
    return build_decoder(method, target, draft, DecodeConfig(**config)).generate(prompt)


def test_max_new_tokens_is_exact_and_drafts_are_capped(tiny_target, tiny_draft):
    for n in (1, 2, 7, 16):
        result = run(EXACT, tiny_target, tiny_draft, [1, 2, 3, 4], k=8, max_new_tokens=n)
        if result.stop_reason == "length":
            assert result.n_emitted == n
        # a round never drafts beyond what the budget can still emit
        emitted = 0
        for drafted, out in zip(result.rounds.drafted, result.rounds.emitted):
            assert drafted <= n - emitted - 1
            emitted += out


def test_counters_are_consistent(tiny_target, tiny_draft):
    result = run(EXACT, tiny_target, tiny_draft, [10, 20, 30, 40, 50], k=4, max_new_tokens=40)
    r = result.rounds
    assert sum(r.emitted) == result.n_emitted
    assert all(a <= d for a, d in zip(r.accepted, r.drafted))
    assert all(e <= a + 1 for a, e in zip(r.accepted, r.emitted))
    counters = result.counters
    assert counters.mean_acceptance_length == pytest.approx(result.n_emitted / result.n_rounds)
    per_position = counters.accepted_per_position
    assert list(per_position) == sorted(per_position, reverse=True)  # accepting position i implies all before it
    assert sum(per_position) == sum(r.accepted) == counters.accepted
    assert sum(counters.drafted_per_position) == sum(r.drafted) == counters.drafted
    assert result.time_total >= result.time_prefill + sum(r.t_verify)


def test_eos_stops_and_is_kept(tiny_target):
    ar = run(AR, tiny_target, None, [7, 8, 9], k=0, max_new_tokens=30)
    forced_eos = ar.output_ids[3]  # pretend the 4th generated token is EOS
    tiny_target_eos = type(tiny_target)(tiny_target.name, tiny_target.location, tiny_target.model,
                                        tiny_target.tokenizer, tiny_target.dtype, tiny_target.device)
    decoder = build_decoder(AR, tiny_target_eos, None, DecodeConfig(k=0, max_new_tokens=30))
    decoder.eos_ids = frozenset({forced_eos})
    out = decoder.generate([7, 8, 9])
    first = ar.output_ids.index(forced_eos)
    assert out.output_ids == ar.output_ids[: first + 1] and out.stop_reason == "eos"


def test_stop_string_cuts_text_and_tokens_identically_for_every_arm(tiny_target, tiny_draft):
    ar = run(AR, tiny_target, None, [65, 66, 67], k=0, max_new_tokens=30)
    text = tiny_target.tokenizer.decode(ar.output_ids, skip_special_tokens=True)
    stop = text[5:7]
    assert stop and stop in text
    outs = [run(m, tiny_target, tiny_draft, [65, 66, 67], k=4, max_new_tokens=30, stop_strings=(stop,))
            for m in (AR, EXACT)]
    for out in outs:
        assert out.stop_reason == "stop"
        assert stop not in out.text and text.startswith(out.text)
        assert stop in tiny_target.tokenizer.decode(out.output_ids, skip_special_tokens=True)
    assert outs[0].output_ids == outs[1].output_ids


def test_a_special_token_stop_string_stops_every_arm(tiny_target, tiny_draft):
    """An ``until`` entry that is a special token other than EOS (lm-eval tasks list ``<|im_end|>``, ``</s>``)
    ends generation at that token, as lm-eval's own HF model does, though the output text has no special tokens."""
    from relaxbench.decoding.prompts import encode_prompt

    tokenizer = tiny_target.tokenizer
    stop = "<|im_start|>"  # special, not the EOS (<|im_end|>)
    stop_id = tokenizer.convert_tokens_to_ids(stop)
    assert stop_id not in tiny_target.eos_token_ids
    prompt = encode_prompt(tokenizer, "abc")  # greedily, the tiny target emits <|im_start|> after some text
    free = run(AR, tiny_target, None, prompt, k=0, max_new_tokens=40)
    assert stop_id in free.output_ids[1:-1], "the check needs a special token in the middle of the output"
    cut = free.output_ids.index(stop_id) + 1
    for method in (AR, EXACT):
        out = run(method, tiny_target, tiny_draft, prompt, k=4, max_new_tokens=40, stop_strings=(stop, "never"))
        assert out.stop_reason == "stop"
        assert out.output_ids == free.output_ids[:cut]  # the special token is kept in the ids, like EOS
        assert out.text == tokenizer.decode(free.output_ids[: cut - 1], skip_special_tokens=True)
        assert stop not in out.text


def test_prompt_lookup_takes_the_earliest_match_and_backs_off():
    t = torch.tensor
    context = t([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3])
    assert prompt_lookup(context, 3, 1, 2).tolist() == [9, 1]  # earliest match of [1, 2, 3]
    assert prompt_lookup(t([4, 5, 6, 7, 5]), 3, 1, 3).tolist() == [6, 7, 5]  # backs off to the 1-gram [5]
    assert prompt_lookup(t([4, 5, 6]), 3, 1, 3).tolist() == []
    assert prompt_lookup(t([4, 5, 6, 5]), 3, 2, 3).tolist() == []  # min_ngram respected


class AppendsTokens(VerificationPolicy):
    """Checks the engine's extra-verify-token mechanism: the extra logits arrive, and are not committed."""

    name = "appends"

    def __init__(self) -> None:
        super().__init__()
        self.seen = []

    def extra_verify_tokens(self, draft_tokens):
        return torch.tensor([3, 4, 5])

    def judge(self, batch: Batch) -> Judgement:
        self.seen.append(batch.extras["extra_logits"].source.shape[0])
        return greedy_judgement(batch)


def test_extra_verify_tokens_are_seen_then_dropped(tiny_target, tiny_draft):
    reference = run(AR, tiny_target, None, [11, 12, 13], k=0, max_new_tokens=24)
    policy = AppendsTokens()
    drafter = build_decoder(EXACT, tiny_target, tiny_draft, DecodeConfig(k=3)).drafter
    out = SpeculativeDecoder(tiny_target, drafter, policy, DecodeConfig(k=3, max_new_tokens=24)).generate([11, 12, 13])
    assert out.output_ids == reference.output_ids  # the appended tokens never leak into the committed sequence
    assert policy.seen and set(policy.seen) == {3}


def test_sampling_helpers():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    greedy = logits_to_probs(logits, SamplingParams())
    torch.testing.assert_close(greedy, torch.softmax(logits, -1))
    top2 = logits_to_probs(logits, SamplingParams(1.0, top_k=2))
    assert (top2[0, 2:] == 0).all() and top2.sum().item() == pytest.approx(1.0)
    nucleus = logits_to_probs(logits, SamplingParams(1.0, top_p=0.5))
    assert (nucleus[0] > 0).tolist() == [True, False, False, False]


def test_sampling_arm_is_reproducible_with_a_seed(tiny_target, tiny_draft):
    method = MethodSpec(name="ss", policy="speculative-sampling", drafter=DrafterSpec(kind="model"))
    a = run(method, tiny_target, tiny_draft, [1, 2, 3], k=3, max_new_tokens=20, sampling=SamplingParams(1.0), seed=4)
    b = run(method, tiny_target, tiny_draft, [1, 2, 3], k=3, max_new_tokens=20, sampling=SamplingParams(1.0), seed=4)
    assert a.output_ids == b.output_ids


def test_divergence_is_located_and_classified(tiny_target):
    ar = run(AR, tiny_target, None, [5, 6, 7], k=0, max_new_tokens=12).output_ids
    assert diagnose_divergence(tiny_target, [5, 6, 7], ar, list(ar)).identical
    other = ar[:4] + [(ar[4] + 1) % 250] + ar[5:]
    d = diagnose_divergence(tiny_target, [5, 6, 7], ar, other)
    assert not d.identical and d.position == 4 and d.top2_gap > 0
    assert d.near_tie is (d.top2_gap < d.tolerance)
    assert diagnose_divergence(tiny_target, [5, 6, 7], ar, other, tolerance=1e9).near_tie is True


def test_policy_knobs_are_validated():
    from relaxbench.errors import ConfigError

    assert make_policy("fly", {"theta": 1}).knobs.theta == 1.0
    assert make_policy("fly", {"theta": "inf"}).knobs.theta == float("inf")
    assert make_policy("fly").describe() == {"policy": "fly", "knobs": {"theta": 0.3, "window": 6}}
    with pytest.raises(ConfigError, match="did you mean 'theta'"):
        make_policy("fly", {"thetaa": 1})
    with pytest.raises(ConfigError, match="must be an integer"):
        make_policy("fly", {"window": 2.5})
    with pytest.raises(ConfigError, match="^rule 'fly': knob 'window' must be >= 1, got 0$"):
        make_policy("fly", {"window": 0})
    with pytest.raises(ConfigError, match="unknown knob 'theta'"):
        make_policy("exact", {"theta": 1})


def test_t_policy_is_the_policy_decision_alone(tiny_target, tiny_draft):
    """A policy that sleeps 20 ms in ``verify`` shows that in ``t_policy``; a drafter whose ``commit`` (after the
    verdict, with the cache sync) sleeps 100 ms does not."""
    import time

    class Slow(VerificationPolicy):
        name = "slow"

        def judge(self, batch: Batch) -> Judgement:
            time.sleep(0.02)
            return greedy_judgement(batch)

    drafter = build_decoder(EXACT, tiny_target, tiny_draft, DecodeConfig(k=3)).drafter
    commit = drafter.commit
    drafter.commit = lambda context: (time.sleep(0.1), commit(context))
    out = SpeculativeDecoder(tiny_target, drafter, Slow(), DecodeConfig(k=3, max_new_tokens=12)).generate([1, 2, 3])
    timed = [t for t, drafted in zip(out.rounds.t_policy, out.rounds.drafted) if drafted]  # k = 0: no decide
    assert timed and all(0.02 <= t < 0.1 for t in timed)
