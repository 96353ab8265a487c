"""``relaxbench bench engine``: our AR / exact arms vs transformers' generate, side by side (the engine ratio)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from relaxbench.commands.args import add_graphs_args, add_runtime_args, runtime_from_args
from relaxbench.harness.preflight import check_graphs_early
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict

if TYPE_CHECKING:
    from relaxbench.benchmarks.engine import Calls, Comparison
    from relaxbench.report.tables import Cell, Table


def register(bsub: argparse._SubParsersAction) -> None:
    e = bsub.add_parser("engine", help="our AR / exact arms vs transformers' generate, side by side")
    e.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    e.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    e.add_argument("--lookup-target", default="smollm2-135m-instruct",
                   help="model for the prompt-lookup comparison ('' to skip)")
    e.add_argument("-k", "--k", type=int, default=5)
    e.add_argument("--lookup-tokens", type=int, default=10)
    e.add_argument("--lookup-ngram", type=int, default=2)
    e.add_argument("--max-new-tokens", type=int, default=128)
    e.add_argument("--prompts", type=int, default=3, help="number of code prompts (max 3)")
    e.add_argument("--repeats", type=int, default=3)
    e.add_argument("--breakdown", action="store_true",
                   help="also split each side's time into its model forwards (by model and tokens per forward) "
                        "and the rest, side by side")
    add_runtime_args(e)
    add_graphs_args(e)  # ours replays CUDA graphs; transformers' plain generate then runs its static cache compiled
    e.set_defaults(handler=run)


def breakdown_table(row: Comparison) -> Table:
    """Where each side's time went in one comparison, row by row (``Comparison.time_rows``), and the difference."""
    def side(calls: Calls | None) -> tuple[Cell, Cell, Cell]:
        if calls is None:
            return figure("-"), figure("-"), figure("-")
        return (figure(str(calls.count)), figure(f"{calls.seconds:.2f}"),
                figure(f"{1000 * calls.seconds / calls.count:.0f}" if calls.count else "-"))

    def seconds(calls: Calls | None) -> float:
        return 0.0 if calls is None else calls.seconds

    return table(
        "bench-engine-breakdown", f"Where the time went: {row.label} (all timed generations)",
        ("", "ours calls", "ours s", "ours ms/call", "transformers calls", "transformers s", "transformers ms/call",
         "ours − transformers s"),
        [(text(what), *side(ours), *side(ref), figure(f"{seconds(ours) - seconds(ref):+.2f}"))
         for what, ours, ref in row.time_rows()],
        "A forward on an empty cache is a prefill; the others by the tokens they feed. Timed by forward hooks on the "
        "models, at the same points on both sides; 'outside model forwards' is everything else (drafting and "
        "verification logic, cache handling), its calls the generations.")


def run(args: argparse.Namespace) -> int:
    check_graphs_early(args.graphs, args.device)  # before torch loads
    from relaxbench.analysis.metrics import metric_definition
    from relaxbench.benchmarks.engine import bench_draft_model, bench_prompt_lookup
    from relaxbench.decoders import load_pair
    from relaxbench.models import load_model
    from relaxbench.ui import console

    device = runtime_from_args(args)
    out = console()
    target, draft = load_pair(args.target, args.draft, device, args.dtype, args.draft_dtype, quiet=False)
    out.print(f"target {target.name} ({target.dtype}), draft {draft.name} ({draft.dtype}), "
              f"{args.prompts} prompts × {args.repeats} repeats, {args.max_new_tokens} new tokens; "
              f"kv cache {args.kv_cache}, graphs {args.graphs} on {device}")
    rows = bench_draft_model(target, draft, args.k, args.max_new_tokens, args.repeats, args.prompts,
                             args.breakdown)
    if args.lookup_target:
        del target, draft
        lookup = load_model(args.lookup_target, dtype=args.dtype, device=device)
        rows += bench_prompt_lookup(lookup, args.lookup_tokens, args.lookup_ngram, args.max_new_tokens,
                                    args.repeats, args.prompts, args.breakdown)
    for row in rows:
        if row.time_rows():
            print_table(breakdown_table(row))
    print_table(table(
        "bench-engine", "relaxbench engine vs transformers (tokens/s per repeat; engine ratio = median of the paired "
                        "ratios)",
        ("comparison", "ours tok/s", "transformers tok/s", "engine ratio", "target", "identical", "holds"),
        [(text(row.label), figure(" ".join(f"{v:.2f}" for v in row.ours_tps)),
          figure(" ".join(f"{v:.2f}" for v in row.ref_tps)), figure(f"{row.median_ratio:.3f}"),
          figure(f"≥ {row.target_ratio:.2f}"), verdict(row.identical), verdict(row.holds)) for row in rows],
        f"Engine ratio = {metric_definition('engine ratio')}."))
    for row in rows:
        if row.notes:
            out.print(f"{row.label}: {row.notes}", highlight=False)
    return 0 if all(row.holds for row in rows) else 1
