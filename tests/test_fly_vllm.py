"""``fly-vllm`` on hand-worked cases from vLLM's FLy (vllm/v1/spec_decode/fly.py): the window of W native
acceptances with i + W < k, pending windows confirmed one after the other, the top-k entropy and its threshold, the
−inf guard, the one-sample test under sampling, the draft-length checks; then fixed blocks where ``fly`` (the
authors' rule) and ``fly-vllm`` part, and the ``fly-native`` arm's refusal on the pinned vLLM."""

from __future__ import annotations

import math

import pytest
import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import PolicyEnv
from relaxbench.policies.batch import Batch, Block
from relaxbench.policies.fly_vllm import topk_entropy
from tests.conftest import assert_one_line_error

GREEDY = SamplingParams()
SAMPLED = SamplingParams(1.0)
V = 8
# a flat row: argmax token 0, top-3 entropy about 1.0 nats (far above 0.3); a mismatch drafts token 1
FLAT = [1.0, 0.9, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0]


def greedy_block(pattern: str, rows: dict[int, list[float]] | None = None) -> Block:
    """Drafts from a pattern of 'm' (the target's argmax, token 0) and 'x' (a mismatch, token 1) over flat rows;
    ``rows`` replaces the logits of some positions."""
    k = len(pattern)
    logits = torch.tensor([FLAT] * (k + 1))
    for i, row in (rows or {}).items():
        logits[i] = torch.tensor(row)
    drafts = torch.tensor([0 if c == "m" else 1 for c in pattern])
    return Block(drafts, logits, None, GREEDY, None)


def accepted(name: str, knobs: dict, block: Block) -> int:
    return make_policy(name, knobs).verify(block).n_accepted


def test_flat_rows_are_far_from_the_threshold():
    entropy = float(topk_entropy(torch.tensor([FLAT]), 3, from_logits=True))
    assert 0.9 < entropy < 1.2


@pytest.mark.parametrize("pattern, window, expected", [
    ("xmmxmm", 2, 6),  # both mismatches have 2 native matches after them, 0 + 2 < 6 and 3 + 2 < 6
    ("mmmxmm", 2, 6),  # 3 + 2 = 5 < 6
    ("mmmmxm", 1, 6),  # 4 + 1 = 5 < 6
    ("mmmmxm", 2, 4),  # position 4 has one position after it: no window
    ("xmxmmm", 1, 6),  # W = 1: each mismatch followed by one native match
    ("xmxmmm", 2, 0),  # the window after 0 holds the mismatch at 2: rejected at 0
    ("xmmm", 3, 4),  # 0 + 3 < 4: the window may end on the last draft
    ("xmmm", 4, 0),  # 0 + 4 is not < 4
])
def test_window_of_native_acceptances(pattern, window, expected):
    assert accepted("fly-vllm", {"fly_window_size": window}, greedy_block(pattern)) == expected


def test_pending_windows_are_confirmed_one_after_the_other():
    # 0 is pending; its window (1, 2) holds the mismatch at 2, which could itself be deferred (3, 4 match): no
    # nesting, the window at 0 fails and the step stops there with the target's argmax
    outcome = make_policy("fly-vllm", {"fly_window_size": 2}).verify(greedy_block("xmxmmmm"))
    assert (outcome.n_accepted, outcome.next_token, outcome.n_relaxed) == (0, 0, 0)
    # two windows one after the other, each confirmed: both deferrals are relaxed acceptances
    outcome = make_policy("fly-vllm", {"fly_window_size": 2}).verify(greedy_block("xmmxmmm"))
    assert (outcome.n_accepted, outcome.n_relaxed) == (7, 2)


def peaked(ps: list[float]) -> list[float]:
    """Logits of a distribution given by its probabilities (the rest of the row at probability 0 + tiny)."""
    row = torch.full((V,), 1e-12)
    row[: len(ps)] = torch.tensor(ps)
    return row.log().tolist()


@pytest.mark.parametrize("top_k, theta, defers", [
    # p = 0.4, 0.3, 0.2, 0.1: top-1 entropy 0.37, top-2 0.73, top-3 1.05
    (1, 0.6, False), (2, 0.6, True), (3, 0.6, True),
    (2, 0.9, False), (3, 0.9, True),
    (3, 1.2, False),
])
def test_entropy_over_the_top_k_probabilities(top_k, theta, defers):
    block = greedy_block("xmmm", {0: peaked([0.4, 0.3, 0.2, 0.1])})
    knobs = {"fly_window_size": 2, "fly_entropy_threshold": theta, "fly_entropy_top_k": top_k}
    assert accepted("fly-vllm", knobs, block) == (4 if defers else 0)


def test_the_gate_stays_on_at_small_thresholds():
    # a confident row (top-3 entropy about 1e-3): vLLM keeps the gate at θ = 0.01, the authors switch it off there
    block = greedy_block("xmmm", {0: peaked([0.9999, 0.00005, 0.00005])})
    assert float(topk_entropy(block.target_logits[:1], 3, from_logits=True)) < 0.003
    assert accepted("fly-vllm", {"fly_window_size": 2, "fly_entropy_threshold": 0.01}, block) == 0
    assert accepted("fly", {"window": 3, "theta": 0.01}, block) == 4
    assert accepted("fly-vllm", {"fly_window_size": 2, "fly_entropy_threshold": 0.0}, block) == 4


def test_never_defers_a_draft_the_target_rules_out():
    row = list(FLAT)
    row[1] = -math.inf  # the draft token 1 is impossible under the target; the row stays flat
    block = greedy_block("xmmm", {0: row})
    assert accepted("fly-vllm", {"fly_window_size": 2, "fly_entropy_threshold": 0.0}, block) == 0
    assert accepted("fly", {"window": 3, "theta": 0.0}, block) == 4


def test_strict_threshold_is_exact_match():
    for pattern in ("xmmm", "mxmmmm", "xmmxmmm"):
        block = greedy_block(pattern)
        assert (make_policy("fly-vllm", {"fly_entropy_threshold": math.inf, "fly_window_size": 1}).verify(block)
                == make_policy("exact").verify(block))


def sampled_outcome(knobs: dict, p_d: list[float], u: list[float]):
    """Point-mass drafts (token 1) whose target probability is ``p_d`` at each position, with uniforms ``u``;
    the rest of each row flat, so the entropy is high."""
    k = len(p_d)
    rows = []
    for p in p_d + [0.5]:
        rest = (1 - p) / (V - 1)
        rows.append([rest, p] + [rest] * (V - 2))
    block = Block(torch.ones(k, dtype=torch.long), torch.tensor(rows).log(), None, SAMPLED, None)
    batch = Batch.of_blocks([block], uniforms=[(torch.tensor(u), torch.tensor(0.3, dtype=torch.float64))])
    return make_policy("fly-vllm", knobs).decide(batch).to_host()[0]


def test_sampling_one_sample_test_and_deferral():
    # native: p(d) >= u. Position 0 rejected (0.2 < 0.5), 1 and 2 accepted (0.9 >= 0.1), 3 rejected (0.1 < 0.9)
    p_d, u = [0.2, 0.9, 0.9, 0.1], [0.5, 0.1, 0.1, 0.9]
    deferred = sampled_outcome({"fly_window_size": 2, "fly_entropy_threshold": 0.3}, p_d, u)
    assert (deferred.n_accepted, deferred.n_relaxed) == (3, 1)
    assert deferred.next_token != 1  # drawn from p without the rejected draft
    assert sampled_outcome({"fly_window_size": 2, "fly_entropy_threshold": math.inf}, p_d, u).n_accepted == 0
    # the window must be accepted natively: with u = 0.95 at position 2 the window fails
    assert sampled_outcome({"fly_window_size": 2}, p_d, [0.5, 0.1, 0.95, 0.9]).n_accepted == 0


def test_a_batch_decides_as_its_requests_alone():
    policy = make_policy("fly-vllm", {"fly_window_size": 2})
    blocks = [greedy_block(p) for p in ("xmmxmm", "mmmmxm", "xmxmmmm", "m", "xmmm")]
    alone = [policy.verify(b) for b in blocks]
    assert policy.decide(Batch.of_blocks(blocks)).to_host() == alone


def bound(knobs: dict, k: int):
    policy = make_policy("fly-vllm", knobs)
    policy.bind(PolicyEnv(None, V, torch.device("cpu"), draft_length=k))
    return policy


def test_knobs_are_checked_as_vllm_checks_them():
    """vLLM 0.33's ``SpeculativeConfig``: ``fly_entropy_threshold`` ≥ 0, ``fly_window_size`` ≥ 1,
    ``fly_entropy_top_k`` ≥ 1; θ = inf (the strict end) passes its check."""
    for knobs in ({"fly_entropy_threshold": -0.1}, {"fly_window_size": 0}, {"fly_entropy_top_k": 0}):
        with pytest.raises(ConfigError) as refused:
            make_policy("fly-vllm", knobs)
        assert "\n" not in str(refused.value) and next(iter(knobs)) in str(refused.value)
    assert make_policy("fly-vllm", {"fly_entropy_threshold": math.inf}).strict


def test_draft_length_checks_and_default_window():
    with pytest.raises(ConfigError, match="at least 2") as refused:
        bound({}, 1)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="smaller than the draft length"):
        bound({"fly_window_size": 4}, 4)
    # default W = min(6, k - 1): with k = 3, W = 2; with k = 15, W = 6
    assert bound({}, 3).window(3) == 2 and bound({}, 15).window(15) == 6
    assert bound({}, 3).verify(greedy_block("xmmmmm")).n_accepted == 6  # W = 2
    assert bound({}, 15).verify(greedy_block("xmmmmm")).n_accepted == 0  # W = 6: 0 + 6 is not < 6


# -- where fly (AMD-AGI/FLy) and fly-vllm part, on fixed blocks ------------------------------------------------------
@pytest.mark.parametrize("pattern, fly, fly_vllm", [
    # the authors need W - 1 matches after the mismatch, vLLM W native acceptances
    ("xmxmmm", 6, 0),
    # the same window length (authors' W = 3, vLLM's W = 2): the authors need i + 3 < k, vLLM i + 2 < k
    ("mmmxmm", 3, 6),
    # where they agree: a mismatch followed by enough matches well inside the block
    ("xmmmmm", 6, 6),
])
def test_fly_and_fly_vllm_part_on_fixed_blocks(pattern, fly, fly_vllm):
    block = greedy_block(pattern)
    assert accepted("fly", {"window": 3 if pattern != "xmxmmm" else 2}, block) == fly
    assert accepted("fly-vllm", {"fly_window_size": 2}, block) == fly_vllm


VLLM_ARMS = ("native", "fly-native")


@pytest.fixture
def vllm_arms():
    """The vLLM engine's arms, registered as ``compare --engine vllm`` registers them, and unregistered afterwards:
    they are no rules of the transformers engine, so the rest of the suite must not see them."""
    import importlib

    import relaxbench.integrations.vllm_native as module

    if not all(name in POLICIES for name in VLLM_ARMS):  # unregistered by an earlier test: register them again
        for name in VLLM_ARMS:
            POLICIES._items.pop(name, None)
        importlib.reload(module)
    yield
    for name in VLLM_ARMS:
        POLICIES._items.pop(name, None)


def test_fly_native_is_refused_on_the_pinned_vllm(vllm_arms):
    from relaxbench.integrations.vllm_rules import VLLM_VERSION, check_rule, ships_fly

    assert not ships_fly(VLLM_VERSION)
    with pytest.raises(ConfigError, match="does not ship") as refused:
        check_rule(make_policy("fly-native"))
    assert "\n" not in str(refused.value) and VLLM_VERSION in str(refused.value)
    assert ships_fly("0.34.0") and not ships_fly("0.32.0")
    # elsewhere fly-native is fly-vllm with the same knobs
    block = greedy_block("xmmxmm")
    assert make_policy("fly-native", {"fly_window_size": 2}).verify(block) == \
        make_policy("fly-vllm", {"fly_window_size": 2}).verify(block)


@pytest.mark.slow
def test_draft_length_below_2_is_refused_on_the_command_line(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--method", "fly-vllm",
                 "-k", "1", "--prompt", "hi", "--max-new-tokens", "4")
    assert_one_line_error(result, "fly-vllm", "at least 2", "k = 1")


def test_on_random_blocks_the_windows_differ_only_at_the_block_end():
    # with both gates open (θ = 0; the authors' θ ≤ 0.01 switches theirs off) and finite logits, vLLM's window W
    # covers the authors' W + 1 (the mismatch and W matches) but may end on the last draft: fly-vllm accepts at
    # least as much, and more exactly where the authors' window would need one position beyond the block
    g = torch.Generator().manual_seed(0)
    more = 0
    for _ in range(400):
        pattern = "".join("x" if bit else "m" for bit in (torch.rand(8, generator=g) < 0.3).tolist())
        block = greedy_block(pattern)
        for window in (1, 2, 3):
            theirs = accepted("fly", {"window": window + 1, "theta": 0.0}, block)
            ours = accepted("fly-vllm", {"fly_window_size": window, "fly_entropy_threshold": 0.0}, block)
            assert ours >= theirs, (pattern, window)
            if ours > theirs:
                more += 1
                assert pattern[theirs] == "x" and theirs + window == len(pattern) - 1, (pattern, window)
    assert more > 0
