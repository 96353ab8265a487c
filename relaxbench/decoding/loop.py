"""The one generation loop, for every arm. The autoregressive baseline is this loop with no drafter (k = 0).

prefill → repeat { propose → one target forward over [pending, d_1..d_k, extras] → policy verdict → commit →
roll both caches back to the committed sequence } until EOS, a stop string or max_new_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from relaxbench.decoding.cache import CachedLM
from relaxbench.decoding.drafters import Drafter, Proposal
from relaxbench.decoding.records import GenerationResult, RoundLog
from relaxbench.decoding.stops import decode_output, stop_string_end
from relaxbench.errors import ConfigError
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies.arm import check_arm, drafter_duties
from relaxbench.policies.base import Block, Need, PolicyEnv, VerificationPolicy
from relaxbench.timing import Clock


@dataclass(frozen=True)
class DecodeConfig:
    k: int = 5  # draft tokens per round (0: autoregressive)
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 0 or self.max_new_tokens < 1:
            raise ConfigError(f"need k >= 0 and max_new_tokens >= 1 (got k={self.k}, "
                              f"max_new_tokens={self.max_new_tokens})")


def check_compatible(policy: VerificationPolicy, drafter: Drafter | None, sampling: SamplingParams) -> None:
    """Configuration-time checks, so an incompatible arm fails before any decoding (``policies.arm.check_arm``,
    which needs no loaded model, on the arm's own policy and drafter)."""
    check_arm(policy, sampling, drafter)


class SpeculativeDecoder:
    """Owns the target cache and runs the loop; one instance per (target, drafter, policy, config) arm."""

    def __init__(self, target, drafter: Drafter | None, policy: VerificationPolicy, config: DecodeConfig) -> None:
        check_compatible(policy, drafter, config.sampling)
        self.target, self.drafter, self.policy, self.config = target, drafter, policy, config
        self.lm = CachedLM(target.model)
        self.clock = Clock(target.device)
        self.eos = torch.tensor(sorted(target.eos_token_ids), dtype=torch.long, device=target.device)
        self.want_hidden = Need.HIDDEN_STATES in policy.needs
        duties = drafter_duties(policy, config.sampling)
        self.draft_sampling = duties.sampling
        if drafter is not None:
            drafter.keep_logits, drafter.keep_hidden = duties.keep_logits, duties.keep_hidden
        policy.bind(PolicyEnv(target.tokenizer, target.logit_dim, target.device, getattr(target, "name", None),
                              None if drafter is None else drafter.model_name))

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], seed: int | None = None) -> GenerationResult:
        """One completion of ``prompt_ids``; its random stream is seeded with ``seed`` (default: the config's)."""
        cfg, clock, lm, k_max = self.config, self.clock, self.lm, (self.config.k if self.drafter else 0)
        generator = torch.Generator(self.target.device).manual_seed(cfg.seed if seed is None else seed)
        prompt = torch.tensor(prompt_ids, dtype=torch.long, device=self.target.device)
        context, rounds, stop_reason = prompt, RoundLog(), "length"
        t_start = clock.now()
        self.policy.reset()
        lm.reset()
        if self.drafter is not None:
            self.drafter.reset(prompt)
        if prompt.shape[0] > 1:
            lm.run(prompt[:-1], n_logits=0)
        t_prefill = clock.now() - t_start
        while (emitted := context.shape[0] - prompt.shape[0]) < cfg.max_new_tokens:
            t0 = clock.now()
            k = min(k_max, cfg.max_new_tokens - emitted - 1)
            proposal = self.drafter.propose(context, k, self.draft_sampling, generator) if k > 0 else _EMPTY
            drafts = proposal.tokens.to(context.device)
            extra = self.policy.extra_verify_tokens(drafts)
            n_extra = 0 if extra is None else int(extra.shape[0])
            t1 = clock.now()
            pending = lm.pending(context)
            feed = torch.cat([pending, drafts] + ([extra] if n_extra else []))
            out = lm.run(feed, n_logits=1 + drafts.shape[0] + n_extra, want_hidden=self.want_hidden)
            t2 = clock.now()
            block = Block(drafts, out.logits[: drafts.shape[0] + 1], _draft_logits(proposal, out.logits.shape[-1]),
                          cfg.sampling, generator, _extras(out, proposal, drafts.shape[0], n_extra), context,
                          int(prompt.shape[0]))
            t3 = clock.now()
            verdict = self.policy.verify(block)
            t4 = clock.now()
            new = torch.cat([drafts[: verdict.n_accepted], drafts.new_tensor([verdict.next_token])])
            new, stop_reason = self._truncate(context, new, prompt.shape[0])
            context = torch.cat([context, new])
            lm.sync_to(context)
            if self.drafter is not None:
                self.drafter.commit(context)
            rounds.add(int(drafts.shape[0]), verdict.n_accepted, verdict.n_relaxed, int(new.shape[0]),
                       t1 - t0, t2 - t1, t4 - t3, n_extra, proposal.forwards, proposal.lookups,
                       verdict.emitted_in_span, verdict.relaxed_in_span)
            if stop_reason != "length":
                break
        t_total = clock.now() - t_start
        output = context[prompt.shape[0]:].tolist()
        text = decode_output(self.target.tokenizer, output, cfg.stop_strings)
        return GenerationResult(list(prompt_ids), output, text, stop_reason, rounds, t_prefill, t_total)

    def _truncate(self, context: torch.Tensor, new: torch.Tensor, prompt_len: int) -> tuple[torch.Tensor, str]:
        """Cut the tokens of a round at the first EOS (kept), at the token that completes a stop string (kept),
        or at max_new_tokens; return them with the stop reason ('length' when decoding goes on)."""
        is_eos = torch.isin(new, self.eos).nonzero()
        reason = "length"
        if is_eos.numel():
            new, reason = new[: int(is_eos[0, 0]) + 1], "eos"
        if self.config.stop_strings:
            generated = torch.cat([context[prompt_len:], new]).tolist()
            cut = stop_string_end(self.target.tokenizer, generated, self.config.stop_strings,
                                   first_new=int(context.shape[0]) - prompt_len)
            if cut is not None:
                new, reason = new[: cut - (int(context.shape[0]) - prompt_len)], "stop"
        return new, reason


_EMPTY = Proposal(torch.empty(0, dtype=torch.long), None)


def _draft_logits(proposal: Proposal, width: int) -> torch.Tensor | None:
    """Draft logits aligned to the target's logit width (vocabularies padded differently are cut or padded)."""
    logits = proposal.logits
    if logits is None or logits.shape[-1] == width:
        return logits
    if logits.shape[-1] > width:
        return logits[:, :width]
    pad = logits.new_full((logits.shape[0], width - logits.shape[-1]), float("-inf"))
    return torch.cat([logits.float(), pad], dim=-1)


def _extras(out, proposal: Proposal, k: int, n_extra: int) -> dict[str, torch.Tensor]:
    """``extra_logits`` (the policy's extra tokens); ``hidden_states`` [k+1, H]: the target's last hidden state at
    the last committed token (row 0) and at each draft token's own position (row i+1 for draft i);
    ``draft_hidden_states`` [k, H_draft]: the draft model's, at each draft token's own position (row i)."""
    extras: dict[str, torch.Tensor] = {}
    if n_extra:
        extras["extra_logits"] = out.logits[k + 1:]
    if out.hidden is not None:
        extras["hidden_states"] = out.hidden[: k + 1]
    if proposal.hidden is not None:
        extras["draft_hidden_states"] = proposal.hidden.to(out.logits.device)
    return extras
