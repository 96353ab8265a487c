"""Every rule's batched decision held to the oracle (the per-request rules as they were, tests/oracle/), and the
batch contract every registered rule keeps.

* Equivalence: per rule, mode and knob setting, random blocks (mixed k including 0, ties at the top, −inf logits,
  per-request temperature/top-k/top-p under sampling) decided in batches of 2,000 by the rule and one block at a time
  by the oracle, each side drawing its uniforms from an identically seeded generator per block: identical verdicts.
  6,000 blocks per rule and mode at its default knobs and 1,500 at each further setting (its strict end, each
  ladder's loosest step) at a small vocabulary, and a few at V = 151,936 (Qwen's vocabulary) per rule and mode.
  The power: a rule that parts from the oracle on a fraction f of blocks fails with probability 1 − (1 − f)^n,
  at least 0.95 for f ≥ 5.0e-4 at its defaults and for f ≥ 2.0e-3 at each further setting; every pattern the
  blocks cycle through (a tie every 7th, a mask every 5th, five sampling settings) appears over 150 times per rule.
* Distribution: per sampling rule, a χ² test of the joint (accepted length, next token) of the batched rule against
  the oracle's, each with its own random numbers.
* The contract: inside ``decide`` no host synchronisation and an operation count that does not grow with the batch,
  counted with a dispatch mode for every registered rule at B = 1 and B = 256.
* One file: a throwaway rule defined in a test registers, is discovered, and decides batches; a rule without a batched
  decision is refused at registration in one line.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from scipy import stats

from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES, Batch, Block, Need, PolicyEnv, make_policy
from tests.oracle import Block as OracleBlock
from tests.oracle import PolicyEnv as OraclePolicyEnv
from tests.oracle import oracle_policy

BLOCKS = 6_000  # per rule and mode at the rule's default knobs: 95 % power against f >= 5.0e-4 (docstring)
OTHER_SETTINGS = 1_500  # per further knob setting (the strict end, each ladder's loosest step)
CHUNK = 2_000  # blocks per batched call
WIDE_V = 151_936
HIDDEN = 64


class ReflectionTokenizer:
    """A three-token reflection prompt for the reflective rule."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1, 2, 3]


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    from tests.test_trained_judges import tiny_head

    folder = tmp_path_factory.mktemp("heads")
    return {kind: str(tiny_head(folder, kind)) for kind in ("autojudge", "judge-decoding")}


def settings_of(name: str, mode: str, heads) -> list[dict]:
    """Knob settings per rule and mode: its defaults, its strict end where it has one, and its loosest declared
    ladder step."""
    cls = POLICIES.get(name)
    base = {"head": heads[name], "tau": 0.5} if name in heads else {}
    out = [base]
    if cls.modes.strict_knobs and mode in cls.modes:
        out.append({**base, **cls.modes.strict_knobs})
    loosening = cls.modes.loosening
    if not isinstance(loosening, str):
        for knob, values in loosening.items():
            out.append({**base, knob: values[-1]})
    unique = []
    for knobs in out:
        if knobs not in unique:
            unique.append(knobs)
    return unique


def oracle_names() -> set[str]:
    import tests.oracle.rules  # noqa: F401  (registers the oracle rules)
    from tests.oracle.base import POLICIES as ORACLE

    return set(ORACLE.names())


def cases(names) -> list[tuple[str, str]]:
    return [(name, mode) for name in names for mode in ("greedy", "sampling") if mode in POLICIES.get(name).modes]


# every registered rule keeps the batch contract; the rules that had a per-request implementation are held to it
CASES = cases(name for name in POLICIES.names() if name != "none")
ORACLE_CASES = cases(name for name in POLICIES.names() if name in oracle_names())
SAMPLINGS = [SamplingParams(1.0), SamplingParams(0.7), SamplingParams(1.3, top_k=5), SamplingParams(1.0, top_p=0.9),
             SamplingParams(0.8, top_k=8, top_p=0.8)]


def random_blocks(n: int, mode: str, needs: frozenset, seed: int, vocab: int = 24, max_k: int = 6,
                  extra_rows: int = 3, samplings: Sequence[SamplingParams] = SAMPLINGS
                  ) -> list[tuple[Block, OracleBlock]]:
    """``n`` random rounds as (block, oracle block), identically seeded generators on both sides; under sampling
    the blocks cycle through ``samplings``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = int(torch.randint(0, max_k + 1, (), generator=g))
        scale = float(torch.rand((), generator=g)) * 4 + 0.5
        target = torch.randn(k + 1, vocab, generator=g) * scale
        if i % 7 == 0:  # a tie at the top
            target[:, 1] = target.max(dim=-1).values
        if i % 5 == 0:  # part of the vocabulary masked
            target[:, vocab // 2:] = -math.inf
            target[:, 0] = torch.maximum(target[:, 0], torch.zeros(()))
        draft = target[:k] + torch.randn(k, vocab, generator=g) * 1.5
        argmax = target[:k].argmax(-1)
        guesses = torch.randint(vocab, (k,), generator=g)
        drafts = torch.where(torch.rand(k, generator=g) < 0.6, argmax, guesses)
        sampling = SamplingParams() if mode == "greedy" else samplings[i % len(samplings)]
        extras = {}
        if Need.HIDDEN_STATES in needs:
            extras["hidden_states"] = torch.randn(k + 1, HIDDEN, generator=g)
        if Need.DRAFT_HIDDEN_STATES in needs:
            extras["draft_hidden_states"] = torch.randn(k, HIDDEN, generator=g)
        if Need.EXTRA_TOKENS in needs:
            extras["extra_logits"] = torch.randn(extra_rows + k, vocab, generator=g) * scale
        with_q = Need.DRAFT_PROBS in needs or Need.DRAFT_PROBS_IF_ANY in needs
        draft_logits = draft if with_q else None
        stream = 1_000_003 * seed + i
        out.append((Block(drafts, target, draft_logits, sampling, torch.Generator().manual_seed(stream), extras),
                    OracleBlock(drafts, target, draft_logits, sampling, torch.Generator().manual_seed(stream),
                                extras)))
    return out


def bound(policy, vocab: int, env_class=PolicyEnv):
    policy.bind(env_class(ReflectionTokenizer(), vocab, torch.device("cpu"), "tiny-random-target", "tiny-random-draft"))
    policy.reset()
    return policy


def batched_outcomes(policy, blocks: list[Block]) -> list:
    """The rule's verdicts on ``blocks`` decided as batches of ``CHUNK``, each block's uniforms from its stream."""
    outcomes = []
    for start in range(0, len(blocks), CHUNK):
        chunk = blocks[start: start + CHUNK]
        uniforms = [policy.uniforms(b.generator, b.k, b.sampling) for b in chunk]
        outcomes += policy.decide(Batch.of_blocks(chunk, policy.uniform_dtype, uniforms)).to_host()
    return outcomes


def oracle_outcomes(oracle, blocks: list[OracleBlock]) -> list[tuple[int, int, int]]:
    return [(v.n_accepted, v.next_token, v.n_relaxed) for v in map(oracle.verify, blocks)]


def differences(name: str, knobs: dict, mode: str, n: int, seed: int, **shape) -> list[tuple[int, tuple, tuple]]:
    policy = bound(make_policy(name, knobs), shape.get("vocab", 24))
    oracle = bound(oracle_policy(name, knobs), shape.get("vocab", 24), OraclePolicyEnv)
    pairs = random_blocks(n, mode, policy.needs, seed, **shape)
    ours = [(o.n_accepted, o.next_token, o.n_relaxed) for o in batched_outcomes(policy, [b for b, _ in pairs])]
    theirs = oracle_outcomes(oracle, [ob for _, ob in pairs])
    return [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]


@pytest.mark.parametrize("name,mode", ORACLE_CASES, ids=[f"{n}-{m}" for n, m in ORACLE_CASES])
@pytest.mark.slow
def test_batched_rule_equals_the_oracle_verdict_for_verdict(name, mode, heads):
    for index, knobs in enumerate(settings_of(name, mode, heads)):
        n = BLOCKS if index == 0 else OTHER_SETTINGS
        diff = differences(name, knobs, mode, n, seed=17 + index)
        assert not diff, f"{name} {mode} {knobs}: {len(diff)} of {n} verdicts differ, first {diff[:3]}"


UNIFORM_BLOCKS = 1_000  # per rule and shared setting: one batched call, about 140 requests with no drafts
SHARED_SETTINGS = [SamplingParams(0.7), SamplingParams(1.3, top_k=5, top_p=0.9)]
SAMPLING_ORACLE_RULES = [name for name, mode in ORACLE_CASES if mode == "sampling"]


@pytest.mark.parametrize("name", SAMPLING_ORACLE_RULES)
def test_a_batch_sharing_one_setting_equals_the_oracle_verdict_for_verdict(name, heads):
    """A run's requests share one sampling setting, which the batch knows on the host: processing takes its scalar
    path, and a rule may branch on it (FLy and margin draw a request's token in their own draw when the setting is a
    temperature alone, empty requests included). The oracle equivalence above mixes settings within a batch; here
    every batch shares one, a temperature alone and one with both cuts, with requests that drafted nothing."""
    knobs = settings_of(name, "sampling", heads)[0]
    for index, shared in enumerate(SHARED_SETTINGS):
        diff = differences(name, knobs, "sampling", UNIFORM_BLOCKS, seed=41 + index, samplings=(shared,))
        assert not diff, f"{name} {shared}: {len(diff)} of {UNIFORM_BLOCKS} verdicts differ, first {diff[:3]}"


# knob values whose code paths no default, strict end or ladder step reaches (a plausibility cut, a top set between
# the single argmax and the whole support, the KL divergence)
OFF_LADDER = [("contrastive", "sampling", {"alpha": 0.1}), ("casc-tok", "sampling", {"alpha": 0.5}),
              ("casc-tok", "sampling", {"alpha": 1.0}), ("fuzzy", "sampling", {"divergence": "kl", "threshold": 0.2})]


@pytest.mark.parametrize("name,mode,knobs", OFF_LADDER, ids=[f"{n}-{m}-{k}" for n, m, k in OFF_LADDER])
def test_batched_rule_equals_the_oracle_off_its_ladder(name, mode, knobs):
    diff = differences(name, knobs, mode, OTHER_SETTINGS, seed=29)
    assert not diff, f"{name} {mode} {knobs}: {len(diff)} of {OTHER_SETTINGS} verdicts differ, first {diff[:3]}"


def tensors_of(batch: Batch) -> dict[str, torch.Tensor]:
    """Every tensor a decision reads from ``batch`` (its rows, drafts, uniforms and extras), copied."""
    found = {"drafts": batch.drafts, "num_drafts": batch.num_drafts, "accept_u": batch.accept_u,
             "draw_u": batch.draw_u, "target": batch.target.source}
    for key, rows in (("draft_logits", batch.draft_logits), ("draft_probs", batch.draft_probs),
                      *batch.extras.items()):
        if rows is not None:
            found[key] = getattr(rows, "source", rows)
    return {key: value.clone() for key, value in found.items()}


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_a_decision_leaves_its_batch_unchanged(name, mode, heads):
    """Rules work in place on the rows they gather: the engine's logits, the drafter's rows and the uniforms must come
    out of a decision as they went in, and a second decision of the same batch (its cached reductions reused) must
    decide the same. Sampling runs with top-k and top-p, whose cuts write into the tempered copy."""
    from relaxbench.benchmarks.op_count import random_batch

    policy = bound(make_policy(name, {"head": heads[name], "tau": 0.5} if name in heads else None), 200)
    settings = SamplingParams(0.8, top_k=50, top_p=0.9) if mode == "sampling" else None
    for engine_q in ((False, True) if mode == "sampling" and policy.needs & {Need.DRAFT_PROBS,
                                                                             Need.DRAFT_PROBS_IF_ANY} else (False,)):
        batch = random_batch(policy, 6, 4, 200, sampling=mode == "sampling", settings=settings, engine_q=engine_q,
                             generator=torch.Generator().manual_seed(3), hidden={"target": HIDDEN, "draft": HIDDEN})
        before = tensors_of(batch)
        first = policy.decide(batch).to_host()
        for key, value in tensors_of(batch).items():
            assert torch.equal(value, before[key]), f"{name} {mode}: the decision changed the batch's {key!r}"
        cached = cached_reductions(batch)  # what the first decision computed and the batch keeps
        assert policy.decide(batch).to_host() == first, f"{name} {mode}: a second decision of the batch differs"
        assert cached, f"{name} {mode}: no cached reduction to check"
        for key, value in cached_reductions(batch).items():
            assert torch.equal(value, cached[key]), f"{name} {mode}: a decision changed the cached {key}"


def cached_reductions(batch: Batch) -> dict[str, torch.Tensor]:
    """The batch's cached tensor properties (``p``, ``q``, the draft rows, ...) and the tensors of its cached tuples
    (``target_max``, ``pairs``), copied."""
    inputs = tensors_of(batch).keys()
    out = {}
    for key, value in vars(batch).items():
        if key in inputs:
            continue
        if isinstance(value, torch.Tensor):
            out[repr(key)] = value.clone()
        elif isinstance(value, tuple):
            out.update({f"{key!r}[{i}]": part.clone() for i, part in enumerate(value) if isinstance(part, torch.Tensor)})
    return out


@pytest.mark.parametrize("name,mode", ORACLE_CASES, ids=[f"{n}-{m}" for n, m in ORACLE_CASES])
def test_batched_rule_equals_the_oracle_at_qwens_vocabulary(name, mode, heads):
    knobs = settings_of(name, mode, heads)[0]
    diff = differences(name, knobs, mode, 12, seed=5, vocab=WIDE_V, max_k=4)
    assert not diff, f"{name} {mode} at V = {WIDE_V}: {diff[:3]}"


def joint_counts(outcomes, k: int, vocab: int) -> np.ndarray:
    counts = np.zeros((k + 1, vocab))
    for n, token, _ in outcomes:
        counts[n, token] += 1
    return counts


SAMPLED = [name for name, mode in ORACLE_CASES if mode == "sampling"]


@pytest.mark.parametrize("name", SAMPLED)
@pytest.mark.slow
def test_batched_rule_samples_the_oracles_distribution(name, heads):
    """The same round repeated: the batched rule with one set of streams, the oracle with another; the joint
    (accepted length, next token) agree by a χ² test of homogeneity."""
    vocab, k, trials = 6, 3, 6000
    knobs = settings_of(name, "sampling", heads)[0]
    policy = bound(make_policy(name, knobs), vocab)
    oracle = bound(oracle_policy(name, knobs), vocab, OraclePolicyEnv)
    g = torch.Generator().manual_seed(3)
    target = torch.randn(k + 1, vocab, generator=g) * 1.2
    draft = target[:k] + torch.randn(k, vocab, generator=g)
    drafts = torch.tensor([int(target[0].argmax()), 1, int(target[2].argmax())])
    sampling = SamplingParams(1.0)
    needs = policy.needs
    extras = {"extra_logits": torch.randn(3 + k, vocab, generator=g)} if Need.EXTRA_TOKENS in needs else {}
    q = draft if (Need.DRAFT_PROBS in needs or Need.DRAFT_PROBS_IF_ANY in needs) else None
    ours = batched_outcomes(policy, [Block(drafts, target, q, sampling, torch.Generator().manual_seed(s), extras)
                                     for s in range(trials)])
    theirs = [oracle.verify(OracleBlock(drafts, target, q, sampling, torch.Generator().manual_seed(10 ** 6 + s),
                                        extras)) for s in range(trials)]
    a = joint_counts([(o.n_accepted, o.next_token, 0) for o in ours], k, vocab).ravel()
    b = joint_counts([(o.n_accepted, o.next_token, 0) for o in theirs], k, vocab).ravel()
    keep = (a + b) > 0
    if keep.sum() == 1:  # a deterministic rule on this round: one outcome on both sides
        assert np.array_equal(a, b)
        return
    assert stats.chi2_contingency(np.stack([a[keep], b[keep]])).pvalue > 1e-4


# -- the contract: no synchronisation, an operation count independent of the batch --------------------------------
def counted(policy, batch: Batch):
    from relaxbench.benchmarks.op_count import count

    return count(lambda: policy.decide(batch))


def padded(policy, size: int, mode: str) -> Batch:
    """A batch of ``size`` requests with k = 4 each except the last (k = 0), so the width is the same at any size."""
    g = torch.Generator().manual_seed(size)
    blocks = []
    for i in range(size):
        k = 0 if (i == size - 1 and size > 1) else 4
        target = torch.randn(k + 1, 32, generator=g)
        guesses = torch.randint(32, (k,), generator=g)
        drafts = torch.where(torch.rand(k, generator=g) < 0.5, target[:k].argmax(-1), guesses)
        extras = {}
        if Need.HIDDEN_STATES in policy.needs:
            extras["hidden_states"] = torch.randn(k + 1, HIDDEN, generator=g)
        if Need.DRAFT_HIDDEN_STATES in policy.needs:
            extras["draft_hidden_states"] = torch.randn(k, HIDDEN, generator=g)
        if Need.EXTRA_TOKENS in policy.needs:
            extras["extra_logits"] = torch.randn(3 + k, 32, generator=g)
        q = target[:k] + torch.randn(k, 32, generator=g)
        sampling = SamplingParams() if mode == "greedy" else SamplingParams(1.0)
        blocks.append(Block(drafts, target, q, sampling, torch.Generator().manual_seed(i), extras))
    if size == 1:  # B = 1 with a request that drafted nothing too: compare like with like
        blocks.append(Block(torch.zeros(0, dtype=torch.long), torch.randn(1, 32, generator=g), None,
                            blocks[0].sampling, torch.Generator().manual_seed(99), {
                                key: value[:1] if key == "hidden_states" else value[:0] if key != "extra_logits"
                                else value[:3] for key, value in blocks[0].extras.items()}))
    uniforms = [policy.uniforms(b.generator, b.k, b.sampling) for b in blocks]
    return Batch.of_blocks(blocks, policy.uniform_dtype, uniforms)


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_a_decision_never_synchronises_and_its_operations_do_not_grow_with_the_batch(name, mode, heads):
    knobs = settings_of(name, mode, heads)[0]
    policy = bound(make_policy(name, knobs), 32)
    small, large = counted(policy, padded(policy, 2, mode)), counted(policy, padded(policy, 256, mode))
    assert small.syncs == 0 and large.syncs == 0, (small.sync_names, large.sync_names)
    assert small.ops == large.ops, f"{name} {mode}: {small.ops} operations at B = 2, {large.ops} at B = 256"


# -- a new rule is one file ---------------------------------------------------------------------------------------
RULE_FILE = '''"""A throwaway rule: accepts a mismatch when the draft is the target's second choice.

Deviations: none."""

import torch

from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_judgement


@register_policy
class RunnerUp(VerificationPolicy):
    name = "runner-up-test"
    modes = Modes(supported={"greedy"}, strict_knobs={"on": False}, loosening={"on": (False, True)})
    origin = Origin(Fidelity.VARIANT, "a test", "accept the target's second choice")

    class Knobs(VerificationPolicy.Knobs):
        on: bool = True

    def judge(self, batch: Batch) -> Judgement:
        second = batch.target.of(torch.topk(batch.target.source, 2, dim=-1).indices[:, 1])[:, :-1]
        return greedy_judgement(batch, (second == batch.drafts) & self.knobs.on)
'''


def test_a_rule_is_one_file_discovered_with_no_list_to_edit(tmp_path, monkeypatch):
    import importlib
    import pkgutil
    import sys

    import relaxbench.policies as package

    monkeypatch.setattr(POLICIES, "_items", dict(POLICIES._items))
    folder = tmp_path / "more_rules"
    folder.mkdir()
    (folder / "runner_up.py").write_text(RULE_FILE)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in pkgutil.iter_modules(package.__path__):  # what importing the package does
        importlib.import_module(f"relaxbench.policies.{module.name}")
    try:
        assert "runner-up-test" in POLICIES
        policy = make_policy("runner-up-test")
        target = torch.tensor([[3.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
        outcome = policy.verify(Block(torch.tensor([1]), target, None, SamplingParams(), None))
        assert (outcome.n_accepted, outcome.next_token, outcome.n_relaxed) == (1, 2, 1)
        assert make_policy("runner-up-test", {"on": False}).verify(
            Block(torch.tensor([1]), target, None, SamplingParams(), None)).n_accepted == 0
    finally:
        sys.modules.pop("relaxbench.policies.runner_up", None)


def test_a_rule_without_a_batched_decision_is_refused_in_one_line():
    from relaxbench.policies.base import Fidelity, Modes, Origin, VerificationPolicy, register_policy

    class PerRequest(VerificationPolicy):
        name = "per-request-test"
        modes = Modes(lossless=True)
        origin = Origin(Fidelity.BASELINE, "a test", "decides one request")
        __module__ = __name__

        def verify(self, block):  # the old per-request interface only
            return None

    with pytest.raises(TypeError) as info:
        register_policy(PerRequest)
    message = str(info.value)
    assert "define judge(batch) -> Judgement" in message and "\n" not in message
    assert "per-request-test" not in POLICIES


# -- the span gate ------------------------------------------------------------------------------------------------
class TagTokenizer:
    """``<think>`` and ``</think>`` as single tokens 6 and 7, as Qwen3's are."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return {"<think>": [6], "</think>": [7]}.get(text, [0])


def span_cases(n: int, seed: int, vocab: int = 12, max_k: int = 6):
    """Random contexts and drafts, both rich in tags, with target rows that relax often."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        context = torch.randint(vocab, (int(torch.randint(1, 8, (), generator=g)),), generator=g).tolist()
        k = int(torch.randint(0, max_k + 1, (), generator=g))
        target = torch.randn(k + 1, vocab, generator=g) * 1.5
        drafts = torch.where(torch.rand(k, generator=g) < 0.5, target[:k].argmax(-1),
                             torch.randint(vocab, (k,), generator=g))
        yield i, context, drafts, target


@pytest.mark.parametrize("inner", ["relaxed-topk-delta", "fly", "topk", "margin-greedy", "typical-greedy"])
@pytest.mark.parametrize("relax_in", ["thinking", "answer", "all"])
@pytest.mark.slow
def test_the_span_gate_equals_the_oracles_verdict_for_verdict_under_greedy_decoding(inner, relax_in):
    from relaxbench.policies.span import SpanGate
    from tests.oracle.span import SpanGate as OracleSpanGate

    ours = SpanGate(make_policy(inner, {"window": 2} if inner == "fly" else {}), relax_in)
    theirs = OracleSpanGate(oracle_policy(inner, {"window": 2} if inner == "fly" else {}), relax_in)
    ours.bind(PolicyEnv(TagTokenizer(), 12, torch.device("cpu")))
    theirs.bind(OraclePolicyEnv(TagTokenizer(), 12, torch.device("cpu")))
    relaxed = 0
    for i, context, drafts, target in span_cases(3000, seed=zlib.crc32(inner.encode()) % 1000):
        ours.reset()
        ours.observe(context)
        theirs.reset()
        a = ours.verify(Block(drafts, target, None, SamplingParams(), None))
        b = theirs.verify(OracleBlock(drafts, target, None, SamplingParams(), None, {}, torch.tensor(context)))
        assert (a.n_accepted, a.next_token, a.n_relaxed, a.emitted_in_span, a.relaxed_in_span) == \
            (b.n_accepted, b.next_token, b.n_relaxed, b.emitted_in_span, b.relaxed_in_span), (i, context, drafts)
        relaxed += a.n_relaxed
    assert relaxed > 0


@pytest.mark.slow
def test_the_span_gate_samples_the_oracles_distribution():
    """Under sampling the gate's strict and relaxed tests share the round's uniforms (the oracle drew per run), so
    the streams differ: the joint (accepted length, next token, relaxed count) agree in distribution."""
    from relaxbench.policies.span import SpanGate
    from tests.oracle.span import SpanGate as OracleSpanGate

    vocab, trials = 8, 6000
    g = torch.Generator().manual_seed(11)
    target = torch.randn(5, vocab, generator=g)
    draft = target[:4] + torch.randn(4, vocab, generator=g)
    drafts = torch.tensor([1, 6, 2, 7])  # opens the span at position 1, closes it at 3
    context = [0, 3]
    knobs = {"threshold_acc": 0.3}
    ours = SpanGate(make_policy("sglang-threshold", knobs), "thinking")
    theirs = OracleSpanGate(oracle_policy("sglang-threshold", knobs), "thinking")
    ours.bind(PolicyEnv(TagTokenizer(), vocab, torch.device("cpu")))
    theirs.bind(OraclePolicyEnv(TagTokenizer(), vocab, torch.device("cpu")))
    counts = np.zeros((2, 5 * vocab * 5))
    for s in range(trials):
        ours.reset()
        ours.observe(context)
        theirs.reset()
        a = ours.verify(Block(drafts, target, draft, SamplingParams(1.0), torch.Generator().manual_seed(s)))
        b = theirs.verify(OracleBlock(drafts, target, draft, SamplingParams(1.0),
                                      torch.Generator().manual_seed(10 ** 6 + s), {}, torch.tensor(context)))
        for row, v in ((0, a), (1, b)):
            counts[row, (v.n_accepted * vocab + v.next_token) * 5 + v.n_relaxed] += 1
    keep = counts.sum(axis=0) > 0
    assert keep.sum() > 3
    assert stats.chi2_contingency(counts[:, keep]).pvalue > 1e-4
