"""``relaxbench bench efficiency``: the loop efficiency of exact and fly (decode-rate ratio over our AR arm / the
ratio a profile of this machine predicts)."""

from __future__ import annotations

import argparse

from relaxbench.commands.args import add_runtime_args, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict


def register(bsub: argparse._SubParsersAction) -> None:
    eff = bsub.add_parser("efficiency", help="loop efficiency: decode-rate ratio over the AR arm / the ratio a profile "
                                             "predicts, for exact and fly")
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
    add_runtime_args(eff)
    eff.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from relaxbench.analysis.metrics import metric_definition
    from relaxbench.benchmarks.efficiency import EFFICIENCY_TARGET, bench_efficiency
    from relaxbench.decoders import load_pair
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
    lines = []
    for row in rows:
        a = row.arm
        mal = a.counters.mean_acceptance_length
        lines.append((text(a.method), figure(str(a.k)), figure("-" if mal is None else f"{mal:.2f}"),
                      figure(f"{row.measured:.3f}×"), figure(f"{row.modelled:.3f}×"),
                      figure(" ".join(f"{u.efficiency:.2f}" for u in row.units)), figure(f"{row.efficiency:.3f}"),
                      figure("-" if row.target is None else f"≥ {row.target:.2f}"), verdict(row.holds),
                      figure(f"{a.t_draft:.1f} / {a.t_verify:.1f} / {a.t_policy:.2f}")))
    names = ("decode-rate ratio", "modelled decode-rate ratio", "loop efficiency")
    print_table(table(
        "bench-efficiency", "loop efficiency = decode-rate ratio / modelled decode-rate ratio (vs our AR arm; "
                            "medians over prompt × repeat)",
        ("method", "k", "MAL", *names[:2], "loop efficiency per prompt × repeat", "loop efficiency", "target",
         "holds", "draft / verify / policy decision s"), lines,
        " ".join(f"{name[0].upper()}{name[1:]} = {metric_definition(name)}." for name in names)))
    for row in rows:
        profile = row.arm.profile
        if profile is not None:
            ctx = profile.target.forward.context[0]
            draft = "" if profile.draft is None else (f", draft step {profile.draft.forward.at(1, ctx) * 1e3:.0f} ms "
                                                      "(1 token)")
            out.print(f"{row.arm.method}: last profile, at a {ctx}-token cache: target step "
                      f"{profile.target.forward.at(1, ctx) * 1e3:.0f} ms, verify of {row.arm.k + 1} tokens "
                      f"{profile.target.forward.at(row.arm.k + 1, ctx) * 1e3:.0f} ms{draft}", highlight=False)
    out.print(f"AR arm: {ar.counters.emitted} tokens in {sum(ar.decode_s):.1f} s of decoding; target: loop efficiency "
              f"≥ {EFFICIENCY_TARGET} for {', '.join(sorted(checked))}", highlight=False)
    return 0 if all(row.holds is not False for row in rows) else 1
