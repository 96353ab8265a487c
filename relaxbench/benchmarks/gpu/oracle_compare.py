"""The proxy against the device, part two: a short compare of AR against exact match with the oracle drafter
(``decoding/drafters/oracle.py``: it replays the AR output and drafts the planned number of correct tokens per
round), on a random-weight model of a real shape, so rounds of any length can be timed where no real drafter
would agree with random weights.

Per acceptance pattern: the measured speed-up (AR's total time / the arm's, summed over prompts and repeats, the
arms interleaved per prompt after one warm-up each) against the proxy speed-up priced from the same generations'
per-round records (``profiles.proxy.proxy_time``) under a profile measured here on the run's own sizes, and under
the analytic h200 roofline. Target: proxy from the measured profile within 1 ± 0.10 of the measured speed-up; the
analytic proxy is reported beside it. The comparison means something only if the rounds went as planned, so the
accepted tokens per round are held too (at least 90 % of the plan, an arm that plans none: none). The model runs
in float32 (``KitConfig.oracle_dtype``): in bf16 a random-weight model's near-tied top logits round differently in
a verify forward than in AR's, and the replayed drafts are rejected.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from relaxbench.benchmarks.gpu.plan import KitConfig
from relaxbench.benchmarks.gpu.profile_check import free
from relaxbench.benchmarks.gpu.results import StepResult, verdict, within
from relaxbench.decoders import build_decoder
from relaxbench.decoding.drafters import write_replay
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.models.random_shapes import random_model
from relaxbench.models.shape import shape_of
from relaxbench.profiles.analytic import analytic_profile
from relaxbench.profiles.measure import Grid, measure_profile
from relaxbench.profiles.proxy import Work, proxy_time

PROXY_TOLERANCE = 0.10
PLAN_KEPT = 0.90  # accepted per round / planned, at least
AR = MethodSpec(name="ar", policy="none")


def oracle_method(replay: Path, pattern: tuple[int, ...]) -> MethodSpec:
    label = "-".join(map(str, pattern))
    return MethodSpec(name=f"exact-oracle-{label}", policy="exact",
                      drafter=DrafterSpec(kind="oracle", knobs={"replay": str(replay), "accept": list(pattern)}))


def prompts(n: int, length: int, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1234)
    return [torch.randint(100, max(101, min(vocab, 32000)), (length,), generator=generator).tolist()
            for _ in range(n)]


def run_oracle(step: StepResult, config: KitConfig) -> None:
    c = config
    target = random_model(c.oracle_target, getattr(torch, c.oracle_dtype), c.device, shrink=c.dry)
    try:
        _compare(step, c, target)
    finally:
        del target
        free(c.device)


def _compare(step: StepResult, c: KitConfig, target) -> None:
    cases = prompts(c.oracle_prompts, c.oracle_prompt_tokens, target.logit_dim)
    ar = build_decoder(AR, target, None, DecodeConfig(k=0, max_new_tokens=c.oracle_new_tokens))
    ar.generate(cases[0])  # warm-up
    reference = [ar.generate(p) for p in cases]
    folder = Path(tempfile.mkdtemp(prefix="relaxbench-oracle-"))
    replay = write_replay(folder / "replay.json", [p + r.output_ids for p, r in zip(cases, reference)])
    arms = {"ar": ar}
    for pattern in c.oracle_patterns:
        method = oracle_method(replay, pattern)
        arms[method.name] = build_decoder(method, target, None,
                                          DecodeConfig(k=c.oracle_k, max_new_tokens=c.oracle_new_tokens))
        arms[method.name].generate(cases[0])  # warm-up
    runs: dict[str, list] = {name: [] for name in arms}
    for _ in range(c.oracle_repeats):
        for prompt in cases:
            for name, decoder in arms.items():
                runs[name].append(decoder.generate(prompt))
    lo = c.oracle_prompt_tokens - 1
    hi = lo + c.oracle_new_tokens
    grid = Grid(new_tokens=tuple(range(1, c.oracle_k + 2)), context=tuple(sorted({lo, (lo + hi) // 2, hi})),
                prefill=(lo,))
    measured = measure_profile(target, None, grid, repeats=c.repeats, warmup=c.warmup, name="oracle-measured")
    analytic = analytic_profile("h200", target.name, shape_of(target.model), name="h200")

    def proxy(profile, name: str) -> float:
        drafter = None if name == "ar" else "oracle"
        return sum(proxy_time(profile, Work.of_generation(g), drafter).total for g in runs[name])

    measured_ar = sum(g.time_total for g in runs["ar"])
    rows = {}
    label = c.oracle_target + (" (shrunk)" if c.dry else "")
    for pattern in c.oracle_patterns:
        name = oracle_method(replay, pattern).name
        gens = runs[name]
        speedup = measured_ar / sum(g.time_total for g in gens)
        from_measured = proxy(measured, "ar") / proxy(measured, name)
        from_analytic = proxy(analytic, "ar") / proxy(analytic, name)
        rounds = sum(g.n_rounds for g in gens)
        accepted = sum(sum(g.rounds.accepted) for g in gens) / rounds
        planned = sum(min(a, c.oracle_k) for a in pattern) / len(pattern)
        same = sum(g.output_ids == runs["ar"][i].output_ids for i, g in enumerate(gens))
        ratio = from_measured / speedup
        step.add(f"{label}, accept {list(pattern)}: proxy (measured profile) / measured speed-up",
                 f"{from_measured:.2f}× / {speedup:.2f}× = {ratio:.3f}", f"1 ± {PROXY_TOLERANCE:g}",
                 verdict(within(ratio, PROXY_TOLERANCE), c.held))
        step.add(f"{label}, accept {list(pattern)}: proxy (analytic h200) / measured speed-up",
                 f"{from_analytic:.2f}× / {speedup:.2f}× = {from_analytic / speedup:.3f}")
        kept = accepted >= PLAN_KEPT * planned if planned > 0 else accepted == 0
        step.add(f"{label}, accept {list(pattern)}: accepted per round (output == AR)",
                 f"{accepted:.2f} of {planned:.2f} planned ({same}/{len(gens)} identical)",
                 f"≥ {PLAN_KEPT:.0%} of the plan", verdict(kept, c.held))
        rows[name] = {"pattern": list(pattern), "measured_speedup": speedup, "proxy_measured_speedup": from_measured,
                      "proxy_analytic_speedup": from_analytic, "accepted_per_round": accepted,
                      "planned_per_round": planned, "identical_to_ar": same, "generations": len(gens),
                      "time_total_s": [g.time_total for g in gens], "rounds": [g.n_rounds for g in gens]}
    step.data.update({"target": c.oracle_target, "dtype": c.oracle_dtype, "shrunk": c.dry, "k": c.oracle_k,
                      "arms": rows,
                      "ar_time_total_s": [g.time_total for g in runs["ar"]],
                      "measured_profile": measured.record()})
