"""``relaxbench bench verify``: every rule's batched decision — operations, host synchronisations and time per step
at each batch size — beside a bare batched exact-match and the per-request path (``relaxbench.benchmarks.verify``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from relaxbench.benchmarks import allocator as allocators
from relaxbench.commands.args import add_device_arg, add_threads_arg, runtime_from_args
from relaxbench.commands.bench.output import figure, print_table, table, text, verdict

QUICK = {"batch": (1, 4), "k": (4,), "vocab": (64,), "repeats": 1}


def register(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("verify", help="batched verification: ops, host syncs and time per step of every rule at "
                                       "B = 1..256, beside bare exact-match and the per-request path")
    p.add_argument("--rule", action="append", default=None, help="only this rule (repeatable; default: all)")
    p.add_argument("--policy", action="append", dest="rule", help=argparse.SUPPRESS)  # its earlier name
    p.add_argument("--mode", choices=("greedy", "sampling", "both"), default="both")
    p.add_argument("--batch", default=None, help="batch sizes B, comma-separated (default 1,8,64,256)")
    p.add_argument("-k", "--k", default=None, help="draft lengths k, comma-separated (default 4,8)")
    p.add_argument("--vocab", default=None, help="vocabulary sizes V, comma-separated (default 1000,151936)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per cell (median; default 5)")
    p.add_argument("--per-request-batch", default=None,
                   help="batch sizes at which the per-request path is timed, comma-separated (default 64, or the "
                        "largest B when 64 is not run)")
    p.add_argument("--quick", action="store_true",
                   help="a tiny configuration (B = 1,4, k = 4, V = 64, one repeat) for a smoke test; the time "
                        "targets at B = 64 are then not checked")
    add_device_arg(p, default="cpu", help="cpu (default) or cuda; on CUDA use the GPU kit's step `verify` for "
                                          "event timing")
    add_threads_arg(p, help="torch CPU threads (default 1: a decision's host overhead, which extra threads only "
                            "blur on a shared machine)")
    p.add_argument("--allocator", choices=allocators.ALLOCATORS, default=allocators.SYSTEM,
                   help="system (default): the C library's malloc as it is; kept: glibc's malloc keeps the memory it "
                        "frees (as a GPU's caching allocator and vLLM's preloaded tcmalloc do), so a step at a real "
                        "vocabulary times the rule, not the page faults of fresh 32 MiB+ mappings; it never gives "
                        "memory back, so keep --batch to 64 at V = 151,936 on a 24 GiB machine")
    p.add_argument("--top-ops", type=int, default=None, metavar="N",
                   help="after the tables, the N aten operations that take most of each rule's step at the compare "
                        "batch (torch.profiler, run apart from the timing): where a step's time goes")
    p.set_defaults(handler=run, threads=1)


def _ints(raw: str | None, default: Sequence[int], flag: str, least: int) -> tuple[int, ...]:
    from relaxbench.errors import ConfigError

    if raw is None:
        return tuple(default)
    try:
        values = tuple(int(v) for v in raw.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{flag}: comma-separated integers, got {raw!r}") from None
    if not values or any(v < least for v in values):
        raise ConfigError(f"{flag}: integers >= {least}, got {raw!r}")
    return tuple(sorted(set(values)))


def run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    import torch

    from relaxbench.benchmarks import verify as vb
    from relaxbench.errors import ConfigError
    from relaxbench.policies import POLICIES
    from relaxbench.ui import console

    quick = QUICK if args.quick else {}
    batches = _ints(args.batch, quick.get("batch", vb.BATCHES), "--batch", 1)
    ks = _ints(args.k, quick.get("k", vb.DRAFT_LENGTHS), "-k", 1)
    vocabs = _ints(args.vocab, quick.get("vocab", vb.VOCABS), "--vocab", 8)
    per_request = None if args.per_request_batch is None else _ints(args.per_request_batch, (),
                                                                     "--per-request-batch", 1)
    repeats = args.repeats if args.repeats is not None else quick.get("repeats", 5)
    if repeats < 1:
        raise ConfigError("--repeats must be >= 1")
    if args.top_ops is not None and args.top_ops < 1:
        raise ConfigError("--top-ops N: N >= 1 operations per rule")
    for name in args.rule or ():
        POLICIES.get(name)  # an unknown name is a one-line error with a suggestion
    if "none" in (args.rule or ()):
        raise ConfigError("rule 'none' (autoregressive decoding) verifies nothing")
    modes = ("greedy", "sampling") if args.mode == "both" else (args.mode,)
    device = runtime_from_args(args)
    check_fits_memory(max(batches), max(ks), max(vocabs), device)
    out, err = console(), console(stderr=True)
    allocator = allocators.use(args.allocator)
    with tempfile.TemporaryDirectory() as folder:
        policies = vb.bench_policies(args.rule, Path(folder), max(vocabs), device)
    if not vb.decision_modes(policies, modes):
        raise ConfigError(f"none of the chosen rules runs in {' or '.join(modes)} mode")
    with err.status("bench verify") as status:
        bench = vb.run_verify_bench(policies, modes, batches, ks, vocabs, repeats,
                                    per_request_batches=per_request, device=device,
                                    progress=lambda line: status.update(f"bench verify: {line}"))
    misses = vb.misses(bench)
    print_verify(bench, misses, f"{device}, {torch.get_num_threads()} thread(s), {repeats} repeat(s), {allocator}")
    out.print(targets_note(bench), highlight=False)
    if args.top_ops is not None:
        with err.status("bench verify: profiling"):
            shares = vb.profile_verify(policies, modes, bench.compare_batch, ks, vocabs, repeats, args.top_ops,
                                       device)
        print_profile(shares, f"{device}, {torch.get_num_threads()} thread(s), {repeats} step(s) profiled")
    if misses:
        err.print("relaxbench: bench verify missed:\n  " + "\n  ".join(m.line() for m in misses), highlight=False)
        return 1
    return 0


WORKING_COPIES = 3  # tensors of the inputs' size a rule's step makes besides them (both softmaxes, a sort)


def step_bytes(batch: int, k: int, vocab: int) -> tuple[int, int]:
    """The bytes of one bench step's inputs at (B, k, V) — the target's [B, k + 1, V] and the draft's [B, k, V]
    float32 logits — and of the step with ``WORKING_COPIES`` more tensors of that size."""
    inputs = batch * (2 * k + 1) * vocab * 4
    return inputs, inputs * (1 + WORKING_COPIES)


def check_fits_memory(batch: int, k: int, vocab: int, device: str, command: str = "bench verify") -> None:
    """Refuse, in one line with the bytes it needs, a configuration whose largest step cannot fit in the memory
    the device has free (before anything is allocated: the allocator's own error is a traceback)."""
    from relaxbench.errors import ConfigError
    from relaxbench.machine import available_memory_bytes

    import torch

    if torch.device(device).type == "cuda":
        free: int | None = int(torch.cuda.mem_get_info(torch.device(device))[0])
        where = f"{device} has"
    else:
        free, where = available_memory_bytes(), "this machine has"
    inputs, need = step_bytes(batch, k, vocab)
    if free is not None and need > free:
        raise ConfigError(f"{command}: the step at B = {batch:,}, k = {k}, V = {vocab:,} needs about "
                          f"{need / 2**30:,.1f} GiB ({need:,} bytes: {inputs:,} of target and draft logits and "
                          f"{WORKING_COPIES} working copies), and {where} {free / 2**30:,.1f} GiB free; lower "
                          f"{'--batch, ' if command == 'bench verify' else ''}-k or --vocab")


def _ops(cells: list, attr: str) -> str:
    values = [getattr(c, attr).ops for c in cells if getattr(c, attr) is not None]
    if not values:
        return "-"
    return str(values[0]) if len(set(values)) == 1 else "→".join(str(v) for v in values)


def print_verify(bench, misses: Sequence, where: str) -> None:
    """One table per (V, k): a row per rule and mode, the bare reference first."""
    from relaxbench.benchmarks import verify as vb

    missed = {(m.rule, m.mode) for m in misses}
    groups = sorted({(c.shape.vocab, c.shape.k) for c in bench.cells.values()})
    at = bench.compare_batch
    for vocab, k in groups:
        rows = []
        pairs = [(vb.BARE, mode) for mode in ("greedy", "sampling")
                 if any(c.rule == vb.BARE and c.shape.mode == mode for c in bench.cells.values())]
        for rule, mode in pairs + vb.rule_modes(bench):
            cells = [c for b in bench.batches if (c := bench.get(rule, vb.Shape(mode, b, k, vocab))) is not None]
            if not cells:
                continue
            shape = vb.Shape(mode, at, k, vocab)
            ratio, speedup = vb.over_bare(bench, rule, shape), vb.per_request_speedup(bench, rule, shape)
            loop = bench.get(f"per-request {rule}", shape)
            syncs = sum(len(c.syncs) for c in cells)
            times = {c.shape.batch: c.median_us for c in cells}
            rows.append((text(rule), text(mode), figure(_ops(cells, "full")),
                         figure(_ops([c for c in cells if c.shape.batch >= 2], "mixed")), figure(str(syncs)),
                         *(figure("-" if times.get(b) is None else f"{times[b]:,.0f}") for b in bench.batches),
                         figure("-" if ratio is None else f"{ratio:.1f}×"),
                         figure("-" if loop is None or loop.median_us is None else f"{loop.median_us:,.0f}"),
                         figure("-" if speedup is None else f"{speedup:.1f}×"),
                         verdict(None if rule == vb.BARE else (rule, mode) not in missed)))
        print_table(table(
            f"bench-verify-{vocab}-{k}", f"batched verification: V={vocab:,}, k={k}, {where}; µs per step (median)",
            ("rule", "mode", "ops", "ops mixed", "syncs", *(f"µs B={b}" for b in bench.batches),
             f"× bare @{at}", f"per-request µs @{at}", f"speedup @{at}", "holds"), rows))


def targets_note(bench) -> str:
    from relaxbench.benchmarks import verify as vb

    b, v = vb.TARGET_BATCH, vb.OVERHEAD_VOCAB
    note = (f"ops: aten operations of policy.decide on a step where every request drafts k, at each B (one figure: "
            f"the same at every B); ops mixed: on the timed step (mixed k_i, one empty request), B ≥ 2. syncs: host "
            f"synchronisations inside every decision counted. A step's time includes the verdicts' one host copy. "
            f"Targets: ops at the largest B = at the smallest; 0 syncs; at B={b}, V={v:,}: greedy ≤ "
            f"{vb.GREEDY_OVER_BARE:g}×, sampling ≤ {vb.SAMPLING_OVER_BARE:g}× the bare exact-match, and ≥ "
            f"{vb.PER_REQUEST_SPEEDUP:g}× faster than the per-request path (today's rule code, once per request); "
            f"at other V those columns are shown, not held.")
    if bench.compare_batch != b:
        note += (f" B={b} was not run: the time targets were not checked (the columns @{bench.compare_batch} are "
                 "shown, not held).")
    return note


def print_profile(shares: Sequence, where: str) -> None:
    """One table per (V, k): each rule's heaviest operations, the bare reference first."""
    groups = sorted({(s.shape.vocab, s.shape.k) for s in shares})
    for vocab, k in groups:
        rows = [(text(s.rule), text(s.mode), text(s.op), text(s.inputs), figure(f"{s.calls:g}"),
                 figure(f"{s.us:,.0f}"), figure(f"{s.us / s.step_us:.0%}" if s.step_us else "-"))
                for s in shares if (s.shape.vocab, s.shape.k) == (vocab, k)]
        batch = next(s.shape.batch for s in shares if (s.shape.vocab, s.shape.k) == (vocab, k))
        print_table(table(
            f"bench-verify-profile-{vocab}-{k}",
            f"where a step goes: B={batch}, V={vocab:,}, k={k}, {where}; self µs per step",
            ("rule", "mode", "operation", "inputs", "calls", "µs", "share"), rows,
            "share: of the step's self time over every aten operation (the profiler's own cost is not in it)"))
