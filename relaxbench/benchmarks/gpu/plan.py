"""What the kit runs: the steps, their sizes on a GPU and in the CPU dry run, and how long each should take.

The GPU sizes fit the 8-minute target with room to spare on one H200 (estimates until a run replaces them: the
JSON summary records each step's real seconds). The CPU dry run runs the same code on shrunk shapes and few
samples, so every step is exercised in CI in well under a minute.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxbench.errors import ConfigError

# cheap and decisive first; the distribution test (many short generations, the least predictable time on a GPU)
# last, so a slow one cannot crowd out the proxy checks
STEPS = ("environment", "clock", "device-map", "lossless", "loop", "verify", "oracle", "profile", "distribution")
WHAT = {
    "environment": "the environment table (GPU, driver, CUDA, torch, transformers) as a compare run records it",
    "clock": "a deliberately async workload timed with and without relaxbench's synchronising clock, and with CUDA "
             "events",
    "device-map": "the tiny target loaded with --device-map auto (one GPU): placement and the same greedy output",
    "lossless": "exact (draft model and n-gram) == AR token for token on the tiny random models, per dtype",
    "distribution": "speculative sampling's joint distribution vs the target's (chi-square), per dtype; a wrong "
                    "rule must fail it",
    "profile": "per shipped shape: a profile measured here vs the analytic h200 roofline (and h100-sxm, scaled), "
               "per (new tokens, context) cell",
    "verify": "every rule's batched decision: CUDA-event time per step (≤ 1 ms at the largest B), no synchronisation "
              "under the sync debug mode, operations independent of B; its share of an analytic Llama-3.1-8B step; "
              "its heaviest operations at the largest B (profiled)",
    "loop": "relaxbench's loop eager (dynamic cache) vs static cache + CUDA graphs: AR per-step time vs the analytic "
            "h200 step (≤ 1.5× for Llama-3.1-8B), exact with the Qwen pair, outputs identical; EAGLE-3 and MTP heads "
            "trained on the spot, exact == AR and graphs == eager; every rule's decision captured, verdicts == eager",
    "oracle": "AR vs exact with the oracle drafter at planned acceptance patterns: measured speed-up vs the proxy "
              "from a measured and from the analytic profile",
}


@dataclass(frozen=True)
class KitConfig:
    device: str
    dry: bool  # the CPU dry run: shrunk shapes, few samples, GPU-only targets not held
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    lossless_prompts: int = 8
    lossless_tokens: int = 48
    lossless_ks: tuple[int, ...] = (2, 5)
    distribution_samples: int = 1200
    power_samples: int = 400
    profile_models: tuple[str, ...] = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct", "qwen2.5-7b",
                                       "llama-3.1-8b", "qwen3-32b")
    new_tokens: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    contexts: tuple[int, ...] = (128, 512, 2048)
    prefill: tuple[int, ...] = (128, 1024)
    repeats: int = 5
    warmup: int = 2
    oracle_target: str = "llama-3.1-8b"
    # float32, not bf16: a random-weight model's top logits are near-ties, and bf16 rounds a (k + 1)-token verify
    # forward differently from AR's 1-token forward, so the replayed drafts were rejected (0.06 accepted per round
    # of a planned 5 on an H200); float32's rounding keeps the plan, which is what the step times
    oracle_dtype: str = "float32"
    oracle_k: int = 5
    oracle_patterns: tuple[tuple[int, ...], ...] = ((5,), (3, 1), (2,), (0,))
    oracle_prompts: int = 2
    oracle_prompt_tokens: int = 128
    oracle_new_tokens: int = 48  # 96 until the loop step needed its minute of the budget
    oracle_repeats: int = 2
    clock_size: int = 8192
    clock_matmuls: int = 20
    verify_batches: tuple[int, ...] = (1, 8, 64, 256)
    verify_k: int = 4
    verify_vocab: int = 151_936  # Qwen's vocabulary, the larger of the bench's two
    verify_repeats: int = 10
    loop_models: tuple[str, ...] = ("qwen2.5-coder-0.5b-instruct", "llama-3.1-8b")
    loop_pair: tuple[str, str] = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")
    loop_prompt_tokens: int = 128
    loop_new_tokens: int = 48
    loop_k: int = 4
    loop_pair_new_tokens: int = 16  # random weights accept ~nothing: every round is k + 1 draft and 1 target forward
    head_prompts: int = 4
    head_steps: int = 30
    budget_s: float = 480.0
    steps: tuple[str, ...] = STEPS

    @property
    def held(self) -> bool:
        """Whether the GPU-only targets (speed, clock, placement) are held: on a CUDA device only."""
        return not self.dry


def kit_config(device: str, steps: str | None = None, models: str | None = None, budget_s: float | None = None
               ) -> KitConfig:
    """The GPU sizes on a CUDA device, the dry-run sizes on a CPU; ``steps``/``models``: comma-separated subsets."""
    from relaxbench.models.random_shapes import shape_names

    chosen = tuple(s.strip() for s in steps.split(",") if s.strip()) if steps else STEPS
    unknown = [s for s in chosen if s not in STEPS]
    if unknown or not chosen:
        raise ConfigError(f"--steps: unknown step(s) {', '.join(unknown) or '(none given)'} (steps: {', '.join(STEPS)})")
    dry = not device.startswith("cuda")
    base = KitConfig(device=device, dry=dry, steps=tuple(s for s in STEPS if s in chosen))
    if dry:
        base = KitConfig(
            device=device, dry=True, steps=base.steps, lossless_prompts=3, lossless_tokens=24, lossless_ks=(2, 5),
            distribution_samples=150, power_samples=150, new_tokens=(1, 2, 4), contexts=(16, 64), prefill=(16,),
            repeats=1, warmup=0, oracle_prompts=1, oracle_prompt_tokens=24, oracle_new_tokens=16, oracle_repeats=1,
            clock_size=128, clock_matmuls=3, verify_batches=(1, 4), verify_vocab=512, verify_repeats=1,
            loop_prompt_tokens=16, loop_new_tokens=8, loop_pair_new_tokens=6, head_prompts=2, head_steps=3)
    if models:
        names = tuple(m.strip() for m in models.split(",") if m.strip())
        known = shape_names()
        bad = [m for m in names if m not in known]
        if bad or not names:
            raise ConfigError(f"--models: unknown shape(s) {', '.join(bad) or '(none given)'} (shipped: "
                              f"{', '.join(known)})")
        base = _replace(base, profile_models=names)
    if budget_s is not None:
        if budget_s <= 0:
            raise ConfigError("--budget-s must be > 0")
        base = _replace(base, budget_s=budget_s)
    return base


def _replace(config: KitConfig, **changes) -> KitConfig:
    from dataclasses import replace

    return replace(config, **changes)


# Seconds each step should take on one H200 (from the first run on one, rounded up; the oracle step's doubled for
# float32; the summary records the real ones), and per-model seconds of the profile step (building the random
# model on the GPU + the grid).
GPU_SECONDS = {"environment": 10, "clock": 5, "device-map": 5, "lossless": 50, "loop": 75, "verify": 70,
               "distribution": 90, "oracle": 90}
GPU_PROFILE_SECONDS = {"qwen2.5-coder-0.5b-instruct": 8, "qwen2.5-coder-1.5b-instruct": 8, "qwen2.5-7b": 10,
                       "llama-3.1-8b": 12, "qwen3-32b": 25}
CPU_SECONDS = {"environment": 1, "clock": 1, "device-map": 3, "lossless": 8, "loop": 10, "verify": 10,
               "distribution": 8, "oracle": 4}
CPU_PROFILE_SECONDS = 1
STARTUP_SECONDS = 15  # interpreter, torch and transformers imports; installing the wheels


def model_estimate(config: KitConfig, model: str) -> float:
    """Seconds of the profile step for one shape."""
    return CPU_PROFILE_SECONDS if config.dry else GPU_PROFILE_SECONDS.get(model, 30)


def estimate(config: KitConfig, step: str) -> float:
    if step == "profile":
        return sum(model_estimate(config, m) for m in config.profile_models)
    return (CPU_SECONDS if config.dry else GPU_SECONDS)[step]


def sizes(config: KitConfig, step: str) -> str:
    """What a step runs, in numbers."""
    c = config
    if step == "lossless":
        return (f"{c.lossless_prompts} prompts × {c.lossless_tokens} tokens, k = {', '.join(map(str, c.lossless_ks))}, "
                f"{', '.join(c.dtypes)}")
    if step == "distribution":
        return f"{c.distribution_samples} generations per dtype ({', '.join(c.dtypes)}); wrong rule: {c.power_samples}"
    if step == "profile":
        shapes = "shrunk " if c.dry else ""
        return (f"{shapes}{', '.join(c.profile_models)}; bf16; new tokens {list(c.new_tokens)} × context "
                f"{list(c.contexts)}, {c.repeats} timed after {c.warmup} untimed")
    if step == "oracle":
        patterns = " ".join("[" + ",".join(map(str, p)) + "]" for p in c.oracle_patterns)
        return (f"{'shrunk ' if c.dry else ''}{c.oracle_target} in {c.oracle_dtype}, k = {c.oracle_k}, "
                f"accept {patterns}; "
                f"{c.oracle_prompts} prompts of {c.oracle_prompt_tokens} tokens × {c.oracle_new_tokens} new, "
                f"{c.oracle_repeats} repeats")
    if step == "loop":
        shapes = "shrunk " if c.dry else ""
        return (f"AR on {shapes}{', '.join(c.loop_models)}; exact {c.loop_pair[0]} / {c.loop_pair[1]}, k = {c.loop_k}, "
                f"{c.loop_pair_new_tokens} new; "
                f"bf16, {c.loop_prompt_tokens}-token prompt, {c.loop_new_tokens} new, eager / static / graphs; heads: "
                f"{c.head_steps} training steps on the tiny target, {c.head_prompts} prompts; decisions at "
                f"B = {max(c.verify_batches)}, V = {c.verify_vocab:,}")
    if step == "clock":
        return f"{c.clock_matmuls} bf16 matmuls of {c.clock_size}²"
    if step == "verify":
        return (f"every registered rule and mode, B = {', '.join(map(str, c.verify_batches))}, k = {c.verify_k}, "
                f"V = {c.verify_vocab:,}, bf16 logits, {c.verify_repeats} timed repeat(s)")
    return ""


def plan_lines(config: KitConfig) -> list[str]:
    where = "CPU dry run (shrunk shapes; GPU-only targets not held)" if config.dry else f"{config.device}"
    lines = [f"relaxbench bench gpu on {where}; time budget {config.budget_s:g} s (a step that would overrun it is "
             "skipped and reported)"]
    total = STARTUP_SECONDS
    for step in config.steps:
        seconds = estimate(config, step)
        total += seconds
        detail = sizes(config, step)
        lines.append(f"  {step:<13} ~{seconds:>4.0f} s  {WHAT[step]}" + (f" [{detail}]" if detail else ""))
    lines.append(f"  {'total':<13} ~{total:>4.0f} s  (with ~{STARTUP_SECONDS} s of start-up)")
    return lines
