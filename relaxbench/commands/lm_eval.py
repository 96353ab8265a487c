"""``relaxbench lm-eval ARGS``: lm-evaluation-harness's own command line, with ``--model relaxbench`` registered.

lm-eval 0.4.13 discovers models only from its built-in table or from modules already imported, so this command
imports ``relaxbench.integrations.lm_eval`` (which registers the model through lm-eval's ``register_model``) and
hands every argument, unchanged, to lm-eval's ``cli_evaluate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from relaxbench.errors import RelaxbenchError
from relaxbench.integrations.lm_eval_tasks import TASKS_DIR_TOKEN

# exceptions lm-eval and datasets raise for bad user input (an unknown task, a missing data file, a bad flag combo)
_USER_ERRORS = (ValueError, KeyError, FileNotFoundError)


def register(sub: argparse._SubParsersAction) -> None:
    # no options of its own: with a prefix character no argument uses, argparse hands every argument (--model,
    # --tasks, -h ...) to the positional list untouched, for lm-eval to parse
    p = sub.add_parser("lm-eval", prefix_chars="\x00", add_help=False,
                       help="run lm-evaluation-harness with `--model relaxbench` available (all arguments go to "
                            "lm-eval; see docs/lm-eval.md)")
    p.add_argument("lm_eval_args", nargs="*")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lm_eval.__main__ import cli_evaluate

    import relaxbench.integrations.lm_eval  # noqa: F401  (registers --model relaxbench)

    saved, sys.argv = sys.argv, ["lm-eval", *args.lm_eval_args]  # lm-eval's CLI reads sys.argv itself
    try:
        cli_evaluate()
    except _USER_ERRORS as exc:
        if not _raised_inside(exc, ("lm_eval", "datasets")):
            raise  # our own code or a library bug: keep the traceback
        message = " ".join(str(exc).split()) or type(exc).__name__
        if TASKS_DIR_TOKEN in message:
            message += " (pass the folder `relaxbench lm-eval-tasks` prints as --include_path, not tasks/lm_eval)"
        raise RelaxbenchError(f"lm-eval: {message}") from None
    finally:
        sys.argv = saved
    return 0


def _raised_inside(exc: BaseException, packages: tuple[str, ...]) -> bool:
    """Whether the innermost frame of ``exc``'s traceback belongs to one of ``packages``."""
    import importlib

    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = Path(tb.tb_frame.f_code.co_filename).resolve()
    for name in packages:
        module = importlib.import_module(name)
        if where.is_relative_to(Path(module.__file__).resolve().parent):
            return True
    return False
