"""The relaxed verification rules on hand-built and random blocks (tensors only, no model).

* hand-built logits with known answers, covering each rule's edges;
* the strict end: every rule at its ``strict_knobs`` gives exactly the lossless baseline's verdicts;
* monotonicity: loosening a knob never lowers the accepted count on the same block (same uniforms);
* ``n_relaxed`` is the number of accepted drafts the strict test would have rejected;
* the shared rejection sampler's acceptance probability and residual, including its point-mass and ``relax`` paths;
* the reductions' tie-break (the first index of the maximum) and top values with ties and -inf.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.spatial.distance import jensenshannon

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import argmax, top_groups, top_values
from relaxbench.ops.sampling import SamplingParams, logits_to_probs
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import Batch, Block, Need, Outcome, PolicyEnv
from relaxbench.policies.fly import top3_entropy, window_candidates
from relaxbench.policies.reflective import ReflectiveVerification
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.policies.strict import lossless_verdict
from relaxbench.policies.verdict import finish

GREEDY = SamplingParams()

SAMPLING_SETTINGS = [SamplingParams(1.0), SamplingParams(0.8, top_k=8, top_p=0.95)]
NEG = -30.0  # "absent" logit: probability ~1e-13 relative to the tokens that matter


# -- building blocks ----------------------------------------------------------------------------------------------
def row(v: int, scores: dict[int, float], rest: float = NEG) -> torch.Tensor:
    out = torch.full((v,), rest)
    for token, score in scores.items():
        out[token] = score
    return out


def greedy_block(logits: torch.Tensor, drafts: list[int], extras: dict | None = None) -> Block:
    return Block(torch.tensor(drafts), logits.float(), None, GREEDY, None, extras or {})


def decide(policy_name: str, block: Block, **knobs) -> Outcome:
    return make_policy(policy_name, knobs).verify(block)


def random_greedy_block(seed: int, k: int = 15, vocab: int = 48) -> Block:
    """Logits of varied sharpness and offset (so z1 <= 0 occurs); drafts mostly the argmax, else a near miss."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, vocab, generator=g) * (0.3 + 3 * torch.rand(k + 1, 1, generator=g))
    logits += 3 * torch.randn(k + 1, 1, generator=g)
    order = logits.argsort(dim=-1, descending=True)
    ranks = torch.where(torch.rand(k, generator=g) < 0.7, 0, torch.randint(1, 5, (k,), generator=g))
    drafts = order[torch.arange(k), ranks]
    return Block(drafts, logits, None, GREEDY, None, {})


def random_judge_extras(seed: int, block: Block, n_prompt: int = 3) -> dict[str, torch.Tensor]:
    """Reflective logits for the judge: rows for the prompt tokens and the duplicated drafts."""
    g = torch.Generator().manual_seed(seed + 10_000)
    return {"extra_logits": 2 * torch.randn(n_prompt + block.k, block.target_logits.shape[-1], generator=g)}


def random_sampling_case(seed: int, sampling: SamplingParams, k: int = 6, vocab: int = 12):
    """(drafts, target logits, draft logits) with drafts sampled from q, as a draft model would."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(k + 1, vocab, generator=g) * 2
    draft = target[:k] + torch.randn(k, vocab, generator=g) * 1.5
    q = logits_to_probs(draft, sampling)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(-1)
    return drafts, target, draft


def sampling_block(case, sampling: SamplingParams, seed: int, extras: dict | None = None,
                   with_q: bool = True) -> Block:
    drafts, target, draft = case
    return Block(drafts, target, draft if with_q else None, sampling, torch.Generator().manual_seed(seed),
                 extras or {})


# -- FLy ----------------------------------------------------------------------------------------------------------
def test_top3_entropy_is_over_the_full_softmax_not_renormalised():
    z = torch.log(torch.tensor([[0.5, 0.25, 0.25, 1e-30], [0.4, 0.3, 0.2, 0.1]]))
    expected = [1.5 * math.log(2), -(0.4 * math.log(0.4) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))]
    torch.testing.assert_close(top3_entropy(z), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6)
    assert float(top3_entropy(torch.zeros(1, 1000))) < math.log(3)  # at most ln 3 (three of 1000 equal tokens)


def candidates(matches: torch.Tensor, window: int, end: int | None = None) -> list[int]:
    k = int(matches.shape[0])
    ends = torch.full((1, k), k if end is None else end)
    return window_candidates(matches[None], window, ends)[0].nonzero().flatten().tolist()


def test_window_pattern_and_block_end():
    m = torch.tensor([False, True, True, False, True, False, True, True, True, True])
    # W = 3: a mismatch followed by two matches, and i + 3 < 10
    assert candidates(m, 3) == [0, 5]
    # position 5 with W = 5 needs i + 5 < 10: 5 + 5 = 10 is in the last W positions, so strict
    assert candidates(m, 5) == []
    assert candidates(m, 4) == [5]  # 5 + 4 = 9 < 10, m[6..8] all true
    assert candidates(m[:3], 3) == []  # k <= W: no window at all
    assert candidates(m, 3, end=8) == [0]  # a run ending at 8 (a span boundary) is the block's edge: 5 + 3 = 8


V = 8
HIGH = {0: 1.0, 1: 0.9, 2: 0.8}  # flat top-3: entropy near ln 3; argmax 0; top-2 is 1
LOW = {0: 10.0, 1: 0.0}  # near-deterministic: entropy ~ 0


def fly_logits(kinds: list[str]) -> torch.Tensor:
    return torch.stack([row(V, HIGH if kind == "high" else LOW) for kind in kinds])


def test_fly_accepts_a_mismatch_followed_by_w_minus_1_matches_at_high_entropy():
    logits = fly_logits(["high"] * 9)  # k = 8
    # mismatch at 0 (draft 1), then 7 matches; W = 3 → 0 + 3 < 8
    v = decide("fly", greedy_block(logits, [1, 0, 0, 0, 0, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.n_relaxed) == (8, 1)
    # the same block at low entropy: the gate rejects the mismatch
    v = decide("fly", greedy_block(fly_logits(["low"] * 9), [1, 0, 0, 0, 0, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.next_token) == (0, 0)


def test_fly_a_second_mismatch_inside_the_window_rejects_the_first():
    logits = fly_logits(["high"] * 9)
    v = decide("fly", greedy_block(logits, [1, 0, 1, 0, 0, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (0, 0, 0)
    # outside the window (at distance W) the second mismatch does not matter to the first
    v = decide("fly", greedy_block(logits, [1, 0, 0, 1, 0, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.n_relaxed) == (8, 2)  # the second one has its own window


def test_fly_window_reaching_the_block_end_is_strict():
    logits = fly_logits(["high"] * 9)
    # mismatch at 5 with W = 3: 5 + 3 = 8 = k, in the last W positions → rejected even though 6, 7 match
    v = decide("fly", greedy_block(logits, [0, 0, 0, 0, 0, 1, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.next_token) == (5, 0)
    # at 4: 4 + 3 = 7 < 8 → accepted
    v = decide("fly", greedy_block(logits, [0, 0, 0, 0, 1, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.n_relaxed) == (8, 1)


def test_fly_entropy_exactly_at_theta_passes():
    logits = fly_logits(["high"] * 9)
    block_drafts = [1, 0, 0, 0, 0, 0, 0, 0]
    h = float(top3_entropy(logits[:1]))  # the entropy the rule computes (a double)
    assert h == pytest.approx(-3 * (1 / 3) * math.log(1 / 3), rel=0.05)  # a flat top-3
    assert decide("fly", greedy_block(logits, block_drafts), theta=h, window=3).n_accepted == 8
    above = math.nextafter(h, math.inf)  # the next double above H
    assert decide("fly", greedy_block(logits, block_drafts), theta=above, window=3).n_accepted == 0


def test_fly_theta_inf_is_exact_and_knobs_are_checked():
    logits = fly_logits(["high"] * 9)
    v = decide("fly", greedy_block(logits, [1, 0, 0, 0, 0, 0, 0, 0]), theta="inf", window=3)
    assert (v.n_accepted, v.n_relaxed) == (0, 0)
    with pytest.raises(ConfigError, match="window"):
        make_policy("fly", {"window": 0})
    assert make_policy("fly").knobs.theta == 0.3 and make_policy("fly").knobs.window == 6


def test_top3_entropy_is_nan_with_fewer_than_three_finite_logits():
    z = torch.full((1, 8), -math.inf)
    z[0, :2] = 0.0  # two finite logits: the third "largest" log-probability is -inf and exp(-inf)·(-inf) is NaN
    assert math.isnan(float(top3_entropy(z)))
    z[0, 2] = -1.0
    assert not math.isnan(float(top3_entropy(z)))


def test_fly_entropy_gates_only_window_candidates():
    # k = 12, W = 3: mismatches at 0, 4 (window candidates), 7 (not: 8 mismatches too) and 8 (a candidate, but after
    # the rejection at 7 it cannot matter); a low-entropy row at a matching position changes nothing
    kinds = ["high"] * 13
    kinds[2] = "low"
    v = decide("fly", greedy_block(fly_logits(kinds), [1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (7, 0, 2)
    kinds[4] = "low"  # the candidate at 4 now sits on a confident row: its deferral is revoked
    v = decide("fly", greedy_block(fly_logits(kinds), [1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0]), theta=0.3, window=3)
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (4, 0, 1)


# -- margin-greedy (MARS's ratio under greedy decoding) and margin-first (AdaptiveSpec) -------------------------
def test_margin_top2_with_ratio_above_theta():
    logits = torch.stack([row(V, {0: 10.0, 1: 9.5, 2: 9.4}), row(V, {0: 10.0, 1: 8.0}), row(V, {3: 1.0})])
    assert decide("margin-greedy", greedy_block(logits[[0, 2]], [1]), theta=0.9).n_accepted == 1  # 9.5/10 > 0.9
    v = decide("margin-greedy", greedy_block(logits[[1, 2]], [1]), theta=0.9)  # 8/10 < 0.9
    assert (v.n_accepted, v.next_token) == (0, 0)
    assert decide("margin-greedy", greedy_block(logits[[1, 2]], [1]), theta=0.7).n_accepted == 1  # 8/10 > 0.7


def test_margin_rejects_a_top3_draft_however_close():
    logits = torch.stack([row(V, {0: 10.0, 1: 9.99, 2: 9.98}), row(V, {3: 1.0})])
    assert decide("margin-greedy", greedy_block(logits, [1]), theta=0.9).n_accepted == 1
    assert decide("margin-greedy", greedy_block(logits, [2]), theta=0.9).n_accepted == 0  # 9.98/10 but third


def test_margin_refuses_the_relaxation_when_z1_is_not_positive():
    # z1 <= 0: z2/z1 = 1.5 > 0.9 would accept a wide gap; the rule falls back to exact match
    logits = torch.stack([row(V, {0: -2.0, 1: -3.0}, rest=-40.0), row(V, {3: 1.0})])
    v = decide("margin-greedy", greedy_block(logits, [1]), theta=0.9)
    assert (v.n_accepted, v.next_token) == (0, 0)
    logits = torch.stack([row(V, {0: 0.0, 1: -1e-6}, rest=-40.0), row(V, {3: 1.0})])
    assert decide("margin-greedy", greedy_block(logits, [1]), theta=0.9).n_accepted == 0
    # z1 > 0 >= z2: the ratio is <= 0 and fails
    logits = torch.stack([row(V, {0: 0.5, 1: -0.01}, rest=-40.0), row(V, {3: 1.0})])
    assert decide("margin-greedy", greedy_block(logits, [1]), theta=0.0).n_accepted == 0
    assert decide("margin-greedy", greedy_block(logits, [0]), theta=0.9).n_accepted == 1  # a match is a match


def test_margin_first_promotes_only_the_first_mismatch():
    # p(d)/p(top1) = e^-0.1 ≈ 0.905 at both mismatches
    close = row(V, {0: 5.0, 1: 4.9})
    logits = torch.stack([close, row(V, {2: 5.0}), close, row(V, {3: 5.0})])
    v = decide("margin-first", greedy_block(logits, [1, 2, 1]), kappa=0.9)
    assert (v.n_accepted, v.next_token, v.n_relaxed) == (2, 0, 1)
    assert decide("margin-first", greedy_block(logits, [1, 2, 1]), kappa=0.91).n_accepted == 0
    assert decide("margin-first", greedy_block(logits, [1, 2, 1]), kappa=math.inf).n_accepted == 0
    # the first mismatch is the one judged, even when a later one would pass
    far = row(V, {0: 5.0, 1: 1.0})
    logits = torch.stack([far, close, row(V, {3: 5.0})])
    assert decide("margin-first", greedy_block(logits, [1, 1]), kappa=0.5).n_accepted == 0


def test_greedy_only_rules_refuse_sampling_and_contrastive_refuses_greedy():
    from relaxbench.decoding.loop import check_compatible

    for name in ("margin-greedy", "typical-greedy", "margin-first", "topk", "exact"):
        with pytest.raises(ConfigError, match="does not support sampling"):
            check_compatible(make_policy(name), None, SamplingParams(1.0))
    with pytest.raises(ConfigError, match="does not support greedy"):
        check_compatible(make_policy("contrastive"), None, GREEDY)


# -- typical acceptance applied to greedy decoding (typical-greedy) ------------------------------------------------
def medusa_floor(probs: np.ndarray, epsilon: float, delta: float) -> float:
    entropy = -sum(p * math.log(p + 1e-5) for p in probs)  # Medusa's entropy, 1e-5 inside the log
    return min(epsilon, delta * math.exp(-entropy))


def test_typical_flat_vs_peaked():
    flat = torch.zeros(V)
    flat[0] = 0.05  # near-uniform over 8 tokens: floor = 0.3·exp(−H) ≈ 0.3/8 < 0.09
    probs = torch.softmax(flat, -1).double().numpy()
    assert probs[1] > medusa_floor(probs, 0.09, 0.3)
    logits = torch.stack([flat, row(V, {3: 1.0})])
    assert decide("typical-greedy", greedy_block(logits, [1])).n_accepted == 1
    # peaked: the floor is epsilon = 0.09; a token at 0.05 is rejected, one at ~0.095 accepted
    peaked = torch.log(torch.tensor([0.80, 0.05, 0.095, 0.055, 0, 0, 0, 0]).clamp_min(1e-30))
    probs = torch.softmax(peaked, -1).double().numpy()
    assert medusa_floor(probs, 0.09, 0.3) == 0.09
    logits = torch.stack([peaked, row(V, {3: 1.0})])
    assert decide("typical-greedy", greedy_block(logits, [1])).n_accepted == 0
    assert decide("typical-greedy", greedy_block(logits, [2])).n_accepted == 1
    assert decide("typical-greedy", greedy_block(logits, [2]), epsilon=0.1).n_accepted == 0  # floor 0.1 > 0.095
    assert decide("typical-greedy", greedy_block(logits, [2]), epsilon="inf", delta="inf").n_accepted == 0
    assert decide("typical", greedy_block(logits, [2])).n_accepted == 0  # Medusa's own greedy mode: exact match


# -- top-K ----------------------------------------------------------------------------------------------------
def test_topk_membership():
    logits = torch.stack([row(V, {0: 3.0, 1: 2.0, 2: 1.0}), row(V, {3: 1.0})])
    assert decide("topk", greedy_block(logits, [1]), top=2).n_accepted == 1
    assert decide("topk", greedy_block(logits, [2]), top=2).n_accepted == 0
    assert decide("topk", greedy_block(logits, [2]), top=3).n_accepted == 1
    assert decide("topk", greedy_block(logits, [1]), top=1).n_accepted == 0
    with pytest.raises(ConfigError):
        make_policy("topk", {"top": 0})


# -- judge (reflective verification) -----------------------------------------------------------------------------
class WordTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [len(word) % V for word in text.split()]


def bound_judge(**knobs) -> ReflectiveVerification:
    judge = make_policy("reflective", knobs)
    judge.bind(PolicyEnv(WordTokenizer(), V, torch.device("cpu")))
    return judge


def test_judge_appends_the_prompt_and_the_duplicated_drafts():
    judge = bound_judge(prompt="one three four")
    assert judge.extra_verify_tokens(torch.tensor([5, 6])).tolist() == [3, 5, 4, 5, 6]
    assert judge.extra_verify_tokens(torch.tensor([], dtype=torch.long)) is None
    with pytest.raises(ConfigError, match="tokenizes to nothing"):
        bound_judge(prompt="   ")


def test_judge_fuses_the_reflective_row_aligned_to_each_position():
    # target: argmax 0 everywhere; the reflective rows (after R = 3 tokens) prefer the drafts
    k, n_prompt = 2, 3
    target = torch.stack([row(V, {0: 2.0, 5: 1.0}), row(V, {0: 2.0, 6: 1.0}), row(V, {0: 2.0})])
    extra = torch.stack([row(V, {7: 9.0})] * (n_prompt + k))  # misaligned rows point at token 7
    extra[n_prompt - 1] = row(V, {5: 9.0})  # read after R: predicts d_1
    extra[n_prompt] = row(V, {6: 9.0})  # read after R, d_1: predicts d_2
    block = greedy_block(target, [5, 6], {"extra_logits": extra})
    v = bound_judge(alpha=0.5).verify(block)
    assert (v.n_accepted, v.n_relaxed) == (2, 2)
    assert bound_judge(alpha=0.0).verify(block).n_accepted == 0
    # a weak reflective preference does not move the fused argmax
    extra[n_prompt - 1] = row(V, {5: 2.5, 0: 2.0})
    assert bound_judge(alpha=0.3).verify(greedy_block(target, [5, 6], {"extra_logits": extra})).n_accepted == 0


# -- the relaxed-target family: π by hand on a 4-token example ----------------------------------------------------
P4 = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
Q4 = torch.tensor([[0.2, 0.6, 0.1, 0.1]])


def family_targets(name: str, drafts: list[int], target_logits=None, draft_logits=None, **knobs):
    policy = make_policy(name, knobs)
    target_logits = torch.cat([P4.log(), P4.log()]) if target_logits is None else target_logits
    draft_logits = Q4.log() if draft_logits is None else draft_logits
    block = Block(torch.tensor(drafts), target_logits, draft_logits, SamplingParams(1.0), None, {})
    pi_accept, residual = policy.relaxed_target(Batch.of_blocks([block]))
    return float(pi_accept[0, 0]), residual(torch.tensor([0]))[0]


def test_mentored_and_ensemble_accept_ratios():
    accept, residual = family_targets("mentored", [1], alpha=0.5)
    assert accept == pytest.approx(0.3 / 0.5)  # π_accept(x) = p(x)/(1−α); accepted iff u·q(x) < that
    torch.testing.assert_close(residual, P4[0])
    accept, residual = family_targets("ensemble", [1], w=0.8)
    assert accept / 0.6 == pytest.approx(0.2 + 0.8 * 0.3 / 0.6)  # (1−w) + w·p/q
    torch.testing.assert_close(residual, P4[0])


def test_cactus_boosts_the_drafted_token_and_rescales_the_rest():
    accept, residual = family_targets("cactus", [1], delta=0.25)
    gamma = min(0.3 + math.sqrt(2 * 0.25 * 0.3 * 0.7), 1)
    assert accept == pytest.approx(gamma)
    expected = P4[0] * (1 - gamma) / 0.7
    expected[1] = gamma
    torch.testing.assert_close(residual, expected)
    assert float(residual.sum()) == pytest.approx(1.0)
    assert family_targets("cactus", [1], delta=0.0)[0] == pytest.approx(0.3)


def test_casc_opt_defers_to_the_target_only_when_it_is_more_confident():
    tv = float((P4 - Q4).clamp_min(0).sum())  # 0.35; max p = 0.5, max q = 0.6
    # defer iff 0.6 < 0.5 − α·0.35, i.e. α < −2/7: then π = p, else π = q (always accept)
    accept, residual = family_targets("casc-opt", [1], alpha=-0.3)
    assert accept == pytest.approx(0.3) and torch.allclose(residual, P4[0])
    accept, residual = family_targets("casc-opt", [1], alpha=-0.28)
    assert accept == pytest.approx(0.6) and torch.allclose(residual, Q4[0])
    assert tv == pytest.approx(0.35)


def test_casc_tok_top_set_and_mixture():
    # T_α = {v: p(v) ≥ (1−α)·0.5}: α = 0.5 → {0, 1}; η = q(2) + q(3) = 0.2; π = q·1[T] + 0.2·p
    accept, residual = family_targets("casc-tok", [2], alpha=0.5)
    expected = torch.tensor([0.2, 0.6, 0.0, 0.0]) + 0.2 * P4[0]
    torch.testing.assert_close(residual, expected)
    assert accept == pytest.approx(0.2 * 0.15)
    assert float(residual.sum()) == pytest.approx(1.0)
    _, strict = family_targets("casc-tok", [2], alpha=-0.5)  # α < 0: T empty, π = p
    torch.testing.assert_close(strict, P4[0])
    _, loose = family_targets("casc-tok", [2], alpha=1.0)  # α = 1: every token in T, π = q
    torch.testing.assert_close(loose, Q4[0])


def test_fuzzy_uses_the_draft_where_js_is_below_the_threshold():
    js = float(jensenshannon(P4[0].double().numpy(), Q4[0].double().numpy())) ** 2  # JS divergence, nats
    _, residual = family_targets("fuzzy", [1], threshold=js * 1.01)
    torch.testing.assert_close(residual, Q4[0])
    _, residual = family_targets("fuzzy", [1], threshold=js * 0.99)
    torch.testing.assert_close(residual, P4[0])
    with pytest.raises(ConfigError, match="divergence"):
        make_policy("fuzzy", {"divergence": "tv"})


def test_contrastive_target():
    zp, zq = P4.log(), Q4.log()
    _, residual = family_targets("contrastive", [1], beta=0.5)
    expected = torch.softmax(1.5 * zp[0] - 0.5 * zq[0], -1)
    torch.testing.assert_close(residual, expected)
    _, residual = family_targets("contrastive", [1], beta=0.5, alpha=0.5)  # plausible: p ≥ 0.5·max p → {0, 1}
    on_support = torch.softmax(1.5 * zp[0, :2] - 0.5 * zq[0, :2], -1)
    torch.testing.assert_close(residual, torch.cat([on_support, torch.zeros(2)]))
    _, residual = family_targets("contrastive", [1], beta=0.0)
    torch.testing.assert_close(residual, P4[0])


# -- properties on random blocks ---------------------------------------------------------------------------------
# rules with a knob that has no default (a trained judge's head file) are held to the same properties with their
# own heads in test_trained_judges.py
BUILD_WITH_DEFAULTS = sorted(name for name, cls in POLICIES.items()
                             if not any(f.is_required() for f in cls.Knobs.model_fields.values()))
RELAXED = sorted(name for name, cls in POLICIES.items() if not cls.modes.lossless and name in BUILD_WITH_DEFAULTS)
GREEDY_RELAXED = [name for name in RELAXED if "greedy" in POLICIES.get(name).modes]


def test_every_relaxed_rule_declares_its_strict_end():
    for name in RELAXED:
        cls = POLICIES.get(name)
        assert cls.modes.strict_knobs, f"{name} has no strict_knobs"
        make_policy(name, dict(cls.modes.strict_knobs))  # and they are valid knob values


def greedy_inputs(name: str, seed: int) -> Block:
    block = random_greedy_block(seed)
    if Need.DRAFT_PROBS in POLICIES.get(name).needs:  # a draft distribution close to the target's
        g = torch.Generator().manual_seed(seed + 20_000)
        draft = block.target_logits[:-1] + torch.randn(block.k, block.target_logits.shape[-1], generator=g)
        block = Block(block.draft_tokens, block.target_logits, draft, GREEDY, None, {})
    if Need.EXTRA_TOKENS in POLICIES.get(name).needs:
        block = Block(block.draft_tokens, block.target_logits, None, GREEDY, None,
                      random_judge_extras(seed, block))
    return block


def make_bound(name: str, knobs: dict):
    policy = make_policy(name, knobs)
    if isinstance(policy, ReflectiveVerification):
        policy.bind(PolicyEnv(WordTokenizer(), 48, torch.device("cpu")))
    return policy


@pytest.mark.parametrize("name", GREEDY_RELAXED)
def test_greedy_strict_end_equals_exact(name):
    strict = make_bound(name, dict(POLICIES.get(name).modes.strict_knobs))
    loose = make_bound(name, {})
    differs = 0
    for seed in range(60):
        block = greedy_inputs(name, seed)
        reference = make_policy("exact").verify(block)
        assert strict.verify(block) == reference
        differs += loose.verify(block) != reference
    # a rule whose greedy mode *is* exact match (as its reference) cannot differ; every other rule must relax here
    if not POLICIES.get(name).modes.greedy_is_exact:
        assert differs > 0, f"{name} at its defaults never differed from exact: the blocks test nothing"


# sampling-mode rules whose strict knobs give speculative sampling; fly, typical and margin are lossy at every
# setting (their sampling modes follow the authors, see their docstrings)
SAMPLING_LOSSLESS_AT_STRICT = [name for name in RELAXED if "sampling" in POLICIES.get(name).modes
                               and "sampling" not in POLICIES.get(name).modes.lossy]


@pytest.mark.parametrize("name", SAMPLING_LOSSLESS_AT_STRICT)
@pytest.mark.parametrize("sampling", SAMPLING_SETTINGS, ids=["T=1", "T=0.8,top-k,top-p"])
def test_sampling_strict_end_equals_speculative_sampling(name, sampling):
    strict = make_bound(name, dict(POLICIES.get(name).modes.strict_knobs))
    loose = make_bound(name, {})
    differs = 0
    for seed in range(400):  # 60 blocks, and more until the loose rule differs (a windowed rule relaxes rarely)
        if seed >= 60 and differs:
            break
        case = random_sampling_case(seed, sampling, k=10)
        extras = random_judge_extras(seed, sampling_block(case, sampling, 0))
        # speculative sampling with the uniforms the rule draws (float64 for the rules whose reference does)
        plain = sampling_block(case, sampling, seed)
        uniforms = strict.uniforms(plain.generator, plain.k, plain.sampling)
        reference = lossless_verdict(Batch.of_blocks([plain], strict.uniform_dtype, [uniforms])).to_host()[0]
        assert strict.verify(sampling_block(case, sampling, seed, extras)) == reference
        differs += loose.verify(sampling_block(case, sampling, seed, extras)) != reference
    assert differs > 0, f"{name} at its defaults never differed from speculative sampling"


def ladders(mode: str) -> list[tuple[str, str, tuple]]:
    """(rule, knob, values from strict to loose) as each rule declares them (``Modes.loosening``)."""
    return [(name, knob, values) for name in RELAXED if mode in POLICIES.get(name).modes
            and not isinstance(POLICIES.get(name).modes.loosening, str)
            for knob, values in POLICIES.get(name).modes.loosening.items()]


def test_every_relaxed_rule_declares_how_it_loosens():
    for name in RELAXED:
        loosening = POLICIES.get(name).modes.loosening
        assert loosening, name
        if isinstance(loosening, str):  # why no knob loosens it monotonically, in its own words
            assert len(loosening.split()) >= 5, (name, loosening)
        else:
            for knob, values in loosening.items():
                assert len(values) >= 2, (name, knob)
                assert make_policy(name, {knob: values[0]}) and make_policy(name, {knob: values[-1]})


@pytest.mark.parametrize("name,knob,ladder", [(name, knob, ladder) for name, knob, ladder in ladders("greedy")
                                               if not POLICIES.get(name).modes.greedy_is_exact],
                         ids=lambda v: str(v)[:20])
def test_greedy_loosening_never_lowers_acceptance(name, knob, ladder):
    policies = [make_bound(name, {knob: value}) for value in ladder]
    gained = 0
    for seed in range(120):
        block = greedy_inputs(name, seed)
        counts = [policy.verify(block).n_accepted for policy in policies]
        assert counts == sorted(counts), (knob, ladder, counts)
        gained += counts[-1] > counts[0]
    assert gained > 0, f"{name}: loosening {knob} never changed anything on these blocks"


@pytest.mark.parametrize("name,knob,ladder", ladders("sampling"), ids=lambda v: str(v)[:20])
@pytest.mark.slow
def test_sampling_loosening_never_lowers_acceptance_with_the_same_uniforms(name, knob, ladder):
    sampling = SamplingParams(1.0)
    policies = [make_bound(name, {knob: value}) for value in ladder]
    gained = 0
    for seed in range(400):  # a rule that defers only after a run of native acceptances relaxes rarely
        case = random_sampling_case(seed, sampling, k=10)
        counts = [policy.verify(sampling_block(case, sampling, seed)).n_accepted for policy in policies]
        assert counts == sorted(counts), (knob, ladder, counts)
        gained += counts[-1] > counts[0]
    assert gained > 0


def test_judge_never_accepts_less_than_the_strict_rule():
    judge = make_bound("reflective", {"alpha": 0.7})
    for seed in range(60):
        block = greedy_inputs("reflective", seed)
        assert judge.verify(block).n_accepted >= make_policy("exact").verify(block).n_accepted
    sampling = SamplingParams(1.0)
    for seed in range(60):
        case = random_sampling_case(seed, sampling)
        extras = random_judge_extras(seed, sampling_block(case, sampling, 0))
        assert (judge.verify(sampling_block(case, sampling, seed, extras)).n_accepted
                >= make_policy("speculative-sampling").verify(sampling_block(case, sampling, seed)).n_accepted)


# diversed's greedy correction is the argmax of its mixture w·p + (1 − w)·q, not the target's (tests/test_diversed.py)
@pytest.mark.parametrize("name", [name for name in GREEDY_RELAXED if name != "diversed"])
def test_n_relaxed_counts_accepted_drafts_exact_would_reject_greedy(name):
    policy = make_bound(name, {})
    for seed in range(40):
        block = greedy_inputs(name, seed)
        v = policy.verify(block)
        argmax = block.target_logits.argmax(-1)
        assert v.n_relaxed == sum(int(block.draft_tokens[i] != argmax[i]) for i in range(v.n_accepted))
        assert v.next_token == int(argmax[v.n_accepted])  # correction (or bonus) is the target's argmax


# typical (deterministic) and margin (its own rejection test) count relaxed drafts their own way: see
# tests/test_conformance.py
@pytest.mark.parametrize("name", [n for n in RELAXED if "sampling" in POLICIES.get(n).modes
                                  and n not in ("typical", "margin")])
def test_n_relaxed_counts_accepted_drafts_speculative_sampling_would_reject(name):
    sampling = SamplingParams(1.0)
    policy = make_bound(name, {"beta": 1.0} if name == "contrastive" else {})
    point_mass = name == "fly"  # FLy ignores q and treats its (greedy) drafts as point masses
    total_relaxed = 0
    for seed in range(400):  # 60 blocks, and more until something was relaxed (a windowed rule relaxes rarely)
        if seed >= 60 and total_relaxed:
            break
        case = random_sampling_case(seed, sampling, k=10)
        block = sampling_block(case, sampling, seed, random_judge_extras(seed, sampling_block(case, sampling, 0)))
        v = policy.verify(block)
        # replay the uniforms the rejection step drew first, and run the strict test with them
        u = torch.rand(block.k, generator=torch.Generator().manual_seed(seed), dtype=policy.uniform_dtype)
        batch = Batch.of_blocks([block])
        p = batch.p_of_drafts[0]
        q = torch.ones_like(p) if point_mass else batch.q_of_drafts[0]
        strict_rejects = ~(u * q < p)
        assert v.n_relaxed == int(strict_rejects[: v.n_accepted].sum())
        total_relaxed += v.n_relaxed
    if name == "contrastive":
        # π ∝ p^(1+β) q^(−β) exceeds p only where p > q, where speculative sampling accepts anyway: with the same
        # uniforms SCD never accepts what speculative sampling rejects (it changes the residual instead)
        assert total_relaxed == 0
    else:
        assert total_relaxed > 0


# -- the shared rejection step ----------------------------------------------------------------------------------
def one_draft_block(q: torch.Tensor | None, seed: int) -> Block:
    return Block(torch.tensor([1]), torch.zeros(2, 4), None if q is None else torch.log(q), SamplingParams(1.0),
                 torch.Generator().manual_seed(seed))


def judged(q, seed, pi_accept, pi_residual, **options) -> Outcome:
    batch = Batch.of_blocks([one_draft_block(q, seed)])
    judgement = rejection_judgement(batch, pi_accept, lambda n: pi_residual.expand(1, -1),
                                    lambda n: torch.ones(1, 4), point_mass=q is None, **options)
    return finish(batch, judgement).to_host()[0]


@pytest.mark.parametrize("point_mass", [False, True], ids=["q", "point-mass"])
def test_rejection_step_accepts_with_min_1_pi_over_q_and_draws_the_residual(point_mass):
    """One draft x = 1: P(accept) = min(1, π(x)/q(x)); after a rejection the token follows norm((π_res − q)+)."""
    q = None if point_mass else torch.tensor([[0.2, 0.5, 0.2, 0.1]])
    q_row = torch.tensor([0.0, 1.0, 0.0, 0.0]) if point_mass else q[0]
    pi_accept = torch.tensor([[0.35]])  # gathered at x
    pi_residual = torch.tensor([0.4, 0.35, 0.05, 0.2])
    accept = min(1.0, 0.35 / float(q_row[1]))
    residual = (pi_residual - q_row).clamp_min(0)
    expected = np.append(((1 - accept) * residual / residual.sum()).numpy(), accept)
    counts = np.zeros(5)
    for seed in range(3000):
        v = judged(q, seed, pi_accept, pi_residual)
        counts[4 if v.n_accepted else v.next_token] += 1
    keep = expected > 0
    assert counts[~keep].sum() == 0
    expected = expected[keep].astype(np.float64)
    assert stats.chisquare(counts[keep], expected / expected.sum() * counts.sum()).pvalue > 1e-3


def test_rejection_step_relax_may_only_add_acceptances():
    never, always = torch.tensor([[0.0]]), torch.tensor([[1.0]])
    residual = torch.full((4,), 0.25)
    assert judged(None, 0, never, residual, relax=lambda m: torch.ones_like(m)).n_accepted == 1
    assert judged(None, 0, always, residual, relax=lambda m: torch.zeros_like(m)).n_accepted == 1
    assert judged(None, 0, never, residual, relax=lambda m: torch.zeros_like(m)).n_accepted == 0


def emitted_frequencies(policy_name: str, target_logits: torch.Tensor, drafts: list[int], n_trials: int,
                        **knobs) -> np.ndarray:
    """Counts of the first emitted token over seeds (index V: the first draft was accepted)."""
    policy = make_policy(policy_name, knobs)
    vocab = target_logits.shape[-1]
    counts = np.zeros(vocab + 1)
    for seed in range(n_trials):
        block = Block(torch.tensor(drafts), target_logits, None, SamplingParams(1.0),
                      torch.Generator().manual_seed(seed), {})
        v = policy.verify(block)
        counts[vocab if v.n_accepted else v.next_token] += 1
    return counts


def assert_frequencies(counts: np.ndarray, expected: np.ndarray) -> None:
    keep = expected > 0
    assert counts[~keep].sum() == 0, counts
    assert stats.chisquare(counts[keep], expected[keep] / expected[keep].sum() * counts.sum()).pvalue > 1e-3


def test_fly_sampling_is_the_authors_two_sample_match():
    """Two independent target samples s1, s2; accept iff d ∈ {s1, s2}; else emit s1.
    So P(accept) = 1 − (1 − p_d)² and P(emit y) = p(y)·(1 − p_d) for y ≠ d (s1 = y and s2 ≠ d)."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    logits = torch.tensor(np.log(p), dtype=torch.float32).repeat(2, 1)
    d = 1
    expected = np.append(p * (1 - p[d]), 1 - (1 - p[d]) ** 2)
    expected[d] = 0
    assert_frequencies(emitted_frequencies("fly", logits, [d], 3000), expected)


def test_typical_sampling_is_medusas_deterministic_fast_path():
    # H ≈ 1.14 → floor = min(0.09, 0.3·e^−H ≈ 0.096) = 0.09: token 3 (0.05) is rejected, and the next token is the
    # argmax (token 0) whatever the seed; token 1 (0.3 > 0.09) is always accepted
    p = np.array([0.5, 0.3, 0.15, 0.05])
    logits = torch.tensor(np.log(p), dtype=torch.float32).repeat(2, 1)
    expected = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    assert (emitted_frequencies("typical", logits, [3], 50) == 50 * expected).all()
    assert emitted_frequencies("typical", logits, [1], 50)[-1] == 50


# -- the greedy walk ---------------------------------------------------------------------------------------------
def test_greedy_judgement_takes_the_leading_run_and_counts_relaxed_mismatches():
    from relaxbench.policies.greedy import greedy_judgement

    block = greedy_block(torch.stack([row(V, {0: 1.0})] * 6), [0, 3, 0, 4, 0])  # the argmax is 0 everywhere
    batch = Batch.of_blocks([block])

    def outcome(relax=None) -> Outcome:
        return finish(batch, greedy_judgement(batch, relax)).to_host()[0]

    assert outcome() == Outcome(1, 0, 0)
    relax_first = torch.tensor([[False, True, False, False, False]])  # only the first mismatch (position 1)
    assert outcome(relax_first) == Outcome(3, 0, 1)
    assert outcome(torch.ones(1, 5, dtype=torch.bool)) == Outcome(5, 0, 2)
    matching = Batch.of_blocks([greedy_block(torch.stack([row(V, {2: 1.0})] * 4), [2, 2, 2])])
    everywhere = torch.ones(1, 3, dtype=torch.bool)
    judgement = greedy_judgement(matching, everywhere)
    assert finish(matching, judgement).to_host()[0] == Outcome(3, 2, 0)  # a match is never counted relaxed
    assert not judgement.relaxed.any()


# -- the exact reductions ----------------------------------------------------------------------------------------
def test_reductions_break_ties_by_the_first_index_and_repeat_tied_values():
    x = torch.full((3, 5000), -1.0)
    x[0, 4999] = 2.0  # the maximum is the very last logit
    x[1, [100, 4999]] = 2.0  # a tie: the first wins
    x[2, :2500] = -math.inf  # a masked half row
    x[2, [4096, 4097]] = 5.0
    assert argmax(x).tolist() == [4999, 100, 4096]
    assert argmax(torch.full((2, 7), -math.inf)).tolist() == [0, 0]  # everything masked: the first index
    assert top_values(x, 3).tolist() == [[2.0, -1.0, -1.0], [2.0, 2.0, -1.0], [5.0, 5.0, -1.0]]
    assert top_values(x[:, :2], 3).shape == (3, 2)  # n is capped at V
    assert argmax(x[0]).ndim == 0 and top_values(x.view(3, 1, 5000), 2).shape == (3, 1, 2)


@pytest.mark.parametrize("vocab", [7, 64, 100, 1000, 4096, 50257, 151936])
def test_top_values_are_topks_values_at_every_grouping(vocab):
    """Whatever the grouping ``top_groups`` picks for V and n (none for a prime-factored V), the values are
    ``torch.topk``'s: ties repeated (small integers), −inf, and NaN (which topk puts first)."""
    g = torch.Generator().manual_seed(vocab)
    rows = torch.randint(-3, 4, (6, vocab), generator=g).float()
    rows[1, ::2] = -math.inf
    rows[2, :] = -math.inf
    rows[3, torch.randint(0, vocab, (2,), generator=g)] = math.nan
    rows[4] = torch.randn(vocab, generator=g)
    rows[5, :] = 0.0
    for n in (1, 2, 3, 10, 48):
        torch.testing.assert_close(top_values(rows, n), torch.topk(rows, min(n, vocab)).values, rtol=0, atol=0,
                                   equal_nan=True, msg=lambda m, n=n: f"n={n}, groups={top_groups(vocab, n)}: {m}")
    assert top_groups(151_936, 3) == 16 and top_groups(1_000, 10) == 10 and top_groups(50_257, 2) == 1
