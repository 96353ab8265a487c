"""The policy interface: the registration check states every rule a new policy must follow; the engine's facts
(drafter duties, compatibility, the strict baseline) come from the declarations alone; sub-blocks keep alignment."""

from __future__ import annotations

import types

import pytest
import torch

from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import (
    POLICIES,
    Batch,
    Block,
    Fidelity,
    Modes,
    Need,
    Origin,
    Outcome,
    VerificationPolicy,
    check_compatibility,
    drafter_duties,
    lossless_verdict,
    make_policy,
    register_policy,
    strict_policy,
)
from relaxbench.policies.base import PolicyEnv
from relaxbench.policies.greedy import greedy_judgement

GREEDY, T1 = SamplingParams(), SamplingParams(1.0)


def a_module(doc: str) -> str:
    """Register a throwaway module with docstring ``doc`` (the registration check reads a rule's module doc)."""
    name = f"tests._policy_interface_{abs(hash(doc))}"
    module = types.ModuleType(name, doc)
    import sys

    sys.modules[name] = module
    return name


def rule(module_doc: str = "A rule. Deviations: none.", **attrs) -> type[VerificationPolicy]:
    body = {"name": "", "__module__": a_module(module_doc),
            "origin": Origin(Fidelity.VARIANT, "our rule", "a rule"),
            "modes": Modes(strict_knobs={"x": 0}, loosening={"x": (0, 1)}),
            "judge": lambda self, batch: greedy_judgement(batch)}

    class Knobs(VerificationPolicy.Knobs):
        x: int = 1

    body["Knobs"] = Knobs
    body.update(attrs)
    if body["judge"] is None:
        del body["judge"]
    return type("Rule", (VerificationPolicy,), body)


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    """Rules registered here are gone after each test (other tests list every registered rule)."""
    monkeypatch.setattr(POLICIES, "_items", dict(POLICIES._items))


# -- adding a policy: one check, one error naming everything missing ------------------------------------------------
def test_a_complete_rule_registers_and_resolves():
    cls = register_policy(rule(name="interface-test-rule"))
    assert POLICIES.get("interface-test-rule") is cls
    assert make_policy("interface-test-rule", {"x": 0}).knobs.x == 0


@pytest.mark.parametrize("attrs,doc,message", [
    ({"name": ""}, "Deviations: none.", "set `name`"),
    ({"judge": None}, "Deviations: none.", "define judge(batch) -> Judgement"),
    ({"origin": None}, "Deviations: none.", "set origin = Origin("),
    ({"modes": Modes()}, "Deviations: none.", "must name the knob setting at which it is strict"),
    ({"modes": Modes(strict_knobs={"y": 0}, loosening={"x": (0, 1)})}, "Deviations: none.",
     "strict_knobs name unknown knobs ['y']"),
    ({"modes": Modes(strict_knobs={"x": 0})}, "Deviations: none.", "must say how its knobs loosen it"),
    ({"modes": Modes(strict_knobs={"x": 0}, loosening={"z": (0, 1)})}, "Deviations: none.",
     "loosening names unknown knobs ['z']"),
    ({"origin": Origin(Fidelity.REFERENCE, "the authors' code")}, "Deviations: none.", "owner/repo@commit"),
    ({}, "A rule without a list of how it differs.", "must list its deviations"),
])
def test_an_incomplete_rule_is_refused_with_what_is_missing(attrs, doc, message):
    attrs = {"name": "interface-test-incomplete", **attrs}
    with pytest.raises(TypeError, match="cannot be registered") as info:
        register_policy(rule(doc, **attrs))
    assert message in str(info.value)
    assert "interface-test-incomplete" not in POLICIES


def test_decide_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        VerificationPolicy()


def test_modes_record():
    modes = Modes(supported={"greedy"}, strict_knobs={"x": 0})
    assert "greedy" in modes and "sampling" not in modes and list(modes) == ["greedy"]
    assert modes.strict_in("greedy") and not modes.strict_in("sampling")
    assert not Modes(strict_knobs={"x": 0}, lossy={"sampling"}).strict_in("sampling")
    with pytest.raises(ValueError, match="subset"):
        Modes(supported={"beam"})
    with pytest.raises(ValueError, match="lossy"):
        Modes(supported={"greedy"}, lossy={"sampling"})
    with pytest.raises(TypeError):
        modes.strict_knobs["x"] = 1  # frozen, its mapping too


# -- what the drafter must provide: one derivation ------------------------------------------------------------------
@pytest.mark.parametrize("name,sampling,duties", [
    ("exact", GREEDY, (GREEDY, False, False)),
    ("cactus", T1, (T1, True, False)),  # reads q
    ("cactus", GREEDY, (GREEDY, True, False)),  # needs q in every mode
    ("fly", T1, (GREEDY, False, False)),  # greedy drafts, point masses: no q
    ("margin", T1, (GREEDY, True, False)),  # greedy drafts, reads q when the drafter has one
    ("margin", GREEDY, (GREEDY, False, False)),
    ("reflective", T1, (T1, True, False)),  # samples its drafts, so the drafter keeps its logits
    ("autojudge", GREEDY, (GREEDY, False, True)),  # reads the draft model's hidden states
])
def test_drafter_duties(name, sampling, duties):
    got = drafter_duties(POLICIES.get(name), sampling)
    assert (got.sampling, got.keep_logits, got.keep_hidden) == duties


def test_drafter_duties_read_an_instance_first():
    policy = make_policy("exact")
    policy.needs = frozenset({Need.DRAFT_HIDDEN_STATES})  # a wrapping rule may widen its needs per instance
    assert drafter_duties(policy, GREEDY).keep_hidden and not drafter_duties(POLICIES.get("exact"), GREEDY).keep_hidden


# -- compatibility from classes alone --------------------------------------------------------------------------------
def test_check_compatibility_needs_no_loaded_model():
    check_compatibility(POLICIES.get("cactus"), "sampling", DRAFTERS.get("model"))
    check_compatibility(POLICIES.get("fly"), "greedy", DRAFTERS.get("ngram"))
    check_compatibility(POLICIES.get("none"), T1, None)
    with pytest.raises(ConfigError, match="'cactus' needs draft-model probabilities.*'ngram'"):
        check_compatibility(POLICIES.get("cactus"), "sampling", DRAFTERS.get("ngram"))
    with pytest.raises(ConfigError, match="'contrastive' does not support greedy"):
        check_compatibility(POLICIES.get("contrastive"), GREEDY, DRAFTERS.get("model"))
    with pytest.raises(ConfigError, match="takes no drafter"):
        check_compatibility(POLICIES.get("none"), "greedy", DRAFTERS.get("model"))
    with pytest.raises(ConfigError, match="draft model's last hidden states.*no drafter"):
        check_compatibility(POLICIES.get("autojudge"), "greedy", None)
    with pytest.raises(ValueError, match="mode"):
        check_compatibility(POLICIES.get("exact"), "beam", None)


# -- the strict baseline ---------------------------------------------------------------------------------------------
def random_block(seed: int, sampling: SamplingParams, k: int = 6, vocab: int = 12, with_q: bool = True) -> Block:
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(k + 1, vocab, generator=g) * 2
    guesses = torch.randint(vocab, (k,), generator=g)
    drafts = torch.where(torch.rand(k, generator=g) < 0.6, target[:k].argmax(-1), guesses)
    draft = target[:k] + torch.randn(k, vocab, generator=g) if with_q else None
    return Block(drafts, target, draft, sampling, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed", range(20))
def test_lossless_verdict_is_exact_match_and_speculative_sampling(seed):
    def lossless(block: Block) -> Outcome:
        return lossless_verdict(Batch.of_blocks([block])).to_host()[0]

    assert lossless(random_block(seed, GREEDY)) == make_policy("exact").verify(random_block(seed, GREEDY))
    assert lossless(random_block(seed, T1)) == make_policy("speculative-sampling").verify(random_block(seed, T1))


def test_strict_policy():
    strict = strict_policy(make_policy("cactus", {"delta": 2.0}), "sampling")
    assert strict.name == "cactus" and strict.knobs.delta == 0.0
    assert strict_policy(POLICIES.get("topk"), "greedy").knobs.top == 1
    assert strict_policy(POLICIES.get("topk"), "sampling") is None  # not a mode it supports
    assert strict_policy(POLICIES.get("fly"), "sampling") is None  # lossy at every setting there
    exact = make_policy("exact")
    assert strict_policy(exact, "greedy") is exact
    for seed in range(10):
        assert strict.verify(random_block(seed, T1)) == lossless_verdict(
            Batch.of_blocks([random_block(seed, T1)])).to_host()[0]


# -- batches of blocks -------------------------------------------------------------------------------------------
def test_a_batch_of_blocks_keeps_each_requests_extras_aligned():
    a, b = random_block(3, GREEDY, k=4), random_block(4, GREEDY, k=2)
    blocks = [Block(x.draft_tokens, x.target_logits, x.draft_logits, GREEDY, None,
                    {"hidden_states": torch.arange(x.k + 1.0).unsqueeze(-1) + 10 * i,
                     "draft_hidden_states": torch.arange(float(x.k)).unsqueeze(-1) + 10 * i})
              for i, x in enumerate((a, b))]
    batch = Batch.of_blocks(blocks)
    assert batch.num_drafts.tolist() == [4, 2] and batch.width == 4
    # position i reads the target's hidden state whose logits judge draft i (row i, as the target's logits) and
    # the draft model's at draft i
    positions = batch.positions.expand(2, -1)
    hidden = batch.extras["hidden_states"].at(positions).squeeze(-1)
    draft_hidden = batch.extras["draft_hidden_states"].at(positions).squeeze(-1)
    assert hidden[0].tolist() == [0.0, 1.0, 2.0, 3.0] and hidden[1, :2].tolist() == [10.0, 11.0]
    assert draft_hidden[0].tolist() == [0.0, 1.0, 2.0, 3.0] and draft_hidden[1, :2].tolist() == [10.0, 11.0]
    assert torch.equal(batch.target.at(positions)[1, :2], b.target_logits[:2])


class ThreeTokens:
    def encode(self, text, add_special_tokens=False):
        return [1, 2, 3]


def test_reflective_decides_each_request_of_a_batch_as_alone():
    """Its extra rows ([R, d_1..d_k] per request) differ in length across a batch with mixed k."""
    policy = make_policy("reflective")
    policy.bind(PolicyEnv(ThreeTokens(), 12, torch.device("cpu")))
    blocks = []
    for seed, k in ((5, 5), (6, 2), (7, 0), (8, 3)):
        block = random_block(seed, GREEDY, k=k)
        extra = torch.randn(3 + k, 12, generator=torch.Generator().manual_seed(seed + 100))
        blocks.append(Block(block.draft_tokens, block.target_logits, None, GREEDY, None, {"extra_logits": extra}))
    together = policy.decide(Batch.of_blocks(blocks)).to_host()
    assert together == [policy.verify(block) for block in blocks]


def test_outcome_is_the_public_host_result_type():
    assert Outcome(1, 2) == Outcome(1, 2, 0)


def test_a_method_is_checked_before_any_model_loads():
    from relaxbench.decoders import check_method
    from relaxbench.methods import load_method

    check_method("cactus", load_method("cactus"), "some-draft-model", T1)
    with pytest.raises(ConfigError, match="'cactus' needs draft-model probabilities.*'ngram'"):
        check_method("cactus", load_method("cactus"), "ngram", T1)  # --draft ngram stands in for the draft model
    with pytest.raises(ConfigError, match="'margin-greedy' does not support sampling"):
        check_method("margin-greedy", load_method("margin-greedy"), "some-draft-model", T1)
