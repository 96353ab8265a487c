"""The one generation loop, for every arm. The autoregressive baseline is this loop with no drafter (k = 0).

prefill → repeat { propose → one target forward over [pending, d_1..d_k, extras] → the policy decides a batch of
one → commit → roll both caches back to the committed sequence } until EOS, a stop string or max_new_tokens.

The round's one host synchronisation is the copy of the verdict together with the drafts: what is committed, and
the EOS and stop-string checks, are then read on the host.
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
from relaxbench.policies.base import Block, Need, PolicyEnv, VerificationPolicy
from relaxbench.policies.batch import Batch
from relaxbench.policies.compatibility import check_compatibility, drafter_duties
from relaxbench.policies.verdict import Outcome
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
    """Configuration-time checks, so a rule that cannot run with its drafter in its mode fails before any decoding
    (``policies.compatibility.check_compatibility``, which needs no loaded model, on the decoder's own policy and
    drafter)."""
    check_compatibility(policy, sampling, drafter)


class SpeculativeDecoder:
    """Owns the target cache and runs the loop; one instance per (target, drafter, policy, config)."""

    def __init__(self, target, drafter: Drafter | None, policy: VerificationPolicy, config: DecodeConfig) -> None:
        check_compatible(policy, drafter, config.sampling)
        self.target, self.drafter, self.policy, self.config = target, drafter, policy, config
        self.lm = CachedLM.configured(target.model)
        self.clock = Clock(target.device)
        self.eos_ids = frozenset(int(t) for t in target.eos_token_ids)
        self.want_hidden = Need.HIDDEN_STATES in policy.needs
        self.feed_layers = () if drafter is None else tuple(drafter.hidden_layers)  # a head fed by the target
        duties = drafter_duties(policy, config.sampling)
        self.draft_sampling = duties.sampling
        if drafter is not None:
            drafter.keep_logits, drafter.keep_hidden = duties.keep_logits, duties.keep_hidden
        policy.bind(PolicyEnv(target.tokenizer, target.logit_dim, target.device, getattr(target, "name", None),
                              None if drafter is None else drafter.model_name,
                              None if drafter is None else config.k))

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], seed: int | None = None) -> GenerationResult:
        """One completion of ``prompt_ids``; its random stream is seeded with ``seed`` (default: the config's)."""
        cfg, clock, lm, k_max = self.config, self.clock, self.lm, (self.config.k if self.drafter else 0)
        generator = torch.Generator(self.target.device).manual_seed(cfg.seed if seed is None else seed)
        prompt = torch.tensor(prompt_ids, dtype=torch.long, device=self.target.device)
        self.prepare(len(prompt_ids))
        context, output, rounds, stop_reason = prompt, [], RoundLog(), "length"
        t_start = clock.now()
        self.policy.reset()
        self.policy.observe(prompt_ids)
        lm.reset()
        if self.drafter is not None:
            self.drafter.reset(prompt)
        if prompt.shape[0] > 1:
            self._observed(0, prompt[:-1], lm.run(prompt[:-1], n_logits=0, hidden_layers=self.feed_layers))
        t_prefill = clock.now() - t_start
        while (emitted := context.shape[0] - prompt.shape[0]) < cfg.max_new_tokens:
            t0 = clock.now()
            k = min(k_max, cfg.max_new_tokens - emitted - 1)
            proposal = self.drafter.propose(context, k, self.draft_sampling, generator) if k > 0 else _EMPTY
            drafts = proposal.tokens.to(context.device)
            extra = self.policy.extra_verify_tokens(drafts)
            n_extra = 0 if extra is None else int(extra.shape[0])
            t1 = clock.now()
            pending, start = lm.pending(context), lm.length
            feed = torch.cat([pending, drafts] + ([extra] if n_extra else []))
            out = lm.run(feed, n_logits=1 + drafts.shape[0] + n_extra, want_hidden=self.want_hidden,
                         hidden_layers=self.feed_layers)
            self._observed(start, feed, out)
            t2 = clock.now()
            n_drafts = int(drafts.shape[0])
            block = Block(drafts, out.logits[: n_drafts + 1], _draft_logits(proposal, out.logits.shape[-1]),
                          cfg.sampling, generator, _extras(out, proposal, n_drafts, n_extra))
            uniforms = self.policy.uniforms(generator, n_drafts, cfg.sampling)
            t3 = clock.now()
            verdict = self.policy.decide(Batch.of_blocks([block], self.policy.uniform_dtype, [uniforms]))
            host = torch.cat([verdict.stacked()[0], drafts]).tolist()  # the round's one synchronisation
            t4 = clock.now()
            names = verdict.columns()
            fields = len(names)
            outcome = Outcome.from_host(host[:fields], names)
            new, stop_reason = self._truncate(host[fields: fields + outcome.n_accepted] + [outcome.next_token], output)
            output += new
            context = torch.cat([context, torch.tensor(new, dtype=torch.long, device=context.device)])
            self.policy.observe(new)
            lm.sync_to(context)
            if self.drafter is not None:
                self.drafter.commit(context)
            rounds.add(drafted=n_drafts, accepted=outcome.n_accepted, relaxed=outcome.n_relaxed, emitted=len(new),
                       t_draft=t1 - t0, t_verify=t2 - t1, t_policy=t4 - t3, extra=n_extra,
                       draft_forwards=proposal.forwards, lookups=proposal.lookups,
                       emitted_in_span=outcome.emitted_in_span, relaxed_in_span=outcome.relaxed_in_span,
                       **outcome.facts)
            if stop_reason != "length":
                break
        t_total = clock.now() - t_start
        text = decode_output(self.target.tokenizer, output, cfg.stop_strings)
        return GenerationResult(list(prompt_ids), output, text, stop_reason, rounds, t_prefill, t_total)

    def prepare(self, prompt_tokens: int) -> None:
        """Before timing: room in static caches for a prompt of ``prompt_tokens`` tokens, the budget, a round's
        drafts and the policy's extra tokens; with graphs, capture the target's forwards of 1..k+1 tokens (a round's
        verify forward and the autoregressive step) and the drafter's. Captures happen once per cache size (a
        longer prompt than any before may grow the cache, and then captures again); their cost is in
        ``graph_report``. A dynamic cache has nothing to prepare."""
        k_max = self.config.k if self.drafter else 0
        positions = prompt_tokens + self.config.max_new_tokens + 2 * (k_max + 1) + EXTRA_SLACK
        lm = self.lm
        if lm.static:
            lm.reserve(positions)
            if lm.graphs:
                lm.reset()
                lm.capture(range(1, k_max + 2), want_hidden=self.want_hidden, hidden_layers=self.feed_layers)
        prepare = getattr(self.drafter, "prepare", None)  # a duck-typed drafter (a test's wrapper) may have none
        if prepare is not None:
            prepare(positions, k_max)

    def graph_report(self) -> dict[str, object]:
        """The kv-cache layout and graphs in use, and what capturing them cost (all before timing)."""
        report: dict[str, object] = {"kv_cache": self.lm.kv_cache, "graphs": self.lm.graphs}
        if self.lm.graphs:
            report["target"] = self.lm.report.as_dict()
            report_of = getattr(self.drafter, "graph_report", None)
            drafter = None if report_of is None else report_of()
            if drafter is not None:
                report["drafter"] = drafter
        return report

    def _observed(self, start: int, ids: torch.Tensor, out) -> None:
        """Hand a drafter fed by the target the hidden states it asked for at every position just read."""
        if self.feed_layers:
            self.drafter.observe_target(start, ids, out.layers)

    def _truncate(self, new: list[int], output: list[int]) -> tuple[list[int], str]:
        """Cut the tokens of a round (host ids) at the first EOS (kept), at the token that completes a stop string
        (kept); return them with the stop reason ('length' when decoding goes on)."""
        reason = "length"
        eos = next((i for i, token in enumerate(new) if token in self.eos_ids), None)
        if eos is not None:
            new, reason = new[: eos + 1], "eos"
        if self.config.stop_strings:
            cut = stop_string_end(self.target.tokenizer, output + new, self.config.stop_strings,
                                  first_new=len(output))
            if cut is not None:
                new, reason = new[: cut - len(output)], "stop"
        return new, reason


EXTRA_SLACK = 16  # cache room, with another k + 1, for a policy's extra verify tokens (reflective: k + 1)

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
