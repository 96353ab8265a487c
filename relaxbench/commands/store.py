"""``relaxbench store upgrade RUN_DIR``: convert a results store written by an earlier schema version to the
current one, in place (harness/upgrade.py: a converted copy, checked row for row, then swapped in; the original is
kept beside it)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("store", help="maintain a results store: `store upgrade RUN_DIR` converts an earlier "
                                     "schema version (docs/store.md)")
    actions = s.add_subparsers(dest="store_action", required=True, parser_class=type(s))
    u = actions.add_parser("upgrade", help="convert a version-1 results store to the current schema, in place")
    u.add_argument("run_dir", metavar="RUN_DIR", help="the run's output folder (or its results.sqlite)")
    u.set_defaults(handler=run_upgrade)


def run_upgrade(args: argparse.Namespace) -> int:
    from relaxbench.harness.store import SCHEMA_VERSION
    from relaxbench.harness.upgrade import upgrade, store_file
    from relaxbench.ui import console

    done = upgrade(args.run_dir, " ".join(["relaxbench", *(getattr(args, "argv", None) or ["store", "upgrade"])]))
    if done is None:
        console().print(f"{store_file(args.run_dir)}: already schema version {SCHEMA_VERSION}; nothing to do",
                        highlight=False, soft_wrap=True)
        return 0
    rows = ", ".join(f"{n} {table}" for table, n in done.rows.items() if n)
    console().print(f"{done.store}: upgraded to schema version {SCHEMA_VERSION} ({rows or 'no rows'}, each checked); "
                    f"the original is kept as {done.original}", highlight=False, soft_wrap=True)
    return 0
