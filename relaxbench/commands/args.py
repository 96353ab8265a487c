"""Command-line building blocks shared by the subcommands: a parser whose usage errors are one line, and the
runtime and decoding flags several commands take."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage banner goes to --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def show_choices(action: argparse.Action, hidden: Iterable[str]) -> None:
    """Show ``action``'s choices (a positional's, or a subparsers action's subcommands) in usage and help less
    ``hidden``: earlier names that are still accepted but no longer shown."""
    hidden = set(hidden)
    action.metavar = "{" + ",".join(name for name in action.choices if name not in hidden) + "}"


def _integer(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (``--threads 0`` is refused, not read as torch's default)."""
    return _integer(text, 1)


def count(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _integer(text, 0)


def finite_float(text: str) -> float:
    """An argparse type: a finite number (``nan`` and ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def add_device_arg(p: argparse.ArgumentParser, default: str = "auto", help: str | None = None) -> None:
    p.add_argument("--device", default=default, help=help or "cpu, cuda, cuda:1 ... (default: cuda if available)")


def add_dtype_args(p: argparse.ArgumentParser, draft: bool = True, help: str | None = None,
                   draft_help: str | None = None) -> None:
    """``--dtype`` (the target's) and, with ``draft``, ``--draft-dtype``; both default to ``auto``."""
    p.add_argument("--dtype", default="auto", help=help or "target dtype (default: per device; see "
                                                           "docs/performance.md)")
    if draft:
        p.add_argument("--draft-dtype", default="auto", help=draft_help or "draft model dtype (default: per device)")


def add_threads_arg(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--threads", type=positive_int, default=None, help=help or "torch CPU threads (default: torch's choice)")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype``, ``--draft-dtype`` and ``--threads``, as every command that loads models takes
    them (``runtime_from_args`` applies them)."""
    add_device_arg(p)
    add_dtype_args(p)
    add_threads_arg(p)


def add_graphs_args(p: argparse.ArgumentParser) -> None:
    """``--graphs`` and ``--kv-cache``: the transformers engine's decode path (docs/cli.md). Recorded in the run's
    environment, not in its key: they change the speed, not the outputs."""
    p.add_argument("--graphs", choices=("auto", "on", "off"), default="auto",
                   help="transformers engine: replay the small target and draft forwards as captured CUDA graphs "
                        "(needs the static kv cache); auto: on for CUDA, off for CPU")
    p.add_argument("--kv-cache", choices=("auto", "dynamic", "static"), default="auto",
                   help="transformers engine: dynamic (grown per token) or static (preallocated; a rollback is a "
                        "length change); auto: static with graphs, else dynamic")


def configure_decode_path(kv_cache: str, graphs: str, device: str) -> None:
    """Apply ``--kv-cache``/``--graphs`` to this process for ``device`` (``decoding.cache.resolve_kv_settings``)."""
    from relaxbench.decoding.cache import configure_kv, resolve_kv_settings

    configure_kv(resolve_kv_settings(kv_cache, graphs, device))


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", "--k", type=positive_int, default=None,
                   help="draft tokens per round (default: the method's, else 5)")
    p.add_argument("--temperature", type=finite_float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=count, default=0)
    p.add_argument("--top-p", type=finite_float, default=1.0)
    p.add_argument("--max-new-tokens", type=positive_int, default=128)
    p.add_argument("--seed", type=count, default=0)


def add_wide_arg(p: argparse.ArgumentParser) -> None:
    """``--wide``, for every command that prints the per-task tables."""
    p.add_argument("--wide", action="store_true",
                   help="print every column of the tables (default: the essential ones, within 120 columns)")


def runtime_from_args(args: argparse.Namespace) -> str:
    """``configure_runtime`` with the command's --device and --threads; the device string. Imported here: torch
    loads only for a command that runs, never for ``--help`` or a refused flag."""
    from relaxbench.models.device import configure_runtime

    device = configure_runtime(getattr(args, "device", "auto"), getattr(args, "threads", None))
    if hasattr(args, "graphs"):
        configure_decode_path(args.kv_cache, args.graphs, device)
    return device
