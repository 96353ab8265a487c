"""SGLang's target-only acceptance thresholds, sampling.

Reference: sgl-project/sglang @ b227f63, ``sgl-kernel/csrc/speculative/speculative_sampling.cuh``
``TreeSpeculativeSamplingTargetOnly`` (selected in ``python/sglang/srt/speculative/eagle_utils.py`` when the run
samples; the thresholds are ``--speculative-accept-threshold-single`` / ``--speculative-accept-threshold-acc``, both
1.0 by default). Our chain is the tree's one-sibling case: at each position the kernel adds the target's
probability of the draft to ``prob_acc`` (reset to 0 after an acceptance, so in a chain it is p(d) itself) and
accepts the draft iff ``coin <= prob_acc / threshold_acc`` or ``p(d) >= threshold_single`` (``threshold_acc``
floored at 1e-9), with one uniform coin per position; the first rejection ends the walk, the rejected token's mass
is removed (``draft_probs`` holds p at the rejected token and 0 elsewhere: the target-only kernel has no draft
distribution) and the correction is drawn from relu(p − that), i.e. p without the rejected token, renormalised;
after a full accept the bonus is drawn from p. p is the processed target distribution (temperature, top-k, top-p:
``eagle_utils.py``). At the strict setting (both thresholds 1) this is speculative sampling with point-mass drafts,
lossless for deterministic drafts (SGLang's EAGLE tree proposes its top tokens).

Knobs: ``threshold_single`` (accept outright at or above this probability; SGLang's default 1.0 is off) and
``threshold_acc`` (divides p(d) in the coin test; default 0.5 here: SGLang's default 1.0 is strict). Loosening:
lower either.

Deviations, deliberate: with a drafter that samples from its own distribution q (a draft model at the run's
temperature) the coin test reads u·q(d) < p(d) / threshold_acc and the residual is relu(p − q) — speculative
sampling, of which the target-only rule is the point-mass case — so the rule stays lossless at its strict setting
for any drafter; with point-mass drafts (n-gram, or a drafter without a distribution) it is the kernel's test and
residual exactly. The coin test is strict (``<``, the shared rejection sampler's) where the kernel's is ``<=``, which
differs only on a set of probability zero; the uniforms are drawn as the shared sampler draws them.

* **Top-p ties by id, not by value.** p is cut as vLLM's ``apply_top_k_top_p`` cuts it (the shared processing:
  among tokens tied at the top-p cut the higher ids stay); SGLang renormalises with FlashInfer's
  ``top_k_renorm_prob``/``top_p_renorm_prob``, which keep every token at or above a probability threshold, so a
  group tied at the cut is kept whole. Measured on tie blocks (integer logits in [−2, 2], V = 8, k = 3, six
  top-k/top-p settings, point-mass drafts): 206 of 2,000 blocks decide differently and 2,231 of 8,000 rows keep a
  different set; without exact ties at the cut the two keep the same set (up to float32 rounding of the
  cumulative mass).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from relaxbench.policies.base import (
    Batch,
    Fidelity,
    Judgement,
    Modes,
    Need,
    Origin,
    VerificationPolicy,
    register_policy,
)
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.validation import Number, Spec

ACC_FLOOR = 1e-9  # speculative_sampling.cuh: capped_threshold_acc = fmaxf(threshold_acc, 1e-9f)


@register_policy
class SGLangThreshold(VerificationPolicy):
    name = "sglang-threshold"
    needs = frozenset({Need.DRAFT_PROBS_IF_ANY})
    modes = Modes(supported={"sampling"}, strict_knobs={"threshold_single": 1.0, "threshold_acc": 1.0},
                  loosening={"threshold_acc": (1.0, 0.8, 0.5, 0.2, 0.0), "threshold_single": (1.0, 0.8, 0.5, 0.0)})
    origin = Origin(Fidelity.REFERENCE,
                    "sgl-project/sglang@b227f63 sgl-kernel/csrc/speculative/speculative_sampling.cuh "
                    "TreeSpeculativeSamplingTargetOnly",
                    "SGLang's target-only thresholds: accept iff coin <= p(d)/threshold_acc or p(d) >= "
                    "threshold_single, else resample without the draft",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        # accept outright when p(d) reaches it (1.0: off, SGLang's default)
        threshold_single: Number = Field(1.0, ge=0, le=1)
        # the coin test is coin < p(d) / threshold_acc (1.0: strict, SGLang's default)
        threshold_acc: Number = Field(0.5, ge=0, le=1)

        @model_validator(mode="after")
        def _check(self):
            if not 0 <= self.threshold_single <= 1:
                raise ValueError("threshold_single must be in [0, 1]")
            if not 0 <= self.threshold_acc <= 1:
                raise ValueError("threshold_acc must be in [0, 1]")
            return self

    def judge(self, batch: Batch) -> Judgement:
        single, acc = self.knobs.threshold_single, max(self.knobs.threshold_acc, ACC_FLOOR)
        p_d = batch.p_of_drafts

        def accepts(scaled):  # scaled = u·q(d), or u for point-mass drafts
            return (scaled < p_d / acc) | (p_d >= single)

        return rejection_judgement(batch, accepts, batch.p_at, batch.p_at,
                                   point_mass=not batch.has_draft_distribution, strict_p=p_d)
