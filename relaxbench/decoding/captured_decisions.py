"""A rule's batched decision captured as a CUDA graph per batch layout, replayed on static buffers.

A batched decision (``policy.decide(Batch)``) is sync-free and the same operations at every B, but each operation is
a launch (~24 µs on the first H200 run: 10 of 36 rule-modes met 1 ms at B = 256). Captured, a decision is one
replay. ``Batch`` carries host data that chooses shapes and branches (B, K, the total draft count T, ``any_empty``,
the sampling facts, which rows and extras exist and their shapes): a graph is captured per distinct value of all of
it (``layout_key``), so a replay never runs a branch it was not captured with. A serving engine whose T varies every
step therefore captures one graph per (B, K, T, ...) it meets: bucketing T would need the rules to read T from a
tensor, which they do not.

Limits: a rule whose decision reads host state outside the ``Batch`` (a policy attribute changed between steps)
would replay the state it was captured with; every registered rule decides from the batch alone (the batched-rule
tests hold a decision to leave no state behind). A decision must not synchronise (the verify benchmark's counter
and the GPU kit hold that for every rule), or the capture fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

from relaxbench.decoding.graphs import Capture, Graph, cuda_capture
from relaxbench.policies.base import VerificationPolicy
from relaxbench.policies.batch import Batch
from relaxbench.policies.verdict import Verdict


def _map(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with every tensor inside it (dataclass fields, mappings) replaced by ``fn(tensor)``; a dataclass is
    rebuilt through its constructor, so no cached reduction of the original comes along."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _map(getattr(value, f.name), fn) for f in dataclasses.fields(value) if f.init}
        return type(value)(**changes)
    if isinstance(value, Mapping):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _leaves(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _map(value, lambda t: found.append(t) or t)
    return found


def layout_key(batch: Batch) -> str:
    """Everything host-side a decision may branch on or size by: each tensor's shape and dtype, and every other
    field's value (B, K, T, any_empty, the sampling facts)."""
    return repr(_map(batch, lambda t: (tuple(t.shape), str(t.dtype))))


@dataclasses.dataclass
class _Captured:
    inputs: list[torch.Tensor]
    graph: Graph
    outputs: tuple[torch.Tensor | None, ...]  # the verdict's tensor fields, then its facts
    facts: tuple[str, ...] = ()  # the names of the rule's facts, in the order of the outputs


class CapturedDecisions:
    """``decide(batch)``: the policy's verdict for ``batch``, from a graph captured on the first batch of its layout
    and replayed after copying the batch's tensors into that graph's inputs. The verdict's tensors are copies."""

    def __init__(self, policy: VerificationPolicy, capture: Capture | None = None) -> None:
        self.policy = policy
        self.capture = capture or cuda_capture
        self.graphs: dict[str, _Captured] = {}

    def decide(self, batch: Batch) -> Verdict:
        key = layout_key(batch)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(batch)
        else:
            for static, fresh in zip(entry.inputs, _leaves(batch), strict=True):
                static.copy_(fresh)
        entry.graph.replay()
        values = [None if t is None else t.clone() for t in entry.outputs]
        fixed = len(values) - len(entry.facts)
        return Verdict(*values[:fixed], facts=dict(zip(entry.facts, values[fixed:], strict=True)))


    def _capture(self, batch: Batch) -> _Captured:
        inputs = [t.clone() for t in _leaves(batch)]
        device = batch.drafts.device

        facts: list[str] = []

        def decide() -> tuple[torch.Tensor, ...]:
            it = iter(inputs)
            static_batch = _map(batch, lambda _: next(it))  # a new Batch each call: no cached reduction reused
            verdict = self.policy.decide(static_batch)
            facts[:] = list(verdict.facts)
            # a field the rule leaves None (no span counts) travels as an empty tensor (a real one has B >= 1 rows)
            return tuple(torch.empty(0, dtype=torch.long, device=device) if t is None else t
                         for t in (*(getattr(verdict, name) for name in TENSOR_FIELDS), *verdict.facts.values()))

        graph, outputs = self.capture(decide)
        return _Captured(inputs, graph, tuple(None if t.numel() == 0 else t for t in outputs), tuple(facts))


# the verdict's fields that are one tensor each (its facts, a mapping of them, follow in a captured graph's outputs)
TENSOR_FIELDS = tuple(f.name for f in dataclasses.fields(Verdict) if f.name != "facts")
