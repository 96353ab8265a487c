"""``relaxbench bench rules``: each rule's decision time per round, as a share of a measured round."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_device_arg, add_dtype_args, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict
from relaxbench.commands.bench.verify import check_fits_memory


def register(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("rules", help="rule decision time per round, as a share of a measured round")
    bsub.choices["policies"] = p  # its earlier name, still accepted (not shown: commands/bench/__init__.py HIDDEN)
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct",
                   help="model whose verify forward is the round a decision is held to")
    add_dtype_args(p, draft=False, help="the target's dtype (default: the device's default)")
    p.add_argument("--context", type=int, default=300, help="cache length of the measured round (tokens)")
    p.add_argument("--repeats", type=int, default=5, help="verify forwards timed for the round (median)")
    p.add_argument("--vocab", type=int, default=151_936, help="vocabulary size V (default: Qwen2.5's 151,936)")
    p.add_argument("-k", "--k", type=int, default=15, help="draft tokens per round (default: FLy's 15)")
    p.add_argument("--rounds", type=int, default=200, help="timed rounds per greedy-mode rule")
    p.add_argument("--sampling-rounds", type=int, default=50, help="timed rounds per sampling-mode rule")
    p.add_argument("--rule", action="append", default=None, help="time only this rule (repeatable)")
    p.add_argument("--policy", action="append", dest="rule", help=argparse.SUPPRESS)  # its earlier name
    p.add_argument("--mode", choices=("greedy", "sampling", "both"), default="both")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling-mode rows: temperature (default 0.7)")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="sampling-mode rows: top-p (default 1; below 1 every rule pays a full sort of p and q)")
    add_device_arg(p, default="cpu", help="cpu (default), cuda, ...: the rules and the round run there")
    add_threads_arg(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import torch

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
    for name in args.rule or ():
        POLICIES.get(name)  # an unknown name is a one-line error with a suggestion
    check_fits_memory(1, args.k, args.vocab, device, "bench rules")  # one request's step, before any allocation
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
    with err.status(f"timing rules at V={args.vocab:,}, k={args.k} on {device}"):
        timings = run_policy_bench(args.vocab, args.k, args.rounds, args.sampling_rounds, device, args.rule, modes,
                                   sampling)
    if not timings:
        raise ConfigError(f"none of the chosen rules supports {' or '.join(modes)} decoding")
    baselines = baseline_medians(timings)
    target_label = f"≤ {100 * ROUND_SHARE_TARGET:g} % of the round"
    rows = []
    for t in timings:
        base = baselines.get(t.mode)
        rows.append((text(t.policy), text(t.mode), figure(str(t.rounds)), figure(f"{t.median_ms:.3f}"),
                     figure(f"{t.p90_ms:.3f}"),
                     figure("-" if t.all_match_median_ms is None else f"{t.all_match_median_ms:.3f}"),
                     figure("-" if base is None else f"{t.median_ms - base:+.3f}"), figure(f"{round_ms:.2f}"),
                     figure(f"{100 * t.share_of(round_ms):.2f} %"), figure(target_label),
                     verdict(t.holds(round_ms))))
    print_table(table(
        "bench-rules", f"rule decision time per round: V={args.vocab:,}, k={args.k}, {device}, "
                       f"{torch.get_num_threads()} thread(s); round = verify forward of {args.k + 1} tokens of "
                       f"{target_desc} on a {args.context}-token cache; sampling rows at T={args.temperature}, "
                       f"top-p={args.top_p}",
        ("rule", "mode", "rounds", "decision ms", "p90 ms", "all-match ms", "vs lossless ms", "round ms", "share",
         "target", "holds"), rows))
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
