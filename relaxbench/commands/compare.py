"""``relaxbench compare``: run a (target, draft) pair × methods × tasks (+ the AR baseline per task), store every
sample in ``DIR/results.sqlite`` (resuming what is there), print a table per task and write the HTML/PDF report.

Also ``relaxbench summary DIR``: the same tables from a stored run, without running anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relaxbench.commands.args import add_runtime_args, runtime_from_args
from relaxbench.commands.report import add_profile_arg, add_report_args, check_profile_args
from relaxbench.validation import parse_assignments


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("compare", help="benchmark methods against the AR baseline on tasks; store and tabulate")
    c.add_argument("--suite", default=None, help="a suite YAML with any of the fields below (flags win), or the "
                                                 "name of a shipped one in suites/ (default, full)")
    c.add_argument("--target", default=None, help="target model: local dir, .gguf, packaged alias or hub id")
    c.add_argument("--draft", default=None, help="draft model name, or 'ngram' for prompt lookup")
    c.add_argument("--methods", default=None, help="comma-separated methods (methods/*.yaml names, YAML paths, "
                                                   "or policy names); each sweep point is its own arm")
    c.add_argument("--tasks", default=None, help="comma-separated tasks (tasks/*.yaml names or YAML paths, or "
                                                 "lm_eval:NAME for an lm-evaluation-harness task)")
    c.add_argument("--limit", type=int, default=None, help="first N items of each task (default: all)")
    c.add_argument("--task-limit", action="append", metavar="TASK=N", default=[],
                   help="first N items of TASK, over --limit (repeatable)")
    c.add_argument("--max-new-tokens", type=int, default=None, help="override every task's max_new_tokens")
    c.add_argument("--repeats", type=int, default=None, help="time each sample R times, arms interleaved (default 1)")
    c.add_argument("--out", default=None, help="output folder holding results.sqlite (default runs/TARGET_vs_DRAFT)")
    c.add_argument("--data-file", action="append", metavar="TASK=PATH", default=[],
                   help="a local JSONL file for TASK (repeatable)")
    c.add_argument("-k", "--k", type=int, default=None, help="draft tokens per round (default: each method's, else 5)")
    c.add_argument("--temperature", type=float, default=None, help="0 = greedy (default)")
    c.add_argument("--top-k", type=int, default=None)
    c.add_argument("--top-p", type=float, default=None)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--warmup", type=int, default=None, help="untimed warm-up generations per arm (default 1)")
    c.add_argument("--executor", default="in-process", help="where jobs run (default: in-process)")
    c.add_argument("--num-fewshot", type=int, default=None,
                   help="lm_eval:NAME tasks: few-shot examples (lm-eval's rules: a task that sets 0 keeps 0)")
    c.add_argument("--include-path", action="append", metavar="DIR", default=None,
                   help="lm_eval:NAME tasks: a folder of lm-eval task YAMLs, searched first (repeatable)")
    c.add_argument("--apply-chat-template", action="store_true", default=None,
                   help="lm_eval:NAME tasks: render prompts with the target's chat template, few-shot examples as "
                        "turns (as lm-eval's --apply_chat_template)")
    add_report_args(c, prefix="report-")
    add_profile_arg(c, recorded=True)
    add_runtime_args(c)
    c.set_defaults(handler=run)

    s = sub.add_parser("summary", help="print the tables of a stored compare run")
    s.add_argument("out", help="the run's output folder (or its results.sqlite)")
    s.add_argument("--run-id", type=int, default=None, help="which run in the store (default: the latest)")
    add_profile_arg(s)
    s.set_defaults(handler=run_summary)


def suite_from_args(args: argparse.Namespace):
    """A SuiteSpec from --suite (if any) with the command-line flags over it."""
    from relaxbench.errors import ConfigError
    from relaxbench.harness.suite import SuiteSpec, split_names, suite_file_fields, suite_path
    from relaxbench.validation import load_yaml, validate

    fields: dict[str, Any] = {}
    where = "command line"
    if args.suite:
        path = suite_path(args.suite)
        where = str(path)
        fields = suite_file_fields(load_yaml(path), where)
    flags = {"target": args.target, "draft": args.draft, "methods": args.methods, "tasks": args.tasks,
             "limit": args.limit, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "k": args.k,
             "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
             "warmup": args.warmup, "num_fewshot": args.num_fewshot, "apply_chat_template": args.apply_chat_template,
             "include_paths": tuple(args.include_path) if args.include_path else None,
             "profiles": tuple(args.profiles) if getattr(args, "profiles", None) else None}
    fields.update({key: value for key, value in flags.items() if value is not None})
    for key in ("device", "dtype", "draft_dtype"):
        if getattr(args, key) != "auto" or key not in fields:
            fields[key] = getattr(args, key)
    for required in ("target", "methods", "tasks"):
        if not fields.get(required):
            raise ConfigError(f"compare needs --{required} (or a --suite file that sets it)")
    data_files = dict(fields.get("data_files") or {})
    data_files.update({k: str(v) for k, v in parse_assignments(args.data_file, "--data-file").items()})
    fields["data_files"] = data_files
    limits = dict(fields.get("limits") or {})
    for task, n in parse_assignments(args.task_limit, "--task-limit").items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"--task-limit {task}={n}: N must be a positive integer")
        limits[task] = n
    fields["limits"] = limits
    fields["methods"] = split_names(fields["methods"], "method")
    fields["tasks"] = split_names(fields["tasks"], "task")
    return validate(SuiteSpec, fields, where)


class RichProgress:
    """Bars per cell and overall, with ETA, on stderr."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from relaxbench.ui import console

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 console=console(stderr=True), transient=False)
        self.overall = self.progress.add_task("[bold]all cells", total=0)
        self.bars: dict[tuple[str, str], Any] = {}

    def __enter__(self) -> RichProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def cell(self, task: str, arm: str, total: int, done: int) -> None:
        self.bars[(task, arm)] = self.progress.add_task(f"{task} / {arm}", total=total, completed=done)
        overall = self.progress.tasks[self.overall]
        self.progress.update(self.overall, total=(overall.total or 0) + total, completed=overall.completed + done)

    def advance(self, task: str, arm: str) -> None:
        self.progress.advance(self.bars[(task, arm)])
        self.progress.advance(self.overall)

    def note(self, message: str) -> None:
        self.progress.console.print(message)


def run(args: argparse.Namespace) -> int:
    from relaxbench.arms import load_pair
    from relaxbench.harness.environment import describe_environment
    from relaxbench.harness.executor import EXECUTORS
    from relaxbench.harness.plan import build_plan, default_out_dir
    from relaxbench.harness.runner import Worker
    from relaxbench.harness.store import open_store
    from relaxbench.ui import console

    suite = suite_from_args(args)
    report_formats = report_formats_of(args)  # checked before anything runs
    check_profile_args(list(suite.profiles), args.x_axis)
    executor = EXECUTORS.get(args.executor)()
    plan = build_plan(suite)  # validates everything and reads the data before any model loads
    args.device = suite.device  # a suite file may set it
    device = runtime_from_args(args)
    out_dir = Path(args.out) if args.out else default_out_dir(suite)
    err = console(stderr=True)
    draft_name = suite.draft if plan.needs_draft_model() else None
    target, draft = load_pair(suite.target, draft_name, device, suite.dtype, suite.draft_dtype, quiet=False)
    store = open_store(out_dir)
    status = "failed"
    session_id = None
    try:
        run_id = store.open_run(plan.key, suite.target, suite.draft, suite.record())
        session_id = store.start_session(run_id, describe_environment(target, draft, device, getattr(args, "argv", None)))
        worker = Worker(target, draft, suite.draft, store, run_id, session_id, warmup=suite.warmup)
        err.print(f"run {plan.key} in {out_dir / 'results.sqlite'}: {len(plan.arms)} arms × {len(plan.jobs)} tasks")
        for note in plan.notes():
            err.print(note, markup=False, highlight=False)
        with RichProgress() as progress:
            executor.run(plan.jobs, worker, progress)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if session_id is not None:
            store.finish_session(session_id, status)
        store.close()
    print_tables(out_dir, run_id)
    if report_formats:
        from relaxbench.commands.report import write_and_announce

        write_and_announce(out_dir, ",".join(report_formats), args.report_out, args.budget, run_id,
                           x_axis=args.x_axis)
    return 0


def report_formats_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The report formats ``compare`` writes at the end (none for ``--report-format none``), validated early."""
    from relaxbench.report import check_budget, output_paths, parse_formats

    if args.report_format.strip().lower() == "none":
        return ()
    check_budget(args.budget)
    formats = parse_formats(args.report_format)
    if args.report_out is not None:
        output_paths(args.report_out, formats, args.report_out)
    return formats


def print_tables(out: Path | str, run_id: int | None = None, profiles: list[str] | tuple[str, ...] = ()) -> None:
    """Every task's tables, as the report shows them (a proxy column per cost profile)."""
    from relaxbench.report.terminal import print_run
    from relaxbench.ui import console

    print_run(out, console(), run_id, profiles)


def run_summary(args: argparse.Namespace) -> int:
    check_profile_args(args.profiles, None)
    print_tables(args.out, args.run_id, args.profiles)
    return 0
