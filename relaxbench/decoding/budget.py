"""Xia et al.'s thinking-budget forcing: a reasoning model still thinking at the budget is told to answer.

Follows graphcore-research/relaxed-spec-dec-repro (commit c28353f), ``src/ens_spec_dec/engines/vllm_offline.py``
(``_generate_batch_with_thinking_budget``, ``QWEN_THINKING_EARLY_STOP_TEXT``) with ``scripts/run_paper_grid.py``'s
caps (``token_caps``: a 32768-token budget within 36864 new tokens). A first generation runs to the budget; if it
ended (EOS or a stop string) that is the sample. Otherwise, if its tokens do not contain the end-of-thinking text
(``</think>``, encoded without special tokens), the closing text — "Considering the limited time by the user, I
have to give the solution based on the thinking directly now." and ``</think>`` — is appended (the sample is
*forced*); either way a second generation continues from prompt + output (+ the forced text) with the new tokens
left (``max_new_tokens`` less the output so far, the forced tokens included), and the sample is the two outputs
with the forced text between them.

The decoding loop is unchanged: each phase is one ``SpeculativeDecoder.generate``, and their records are summed
(rounds concatenated, times added). The forced tokens are in the output ids and the text, but no round emitted
them (``GenerationResult.forced_tokens``), so the counters leave them out. As in the reference, the second phase is
a new request with the same sampling settings and seed, so its random stream starts afresh; our engine re-reads its
context with a prefill (vLLM's prefix cache makes that nearly free), which the measured time includes and the proxy
(which prices the rounds and one prefill) does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.decoding.records import GenerationResult
from relaxbench.decoding.stops import decode_output
from relaxbench.errors import ConfigError

XIA_BUDGET = 32768  # run_paper_grid.py token_caps (models without native MTP), within 36864 new tokens
XIA_CLOSING_TEXT = ("\n\n Considering the limited time by the user, I have to give the solution based on the "
                    "thinking directly now.\n</think>\n\n")  # vllm_offline.py QWEN_THINKING_EARLY_STOP_TEXT
THINK_END = "</think>"  # vllm_offline.py QWEN_THINK_END_TEXT


@dataclass(frozen=True)
class ThinkingBudget:
    """At ``tokens`` new tokens, a sample whose output has no ``end`` gets ``text`` appended and continues."""

    tokens: int = XIA_BUDGET
    text: str = XIA_CLOSING_TEXT
    end: str = THINK_END

    def check(self, max_new_tokens: int) -> None:
        if not 0 < self.tokens < max_new_tokens:
            raise ConfigError(f"the thinking budget ({self.tokens} tokens) must be below max_new_tokens "
                              f"({max_new_tokens}), so an answer has room after it")

    def record(self) -> dict[str, object]:
        return {"tokens": self.tokens, "text": self.text, "end": self.end}


def _contains(values: list[int], needle: list[int]) -> bool:
    width = len(needle)
    return bool(needle) and any(values[i:i + width] == needle for i in range(len(values) - width + 1))


def _phase(decoder: SpeculativeDecoder, max_new_tokens: int) -> SpeculativeDecoder:
    """The same decoder (target, drafter, policy, settings) with another token limit."""
    config = decoder.config
    limited = DecodeConfig(config.k, max_new_tokens, config.sampling, config.stop_strings, config.seed)
    return SpeculativeDecoder(decoder.target, decoder.drafter, decoder.policy, limited)


def generate_with_budget(decoder: SpeculativeDecoder, prompt_ids: list[int], budget: ThinkingBudget,
                         seed: int | None = None) -> GenerationResult:
    """One sample of ``decoder`` (its ``max_new_tokens`` is the total) under ``budget``."""
    total = decoder.config.max_new_tokens
    budget.check(total)
    tokenizer = decoder.target.tokenizer
    first = _phase(decoder, budget.tokens).generate(prompt_ids, seed=seed)
    if first.stop_reason != "length":
        return first
    forced = [] if _contains(first.output_ids, tokenizer.encode(budget.end, add_special_tokens=False)) else \
        list(tokenizer.encode(budget.text, add_special_tokens=False))
    left = total - len(first.output_ids) - len(forced)
    if left <= 0:
        return first
    second = _phase(decoder, left).generate(prompt_ids + first.output_ids + forced, seed=seed)
    output = first.output_ids + forced + second.output_ids
    rounds = first.rounds + second.rounds
    return GenerationResult(list(prompt_ids), output, decode_output(tokenizer, output, decoder.config.stop_strings),
                            second.stop_reason, rounds, first.time_prefill + second.time_prefill,
                            first.time_total + second.time_total, forced_tokens=len(forced))
