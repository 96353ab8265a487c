"""The ``native`` arm: vLLM's own rejection sampler, so a run states how the adapter's rules agree with it.

On the vllm engine a request whose rule is ``native`` goes through vLLM's ``RejectionSampler`` unchanged (the
adapter only counts its verdicts). Through the adapter, when a request asks for relaxbench's version
(``RuleRequest.adapter``, as the tests do), the rule is relaxbench's lossless verdict: exact match under greedy
decoding, speculative sampling under sampling, with point-mass drafts when the drafter has no distribution (what
vLLM does for n-gram drafts). Registered as a policy when the vLLM integration is imported (``compare --engine
vllm`` imports it before planning), so methods, cells and reports treat it like any rule; it is not an entry point,
so it is not a rule of the transformers engine and ``relaxbench list rules`` does not list it.

``fly-native`` is the same for vLLM's own FLy: on the vllm engine it would run vLLM's FLy where the pinned vLLM ships
it (refused otherwise, in ``vllm_rules.check_rule``); elsewhere it is ``fly-vllm``, whose deviations from vLLM's
code are listed in ``policies/fly_vllm.py``.
"""

from __future__ import annotations

from relaxbench.integrations.vllm_rules import FLY_NATIVE, NATIVE
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.fly_vllm import FLyVLLM
from relaxbench.policies.strict import lossless_judgement


class NativePolicy(VerificationPolicy):
    name = NATIVE
    needs = frozenset({Need.DRAFT_PROBS_IF_ANY})
    modes = Modes(lossless=True)
    origin = Origin(Fidelity.BASELINE, "vLLM 0.32.0 vllm/v1/sample/rejection_sampler.py (arXiv 2211.17192)",
                    "vLLM's own rejection sampler on the vllm engine; elsewhere exact match (greedy) / speculative "
                    "sampling (point-mass drafts without q): lossless")

    def judge(self, batch: Batch) -> Judgement:
        return lossless_judgement(batch)


class FlyNativePolicy(FLyVLLM):
    """vLLM's own FLy on the vllm engine, where the installed vLLM ships it (``vllm_rules.check_rule`` refuses it
    elsewhere); through the adapter, and on any other engine, relaxbench's ``fly-vllm`` with the same knobs. Its
    ``counterpart`` is ``fly-vllm``: a run with both arms shows how closely the two agree (the report's agreement
    table)."""

    name = FLY_NATIVE
    counterpart = FLyVLLM.name  # the report's agreement table sets the two side by side
    origin = Origin(Fidelity.REFERENCE, FLyVLLM.origin.reference,
                    "vLLM's own FLy (rejection_sample_method='fly') on the vllm engine; elsewhere fly-vllm")


def register_native() -> None:
    """Register the engine's own arms (``native``, ``fly-native``) unless they are: idempotent, so every path that
    needs them (the vLLM executor, the adapter, the spec snapshot, the tests) can ask, whatever was registered or
    unregistered before."""
    from relaxbench.policies import POLICIES

    for cls in (NativePolicy, FlyNativePolicy):
        if cls.name not in POLICIES:
            register_policy(cls)


register_native()
