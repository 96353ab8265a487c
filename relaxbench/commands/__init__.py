"""One module per ``relaxbench`` subcommand; each has ``register(subparsers)`` setting ``handler``."""

from relaxbench.commands import (
    bench,
    compare,
    generate,
    listing,
    lm_eval,
    lm_eval_tasks,
    models,
    profile,
    report,
    rescore,
)

COMMAND_MODULES = [generate, compare, rescore, report, profile, models, listing, bench, lm_eval, lm_eval_tasks]
