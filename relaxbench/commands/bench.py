"""``relaxbench bench ...``: benchmarks that print figures and exit non-zero when a target is missed."""

from __future__ import annotations

import argparse
from pathlib import Path

from relaxbench.commands.args import OneLineParser, runtime_from_args


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks: engine vs transformers, forward costs, policy overhead, proxy, Ray cluster")
    bsub = b.add_subparsers(dest="bench_command", required=True, parser_class=OneLineParser)

    e = bsub.add_parser("engine", help="our AR / exact arms vs transformers' generate, side by side")
    e.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    e.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    e.add_argument("--lookup-target", default="smollm2-135m-instruct",
                   help="model for the prompt-lookup comparison ('' to skip)")
    e.add_argument("-k", "--k", type=int, default=5)
    e.add_argument("--lookup-tokens", type=int, default=10)
    e.add_argument("--lookup-ngram", type=int, default=2)
    e.add_argument("--max-new-tokens", type=int, default=128)
    e.add_argument("--prompts", type=int, default=3, help="number of code prompts (max 3)")
    e.add_argument("--repeats", type=int, default=3)
    e.add_argument("--dtype", default="auto")
    e.add_argument("--draft-dtype", default="auto")
    e.add_argument("--device", default="auto")
    e.add_argument("--threads", type=int, default=None)
    e.set_defaults(handler=run_engine)

    f = bsub.add_parser("forward", help="forward-pass cost per dtype and chunk size (the basis of dtype defaults)")
    f.add_argument("models", nargs="+", metavar="MODEL")
    f.add_argument("--dtypes", default="float32,bfloat16")
    f.add_argument("--chunks", default="1,2,4,8,16")
    f.add_argument("--context", type=int, default=300)
    f.add_argument("--repeats", type=int, default=5)
    f.add_argument("--device", default="auto")
    f.add_argument("--threads", type=int, default=None)
    f.set_defaults(handler=run_forward)

    eff = bsub.add_parser("efficiency", help="measured / modelled speed-up of exact and fly against our AR arm")
    eff.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    eff.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    eff.add_argument("--methods", default="exact,fly,fly-plain",
                     help="comma-separated methods (methods/*.yaml names or YAML paths), each with its own k")
    eff.add_argument("--check", default="exact,fly,fly-plain",
                     help="methods held to the efficiency target (default: all three defaults)")
    eff.add_argument("-k", "--k", type=int, default=None, help="override every method's k")
    eff.add_argument("--max-new-tokens", type=int, default=64)
    eff.add_argument("--prompts", type=int, default=2, help="number of code prompts (max 3)")
    eff.add_argument("--repeats", type=int, default=2)
    eff.add_argument("--dtype", default="auto")
    eff.add_argument("--draft-dtype", default="auto")
    eff.add_argument("--device", default="auto")
    eff.add_argument("--threads", type=int, default=None)
    eff.set_defaults(handler=run_efficiency)

    mem = bsub.add_parser("memory", help="peak RSS of a relaxbench compare run on the offline pair")
    mem.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    mem.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    mem.add_argument("--methods", default="exact,fly,judge,margin-greedy,typical-greedy")
    mem.add_argument("--tasks", default="humaneval-completion")
    mem.add_argument("--limit", type=int, default=1)
    mem.add_argument("--max-new-tokens", type=int, default=32)
    mem.add_argument("--dtype", default="auto", help="target dtype passed to compare (default: the CPU default)")
    mem.add_argument("--draft-dtype", default="auto", help="draft dtype passed to compare")
    mem.add_argument("--out", default=None, help="run folder (default: a temporary one, removed afterwards)")
    mem.add_argument("--threads", type=int, default=None)
    mem.set_defaults(handler=run_memory)

    cl = bsub.add_parser("cluster", help="a compare suite in-process vs on Ray workers: wall times, Ray's start-up, "
                                         "the same outputs (needs relaxbench[ray])")
    cl.add_argument("--suite", default="default", help="the suite both runs use (default: default, `make bench`)")
    cl.add_argument("--workers", type=int, default=2, help="Ray workers of the local cluster (default 2)")
    cl.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs (= torch threads) per worker")
    cl.add_argument("--threads", type=int, default=None,
                    help="torch threads of the in-process run (default: workers × CPUs per worker, the same cores)")
    cl.add_argument("--task-limit", action="append", metavar="TASK=N", default=[], help="passed to compare")
    cl.add_argument("--limit", type=int, default=None, help="passed to compare")
    cl.add_argument("--max-new-tokens", type=int, default=None, help="passed to compare")
    cl.add_argument("--methods", default=None, help="passed to compare")
    cl.add_argument("--out", default=None, help="folder for the two runs' stores (default: a temporary one)")
    cl.set_defaults(handler=run_cluster)
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
    x.add_argument("--dtype", default="auto")
    x.add_argument("--draft-dtype", default="auto")
    x.add_argument("--threads", type=int, default=None)
    x.set_defaults(handler=run_proxy)

    p = bsub.add_parser("policies", help="policy decision time per round, as a share of a measured round")
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct",
                   help="model whose verify forward is the round a decision is held to")
    p.add_argument("--dtype", default="auto", help="the target's dtype (default: the device's default)")
    p.add_argument("--context", type=int, default=300, help="cache length of the measured round (tokens)")
    p.add_argument("--repeats", type=int, default=5, help="verify forwards timed for the round (median)")
    p.add_argument("--vocab", type=int, default=151_936, help="vocabulary size V (default: Qwen2.5's 151,936)")
    p.add_argument("-k", "--k", type=int, default=15, help="draft tokens per round (default: FLy's 15)")
    p.add_argument("--rounds", type=int, default=200, help="timed rounds per greedy-mode policy")
    p.add_argument("--sampling-rounds", type=int, default=50, help="timed rounds per sampling-mode policy")
    p.add_argument("--policy", action="append", default=None, help="time only this policy (repeatable)")
    p.add_argument("--mode", choices=("greedy", "sampling", "both"), default="both")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling-mode rows: temperature (default 0.7)")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="sampling-mode rows: top-p (default 1; below 1 every rule pays a full sort of p and q)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, ...: the policies and the round run there")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(handler=run_policies)

    from relaxbench.commands.bench_engines import register_engines

    register_engines(bsub)  # `bench engines` (relaxbench's loop vs vLLM), registered by its own module


def run_engine(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.arms import load_pair
    from relaxbench.benchmarks.engine import bench_draft_model, bench_prompt_lookup
    from relaxbench.models import load_model
    from relaxbench.ui import console

    device = runtime_from_args(args)
    out = console()
    target, draft = load_pair(args.target, args.draft, device, args.dtype, args.draft_dtype, quiet=False)
    out.print(f"target {target.name} ({target.dtype}), draft {draft.name} ({draft.dtype}), "
              f"{args.prompts} prompts × {args.repeats} repeats, {args.max_new_tokens} new tokens")
    rows = bench_draft_model(target, draft, args.k, args.max_new_tokens, args.repeats, args.prompts)
    if args.lookup_target:
        del target, draft
        lookup = load_model(args.lookup_target, dtype=args.dtype, device=device)
        rows += bench_prompt_lookup(lookup, args.lookup_tokens, args.lookup_ngram, args.max_new_tokens,
                                    args.repeats, args.prompts)
    table = Table(title="relaxbench engine vs transformers (tokens/s, median of paired repeats)")
    for col in ("comparison", "ours tok/s", "transformers tok/s", "ratio", "target", "identical", "holds"):
        table.add_column(col, justify="left" if col == "comparison" else "right")
    for row in rows:
        table.add_row(row.label, " ".join(f"{v:.2f}" for v in row.ours_tps), " ".join(f"{v:.2f}" for v in row.ref_tps),
                      f"{row.median_ratio:.3f}", f"≥ {row.target_ratio:.2f}", "yes" if row.identical else "NO",
                      "yes" if row.holds else "NO")
    out.print(table)
    for row in rows:
        if row.notes:
            out.print(f"{row.label}: {row.notes}", highlight=False)
    return 0 if all(row.holds for row in rows) else 1


def run_efficiency(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.arms import load_pair
    from relaxbench.benchmarks.efficiency import EFFICIENCY_TARGET, bench_efficiency
    from relaxbench.errors import ConfigError
    from relaxbench.methods import load_method
    from relaxbench.ui import console

    device = runtime_from_args(args)
    methods = [load_method(name.strip()) for name in args.methods.split(",") if name.strip()]
    if not methods or any(m.policy == "none" for m in methods):
        raise ConfigError("--methods needs at least one speculative method (the AR arm is always run)")
    if not 1 <= args.prompts <= 3 or args.repeats < 1:
        raise ConfigError("need 1 <= --prompts <= 3 and --repeats >= 1")
    out = console()
    target, draft = load_pair(args.target, args.draft, device, args.dtype, args.draft_dtype, quiet=False)
    out.print(f"target {target.name} ({target.dtype}), draft {draft.name} ({draft.dtype}), "
              f"{args.prompts} prompts × {args.repeats} repeats, {args.max_new_tokens} new tokens", highlight=False)
    checked = frozenset(name.strip() for name in args.check.split(","))
    ar, rows = bench_efficiency(target, draft, methods, args.k, args.max_new_tokens, args.repeats, args.prompts,
                                checked)
    table = Table(title="efficiency = measured speed-up / modelled speed-up (decode phase, vs our AR arm; medians "
                        "over prompt × repeat)")
    for col in ("method", "k", "MAL", "measured", "modelled", "efficiency per prompt × repeat", "efficiency",
                "target", "holds", "draft / verify / policy decision s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for row in rows:
        a = row.arm
        mal = a.counters.mean_acceptance_length
        table.add_row(a.method, str(a.k), "-" if mal is None else f"{mal:.2f}", f"{row.measured:.3f}×",
                      f"{row.modelled:.3f}×", " ".join(f"{u.efficiency:.2f}" for u in row.units),
                      f"{row.efficiency:.3f}", "-" if row.target is None else f"≥ {row.target:.2f}",
                      "-" if row.holds is None else ("yes" if row.holds else "[red]NO[/red]"),
                      f"{a.t_draft:.1f} / {a.t_verify:.1f} / {a.t_policy:.2f}")
    out.print(table)
    for row in rows:
        profile = row.arm.profile
        if profile is not None:
            ctx = profile.target.forward.context[0]
            draft = "" if profile.draft is None else (f", draft step {profile.draft.forward.at(1, ctx) * 1e3:.0f} ms "
                                                      "(1 token)")
            out.print(f"{row.arm.method}: last profile, at a {ctx}-token cache: target step "
                      f"{profile.target.forward.at(1, ctx) * 1e3:.0f} ms, verify of {row.arm.k + 1} tokens "
                      f"{profile.target.forward.at(row.arm.k + 1, ctx) * 1e3:.0f} ms{draft}", highlight=False)
    out.print(f"AR arm: {ar.counters.emitted} tokens in {sum(ar.decode_s):.1f} s of decoding; target: efficiency ≥ "
              f"{EFFICIENCY_TARGET} for {', '.join(sorted(checked))}", highlight=False)
    return 0 if all(row.holds is not False for row in rows) else 1


def run_memory(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from relaxbench.benchmarks.memory import MEMORY_TARGET_GIB, compare_command, peak_rss_of
    from relaxbench.ui import console

    out_dir = args.out or tempfile.mkdtemp(prefix="relaxbench-memory-")
    command_args = ["--target", args.target, "--draft", args.draft, "--methods", args.methods, "--tasks", args.tasks, "--limit",
                    str(args.limit), "--max-new-tokens", str(args.max_new_tokens), "--out", out_dir,
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


def run_forward(args: argparse.Namespace) -> int:
    from rich.table import Table

    from relaxbench.benchmarks.forward_cost import measure_forward_costs
    from relaxbench.models import load_model
    from relaxbench.ui import console

    device = runtime_from_args(args)
    chunks = tuple(int(c) for c in args.chunks.split(","))
    table = Table(title=f"forward cost, ms (context {args.context} tokens, median of {args.repeats})")
    table.add_column("model")
    table.add_column("dtype")
    for chunk in chunks:
        table.add_column(f"{chunk} tok", justify="right")
    for name in args.models:
        for dtype in args.dtypes.split(","):
            loaded = load_model(name, dtype=dtype, device=device)
            costs = measure_forward_costs(loaded, chunks, args.context, args.repeats)
            table.add_row(name, dtype, *(f"{c.median_ms:.0f}" for c in costs))
            del loaded
    console().print(table)
    return 0


def run_policies(args: argparse.Namespace) -> int:
    import torch
    from rich.table import Table

    from relaxbench.benchmarks.policies import ROUND_SHARE_TARGET, baseline_medians, run_policy_bench, verify_round_ms
    from relaxbench.errors import ConfigError
    from relaxbench.models import load_model
    from relaxbench.ops.sampling import SamplingParams
    from relaxbench.policies import POLICIES
    from relaxbench.ui import console

    device = runtime_from_args(args)
    if args.vocab < 4 or args.k < 1 or args.rounds < 1 or args.sampling_rounds < 1:
        raise ConfigError("need --vocab >= 4, -k >= 1, --rounds >= 1 and --sampling-rounds >= 1")
    if args.context < 1 or args.repeats < 1:
        raise ConfigError("need --context >= 1 and --repeats >= 1")
    for name in args.policy or ():
        POLICIES.get(name)  # an unknown name is a one-line error with a suggestion
    modes = ("greedy", "sampling") if args.mode == "both" else (args.mode,)
    sampling = SamplingParams(args.temperature, 0, args.top_p)
    if sampling.greedy and "sampling" in modes:
        raise ConfigError("--temperature must be > 0 for the sampling-mode rows")
    out, err = console(), console(stderr=True)
    target = load_model(args.target, dtype=args.dtype, device=device, quiet=True)
    with err.status(f"measuring a round: {target.name} verify forward of {args.k + 1} tokens on a "
                    f"{args.context}-token cache"):
        round_ms = verify_round_ms(target, args.k, args.context, args.repeats)
    target_desc = f"{target.name} ({str(target.dtype).removeprefix('torch.')})"
    del target
    with err.status(f"timing policies at V={args.vocab:,}, k={args.k} on {device}"):
        timings = run_policy_bench(args.vocab, args.k, args.rounds, args.sampling_rounds, device, args.policy, modes,
                                   sampling)
    if not timings:
        raise ConfigError(f"none of the chosen policies supports {' or '.join(modes)} decoding")
    baselines = baseline_medians(timings)
    target_label = f"≤ {100 * ROUND_SHARE_TARGET:g} % of the round"
    table = Table(title=f"policy decision time per round: V={args.vocab:,}, k={args.k}, {device}, "
                        f"{torch.get_num_threads()} thread(s); round = verify forward of {args.k + 1} tokens of "
                        f"{target_desc} on a {args.context}-token cache; sampling rows at T={args.temperature}, "
                        f"top-p={args.top_p}")
    for column in ("policy", "mode", "rounds", "decision ms", "p90 ms", "all-match ms", "vs lossless ms",
                   "round ms", "share", "target", "holds"):
        table.add_column(column, justify="left" if column in ("policy", "mode") else "right")
    for t in timings:
        base = baselines.get(t.mode)
        table.add_row(t.policy, t.mode, str(t.rounds), f"{t.median_ms:.3f}", f"{t.p90_ms:.3f}",
                      "-" if t.all_match_median_ms is None else f"{t.all_match_median_ms:.3f}",
                      "-" if base is None else f"{t.median_ms - base:+.3f}", f"{round_ms:.2f}",
                      f"{100 * t.share_of(round_ms):.2f} %", target_label,
                      "yes" if t.holds(round_ms) else "[red]NO[/red]")
    out.print(table)
    out.print(f"Target: each rule's median decision (policy.verify alone; typical pool: each draft matches with "
              f"probability 0.8) takes {target_label} (median of {args.repeats} verify forwards). 'all-match': every "
              "draft matches (greedy mode). 'vs lossless': median minus that of exact (greedy) or speculative "
              "sampling (sampling). Wall-clock on a shared CPU is rough.", highlight=False)
    missed = [f"{t.policy} ({t.mode})" for t in timings if not t.holds(round_ms)]
    if missed:
        err.print(f"relaxbench: decisions over {100 * ROUND_SHARE_TARGET:g} % of a {round_ms:.1f} ms round: "
                  f"{', '.join(missed)}", highlight=False)
        return 1
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    import math
    import shutil
    import tempfile
    from pathlib import Path

    from rich.table import Table

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
    table = Table(title=f"`relaxbench compare {' '.join(compare_args)}`: in-process ({threads} thread(s)) vs "
                        f"{args.workers} Ray workers × {args.cpus_per_worker:g} CPU (local cluster), wall time from "
                        "process start to exit")
    for column in ("executor", "exit", "wall s", "samples", "sessions", "Ray start-up s (cluster / workers loaded)"):
        table.add_column(column, justify="left" if column == "executor" else "right")
    for run in runs:
        startup = ("-" if run.startup is None else
                   f"{run.startup.get('cluster_s', 0):.1f} / {run.startup.get('workers_s', 0):.1f}")
        table.add_row(run.executor, str(run.exit_code), f"{run.wall_s:.1f}", str(run.samples), str(run.sessions),
                      startup)
    out.print(table)
    out.print(f"Ray's fixed cost without relaxbench: local cluster {bare['cluster']:.1f} s, {args.workers} bare actors "
              f"ready {bare['actors']:.1f} s, shutdown {bare['shutdown']:.1f} s. Ray / in-process wall time: "
              f"{distributed.wall_s / local.wall_s:.2f}×. Same outputs, counters and scores per sample: "
              f"{'yes' if same else 'NO'}", highlight=False)
    for run in runs:
        if run.exit_code != 0:
            err.print(f"{run.executor} run failed: {run.stderr_tail}", markup=False, highlight=False)
    return 0 if same else 1


def run_proxy(args: argparse.Namespace) -> int:
    """Published figures vs the analytic roofline; then a compare run and a profile measured by ``relaxbench
    profile`` on this machine (each in its own process, as a user runs them), and the proxy against the run."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from rich.table import Table

    from relaxbench.errors import ConfigError
    from relaxbench.profiles.published import compare_published
    from relaxbench.ui import console

    out, err = console(), console(stderr=True)
    published = compare_published()
    table = Table(title="analytic roofline vs published batch-size-1 decode latency (1-token forward)")
    for column in ("model, hardware", "published ms", "analytic ms", "analytic / published", "within", "holds"):
        table.add_column(column, justify="left" if column == "model, hardware" else "right")
    for c in published:
        table.add_row(c.entry.name, f"{c.entry.published_ms:.2f}", f"{c.analytic_ms:.2f}", f"{c.ratio:.2f}",
                      f"{1 / c.factor:.2f}–{c.factor:.2f}",
                      "not checked" if c.holds is None else ("yes" if c.holds else "[red]NO[/red]"))
    out.print(table)
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
                _run_child(command, "compare")
        profile_path = Path(args.profile) if args.profile else folder / "profile.yaml"
        if args.profile is None:
            command = [sys.executable, "-m", "relaxbench", "profile", "--run", str(run_dir), "--out",
                       str(profile_path), "--name", "measured", "--repeats", str(args.profile_repeats),
                       "--dtype", args.dtype, "--draft-dtype", args.draft_dtype, *runtime]
            with err.status("measuring a profile with relaxbench profile in a child process"):
                _run_child(command, "profile")
        rows_ok = _print_proxy_rows(run_dir, profile_path, args.methods)
    finally:
        if args.out is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok and rows_ok else 1


def _run_child(command: list[str], what: str) -> None:
    import subprocess

    from relaxbench.errors import RelaxbenchError

    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RelaxbenchError(f"bench proxy: {what} failed (exit {done.returncode}): {tail}")


def _print_proxy_rows(run_dir: Path, profile_path: Path, methods: str) -> bool:
    from rich.table import Table

    from relaxbench.analysis import load_run
    from relaxbench.benchmarks.proxy import TOLERANCE, proxy_rows
    from relaxbench.profiles import load_profile
    from relaxbench.profiles.resolve import run_draft_model
    from relaxbench.profiles.spec import check_models
    from relaxbench.ui import console

    run = load_run(run_dir)
    profile = load_profile(profile_path)
    check_models(profile, run.target, run_draft_model(run.draft), str(profile_path))
    checked = frozenset(m.strip() for m in methods.split(",") if m.strip())
    rows = proxy_rows(run, profile, checked)
    table = Table(title=f"proxy on profile {profile.name} ({profile.device}) vs measured, run {run_dir}")
    for column in ("task", "arm", "measured", "proxy", "proxy / measured", "target", "holds"):
        table.add_column(column, justify="left" if column in ("task", "arm") else "right")
    for row in rows:
        unit = " s" if row.arm == "ar" else "×"
        table.add_row(row.task, row.arm + (" (time)" if row.arm == "ar" else " (speed-up)"),
                      f"{row.measured:.3f}{unit}", f"{row.proxy:.3f}{unit}", f"{row.ratio:.3f}",
                      f"1 ± {TOLERANCE:g}" if row.checked else "-",
                      "-" if row.holds is None else ("yes" if row.holds else "[red]NO[/red]"))
    console().print(table)
    return bool(rows) and all(row.holds is not False for row in rows)
