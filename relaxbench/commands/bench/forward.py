"""``relaxbench bench forward``: forward-pass cost per dtype and chunk size (the basis of the dtype defaults)."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_device_arg, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict


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
    from relaxbench.decoding.bf16_rows import FP32_ROWS_FROM, wide_rows_in_fp32
    from relaxbench.models import load_model

    device = runtime_from_args(args)
    chunks = tuple(int(c) for c in args.chunks.split(","))
    rows, held = [], []
    for name in args.models:
        for dtype in args.dtypes.split(","):
            loaded = load_model(name, dtype=dtype, device=device)
            both = wide_rows_in_fp32(loaded.model)
            costs = measure_forward_costs(loaded, chunks, args.context, args.repeats, both_kernels=both)
            engine, kernel = costs[:len(chunks)], costs[len(chunks):]
            holds = None
            if both:  # fp32 products from FP32_ROWS_FROM rows must not be slower than bf16's own kernel
                holds = all(e.median_ms <= k.median_ms for e, k in zip(engine, kernel) if e.chunk >= FP32_ROWS_FROM)
                held.append(holds)
            for path, measured, verdict_ in (("engine", engine, holds), ("bf16 kernel", kernel, None)):
                if measured:
                    rows.append((text(name), text(dtype), text(path), *(figure(f"{c.median_ms:.0f}") for c in measured),
                                 verdict(verdict_)))
            del loaded
    print_table(table(
        "bench-forward", f"forward cost, ms (context {args.context} tokens, median of {args.repeats})",
        ("model", "dtype", "path", *(f"{chunk} tok" for chunk in chunks), f"fp32 rows ≥ {FP32_ROWS_FROM} faster"),
        rows,
        f"engine = relaxbench's forward. A bf16 model on a CPU without bf16 units computes the linear layers of a "
        f"forward of {FP32_ROWS_FROM} tokens or more in fp32 (docs/performance.md); there the row 'bf16 kernel' times "
        "bf16's own kernel for every size, the two alternating run by run, and the last column says whether the fp32 "
        f"products were no slower at every size of {FP32_ROWS_FROM} tokens or more ('-': no such choice on this "
        "device and dtype)."))
    return 0 if all(held) else 1
