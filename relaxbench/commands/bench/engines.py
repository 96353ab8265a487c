"""``relaxbench bench engines``: both engines, AR and exact, at concurrency 1 and 8, and the vLLM adapter's cost
against vLLM's native sampler (``relaxbench.benchmarks.engines``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from relaxbench.commands.args import add_device_arg, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict


def register(bsub: argparse._SubParsersAction) -> None:
    e = bsub.add_parser("engines", help="relaxbench's loop vs vLLM: AR and exact tokens/s at concurrency 1 and 8; "
                                        "the vLLM adapter against vLLM's native sampler (needs `make install-vllm`)")
    e.add_argument("--target", default="smollm2-135m-instruct")
    e.add_argument("--concurrency", default="1,8", help="concurrency levels (default 1,8; 8 is checked)")
    e.add_argument("-k", "--k", type=int, default=4)
    e.add_argument("--max-new-tokens", type=int, default=64)
    e.add_argument("--prompts", type=int, default=3, help="number of code prompts (max 3)")
    e.add_argument("--repeats", type=int, default=3)
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


def run_engines(args: argparse.Namespace) -> int:
    from relaxbench.arms import build_decoder
    from relaxbench.benchmarks.engine import CODE_PROMPTS
    from relaxbench.benchmarks.engines import transformers_lines, vllm_lines
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.decoding.prompts import encode_prompt
    from relaxbench.errors import ConfigError
    from relaxbench.integrations.vllm_client import VllmClient, vllm_python
    from relaxbench.integrations.vllm_executor import locate
    from relaxbench.integrations.vllm_rules import speculative_config
    from relaxbench.methods import DrafterSpec, MethodSpec
    from relaxbench.models import load_model
    from relaxbench.timing import Clock
    from relaxbench.ui import console

    vllm_python()  # a missing vLLM environment is one line, before anything loads
    try:
        levels = [int(v) for v in args.concurrency.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--concurrency: comma-separated integers, got {args.concurrency!r}") from None
    if 8 not in levels or any(v < 1 for v in levels):
        raise ConfigError("--concurrency must include 8 (the checked level) and only positive values")
    device = runtime_from_args(args)
    out = console()
    target = load_model(args.target, dtype=args.dtype, device=device)
    prompts = [encode_prompt(target.tokenizer, p, chat=True) for p in CODE_PROMPTS[: args.prompts]]
    clock = Clock(target.device)
    decoders = {
        "ar": build_decoder(MethodSpec(name="ar", policy="none"), target, None,
                            DecodeConfig(k=0, max_new_tokens=args.max_new_tokens)),
        "exact": build_decoder(MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="ngram")), target,
                               None, DecodeConfig(k=args.k, max_new_tokens=args.max_new_tokens))}
    for decoder in decoders.values():
        decoder.generate(prompts[0][:8])  # untimed warm-up

    def run_loop(arm: str) -> tuple[int, float]:
        start, tokens = clock.now(), 0
        for prompt in prompts:
            tokens += decoders[arm].generate(prompt).n_emitted
        return tokens, clock.now() - start

    out.print(f"target {target.name} ({args.dtype}), {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
              f"exact with n-gram drafts (k = {args.k}), concurrency {levels}, {args.repeats} repeats")
    lines = transformers_lines(run_loop, levels, args.repeats)
    del decoders, target
    ref = locate(args.target)[1]
    with VllmClient() as client:
        lines += vllm_lines(ClientDriver(client, args.dtype), ref, prompts,
                            speculative_config("ngram", {}, args.k, None), args.max_new_tokens, args.repeats, levels)
    return 0 if print_results(lines) else 1


def print_results(lines: Sequence[Any]) -> bool:
    """The figures and the targets' table; whether every target holds."""
    from relaxbench.benchmarks.engines import checks

    print_table(table(
        "bench-engines", "engines: output tokens/s (median over repeats)",
        ("engine", "arm", "concurrency", "tokens/s", "per repeat", "policy share"),
        [(text(line.engine), text(line.arm), figure(str(line.concurrency)), figure(f"{line.median:.2f}"),
          figure(" ".join(f"{v:.1f}" for v in line.tokens_per_second)),
          figure(f"{max(line.policy_share):.2%}" if line.policy_share else "-")) for line in lines],
        "transformers: relaxbench's loop keeps one request in flight, so its rows at every concurrency are one "
        "measurement (the prompts one after another); vllm: the prompts submitted together, up to the concurrency "
        "in flight. Policy share: the adapter's policy time / the step time (native: vLLM's own sampler, not timed)."))
    results = checks(lines)
    print_table(table(
        "bench-engines-targets", "targets",
        ("check", "value", "target", "holds"),
        [(text(check.label), figure(f"{check.value:.3f}"), figure(check.target), verdict(check.holds))
         for check in results]))
    return all(check.holds for check in results)
