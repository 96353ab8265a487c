"""Conformance: every rule against the semantics of the reference its ``origin`` names. docs/conformance.md maps
each branch of each reference to the cases here.

Two kinds of checks, all written here from the references' semantics (our own cases; no reference code copied):

* hand-built blocks whose verdicts are worked out by hand, one per branch the reference has (window boundary, a
  second mismatch in the window, θ edges, the gate switch at θ ≤ 0.01, NaN entropy, z1 ≤ 0, ties for the runner-up,
  the top-k/top-p processing order, Medusa's entropy epsilon, casc-tok at α = 0, casc-opt's strict <, fuzzy's ≤,
  contrastive's support, ...);
* for every sampling-mode rule, the joint distribution of (accepted length, next token) — which fixes the first
  emitted token too — over many seeds, against the exact outcome probabilities of a slow float64 numpy
  implementation written here from the rule's formula (chi-square, ``scipy.stats``). The one deterministic
  sampling-mode rule (Medusa's fast path) is compared verdict for verdict instead.

The processed distributions of MARS are checked against transformers' own logits warpers (the ones the MARS code
builds), and the lazily computed rows against the batched ones, bit for bit.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import stats

from relaxbench.ops.sampling import BatchSampling, SamplingParams, logits_to_probs, probs_rows, process_logits
from relaxbench.policies import POLICIES, make_policy
from relaxbench.errors import ConfigError
from relaxbench.policies.base import COMMIT_PIN, Batch, Block, Fidelity, PolicyEnv, registration_problems
from relaxbench.policies.fly import top3_entropy
from relaxbench.policies.relaxed_target import divergence

GREEDY = SamplingParams()
T1 = SamplingParams(1.0)
TRUNCATED = SamplingParams(0.8, top_k=4, top_p=0.9)
NEG = -30.0


def row(v: int, scores: dict[int, float], rest: float = NEG) -> torch.Tensor:
    out = torch.full((v,), rest)
    for token, score in scores.items():
        out[token] = score
    return out


def block(target, drafts, sampling=GREEDY, draft=None, seed=0, extras=None) -> Block:
    return Block(torch.tensor(drafts), torch.as_tensor(target, dtype=torch.float32),
                 None if draft is None else torch.as_tensor(draft, dtype=torch.float32), sampling,
                 torch.Generator().manual_seed(seed), extras or {})


def verdict(name, target, drafts, sampling=GREEDY, draft=None, seed=0, extras=None, **knobs):
    policy = make_policy(name, knobs)
    if "extra_logits" in (extras or {}):
        policy.bind(PolicyEnv(CountingTokenizer(), int(torch.as_tensor(target).shape[-1]), torch.device("cpu")))
    v = policy.verify(block(target, drafts, sampling, draft, seed, extras))
    return v.n_accepted, v.next_token, v.n_relaxed


def relaxed_row(rule, b: Block, position: int = 0) -> tuple[float, torch.Tensor]:
    """(π(d), π's residual row) of a relaxed-target rule at ``position`` of a one-request block."""
    batch = Batch.of_blocks([b], rule.uniform_dtype)
    pi_accept, residual = rule.relaxed_target(batch)
    return float(pi_accept[0, position]), residual(torch.tensor([position]))[0]


def probs(b: Block, which: str = "p", position: int = 0) -> torch.Tensor:
    batch = Batch.of_blocks([b])
    return (batch.p_at if which == "p" else batch.q_at)(torch.tensor([position]))[0]


class CountingTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1, 2, 3]  # a three-token reflection prompt


# -- every rule says what it follows ------------------------------------------------------------------------------
def test_every_policy_names_its_fidelity_and_reference():
    for name, cls in POLICIES.items():
        assert isinstance(cls.origin.fidelity, Fidelity), name
        assert cls.origin.reference, name
        if cls.origin.fidelity is Fidelity.REFERENCE:  # a repository at a commit or a release tag
            assert COMMIT_PIN.search(cls.origin.reference), (name, cls.origin.reference)
        doc = (__import__(cls.__module__, fromlist=["_"]).__doc__ or "").lower()
        assert "deviation" in doc or cls.origin.fidelity in (Fidelity.BASELINE, Fidelity.PAPER), name
        assert registration_problems(cls) == [], name  # the registration check states these rules


def test_the_policy_table_names_what_every_policy_follows():
    """docs/policies.md (generated; tests/test_docs_tables.py keeps it current) has a row per rule, and a rule that
    follows reference code names its repository at the commit there."""
    from pathlib import Path

    lines = (Path(__file__).parents[1] / "docs" / "policies.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| rule |"))
    assert "follows" in header
    for name in POLICIES.names():
        row = next((line for line in lines if line.startswith(f"| `{name}` ")), None)
        assert row is not None, name
        origin = POLICIES.get(name).origin
        if origin.fidelity is Fidelity.REFERENCE:
            assert origin.reference.split()[0] in row, (name, origin.reference)


# -- processing: each request's rows with its own settings, the run's order and MARS's order ----------------------
SETTINGS = [GREEDY, T1, TRUNCATED, SamplingParams(0.7, top_p=0.5), SamplingParams(1.3, top_k=1)]


@pytest.mark.parametrize("top_p_first", [False, True], ids=["top-k first", "top-p first"])
def test_rows_processed_with_per_request_settings_equal_each_request_alone_bit_for_bit(top_p_first):
    """A batch mixes requests with different temperatures, top-k and top-p: processing all rows at once with
    per-row settings gives, bit for bit, what each row gets alone with its request's settings."""
    logits = torch.randn(len(SETTINGS) * 3, 3000, generator=torch.Generator().manual_seed(1)) * 3
    owners = [s for s in SETTINGS for _ in range(3)]
    settings = BatchSampling.of(owners)
    together = probs_rows(logits, settings, top_p_first)
    for i, params in enumerate(owners):
        alone = probs_rows(logits[i:i + 1], BatchSampling.of([params]), top_p_first)[0]  # the scalar path
        assert torch.equal(alone, torch.softmax(process_logits(logits[i], params, top_p_first), -1)), i
        assert torch.equal(together[i], alone), i


def test_a_block_is_freed_as_soon_as_the_round_is_over():
    """No reference cycle through the lazily computed rows: a cycle would keep every round's distributions alive
    until the cyclic collector runs (fresh memory and page faults each round)."""
    import gc
    import weakref

    target, draft, extra, drafts = sampling_case(7)
    gc.disable()
    try:
        for name in ("speculative-sampling", "casc-opt", "fuzzy", "reflective", "typical", "margin", "fly"):
            policy = make_policy(name)
            policy.bind(PolicyEnv(CountingTokenizer(), VS, torch.device("cpu")))
            b = block(target, drafts, T1, draft, extras={"extra_logits": torch.as_tensor(extra, dtype=torch.float32)})
            policy.verify(b)
            ref = weakref.ref(b)
            del b
            assert ref() is None, name
    finally:
        gc.enable()


def hf_process(logits: torch.Tensor, sampling: SamplingParams, top_p_first: bool) -> torch.Tensor:
    """transformers' own warpers, in MARS's order (temperature, top-p, top-k) or HF generate's (temperature, top-k,
    top-p)."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    top_p = [TopPLogitsWarper(sampling.top_p)] if sampling.top_p < 1 else []  # added only when active, as MARS
    top_k = [TopKLogitsWarper(sampling.top_k)] if sampling.top_k > 0 else []
    steps = [TemperatureLogitsWarper(sampling.temperature)] + (top_p + top_k if top_p_first else top_k + top_p)
    return LogitsProcessorList(steps)(None, logits.clone())


@pytest.mark.parametrize("top_p_first", [True, False], ids=["MARS order", "run order"])
def test_processing_matches_transformers_warpers_in_either_order(top_p_first):
    g = torch.Generator().manual_seed(2)
    for sampling in (SamplingParams(0.8, top_k=5, top_p=0.7), SamplingParams(1.3, top_k=2, top_p=0.95),
                     SamplingParams(0.5, top_k=9, top_p=0.4)):
        logits = torch.randn(20, 40, generator=g) * 2
        ours = process_logits(logits, sampling, top_p_first=top_p_first)
        theirs = hf_process(logits, sampling, top_p_first)
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))
        torch.testing.assert_close(ours[torch.isfinite(ours)], theirs[torch.isfinite(theirs)])


def test_the_two_orders_differ_where_top_k_renormalises_before_top_p():
    logits = torch.tensor([[2.0, 1.9, 1.0, 0.5, 0.0]])
    sampling = SamplingParams(1.0, top_k=2, top_p=0.5)
    # run order: top-k keeps 2 tokens (0.525, 0.475), then top-p 0.5 keeps 1; MARS's: top-p on the full
    # distribution (0.35 < 0.5, so 2 tokens stay), then top-k keeps 2
    assert torch.isfinite(process_logits(logits, sampling)).sum() == 1
    assert torch.isfinite(process_logits(logits, sampling, top_p_first=True)).sum() == 2


# -- exact ------------------------------------------------------------------------------------------------------
def test_exact_breaks_a_tie_at_the_top_by_the_first_index():
    target = torch.stack([row(6, {1: 5.0, 3: 5.0}), row(6, {0: 1.0})])
    assert verdict("exact", target, [1])[:2] == (1, 0)
    assert verdict("exact", target, [3])[:2] == (0, 1)


# -- FLy (AMD-AGI/FLy@6667ae8, chain mode) ---------------------------------------------------------------------------
V = 8
HIGH = {0: 1.0, 1: 0.9, 2: 0.8}  # top-3 entropy near ln 3
LOW = {0: 10.0, 1: 0.0}  # top-3 entropy ~ 5e-4


def fly_target(kinds: str, finite_low: bool = True) -> torch.Tensor:
    rows = {"h": row(V, HIGH), "l": row(V, LOW), "n": row(V, LOW, rest=-math.inf)}
    return torch.stack([rows[c] for c in kinds])


def test_fly_window_boundary_is_i_plus_w_less_than_k():
    target = fly_target("h" * 9)  # k = 8, W = 3: a mismatch at i is forgiven iff i + 3 < 8, i.e. i <= 4
    assert verdict("fly", target, [0, 0, 0, 0, 1, 0, 0, 0], theta=0.3, window=3) == (8, 0, 1)
    # i = 5 = k − W: its window (5, 6, 7) matches, but the last W positions are strict
    assert verdict("fly", target, [0, 0, 0, 0, 0, 1, 0, 0], theta=0.3, window=3) == (5, 0, 0)
    # k = W: nothing can be forgiven
    assert verdict("fly", fly_target("hhhh"), [1, 0, 0], theta=0.3, window=3) == (0, 0, 0)


def test_fly_a_second_mismatch_inside_the_window_rejects_and_forgiveness_does_not_cascade():
    target = fly_target("h" * 10)  # k = 9, W = 3
    # mismatches at 0 and 2: 0's window (0, 1, 2) fails; output cut at 0 even though 2's own window would pass
    assert verdict("fly", target, [1, 0, 1, 0, 0, 0, 0, 0, 0], theta=0.3, window=3)[:2] == (0, 0)
    # mismatches at 0 and 1: 1 is no match for 0's window, and 1's own forgiveness does not make it one
    assert verdict("fly", target, [1, 1, 0, 0, 0, 0, 0, 0, 0], theta=0.3, window=3)[:2] == (0, 0)


def test_fly_entropy_exactly_at_theta_passes_and_just_above_revokes():
    target = fly_target("h" * 9)
    h = float(top3_entropy(target[:1]))
    drafts = [1, 0, 0, 0, 0, 0, 0, 0]
    assert verdict("fly", target, drafts, theta=h, window=3)[0] == 8  # revoked iff H < θ (strict)
    assert verdict("fly", target, drafts, theta=math.nextafter(h, math.inf), window=3)[0] == 0


def test_fly_gate_is_off_for_theta_up_to_0_01():
    target = fly_target("l" * 9)  # H ≈ 5e-4 everywhere
    drafts = [1, 0, 0, 0, 0, 0, 0, 0]
    assert float(top3_entropy(target[:1])) < 0.001
    for theta in (0.01, 0.005, 0.0):  # entropy_thre <= 1e-2: the reference keeps no gate
        assert verdict("fly", target, drafts, theta=theta, window=3) == (8, 0, 1), theta
    with pytest.raises(ConfigError, match="'theta' must be >= 0"):  # below 0 means nothing: refused
        make_policy("fly", {"theta": -1.0})
    assert verdict("fly", target, drafts, theta=0.0100001, window=3)[0] == 0  # gate on: H < θ revokes


def test_fly_nan_entropy_with_fewer_than_three_finite_logits_never_revokes():
    drafts = [1, 0, 0, 0, 0, 0, 0, 0]
    # row 0 has two finite logits (10, 0): H is NaN, and NaN < θ is false, so the forgiven mismatch stays
    target = torch.cat([fly_target("n"), fly_target("h" * 8)])
    assert math.isnan(float(top3_entropy(target[:1])))
    assert verdict("fly", target, drafts, theta=0.3, window=3) == (8, 0, 1)
    # the same low-entropy row with every logit finite: H ≈ 5e-4 < 0.3 revokes
    target = torch.cat([fly_target("l"), fly_target("h" * 8)])
    assert verdict("fly", target, drafts, theta=0.3, window=3)[:2] == (0, 0)


def test_fly_sampling_uses_the_temperature_only():
    # top_k = 1 would give the runner-up probability 0; the reference's two samples come from softmax(z / T)
    target = torch.stack([row(V, {0: 1.0, 1: 0.8}), row(V, {0: 1.0})])
    accepted = sum(verdict("fly", target, [1], SamplingParams(1.0, top_k=1), seed=s)[0] for s in range(200))
    p1 = math.exp(0.8) / (math.exp(1.0) + math.exp(0.8) + 6 * math.exp(NEG))
    assert stats.binomtest(accepted, 200, 1 - (1 - p1) ** 2).pvalue > 1e-3


# -- typical (FasterDecoding/Medusa@e2a5d20, fast path) ----------------------------------------------------------------
def medusa_floor_np(probs: np.ndarray, epsilon: float, delta: float) -> float:
    entropy = -float(np.sum(probs * np.log(probs + 1e-5)))
    return min(epsilon, delta * math.exp(-entropy))


def test_typical_at_temperature_0_is_exact_match():
    target = torch.stack([row(V, {0: 1.0, 1: 0.99}), row(V, {2: 1.0})])  # p(1) ≈ 0.5: far above any floor
    assert verdict("typical", target, [1]) == (0, 0, 0)
    assert verdict("typical-greedy", target, [1]) == (1, 2, 1)  # the variant relaxes


def test_typical_sampling_accepts_above_the_floor_and_emits_the_argmax_without_drawing():
    target = torch.stack([row(V, {0: 2.0, 1: 1.0, 2: -1.0}), row(V, {0: 2.0, 3: 1.5}), row(V, {4: 1.0})])
    g = torch.Generator().manual_seed(5)
    before = g.get_state()
    policy = make_policy("typical")
    v = policy.verify(Block(torch.tensor([1, 3]), target, None, T1, g, {}))
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (2, 4, 2)  # both drafts above the floor; bonus = argmax
    assert torch.equal(g.get_state(), before)  # deterministic: no random number drawn
    v = policy.verify(Block(torch.tensor([2, 0]), target, None, T1, g, {}))  # p(2) ≈ 0.035 < 0.09 (peaked row)
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (0, 0, 0)


def test_typical_floor_is_strict_and_read_from_the_tempered_distribution():
    target = torch.stack([row(V, {0: 2.0, 1: 1.0}), row(V, {3: 1.0})])
    p1 = float(torch.softmax(target[0] / 0.7, -1)[1])  # float32, as the rule computes it
    big = {"delta": 1e9}  # floor = ε
    assert verdict("typical", target, [1], SamplingParams(0.7), epsilon=p1, **big)[0] == 0  # p(d) > ε is strict
    below = float(np.nextafter(np.float32(p1), np.float32(0)))
    assert verdict("typical", target, [1], SamplingParams(0.7), epsilon=below, **big)[0] == 1
    # the run's top-k/top-p do not enter the test: top_k = 1 would give p(1) = 0
    assert verdict("typical", target, [1], SamplingParams(0.7, top_k=1, top_p=0.5), epsilon=below, **big)[0] == 1
    # a lower temperature sharpens p: the same draft falls under the same ε
    assert verdict("typical", target, [1], SamplingParams(0.3), epsilon=below, **big)[0] == 0


def test_typical_entropy_has_medusas_epsilon_inside_the_log():
    """At V = 2000, −Σ p·ln(p + 1e-5) is ~0.02 nats below the entropy: the floor δ·e^−H is 2 % higher. A draft
    between the two floors is rejected (the exact entropy would accept it)."""
    vocab, draft = 2000, 7
    z = torch.zeros(vocab)
    z[0] = 3.0
    z[draft] = 0.5
    p = torch.softmax(z.double(), -1).numpy()
    exact_h = -float(np.sum(p * np.log(p)))
    medusa_h = -float(np.sum(p * np.log(p + 1e-5)))
    assert exact_h - medusa_h > 0.015
    # δ so that p(d) sits halfway between δ·e^−H(exact) (below it) and δ·e^−H(Medusa) (above it)
    delta = p[draft] / math.exp(-(exact_h + medusa_h) / 2)
    assert delta * math.exp(-exact_h) < p[draft] < delta * math.exp(-medusa_h)
    target = torch.stack([z, row(vocab, {1: 1.0})])
    assert verdict("typical", target, [draft], T1, epsilon=1.0, delta=delta)[0] == 0
    assert verdict("typical", target, [draft], T1, epsilon=1.0, delta=delta * 0.97)[0] == 1
    assert verdict("typical-greedy", target, [draft], epsilon=1.0, delta=delta)[0] == 0


def test_typical_defaults_are_medusa_generates():
    assert make_policy("typical").knobs.model_dump() == {"epsilon": 0.09, "delta": 0.3}


def slow_typical(target: np.ndarray, drafts: list[int], temperature: float, epsilon: float, delta: float):
    """Medusa's fast path from its formula, in float64; also the smallest relative distance to a floor."""
    closest = math.inf
    for i, d in enumerate(drafts):
        z = target[i] / temperature
        p = np.exp(z - z.max())
        p /= p.sum()
        floor = medusa_floor_np(p, epsilon, delta)
        closest = min(closest, abs(p[d] - floor) / floor)
        if not p[d] > floor:
            return i, int(np.argmax(target[i])), closest
    return len(drafts), int(np.argmax(target[len(drafts)])), closest


def test_typical_sampling_agrees_with_a_slow_implementation_verdict_for_verdict():
    """Medusa's fast path draws no random number, so the check is equality on random blocks (blocks with a draft
    within 1e-4 of its floor, where float32 and float64 may disagree, are skipped and counted)."""
    g = torch.Generator().manual_seed(3)
    policy = make_policy("typical")
    compared = 0
    for seed in range(300):
        target = torch.randn(7, 30, generator=g) * (0.5 + 3 * torch.rand(7, 1, generator=g))
        ranks = torch.randint(0, 4, (6,), generator=g)
        drafts = target[:6].argsort(-1, descending=True)[torch.arange(6), ranks].tolist()
        temperature = [0.5, 1.0, 1.5][seed % 3]
        n, token, closest = slow_typical(target.double().numpy(), drafts, temperature, 0.09, 0.3)
        if closest < 1e-4:
            continue
        v = policy.verify(Block(torch.tensor(drafts), target, None, SamplingParams(temperature, top_p=0.9), g, {}))
        assert (v.n_accepted, v.next_token) == (n, token), seed
        assert v.n_relaxed == sum(drafts[i] != int(target[i].argmax()) for i in range(n))
        compared += 1
    assert compared > 250


# -- margin (5SSjw/MARS@8909b41) -----------------------------------------------------------------------------------------
def mars_outcomes(name, target, drafts, sampling, n=200, draft=None, **knobs):
    return [verdict(name, target, drafts, sampling, draft=draft, seed=s, **knobs) for s in range(n)]


def test_margin_at_temperature_0_and_below_1e5_is_exact_match():
    target = torch.stack([row(V, {0: 10.0, 1: 9.9}), row(V, {3: 1.0})])  # ratio 0.99: the gate would be on
    assert verdict("margin", target, [1]) == (0, 0, 0)
    assert verdict("margin", target, [1], SamplingParams(1e-5)) == (0, 0, 0)
    assert verdict("margin-greedy", target, [1]) == (1, 3, 1)  # the variant relaxes


def test_margin_gate_accepts_the_runner_up_with_no_draw():
    target = torch.stack([row(V, {0: 10.0, 1: 9.5}), row(V, {3: 1.0})])  # ratio 0.95 > 0.9
    draft = torch.stack([row(V, {1: 5.0})])  # q(1) ≈ 1: the rejection test alone would accept w.p. p(1) ≈ 0.38
    outcomes = mars_outcomes("margin", target, [1], T1, draft=draft)
    assert {o[:2] for o in outcomes} == {(1, 3)}  # every seed: accepted, then the bonus (p_1 is one-hot on 3)
    relaxed = sum(o[2] for o in outcomes)  # counted when the gate-off test would have rejected
    assert stats.binomtest(relaxed, 200, 1 - 1 / (1 + math.exp(0.5))).pvalue > 1e-3


def test_margin_gate_rejects_a_third_token_and_draws_from_the_full_p():
    target = torch.stack([row(4, {0: 10.0, 1: 9.5, 2: 9.4}), row(4, {3: 1.0})])
    p = torch.softmax(target[0].double(), -1).numpy()
    outcomes = mars_outcomes("margin", target, [2], T1, n=1500)
    assert all(o[0] == 0 for o in outcomes)
    counts = np.bincount([o[1] for o in outcomes], minlength=4)
    assert counts[2] > 0  # the rejected draft itself can be drawn: the full p, not a residual
    assert stats.chisquare(counts[:3], p[:3] / p[:3].sum() * counts.sum()).pvalue > 1e-3


def test_margin_ratio_edge_is_strict_in_double():
    target = torch.stack([row(V, {0: 10.0, 1: 9.0}), row(V, {3: 1.0})])
    ratio = 18.0 / (20.0 + 1e-10)  # at T = 0.5 the processed logits are 20 and 18
    below = math.nextafter(ratio, -math.inf)
    sampling = SamplingParams(0.5)
    assert {o[0] for o in mars_outcomes("margin", target, [1], sampling, n=50, theta=below)} == {1}
    off = mars_outcomes("margin", target, [1], sampling, n=100, theta=ratio)  # ratio > θ fails: rejection test
    assert {o[0] for o in off} == {0, 1}


def test_margin_has_no_guard_for_a_nonpositive_top_logit():
    # z1 = −1, z2 = −2: the ratio is 2 > 0.9 however wide the gap, so the runner-up is accepted on every seed
    target = torch.stack([row(V, {0: -1.0, 1: -2.0}), row(V, {3: 1.0})])
    assert {o[0] for o in mars_outcomes("margin", target, [1], T1, n=50)} == {1}
    # the knob (a deviation, off by default) switches the gate off there: the rejection test, p(1) ≈ 0.27
    guarded = mars_outcomes("margin", target, [1], T1, n=300, positive_top_only=True)
    p1 = 1 / (1 + math.e)
    assert stats.binomtest(sum(o[0] for o in guarded), 300, p1).pvalue > 1e-3
    # z1 = 0: z2 / 1e-10 is hugely negative, gate off; z1 > 0 > z2: negative ratio, gate off
    for scores in ({0: 0.0, 1: -0.5}, {0: 0.5, 1: -0.1}):
        target = torch.stack([row(V, scores), row(V, {3: 1.0})])
        assert {o[0] for o in mars_outcomes("margin", target, [1], T1, n=80)} == {0, 1}


def test_margin_accepts_a_token_cut_by_top_k_when_the_ratio_is_infinite():
    # top_k = 1 leaves z1 = −1 and z2 = −inf: z2 / (z1 + 1e-10) = +inf > θ; the second topk index has p = 0
    target = torch.stack([row(V, {0: -1.0, 1: -2.0, 2: -3.0}), row(V, {3: 1.0})])
    sampling = SamplingParams(1.0, top_k=1)
    processed = process_logits(target[0], sampling, top_p_first=True)
    second = int(torch.topk(processed, 2).indices[1])  # the reference's own topk call decides which -inf token
    assert processed[second] == -math.inf
    assert {o[0] for o in mars_outcomes("margin", target, [second], sampling, n=30)} == {1}
    # z1 > 0 and z2 = −inf: the ratio is −inf, gate off; the draft has p = 0 and is always rejected
    target = torch.stack([row(V, {0: 1.0, 1: -2.0}), row(V, {3: 1.0})])
    assert {o[:2] for o in mars_outcomes("margin", target, [1], sampling, n=30)} == {(0, 0)}


def test_margin_ties_for_the_runner_up_follow_torch_topk():
    target = torch.stack([row(V, {0: 10.0, 4: 9.5, 2: 9.5}), row(V, {3: 1.0})])  # 2 and 4 tie for second
    in_top2 = int(torch.topk(target[0], 2).indices[1])
    other = 6 - in_top2
    assert {o[0] for o in mars_outcomes("margin", target, [in_top2], T1, n=30)} == {1}
    assert {o[0] for o in mars_outcomes("margin", target, [other], T1, n=30)} == {0}  # gate on, not in top 2


def test_margin_processes_top_p_before_top_k_as_mars():
    # run order: top-k (2 tokens: 0.525, 0.475), then top-p 0.5 keeps one: z2 = −inf, the gate is off and p(1) = 0.
    # MARS's order: top-p on the full distribution keeps both, top-k keeps 2: ratio 0.95 > 0.9, the runner-up passes
    target = torch.stack([row(5, {0: 2.0, 1: 1.9, 2: 1.0, 3: 0.5, 4: 0.0}, rest=0.0), row(5, {3: 1.0})])
    sampling = SamplingParams(1.0, top_k=2, top_p=0.5)
    assert {o[0] for o in mars_outcomes("margin", target, [1], sampling, n=30)} == {1}


def test_margin_without_two_tokens_has_no_gate():
    target = torch.tensor([[1.0], [1.0]])
    assert verdict("margin", target, [0], T1, theta=-5.0)[:2] == (1, 0)  # p(0) = 1: accepted by the test


# -- the relaxed-target family (graphcore-research/relaxed-spec-dec-repro@c28353f) --------------------------------------
HALF = torch.tensor([0.0, 0.0, -math.inf, -math.inf])  # p = [.5, .5, 0, 0]
OTHER_HALF = torch.tensor([0.0, -math.inf, 0.0, -math.inf])  # q = [.5, 0, .5, 0]


def test_casc_opt_defers_only_on_a_strict_inequality():
    target, draft = torch.stack([HALF, HALF]), OTHER_HALF[None]
    # max q = max p = 0.5, TV = 0.5. α = 0: 0.5 < 0.5 is false → π = q: the draft (q(2) = .5) is always accepted
    assert {verdict("casc-opt", target, [2], T1, draft, s, alpha=0.0)[0] for s in range(20)} == {1}
    # α = −0.001: 0.5 < 0.5005 → π = p, p(2) = 0: always rejected, residual (p − q)+ = δ_1
    assert {verdict("casc-opt", target, [2], T1, draft, s, alpha=-0.001)[:2] for s in range(20)} == {(0, 1)}


def test_casc_tok_alpha_0_is_the_single_first_argmax_and_not_strict():
    target = torch.stack([torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.zeros(4)])  # a tie at the top: tokens 0 and 1
    draft = torch.log(torch.tensor([[0.1, 0.6, 0.2, 0.1]]))
    policy = make_policy("casc-tok", {"alpha": 0.0})
    b = block(target, [1], T1, draft)
    p = probs(b)
    p1 = float(p[1])
    # T = {0} (the first argmax only), η = 0.9: π(1) = 0.9·p(1); were both tied tokens in T, π(1) = 0.6 + 0.3·p(1)
    accept, residual = relaxed_row(policy, b)
    assert accept == pytest.approx(0.9 * p1)
    expected = 0.9 * p
    expected[0] += 0.1
    torch.testing.assert_close(residual, expected)  # π ≠ p: α = 0 is not the strict end
    assert relaxed_row(make_policy("casc-tok", {"alpha": 1.0}), b)[0] == pytest.approx(0.6)


def test_fuzzy_uses_the_draft_when_the_divergence_equals_the_threshold():
    target = torch.stack([torch.log(torch.tensor([0.5, 0.3, 0.2])), torch.zeros(3)])
    draft = torch.log(torch.tensor([[0.2, 0.6, 0.2]]))
    b = block(target, [1], T1, draft)
    p, q = probs(b), probs(b, "q")
    d = float(divergence(p, q, "js"))
    q1, p1 = float(q[1]), float(p[1])
    assert relaxed_row(make_policy("fuzzy", {"threshold": d}), b)[0] == pytest.approx(q1)  # D ≤ T
    below = float(np.nextafter(np.float32(d), np.float32(-np.inf)))  # D is float32, and T is compared in float32
    assert relaxed_row(make_policy("fuzzy", {"threshold": below}), b)[0] == pytest.approx(p1)


def test_fuzzy_kl_counts_a_zero_draft_probability_as_float32_tiny():
    p = torch.tensor([0.5, 0.5, 0.0])
    q = torch.tensor([1.0, 0.0, 0.0])
    tiny_log = math.log(torch.finfo(torch.float32).tiny)  # ≈ −87.34
    expected = 0.5 * (math.log(0.5) - 0.0) + 0.5 * (math.log(0.5) - tiny_log)
    assert float(divergence(p, q, "kl")) == pytest.approx(expected, rel=1e-6)


def test_contrastive_puts_no_mass_outside_the_targets_support():
    target = torch.stack([torch.tensor([2.0, 1.5, 1.0, 0.5]), torch.zeros(4)])
    draft = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    sampling = SamplingParams(1.0, top_k=2)  # p's support: tokens 0 and 1
    b = block(target, [3], sampling, draft)
    accept, pi = relaxed_row(make_policy("contrastive", {"beta": 0.5}), b)
    assert accept == 0.0
    assert pi[2:].abs().sum() == 0
    zp, zq = target[0, :2], draft[0, :2]
    torch.testing.assert_close(pi[:2], torch.softmax(1.5 * zp - 0.5 * zq, -1))
    # the draft outside the support is always rejected, and the next token comes from (π − q)+ on the support
    assert {verdict("contrastive", target, [3], sampling, draft, s, beta=0.5)[0] for s in range(20)} == {0}


def test_cactus_edges_p_one_and_a_budget_that_clips_to_one():
    target = torch.stack([torch.tensor([0.0, -math.inf, -math.inf]), torch.zeros(3)])  # p = δ_0
    draft = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    b = block(target, [0], T1, draft)
    accept, residual = relaxed_row(make_policy("cactus", {"delta": 10.0}), b)
    assert accept == 1.0 and torch.equal(residual, torch.tensor([1.0, 0.0, 0.0]))  # factor 1 at p = 1
    target = torch.stack([torch.log(torch.tensor([0.5, 0.3, 0.2])), torch.zeros(3)])
    b = block(target, [1], T1, draft)
    assert relaxed_row(make_policy("cactus", {"delta": 10.0}), b)[0] == 1.0  # γ clipped to 1


def test_mentored_and_ensemble_ends():
    from relaxbench.errors import ConfigError

    with pytest.raises(ConfigError):
        make_policy("mentored", {"alpha": 1.0})  # the reference requires α < 1
    target = torch.stack([torch.log(torch.tensor([0.9, 0.05, 0.05])), torch.zeros(3)])
    draft = torch.log(torch.tensor([[0.05, 0.9, 0.05]]))
    assert {verdict("ensemble", target, [1], T1, draft, s, w=0.0)[0] for s in range(30)} == {1}  # w = 0 accepts all


# -- statistical conformance of every sampling-mode rule -------------------------------------------------------------
VS, KS = 6, 3  # a small vocabulary and block


def np_softmax(z: np.ndarray) -> np.ndarray:
    finite = np.isfinite(z)
    e = np.where(finite, np.exp(np.where(finite, z, 0) - z[finite].max()), 0.0)
    return e / e.sum()


def np_process(z: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    """The run's processing from its definition: temperature, then top-k (ties with the k-th stay), then top-p on
    what top-k kept (drop a token when the mass of the more likely tokens before it already reaches top_p)."""
    z = np.asarray(z, np.float64) / sampling.temperature
    if 0 < sampling.top_k < z.size:
        z = np.where(z < np.sort(z)[::-1][sampling.top_k - 1], -np.inf, z)
    if sampling.top_p < 1:
        order = np.argsort(-z, kind="stable")
        probs = np_softmax(z[order])
        drop = (np.cumsum(probs) - probs) >= sampling.top_p
        z = z.copy()
        z[order[drop]] = -np.inf
    return z


def normalised(w: np.ndarray) -> np.ndarray:
    w = np.maximum(w, 0.0)
    return w / w.sum() if w.sum() > 0 else w


def chain(accept: list[float], residual: list[np.ndarray], bonus: np.ndarray) -> np.ndarray:
    """[k+1, V] P(n accepted, next token) of a walk that accepts position j w.p. accept[j] independently."""
    out = np.zeros((len(accept) + 1, bonus.size))
    reach = 1.0
    for j, a in enumerate(accept):
        out[j] = reach * (1 - a) * normalised(residual[j])
        reach *= a
    out[-1] = reach * bonus
    return out


def rejection_np(p_rows, q_rows, drafts, pi_accept, pi_residual, bonus) -> np.ndarray:
    accept = [min(1.0, pi_accept[i] / q_rows[i][d]) for i, d in enumerate(drafts)]
    return chain(accept, [pi_residual[i] - q_rows[i] for i in range(len(drafts))], bonus)


def slow_family(name, knobs, target, draft, drafts, sampling, extra=None) -> np.ndarray:
    """Exact outcome probabilities of each q-based rule, from its formula (float64)."""
    k = len(drafts)
    p = [np_softmax(np_process(target[i], sampling)) for i in range(k + 1)]
    q = [np_softmax(np_process(draft[i], sampling)) for i in range(k)]
    x = drafts
    if name == "speculative-sampling":
        return rejection_np(p, q, x, [p[i][x[i]] for i in range(k)], p, p[k])
    if name == "mentored":
        return rejection_np(p, q, x, [p[i][x[i]] / (1 - knobs["alpha"]) for i in range(k)], p, p[k])
    if name == "ensemble":
        w = knobs["w"]
        return rejection_np(p, q, x, [w * p[i][x[i]] + (1 - w) * q[i][x[i]] for i in range(k)], p, p[k])
    if name == "cactus":
        accept, residual = [], []
        for i in range(k):
            px = p[i][x[i]]
            gamma = min(px + math.sqrt(2 * knobs["delta"] * px * (1 - px)), 1.0)
            h = p[i] * ((1 - gamma) / (1 - px) if px < 1 else 1.0)
            h[x[i]] = gamma
            accept.append(gamma)
            residual.append(h)
        return rejection_np(p, q, x, accept, residual, p[k])
    pis = []
    for i in range(k):
        if name == "casc-opt":
            tv = np.maximum(p[i] - q[i], 0).sum()
            pis.append(p[i] if q[i].max() < p[i].max() - knobs["alpha"] * tv else q[i])
        elif name == "casc-tok":
            z, alpha = target[i], knobs["alpha"]  # the raw (pre-temperature) logits
            if alpha == 0:  # the single argmax, the first index among ties
                top = np.arange(z.size) == int(np.argmax(z))
            else:
                top = z >= z.max() + (math.log1p(-alpha) if alpha < 1 else -math.inf)
            eta = q[i][~top].sum()
            pis.append(np.where(top, q[i], 0.0) + eta * p[i])
        elif name == "fuzzy":
            tiny = float(np.finfo(np.float32).tiny)
            lp, lq = np.log(np.maximum(p[i], tiny)), np.log(np.maximum(q[i], tiny))
            lm = np.log(np.maximum(0.5 * (p[i] + q[i]), tiny))
            js = 0.5 * (np.sum(p[i] * (lp - lm)) + np.sum(q[i] * (lq - lm)))
            pis.append(q[i] if js <= knobs["threshold"] else p[i])
        elif name == "contrastive":
            beta, t = knobs["beta"], sampling.temperature
            scores = ((1 + beta) * target[i] - beta * draft[i]) / t
            pis.append(np_softmax(np.where(p[i] > 0, scores, -np.inf)))
        elif name == "reflective":
            alpha = knobs["alpha"]
            fused = (1 - alpha) * target[i] + alpha * extra[2 + i]  # the row read after R (3 tokens), d_1..d_{i−1}
            pis.append(np.maximum(p[i], np_softmax(np_process(fused, sampling))))
    if name == "reflective":
        return rejection_np(p, q, x, [pis[i][x[i]] for i in range(k)], p, p[k])
    return rejection_np(p, q, x, [pis[i][x[i]] for i in range(k)], pis, p[k])


def slow_fly(target, drafts, sampling, theta, window) -> np.ndarray:
    """FLy's chain mode at T > 0: two samples from softmax(z/T) per position, the deferred window and the entropy
    gate from the raw logits, enumerated over every pattern of hits."""
    k = len(drafts)
    p = [np_softmax(target[i] / sampling.temperature) for i in range(k + 1)]
    hit = [1 - (1 - p[i][d]) ** 2 for i, d in enumerate(drafts)]

    def entropy(z):
        top = np.sort(np_softmax(z))[::-1][:3]
        return -float(np.sum(top * np.log(top)))

    out = np.zeros((k + 1, target.shape[1]))
    for pattern in np.ndindex(*([2] * k)):
        prob = np.prod([hit[i] if m else 1 - hit[i] for i, m in enumerate(pattern)])
        accepted = []
        for i, m in enumerate(pattern):
            forgiven = (not m and i + window < k and all(pattern[i + 1:i + window])
                        and not (theta > 0.01 and entropy(target[i]) < theta))
            accepted.append(bool(m) or forgiven)
        n = next((i for i, a in enumerate(accepted) if not a), k)
        if n == k:
            out[k] += prob * p[k]
        else:
            without = p[n].copy()
            without[drafts[n]] = 0
            out[n] += prob * without / without.sum()
    return out


def mars_row(processed: np.ndarray, d: int, theta: float) -> tuple[bool, bool]:
    """(gate on, draft among the two ``torch.topk`` indices) for one row of MARS-processed logits."""
    values, indices = torch.topk(torch.as_tensor(processed, dtype=torch.float32), 2)
    z1, z2 = values.tolist()
    return z2 / (z1 + 1e-10) > theta, d in indices.tolist()


def slow_margin(target, draft, drafts, sampling, theta) -> np.ndarray:
    """MARS's sampling branch from its formula, with transformers' warpers in MARS's order; ``draft`` None: q = 1."""
    k = len(drafts)
    processed = hf_process(torch.as_tensor(target, dtype=torch.float32), sampling, top_p_first=True).double().numpy()
    p = [np_softmax(processed[i]) for i in range(k + 1)]
    accept, residual = [], []
    for i, d in enumerate(drafts):
        gate, in_top2 = mars_row(processed[i], d, theta)
        if gate:
            accept.append(1.0 if in_top2 else 0.0)
            residual.append(p[i])
        else:
            q_d = max(np_softmax(draft[i])[d], 1e-10) if draft is not None else 1.0
            accept.append(min(1.0, p[i][d] / q_d))
            without = p[i].copy()
            without[d] = max(0.0, p[i][d] - q_d)
            residual.append(without)
    return chain(accept, residual, p[k])


def outcome_counts(name, knobs, target, draft, drafts, sampling, trials, extras=None) -> np.ndarray:
    policy = make_policy(name, knobs)
    if extras:
        policy.bind(PolicyEnv(CountingTokenizer(), VS, torch.device("cpu")))
    counts = np.zeros((len(drafts) + 1, VS))
    t = torch.as_tensor(target, dtype=torch.float32)
    dl = None if draft is None else torch.as_tensor(draft, dtype=torch.float32)
    for seed in range(trials):
        v = policy.verify(Block(torch.tensor(drafts), t, dl, sampling, torch.Generator().manual_seed(seed),
                                extras or {}))
        counts[v.n_accepted, v.next_token] += 1
    return counts


def same_distribution_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    """Chi-square p-value on the joint (n, next token); cells expected below 5 counts are pooled; an outcome of
    probability 0 that occurred gives 0."""
    counts, expected = counts.ravel(), expected.ravel()
    n = counts.sum()
    assert expected.sum() == pytest.approx(1.0, abs=1e-6)
    if counts[expected < 1e-12].sum():
        return 0.0
    exp = expected * n
    small = (exp < 5) & (expected >= 1e-12)
    big = exp >= 5
    observed = np.append(counts[big], counts[small].sum()) if small.any() else counts[big]
    expect = np.append(exp[big], exp[small].sum()) if small.any() else exp[big]
    assert big.sum() >= 3, "the case is too lopsided to test anything"
    return float(stats.chisquare(observed, expect / expect.sum() * observed.sum()).pvalue)


def assert_same_distribution(counts: np.ndarray, expected: np.ndarray) -> None:
    assert same_distribution_pvalue(counts, expected) > 1e-3


def sampling_case(seed: int, scale: float = 1.2):
    g = np.random.default_rng(seed)
    target = g.normal(size=(KS + 1, VS)) * scale
    draft = target[:KS] + g.normal(size=(KS, VS)) * 1.0
    extra = g.normal(size=(3 + KS, VS)) * 1.5
    drafts = [int(np.argsort(-draft[i])[[0, 1, 0][i]]) for i in range(KS)]
    return target.astype(np.float32).astype(np.float64), draft.astype(np.float32).astype(np.float64), \
        extra.astype(np.float32).astype(np.float64), drafts


FAMILY_CASES = [
    ("speculative-sampling", {}),
    ("mentored", {"alpha": 0.5}),
    ("cactus", {"delta": 0.25}),
    ("casc-opt", {"alpha": 0.0}),
    ("casc-opt", {"alpha": -0.3}),
    ("casc-tok", {"alpha": 0.0}),
    ("casc-tok", {"alpha": 0.35}),
    ("fuzzy", {"threshold": 0.05}),
    ("fuzzy", {"threshold": 0.3}),
    ("ensemble", {"w": 0.8}),
    ("contrastive", {"beta": 0.5}),
    ("reflective", {"alpha": 0.5}),
]
STAT_SAMPLINGS = [SamplingParams(1.0), SamplingParams(0.8, top_k=4, top_p=0.9)]
TRIALS = 2500


@pytest.mark.parametrize("sampling", STAT_SAMPLINGS, ids=["T=1", "T=0.8,top-k,top-p"])
@pytest.mark.parametrize("name,knobs", FAMILY_CASES, ids=[f"{n}{k}" for n, k in FAMILY_CASES])
@pytest.mark.slow
def test_q_based_rules_follow_their_formula_in_distribution(name, knobs, sampling):
    target, draft, extra, drafts = sampling_case(7)
    assert all(np_softmax(np_process(draft[i], sampling))[d] > 0 for i, d in enumerate(drafts))  # drafts q can draw
    extras = {"extra_logits": torch.as_tensor(extra, dtype=torch.float32)} if name == "reflective" else None
    expected = slow_family(name, knobs, target, draft, drafts, sampling, extra)
    assert_same_distribution(outcome_counts(name, knobs, target, draft, drafts, sampling, TRIALS, extras), expected)


@pytest.mark.parametrize("sampling", STAT_SAMPLINGS, ids=["T=1", "T=0.8,top-k,top-p"])
def test_fly_sampling_follows_the_two_sample_window_rule_in_distribution(sampling):
    k, window = 4, 2  # forgiveness possible at positions 0 and 1
    g = np.random.default_rng(4)
    target = (g.normal(size=(k + 1, VS)) * 0.8).astype(np.float32).astype(np.float64)
    target[1] = [3.0, -3.0, -3.0, -3.0, -3.0, -3.0]  # a low-entropy row: its forgiveness is revoked at θ = 0.3
    drafts = [int(np.argmax(target[i])) for i in range(k)]
    drafts[0] = int(np.argsort(-target[0])[1])
    for theta in (0.3, 0.005):
        expected = slow_fly(target, drafts, sampling, theta, window)
        counts = outcome_counts("fly", {"theta": theta, "window": window}, target, None, drafts, sampling, TRIALS)
        assert_same_distribution(counts, expected)


MARS_SAMPLINGS = [SamplingParams(1.0), SamplingParams(0.8, top_k=4, top_p=0.7)]


def margin_case(last: str):
    """k = 3, V = 6. Position 0: gate on (ratio 0.95), the runner-up drafted (always accepted). Position 1: gate
    off (ratio 0.6), accepted with p(1)/q(1) ≈ 0.5. Position 2: gate on (ratio 0.97) with a third token drafted
    ("reject": always rejected, the next token from the full p) or the argmax ("bonus": accepted, then the bonus).
    Under T = 0.8, top-k 4, top-p 0.7 (MARS's order) the gates stay as they are."""
    target = np.array([[2.0, 1.9, 0.3, -0.5, 0.1, -1.0],
                       [1.0, 0.6, 0.4, 0.2, -0.2, 0.0],
                       [1.5, 1.45, 1.4, 0.0, -0.5, -1.0],
                       [0.5, 0.0, 1.0, -0.3, 0.2, 0.4]])
    draft = np.array([[1.0, 2.5, 0.0, 0.0, 0.0, 0.0],
                      [0.0, 1.2, 0.0, 0.0, 0.0, 0.0],
                      [0.5, 0.0, 0.9, 0.0, 0.0, 0.0]])
    return target, draft, [1, 1, 2 if last == "reject" else 0]


@pytest.mark.parametrize("last", ["reject", "bonus"])
@pytest.mark.parametrize("sampling", MARS_SAMPLINGS, ids=["T=1", "T=0.8,top-k,top-p"])
@pytest.mark.parametrize("with_q", [True, False], ids=["draft q", "no q"])
def test_margin_sampling_follows_mars_in_distribution(sampling, with_q, last):
    target, draft, drafts = margin_case(last)
    draft = draft if with_q else None
    expected = slow_margin(target, draft, drafts, sampling, 0.9)
    assert_same_distribution(outcome_counts("margin", {}, target, draft, drafts, sampling, TRIALS), expected)


@pytest.mark.parametrize("sampling", MARS_SAMPLINGS, ids=["T=1", "T=0.8,top-k,top-p"])
def test_margin_counts_drafts_the_gate_accepts_and_its_own_test_would_reject(sampling):
    target, draft, drafts = margin_case("bonus")
    processed = hf_process(torch.as_tensor(target, dtype=torch.float32), sampling, top_p_first=True).double().numpy()
    policy = make_policy("margin")
    relaxed = 0
    for seed in range(300):
        v = policy.verify(block(target, drafts, sampling, draft, seed))
        u = torch.rand(len(drafts), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).tolist()
        expected = 0
        for i in range(v.n_accepted):
            gate, _ = mars_row(processed[i], drafts[i], 0.9)
            ratio = np_softmax(processed[i])[drafts[i]] / max(np_softmax(draft[i])[drafts[i]], 1e-10)
            expected += gate and u[i] > min(1.0, ratio)
        assert v.n_relaxed == expected, seed
        relaxed += v.n_relaxed
    assert relaxed > 0


def test_the_statistical_check_rejects_a_wrong_formula():
    """The same sample sizes have the power to tell a rule from a near miss: mentored against speculative sampling's
    outcome law, and MARS against a version whose residual is (p − q)+ rather than p without the draft."""
    target, draft, _, drafts = sampling_case(7)
    counts = outcome_counts("mentored", {"alpha": 0.5}, target, draft, drafts, T1, TRIALS)
    assert same_distribution_pvalue(counts, slow_family("speculative-sampling", {}, target, draft, drafts, T1)) < 1e-3
    target, draft, drafts = margin_case("reject")
    counts = outcome_counts("margin", {}, target, draft, drafts, T1, TRIALS)
    wrong = slow_margin(target, draft, drafts, T1, 0.9)
    p1 = np_softmax(target[1])
    q1 = np_softmax(draft[1])
    reach = 1.0  # position 0 is always accepted; position 1's rejections redistributed by (p − q)+
    reject1 = 1 - min(1.0, p1[1] / q1[1])
    wrong[1] = reach * reject1 * normalised(p1 - q1)
    assert same_distribution_pvalue(counts, wrong) < 1e-3


def test_casc_tok_top_set_with_non_finite_logits_follows_the_reference():
    """0 < α < 1: the bound max z + ln(1 − α) is NaN or +inf when the row holds NaN or +inf, so T is empty; α = 0
    and α = 1 mask the non-finite logits first (the argmax of the finite ones; every finite one)."""
    from relaxbench.policies.relaxed_target import SpecCascadeToken

    nan_row = torch.tensor([1.0, math.nan, 0.5, -math.inf])
    inf_row = torch.tensor([1.0, math.inf, 0.9, -math.inf])
    for row_, alpha, expected in ((nan_row, 0.5, [0, 0, 0, 0]), (inf_row, 0.5, [0, 0, 0, 0]),
                                  (nan_row, 0.0, [1, 0, 0, 0]), (inf_row, 1.0, [1, 0, 1, 0]),
                                  (torch.tensor([1.0, 0.9, 0.2, -math.inf]), 0.5, [1, 1, 0, 0])):
        rule = make_policy("casc-tok", {"alpha": alpha})
        assert isinstance(rule, SpecCascadeToken)
        assert rule.top_set(row_).int().tolist() == expected, (row_, alpha)
        b = block(torch.stack([row_, torch.zeros(4)]), [0], T1, torch.zeros(1, 4))
        assert rule.parts(Batch.of_blocks([b]))[0][0].int().tolist() == expected  # the set a batch reads


def test_a_rule_whose_verdicts_changed_does_not_resume_its_earlier_runs():
    """``revision`` enters the run key (above 0 only, so the keys of unchanged rules stay as they were)."""
    from relaxbench.harness import plan as plan_module
    from relaxbench.harness.suite import SuiteSpec

    suite = SuiteSpec(target="tiny-random-target", draft="tiny-random-draft", methods=("typical", "exact"),
                      tasks=("humaneval",), limit=1)
    built = plan_module.build_plan(suite)
    typical, exact = (plan_module._arm_identity(arm) for arm in built.arms if arm.method.policy in ("typical", "exact"))
    assert typical["policy_revision"] == POLICIES.get("typical").origin.revision >= 1
    assert "policy_revision" not in exact
    for name in ("typical", "margin", "fly", "casc-tok"):  # rules whose verdicts changed once stored
        assert POLICIES.get(name).origin.revision >= 1, name
