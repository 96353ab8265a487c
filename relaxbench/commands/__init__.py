"""One module per ``relaxbench`` subcommand; each has ``register(subparsers)`` setting ``handler``."""

from relaxbench.commands import compare, generate, listing, models

COMMAND_MODULES = [generate, compare, models, listing]
