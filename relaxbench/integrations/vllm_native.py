"""The ``native`` arm: vLLM's own rejection sampler, so a run states how the adapter's rules agree with it.

On the vllm engine a request whose rule is ``native`` goes through vLLM's ``RejectionSampler`` unchanged (the
adapter only counts its verdicts). On the transformers engine the same rule is relaxbench's: exact match under
greedy decoding, speculative sampling under sampling, with point-mass drafts when the drafter has no
distribution (what vLLM does for n-gram drafts). Registered as a policy (entry point ``relaxbench.policies:
native``) so methods, cells and reports treat it like any rule.
"""

from __future__ import annotations

from relaxbench.integrations.vllm_rules import NATIVE
from relaxbench.ops.rejection import rejection_sample
from relaxbench.policies import POLICIES, Block, Verdict, VerificationPolicy
from relaxbench.policies.base import Fidelity
from relaxbench.policies.greedy import greedy_verdict


class NativePolicy(VerificationPolicy):
    name = NATIVE
    lossless = True
    uses_draft_probs_if_any = True
    fidelity = Fidelity.BASELINE
    reference = "vLLM 0.32.0 vllm/v1/sample/rejection_sampler.py (arXiv 2211.17192)"
    summary = ("vLLM's own rejection sampler on the vllm engine; elsewhere exact match (greedy) / speculative "
               "sampling (point-mass drafts without q): lossless")

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            return greedy_verdict(block)
        p = block.p_rows
        q = None if block.draft_logits is None else block.q_rows
        return rejection_sample(block.draft_tokens, q, p, p, lambda: p[block.k], block.generator)


POLICIES.add(NATIVE, NativePolicy)
