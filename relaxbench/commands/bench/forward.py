"""``relaxbench bench forward``: forward-pass cost per dtype and chunk size (the basis of the dtype defaults)."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_device_arg, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text


def register(bsub: argparse._SubParsersAction) -> None:
    f = bsub.add_parser("forward", help="forward-pass cost per dtype and chunk size (the basis of dtype defaults)")
    f.add_argument("models", nargs="+", metavar="MODEL")
    f.add_argument("--dtypes", default="float32,bfloat16")
    f.add_argument("--chunks", default="1,2,4,8,16")
    f.add_argument("--context", type=int, default=300)
    f.add_argument("--repeats", type=int, default=5)
    add_device_arg(f)
    add_threads_arg(f)
    f.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from relaxbench.benchmarks.forward_cost import measure_forward_costs
    from relaxbench.models import load_model

    device = runtime_from_args(args)
    chunks = tuple(int(c) for c in args.chunks.split(","))
    rows = []
    for name in args.models:
        for dtype in args.dtypes.split(","):
            loaded = load_model(name, dtype=dtype, device=device)
            costs = measure_forward_costs(loaded, chunks, args.context, args.repeats)
            rows.append((text(name), text(dtype), *(figure(f"{c.median_ms:.0f}") for c in costs)))
            del loaded
    print_table(table("bench-forward", f"forward cost, ms (context {args.context} tokens, median of {args.repeats})",
                      ("model", "dtype", *(f"{chunk} tok" for chunk in chunks)), rows))
    return 0
