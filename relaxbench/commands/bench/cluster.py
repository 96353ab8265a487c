"""``relaxbench bench cluster``: a compare suite in-process vs on Ray workers (wall times, Ray's start-up, the same
outputs)."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_threads_arg
from relaxbench.commands.bench.output import figure, print_table, table, text


def register(bsub: argparse._SubParsersAction) -> None:
    cl = bsub.add_parser("cluster", help="a compare suite in-process vs on Ray workers: wall times, Ray's start-up, "
                                         "the same outputs (needs relaxbench[ray])")
    cl.add_argument("--suite", default="default", help="the suite both runs use (default: default, `make bench`)")
    cl.add_argument("--workers", type=int, default=2, help="Ray workers of the local cluster (default 2)")
    cl.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs (= torch threads) per worker")
    add_threads_arg(cl, help="torch threads of the in-process run (default: workers × CPUs per worker, the same "
                             "cores)")
    cl.add_argument("--task-limit", action="append", metavar="TASK=N", default=[], help="passed to compare")
    cl.add_argument("--limit", type=int, default=None, help="passed to compare")
    cl.add_argument("--max-new-tokens", type=int, default=None, help="passed to compare")
    cl.add_argument("--methods", default=None, help="passed to compare")
    cl.add_argument("--out", default=None, help="folder for the two runs' stores (default: a temporary one)")
    cl.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import math
    import shutil
    import tempfile
    from pathlib import Path

    from relaxbench.benchmarks.cluster import sample_results, timed_compare
    from relaxbench.harness.executor import EXECUTORS
    from relaxbench.ui import console

    EXECUTORS.get("ray")  # without Ray: one line, before anything runs
    from relaxbench.integrations.ray_executor import fixed_cost

    compare_args = ["--suite", args.suite]
    for flag, value in (("--limit", args.limit), ("--max-new-tokens", args.max_new_tokens),
                        ("--methods", args.methods)):
        if value is not None:
            compare_args += [flag, str(value)]
    for assignment in args.task_limit:
        compare_args += ["--task-limit", assignment]
    threads = args.threads or max(1, math.floor(args.workers * args.cpus_per_worker))
    ray_args = ["--executor", "ray", "--workers", str(args.workers), "--cpus-per-worker", f"{args.cpus_per_worker:g}"]
    out, err = console(), console(stderr=True)
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="relaxbench-cluster-"))
    try:
        with err.status("Ray's own start-up: a local cluster and bare actors"):
            bare = fixed_cost(args.workers, args.cpus_per_worker)
        runs = []
        for name, executor_args in (("in-process", ["--threads", str(threads)]), ("ray", ray_args)):
            with err.status(f"relaxbench compare {' '.join(compare_args + executor_args)}"):
                runs.append(timed_compare(compare_args, root / name, executor_args))
        local, distributed = runs
        same = (local.exit_code == distributed.exit_code == 0
                and sample_results(root / "in-process") == sample_results(root / "ray"))
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)
    rows = []
    for run in runs:
        startup = ("-" if run.startup is None else
                   f"{run.startup.get('cluster_s', 0):.1f} / {run.startup.get('workers_s', 0):.1f}")
        rows.append((text(run.executor), figure(str(run.exit_code)), figure(f"{run.wall_s:.1f}"),
                     figure(str(run.samples)), figure(str(run.sessions)), figure(startup)))
    print_table(table(
        "bench-cluster", f"`relaxbench compare {' '.join(compare_args)}`: in-process ({threads} thread(s)) vs "
                         f"{args.workers} Ray workers × {args.cpus_per_worker:g} CPU (local cluster), wall time from "
                         "process start to exit",
        ("executor", "exit", "wall s", "samples", "sessions", "Ray start-up s (cluster / workers loaded)"), rows))
    out.print(f"Ray's fixed cost without relaxbench: local cluster {bare['cluster']:.1f} s, {args.workers} bare actors "
              f"ready {bare['actors']:.1f} s, shutdown {bare['shutdown']:.1f} s. Ray / in-process wall time: "
              f"{distributed.wall_s / local.wall_s:.2f}×. Same outputs, counters and scores per sample: "
              f"{'yes' if same else 'NO'}", highlight=False)
    for run in runs:
        if run.exit_code != 0:
            err.print(f"{run.executor} run failed: {run.stderr_tail}", markup=False, highlight=False)
    return 0 if same else 1
