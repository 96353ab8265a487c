"""``relaxbench bench ...``: benchmarks that print figures and exit non-zero when a target is missed.

Each benchmark is its own module (``commands/benches/``) with one registration, ``register(subparsers)``, that adds
its subcommand and sets its ``handler``; its tables go through the one table model (``benches/output.py``). A new
benchmark is a module and a line in ``BENCHMARKS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from relaxbench.commands.args import OneLineParser
from relaxbench.commands.benches import cluster, efficiency, engine, forward, memory, policies, proxy

# one registration per benchmark, in `bench --help` order
BENCHMARKS: list[Callable[[argparse._SubParsersAction], None]] = [
    engine.register, forward.register, efficiency.register, memory.register, cluster.register, proxy.register,
    policies.register]


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks: engine vs transformers, forward costs, policy overhead, proxy, "
                                     "Ray cluster")
    bsub = b.add_subparsers(dest="bench_command", required=True, parser_class=OneLineParser)
    for add in BENCHMARKS:
        add(bsub)
