"""Efficiency benchmark: measured speed-up over the AR arm divided by the speed-up the counters predict.

Modelled speed-up of an arm = emitted × t_target_step / (rounds × t_verify + drafted × t_draft_step), with the
three unit costs measured separately (``harness.calibrate``: a 1-token target forward, a (k+1)-token verify
forward and the drafter's cost per proposed token) on a cache as long as the middle of a generation. It is what
the arm would gain if the loop cost nothing but its forward passes. Measured speed-up = decode tokens/s of the arm
over that of our AR arm, timed side by side (arms interleaved per prompt and repeat); decode time is the total
minus the prefill of both models, which the model leaves out and which is the same for every arm. An efficiency
near 1 means the loop (drafting bookkeeping, policy, cache rollback, Python) adds almost nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from relaxbench.arms import build_decoder, resolve_k
from relaxbench.benchmarks.engine import CODE_PROMPTS
from relaxbench.config import MethodSpec
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.decoding.records import GenerationResult
from relaxbench.harness.calibrate import Calibration, calibrate

EFFICIENCY_TARGET = 0.9


@dataclass
class ArmTotals:
    """One arm's decode time per repeat (summed over prompts) and its counters (summed over everything)."""

    method: str
    k: int
    decode_s: list[float] = field(default_factory=list)
    emitted: int = 0
    rounds: int = 0
    drafted: int = 0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_policy: float = 0.0
    calibration: Calibration | None = None

    def add(self, result: GenerationResult) -> float:
        self.emitted += result.n_emitted
        self.rounds += result.n_rounds
        self.drafted += sum(result.rounds.drafted)
        self.t_draft += sum(result.rounds.t_draft)
        self.t_verify += sum(result.rounds.t_verify)
        self.t_policy += sum(result.rounds.t_policy)
        return result.time_total - result.time_prefill

    @property
    def mean_acceptance_length(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    def modelled_speedup(self) -> float | None:
        cal = self.calibration
        if cal is None or cal.t_verify is None:
            return None
        cost = self.rounds * cal.t_verify + self.drafted * (cal.t_draft_step or 0.0)
        return self.emitted * cal.t_target_step / cost


@dataclass(frozen=True)
class EfficiencyRow:
    arm: ArmTotals
    measured_speedups: tuple[float, ...]  # per repeat, against the AR arm's decode tokens/s of the same repeat
    modelled: float | None
    target: float | None

    @property
    def measured(self) -> float:
        return statistics.median(self.measured_speedups)

    @property
    def efficiency(self) -> float | None:
        return self.measured / self.modelled if self.modelled else None

    @property
    def holds(self) -> bool | None:
        if self.target is None:
            return None
        return self.efficiency is not None and self.efficiency >= self.target


def pooled(last: Calibration, raw: dict[str, list[float]]) -> Calibration:
    """``last`` with every unit cost replaced by the median over all repeats' raw timings."""
    def median(key: str) -> float | None:
        return statistics.median(raw[key]) if raw.get(key) else None

    return Calibration(last.context_tokens, last.k, median("target_step"), median("verify"), median("draft_step"),
                       raw)


def bench_efficiency(target, draft, methods: list[MethodSpec], k: int | None, max_new_tokens: int, repeats: int,
                     n_prompts: int, checked: frozenset[str]) -> tuple[ArmTotals, list[EfficiencyRow]]:
    """Interleave the AR arm and every method over the prompts; after every repeat, calibrate each method's unit
    costs on a cache as long as the middle of the longest AR generation; return the AR totals and one row per
    method (unit costs: medians over all repeats)."""
    prompts = [encode_prompt(target.tokenizer, text) for text in CODE_PROMPTS[:n_prompts]]
    ar_method = MethodSpec("ar", "none")
    arms: list[tuple[ArmTotals, SpeculativeDecoder]] = []
    for method in [ar_method, *methods]:
        arm_k = 0 if method.policy == "none" else resolve_k(method, k)
        decoder = build_decoder(method, target, draft if method.policy != "none" else None,
                                DecodeConfig(k=arm_k, max_new_tokens=max_new_tokens))
        decoder.generate(prompts[0][:48])  # warm-up: every code path once
        arms.append((ArmTotals(method.name, arm_k), decoder))
    per_repeat: list[list[float]] = []
    context: list[int] | None = None
    raw: dict[str, dict[str, list[float]]] = {totals.method: {} for totals, _ in arms[1:]}
    for _ in range(repeats):
        times = [0.0] * len(arms)
        for prompt in prompts:
            for i, (totals, decoder) in enumerate(arms):
                result = decoder.generate(prompt)
                times[i] += totals.add(result)
                if i == 0 and (context is None or len(prompt) + len(result.output_ids) // 2 > len(context)):
                    context = prompt + result.output_ids[: len(result.output_ids) // 2]
        per_repeat.append(times)
        # unit costs measured in every repeat, between the arms' runs, so machine drift reaches both alike
        for totals, decoder in arms[1:]:
            calibration = calibrate(target, decoder.drafter, totals.k, context)
            for key, values in calibration.raw.items():
                raw[totals.method].setdefault(key, []).extend(values)
            totals.calibration = pooled(calibration, raw[totals.method])
    ar = arms[0][0]
    ar.decode_s = [times[0] for times in per_repeat]
    rows = []
    for i, (totals, _) in enumerate(arms[1:], start=1):
        totals.decode_s = [times[i] for times in per_repeat]
        # same tokens per repeat for every arm under greedy lossless rules; relaxed ones may differ, so use rates
        ar_rate = [ar.emitted / repeats / t for t in ar.decode_s]
        arm_rate = [totals.emitted / repeats / t for t in totals.decode_s]
        speedups = tuple(a / b for a, b in zip(arm_rate, ar_rate))
        rows.append(EfficiencyRow(totals, speedups, totals.modelled_speedup(),
                                  EFFICIENCY_TARGET if totals.method in checked else None))
    return ar, rows
