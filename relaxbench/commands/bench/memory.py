"""``relaxbench bench memory``: peak RSS of a ``relaxbench compare`` run on the offline pair, in a child process."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_dtype_args, add_threads_arg


def register(bsub: argparse._SubParsersAction) -> None:
    mem = bsub.add_parser("memory", help="peak RSS of a relaxbench compare run on the offline pair")
    mem.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    mem.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    mem.add_argument("--methods", default="exact,fly,judge,margin-greedy,typical-greedy")
    mem.add_argument("--tasks", default="humaneval-completion")
    mem.add_argument("--limit", type=int, default=1)
    mem.add_argument("--max-new-tokens", type=int, default=32)
    add_dtype_args(mem, help="target dtype passed to compare (default: the CPU default)",
                   draft_help="draft dtype passed to compare")
    mem.add_argument("--out", default=None, help="run folder (default: a temporary one, removed afterwards)")
    add_threads_arg(mem)
    mem.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from relaxbench.benchmarks.memory import MEMORY_TARGET_GIB, compare_command, peak_rss_of
    from relaxbench.ui import console

    out_dir = args.out or tempfile.mkdtemp(prefix="relaxbench-memory-")
    command_args = ["--target", args.target, "--draft", args.draft, "--methods", args.methods, "--tasks", args.tasks,
                    "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens), "--out", out_dir,
                    "--report-format", "html", "--dtype", args.dtype, "--draft-dtype", args.draft_dtype]
    if args.threads is not None:
        command_args += ["--threads", str(args.threads)]
    err = console(stderr=True)
    try:
        with err.status("running relaxbench compare in a child process"):
            run = peak_rss_of(compare_command(command_args))
    finally:
        if args.out is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    console().print(f"peak RSS of `relaxbench compare {' '.join(command_args)}`: {run.peak_rss_gib:.2f} GiB "
                    f"(target < {MEMORY_TARGET_GIB:g} GiB), exit code {run.exit_code}, {run.wall_s:.0f} s — "
                    f"{'holds' if run.holds else 'MISSED'}", highlight=False)
    return 0 if run.holds else 1
