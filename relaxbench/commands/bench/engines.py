"""``relaxbench bench engines``: both engines, AR and exact, at concurrency 1, 8 and 32, and the vLLM adapter's cost
against vLLM's native sampler (``relaxbench.benchmarks.engines``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from relaxbench.commands.args import add_device_arg, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict


def register(bsub: argparse._SubParsersAction) -> None:
    e = bsub.add_parser("engines", help="relaxbench's loop vs vLLM: AR and exact tokens/s at concurrency 1, 8 and "
                                        "32; the vLLM adapter against vLLM's native sampler (needs `make "
                                        "install-vllm`)")
    e.add_argument("--target", default="smollm2-135m-instruct")
    e.add_argument("--concurrency", default=None, help="concurrency levels (default 1,8,32; 8 and 32 are checked)")
    e.add_argument("-k", "--k", type=int, default=4)
    e.add_argument("--max-new-tokens", type=int, default=None, help="new tokens per request (default 64)")
    e.add_argument("--prompts", type=int, default=None, help="number of code prompts (max 3; default 3)")
    e.add_argument("--repeats", type=int, default=None, help="timed batches per arm and level (default 3)")
    e.add_argument("--quick", action="store_true",
                   help="a smoke run: one prompt, 16 new tokens, one repeat (figures too noisy to mean much)")
    e.add_argument("--dtype", default="float32", help="both engines' dtype (default float32)")
    add_device_arg(e)
    add_threads_arg(e)
    e.set_defaults(handler=run_engines)


class ClientDriver:
    """The vLLM worker as the benchmark's ``EngineDriver``."""

    def __init__(self, client: Any, dtype: str) -> None:
        self.client, self.dtype = client, dtype

    def start(self, target: str, speculative: Mapping[str, Any] | None, concurrency: int) -> None:
        from relaxbench.integrations.vllm_client import EngineConfig

        self.client.start(EngineConfig(target, self.dtype, speculative, concurrency, max_model_len=2048))

    def generate(self, requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        return self.client.generate(requests)


QUICK = {"prompts": 1, "max_new_tokens": 16, "repeats": 1}
DEFAULTS = {"prompts": 3, "max_new_tokens": 64, "repeats": 3}


def engines_settings(args: argparse.Namespace) -> tuple[list[int], int, int, int]:
    """(levels, prompts, new tokens, repeats) from the flags, ``--quick`` and the defaults; bad values are one-line
    errors."""
    from relaxbench.benchmarks.engines import CHECKED_CONCURRENCY, LEVELS
    from relaxbench.errors import ConfigError

    raw = args.concurrency if args.concurrency is not None else ",".join(map(str, LEVELS))
    try:
        levels = [int(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--concurrency: comma-separated integers, got {raw!r}") from None
    if not set(CHECKED_CONCURRENCY) <= set(levels) or any(v < 1 for v in levels):
        raise ConfigError(f"--concurrency must include {' and '.join(map(str, CHECKED_CONCURRENCY))} (the checked "
                          "levels) and only positive values")
    chosen = {**DEFAULTS, **(QUICK if args.quick else {})}
    prompts, new, repeats = (getattr(args, key) if getattr(args, key) is not None else chosen[key]
                             for key in ("prompts", "max_new_tokens", "repeats"))
    if not 1 <= prompts <= 3 or new < 1 or repeats < 1:
        raise ConfigError("need 1 <= --prompts <= 3, --max-new-tokens >= 1 and --repeats >= 1")
    return levels, prompts, new, repeats


def run_engines(args: argparse.Namespace) -> int:
    from relaxbench.benchmarks.engine import CODE_PROMPTS
    from relaxbench.benchmarks.engines import transformers_lines, vllm_lines
    from relaxbench.decoders import build_decoder
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.decoding.prompts import encode_prompt
    from relaxbench.integrations.vllm_client import VllmClient, vllm_python
    from relaxbench.integrations.vllm_executor import locate
    from relaxbench.integrations.vllm_rules import speculative_config
    from relaxbench.methods import DrafterSpec, MethodSpec
    from relaxbench.models import load_model
    from relaxbench.timing import Clock
    from relaxbench.ui import console

    levels, n_prompts, max_new_tokens, repeats = engines_settings(args)
    vllm_python()  # a missing vLLM environment is one line, before anything loads
    device = runtime_from_args(args)
    out = console()
    target = load_model(args.target, dtype=args.dtype, device=device)
    prompts = [encode_prompt(target.tokenizer, p, chat=True) for p in CODE_PROMPTS[:n_prompts]]
    clock = Clock(target.device)
    decoders = {
        "ar": build_decoder(MethodSpec(name="ar", policy="none"), target, None,
                            DecodeConfig(k=0, max_new_tokens=max_new_tokens)),
        "exact": build_decoder(MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="ngram")), target,
                               None, DecodeConfig(k=args.k, max_new_tokens=max_new_tokens))}
    for decoder in decoders.values():
        decoder.generate(prompts[0][:8])  # untimed warm-up

    def run_loop(arm: str) -> tuple[int, float]:
        start, tokens = clock.now(), 0
        for prompt in prompts:
            tokens += decoders[arm].generate(prompt).n_emitted
        return tokens, clock.now() - start

    out.print(f"target {target.name} ({args.dtype}), {len(prompts)} prompts, {max_new_tokens} new tokens, "
              f"exact with n-gram drafts (k = {args.k}), concurrency {levels}, {repeats} repeats")
    lines = transformers_lines(run_loop, levels, repeats)
    del decoders, target
    ref = locate(args.target)[1]
    with VllmClient() as client:
        lines += vllm_lines(ClientDriver(client, args.dtype), ref, prompts,
                            speculative_config("ngram", {}, args.k, None), max_new_tokens, repeats, levels)
    return 0 if print_results(lines) else 1


def print_results(lines: Sequence[Any]) -> bool:
    """The figures and the targets' table; whether every target holds."""
    from relaxbench.benchmarks.engines import checks

    print_table(table(
        "bench-engines", "engines: output tokens/s (median over repeats)",
        ("engine", "arm", "concurrency", "tokens/s", "per repeat", "rule share"),
        [(text(line.engine), text(line.arm), figure(str(line.concurrency)), figure(f"{line.median:.2f}"),
          figure(" ".join(f"{v:.1f}" for v in line.tokens_per_second)),
          figure(f"{max(line.policy_share):.2%}" if line.policy_share else "-")) for line in lines],
        "transformers: relaxbench's loop keeps one request in flight, so its rows at every concurrency are one "
        "measurement (the prompts one after another); vllm: the prompts submitted together, up to the concurrency "
        "in flight. Rule share: the adapter's rule time / the step time (native: vLLM's own sampler, not timed)."))
    results = checks(lines)
    print_table(table(
        "bench-engines-targets", "targets",
        ("check", "value", "target", "holds"),
        [(text(check.label), figure(f"{check.value:.3f}"), figure(check.target), verdict(check.holds))
         for check in results]))
    return all(check.holds for check in results)
