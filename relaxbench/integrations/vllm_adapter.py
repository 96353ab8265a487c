"""relaxbench's verification rules inside vLLM's speculative-decoding step: one adapter for every rule.

vLLM verifies a whole batch at once: the drafts of every request flattened into one tensor (``draft_token_ids``,
split by ``cu_num_draft_tokens``), the target's logits at every draft position and every bonus position, the
drafter's probabilities (None for n-gram drafts) and the batch's sampling settings. ``RelaxbenchRejectionSampler``
reads that batch as one relaxbench ``Batch`` (index maps over vLLM's tensors, nothing copied per request), groups
the requests by the rule they carry, calls each rule's batched ``decide`` once per step, and writes the verdicts in
vLLM's output layout with tensor operations: the accepted drafts, then the correction or bonus token, the rest of
the row ``PLACEHOLDER_TOKEN_ID``. The decision is the same code relaxbench's own loop calls with one request.

The rule is read per request from ``SamplingParams.extra_args["relaxbench"]`` (a ``RuleRequest``), so one engine
serves every arm of a (target, drafter, k). A request without a rule, or with ``policy: native``, goes through
vLLM's own rejection sampler (the ``native`` arm): then the adapter only records its counts. Requests that carry
the same rule and knobs share one policy object (every rule the engine runs is stateless across steps:
``check_rule`` refuses the rest).

Random numbers: each request's uniforms are a pure function of its seed (``SamplingParams.seed``, else one drawn
when the request is first seen) and its own step count (``ops.random.stream_uniforms``, through
``vllm_batch.with_stream_uniforms``: acceptance uniforms in the rule's ``uniform_dtype``), drawn for the batch at
once on the device.

Records: per request and step, drafted, accepted, relaxed and emitted tokens are gathered into one [B, 4] tensor on
the device and copied to the host without waiting (non-blocking into pinned memory on a GPU); they are turned into
log lines every ``FLUSH_EVERY`` steps, when the batch's requests change, and when the worker asks (``flush``, after
each ``generate``), one append per log file. The per-request policy time is the group's host time shared equally.

vLLM has no registry for its rejection sampler: the model runner builds it in ``GPUModelRunner.__init__`` (which the
CPU runner inherits). ``relaxbench.integrations.vllm_plugin`` puts this class at that one place; this class reads
the batch's request ids from the runner that builds it (the constructing frame's ``self``), because the sampler's
own arguments carry no request identity. ``tests/test_vllm_pin.py`` fails with a clear message if that place moves.
The worker reaches ``flush`` through vLLM's ``worker_extension_cls`` (``FlushExtension``).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, RejectionSampler

from relaxbench.integrations import vllm_native  # noqa: F401  (registers relaxbench's version of the native rule)
from relaxbench.integrations.vllm_batch import engine_batch, output_tokens, select, with_stream_uniforms
from relaxbench.integrations.vllm_rules import EXTRA_KEY, NATIVE, RuleRequest, check_rule
from relaxbench.ops.sampling import BatchSampling, SamplingParams
from relaxbench.policies import PolicyEnv, VerificationPolicy, make_policy

FLUSH_EVERY = 32  # steps between writes of the buffered records
GREEDY_EPS = 1e-5  # vLLM decodes a request greedily below this temperature (its _SAMPLING_EPS)


def constructing_runner(depth: int = 2) -> Any:
    """The model runner whose ``__init__`` is building the sampler (its frame's ``self``)."""
    frame = sys._getframe(depth)
    runner = frame.f_locals.get("self")
    if frame.f_code.co_name != "__init__" or not type(runner).__name__.endswith("ModelRunner"):
        raise RuntimeError("relaxbench's vLLM adapter must be built by the model runner's __init__, but "
                           f"{frame.f_code.co_qualname} built it: the pinned vLLM version moved the sampler")
    return runner


def sampling_of(params: Any, vocab: int) -> SamplingParams:
    """A vLLM request's sampling settings as relaxbench's (vLLM: top-k −1 or 0 or ≥ V is off)."""
    temperature = float(getattr(params, "temperature", 0.0) or 0.0)
    if temperature < GREEDY_EPS:
        return SamplingParams()
    top_k = int(getattr(params, "top_k", 0) or 0)
    return SamplingParams(temperature, 0 if top_k <= 0 or top_k >= vocab else top_k,
                          float(getattr(params, "top_p", 1.0) or 1.0))


@dataclass
class RequestState:
    """One request's rule, its sampling settings, its seed and its slot in the step counters."""

    rule: RuleRequest
    key: tuple[str, str] | None  # (policy, knobs as JSON); None: vLLM's own sampler
    sampling: SamplingParams
    seed: int
    slot: int


@dataclass
class Group:
    """The requests of a step that share a rule: their rows in the batch and the host facts of the group."""

    policy: VerificationPolicy | None  # None: vLLM's native sampler
    rows: torch.Tensor  # [G] long, on the device
    rows_host: list[int]
    sampling: BatchSampling


@dataclass
class Layout:
    """What a step derives from its requests alone, rebuilt only when the batch's requests change."""

    req_ids: tuple[str, ...]
    groups: list[Group]
    slots: torch.Tensor  # [B] long
    seeds: torch.Tensor  # [B] long
    any_native: bool
    sampling: BatchSampling  # every request's, in batch order
    tags: list[str]
    logs: list[str | None]


# what every step records per request; a rule's per-round facts (``Verdict.facts``) follow under their own names
STEP_COLUMNS = ("drafted", "accepted", "relaxed", "emitted")
NOT_REPORTED = -1  # a fact column's value for a request whose rule does not report that fact


@dataclass
class PendingStep:
    layout: Layout
    names: tuple[str, ...]  # the columns of ``records``: STEP_COLUMNS, then the facts any rule of the step reported
    records: torch.Tensor  # [B, len(names)] (host; filled when ``ready`` is)
    ready: Any  # a CUDA event, or None on the CPU
    times: list[tuple[list[int], float]]  # (rows of a group, each request's share of the group's host time)


@dataclass
class StepLog:
    """Steps whose records have been copied off the device but not yet written."""

    pending: list[PendingStep] = field(default_factory=list)

    def write(self) -> None:
        lines: dict[str, list[str]] = defaultdict(list)
        for step in self.pending:
            if step.ready is not None:
                step.ready.synchronize()
            t_policy = [0.0] * len(step.layout.req_ids)
            for rows, share in step.times:
                for row in rows:
                    t_policy[row] = share
            for row, values in enumerate(step.records.tolist()):
                log = step.layout.logs[row]
                if log:
                    record = {name: value for name, value in zip(step.names, values, strict=True)
                              if name in STEP_COLUMNS or value != NOT_REPORTED}
                    lines[log].append(json.dumps({"tag": step.layout.tags[row], **record,
                                                  "t_policy": t_policy[row]}) + "\n")
        self.pending.clear()
        for log, text in lines.items():
            with open(log, "a", encoding="utf-8") as fh:
                fh.writelines(text)


class RelaxbenchRejectionSampler(RejectionSampler):
    """vLLM's rejection sampler with relaxbench's rules: per request, the rule its ``extra_args`` name."""

    def __init__(self, sampler: Any, spec_config: Any = None, device: torch.device | None = None) -> None:
        super().__init__(sampler, spec_config, device)
        self.runner = constructing_runner()
        self.draft_length = getattr(spec_config, "num_speculative_tokens", None)
        self.states: dict[str, RequestState] = {}
        self.policies: dict[tuple[str, str], VerificationPolicy] = {}
        self.steps = torch.zeros(0, dtype=torch.long)  # per slot: the request's verification steps so far
        self.layout: Layout | None = None
        self.log = StepLog()
        self.seeder = random.Random(0)
        self.slots_used = 0  # slots are never reused: a request's step count stays its own

    # ---------------------------------------------------------------------------------------- per request (host)

    def _state(self, req_id: str, vocab: int) -> RequestState:
        state = self.states.get(req_id)
        if state is None:
            params = self.runner.requests[req_id].sampling_params
            extra = (getattr(params, "extra_args", None) or {}).get(EXTRA_KEY)
            rule = RuleRequest.model_validate(extra) if extra is not None else RuleRequest(tag=req_id)
            key = None
            if rule.policy != NATIVE or rule.adapter:
                key = (rule.policy, json.dumps(rule.knobs, sort_keys=True, default=str))
                if key not in self.policies:
                    policy = make_policy(rule.policy, rule.knobs)
                    check_rule(policy)
                    policy.bind(PolicyEnv(None, vocab, self.runner.device, draft_length=self.draft_length))
                    policy.reset()
                    self.policies[key] = policy
            seed = params.seed if getattr(params, "seed", None) is not None else self.seeder.getrandbits(62)
            state = self.states[req_id] = RequestState(rule, key, sampling_of(params, vocab), int(seed),
                                                       self.slots_used)
            self.slots_used += 1
        return state

    def _layout(self, req_ids: tuple[str, ...], device: torch.device, vocab: int) -> Layout:
        """The step's layout: cached while the batch's requests stay the same (host work only when they change)."""
        if self.layout is not None and self.layout.req_ids == req_ids:
            return self.layout
        self.log.write()  # requests left or joined: their buffered records go out now
        for gone in set(self.states) - set(self.runner.requests) - set(req_ids):
            del self.states[gone]
        states = [self._state(r, vocab) for r in req_ids]
        slots = max((s.slot for s in states), default=-1) + 1
        if self.steps.numel() < slots or self.steps.device != device:
            grown = torch.zeros(max(2 * slots, 64), dtype=torch.long, device=device)
            grown[: self.steps.numel()] = self.steps.to(device)
            self.steps = grown
        members: dict[tuple[str, str] | None, list[int]] = defaultdict(list)
        for row, state in enumerate(states):
            members[state.key].append(row)
        groups = [Group(None if key is None else self.policies[key], torch.tensor(rows, device=device), rows,
                        BatchSampling.of([states[r].sampling for r in rows], device))
                  for key, rows in members.items()]
        self.layout = Layout(req_ids, groups, torch.tensor([s.slot for s in states], device=device),
                             torch.tensor([s.seed for s in states], device=device), None in members,
                             BatchSampling.of([s.sampling for s in states], device),
                             [s.rule.tag for s in states], [s.rule.log for s in states])
        return self.layout

    def flush(self) -> None:
        """Write every buffered record now (the worker calls it after each ``generate``)."""
        self.log.write()

    # ---------------------------------------------------------------------------------------- the step

    def forward(self, metadata: Any, draft_probs: torch.Tensor | None, logits: torch.Tensor,
                sampling_metadata: Any) -> SamplerOutput:
        counts = np.asarray(metadata.num_draft_tokens)
        device, vocab = logits.device, int(logits.shape[-1])
        layout = self._layout(tuple(self.runner.input_batch.req_ids[: len(counts)]), device, vocab)
        native = super().forward(metadata, draft_probs, logits, sampling_metadata) if layout.any_native else None
        width = metadata.max_spec_len + 1
        steps = self.steps[layout.slots]
        size = len(counts)
        batch = engine_batch(counts.tolist(), metadata.draft_token_ids, metadata.target_logits_indices,
                             metadata.bonus_logits_indices, logits, draft_probs, layout.sampling,
                             torch.zeros(size, int(counts.max(initial=0)), device=device),
                             torch.zeros(size, dtype=torch.float64, device=device), metadata.cu_num_draft_tokens)
        out = torch.full((size, width), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
        columns = {name: torch.zeros(size, dtype=torch.long, device=device) for name in STEP_COLUMNS}
        columns["drafted"].copy_(batch.num_drafts)
        times: list[tuple[list[int], float]] = []
        for group in layout.groups:
            if group.policy is None:
                assert native is not None
                rows = native.sampled_token_ids[group.rows].to(torch.int32)
                emitted = (rows != PLACEHOLDER_TOKEN_ID).sum(dim=1)
                out.index_copy_(0, group.rows, rows)
                columns["accepted"].index_copy_(0, group.rows, (emitted - 1).long())
                columns["emitted"].index_copy_(0, group.rows, emitted.long())
                continue
            t0 = time.perf_counter()
            part = select(batch, group.rows, counts[group.rows_host].tolist(), group.sampling)
            if not group.sampling.all_greedy:  # greedy rules read no uniforms
                part = with_stream_uniforms(part, layout.seeds[group.rows], steps[group.rows],
                                            group.policy.uniform_dtype)
            verdict = group.policy.decide(part)
            out.index_copy_(0, group.rows, output_tokens(part, verdict, width, PLACEHOLDER_TOKEN_ID))
            reported = {"accepted": verdict.accepted, "relaxed": verdict.relaxed, "emitted": verdict.emitted,
                        **verdict.facts}
            for name, value in reported.items():  # by name: a fact a rule adds is recorded with no change here
                column = columns.setdefault(name, torch.full((size,), NOT_REPORTED, dtype=torch.long, device=device))
                column.index_copy_(0, group.rows, value.long())
            times.append((group.rows_host, (time.perf_counter() - t0) / len(group.rows_host)))
        self.steps.index_add_(0, layout.slots, torch.ones_like(layout.slots))
        names = tuple(columns)
        self._keep(layout, names, torch.stack([columns[name] for name in names], dim=1), times)
        return SamplerOutput(sampled_token_ids=out, logprobs_tensors=None)

    def _keep(self, layout: Layout, names: tuple[str, ...], records: torch.Tensor,
              times: list[tuple[list[int], float]]) -> None:
        """Copy the step's records off the device without waiting; write them every ``FLUSH_EVERY`` steps."""
        ready = None
        if records.is_cuda:
            host = torch.empty(records.shape, dtype=records.dtype, pin_memory=True)
            host.copy_(records, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        else:
            host = records
        self.log.pending.append(PendingStep(layout, names, host, ready, times))
        if len(self.log.pending) >= FLUSH_EVERY:
            self.log.write()


class FlushExtension:
    """Mixed into vLLM's worker (``worker_extension_cls``): lets the driver ask the adapter to write its records."""

    def relaxbench_flush(self) -> None:
        sampler = getattr(getattr(self, "model_runner", None), "rejection_sampler", None)
        if isinstance(sampler, RelaxbenchRejectionSampler):
            sampler.flush()


def rule_extra_args(rule: RuleRequest, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``SamplingParams.extra_args`` that carry ``rule`` to the adapter."""
    return {**dict(extra or {}), EXTRA_KEY: rule.model_dump()}


