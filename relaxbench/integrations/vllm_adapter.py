"""relaxbench's verification rules inside vLLM's speculative-decoding step: one adapter for every rule.

vLLM verifies a whole batch at once: the drafts of every request flattened into one tensor (``draft_token_ids``,
split by ``cu_num_draft_tokens``), the target's logits at every draft position and every bonus position, the
drafter's probabilities (None for n-gram drafts) and the batch's sampling settings. ``RelaxbenchRejectionSampler``
cuts that batch back into one ``Block`` per request, calls the request's ``VerificationPolicy.verify`` — the same
policy object, the same code, as relaxbench's own loop — and writes the verdict in vLLM's output layout: the accepted
drafts, then the correction or bonus token, the rest of the row ``PLACEHOLDER_TOKEN_ID``.

The rule is read per request from ``SamplingParams.extra_args["relaxbench"]`` (a ``RuleRequest``), so one engine
serves every arm of a (target, drafter, k). A request without a rule, or with ``policy: native``, goes through
vLLM's own rejection sampler (the ``native`` arm): then the adapter only records its counts.

Per request and step the adapter records drafted, accepted, relaxed and emitted tokens and the policy's time, and
appends them as JSON lines to the request's log file (``RuleRequest.log``), which the worker reads back.

vLLM has no registry for its rejection sampler: the model runner builds it in ``GPUModelRunner.__init__`` (which the
CPU runner inherits). ``relaxbench.integrations.vllm_plugin`` puts this class at that one place; this class reads
the batch's request ids from the runner that builds it (the constructing frame's ``self``), because the sampler's
own arguments carry no request identity. ``tests/test_vllm_pin.py`` fails with a clear message if that place moves.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, RejectionSampler

from relaxbench.integrations import vllm_native  # noqa: F401  (registers relaxbench's version of the native rule)
from relaxbench.integrations.vllm_batch import output_row, request_block
from relaxbench.integrations.vllm_rules import EXTRA_KEY, NATIVE, RuleRequest, check_rule
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import VerificationPolicy, make_policy


def constructing_runner(depth: int = 2) -> Any:
    """The model runner whose ``__init__`` is building the sampler (its frame's ``self``)."""
    frame = sys._getframe(depth)
    runner = frame.f_locals.get("self")
    if frame.f_code.co_name != "__init__" or not type(runner).__name__.endswith("ModelRunner"):
        raise RuntimeError("relaxbench's vLLM adapter must be built by the model runner's __init__, but "
                           f"{frame.f_code.co_qualname} built it: the pinned vLLM version moved the sampler")
    return runner


@dataclass
class RequestState:
    """One request's rule and its records so far (flushed to its log file every step)."""

    rule: RuleRequest
    policy: VerificationPolicy | None
    pending: list[dict[str, Any]] = field(default_factory=list)


class RelaxbenchRejectionSampler(RejectionSampler):
    """vLLM's rejection sampler with relaxbench's rules: per request, the rule its ``extra_args`` name."""

    def __init__(self, sampler: Any, spec_config: Any = None, device: torch.device | None = None) -> None:
        super().__init__(sampler, spec_config, device)
        self.runner = constructing_runner()
        self.states: dict[str, RequestState] = {}
        self.fallback_generator = torch.Generator(device="cpu").manual_seed(0)

    # ---------------------------------------------------------------------------------------- per request

    def _state(self, req_id: str) -> RequestState:
        state = self.states.get(req_id)
        if state is None:
            params = self.runner.requests[req_id].sampling_params
            extra = (getattr(params, "extra_args", None) or {}).get(EXTRA_KEY)
            rule = RuleRequest.model_validate(extra) if extra is not None else RuleRequest(tag=req_id)
            policy = None
            if rule.policy != NATIVE or rule.adapter:
                policy = make_policy(rule.policy, rule.knobs)
                check_rule(policy)
                policy.reset()
            state = self.states[req_id] = RequestState(rule, policy)
        return state

    def _flush(self, live: set[str]) -> None:
        """Append every request's new step records to its log, and forget requests that left the batch."""
        for req_id, state in list(self.states.items()):
            if state.pending and state.rule.log:
                with open(state.rule.log, "a", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(line) + "\n" for line in state.pending)
            state.pending.clear()
            if req_id not in live and req_id not in self.runner.requests:
                del self.states[req_id]

    # ---------------------------------------------------------------------------------------- the step

    def forward(self, metadata: Any, draft_probs: torch.Tensor | None, logits: torch.Tensor,
                sampling_metadata: Any) -> SamplerOutput:
        counts = metadata.num_draft_tokens
        req_ids = list(self.runner.input_batch.req_ids[: len(counts)])
        states = [self._state(r) for r in req_ids]
        native = None
        if any(s.policy is None for s in states):
            native = super().forward(metadata, draft_probs, logits, sampling_metadata)
            if all(s.policy is None for s in states):
                self._record_native(states, counts, native.sampled_token_ids)
                self._flush(set(req_ids))
                return native
        width = metadata.max_spec_len + 1
        out = torch.full((len(counts), width), PLACEHOLDER_TOKEN_ID, dtype=torch.int32)
        for i, (state, n) in enumerate(zip(states, counts)):
            if state.policy is None:
                assert native is not None
                out[i] = native.sampled_token_ids[i].cpu()
                self._record_native([state], [n], native.sampled_token_ids[i: i + 1])
                continue
            block = request_block(i, counts, metadata.draft_token_ids, metadata.target_logits_indices,
                                  metadata.bonus_logits_indices, logits, draft_probs,
                                  self._sampling(sampling_metadata, i, int(logits.shape[-1])),
                                  sampling_metadata.generators.get(i, self.fallback_generator))
            t0 = time.perf_counter()
            verdict = state.policy.verify(block)
            t_policy = time.perf_counter() - t0
            out[i] = output_row(block, verdict, width, PLACEHOLDER_TOKEN_ID)
            state.pending.append({"tag": state.rule.tag, "drafted": n, "accepted": verdict.n_accepted,
                                  "relaxed": verdict.n_relaxed, "emitted": verdict.n_accepted + 1,
                                  "t_policy": t_policy})
        out = out.to(logits.device)
        self._flush(set(req_ids))
        return SamplerOutput(sampled_token_ids=out, logprobs_tensors=None)

    @staticmethod
    def _record_native(states: list[RequestState], counts: list[int], sampled: torch.Tensor) -> None:
        valid = (sampled != PLACEHOLDER_TOKEN_ID).sum(dim=1).tolist()
        for state, n, emitted in zip(states, counts, valid):
            state.pending.append({"tag": state.rule.tag, "drafted": n, "accepted": emitted - 1, "relaxed": 0,
                                  "emitted": emitted, "t_policy": 0.0})

    @staticmethod
    def _sampling(meta: Any, i: int, vocab: int) -> SamplingParams:
        """Request ``i``'s sampling settings as relaxbench's ``SamplingParams`` (vLLM keeps 0 for greedy, the
        vocabulary size for no top-k)."""
        if meta.all_greedy or meta.temperature is None or float(meta.temperature[i]) <= 0:
            return SamplingParams()
        top_k = 0 if meta.top_k is None else int(meta.top_k[i])
        return SamplingParams(float(meta.temperature[i]), 0 if top_k <= 0 or top_k >= vocab else top_k,
                              1.0 if meta.top_p is None else float(meta.top_p[i]))


def rule_extra_args(rule: RuleRequest, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``SamplingParams.extra_args`` that carry ``rule`` to the adapter."""
    return {**dict(extra or {}), EXTRA_KEY: rule.model_dump()}


