"""``relaxbench generate``: one completion with one method, and its counters."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_decoding_args, add_runtime_args, runtime_from_args
from relaxbench.validation import parse_assignments


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("generate", help="generate one completion with one method and show its counters")
    g.add_argument("--target", required=True, help="local dir, .gguf file, packaged alias or hub id")
    g.add_argument("--draft", default=None,
                   help="draft model name, 'ngram' (prompt lookup) or 'layerskip' (the target's first layers); "
                        "not needed with --policy none")
    g.add_argument("--method", default=None, help="a method (methods/NAME.yaml or a YAML path) instead of --policy")
    g.add_argument("--policy", default=None, help="verification policy; 'none' = autoregressive baseline")
    g.add_argument("--knob", action="append", metavar="KEY=VALUE", help="policy knob (repeatable)")
    g.add_argument("--drafter", default=None, help="drafter kind (default: 'model', or 'ngram' for --draft ngram)")
    g.add_argument("--drafter-knob", action="append", metavar="KEY=VALUE", help="drafter setting (repeatable)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--system", default=None, help="system message for chat models")
    g.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    add_decoding_args(g)
    add_runtime_args(g)
    g.set_defaults(handler=run)


def method_from_args(args: argparse.Namespace):
    """The method named by --method, or one assembled from --policy/--knob/--drafter/--drafter-knob."""
    from relaxbench.errors import ConfigError
    from relaxbench.methods import MethodSpec, load_method, with_overrides

    if (args.method is None) == (args.policy is None):
        raise ConfigError("give exactly one of --method or --policy")
    method = load_method(args.method) if args.method else MethodSpec(name=args.policy, policy=args.policy)
    return with_overrides(method, parse_assignments(args.knob, "--knob"), args.drafter,
                          parse_assignments(args.drafter_knob, "--drafter-knob"), args.draft)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.arms import build_decoder, check_method, effective_drafter, load_pair, resolve_k
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.decoding.prompts import check_fits_context, encode_prompt
    from relaxbench.ops.sampling import SamplingParams
    from relaxbench.ui import console

    device = runtime_from_args(args)
    method = method_from_args(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    decode = DecodeConfig(k=resolve_k(method, args.k), max_new_tokens=args.max_new_tokens, sampling=sampling,
                          stop_strings=tuple(args.stop), seed=args.seed)
    draft_name = None if method.policy == "none" else args.draft
    check_method(method.name, method, draft_name, sampling)  # before any model loads
    drafter = effective_drafter(method, draft_name)
    target, draft = load_pair(args.target, draft_name, device, args.dtype, args.draft_dtype)
    prompt_ids = encode_prompt(target.tokenizer, args.prompt, chat=not args.no_chat, system=args.system)
    check_fits_context(target, "--prompt", len(prompt_ids), decode.max_new_tokens, decode.k if drafter else 0)
    decoder = build_decoder(method, target, draft, decode, draft_name)
    result = decoder.generate(prompt_ids)

    out = console()
    out.print(result.text, markup=False, highlight=False)
    err = console(stderr=True)
    table = Table(title=f"{method.name} ({decoder.policy.name}, k={decode.k if decoder.drafter else 0})")
    for col in ("tokens", "rounds", "mean acc. length", "acceptance rate", "relaxed", "tokens/s", "stop"):
        table.add_column(col, justify="right")
    c = result.counters
    table.add_row(str(c.emitted), str(c.rounds), "-" if c.mean_acceptance_length is None else
                  f"{c.mean_acceptance_length:.2f}", "-" if c.acceptance_rate is None else f"{c.acceptance_rate:.2%}",
                  str(c.relaxed), f"{result.tokens_per_second:.2f}", result.stop_reason)
    err.print(table)
    return 0
