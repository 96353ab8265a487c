"""Batched verification: what one decision of a whole batch costs, in operations, synchronisations and host time.

A serving engine verifies every request of a step at once; a rule that loops over requests, or reads a value back
to the host inside its decision, makes the engine time relaxbench instead of the rule. For every registered rule in
every mode it runs, at each batch size B, draft length k and vocabulary V, this bench counts (``op_count``) the aten
operations and host synchronisations of ``policy.decide(batch)`` and times one step, beside two references on the
same step:

* ``bare exact-match``: the least a batched verifier does (argmax of every row, with the rules' own argmax;
  compare, cumulative product, the next token gathered), the floor a rule is held to;
* the per-request path: the same rule called once per request with B = 1 (each request's ``Block`` cut from the
  batch, ``policy.verify(block)``, its output row written), the shape of a verifier that loops over the batch in
  Python. It runs today's rule code, so it is that loop's cost with today's rules, not the cost of the per-request
  implementations the rules had before they were batched.

A step's time is the decision and its one host copy of the verdicts (``Verdict.to_host``): on the host clock on a
CPU (which runs synchronously); on CUDA by CUDA events, with every decision under the sync debug mode (the GPU kit's
step ``verify``). The random steps follow ``op_count.random_step``: mixed draft lengths k_i ≤ k with one request
that drafted nothing. Operations are counted twice: on a step where every request drafts k (the same work at every
B, so the count must not change with B) and on the timed mixed step (where the count must not change over B ≥ 2:
at B = 1 there is no empty request to handle). The configurations are timed side by side, a (k, V) group at a time
(every B and mode of it: what fits in memory at V = 151,936): each repeat visits every rule and both references of
every step of the group in turn, so drift on a shared machine hits them alike: the batched decisions and the bare
references first, the per-request loops after them (``in_timing_order``), so a rule and the reference it is held to
are each timed right after another batched decision.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from relaxbench.benchmarks.op_count import Counts, RandomStep, batch_for, count, random_step
from relaxbench.benchmarks.policies import BENCH_PAIR, _CountingTokenizer, bench_knobs
from relaxbench.ops.reductions import argmax
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import Batch, Block, PolicyEnv, VerificationPolicy

BATCHES = (1, 8, 64, 256)
DRAFT_LENGTHS = (4, 8)
VOCABS = (1_000, 151_936)  # the overhead, and Qwen's vocabulary
TARGET_BATCH = 64  # the batch size the time targets are checked at
OVERHEAD_VOCAB = 1_000  # the vocabulary the time targets are checked at (a decision's overhead, not memory traffic)
GREEDY_OVER_BARE = 3.0  # a greedy rule's step at most this many times the bare reference's
SAMPLING_OVER_BARE = 10.0  # a sampling rule's
PER_REQUEST_SPEEDUP = 10.0  # the batched decision at least this many times faster than the per-request path
BARE = "bare exact-match"


def bench_policies(names: Iterable[str] | None, folder: Path | None, vocab: int,
                   device: torch.device | str = "cpu") -> dict[str, VerificationPolicy]:
    """Every registered rule (or those named) but the autoregressive baseline, built with the bench's knobs (a
    trained judge gets a random head written to ``folder``, which it then needs) and bound."""
    chosen = list(names) if names else [name for name in POLICIES.names() if name != "none"]
    out = {}
    for name in chosen:
        policy = make_policy(name, bench_knobs(name, folder))
        policy.bind(PolicyEnv(_CountingTokenizer(), vocab, torch.device(device), *BENCH_PAIR))
        out[policy.name] = policy
    return out


def decision_modes(policies: dict[str, VerificationPolicy], modes: Sequence[str] = ("greedy", "sampling")
                   ) -> list[tuple[str, str]]:
    """(rule, mode) for every mode each rule runs in (of ``modes``)."""
    return [(name, mode) for name, policy in policies.items() for mode in policy.modes if mode in modes]


# -- the references ---------------------------------------------------------------------------------------------
def bare_exact_match(step: RandomStep) -> torch.Tensor:
    """[B, 2] accepted count and next token by exact match, in the fewest batched operations: the floor. Its argmax
    is the rules' own (``ops.reductions.argmax``: ``max(dim)``'s index, the same first index as ``torch.argmax``),
    so the floor is never a slower primitive than the rules use (on some CPUs ``torch.argmax`` costs three times
    ``max(dim)``)."""
    best = argmax(step.target.source)[step.target.index]  # [B, K + 1]
    valid = torch.arange(step.drafts.shape[1], device=step.device) < step.num_drafts.unsqueeze(-1)
    accepted = ((step.drafts == best[:, :-1]) & valid).to(torch.uint8).cumprod(dim=-1).sum(dim=-1)
    return torch.stack([accepted, best.gather(1, accepted.unsqueeze(-1)).squeeze(-1)], dim=-1)


def request_blocks(batch: Batch, generator: torch.Generator | None) -> list[Block]:
    """Each request's ``Block`` cut from ``batch`` as ``op_count.random_step`` lays it out (each request's rows
    contiguous, so a block's tensors are views), its uniforms to be drawn from ``generator``."""
    ks = batch.num_drafts.tolist()
    starts, draft_starts = batch.target.index[:, 0].tolist(), batch.target.index[:, 0].sub(
        torch.arange(batch.size, device=batch.device)).tolist()
    params = batch.sampling.uniform
    if params is None:
        raise ValueError("the per-request path takes one sampling setting for the batch")
    blocks = []
    for b, k in enumerate(ks):
        start, draft_start = starts[b], draft_starts[b]
        extras = {}
        for key, rows in batch.extras.items():
            if key == "hidden_states":
                extras[key] = rows.source[start: start + k + 1]
            elif key == "draft_hidden_states":
                extras[key] = rows.source[draft_start: draft_start + k]
            else:
                index = rows.index[b]
                first, last = int(index[0]), int(index[-1])
                extras[key] = rows.source[first: last + 1]
        draft = batch.draft_logits.source[draft_start: draft_start + k] if batch.draft_logits is not None else None
        given = batch.draft_probs.source[draft_start: draft_start + k] if batch.draft_probs is not None else None
        blocks.append(Block(batch.drafts[b, :k], batch.target.source[start: start + k + 1], draft, params, generator,
                            extras, given))
    return blocks


def per_request_step(policy: VerificationPolicy, batch: Batch, generator: torch.Generator | None,
                     out: list[tuple[int, int, int]]) -> None:
    """The per-request path, one step: each request's block cut from the batch, ``verify`` once per request, its
    output row written."""
    for b, block in enumerate(request_blocks(batch, generator)):
        outcome = policy.verify(block)
        out[b] = (outcome.n_accepted, outcome.next_token, outcome.n_relaxed)


# -- measuring --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """One step's configuration."""

    mode: str
    batch: int
    k: int
    vocab: int


@dataclass
class Cell:
    """One rule (or reference) on one step: its counts and its step times (seconds)."""

    rule: str
    shape: Shape
    full: Counts | None = None  # every request drafts k
    mixed: Counts | None = None  # the timed step: mixed k_i, one empty request from B = 2
    times: list[float] = field(default_factory=list)  # the step (CUDA events on a GPU)
    host_times: list[float] = field(default_factory=list)  # the host's time to issue it (= times on a CPU)
    error: str | None = None  # the decision raised: a synchronisation under the sync debug mode, or a failure

    @property
    def median_us(self) -> float | None:
        return statistics.median(self.times) * 1e6 if self.times else None

    @property
    def host_us(self) -> float | None:
        return statistics.median(self.host_times) * 1e6 if self.host_times else None

    @property
    def syncs(self) -> tuple[str, ...]:
        return tuple(name for counts in (self.full, self.mixed) if counts is not None for name in counts.sync_names)


@dataclass
class VerifyBench:
    """Every cell of a run, keyed by (rule, shape); references are the rules ``BARE`` and ``per-request <rule>``."""

    cells: dict[tuple[str, Shape], Cell] = field(default_factory=dict)
    batches: tuple[int, ...] = BATCHES
    per_request_batches: tuple[int, ...] = (TARGET_BATCH,)

    @property
    def compare_batch(self) -> int:
        """The B at which rules are set beside the references: the targets' B when it was run, else the largest."""
        return TARGET_BATCH if TARGET_BATCH in self.batches else max(self.batches)

    def cell(self, rule: str, shape: Shape) -> Cell:
        return self.cells.setdefault((rule, shape), Cell(rule, shape))

    def get(self, rule: str, shape: Shape) -> Cell | None:
        return self.cells.get((rule, shape))


def run_verify_bench(policies: dict[str, VerificationPolicy], modes: Sequence[str] = ("greedy", "sampling"),
                     batches: Sequence[int] = BATCHES, ks: Sequence[int] = DRAFT_LENGTHS,
                     vocabs: Sequence[int] = VOCABS, repeats: int = 5, warmup: int = 1,
                     per_request_batches: Sequence[int] | None = None, device: torch.device | str = "cpu",
                     dtype: torch.dtype = torch.float32, progress: Callable[[str], None] = lambda _: None
                     ) -> VerifyBench:
    """Count and time every rule in ``modes`` at every B × k × V (the per-request path at ``per_request_batches``;
    default: the compare batch). One group of steps (a k and V, every B and mode) is held in memory at a time; within
    it, every repeat visits every cell in turn. On CUDA a step is timed with CUDA events (the host's launch time is
    kept beside it) and every decision runs under ``torch.cuda.set_sync_debug_mode("error")``: a decision that
    synchronises raises, and the cell records the error instead of times."""
    bench = VerifyBench(batches=tuple(sorted(batches)))
    bench.per_request_batches = (bench.compare_batch,) if per_request_batches is None else tuple(per_request_batches)
    pairs = decision_modes(policies, modes)
    cuda = torch.device(device).type == "cuda"
    for vocab in vocabs:
        for k in ks:
            progress(f"V={vocab:,}, k={k}: building steps")
            steps = {}
            for b in bench.batches:
                base = random_step(b, k, vocab, sampling=False, device=device, dtype=dtype, seed=b)
                steps.update({Shape(mode, b, k, vocab): base.in_mode(mode == "sampling")
                              for mode in sorted({m for _, m in pairs})})
            progress(f"V={vocab:,}, k={k}: counting operations")
            work = _count_and_prepare(bench, policies, pairs, steps, device, dtype)
            progress(f"V={vocab:,}, k={k}: timing {len(work)} cells × {repeats} repeats")
            events: list[tuple[Cell, Any, Any]] = []
            work = in_timing_order(work)
            for r in range(warmup + repeats):
                for cell, run in work:
                    if cell.error is not None:
                        continue
                    begin = end = None
                    if cuda:
                        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        begin.record()
                    start = time.perf_counter()
                    try:
                        run()
                    except RuntimeError as exc:  # a synchronisation under the sync debug mode
                        cell.error = one_line(exc)
                        continue
                    elapsed = time.perf_counter() - start
                    if cuda:
                        end.record()
                    if r >= warmup:
                        cell.host_times.append(elapsed)
                        if cuda:
                            events.append((cell, begin, end))
                        else:
                            cell.times.append(elapsed)
            if cuda:
                torch.cuda.synchronize()
                for cell, begin, end in events:
                    cell.times.append(begin.elapsed_time(end) / 1e3)
            del work, steps, events
    return bench


def in_timing_order(work: list[tuple[Cell, Callable[[], object]]]) -> list[tuple[Cell, Callable[[], object]]]:
    """The order a repeat visits the cells in: every batched decision and bare reference first (each step's bare
    reference before its rules), then every per-request loop. So a rule and the reference it is held to are timed
    alike, each right after another batched decision: interleaved, a rule at the compare batch came right after the
    previous rule's per-request loop (tens of milliseconds of other work, after which a decision starts with colder
    caches and takes longer) while the reference never did."""
    return sorted(work, key=lambda item: item[0].rule.startswith("per-request "))  # stable: the rest keeps its order


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


@contextmanager
def syncs_fail(device: torch.device):
    """On CUDA, any synchronisation inside raises (``torch.cuda.set_sync_debug_mode("error")``); elsewhere nothing."""
    if device.type != "cuda":
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def decided(policy: VerificationPolicy, batch: Batch) -> list:
    """One timed step of a batched rule: the decision (a fresh ``Batch``, so its cached reductions are part of it),
    under ``syncs_fail``, then the verdicts' one host copy."""
    with syncs_fail(batch.device):
        verdict = policy.decide(dataclasses.replace(batch))
    return verdict.to_host()


def _count_and_prepare(bench: VerifyBench, policies: dict[str, VerificationPolicy], pairs: list[tuple[str, str]],
                       steps: dict[Shape, RandomStep], device: torch.device | str, dtype: torch.dtype
                       ) -> list[tuple[Cell, Callable[[], object]]]:
    """Count each cell's operations (on a full-width step and on the timed step) and return what to time."""
    work: list[tuple[Cell, Callable[[], object]]] = []
    full_base: dict[int, RandomStep] = {}  # the full-width step of the current B, shared by its modes
    for shape, step in steps.items():
        bare = bench.cell(BARE, shape)
        bare.mixed = count(lambda: bare_exact_match(step))
        work.append((bare, lambda s=step: bare_exact_match(s).tolist()))
        if shape.batch not in full_base:
            full_base.clear()
            full_base[shape.batch] = random_step(shape.batch, shape.k, shape.vocab, sampling=False, device=device,
                                                 dtype=dtype, seed=shape.batch, mixed_k=False)
        full_step = full_base[shape.batch].in_mode(shape.mode == "sampling")
        for name, mode in pairs:
            if mode != shape.mode:
                continue
            policy = policies[name]
            cell = bench.cell(name, shape)
            full = batch_for(policy, full_step)
            timed = batch_for(policy, step)
            try:
                cell.full = count(lambda: policy.decide(full))
                cell.mixed = count(lambda: policy.decide(dataclasses.replace(timed)))
            except Exception as exc:  # a rule that fails on a valid batch: reported, the others still run
                cell.error = one_line(exc)
                continue
            work.append((cell, lambda p=policy, b=timed: decided(p, b)))
            if shape.batch in bench.per_request_batches:
                generator = torch.Generator(device=step.device).manual_seed(0) if mode == "sampling" else None
                out: list[tuple[int, int, int]] = [(0, 0, 0)] * shape.batch
                work.append((bench.cell(f"per-request {name}", shape),
                             lambda p=policy, b=timed, g=generator, o=out: per_request_step(p, b, g, o)))
        del full_step
    return work


# -- where a step goes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelShare:
    """One aten operation's share of a rule's step: its self time per step (host time on a CPU, device time on
    CUDA) over the profiled decisions, with the input shapes it ran on."""

    rule: str
    mode: str
    shape: Shape
    op: str
    inputs: str
    calls: float  # per step
    us: float  # per step: device time on CUDA, host time on a CPU
    step_us: float  # the profiled step's total self time, every operation
    host_us: float  # per step, the host's time in the operation (= us on a CPU; on CUDA, launching it)

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "mode": self.mode, "batch": self.shape.batch, "k": self.shape.k,
                "vocab": self.shape.vocab, "op": self.op, "inputs": self.inputs, "calls": self.calls,
                "us": self.us, "host_us": self.host_us, "share": self.us / self.step_us if self.step_us else None}


def profile_verify(policies: dict[str, VerificationPolicy], modes: Sequence[str], batch: int, ks: Sequence[int],
                   vocabs: Sequence[int], repeats: int, top: int, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> list[KernelShare]:
    """The ``top`` aten operations by self time of every rule's decision (and the bare reference's) at B =
    ``batch``, on the same random steps the timing uses, under ``torch.profiler`` (CPU activity, and CUDA's on a
    GPU): where a step's time goes, which the timing tables cannot say (an operation count weighs a 5 µs index
    and a 200 µs full-vocabulary pass alike). Run apart from the timed repeats, so the profiler's own cost touches
    no timing."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out: list[KernelShare] = []
    pairs = decision_modes(policies, modes)
    for vocab in vocabs:
        for k in ks:
            base = random_step(batch, k, vocab, sampling=False, device=device, dtype=dtype, seed=batch)
            for mode in sorted({m for _, m in pairs}):
                step = base.in_mode(mode == "sampling")
                shape = Shape(mode, batch, k, vocab)
                runs: list[tuple[str, Callable[[], object]]] = [(BARE, lambda s=step: bare_exact_match(s).tolist())]
                for name, m in pairs:
                    if m == mode:
                        runs.append((name, partial(decided, policies[name], batch_for(policies[name], step))))
                for rule, run in runs:
                    run()  # warm: the first call pays one-time costs the profile would blame on the rule
                    with native_stderr_silenced(), profile(activities=activities, record_shapes=True) as prof:
                        for _ in range(repeats):
                            run()
                    out.extend(_top_kernels(prof.key_averages(group_by_input_shape=True), rule, mode, shape,
                                            repeats, top, cuda))
    return out


@contextmanager
def native_stderr_silenced():
    """The process's file descriptor 2 pointed at the null device for the block: the profiler's native library
    writes a line to it on every start and stop, which would bury the tables. Python exceptions are unaffected (they
    propagate as objects and are printed after the block, if at all)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _top_kernels(events: Any, rule: str, mode: str, shape: Shape, repeats: int, top: int,
                 cuda: bool) -> list[KernelShare]:
    """The ``top`` aten operations of a profile by self time (device time on CUDA), per step."""
    def self_us(event: Any) -> float:
        return (event.self_device_time_total if cuda else event.self_cpu_time_total) / repeats

    ops = [e for e in events if e.key.startswith("aten::")]
    step = sum(self_us(e) for e in ops)
    ranked = sorted(ops, key=self_us, reverse=True)[:top]
    return [KernelShare(rule, mode, shape, e.key.removeprefix("aten::"), _shapes(e.input_shapes),
                        e.count / repeats, self_us(e), step, e.self_cpu_time_total / repeats) for e in ranked]


def _shapes(inputs: Any) -> str:
    """The tensor inputs' shapes, as 140×1000 (scalars and empty lists left out)."""
    return ", ".join("×".join(str(d) for d in dims) for dims in inputs or () if isinstance(dims, list) and dims)


# -- targets ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Miss:
    """A missed target: which rule, where, and what (the operations that grew, the synchronisations seen)."""

    rule: str
    mode: str
    target: str
    detail: str

    def line(self) -> str:
        return f"{self.rule} ({self.mode}): {self.target}: {self.detail}"


def op_growth(small: Counts, large: Counts) -> str:
    """The aten operations whose count differs between two steps, as 'op ±n' (views included)."""
    names = sorted(set(small.op_names) | set(large.op_names))
    return ", ".join(f"{n} {large.op_names[n] - small.op_names[n]:+d}" for n in names
                     if large.op_names[n] != small.op_names[n]) or "views only"


def rule_modes(bench: VerifyBench) -> list[tuple[str, str]]:
    seen = {(c.rule, c.shape.mode) for c in bench.cells.values() if c.rule != BARE and not
            c.rule.startswith("per-request ")}
    return sorted(seen)


def shapes(bench: VerifyBench, mode: str) -> list[Shape]:
    return sorted({c.shape for c in bench.cells.values() if c.shape.mode == mode},
                  key=lambda s: (s.vocab, s.k, s.batch))


def misses(bench: VerifyBench) -> list[Miss]:
    """Every missed target of the run (see the module docstring and ``docs/performance.md``)."""
    out: list[Miss] = []
    for rule, mode in rule_modes(bench):
        groups = sorted({(s.vocab, s.k) for s in shapes(bench, mode)})
        for vocab, k in groups:
            cells = [c for b in bench.batches if (c := bench.get(rule, Shape(mode, b, k, vocab))) is not None]
            where = f"k={k}, V={vocab:,}"
            for c in cells:
                if c.error is not None:
                    out.append(Miss(rule, mode, "a decision runs (no synchronisation under the sync debug mode)",
                                    f"B={c.shape.batch}, {where}: {c.error}"))
                if c.syncs:
                    out.append(Miss(rule, mode, "0 synchronisations in a decision",
                                    f"B={c.shape.batch}, {where}: {', '.join(sorted(set(c.syncs)))}"))
            full = [c for c in cells if c.full is not None]
            if len(full) >= 2 and full[-1].full.ops != full[0].full.ops:
                out.append(Miss(rule, mode, f"operations at B={full[-1].shape.batch} = at B={full[0].shape.batch}",
                                f"{where}: {full[0].full.ops} → {full[-1].full.ops} "
                                f"({op_growth(full[0].full, full[-1].full)})"))
            mixed = [c for c in cells if c.mixed is not None and c.shape.batch >= 2]
            if len(mixed) >= 2 and mixed[-1].mixed.ops != mixed[0].mixed.ops:
                out.append(Miss(rule, mode, f"operations on a mixed step at B={mixed[-1].shape.batch} = at "
                                            f"B={mixed[0].shape.batch}",
                                f"{where}: {mixed[0].mixed.ops} → {mixed[-1].mixed.ops} "
                                f"({op_growth(mixed[0].mixed, mixed[-1].mixed)})"))
            if bench.compare_batch != TARGET_BATCH:
                continue  # the time targets hold at B = TARGET_BATCH only
            shape = Shape(mode, TARGET_BATCH, k, vocab)
            ratio = over_bare(bench, rule, shape)
            limit = GREEDY_OVER_BARE if mode == "greedy" else SAMPLING_OVER_BARE
            if vocab == OVERHEAD_VOCAB and ratio is not None and ratio > limit:
                out.append(Miss(rule, mode, f"≤ {limit:g}× the bare reference at B={TARGET_BATCH}",
                                f"{where}: {ratio:.1f}×"))
            speedup = per_request_speedup(bench, rule, shape)
            if vocab == OVERHEAD_VOCAB and speedup is not None and speedup < PER_REQUEST_SPEEDUP:
                out.append(Miss(rule, mode, f"≥ {PER_REQUEST_SPEEDUP:g}× faster than the per-request path at "
                                            f"B={TARGET_BATCH}", f"{where}: {speedup:.1f}×"))
    return out


def over_bare(bench: VerifyBench, rule: str, shape: Shape) -> float | None:
    """The rule's median step over the bare reference's, on the same step (None: not measured)."""
    cell, bare = bench.get(rule, shape), bench.get(BARE, shape)
    if cell is None or bare is None or cell.median_us is None or not bare.median_us:
        return None
    return cell.median_us / bare.median_us


def per_request_speedup(bench: VerifyBench, rule: str, shape: Shape) -> float | None:
    """The per-request path's median step over the batched decision's (None: not measured)."""
    cell, loop = bench.get(rule, shape), bench.get(f"per-request {rule}", shape)
    if cell is None or loop is None or not cell.median_us or loop.median_us is None:
        return None
    return loop.median_us / cell.median_us
