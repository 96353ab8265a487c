"""``relaxbench generate``: one completion with one method, and its counters."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from relaxbench.commands.args import add_decoding_args, add_graphs_args, add_runtime_args, runtime_from_args
from relaxbench.harness.preflight import check_files_early, check_graphs_early
from relaxbench.validation import parse_assignments

if TYPE_CHECKING:
    from relaxbench.harness.executor import ExecutorCard


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("generate", help="generate one completion with one method and show its counters")
    g.add_argument("--target", required=True, help="local dir, .gguf file, packaged alias or hub id")
    g.add_argument("--draft", default=None,
                   help="draft model name, 'ngram' (prompt lookup), 'layerskip' (the target's first layers), 'eagle3' "
                        "or 'mtp' (a draft head: --drafter-knob head=PATH_OR_HUB_ID); "
                        "not needed with --rule none")
    g.add_argument("--method", default=None, help="a method (methods/NAME.yaml or a YAML path) instead of --rule")
    g.add_argument("--rule", default=None, help="verification rule; 'none' = autoregressive baseline")
    g.add_argument("--policy", dest="rule", default=None, help=argparse.SUPPRESS)  # the earlier name, still accepted
    g.add_argument("--knob", action="append", metavar="KEY=VALUE", help="rule knob (repeatable)")
    g.add_argument("--drafter", default=None, help="drafter kind (default: 'model', or 'ngram' for --draft ngram)")
    g.add_argument("--drafter-knob", action="append", metavar="KEY=VALUE", help="drafter setting (repeatable)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--system", default=None, help="system message for chat models")
    g.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--engine", default="transformers", metavar="ENGINE",
                   help="decoding engine: transformers (relaxbench's own loop, default) or vllm (docs/engines.md); "
                        "an executor plug-in registered under its engine's name adds that engine")
    g.add_argument("--engine-arg", action="append", metavar="KEY=VALUE", default=None,
                   help="vllm: an argument of vLLM's engine (max_model_len=8192, quantization=fp8, "
                        "enforce_eager=false, ...), checked against the installed vLLM before anything starts, as "
                        "compare's (repeatable; docs/engines.md)")
    add_decoding_args(g)
    add_runtime_args(g)
    add_graphs_args(g)
    g.set_defaults(handler=run)


def method_from_args(args: argparse.Namespace):
    """The method named by --method, or one assembled from --rule/--knob/--drafter/--drafter-knob."""
    from relaxbench.errors import ConfigError
    from relaxbench.methods import MethodSpec, load_method, with_overrides

    if (args.method is None) == (args.rule is None):
        raise ConfigError("give exactly one of --method or --rule")
    method = load_method(args.method) if args.method else MethodSpec(name=args.rule, policy=args.rule)
    return with_overrides(method, parse_assignments(args.knob, "--knob"), args.drafter,
                          parse_assignments(args.drafter_knob, "--drafter-knob"), args.draft)


def engine_card_from_args(args: argparse.Namespace) -> ExecutorCard:
    """The card of ``--engine`` (``harness/executor.engine_card``, as ``compare`` finds the engine's executor), which
    must declare the engine's one completion (``ExecutorCard.generate``); each a one-line error."""
    from relaxbench.errors import ConfigError
    from relaxbench.harness.executor import engine_card

    card = engine_card(args.engine)
    if card.generate is None:
        raise ConfigError(f"--engine {args.engine}: its executor {card.name!r} declares no one completion "
                          f"(ExecutorCard.generate); run the engine with relaxbench compare --engine {args.engine}")
    return card


def engine_args_from_args(args: argparse.Namespace, card: ExecutorCard) -> dict[str, object]:
    """``--engine-arg`` as ``compare`` reads it: KEY=VALUE pairs, none relaxbench sets itself, for an engine whose
    card supports them (vLLM's); each a one-line error. The values are then checked by the card
    (``check_completion``: against the installed vLLM)."""
    from relaxbench.errors import ConfigError
    from relaxbench.harness.suite import check_not_owned

    engine_args = parse_assignments(args.engine_arg, "--engine-arg")
    if not engine_args:
        return {}
    if "engine_args" not in card.supports:
        raise ConfigError(f"--engine-arg {next(iter(engine_args))}=... applies to --engine vllm (vLLM's engine "
                          f"arguments); the {card.engine} engine takes --device and --dtype")
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
    from relaxbench.models.preview import check_vocabularies
    from relaxbench.ops.sampling_params import SamplingParams

    card = engine_card_from_args(args)
    check_prompt(args.prompt, args.system)
    if args.kv_cache != "auto":
        card.refuse_unsupported("kv_cache", f"--kv-cache {args.kv_cache}")
    if args.graphs != "auto":
        card.refuse_unsupported("graphs", f"--graphs {args.graphs}")
    check_graphs_early(args.graphs, args.device)
    engine_args = engine_args_from_args(args, card)
    method = method_from_args(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    draft_name = None if method.policy == "none" else args.draft
    drafts_with_model = check_method_spec(method.name, method, draft_name)  # names and knobs, before torch loads
    check_files_early(args.target, draft_name)  # a cut GGUF file, a missing path: before torch too
    check_context_from_files(args.target, args.prompt, args.system, args.max_new_tokens)
    if drafts_with_model and draft_name is not None:
        check_vocabularies(args.target, draft_name)  # pinned vocabularies or tokenizer files, nothing fetched

    from relaxbench.decoders import CompletionRequest, check_method, resolve_k
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.ui import console

    device = runtime_from_args(args)
    k = resolve_k(method, args.k) if method.policy == "none" else usable_k(resolve_k(method, args.k),
                                                                           args.max_new_tokens)
    decode = DecodeConfig(k=k, max_new_tokens=args.max_new_tokens, sampling=sampling,
                          stop_strings=tuple(args.stop), seed=args.seed)
    request = CompletionRequest(args.target, draft_name, method, decode, args.prompt, args.system,
                                chat=not args.no_chat, dtype=args.dtype, draft_dtype=args.draft_dtype, device=device,
                                engine_args=engine_args)
    check_method(method.name, method, draft_name, sampling)  # modes and drafter compatibility too, before any load
    request = card.check_completion(request)  # the engine's own (vLLM: its environment, its engine arguments)
    completion = card.generate()(request)

    result = completion.result
    out = console()
    out.print(result.text, markup=False, highlight=False)
    err = console(stderr=True)
    table = Table(title=f"{method.name} ({completion.rule}, k={completion.k}, {card.engine})")
    for col in ("tokens", "rounds", "mean acc. length", "acceptance rate", "relaxed", "tokens/s", "stop"):
        table.add_column(col, justify="right")
    c = result.counters
    table.add_row(str(c.emitted), str(c.rounds), "-" if c.mean_acceptance_length is None else
                  f"{c.mean_acceptance_length:.2f}", "-" if c.acceptance_rate is None else f"{c.acceptance_rate:.2%}",
                  str(c.relaxed), f"{result.tokens_per_second:.2f}", result.stop_reason)
    err.print(table)
    if completion.decode_path:
        err.print(completion.decode_path, markup=False, highlight=False)
    return 0
