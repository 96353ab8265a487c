"""``relaxbench bench proxy``: the analytic roofline against published batch-size-1 latencies; then a profile
measured here against a compare run's measured AR time and speed-ups (±15 %)."""

from __future__ import annotations

import argparse
from pathlib import Path

from relaxbench.commands.args import add_dtype_args, add_threads_arg
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict


def register(bsub: argparse._SubParsersAction) -> None:
    x = bsub.add_parser("proxy", help="a profile measured here predicts a compare run's measured speed-ups (±15 %%); "
                                      "the analytic roofline against published bs=1 latencies")
    x.add_argument("--published-only", action="store_true", help="only the analytic check against published figures")
    x.add_argument("--run", default=None, metavar="RUN_DIR", help="check this stored compare run (default: run one)")
    x.add_argument("--profile", default=None, metavar="FILE",
                   help="check this profile file (default: measure one with `relaxbench profile --run`)")
    x.add_argument("--out", default=None, metavar="DIR", help="where the run and the profile go (default: a temporary "
                                                             "folder, removed afterwards)")
    x.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    x.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    x.add_argument("--methods", default="exact,fly", help="methods of the compare run (each held to the tolerance)")
    x.add_argument("--tasks", default="humaneval-completion")
    x.add_argument("--limit", type=int, default=2)
    x.add_argument("--max-new-tokens", type=int, default=64)
    x.add_argument("--repeats", type=int, default=1)
    x.add_argument("--profile-repeats", type=int, default=3, help="timed forwards per grid point of the profile")
    add_dtype_args(x)
    add_threads_arg(x)
    x.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Published figures vs the analytic roofline; then a compare run and a profile measured by ``relaxbench
    profile`` on this machine (each in its own process, as a user runs them), and the proxy against the run."""
    import shutil
    import sys
    import tempfile

    from relaxbench.errors import ConfigError
    from relaxbench.profiles.published import compare_published
    from relaxbench.ui import console

    out, err = console(), console(stderr=True)
    published = compare_published()
    print_table(table(
        "bench-published", "analytic roofline vs published batch-size-1 decode latency (1-token forward)",
        ("model, hardware", "published ms", "analytic ms", "analytic / published", "within", "holds"),
        [(text(c.entry.name), figure(f"{c.entry.published_ms:.2f}"), figure(f"{c.analytic_ms:.2f}"),
          figure(f"{c.ratio:.2f}"), figure(f"{1 / c.factor:.2f}–{c.factor:.2f}"), verdict(c.holds, "not checked"))
         for c in published]))
    for c in published:
        if c.holds is None:
            out.print(f"{c.entry.name}: not checked — {c.entry.why_unchecked}", highlight=False)
    ok = all(c.holds is not False for c in published)
    if args.published_only:
        return 0 if ok else 1
    if args.run is None and args.limit < 1:
        raise ConfigError("--limit must be >= 1")
    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="relaxbench-proxy-"))
    runtime = [*(["--threads", str(args.threads)] if args.threads else [])]
    try:
        run_dir = Path(args.run) if args.run else folder / "run"
        if args.run is None:
            command = [sys.executable, "-m", "relaxbench", "compare", "--target", args.target, "--draft", args.draft,
                       "--methods", args.methods, "--tasks", args.tasks, "--limit", str(args.limit),
                       "--max-new-tokens", str(args.max_new_tokens), "--repeats", str(args.repeats),
                       "--dtype", args.dtype, "--draft-dtype", args.draft_dtype, "--out", str(run_dir),
                       "--report-format", "none", *runtime]
            with err.status("running relaxbench compare in a child process"):
                run_child(command, "compare")
        profile_path = Path(args.profile) if args.profile else folder / "profile.yaml"
        if args.profile is None:
            command = [sys.executable, "-m", "relaxbench", "profile", "--run", str(run_dir), "--out",
                       str(profile_path), "--name", "measured", "--repeats", str(args.profile_repeats),
                       "--dtype", args.dtype, "--draft-dtype", args.draft_dtype, *runtime]
            with err.status("measuring a profile with relaxbench profile in a child process"):
                run_child(command, "profile")
        rows_ok = print_proxy_rows(run_dir, profile_path, args.methods)
    finally:
        if args.out is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok and rows_ok else 1


def run_child(command: list[str], what: str) -> None:
    import subprocess

    from relaxbench.errors import RelaxbenchError

    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RelaxbenchError(f"bench proxy: {what} failed (exit {done.returncode}): {tail}")


def print_proxy_rows(run_dir: Path, profile_path: Path, methods: str) -> bool:
    """The stored run's measured AR time and speed-ups against the profile's proxy; whether every checked row holds."""
    from relaxbench.analysis import load_run
    from relaxbench.benchmarks.proxy import TOLERANCE, proxy_rows
    from relaxbench.profiles import load_profile
    from relaxbench.profiles.resolve import run_draft_model
    from relaxbench.profiles.spec import check_models

    run = load_run(run_dir)
    profile = load_profile(profile_path)
    check_models(profile, run.target, run_draft_model(run.draft), str(profile_path))
    checked = frozenset(m.strip() for m in methods.split(",") if m.strip())
    rows = proxy_rows(run, profile, checked)
    lines = []
    for row in rows:
        unit = " s" if row.arm == "ar" else "×"
        lines.append((text(row.task), text(row.arm + (" (time)" if row.arm == "ar" else " (speed-up)")),
                      figure(f"{row.measured:.3f}{unit}"), figure(f"{row.proxy:.3f}{unit}"),
                      figure(f"{row.ratio:.3f}"), figure(f"1 ± {TOLERANCE:g}" if row.checked else "-"),
                      verdict(row.holds)))
    print_table(table("bench-proxy", f"proxy on profile {profile.name} ({profile.device}) vs measured, run {run_dir}",
                      ("task", "arm", "measured", "proxy", "proxy / measured", "target", "holds"), lines))
    return bool(rows) and all(row.holds is not False for row in rows)
