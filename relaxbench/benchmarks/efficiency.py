"""Efficiency benchmark: an arm's decode-rate ratio over the AR arm divided by the ratio its counters predict (the
*loop efficiency*; every name here is defined in ``METRIC_DEFINITIONS``, none of them is the report's speed-up).

Modelled decode-rate ratio of an arm = its decode rate over AR's, with each generation's decode time replaced by its
proxy time on a cost profile of this machine (``relaxbench.profiles``: the target's 1-token and (k+1)-token forwards
and the draft model's forwards, measured on a cache as long as the middle of a generation, priced over the rounds
the generation recorded). It is what the arm would gain if the loop cost nothing but its forward passes. Decode-rate
ratio = decode tokens/s of the arm over that of our AR arm on the same prompt; decode time is the total minus the
prefill of both models, which the model leaves out and which is the same for every arm. Both are taken per
(prompt, repeat) from runs and a profile seconds apart, and the figures are medians over those units: on a shared
machine whose speed drifts by tens of percent between minutes, that pairing is what keeps the ratio meaningful. A
loop efficiency near 1 means the loop (drafting bookkeeping, policy, cache rollback, Python) adds almost nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from relaxbench.benchmarks.engine import CODE_PROMPTS
from relaxbench.decoders import build_decoder, resolve_k
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.decoding.records import Counters, GenerationResult
from relaxbench.methods import MethodSpec
from relaxbench.profiles import Profile, Work, proxy_time
from relaxbench.profiles.measure import Grid, measure_profile

EFFICIENCY_TARGET = 0.9


@dataclass
class ArmTotals:
    """One arm's decode time per generation and its counters and time split (summed over everything)."""

    method: str
    k: int
    decode_s: list[float] = field(default_factory=list)  # per generation
    counters: Counters = field(default_factory=Counters)
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_policy: float = 0.0  # the policy decisions alone (policy.verify), summed
    profile: Profile | None = None  # the latest one
    last: GenerationResult | None = None  # the latest generation

    def add(self, result: GenerationResult) -> float:
        """Count ``result`` in; return its decode time (total minus prefill)."""
        self.last = result
        self.counters += result.counters
        self.t_draft += sum(result.rounds.t_draft)
        self.t_verify += sum(result.rounds.t_verify)
        self.t_policy += sum(result.rounds.t_policy)
        self.decode_s.append(result.time_total - result.time_prefill)
        return self.decode_s[-1]


@dataclass(frozen=True)
class Unit:
    """One (prompt, repeat): the arm's decode-rate ratio over the AR run just before it (``measured``), and the
    ratio its rounds predict with a profile measured right after it (``modelled``)."""

    measured: float  # decode-rate ratio
    modelled: float  # modelled decode-rate ratio

    @property
    def efficiency(self) -> float:
        """Loop efficiency."""
        return self.measured / self.modelled


@dataclass(frozen=True)
class EfficiencyRow:
    arm: ArmTotals
    units: tuple[Unit, ...]
    target: float | None

    @property
    def measured(self) -> float:
        return statistics.median(u.measured for u in self.units)

    @property
    def modelled(self) -> float:
        return statistics.median(u.modelled for u in self.units)

    @property
    def efficiency(self) -> float | None:
        return statistics.median(u.efficiency for u in self.units) if self.units else None

    @property
    def holds(self) -> bool | None:
        if self.target is None:
            return None
        return self.efficiency is not None and self.efficiency >= self.target


def decode_rate(result: GenerationResult, profile: Profile, drafter: str | None) -> float:
    """Tokens per second of ``result``'s decode phase priced on ``profile`` (prefill left out, as measured)."""
    return result.n_emitted / proxy_time(profile, Work.of_generation(result), drafter).decode


def machine_profile(target, draft, k: int, context: list[int], repeats: int) -> Profile:
    """The forwards an arm of draft length ``k`` runs, on a cache as long as ``context``: 1, 2 and k + 1 target
    tokens; 1, 2, 4 and 8 draft tokens (n-gram+LM drafting feeds several)."""
    ctx = len(context) - 1
    grid = Grid(new_tokens=tuple(sorted({1, 2, k + 1})), context=(ctx,), prefill=(1,),  # prefill is left out
                draft_new_tokens=(1, 2, 4, 8), lookup_context=(ctx + 1,))
    return measure_profile(target, draft, grid, repeats=repeats, source=context)


def bench_efficiency(target, draft, methods: list[MethodSpec], k: int | None, max_new_tokens: int, repeats: int,
                     n_prompts: int, checked: frozenset[str], calibration_repetitions: int = 3
                     ) -> tuple[ArmTotals, list[EfficiencyRow]]:
    """For every (repeat, prompt): the AR arm, then each method followed at once by a profile of the forwards it
    runs (on a cache as long as the middle of this prompt's AR output); AR's and the method's generations are
    priced on it. Measured, modelled and their ratio are taken per (prompt, repeat) — all from measurements
    seconds apart, so machine drift cancels — and reported as medians over them."""
    prompts = [encode_prompt(target.tokenizer, text) for text in CODE_PROMPTS[:n_prompts]]
    arms: list[tuple[ArmTotals, SpeculativeDecoder]] = []
    for method in [MethodSpec(name="ar", policy="none"), *methods]:
        arm_k = 0 if method.policy == "none" else resolve_k(method, k)
        decoder = build_decoder(method, target, draft if method.policy != "none" else None,
                                DecodeConfig(k=arm_k, max_new_tokens=max_new_tokens))
        decoder.generate(prompts[0][:48])  # warm-up: every code path once
        arms.append((ArmTotals(method.name, arm_k), decoder))
    (ar, ar_decoder), spec_arms = arms[0], arms[1:]
    units: dict[str, list[Unit]] = {totals.method: [] for totals, _ in spec_arms}
    for _ in range(repeats):
        for prompt in prompts:
            ar_result = ar_decoder.generate(prompt)
            ar_rate = ar_result.n_emitted / ar.add(ar_result)
            context = prompt + ar_result.output_ids[: len(ar_result.output_ids) // 2]
            for totals, decoder in spec_arms:
                result = decoder.generate(prompt)
                rate = result.n_emitted / totals.add(result)
                drafter = None if decoder.drafter is None else decoder.drafter.name
                profile = machine_profile(target, draft if drafter != "ngram" else None, totals.k, context,
                                          calibration_repetitions)
                totals.profile = profile
                modelled = decode_rate(result, profile, drafter) / decode_rate(ar_result, profile, None)
                units[totals.method].append(Unit(rate / ar_rate, modelled))
    rows = [EfficiencyRow(totals, tuple(units[totals.method]), EFFICIENCY_TARGET if totals.method in checked
                          else None) for totals, _ in spec_arms]
    return ar, rows
