"""Build the decoder for one method: a method spec and loaded models in, a ready ``SpeculativeDecoder`` out.

With it, the checks that come before any weight loads (the method against ``--draft`` and the sampling, the draft
head against the target's config, the target's cache, the pair's vocabularies) and the loading of the model pair.
Used by ``generate``, ``compare``, the lm-eval model class and the benchmarks, so every entry point builds a decoder
the same way (and fails the same way on an incompatible combination). The run's arms, the columns of its grid, are
assembled by ``harness/plan.build_arms``; this module builds each arm's decoder.

``relaxbench generate``'s one completion is declared here for every engine: what the command asks
(``CompletionRequest``) and what an engine answers (``Completion``), the two records an executor card's ``generate``
takes and returns (``harness/executor.ExecutorCard``); the transformers engine's own is ``generate_completion``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relaxbench.decoding.drafters import DRAFTERS, Drafter, DrafterInputs
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.decoding.prompts import check_fits_context, encode_prompt
from relaxbench.decoding.records import GenerationResult
from relaxbench.errors import ConfigError
from relaxbench.methods import MODEL_FREE_DRAFTS, DrafterSpec, MethodSpec, check_method_spec, effective_drafter
from relaxbench.ops.sampling_params import SamplingParams
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.compatibility import check_compatibility
from relaxbench.policies.span import gate

DEFAULT_K = 5


def build_drafter(spec: DrafterSpec, target: Any, draft: Any | None) -> Drafter:
    return DRAFTERS.get(spec.kind).build(dict(spec.knobs), DrafterInputs(target, draft))


def check_method(name: str, method: MethodSpec, draft_name: str | None, sampling: SamplingParams) -> None:
    """Whether ``method`` can run with ``--draft draft_name`` under ``sampling``, decided from the registry's classes
    alone, before any model loads: ``methods.check_method_spec`` (the policy's and the drafter's knobs, a drafter
    that needs a draft model given none), then ``policies.compatibility.check_compatibility`` (the policy's modes
    and needs against what the drafter provides). ``name`` (an arm or method) starts the message."""
    check_method_spec(name, method, draft_name)  # the registries are loaded here: their own specs answer
    drafter = effective_drafter(method, draft_name)
    if drafter is None:
        return
    try:
        check_compatibility(POLICIES.get(method.policy), sampling, DRAFTERS.get(drafter.kind))
    except ConfigError as exc:
        raise ConfigError(f"method {name!r} at temperature {sampling.temperature:g}: {exc}") from None


def check_drafter_fits(drafter: DrafterSpec | None, target_config: Any) -> None:
    """What the target's config settles about a drafter (a draft head's fit: hidden size, vocabulary, layer
    ids), before any weight loads."""
    if drafter is not None:
        DRAFTERS.get(drafter.kind).check_target(dict(drafter.knobs), target_config)


# layer kinds whose state is a recurrence, not a per-position KV cache (transformers' ``layer_types`` values)
RECURRENT_LAYER_TYPES = ("linear_attention", "mamba", "mamba2", "recurrent", "conv")


def check_truncatable_cache(target_name: str, config: Any) -> None:
    """relaxbench's loop rolls a rejected draft back by cutting the target's KV cache to the accepted length; a
    hybrid target (Qwen3-Next and Qwen3.5's Gated DeltaNet layers, Mamba hybrids) keeps a recurrent state that a cut
    cannot roll back, so its drafts would be verified against a state that has seen the rejected tokens. Refused
    before any weight loads; vLLM snapshots those states per draft position."""
    for source in (config, getattr(config, "text_config", None)):
        kinds = set(getattr(source, "layer_types", None) or ()) & set(RECURRENT_LAYER_TYPES)
        if kinds:
            architecture = (getattr(config, "architectures", None) or ["?"])[0]
            raise ConfigError(f"target {target_name!r} ({architecture}) has {'/'.join(sorted(kinds))} layers, whose "
                              "recurrent state relaxbench's loop cannot roll back after a rejected draft; run it with "
                              "--engine vllm")


def resolve_k(method: MethodSpec, requested: int | None) -> int:
    """Draft length: the user's ``-k`` wins, then the method's own ``k``, then the default."""
    if requested is not None:
        return requested
    return method.k if method.k is not None else DEFAULT_K


def preview_pair(target_name: str, draft_name: str | None, quiet: bool = False) -> tuple[Any, Any | None]:
    """The draft's vocabulary checked against the target's (from the vocabularies alone: nothing fetched or
    converted), then the target's tokenizer and config, no weights, for the caller to check prompts against its
    context, and the target's cache (``check_truncatable_cache``): every refusal comes before anything loads. Returns the target's preview and the draft's vocabulary
    (None when the drafter needs no model)."""
    from relaxbench.models import check_vocabularies, preview_model

    needs_draft = draft_name is not None and draft_name not in MODEL_FREE_DRAFTS
    draft = check_vocabularies(target_name, draft_name, quiet=quiet) if needs_draft else None
    preview = preview_model(target_name, quiet=quiet)
    check_truncatable_cache(target_name, preview.config)
    return preview, draft


def load_pair(target_name: str, draft_name: str | None, device: str, dtype: str = "auto",
              draft_dtype: str = "auto", quiet: bool = False, device_map: str | None = None) -> tuple[Any, Any | None]:
    """Load the target and (unless the drafter needs no model) the draft model; check they share a vocabulary.

    With a ``device_map`` the target is spread over the GPUs (``models.load``) and the draft sits on the GPU of the
    target's first layer (the first GPU); the draft loads first, so the target's placement sees the memory it
    takes."""
    from relaxbench.models import check_shared_vocab, load_model

    needs_draft = draft_name is not None and draft_name not in MODEL_FREE_DRAFTS
    draft = (load_model(draft_name, dtype=draft_dtype, device=device, quiet=quiet, role="draft")
             if needs_draft and device_map is not None else None)
    target = load_model(target_name, dtype=dtype, device=device, quiet=quiet, device_map=device_map)
    if not needs_draft:
        return target, None
    if draft is None:
        draft = load_model(draft_name, dtype=draft_dtype, device=device, quiet=quiet, role="draft")
    elif draft.device != target.device:  # the target's first layer is elsewhere: the draft joins it there
        draft.model.to(target.device)
        draft.device = target.device
    check_shared_vocab(target, draft)
    return target, draft


def build_decoder(method: MethodSpec, target: Any, draft: Any | None, decode: DecodeConfig,
                  draft_name: str | None = None) -> SpeculativeDecoder:
    """A decoder for ``method`` with the decoding settings ``decode`` (its ``k`` from ``resolve_k``)."""
    policy = gate(make_policy(method.policy, method.knobs), method.relax_in, method.thinking_tags)
    drafter_spec = effective_drafter(method, draft_name)
    if drafter_spec is not None and DRAFTERS.get(drafter_spec.kind).needs_draft_model and draft is None:
        raise ConfigError(f"method {method.name!r} (drafter {drafter_spec.kind!r}) needs a draft model: "
                          "pass --draft NAME (or --draft ngram / --draft layerskip for a model-free drafter)")
    drafter = build_drafter(drafter_spec, target, draft) if drafter_spec is not None else None
    return SpeculativeDecoder(target, drafter, policy, decode)


@dataclass(frozen=True)
class CompletionRequest:
    """What ``relaxbench generate`` asks an engine for: one completion of one method, every flag already checked."""

    target: str
    draft: str | None  # --draft; None where the method drafts nothing (--rule none)
    method: MethodSpec
    decode: DecodeConfig  # k (from ``resolve_k``, cut to what max_new_tokens can use), budget, sampling, stops, seed
    prompt: str
    system: str | None = None
    chat: bool = True  # apply the target's chat template (--no-chat: False)
    dtype: str = "auto"
    draft_dtype: str = "auto"
    device: str = "cpu"  # this process's device, as ``configure_runtime`` resolved --device
    engine_args: Mapping[str, Any] = field(default_factory=dict)  # vLLM's (--engine-arg), as its card checked them

    def encode(self, tokenizer: Any) -> list[int]:
        """The prompt's ids with ``tokenizer``: the system message and the chat template unless ``chat`` is off."""
        return encode_prompt(tokenizer, self.prompt, chat=self.chat, system=self.system)


@dataclass(frozen=True)
class Completion:
    """What an engine answers ``generate`` with: the decoding result with its counters, the rule that verified and
    the k it drafted with (0 without drafting), and a line on the decode path where the engine has one."""

    result: GenerationResult
    rule: str
    k: int
    decode_path: str | None = None


def generate_completion(request: CompletionRequest) -> Completion:
    """One completion on the transformers engine, in this process (the in-process card's ``generate``). The pair's
    tokenizers and configs come first: the vocabularies, a draft head's fit and the prompt's fit in the target's
    context are settled before any weight loads; then the pair loads on ``request.device``, and the method's
    decoder generates."""
    decode = request.decode
    drafter = effective_drafter(request.method, request.draft)
    preview, _ = preview_pair(request.target, request.draft)
    check_drafter_fits(drafter, preview.config)  # a draft head that does not fit: before the target loads
    prompt_ids = request.encode(preview.tokenizer)
    check_fits_context(preview, "--prompt", len(prompt_ids), decode.max_new_tokens, decode.k if drafter else 0)
    target, draft = load_pair(request.target, request.draft, request.device, request.dtype, request.draft_dtype)
    decoder = build_decoder(request.method, target, draft, decode, request.draft)
    result = decoder.generate(prompt_ids)
    return Completion(result, decoder.policy.name, decode.k if decoder.drafter else 0,
                      describe_decode_path(decoder.graph_report()))


def describe_decode_path(report: dict) -> str:
    """One line: the kv-cache layout, and with graphs what was captured (before timing) and what it cost."""
    line = f"kv cache {report['kv_cache']}, graphs {'on' if report['graphs'] else 'off'}"
    for role in ("target", "drafter"):
        if role in report:
            r = report[role]
            line += f"; {role}: {r['graphs']} graphs captured in {r['capture_s']:.2f} s before timing"
    return line
