"""``relaxbench models list|fetch``: the packaged model zoo."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import OneLineParser


def register(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="the packaged model zoo: list aliases, fetch and convert")
    msub = m.add_subparsers(dest="models_command", required=True, parser_class=OneLineParser)
    msub.add_parser("list", help="aliases, sizes and cache state").set_defaults(handler=run_list)
    f = msub.add_parser("fetch", help="download, verify and convert packaged models")
    f.add_argument("names", nargs="+", metavar="NAME")
    f.set_defaults(handler=run_fetch)


def run_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.models.zoo import MODELS, PackagedModel, cache_root
    from relaxbench.ui import console

    table = Table(title=f"packaged models (cache: {cache_root()})")
    for col in ("alias", "source", "size", "state", "description"):
        table.add_column(col, no_wrap=col == "alias")
    for alias, spec in MODELS.items():
        if isinstance(spec, PackagedModel):
            size = f"{spec.size / 1e6:,.0f} MB GGUF"
            state = "converted" if spec.is_converted() else ("fetched" if spec.is_fetched() else "not fetched")
            source = f"{len(spec.wheels)} wheel(s): {spec.wheels[0]}{' …' if len(spec.wheels) > 1 else ''}"
        else:
            size, source = "tiny", "built locally"
            state = "built" if spec.is_converted() else "not built"
        table.add_row(alias, source, size, state, spec.description)
    console().print(table)
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from relaxbench.commands.args import runtime_from_args
    from relaxbench.models.convert import materialize
    from relaxbench.models.resolve import resolve_model

    runtime_from_args(args)
    for name in args.names:
        location = resolve_model(name)
        print(f"{name}: ready at {materialize(location)}")
    return 0
