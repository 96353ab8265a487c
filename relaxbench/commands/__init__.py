"""One module per ``relaxbench`` subcommand; each has ``register(subparsers)`` setting ``handler``."""

from relaxbench.commands import bench, compare, generate, judge, listing, lm_eval, lm_eval_tasks, models, report

COMMAND_MODULES = [generate, compare, report, models, listing, bench, judge, lm_eval, lm_eval_tasks]
