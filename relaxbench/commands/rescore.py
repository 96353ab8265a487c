"""``relaxbench rescore RUN_DIR --grader ...``: grade a stored run's answers with an LLM grader, without generating
anything. Only the verdicts the store lacks are asked for (the cache is keyed by grader, prompt and answer), so a
rescore after an interrupted or extended run pays for the new answers alone. Then the tables and the report, as
``compare`` writes them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from relaxbench.commands.args import add_wide_arg, positive_int, runtime_from_args
from relaxbench.commands.grading import add_grader_args, grader_from_args
from relaxbench.commands.report import add_report_args
from relaxbench.errors import ConfigError, DataError
from relaxbench import pipeline


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("rescore", help="grade a stored run's open-ended answers with an LLM grader (no generation)")
    r.add_argument("run_dir", metavar="RUN_DIR", help="the run's output folder (or its results.sqlite)")
    r.add_argument("--run-id", type=int, default=None, help="which run in the store (default: the latest)")
    add_grader_args(r)
    r.add_argument("--device", default="auto", help="where a local grader runs: cpu, cuda, cuda:1 ... (default: cuda "
                                                    "if available)")
    r.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's choice)")
    add_report_args(r, prefix="report-")
    add_wide_arg(r)
    r.set_defaults(handler=run)


def store_path(run_dir: str) -> Path:
    from relaxbench.harness.store import STORE_NAME

    path = Path(run_dir)
    path = path / STORE_NAME if path.is_dir() else path
    if not path.is_file():
        raise DataError(f"{path}: no results store (run `relaxbench compare --out DIR` first)")
    return path


def run(args: argparse.Namespace) -> int:
    from relaxbench.commands.grading import stored_graded_tasks
    from relaxbench.harness.store import Store
    from relaxbench.sqlite_file import WriterLock

    grader = grader_from_args(args)
    if grader is None:
        raise ConfigError("rescore needs a grader: --grader MODEL, or --grader-endpoint URL --grader-model NAME")
    outputs = pipeline.Outputs(report_formats=pipeline.report_formats(args.report_format, args.report_out, args.budget),
                              report_out=args.report_out, budget=args.budget, wide=args.wide)
    path = store_path(args.run_dir)
    device = runtime_from_args(args)
    with Store(path, read_only=True) as store:  # a damaged or empty store is refused here, untouched
        if args.run_id is None:
            runs = store.rows("SELECT run_id FROM runs ORDER BY updated_at DESC, run_id DESC LIMIT 1")
        else:
            runs = store.rows("SELECT run_id FROM runs WHERE run_id=?", (args.run_id,))
        if not runs:
            raise DataError(f"{path}: no run{'' if args.run_id is None else f' with id {args.run_id}'} stored")
        run_id = int(runs[0]["run_id"])
        tasks = stored_graded_tasks(store, run_id)
        if not tasks:
            names = sorted({r["task"] for r in store.rows("SELECT task FROM cells WHERE run_id=?", (run_id,))})
            raise ConfigError(f"run {run_id} has no task with a grading protocol (its tasks: {', '.join(names)}); "
                              "MT-Bench and the jbb tasks have one")
    pipeline.check_grading(grader, tasks, device)
    with WriterLock(path, "relaxbench rescore"), Store(path) as store:  # the verdicts are written here, alone
        tally = pipeline.grade_and_announce(store, run_id, tasks, grader, device, pipeline.run_progress())
    pipeline.summarise(path, run_id, wide=outputs.wide)
    pipeline.report(path.parent, run_id, outputs)
    if tally.failed:  # the tables show what was graded; the exit status says the grading is incomplete
        print(f"relaxbench: error: {tally.failed} of the {tally.asked} verdicts asked failed; run rescore again "
              "to ask for them", file=sys.stderr)
        return 1
    return 0
