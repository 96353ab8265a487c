"""vLLM's port of FLy: entropy-gated deferral of a native rejection, as vLLM runs it.

Reference: vllm-project/vllm @ v0.33.0 (the first release that ships FLy; read from the PyPI wheel),
``vllm/v1/spec_decode/fly.py``: ``compute_fly_entropy``, ``apply_fly_greedy_acceptance_kernel`` and
``apply_fly_random_acceptance_kernel``, called from ``vllm/v1/sample/rejection_sampler.py`` ``rejection_sample`` (the V1
model runner's pre-pass that rewrites the native kernels' inputs: the target argmax at a deferred position becomes the
draft, or its uniform becomes 0), with the knobs and their checks from ``vllm/config/speculative.py``
(``fly_window_size`` ≥ 1, default min(6, k − 1) and < k; ``fly_entropy_threshold`` ≥ 0, default 0.3;
``fly_entropy_top_k`` ≥ 1, default 3; FLy needs k ≥ 2). The V2 model runner (the default on GPUs with Triton) decides
the same rule inside its rejection kernel (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``): a pending
rejection confirmed by the next W native acceptances. The line-by-line mapping, what the two runners compute
differently, and how it parts from the authors' rule (``fly``, AMD-AGI/FLy) are in docs/conformance.md.

A native rejection at draft position i (of a request with n drafts) is deferred — the draft accepted — when the
next W positions are all accepted natively (on the native decisions, so a rejection inside a window ends it: pending
windows are confirmed one after the other, none nested), i + W < n, the top-``fly_entropy_top_k`` entropy of the
target's distribution at i is at least θ (−Σ p log p over its largest probabilities, not renormalised; the gate
stays on for every θ), and the draft is possible under the target (a finite target logit; under sampling
p(d) > 0 and q(d) > 0). The accepted length is the leading run of native or deferred acceptances.

* Greedy: native = the draft is the target's argmax; the entropy from the raw logits (``logsumexp``, as the V2
  runner computes it; the V1 runner takes the top values of their float32 softmax: the same quantity, rounded
  differently); the next token is the target's argmax at the first rejection, or the bonus.
* Sampling: native = ``p(d)/q(d) ≥ u`` (``u`` float64, as vLLM draws it, on every path that builds a batch) with
  the processed target p (temperature, top-k, top-p as vLLM's ``apply_top_k_top_p``: among tokens tied at the top-p
  cut the higher ids stay) and the draft's q when the drafter has one (vLLM's
  ``draft_sample_method="probabilistic"``), else point-mass drafts, ``p(d) ≥ u``
  (vLLM's greedy draft sampling and n-gram drafts: the one-sample test; the V2 runner tests
  ``log p(d) > log u + log q(d)`` with its own uniforms); the entropy from p (V1; V2: from the processed logits,
  the same quantity); after a rejection ``norm((p − q)+)`` (p without the draft for point masses), the bonus from
  p. ``n_relaxed`` counts the deferrals.

θ = inf is the strict end (vLLM's check admits it: the gate never passes, so the rule is the native sampler).

Deviations (why, in docs/conformance.md):

* k is the engine's draft length for the run (``PolicyEnv.draft_length``), or the step's longest draft when a rule
  is used unbound (tests, benchmarks); the window test reads each request's own draft count, as vLLM's kernels;
* the deferral decided with tensor operations over the whole batch (vLLM: a sequential loop per request; the
  decisions are the same, as each reads only native decisions);
* the token after a rejection drawn by inverse CDF (vLLM: exponential-noise argmax; the same distribution);
* sampling follows the V1 runner's test (``p(d)/q(d) ≥ u``, float64 uniforms), not the V2 runner's strict log-space
  test with its counter-based uniforms (the same acceptance probability);
* vLLM runs FLy on a GPU only (V1 raises ``NotImplementedError`` on a CPU; V2 needs Triton); this runs anywhere.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import top_values
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, PolicyEnv, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.policies.verdict import by_mode
from relaxbench.validation import Integer, Number, Spec

DEFAULT_WINDOW = 6  # vLLM: fly_window_size defaults to min(6, num_speculative_tokens - 1)


def default_window(k: int) -> int:
    """vLLM's default ``fly_window_size`` for draft length ``k``."""
    return min(DEFAULT_WINDOW, k - 1)


def check_draft_length(window: int | None, k: int) -> None:
    """Refuse, in one line, a draft length or window vLLM's FLy refuses: k < 2, or a window not below k."""
    if k < 2:
        raise ConfigError(f"rule 'fly-vllm' needs a draft length k of at least 2 (vLLM's FLy does), got k = {k}")
    if window is not None and window >= k:
        raise ConfigError(f"rule 'fly-vllm': fly_window_size ({window}) must be smaller than the draft length "
                          f"k ({k}), as vLLM requires")


def topk_entropy(rows: torch.Tensor, top_k: int, from_logits: bool) -> torch.Tensor:
    """[N] float32: vLLM's ``compute_fly_entropy`` of each row of ``rows`` [N, V] (logits, or probabilities): the
    entropy over the ``top_k`` largest probabilities, not renormalised, 0·log 0 taken as 0."""
    rows = rows.float()
    top = top_values(rows, top_k)
    if from_logits:
        log_p = top - torch.logsumexp(rows, dim=-1, keepdim=True)
        p = log_p.exp()
    else:
        p, log_p = top, top.log()
    return -torch.where(p > 0, p * log_p, torch.zeros_like(p)).sum(dim=-1)


def deferred(native: torch.Tensor, possible: torch.Tensor, gate: torch.Tensor, window: int,
             ends: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: native rejections whose next ``window`` positions are all natively accepted, with
    ``i + window < end`` (``ends`` [B, K]: the request's draft count, or its run's end), where the draft is
    ``possible`` and the entropy ``gate`` passes."""
    width = int(native.shape[-1])
    counts = torch.nn.functional.pad(native.long(), (0, window + 1)).cumsum(dim=-1)  # native acceptances in 0..j
    positions = torch.arange(width, device=native.device)
    following = counts[:, positions + window] - counts[:, positions]  # native acceptances in i+1 .. i+W
    return ~native & possible & gate & (following == window) & (positions + window < ends)


@register_policy
class FLyVLLM(VerificationPolicy):
    name = "fly-vllm"
    uniform_dtype = torch.float64  # vLLM's generate_uniform_probs draws float64 (every path keeps it)
    needs = frozenset({Need.DRAFT_PROBS_IF_ANY})
    modes = Modes(strict_knobs={"fly_entropy_threshold": math.inf},
                  loosening={"fly_entropy_threshold": (math.inf, 1.0, 0.6, 0.3, 0.1, 0.0),
                             "fly_window_size": (8, 6, 4, 3, 2, 1),
                             "fly_entropy_top_k": (1, 2, 3, 5, 10)})
    origin = Origin(Fidelity.REFERENCE,
                    "vllm-project/vllm@v0.33.0 vllm/v1/spec_decode/fly.py apply_fly_greedy_acceptance_kernel, "
                    "apply_fly_random_acceptance_kernel",
                    "vLLM's FLy: defer a native rejection when the next W positions are accepted natively and the "
                    "target's top-k entropy >= theta",
                    revision=1)  # the loop keeps the float64 uniforms; n_relaxed counts deferrals only

    class Knobs(Spec):
        fly_window_size: Integer | None = Field(None, ge=1)  # W; None: min(6, k - 1)
        fly_entropy_threshold: Number = Field(0.3, ge=0)  # θ (nats), ≥ 0 as vLLM checks; inf = the native sampler
        fly_entropy_top_k: Integer = Field(3, ge=1)  # probabilities the entropy sums over (capped at V)

    def __init__(self, knobs=None) -> None:
        super().__init__(knobs)
        self.draft_length: int | None = None

    def bind(self, env: PolicyEnv) -> None:
        if env.draft_length is not None:
            check_draft_length(self.knobs.fly_window_size, env.draft_length)
        self.draft_length = env.draft_length

    def window(self, width: int) -> int:
        """W for a step whose longest draft is ``width``: the knob, or vLLM's default for the run's k."""
        if self.knobs.fly_window_size is not None:
            return self.knobs.fly_window_size
        return max(default_window(self.draft_length or width), 1)

    @property
    def strict(self) -> bool:
        return math.isinf(self.knobs.fly_entropy_threshold) and self.knobs.fly_entropy_threshold > 0

    def gate(self, entropy: torch.Tensor, batch: Batch) -> torch.Tensor:
        """[B, K] the entropy gate per draft position from the ``entropy`` [T] of each real draft position's row."""
        return batch.per_position(entropy >= self.knobs.fly_entropy_threshold, False)

    def judge(self, batch: Batch) -> Judgement:
        return by_mode(batch, lambda: self.greedy(batch), lambda: self.sampled(batch))

    def greedy(self, batch: Batch) -> Judgement:
        if self.strict:
            return greedy_judgement(batch)
        entropy = topk_entropy(batch.target_draft_rows, self.knobs.fly_entropy_top_k, from_logits=True)
        possible = batch.target_logit_of_drafts > -math.inf
        defer = deferred(batch.matches, possible, self.gate(entropy, batch), self.window(batch.width), batch.ends)
        return greedy_judgement(batch, defer)

    def sampled(self, batch: Batch) -> Judgement:
        p_d = batch.p_of_drafts
        point_mass = not batch.has_draft_distribution
        q_d = torch.ones_like(p_d) if point_mass else batch.q_of_drafts
        native = (q_d > 0) & (p_d / q_d >= batch.accept_u)

        def relax(accepted: torch.Tensor) -> torch.Tensor:
            rows = batch.p.index_select(0, batch.target_rows_of_pairs())
            entropy = topk_entropy(rows, self.knobs.fly_entropy_top_k, from_logits=False)
            possible = (p_d > 0) & (q_d > 0)
            return accepted | deferred(accepted, possible, self.gate(entropy, batch), self.window(batch.width),
                                       batch.ends)

        return rejection_judgement(batch, lambda _scaled: native, batch.p_at, batch.p_at, point_mass=point_mass,
                                   strict_accept=native, relax=None if self.strict else relax)
