"""The ``relaxbench`` console script: builds the parser from the command modules and runs one.

Every user error (a ``RelaxbenchError``, a bad flag) ends as one line on stderr and exit status 2; SIGINT and
SIGTERM stop a run the same way (the session marked interrupted, finished samples kept), with one line and exit
status 130 or 143.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from relaxbench.commands import COMMAND_MODULES
from relaxbench.commands.args import OneLineParser
from relaxbench.errors import RelaxbenchError, Terminated


def build_parser() -> argparse.ArgumentParser:
    from relaxbench import __version__

    parser = OneLineParser(prog="relaxbench", description="Benchmark relaxed speculative decoding.")
    parser.add_argument("--version", action="version", version=f"relaxbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # recorded with a run's environment
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        return args.handler(args)
    except RelaxbenchError as exc:
        print(f"relaxbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("relaxbench: terminated by SIGTERM (finished samples are kept; rerun to resume)", file=sys.stderr)
        return Terminated.exit_code
    except KeyboardInterrupt:
        print("relaxbench: interrupted (finished samples are kept)", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
