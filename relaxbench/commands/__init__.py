"""One module per ``relaxbench`` subcommand; each has ``register(subparsers)`` setting ``handler``."""

from relaxbench.commands import (
    bench,
    compare,
    drafter,
    generate,
    judge,
    listing,
    lm_eval,
    lm_eval_tasks,
    models,
    profile,
    report,
    rescore,
    store,
)

COMMAND_MODULES = [generate, compare, rescore, report, profile, models, listing, bench, judge, drafter, lm_eval,
                   lm_eval_tasks, store]
