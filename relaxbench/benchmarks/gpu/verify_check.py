"""Batched verification on the device: every rule's decision of a whole batch, as ``relaxbench bench verify``
measures it on a CPU, on CUDA with bf16 logits (``benchmarks.verify.run_verify_bench``): CUDA events time each
step, ``torch.cuda.set_sync_debug_mode("error")`` wraps every decision (a synchronisation raises and misses the
rule), and the dispatch-mode counter checks that the operation count does not change with B.

Target: at B = 256, k = 4, every rule's step (decision and the verdicts' one host copy) takes at most 1 ms. Beside
it, the share of one verify forward of the shipped Llama-3.1-8B shape at the same B × (k + 1) tokens on the H200,
by the analytic roofline (``profiles.analytic``) at a 1,024-token context: what the rule adds to a step it decides.
And where each rule's step goes at the largest B (``benchmarks.verify.profile_verify``: its heaviest aten operations
by device time, with the host's time launching them), recorded for the work the target leaves: which passes a fused
kernel would save and how much of a step is launches.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from relaxbench.benchmarks.gpu.results import MISS, PASS, StepResult, verdict
from relaxbench.benchmarks.verify import (
    BARE,
    Shape,
    bench_policies,
    misses,
    profile_verify,
    rule_modes,
    run_verify_bench,
)
from relaxbench.models.random_shapes import random_model
from relaxbench.profiles.analytic import roofline

STEP_TARGET_S = 1e-3  # every rule's step at the largest batch
SHARE_MODEL, SHARE_DEVICE, SHARE_CONTEXT = "llama-3.1-8b", "h200", 1024
PROFILE_TOP, PROFILE_STEPS = 8, 3  # operations kept per rule-mode, steps profiled


def analytic_step_s(batch: int, k: int) -> float:
    """One verify forward of the shipped Llama-3.1-8B shape on the H200: ``batch`` requests × (k + 1) tokens."""
    shape = random_model(SHARE_MODEL, torch.bfloat16, "meta").shape
    return roofline(SHARE_DEVICE, shape).seconds(k + 1, SHARE_CONTEXT, batch)


def verify_check(step: StepResult, device: str, batches: tuple[int, ...], k: int, vocab: int, repeats: int,
                 held: bool) -> None:
    dtype = torch.bfloat16
    with tempfile.TemporaryDirectory() as folder:
        policies = bench_policies(None, Path(folder), vocab, device)
    bench = run_verify_bench(policies, batches=batches, ks=(k,), vocabs=(vocab,), repeats=repeats, warmup=2,
                             per_request_batches=(), device=device, dtype=dtype)
    largest = max(batches)
    forward = {b: analytic_step_s(b, k) for b in batches}
    found = misses(bench)
    structural = [m for m in found if "per-request" not in m.target and "bare" not in m.target]
    step.add("every decision: 0 synchronisations (sync debug mode and counter), ops the same at every B",
             f"{len(rule_modes(bench))} rule-modes at B = {', '.join(map(str, batches))}"
             + (": " + "; ".join(m.line() for m in structural) if structural else ""),
             "none missed", PASS if not structural else MISS)
    step.add(f"analytic {SHARE_MODEL} verify forward on the {SHARE_DEVICE}, {largest} × {k + 1} tokens",
             f"{forward[largest] * 1e3:.2f} ms (context {SHARE_CONTEXT})")
    bare = bench.get(BARE, Shape("greedy", largest, k, vocab))
    if bare is not None and bare.median_us is not None:
        step.add(f"{BARE} at B = {largest}", f"{bare.median_us / 1e3:.3f} ms")
    cells: dict[str, dict[str, object]] = {}
    for rule, mode in rule_modes(bench):
        row: dict[str, object] = {}
        for b in batches:
            cell = bench.get(rule, Shape(mode, b, k, vocab))
            if cell is None:
                continue
            row[str(b)] = {"ms": None if cell.median_us is None else cell.median_us / 1e3,
                           "host_ms": None if cell.host_us is None else cell.host_us / 1e3,
                           "ops": None if cell.full is None else cell.full.ops,
                           "ops_mixed": None if cell.mixed is None else cell.mixed.ops,
                           "syncs": list(cell.syncs), "error": cell.error,
                           "share_of_forward": None if cell.median_us is None else
                           cell.median_us / 1e6 / forward[b]}
        cells[f"{rule} ({mode})"] = row
        top = row.get(str(largest), {})
        ms = top.get("ms") if isinstance(top, dict) else None
        if ms is None:
            step.add(f"{rule} ({mode}): step at B = {largest}", f"not timed: {top.get('error') if top else '-'}",
                     f"≤ {STEP_TARGET_S * 1e3:g} ms", MISS)
            continue
        step.add(f"{rule} ({mode}): step at B = {largest}",
                 f"{ms:.3f} ms ({top['host_ms']:.3f} ms to issue) = {top['share_of_forward']:.1%} of the "
                 f"{SHARE_MODEL} forward", f"≤ {STEP_TARGET_S * 1e3:g} ms", verdict(ms <= STEP_TARGET_S * 1e3, held))
    shares = profile_verify(policies, ("greedy", "sampling"), largest, (k,), (vocab,), PROFILE_STEPS, PROFILE_TOP,
                            device, dtype)
    step.add(f"profiled at B = {largest}", f"the {PROFILE_TOP} heaviest operations of {len(rule_modes(bench))} "
                                           f"rule-modes over {PROFILE_STEPS} steps each (in the step's data)")
    step.data["profile"] = [share.as_dict() for share in shares]
    step.data.update({"batches": list(batches), "k": k, "vocab": vocab, "dtype": str(dtype), "repeats": repeats,
                      "analytic_forward_s": {str(b): s for b, s in forward.items()}, "share_model": SHARE_MODEL,
                      "share_device": SHARE_DEVICE, "share_context": SHARE_CONTEXT, "rules": cells,
                      "misses": [m.line() for m in found]})
