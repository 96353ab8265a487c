"""Policy decision time per verification round, held to a share of the round it decides.

Each round builds a fresh ``Block`` (so the lazily computed argmax and distributions are paid for, as in the engine)
from synthetic logits at a realistic size — by default Qwen2.5's padded vocabulary (V = 151,936) and FLy's draft
length k = 15 — and times ``policy.verify(block)`` alone with the project's one ``Clock``. Drafts follow a typical
block: each matches the target's argmax with probability 0.8, otherwise it is one of the next three tokens, so the
rules that only look at mismatches do realistic work. A second pool has every draft match ("all-match"; greedy
mode only).

What a decision costs only matters against the round it decides, so the bench also measures a real round on the
same device: one verify forward of k + 1 tokens of the target model on a cache of a few hundred tokens (median of
repeats). The target: each rule's median decision takes at most 1 % of that round.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from relaxbench.benchmarks.forward_cost import measure_forward_costs
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import Block, Need, PolicyEnv
from relaxbench.policies.judge_head import JudgeHead
from relaxbench.timing import Clock

ROUND_SHARE_TARGET = 0.01  # a decision may take at most this share of a measured round
REFLECTION_TOKENS = 16  # judge: reflection prompt length assumed for its extra logits
# trained judges: hidden sizes of Qwen2.5-Coder 1.5B (target) and 0.5B (draft), read from random heads of that size
HIDDEN = {"target": 1536, "draft": 896}
BENCH_PAIR = ("bench-target", "bench-draft")


@dataclass(frozen=True)
class PolicyTiming:
    policy: str
    mode: str  # "greedy" or "sampling"
    rounds: int
    times_ms: tuple[float, ...] = field(repr=False)  # the typical pool
    all_match_ms: tuple[float, ...] = field(repr=False)  # the all-match pool (greedy mode; empty otherwise)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def all_match_median_ms(self) -> float | None:
        return statistics.median(self.all_match_ms) if self.all_match_ms else None

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]

    def share_of(self, round_ms: float) -> float:
        """The median decision as a share of a round of ``round_ms``."""
        return self.median_ms / round_ms

    def holds(self, round_ms: float) -> bool:
        return self.share_of(round_ms) <= ROUND_SHARE_TARGET


@dataclass(frozen=True)
class BlockInputs:
    drafts: torch.Tensor
    target_logits: torch.Tensor
    draft_logits: torch.Tensor
    extra_logits: torch.Tensor
    hidden: torch.Tensor  # [k+1, H_target] the target's last hidden states (trained judges)
    draft_hidden: torch.Tensor  # [k, H_draft] the draft model's

    def extras(self) -> dict[str, torch.Tensor]:
        return {"extra_logits": self.extra_logits, "hidden_states": self.hidden,
                "draft_hidden_states": self.draft_hidden}


def synthetic_inputs(vocab: int, k: int, device: torch.device, seed: int) -> BlockInputs:
    """LLM-like rows — a long tail, a leading token holding ~10-95% of the mass and three close alternatives — and
    drafts that match the argmax 80% of the time, else take one of the alternatives."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    target = 2.0 * torch.randn(k + 1, vocab, generator=g)
    lead = 12.0 + 6.0 * torch.rand(k + 1, 1, generator=g)  # the tail's logsumexp is ~ ln V + 2 ≈ 14
    boosts = torch.cat([lead, lead - 3.0 * torch.rand(k + 1, 3, generator=g)], dim=-1)
    target.scatter_(-1, torch.randperm(vocab, generator=g)[: 4 * (k + 1)].view(k + 1, 4), boosts)
    order = torch.topk(target[:k], 4, dim=-1).indices
    ranks = torch.where(torch.rand(k, generator=g) < 0.8, 0, torch.randint(1, 4, (k,), generator=g))
    drafts = order[torch.arange(k), ranks]
    draft = target[:k] + 1.5 * torch.randn(k, vocab, generator=g)
    extra = target[:1] + 2.0 * torch.randn(REFLECTION_TOKENS + k, vocab, generator=g)
    hidden = torch.randn(k + 1, HIDDEN["target"], generator=g)
    draft_hidden = torch.randn(k, HIDDEN["draft"], generator=g)
    return BlockInputs(drafts.to(device), target.to(device), draft.to(device), extra.to(device), hidden.to(device),
                       draft_hidden.to(device))


def all_match(inputs: BlockInputs) -> BlockInputs:
    """The same logits with every draft equal to the target's argmax: a greedy verdict reads every row."""
    k = int(inputs.drafts.shape[0])
    return dataclasses.replace(inputs, drafts=inputs.target_logits[:k].argmax(dim=-1))


def policy_modes(names: Iterable[str] | None = None, modes: Iterable[str] = ("greedy", "sampling")
                 ) -> list[tuple[str, str]]:
    """(policy, mode) pairs to time: every registered policy in every mode it supports (not the AR baseline)."""
    chosen = set(names) if names else None
    return [(name, mode) for name, cls in POLICIES.items() if name != "none" and (chosen is None or name in chosen)
            for mode in sorted(cls.modes.supported) if mode in modes]


def time_policy(name: str, mode: str, pools: tuple[list[BlockInputs], list[BlockInputs]], rounds: int,
                sampling: SamplingParams, warmup: int = 5) -> PolicyTiming:
    """Decision times of ``name`` in ``mode`` (greedy mode ignores ``sampling``; the all-match pool is timed in
    greedy mode only)."""
    typical_pool, all_match_pool = pools
    device = typical_pool[0].target_logits.device
    vocab = int(typical_pool[0].target_logits.shape[-1])
    with tempfile.TemporaryDirectory() as folder:
        policy = make_policy(name, bench_knobs(name, Path(folder)))
    if Need.EXTRA_TOKENS in policy.needs or "head" in policy.knobs.model_fields:
        policy.bind(PolicyEnv(_CountingTokenizer(), vocab, device, *BENCH_PAIR))
    sampling = SamplingParams() if mode == "greedy" else sampling
    generator = torch.Generator(device=device).manual_seed(0)
    clock = Clock(device)
    times: dict[str, list[float]] = {"typical": [], "all-match": []}
    for pool_name, pool in (("typical", typical_pool), ("all-match", all_match_pool if mode == "greedy" else [])):
        for i in range(warmup + rounds if pool else 0):
            inputs = pool[i % len(pool)]
            block = Block(inputs.drafts, inputs.target_logits, inputs.draft_logits, sampling, generator,
                          inputs.extras())
            start = clock.now()
            policy.verify(block)
            elapsed = clock.now() - start
            if i >= warmup:
                times[pool_name].append(elapsed * 1e3)
    return PolicyTiming(name, mode, rounds, tuple(times["typical"]), tuple(times["all-match"]))


def bench_knobs(name: str, folder: Path) -> dict[str, object]:
    """Default knobs; a trained judge gets a random head (written to ``folder``) of Qwen2.5-Coder's hidden sizes
    and tau = 0.5, as its decision time depends on the sizes and not on the weights."""
    cls = POLICIES.get(name)
    if "head" not in cls.Knobs.model_fields:
        return {}
    kind = str(getattr(cls, "kind", name))
    inputs = ("draft", "target") if Need.DRAFT_HIDDEN_STATES in cls.needs else ("target",)
    width = sum(HIDDEN[i] for i in inputs)
    g = torch.Generator().manual_seed(0)
    head = JudgeHead(kind, inputs, {i: HIDDEN[i] for i in inputs}, torch.zeros(width, dtype=torch.float64),
                     torch.ones(width, dtype=torch.float64),
                     torch.randn(width, generator=g, dtype=torch.float64) / width ** 0.5, 0.0,
                     {"target": {"name": BENCH_PAIR[0]}, "draft": {"name": BENCH_PAIR[1]}})
    return {"head": str(head.save(folder / f"{kind}.json")), "tau": 0.5}


class _CountingTokenizer:
    """Stands in for a tokenizer when timing the judge: the prompt's token ids do not affect decision time."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(range(REFLECTION_TOKENS))


def run_policy_bench(vocab: int = 151_936, k: int = 15, rounds: int = 200, sampling_rounds: int = 50,
                     device: str = "cpu", names: Iterable[str] | None = None,
                     modes: Iterable[str] = ("greedy", "sampling"),
                     sampling: SamplingParams = SamplingParams(temperature=0.7),
                     pool_size: int = 4) -> list[PolicyTiming]:
    """Time every (policy, mode); sampling-mode rows use ``sampling`` (a top-p below 1 adds a full sort per row of
    p and q to every rule, inside ``logits_to_probs``)."""
    torch_device = torch.device(device)
    typical_pool = [synthetic_inputs(vocab, k, torch_device, seed) for seed in range(pool_size)]
    pools = (typical_pool, [all_match(inputs) for inputs in typical_pool])
    return [time_policy(name, mode, pools, rounds if mode == "greedy" else sampling_rounds, sampling)
            for name, mode in policy_modes(names, modes)]


def verify_round_ms(target, k: int, context: int = 300, repeats: int = 5) -> float:
    """Median milliseconds of one verify forward of ``k + 1`` tokens of the loaded ``target`` on a ``context``-token
    cache: the round a decision is held to."""
    return measure_forward_costs(target, (k + 1,), context, repeats)[0].median_ms


def baseline_medians(timings: list[PolicyTiming]) -> dict[str, float]:
    """Median of the lossless rule of each mode (exact / speculative sampling), to show each rule's overhead."""
    baseline = {"greedy": "exact", "sampling": "speculative-sampling"}
    return {t.mode: t.median_ms for t in timings if baseline[t.mode] == t.policy}
