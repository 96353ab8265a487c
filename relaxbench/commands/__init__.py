"""One module per ``relaxbench`` subcommand; each has ``register(subparsers)`` setting ``handler``."""

from relaxbench.commands import bench, generate, listing, models

COMMAND_MODULES = [generate, models, listing, bench]
