"""``relaxbench generate``: one completion with one method, and its counters."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_decoding_args, add_graphs_args, add_runtime_args, runtime_from_args
from relaxbench.harness.preflight import check_files_early, check_graphs_early
from relaxbench.validation import parse_assignments


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("generate", help="generate one completion with one method and show its counters")
    g.add_argument("--target", required=True, help="local dir, .gguf file, packaged alias or hub id")
    g.add_argument("--draft", default=None,
                   help="draft model name, 'ngram' (prompt lookup), 'layerskip' (the target's first layers), 'eagle3' "
                        "or 'mtp' (a draft head: --drafter-knob head=PATH_OR_HUB_ID); "
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
    g.add_argument("--engine", default="transformers", choices=("transformers", "vllm"),
                   help="decoding engine: relaxbench's own loop (default) or vLLM (docs/engines.md)")
    g.add_argument("--engine-arg", action="append", metavar="KEY=VALUE", default=None,
                   help="vllm: an argument of vLLM's engine (max_model_len=8192, quantization=fp8, "
                        "enforce_eager=false, ...), checked against the installed vLLM before anything starts, as "
                        "compare's (repeatable; docs/engines.md)")
    add_decoding_args(g)
    add_runtime_args(g)
    add_graphs_args(g)
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


def engine_args_from_args(args: argparse.Namespace) -> dict[str, object]:
    """``--engine-arg`` as ``compare`` reads it: KEY=VALUE pairs, none relaxbench sets itself, the vLLM engine only;
    each a one-line error. The values are then checked against the installed vLLM (``check_engine_args``)."""
    from relaxbench.errors import ConfigError
    from relaxbench.harness.suite import check_not_owned

    engine_args = parse_assignments(args.engine_arg, "--engine-arg")
    if not engine_args:
        return {}
    if args.engine != "vllm":
        raise ConfigError(f"--engine-arg {next(iter(engine_args))}=... applies to --engine vllm (vLLM's engine "
                          "arguments); the transformers engine takes --device and --dtype")
    try:
        check_not_owned(engine_args)
    except ValueError as exc:
        raise ConfigError(f"--engine-arg: {exc}") from None
    return engine_args


def check_prompt(prompt: str, system: str | None = None) -> None:
    """An empty or blank prompt is refused, as ``compare`` refuses one in a data file; so is text the tokenizer
    cannot encode (bytes that are not UTF-8 on the command line), in the prompt or the system message."""
    from relaxbench.data.text import check_text
    from relaxbench.errors import ConfigError

    if not prompt.strip():
        raise ConfigError("--prompt is empty: give the text to complete")
    check_text(prompt, "--prompt")
    if system is not None:
        check_text(system, "--system")


def usable_k(k: int, max_new_tokens: int) -> int:
    """``k`` cut to what ``max_new_tokens`` can use (a round drafts at most max_new_tokens - 1 tokens), with a
    notice on stderr when it is cut."""
    usable = max(1, max_new_tokens - 1)
    if k <= usable:
        return k
    from relaxbench.ui import console

    console(stderr=True).print(f"k {k} is more than a budget of {max_new_tokens} new tokens can use (a round drafts at "
                               f"most {usable}); drafting {usable}", markup=False, highlight=False)
    return usable


def check_context_from_files(target: str, prompt: str, system: str | None, max_new_tokens: int) -> None:
    """The context refusals the target's files on disk settle, before torch is imported: the budget alone, or the
    prompt's tokens counted without its chat template (less two, for merges at the template's joins: a lower bound),
    over the context its config states. Anything closer is left to the check on the encoded prompt."""
    from relaxbench.decoding.prompts import check_positions
    from relaxbench.models.preview import files_on_disk

    facts = files_on_disk(target)
    if facts is None or facts.context is None:
        return
    counted = facts.count_tokens("\n\n".join(text for text in (system, prompt) if text))
    check_positions(facts.context, "--prompt", max(1, (counted or 0) - 2), max_new_tokens, 0, at_least=True)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.methods import check_method_spec
    from relaxbench.ops.sampling_params import SamplingParams

    check_prompt(args.prompt, args.system)
    check_graphs_early(args.graphs, args.device, args.engine)
    engine_args = engine_args_from_args(args)
    method = method_from_args(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    draft_name = None if method.policy == "none" else args.draft
    check_method_spec(method.name, method, draft_name)  # names and knobs, before torch or any model loads
    check_files_early(args.target, draft_name)  # a cut GGUF file, a missing path: before torch too
    check_context_from_files(args.target, args.prompt, args.system, args.max_new_tokens)

    from relaxbench.decoders import (build_decoder, check_drafter_fits, check_method, effective_drafter, load_pair,
                                 preview_pair, resolve_k)
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.decoding.prompts import check_fits_context, encode_prompt
    from relaxbench.ui import console

    device = runtime_from_args(args)
    k = resolve_k(method, args.k) if method.policy == "none" else usable_k(resolve_k(method, args.k),
                                                                           args.max_new_tokens)
    decode = DecodeConfig(k=k, max_new_tokens=args.max_new_tokens, sampling=sampling,
                          stop_strings=tuple(args.stop), seed=args.seed)
    check_method(method.name, method, draft_name, sampling)  # modes and drafter compatibility too, before any load
    graph_line = None
    if args.engine == "vllm":
        from relaxbench.integrations.vllm_client import check_engine_args, vllm_python
        from relaxbench.integrations.vllm_executor import generate_once

        vllm_python()  # a missing vLLM environment is one line, before anything loads
        if engine_args:  # names and values as the installed vLLM types them, before the engine starts
            engine_args = check_engine_args(engine_args)
        result = generate_once(args.target, draft_name, method, decode.k, sampling, args.max_new_tokens,
                               tuple(args.stop), lambda tok: encode_prompt(tok, args.prompt, chat=not args.no_chat,
                                                                          system=args.system),
                               args.dtype, args.seed, engine_args)
        policy_name, k_shown = method.policy, 0 if method.policy == "none" else decode.k
    else:
        drafter = effective_drafter(method, draft_name)
        # tokenizers and configs first: the vocabulary and the prompt's fit are settled before any weight loads
        preview, _ = preview_pair(args.target, draft_name)
        check_drafter_fits(drafter, preview.config)  # a draft head that does not fit: before the target loads
        prompt_ids = encode_prompt(preview.tokenizer, args.prompt, chat=not args.no_chat, system=args.system)
        check_fits_context(preview, "--prompt", len(prompt_ids), decode.max_new_tokens, decode.k if drafter else 0)
        target, draft = load_pair(args.target, draft_name, device, args.dtype, args.draft_dtype)
        decoder = build_decoder(method, target, draft, decode, draft_name)
        result = decoder.generate(prompt_ids)
        policy_name, k_shown = decoder.policy.name, decode.k if decoder.drafter else 0
        graph_line = describe_decode_path(decoder.graph_report())

    out = console()
    out.print(result.text, markup=False, highlight=False)
    err = console(stderr=True)
    table = Table(title=f"{method.name} ({policy_name}, k={k_shown}, {args.engine})")
    for col in ("tokens", "rounds", "mean acc. length", "acceptance rate", "relaxed", "tokens/s", "stop"):
        table.add_column(col, justify="right")
    c = result.counters
    table.add_row(str(c.emitted), str(c.rounds), "-" if c.mean_acceptance_length is None else
                  f"{c.mean_acceptance_length:.2f}", "-" if c.acceptance_rate is None else f"{c.acceptance_rate:.2%}",
                  str(c.relaxed), f"{result.tokens_per_second:.2f}", result.stop_reason)
    err.print(table)
    if graph_line:
        err.print(graph_line, markup=False, highlight=False)
    return 0


def describe_decode_path(report: dict) -> str:
    """One line: the kv-cache layout, and with graphs what was captured (before timing) and what it cost."""
    line = f"kv cache {report['kv_cache']}, graphs {'on' if report['graphs'] else 'off'}"
    for role in ("target", "drafter"):
        if role in report:
            r = report[role]
            line += f"; {role}: {r['graphs']} graphs captured in {r['capture_s']:.2f} s before timing"
    return line
