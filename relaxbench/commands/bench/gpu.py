"""``relaxbench bench gpu``: the GPU validation kit (``relaxbench.benchmarks.gpu``, docs/gpu-kit.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from relaxbench.commands.args import add_device_arg, add_threads_arg
from relaxbench.commands.bench.output import print_table, table, text


def register(bsub: argparse._SubParsersAction) -> None:
    g = bsub.add_parser("gpu", help="the GPU validation kit: losslessness under CUDA, the clock and placement, the "
                                    "cost-profile proxy against the device (docs/gpu-kit.md)")
    g.add_argument("--out", default=None, metavar="DIR", help="folder for the JSON results (required unless --plan)")
    add_device_arg(g, default="cuda", help="cuda (default) or cpu: the CPU dry run on shrunk shapes")
    g.add_argument("--plan", action="store_true", help="print what would run and how long each step should take")
    g.add_argument("--steps", default=None, help="comma-separated subset of the steps (default: all; see --plan)")
    g.add_argument("--models", default=None, help="comma-separated shipped shapes for the profile step "
                                                  "(profiles/shapes/*.json; default: all)")
    g.add_argument("--budget-s", type=float, default=None,
                   help="time budget in seconds (default 480): a step that would overrun it is skipped")
    add_threads_arg(g)
    g.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Every step's checks in one table, printed last; exit 1 on a MISS."""
    from relaxbench.benchmarks.gpu.check import all_checks, run_kit
    from relaxbench.benchmarks.gpu.plan import kit_config, plan_lines
    from relaxbench.benchmarks.gpu.results import MISS, PASS
    from relaxbench.commands.args import runtime_from_args
    from relaxbench.errors import ConfigError
    from relaxbench.report.tables import Cell
    from relaxbench.ui import console

    if not (args.device == "cpu" or args.device.startswith("cuda")):
        raise ConfigError(f"--device {args.device!r}: the kit runs on cuda (the check) or cpu (the dry run)")
    config = kit_config(args.device, args.steps, args.models, args.budget_s)
    out = console()
    if args.plan:
        for line in plan_lines(config):
            out.print(line, highlight=False, markup=False, soft_wrap=True)
        return 0
    if args.out is None:
        raise ConfigError("bench gpu needs --out DIR (or --plan)")
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder}: not a folder")
    runtime_from_args(args)  # --device cuda without a GPU: one line, before anything runs
    for line in plan_lines(config):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    results = run_kit(config, folder, echo=lambda message: out.print(message, highlight=False, markup=False))
    checks = all_checks(results)
    title = f"relaxbench GPU kit on {config.device}" + (
        " (CPU dry run: shrunk shapes; GPU-only targets not held)" if config.dry else "")
    rows = [(text(c.step), text(c.name), text(c.value), text(c.target),
             Cell(c.verdict, alert=c.verdict == MISS)) for c in checks]
    print_table(table("gpu-kit", title, ("step", "check", "value", "target", "verdict"), rows))
    missed = [c for c in checks if c.verdict == MISS]
    out.print(f"{sum(c.verdict == PASS for c in checks)} PASS, {len(missed)} MISS, "
              f"{sum(c.verdict not in (PASS, MISS) for c in checks)} without a held target; "
              f"{sum(r.seconds for r in results):.0f} s of steps; results in {folder}/", highlight=False)
    return 1 if missed else 0
