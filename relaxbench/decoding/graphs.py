"""Captured forwards: one CUDA graph per token count (bucket), replayed on static input and output buffers.

An eager forward of a small model on a GPU is mostly kernel-launch time (a 0.5B model: ~1,000 launches for ~2 ms of
GPU work). A CUDA graph records the launches of one forward once and replays them with one call; the graph reads its
inputs from, and writes its outputs to, the same addresses every time, so each bucket owns static buffers: the ids
are copied in (padded to the bucket's width), the start position is written on the device, the graph is replayed,
and the outputs are copied out (cut to the real width) before the next replay overwrites them.

The capture is ``torch.cuda.CUDAGraph`` directly, not ``torch.compile(mode="reduce-overhead")``: a graph replays the
very kernels the eager forward of the same shape launches, so its logits are the eager ones of that shape; Inductor
would fuse and reorder the arithmetic and change the float results (docs/design.md, "Static cache and graphs").
``capture`` is a parameter so the CPU tests can hold the buffer management to the eager forward with a stand-in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

# step(ids [b], start [1]) -> outputs whose leading dimension is the bucket width b
Step = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]


class Graph(Protocol):
    def replay(self) -> None: ...


# capture(fn) -> (graph, fn's outputs as left in their static buffers by the capture)
Capture = Callable[[Callable[[], tuple[torch.Tensor, ...]]], tuple[Graph, tuple[torch.Tensor, ...]]]


def cuda_capture(fn: Callable[[], tuple[torch.Tensor, ...]], warmup: int = 2,
                 pool: object | None = None) -> tuple[Graph, tuple[torch.Tensor, ...]]:
    """Warm ``fn`` up on a side stream (lazy allocations and library handles, which a capture may not make), then
    record one call of it into a ``torch.cuda.CUDAGraph`` sharing ``pool`` with the other buckets."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = fn()
    return graph, outputs


class ReplayGraph:
    """The CPU stand-in for a CUDA graph: ``replay`` calls the captured function again and copies its outputs into
    the tensors the capture returned, as a replayed graph rewrites its static outputs in place."""

    def __init__(self, fn: Callable[[], tuple[torch.Tensor, ...]]) -> None:
        self.fn, self.replays = fn, 0
        self.outputs = tuple(t.clone() for t in fn())

    def replay(self) -> None:
        for static, fresh in zip(self.outputs, self.fn(), strict=True):
            static.copy_(fresh)
        self.replays += 1


def replay_capture(fn: Callable[[], tuple[torch.Tensor, ...]]) -> tuple[ReplayGraph, tuple[torch.Tensor, ...]]:
    graph = ReplayGraph(fn)
    return graph, graph.outputs


@dataclass
class GraphReport:
    """What capturing cost: graphs captured and the seconds it took (warm-up included), all before timing."""

    graphs: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"graphs": self.graphs, "capture_s": round(self.seconds, 3), "buckets": sorted(set(self.buckets))}


@dataclass
class _Bucket:
    ids: torch.Tensor  # [b] static input ids
    start: torch.Tensor  # [1] static start position
    graph: Graph
    outputs: tuple[torch.Tensor, ...]


class StepGraphs:
    """Captured forwards for a set of token counts; a count with no bucket at or above it is left to the caller.

    ``run(ids, start)`` pads ``ids`` (n tokens) to the smallest bucket b >= n with copies of its last id: a padded
    position comes after every real one, so causal attention keeps it out of the real positions' results; its cache
    entry lies beyond the sequence's length and is overwritten before it is ever read."""

    def __init__(self, step: Step, buckets: Iterable[int], device: torch.device | str,
                 capture: Capture | None = None) -> None:
        self.step, self.device = step, torch.device(device)
        self.buckets: tuple[int, ...] = tuple(sorted({int(b) for b in buckets if int(b) >= 1}))
        self.capture = capture or cuda_capture
        self.captured: dict[int, _Bucket] = {}
        self.report = GraphReport()

    def bucket_for(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)

    def capture_all(self, before_each: Callable[[], None] | None = None) -> None:
        """Capture every bucket not yet captured (``before_each``: put the model's state back, e.g. a cache length)."""
        for b in self.buckets:
            if b not in self.captured:
                if before_each is not None:
                    before_each()
                self._capture(b)

    def _capture(self, b: int) -> _Bucket:
        t0 = time.perf_counter()
        ids = torch.zeros(b, dtype=torch.long, device=self.device)
        start = torch.zeros(1, dtype=torch.long, device=self.device)
        graph, outputs = self.capture(lambda: self.step(ids, start))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # capture cost is reported, and only before timing
        bucket = self.captured[b] = _Bucket(ids, start, graph, tuple(outputs))
        self.report.graphs += 1
        self.report.seconds += time.perf_counter() - t0
        self.report.buckets.append(b)
        return bucket

    def run(self, ids: torch.Tensor, start: int) -> tuple[torch.Tensor, ...] | None:
        """The step's outputs for ``ids`` at positions ``start``..., cut to ``len(ids)`` rows (fresh tensors); None
        when no bucket holds ``len(ids)`` tokens."""
        n = int(ids.shape[0])
        b = self.bucket_for(n)
        if b is None or n == 0:
            return None
        bucket = self.captured.get(b) or self._capture(b)
        bucket.ids[:n].copy_(ids)
        if n < b:
            bucket.ids[n:].copy_(ids[-1:].expand(b - n))
        bucket.start.fill_(start)  # a host int written by a kernel: no synchronisation
        bucket.graph.replay()
        return tuple(out[:n].clone() for out in bucket.outputs)


def exact_buckets(largest: int) -> Sequence[int]:
    """Every width 1..largest: a forward replays the graph of its own shape, never a padded one."""
    return tuple(range(1, max(1, largest) + 1))
