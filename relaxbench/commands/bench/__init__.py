"""``relaxbench bench ...``: benchmarks that print figures and exit non-zero when a target is missed.

One module per benchmark, each with ``register(subparsers)`` adding its subcommand and setting its ``handler``;
their tables go through the one table model (``output.py``). A new benchmark is a module and a line in
``BENCHMARK_MODULES``.
"""

from __future__ import annotations

import argparse

from relaxbench.commands.args import OneLineParser, show_choices
from relaxbench.commands.bench import (cluster, efficiency, engine, engines, forward, gpu, memory, policies, proxy,
                                      verify)

# in `bench --help` order
BENCHMARK_MODULES = [engine, engines, forward, efficiency, memory, cluster, proxy, policies, verify, gpu]
HIDDEN = {"policies"}  # earlier names of a benchmark (`bench policies` is `bench rules`), still accepted, not shown


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks: engine vs transformers, forward costs, rule overhead, proxy, "
                                     "Ray cluster")
    bsub = b.add_subparsers(dest="bench_command", required=True, parser_class=OneLineParser)
    for module in BENCHMARK_MODULES:
        module.register(bsub)
    show_choices(bsub, HIDDEN)
