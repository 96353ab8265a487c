"""Judge-style verification without training: reflective verification (arXiv 2505.18629), the target judging
its own drafts in the same forward pass.

The verify forward runs over ``[pending, d_1..d_k, R, d_1..d_k]``, where ``R`` is a reflection prompt (a knob;
tokenized once in ``bind``). The first span gives the usual logits ``z0_i``; the duplicated span, read after the
model has seen the whole draft and the prompt, gives "reflective" logits ``zr_i`` for the same positions. They are
fused as ``z_i = (1 − α)·z0_i + α·zr_i`` (α = 0.3 as in the lossy-token-eff reimplementation, which calls it RV's
default; the paper's exact prompt and fusion are unverified). The engine appends ``R, d_1..d_k`` through
``extra_verify_tokens`` and drops their cache entries after the round.

Default prompt (``DEFAULT_REFLECTION``): "\\n\\nLet me double-check the text above and write it again, correcting
any mistake:\\n" — written for this suite; any text works (``--knob prompt='...'``).

The judge can only *rescue* drafts; every token it emits itself comes from the target, as in the rest of the suite:

* Greedy: accept ``d_i`` iff it is the target's argmax or the argmax of the fused logits; the correction token is
  the target's argmax.
* Sampling: accept ``x ~ q`` with probability ``min(1, max(p, π)(x)/q(x))``, ``π`` the fused distribution after the
  run's temperature/top-k/top-p; after a rejection sample ``norm((p − q)+)``; the bonus token comes from ``p``.
  With an n-gram drafter (no ``q``) the drafts are point masses. Acceptance is a superset of speculative sampling
  with the same uniforms.

``α = 0`` is exactly ``exact`` / ``speculative-sampling``. The fusion weight is not a monotone looseness knob (the
reflective view can favour the draft at one α and not at a larger one); every α ≥ 0 accepts at least what the
strict rule accepts.
"""

from __future__ import annotations

import torch
from pydantic import model_validator

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import argmax
from relaxbench.ops.rejection import rejection_sample
from relaxbench.ops.sampling import logits_to_probs
from relaxbench.policies.base import Block, Need, PolicyEnv, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Number, Spec, Text

DEFAULT_REFLECTION = "\n\nLet me double-check the text above and write it again, correcting any mistake:\n"


@register_policy
class ReflectiveJudge(VerificationPolicy):
    name = "judge"
    needs = frozenset({Need.EXTRA_TOKENS})
    strict_knobs = {"alpha": 0.0}
    summary = "reflective verification: fused logits (1-alpha) z0 + alpha zr, read after a reflection prompt"

    class Knobs(Spec):
        alpha: Number = 0.3
        prompt: Text = DEFAULT_REFLECTION

        @model_validator(mode="after")
        def _check(self):
            if not 0 <= self.alpha <= 1:
                raise ValueError("alpha must be in [0, 1]")
            return self

    def __init__(self, knobs=None) -> None:
        super().__init__(knobs)
        self.reflection: torch.Tensor | None = None

    def bind(self, env: PolicyEnv) -> None:
        ids = env.tokenizer.encode(self.knobs.prompt, add_special_tokens=False)
        if not ids:
            raise ConfigError("policy 'judge': the reflection prompt tokenizes to nothing")
        self.reflection = torch.tensor(ids, dtype=torch.long, device=env.device)

    def extra_verify_tokens(self, draft_tokens: torch.Tensor) -> torch.Tensor | None:
        if draft_tokens.numel() == 0 or self.knobs.alpha == 0:  # α = 0 never reads the reflective logits
            return None
        if self.reflection is None:
            raise RuntimeError("policy 'judge' was not bound to a tokenizer")
        return torch.cat([self.reflection.to(draft_tokens.device), draft_tokens])

    def reflective_logits(self, block: Block) -> torch.Tensor:
        """[k+1, V] logits read after ``R, d_1..d_{i−1}``, aligned with ``block.target_logits``."""
        extra = block.extras["extra_logits"]
        m = int(extra.shape[0]) - block.k
        return extra[m - 1: m + block.k]

    def fused_logits(self, block: Block, rows: torch.Tensor) -> torch.Tensor:
        """[m, V] ``(1 − α)·z0 + α·zr`` at draft positions ``rows``."""
        alpha = self.knobs.alpha
        return torch.add((1 - alpha) * block.target_logits[rows].float(),
                         self.reflective_logits(block)[rows].float(), alpha=alpha)

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            if self.knobs.alpha == 0:
                return greedy_verdict(block)
            def fused_argmax_is_draft(rows: torch.Tensor) -> torch.Tensor:
                return argmax(self.fused_logits(block, rows)) == block.draft_tokens[rows]

            return greedy_verdict(block, fused_argmax_is_draft)
        p = block.target_probs
        pi = p[:-1]
        if self.knobs.alpha > 0:
            all_drafts = torch.arange(block.k, device=block.draft_tokens.device)
            pi = torch.maximum(pi, logits_to_probs(self.fused_logits(block, all_drafts), block.sampling))
        q = block.draft_probs if block.draft_logits is not None else None
        return rejection_sample(block.draft_tokens, q, pi, p[:-1], p[-1], block.generator, strict_p=p[:-1])
