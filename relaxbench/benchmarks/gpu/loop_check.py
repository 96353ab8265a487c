"""The engine at the GPU's pace: relaxbench's loop eager (dynamic cache) against the static cache with captured
graphs (``--graphs on``), on random-weight models of shipped shapes, and the EAGLE-3 and MTP heads through it.

Per shape, the autoregressive arm and (for the Qwen pair) exact match with the 0.5B drafting for the 1.5B: one
untimed generation (it also captures the graphs: their count and seconds are reported), then a timed one, per path.
The per-step time is the decode time (total minus prefill) over the rounds; the graphs' per-step time of the
autoregressive arm is held against the analytic h200 roofline of one token at the run's mean context (target: within
1.5× for Llama-3.1-8B at batch 1; the others reported). Outputs: the graphs' against the static cache run eagerly
(the same kernels at the same shapes: identical, held), and the eager dynamic path's against both (a bf16 random
model's near-tied logits may round differently over a longer attention span; a difference is diagnosed as
``lossless`` does, and a real one is a MISS).

Decisions: every rule's batched decision captured per batch layout (``decoding/captured_decisions.py``) at the
verify step's largest B and vocabulary, replayed on new random batches: verdicts identical to eager (held), the
replayed step's time against the eager one and the 1 ms mark (reported).

Heads: an EAGLE-3 and an MTP head trained for a few steps on the tiny target (``drafter train``'s code), each run
with exact match eager and with graphs: exact == AR (held), graphs == eager (held), the head's acceptance (info).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from relaxbench.benchmarks.gpu.lossless import random_prompts
from relaxbench.benchmarks.gpu.profile_check import free
from relaxbench.benchmarks.gpu.results import StepResult, verdict
from relaxbench.decoders import build_decoder
from relaxbench.decoding.cache import KVSettings, configure_kv, kv_settings
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.models.random_shapes import random_model
from relaxbench.models.shape import shape_of
from relaxbench.policies import make_policy
from relaxbench.profiles.analytic import roofline

STEP_TARGET = 1.5  # graphs' per-step time / analytic step, Llama-3.1-8B at batch 1
HELD_SHAPE = "llama-3.1-8b"
EAGER, STATIC, GRAPHS = KVSettings("dynamic", False), KVSettings("static", False), KVSettings("static", True)
PATHS = {"eager": EAGER, "static": STATIC, "graphs": GRAPHS}


def _run(target: Any, draft: Any, k: int, prompt: list[int], new_tokens: int, setting: KVSettings
         ) -> dict[str, Any]:
    """One untimed and one timed generation on ``setting``'s path; its tokens, per-step time and capture cost."""
    configure_kv(setting)
    policy = make_policy("none" if draft is None else "exact", {})
    drafter = None
    if draft is not None:
        from relaxbench.decoders import build_drafter

        drafter = build_drafter(DrafterSpec(kind="model"), target, draft)
    decoder = SpeculativeDecoder(target, drafter, policy, DecodeConfig(k=k, max_new_tokens=new_tokens))
    t0 = time.perf_counter()
    decoder.generate(prompt)  # warm-up: allocations, library handles and the graphs' capture
    warm = time.perf_counter() - t0
    result = decoder.generate(prompt)
    rounds = max(result.n_rounds, 1)
    return {"output": result.output_ids, "step_s": (result.time_total - result.time_prefill) / rounds,
            "rounds": result.n_rounds, "accepted": sum(result.rounds.accepted), "warmup_s": warm,
            "graphs": decoder.graph_report()}


def _compare_outputs(step: StepResult, label: str, target: Any, prompt: list[int], runs: dict[str, dict]) -> None:
    same = runs["graphs"]["output"] == runs["static"]["output"]
    step.add(f"{label}: graphs == static eager", "identical" if same else "differ", "identical", verdict(same))
    found = diagnose_divergence(target, prompt, runs["eager"]["output"], runs["graphs"]["output"])
    value = "identical" if found.identical else ("near-tie flip" if found.near_tie else "real divergence")
    step.add(f"{label}: graphs vs eager dynamic", value, "no real divergence",
             verdict(found.identical or bool(found.near_tie)))


def loop_check(step: StepResult, config: Any) -> None:
    c, before = config, kv_settings()
    try:
        for name in c.loop_models:
            _ar_shape(step, c, name)
        target_name, draft_name = c.loop_pair
        _exact_pair(step, c, target_name, draft_name)
        _heads(step, c)
        _decisions(step, c)
    finally:
        configure_kv(before)


def _ar_shape(step: StepResult, c: Any, name: str) -> None:
    target = random_model(name, torch.bfloat16, c.device, shrink=c.dry)
    try:
        prompt = random_prompts(1, int(target.logit_dim) - 8, seed=3)[0][: c.loop_prompt_tokens]
        prompt = (prompt * (c.loop_prompt_tokens // max(len(prompt), 1) + 1))[: c.loop_prompt_tokens]
        runs = {path: _run(target, None, 0, prompt, c.loop_new_tokens, s) for path, s in PATHS.items()}
        shape = shape_of(target.model)
        label = name + (" (shrunk)" if c.dry else "")
        _compare_outputs(step, f"{label}: AR", target, prompt, runs)
    finally:
        del target
        free(c.device)
    analytic = roofline("h200", shape).seconds(1, c.loop_prompt_tokens + c.loop_new_tokens // 2)
    ratio = runs["graphs"]["step_s"] / analytic
    eager_ratio = runs["eager"]["step_s"] / analytic
    held = c.held and name == HELD_SHAPE
    step.add(f"{label}: AR step, graphs / analytic h200",
             f"{ratio:.2f} ({runs['graphs']['step_s'] * 1e3:.2f} ms vs {analytic * 1e3:.2f} ms; eager "
             f"{eager_ratio:.2f})", f"≤ {STEP_TARGET:g}" if name == HELD_SHAPE else "-",
             verdict(ratio <= STEP_TARGET, held) if name == HELD_SHAPE else "info")
    step.add(f"{label}: AR step, eager / graphs", f"{runs['eager']['step_s'] / runs['graphs']['step_s']:.2f}×")
    captured = runs["graphs"]["graphs"].get("target", {})
    step.add(f"{label}: graphs captured before timing",
             f"{captured.get('graphs', 0)} in {captured.get('capture_s', 0.0):.2f} s (warm-up generation "
             f"{runs['graphs']['warmup_s']:.2f} s)")
    step.data.setdefault("shapes", {})[name] = {
        "analytic_step_s": analytic, "ratio_graphs": ratio, "ratio_eager": eager_ratio,
        **{path: {k: v for k, v in r.items() if k != "output"} for path, r in runs.items()}}


def _exact_pair(step: StepResult, c: Any, target_name: str, draft_name: str) -> None:
    target = random_model(target_name, torch.bfloat16, c.device, shrink=c.dry)
    draft = random_model(draft_name, torch.bfloat16, c.device, shrink=c.dry, seed=1)
    try:
        prompt = random_prompts(1, int(target.logit_dim) - 8, seed=4)[0]
        prompt = (prompt * (c.loop_prompt_tokens // max(len(prompt), 1) + 1))[: c.loop_prompt_tokens]
        runs = {path: _run(target, draft, c.loop_k, prompt, c.loop_pair_new_tokens, s) for path, s in PATHS.items()}
        label = f"exact {target_name}/{draft_name}" + (" (shrunk)" if c.dry else "")
        _compare_outputs(step, label, target, prompt, runs)
        step.add(f"{label}: round, eager / graphs", f"{runs['eager']['step_s'] / runs['graphs']['step_s']:.2f}× "
                 f"({runs['graphs']['step_s'] * 1e3:.2f} ms per round with graphs, k = {c.loop_k})")
        step.data["exact_pair"] = {path: {k: v for k, v in r.items() if k != "output"} for path, r in runs.items()}
    finally:
        del target, draft
        free(c.device)


def _heads(step: StepResult, c: Any) -> None:
    from relaxbench.decoding.drafters.head_training import TrainSettings, save, train
    from relaxbench.models import load_model

    target = load_model("tiny-random-target", dtype="float32", device=c.device, quiet=True)
    prompts = random_prompts(c.head_prompts, int(target.logit_dim) - 8, seed=9)
    configure_kv(EAGER)
    ar = build_decoder(MethodSpec(name="ar", policy="none"), target, None,
                       DecodeConfig(k=0, max_new_tokens=c.loop_new_tokens))
    reference = [ar.generate(p).output_ids for p in prompts]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("eagle3", "mtp"):
            t0 = time.perf_counter()
            head, layer, record = train(target, [p + r for p, r in zip(prompts, reference)],
                                        TrainSettings(kind, steps=c.head_steps, draft_vocab=64), progress=lambda _: None)
            path = save(head, kind, layer, target, Path(tmp) / kind, record)
            trained = time.perf_counter() - t0
            method = MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind=kind, knobs={"head": str(path)}))
            outputs, accepted, drafted = {}, 0, 0
            for path_name, setting in (("eager", EAGER), ("graphs", GRAPHS)):
                configure_kv(setting)
                decoder = build_decoder(method, target, None, DecodeConfig(k=c.loop_k, max_new_tokens=c.loop_new_tokens))
                results = [decoder.generate(p) for p in prompts]
                outputs[path_name] = [r.output_ids for r in results]
                if path_name == "graphs":
                    accepted = sum(sum(r.rounds.accepted) for r in results)
                    drafted = sum(sum(r.rounds.drafted) for r in results)
            lossless = outputs["eager"] == reference
            step.add(f"{kind} head: exact == AR (eager)", "identical" if lossless else "differ", "identical",
                     verdict(lossless))
            same = outputs["graphs"] == outputs["eager"]
            step.add(f"{kind} head: graphs == eager", "identical" if same else "differ",
                     "identical", verdict(same))
            rate = accepted / drafted if drafted else 0.0
            step.add(f"{kind} head: acceptance after {record['steps']} training steps",
                     f"{rate:.2f} ({accepted}/{drafted}); trained in {trained:.1f} s")
            step.data.setdefault("heads", {})[kind] = {"acceptance": rate, "train_s": trained,
                                                       "steps": record["steps"], "lossless": lossless,
                                                       "graphs_identical": same}
    del target
    free(c.device)


def _decisions(step: StepResult, c: Any) -> None:
    import tempfile as _tempfile

    from relaxbench.benchmarks.op_count import random_batch
    from relaxbench.benchmarks.verify import bench_policies, decision_modes
    from relaxbench.decoding.captured_decisions import CapturedDecisions
    from relaxbench.decoding.graphs import replay_capture

    size, vocab, cuda = max(c.verify_batches), c.verify_vocab, c.device.startswith("cuda")
    rows, identical, within = {}, 0, 0
    with _tempfile.TemporaryDirectory() as folder:
        policies = bench_policies(None, Path(folder), vocab, c.device)
        modes = decision_modes(policies)
        for name, mode in modes:
            policy = policies[name]
            captured = CapturedDecisions(policy, None if cuda else replay_capture)
            gen = torch.Generator().manual_seed(5)  # random_batch draws its seeds on the CPU
            batches = [random_batch(policy, size, c.verify_k, vocab, sampling=mode == "sampling", device=c.device,
                                    dtype=torch.bfloat16, generator=gen, mixed_k=False) for _ in range(3)]
            same = all(captured.decide(b).to_host() == policy.decide(b).to_host() for b in batches)
            eager_s = _timed(lambda: policy.decide(batches[0]).stacked(), c.device, c.verify_repeats)
            replay_s = _timed(lambda: captured.decide(batches[1]).stacked(), c.device, c.verify_repeats)
            identical += same
            within += replay_s <= 1e-3
            rows[f"{name} ({mode})"] = {"identical": same, "eager_ms": eager_s * 1e3, "replay_ms": replay_s * 1e3,
                                        "graphs": len(captured.graphs)}
            del captured, batches  # each graph holds its own memory pool (B × (k + 1) × V intermediates)
            free(c.device)
    n = len(rows)
    step.add(f"captured decisions == eager, B = {size}", f"{identical}/{n} rule-modes identical", f"{n}/{n}",
             verdict(identical == n))
    step.add(f"captured decision ≤ 1 ms, B = {size}", f"{within}/{n} rule-modes (eager: see verify)")
    step.data["decisions"] = {"batch": size, "vocab": vocab, "k": c.verify_k, "rules": rows}


def _timed(fn: Any, device: str, repeats: int) -> float:
    """Seconds per call of ``fn`` (synchronised before and after; one untimed call first)."""
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(max(repeats, 1)):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / max(repeats, 1)
