"""The ``native`` arm: vLLM's own rejection sampler, so a run states how the adapter's rules agree with it.

On the vllm engine a request whose rule is ``native`` goes through vLLM's ``RejectionSampler`` unchanged (the
adapter only counts its verdicts). Through the adapter, when a request asks for relaxbench's version
(``RuleRequest.adapter``, as the tests do), the rule is relaxbench's lossless verdict: exact match under greedy
decoding, speculative sampling under sampling, with point-mass drafts when the drafter has no distribution (what
vLLM does for n-gram drafts). Registered as a policy when the vLLM integration is imported (``compare --engine
vllm`` imports it before planning), so methods, cells and reports treat it like any rule; it is not an entry point,
so it is not a rule of the transformers engine and ``relaxbench list policies`` does not list it.
"""

from __future__ import annotations

from relaxbench.integrations.vllm_rules import NATIVE
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
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


def register_native() -> None:
    """Register the ``native`` rule unless it is: idempotent, so every path that needs it (the vLLM executor,
    the adapter, the spec snapshot) can ask, whatever was registered or unregistered before."""
    from relaxbench.policies import POLICIES

    if NATIVE not in POLICIES:
        register_policy(NativePolicy)


register_native()
