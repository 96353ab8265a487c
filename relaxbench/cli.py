"""The ``relaxbench`` console script.

Every user error (a ``RelaxbenchError``, a bad flag) ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from relaxbench.errors import ConfigError, RelaxbenchError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage banner goes to --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_assignments(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    """``key=value`` pairs; values are parsed as YAML scalars/lists (``0.3``, ``true``, ``[1, 2]``)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {item!r} is not of the form key=value")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"{what} {item!r}: cannot parse the value") from None
    return out


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", default="auto", help="target dtype (default: per device; see docs/performance.md)")
    p.add_argument("--draft-dtype", default="auto", help="draft model dtype (default: per device)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", "--k", type=int, default=None, help="draft tokens per round (default: the method's, else 5)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    from relaxbench import __version__
    from relaxbench.commands import COMMAND_MODULES

    parser = OneLineParser(prog="relaxbench", description="Benchmark relaxed speculative decoding.")
    parser.add_argument("--version", action="version", version=f"relaxbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def configure_runtime(args: argparse.Namespace) -> str:
    """Quiet third-party logging, set threads, pick the device; return the device string."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    device = getattr(args, "device", "auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda but torch sees no CUDA device")
    return device


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
