"""``relaxbench compare``: run a (target, draft) pair × methods × tasks (+ the AR baseline per task), store every
sample in ``DIR/results.sqlite`` (resuming what is there), with ``--grader``/``--grader-endpoint`` grade the answers of
tasks that have a grading protocol (MT-Bench) afterwards, print a table per task and write the HTML/PDF report.
This module parses the command line; the run itself is ``relaxbench.pipeline``'s pipeline.

Also ``relaxbench summary DIR``: the same tables from a stored run, without running anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relaxbench import pipeline
from relaxbench.commands.args import add_graphs_args, add_threads_arg, add_wide_arg
from relaxbench.commands.grading import add_grader_args, grader_from_args
from relaxbench.commands.options import add_spec_flags, declared, given_values
from relaxbench.commands.report import (add_agree_arg, add_profile_arg, add_report_args, check_agree, check_has_samples,
                                        engine_arms_known)
from relaxbench.errors import ConfigError
from relaxbench.harness.suite import SuiteSpec, split_names, suite_file_fields, suite_path
from relaxbench.validation import load_yaml, validate


# the executor's options, set by flags of their own (a suite file sets them as executor_options)
EXECUTOR_FLAGS = {"address": "ray_address", "workers": "workers", "gpus_per_worker": "gpus_per_worker",
                  "cpus_per_worker": "cpus_per_worker"}


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("compare", help="benchmark methods against the AR baseline on tasks; store and tabulate")
    c.add_argument("--suite", default=None, help="a suite YAML with any of the fields below (flags win), or the "
                                                 "name of a shipped one in suites/ (default, full)")
    add_spec_flags(c, SuiteSpec)  # one flag per suite field, from its declaration (harness/suite.py)
    c.add_argument("--out", default=None, help="output folder holding results.sqlite (default runs/TARGET_vs_DRAFT)")
    c.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="ray: join this cluster (HOST:PORT, or 'auto' for the one `ray start` made on this machine); "
                        "default: start a local cluster and shut it down afterwards")
    c.add_argument("--workers", type=int, default=None,
                   help="ray: workers (each loads the pair once; default: as many as the cluster's resources fit)")
    c.add_argument("--gpus-per-worker", type=float, default=None,
                   help="ray: GPUs each worker declares (default 1 on CUDA; with --device-map auto the target "
                        "spreads over them)")
    c.add_argument("--cpus-per-worker", type=float, default=None,
                   help="ray: CPUs each worker declares, and its torch threads on CPU (default: 1 on CUDA; on CPU "
                        "--threads, else this machine's CPU count)")
    add_report_args(c, prefix="report-")
    add_threads_arg(c)
    add_graphs_args(c)
    add_grader_args(c)
    add_wide_arg(c)
    c.set_defaults(handler=run)

    s = sub.add_parser("summary", help="print the tables of a stored compare run")
    s.add_argument("out", help="the run's output folder (or its results.sqlite)")
    s.add_argument("--run-id", type=int, default=None, help="which run in the store (default: the latest)")
    add_profile_arg(s)
    add_agree_arg(s)
    add_wide_arg(s)
    s.set_defaults(handler=run_summary)


def suite_from_args(args: argparse.Namespace) -> SuiteSpec:
    """A SuiteSpec from --suite (if any) with the command-line flags over it: a mapping flag (--task-limit,
    --engine-arg, ...) merges key by key over the file's mapping, every other flag replaces the file's value."""
    fields: dict[str, Any] = {}
    where = "command line"
    if args.suite:
        path = suite_path(args.suite)
        where = str(path)
        fields = suite_file_fields(load_yaml(path), where)
    given = given_values(args, SuiteSpec)
    validate(SuiteSpec, {"target": "-", "methods": ["-"], "tasks": ["-"], **given}, "compare", "flag")  # as typed
    if args.suite and "tasks" in given:  # --tasks picks some of the suite's tasks: its per-task settings of the
        chosen = set(split_names(given["tasks"], "task"))  # others go
        for key in ("limits", "task_repeats"):
            fields[key] = {task: n for task, n in (fields.get(key) or {}).items() if task in chosen}
    for name in declared(SuiteSpec, "assign"):
        given[name] = {**(fields.get(name) or {}), **given.get(name, {})}
    fields.update(given)
    options = fields.get("executor_options")
    options = dict(options) if isinstance(options, dict) else {}
    options.update({key: getattr(args, flag) for key, flag in EXECUTOR_FLAGS.items() if getattr(args, flag) is not None})
    fields["executor_options"] = options
    for required in ("target", "methods", "tasks"):
        if not fields.get(required):
            raise ConfigError(f"compare needs --{required} (or a --suite file that sets it)")
    fields["methods"] = split_names(fields["methods"], "method")
    fields["tasks"] = split_names(fields["tasks"], "task")
    return validate(SuiteSpec, fields, where)


def run(args: argparse.Namespace) -> int:
    """Parse the command line into a run request and run its pipeline (``relaxbench.pipeline``)."""
    suite = suite_from_args(args)
    outputs = pipeline.Outputs(Path(args.out) if args.out else None,
                              pipeline.report_formats(args.report_format, args.report_out, args.budget),
                              args.report_out, args.budget, args.x_axis, args.wide)
    argv = getattr(args, "argv", None)
    runtime = pipeline.Runtime(args.threads, args.kv_cache, args.graphs, tuple(argv) if argv is not None else None)
    pipeline.run(pipeline.RunRequest(suite, runtime, outputs, grader_from_args(args)))
    return 0


def run_summary(args: argparse.Namespace) -> int:
    pipeline.check_profile_args(args.profiles, None)
    check_has_samples(args.out, args.run_id)
    agree = check_agree(args.out, args.run_id, args.agree)
    with engine_arms_known():
        pipeline.summarise(args.out, args.run_id, args.profiles, args.wide, agree)
    return 0
