"""The ``relaxbench`` console script: builds the parser from the command modules and runs one.

Every user error (a ``RelaxbenchError``, a bad flag) ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from relaxbench.commands import COMMAND_MODULES
from relaxbench.commands.args import OneLineParser
from relaxbench.errors import RelaxbenchError


def build_parser() -> argparse.ArgumentParser:
    from relaxbench import __version__

    parser = OneLineParser(prog="relaxbench", description="Benchmark relaxed speculative decoding.")
    parser.add_argument("--version", action="version", version=f"relaxbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # recorded with a run's environment
    try:
        return args.handler(args)
    except RelaxbenchError as exc:
        print(f"relaxbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("relaxbench: interrupted (finished samples are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
