"""``relaxbench profile``: write a cost profile — measured on this machine's device, or an analytic roofline of a
shipped device spec — for a target (and draft) model, at one or more batch sizes (``--batch``: requests per step);
``--list`` shows the shipped device specs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaxbench.commands.args import add_runtime_args

if TYPE_CHECKING:
    from relaxbench.models.shape import ModelShape
    from relaxbench.profiles.measure import Grid
    from relaxbench.profiles.spec import Profile

DEFAULT_NEW_TOKENS = "1,2,4,8,16,32"
DEFAULT_CONTEXT = "64,128,256,512,1024"
DEFAULT_PREFILL = "16,64,256,1024"
DEFAULT_DRAFT_NEW_TOKENS = "1,2,4,8"
DEFAULT_BATCH = "1"
SHOWN_NEW_TOKENS = (1, 2, 4, 8, 16, 32)  # the step sizes the printed summary shows (those the table holds)
SHOWN_CONTEXT = 512  # the cache length the printed summary shows (or the profile's nearest below, else its first)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="write a cost profile: measured on this device, or an analytic roofline of "
                                       "a device (--analytic); --list shows the devices")
    p.add_argument("--list", action="store_true", help="list the shipped device specs and exit")
    p.add_argument("--analytic", metavar="DEVICE", default=None,
                   help="write the roofline profile of a shipped device (see --list) instead of measuring")
    p.add_argument("--target", default=None, help="target model (default with --run: the run's)")
    p.add_argument("--draft", default=None, help="draft model (default with --run: the run's, if it used one)")
    p.add_argument("--out", default=None, metavar="FILE", help="the profile file to write (.yaml)")
    p.add_argument("--name", default=None, help="the profile's name, as tables label it (default: the file's stem)")
    p.add_argument("--run", default=None, metavar="RUN_DIR",
                   help="size the grid for a stored run: new tokens up to its largest verify block, contexts up to "
                        "its longest, prefill up to its longest prompt")
    p.add_argument("--new-tokens", default=None, help=f"target forward sizes (default {DEFAULT_NEW_TOKENS})")
    p.add_argument("--draft-new-tokens", default=None,
                   help=f"draft forward sizes (default {DEFAULT_DRAFT_NEW_TOKENS})")
    p.add_argument("--context", default=None, help=f"KV-cache lengths (default {DEFAULT_CONTEXT})")
    p.add_argument("--prefill", default=None, help=f"prompt lengths (default {DEFAULT_PREFILL})")
    p.add_argument("--batch", default=None, metavar="B[,B...]",
                   help="batch sizes: requests per step, each priced as a step of B requests (default "
                        f"{DEFAULT_BATCH}; with --run: the concurrencies the run was decoded at)")
    p.add_argument("--repeats", type=int, default=3, help="timed forwards per grid point; the median is kept")
    p.add_argument("--warmup", type=int, default=1, help="untimed forwards per grid point first")
    p.add_argument("--tp", type=int, default=1, help="--analytic: tensor-parallel degree (default 1)")
    p.add_argument("--head", action="append", default=[], metavar="KIND=HEAD",
                   help="--analytic: also price a draft head, eagle3=PATH_OR_HUB_ID or mtp=trained (repeatable), "
                        "named as arms name it (eagle3(head=...)); with --run the run's heads are priced too")
    add_runtime_args(p)
    p.set_defaults(handler=run)


def increasing_ints(text: str, flag: str, unit: str) -> tuple[int, ...]:
    """A comma-separated flag of distinct, increasing integers >= 1, or a one-line ``ConfigError``."""
    from relaxbench.errors import ConfigError

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--{flag}: give comma-separated {unit}, got {text!r}") from None
    if not values or list(values) != sorted(set(values)) or values[0] < 1:
        raise ConfigError(f"--{flag}: {unit} must be >= 1, distinct and increasing, got {text!r}")
    return values


def sizes(text: str, what: str) -> tuple[int, ...]:
    return increasing_ints(text, what, "token counts")


def batch_sizes(text: str) -> tuple[int, ...]:
    """``--batch``: batch sizes (requests per step)."""
    return increasing_ints(text, "batch", "batch sizes (requests per step)")


COMMON_SHARE = 0.05  # a forward size at least this share of a run's rounds gets its own grid point


def run_grid_limits(run_dir: str) -> dict[str, Any]:
    """The forward sizes and contexts a stored run recorded (the largest, and the common ones), and its models."""
    from collections import Counter

    from relaxbench.analysis import load_run
    from relaxbench.analysis.proxy import run_batch_sizes

    run = load_run(run_dir)
    samples = [s for c in run.cells for s in c.samples if s.rounds.emitted]
    verify, draft = Counter(), Counter()
    context, prompt = 1, 2
    for s in samples:
        extra = s.rounds.extra or (0,) * len(s.rounds.drafted)
        verify.update(d + 1 + e for d, e in zip(s.rounds.drafted, extra))
        draft.update(n for forwards in (s.rounds.draft_forwards or ()) for n in forwards)
        context = max(context, s.n_prompt_tokens - 1 + s.n_output_tokens)
        prompt = max(prompt, s.n_prompt_tokens)

    def common(counts: Counter) -> tuple[int, ...]:
        total = sum(counts.values())
        return tuple(sorted(n for n, c in counts.items() if total and c / total >= COMMON_SHARE))

    return {"target": run.target, "draft": run.draft, "verify": max(verify, default=1),
            "verify_common": common(verify), "context": context, "prefill": prompt - 1,
            "draft_forward": max(draft, default=1), "draft_common": common(draft), "batch": run_batch_sizes(run)}


def grid_from_args(args: argparse.Namespace, limits: dict[str, Any] | None) -> Grid:
    """The measurement grid: the flags, else sized for ``--run`` (powers of two up to the run's largest forward,
    context and prompt, plus the sizes common in its rounds), else the defaults."""
    from relaxbench.profiles.measure import Grid, power_grid

    if limits is not None:
        derived = {"new_tokens": tuple(sorted({*power_grid(limits["verify"]), *limits["verify_common"]})),
                   "draft_new_tokens": tuple(sorted({*power_grid(limits["draft_forward"]),
                                                     *limits["draft_common"]})),
                   "context": power_grid(limits["context"], start=64) if limits["context"] > 64 else
                   (limits["context"],),
                   "prefill": power_grid(limits["prefill"], start=16) if limits["prefill"] > 16 else
                   (max(1, limits["prefill"]),)}
    else:
        derived = {"new_tokens": sizes(DEFAULT_NEW_TOKENS, "new-tokens"),
                   "draft_new_tokens": sizes(DEFAULT_DRAFT_NEW_TOKENS, "draft-new-tokens"),
                   "context": sizes(DEFAULT_CONTEXT, "context"), "prefill": sizes(DEFAULT_PREFILL, "prefill")}
    for key in derived:
        given = getattr(args, key)
        if given is not None:
            derived[key] = sizes(given, key.replace("_", "-"))
    return Grid(new_tokens=derived["new_tokens"], context=derived["context"], prefill=derived["prefill"],
                draft_new_tokens=derived["draft_new_tokens"], lookup_context=derived["context"],
                batch=batch_from_args(args, limits))


def batch_from_args(args: argparse.Namespace, limits: dict[str, Any] | None) -> tuple[int, ...]:
    """The batch sizes to make the profile at: ``--batch``, else the run's (``--run``), else batch 1."""
    if args.batch is not None:
        return batch_sizes(args.batch)
    return tuple(limits["batch"]) if limits is not None else batch_sizes(DEFAULT_BATCH)


def list_devices() -> int:
    from rich.table import Table

    from relaxbench.profiles.devices import device_catalog
    from relaxbench.ui import console

    catalog = device_catalog()
    table = Table(title="shipped device specs (profiles/devices.yaml; every number's source is in the file)")
    for column in ("name", "device", "bandwidth TB/s", "bf16 dense TFLOP/s", "memory GB"):
        table.add_column(column, justify="right" if column[0].isdigit() or "/" in column or "GB" in column else "left")
    for name, device in catalog.devices.items():
        table.add_row(name, device.name, f"{device.memory_bandwidth_tb_s:g}", f"{device.bf16_dense_tflops:g}",
                      f"{device.memory_gb:g}")
    out = console()
    out.print(table)
    stack = catalog.defaults
    out.print(f"serving stack (all devices): {stack.achieved_bandwidth:.0%} of peak bandwidth, "
              f"{stack.achieved_flops:.0%} of dense peak FLOP/s, {stack.overhead_per_forward_s * 1e3:g} ms per "
              "forward", highlight=False)
    return 0


def run(args: argparse.Namespace) -> int:
    from relaxbench.errors import ConfigError

    if args.list:
        return list_devices()
    if args.out is None:
        raise ConfigError("profile needs --out FILE (the profile to write, .yaml)")
    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--out {out}: a profile file ends in .yaml")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {out}: the folder {out.parent} does not exist")
    if args.head and args.analytic is None:
        raise ConfigError("--head prices a draft head in an analytic profile: give --analytic DEVICE too (a measured "
                          "profile measures no head)")
    if args.batch is not None:
        batch_sizes(args.batch)  # a malformed --batch fails before a run is read or a model resolved
    limits = run_grid_limits(args.run) if args.run else None
    target = args.target or (limits or {}).get("target")
    draft = args.draft or (limits or {}).get("draft")
    if target is None:
        raise ConfigError("profile needs --target (or --run RUN_DIR to take the run's models)")
    name = args.name or out.stem
    if args.analytic is not None:
        return write_analytic(args, target, draft, name, out, batch_from_args(args, limits))
    return write_measured(args, target, draft, name, out, grid_from_args(args, limits))


def print_written(profile: Profile, out: Path) -> None:
    """What was written: the profile, its batch sizes and grid, and a table of the target's step time per batch
    size and step size (where a step turns compute-bound, verifying more tokens stops being free)."""
    from relaxbench.commands.bench.output import figure, print_table, table, text
    from relaxbench.profiles.spec import batch_text
    from relaxbench.ui import console

    first = profile.target.forward
    shown = [n for n in SHOWN_NEW_TOKENS if n in first.new_tokens] or list(first.new_tokens[:len(SHOWN_NEW_TOKENS)])
    context = max((c for c in first.context if c <= SHOWN_CONTEXT), default=first.context[0])
    console().print(f"profile {profile.name} ({profile.device}) → {out}: {batch_text(profile.batch_sizes)}; "
                    f"{len(first.context)} contexts × {len(first.new_tokens)} target sizes", highlight=False)
    rows = [(text(str(t.batch)), *(figure(f"{t.at(n, context) * 1e3:.3f}") for n in shown),
             figure(f"{t.at(shown[-1], context) / t.at(shown[0], context):.2f}"))
            for t in profile.target.forward_tables]
    columns = ("batch B", *(f"n={n}" for n in shown), f"n={shown[-1]} / n={shown[0]}")
    print_table(table("profile-steps", f"{profile.target.model}: ms per step of B requests × n new tokens, at a "
                      f"{context}-token cache", columns, rows))


def write_analytic(args: argparse.Namespace, target: str, draft: str | None, name: str, out: Path,
                   batch: tuple[int, ...]) -> int:
    from relaxbench.models import model_shape
    from relaxbench.profiles.analytic import analytic_profile
    from relaxbench.profiles.devices import device_catalog
    from relaxbench.profiles.resolve import run_draft_model
    from relaxbench.profiles.spec import write_profile

    device_catalog().get(args.analytic)  # an unknown device fails before any model is resolved
    heads = head_shapes(args.head, target, args.run)
    draft_model = run_draft_model(draft)
    dtype = "bfloat16" if args.dtype == "auto" else args.dtype
    profile = analytic_profile(args.analytic, target, model_shape(target), draft_model,
                               model_shape(draft_model) if draft_model else None, dtype=dtype, tp=args.tp, name=name,
                               batch_sizes=batch, heads=heads)
    write_profile(profile, out)
    print_written(profile, out)
    return 0


def head_shapes(given: list[str], target: str, run_dir: str | None) -> dict[str, ModelShape]:
    """The draft heads an analytic profile prices: the stored run's (``--run``), then each ``--head KIND=HEAD``,
    by the label arms name them with."""
    from relaxbench.analysis import load_run
    from relaxbench.analysis.proxy import head_shape, run_head_shapes
    from relaxbench.decoding.drafters import DRAFTERS
    from relaxbench.errors import ConfigError
    from relaxbench.methods import DrafterSpec
    from relaxbench.profiles.proxy import uses_head

    shapes = run_head_shapes(load_run(run_dir)) if run_dir else {}
    heads = [name for name in DRAFTERS.names() if uses_head(name)]
    for item in given:
        kind, _, head = item.partition("=")
        if kind not in heads or not head:
            raise ConfigError(f"--head {item}: give KIND=HEAD with KIND one of {', '.join(heads)} (e.g. "
                              "eagle3=PATH_OR_HUB_ID, mtp=trained)")
        label = DrafterSpec(kind=kind, knobs={"head": head}).label
        shapes[label] = head_shape(kind, {"head": head}, target)
    return shapes


def write_measured(args: argparse.Namespace, target: str, draft: str | None, name: str, out: Path,
                   grid: Grid) -> int:
    from relaxbench.commands.args import runtime_from_args
    from relaxbench.decoders import load_pair
    from relaxbench.profiles.measure import measure_profile
    from relaxbench.profiles.spec import write_profile
    from relaxbench.ui import progress_bars

    device = runtime_from_args(args)
    target_model, draft_model = load_pair(target, draft, device, args.dtype, args.draft_dtype, quiet=False)
    with progress_bars(transient=False) as progress:
        bar = progress.add_task(f"profiling {target}" + (f" + {draft}" if draft_model else ""),
                                total=grid.steps(draft_model is not None))
        profile = measure_profile(target_model, draft_model, grid, repeats=args.repeats, warmup=args.warmup,
                                  name=name, advance=lambda what: progress.update(bar, advance=1, description=what))
    write_profile(profile, out)
    print_written(profile, out)
    return 0
