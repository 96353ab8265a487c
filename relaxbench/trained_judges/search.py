"""AutoJudge's semi-greedy search for important mismatches, on one item (one prompt).

Follows ``src/find_important_tokens_lcb.py::find_important_tokens`` (l.87–195) and its GSM8K twin
``src/find_important_tokens.py`` (l.40–151) of ``garipovroma/autojudge`` @ 8a4beb1:

1. The target's greedy response to the prompt is the reference; its outcome is scored once (l.105–111).
2. The draft model reads the current response teacher-forced; its argmax at each position is its proposal
   (l.139–140). The first position at or after ``left`` where the proposal differs from the response's token is
   the next mismatch (l.142–152); none left ends the search.
3. The draft token replaces the target's there and the target continues greedily to the generation budget
   (l.154–169); the continuation is scored. The mismatch is *important* when the outcome differs from the
   reference's: pass/fail for code (LCB, l.177), the extracted answer for GSM8K (l.131) — the scorer's
   ``outcome``.
4. Unimportant: the draft token and the target's new continuation become the current response (l.178–180);
   important: the response is kept. Either way ``left = p + 1`` (l.191), so each mismatch is judged on the response
   its predecessors left, and the search is sequential.
5. A draft token that ends the response (AutoJudge: an EOS at or before p, l.171–189) ends the search after it is
   labelled; relaxbench treats a draft token that completes a stop string alike.

Savings that change no label (relaxbench's own, on by default):

* Cache reuse: the target continues on its KV cache of the committed prefix (cut back to the mismatch, one
  two-token forward instead of a re-prefill), and the draft re-reads only the positions after a changed token,
  instead of AutoJudge's full ``generate`` and full draft forward per mismatch.
* The draft's own full greedy answer, which AutoJudge generates for logging only (l.113–119), is skipped.
* ``stop_at_settled``: a continuation stops once the scorer says no further text can change its score (a closed
  code block it extracts); the same holds for the reference, so the response — and the mining — ends where the
  scored answer ends. Mismatches in trailing prose after a closed code block are therefore not mined (they would
  all be unimportant by construction); ``--no-stop-at-settled`` mines them too.

Options that change labels or the data set (off by default, from AutoJudge's EAGLE variant
``src/find_important_tokens_eagle.py``): ``min_target_prob`` (l.39, l.67–73: important without a continuation when
the target gives the draft token less than this probability; AutoJudge uses 0.01), ``rollout_cap`` (l.40, l.79–83:
continuations end at this multiple of the reference's length; AutoJudge uses 1.5), and ``max_mismatches`` (stop an
item's search after this many, which biases the data towards early positions).

One small difference: AutoJudge always generates at least one token after the draft token
(``max(1, budget − used)``); here a draft token at the last budgeted position ends the continuation there.

Features of each mismatch are taken on the way: the last hidden state (after the final norm) of the draft and of
the target at the mismatch's own position on the sequence that holds the draft token — AutoJudge's ``DD`` and
``DT`` (``src/calc_hiddens.py``, l.139–212), the inputs of its default ``DD-DT`` head.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from relaxbench.data.items import TaskItem
from relaxbench.decoding.cache import CachedLM, common_prefix_length
from relaxbench.decoding.stops import decode_output, stop_string_end
from relaxbench.ops.reductions import argmax
from relaxbench.scoring import Score, Scorer, ScoringContext
from relaxbench.validation import Flag, Integer, Number, Spec

DRAFT_CHUNK = 64  # positions per teacher-forced draft forward (bounds the [n, V] logits held at once)


class MiningOptions(Spec):
    """How a response is generated and searched; every field is part of a mining store's identity."""

    max_new_tokens: Integer
    stop: tuple[str, ...] = ()
    stop_at_settled: Flag = True
    min_target_prob: Number = 0.0  # label-changing; AutoJudge's EAGLE variant uses 0.01
    rollout_cap: Number | None = None  # label-changing; AutoJudge's EAGLE variant uses 1.5
    max_mismatches: Integer | None = None  # changes the data set

    def label_changing(self) -> dict[str, Any]:
        """The options set that change labels or the data set (shown with every head trained on the data)."""
        return {key: value for key, value in (("min_target_prob", self.min_target_prob or None),
                                              ("rollout_cap", self.rollout_cap),
                                              ("max_mismatches", self.max_mismatches)) if value is not None}


@dataclass
class Continuation:
    """A response (token ids after the prompt), its text as scored, why it ended, and its score."""

    ids: list[int]
    text: str
    ended: str  # "eos", "stop", "length", "settled", "cap"
    score: Score | None = None
    outcome: Any = None


@dataclass
class Mismatch:
    """One labelled mismatch: where, which tokens, the label and how it was reached, and the features."""

    position: int  # index in the response (0 = the first generated token)
    draft_token: int
    target_token: int
    important: bool
    outcome: Any  # the continuation's outcome (None when labelled without one)
    score: float | None
    continuation_ids: list[int]  # the whole alternative response (prefix, draft token, continuation)
    continuation_text: str
    continuation_end: str
    generated: int  # tokens the target generated after the draft token
    target_prob_draft: float  # the target's probability of the draft token at this position
    target_prob_target: float
    draft_prob_draft: float
    shortcut: str | None  # "low-target-prob" when labelled without a continuation
    draft_hidden: torch.Tensor  # [H_draft] float32
    target_hidden: torch.Tensor  # [H_target] float32
    seconds: float


@dataclass
class SearchState:
    """Where an item's search stands; stored after every mismatch so an interrupted search resumes there."""

    response: list[int]
    left: int = 0
    handled: int = 0
    finished: bool = False
    target_tokens: int = 0  # target positions computed so far (prefill excluded), for the cost report


@dataclass
class MismatchSearch:
    """The search on one item. ``target``/``draft`` are loaded models (``.model``, ``.tokenizer``,
    ``.eos_token_ids``); the two caches live as long as the item."""

    target: Any
    draft: Any
    scorer: Scorer
    item: TaskItem
    prompt_ids: list[int]
    options: MiningOptions
    _scores: dict[str, Score] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t = CachedLM(self.target.model)
        self.d = CachedLM(self.draft.model)
        self.eos = frozenset(self.target.eos_token_ids)
        self.tokenizer = self.target.tokenizer
        self.prompt = torch.tensor(self.prompt_ids, dtype=torch.long, device=self.t.device)
        self.preds: list[int] = []  # the draft's proposal for each response position
        self.target_tokens = 0

    # -- the reference ---------------------------------------------------------------------------------------
    @torch.inference_mode()
    def reference(self) -> Continuation:
        """The target's greedy response, read as the engine's AR arm reads it (prompt less its last token as
        prefill, then one token per step), and scored."""
        self.t.reset()
        if self.prompt.shape[0] > 1:
            self.t.run(self.prompt[:-1], n_logits=0)
        logits = self.t.run(self.prompt[-1:], n_logits=1).logits[-1]
        ids, ended = self._extend([], logits, budget=self.options.max_new_tokens)
        return self._scored(ids, ended)

    # -- the search --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, state: SearchState, reference: Continuation,
            on_mismatch: Callable[[Mismatch, SearchState], None]) -> SearchState:
        """Search from ``state`` to the end; ``on_mismatch`` gets each labelled mismatch and the state after it."""
        self.target_tokens = state.target_tokens
        self.preds = []
        cap = (None if self.options.rollout_cap is None
               else max(1, int(len(reference.ids) * self.options.rollout_cap)))
        while not state.finished:
            if self.options.max_mismatches is not None and state.handled >= self.options.max_mismatches:
                break
            self._predict(state.response, first=len(self.preds))
            position = next((p for p in range(state.left, len(state.response))
                             if self.preds[p] != state.response[p]), None)
            if position is None:
                break
            found = self._judge(state.response, position, reference, cap)
            ends = found.continuation_end in ("eos", "stop") and len(found.continuation_ids) == position + 1
            if not found.important:
                state.response = found.continuation_ids
                self.preds = self.preds[: position + 1]  # proposals after the draft token are stale
            state.left = position + 1
            state.handled += 1
            state.finished = ends
            state.target_tokens = self.target_tokens
            on_mismatch(found, state)
        state.finished = True
        state.target_tokens = self.target_tokens
        return state

    def _judge(self, response: list[int], p: int, reference: Continuation, cap: int | None) -> Mismatch:
        start = time.perf_counter()
        d, t = self.preds[p], response[p]
        full = torch.cat([self.prompt, self.prompt.new_tensor(response)])
        at = self.prompt.shape[0] + p  # absolute position of the mismatch
        draft_out = self._read(self.d, full, at, d)
        target_out = self._read(self.t, full, at, d)
        p_target = torch.softmax(target_out.logits[0].float(), dim=-1)
        p_draft = torch.softmax(draft_out.logits[0].float(), dim=-1)
        common = dict(position=p, draft_token=d, target_token=t,
                      target_prob_draft=float(p_target[d]), target_prob_target=float(p_target[t]),
                      draft_prob_draft=float(p_draft[d]),
                      draft_hidden=draft_out.hidden[1].float().cpu(), target_hidden=target_out.hidden[1].float().cpu())
        if float(p_target[d]) < self.options.min_target_prob:
            return Mismatch(important=True, outcome=None, score=None, continuation_ids=response[:p] + [d],
                            continuation_text="", continuation_end="not generated", generated=0,
                            shortcut="low-target-prob", seconds=time.perf_counter() - start, **common)
        budget = self.options.max_new_tokens if cap is None else min(self.options.max_new_tokens, cap)
        ids, ended = self._extend(response[:p] + [d], target_out.logits[1], budget, capped=cap is not None)
        alternative = self._scored(ids, ended)
        return Mismatch(important=alternative.outcome != reference.outcome, outcome=alternative.outcome,
                        score=alternative.score.value if alternative.score else None, continuation_ids=ids,
                        continuation_text=alternative.text, continuation_end=ended, generated=len(ids) - p - 1,
                        shortcut=None, seconds=time.perf_counter() - start, **common)

    def _read(self, lm: CachedLM, full: torch.Tensor, at: int, token: int):
        """Put ``token`` at absolute position ``at`` after ``full[:at]`` in ``lm``'s cache: logits row 0 is the
        model's distribution at ``at``, hidden row 1 its hidden state at the token, logits row 1 its next."""
        keep = min(common_prefix_length(lm.ids, full), at - 1)
        lm.truncate(keep)
        feed = torch.cat([full[keep:at], full.new_tensor([token])])
        if lm is self.t:
            self.target_tokens += int(feed.shape[0])
        out = lm.run(feed, n_logits=2, want_hidden=True)
        return out

    def _predict(self, response: list[int], first: int) -> None:
        """Fill ``self.preds`` from position ``first`` on: the draft's argmax at each response position, read
        teacher-forced on its cache (only positions whose prefix changed are read again)."""
        if first >= len(response):
            return
        full = torch.cat([self.prompt, self.prompt.new_tensor(response)])
        start = self.prompt.shape[0] + first  # absolute position of the first proposal wanted
        keep = min(common_prefix_length(self.d.ids, full), start - 1)
        self.d.truncate(keep)
        proposals: list[int] = []
        for chunk in full[keep: full.shape[0] - 1].split(DRAFT_CHUNK):  # rows predict positions keep+1, ...
            proposals += argmax(self.d.run(chunk, n_logits=int(chunk.shape[0])).logits).tolist()
        self.preds = self.preds[:first] + proposals[start - keep - 1:]

    # -- generation and scoring ------------------------------------------------------------------------------
    def _extend(self, ids: list[int], logits: torch.Tensor, budget: int, capped: bool = False
                ) -> tuple[list[int], str]:
        """Continue ``ids`` greedily with the target (its cache has read the last of them, giving ``logits``)
        until it ends as the engine ends a generation — EOS, a completed stop string, the budget — or the score
        is settled."""
        ended = self._ended(ids, budget, capped)
        while ended is None:
            token = int(argmax(logits))
            ids = ids + [token]
            ended = self._ended(ids, budget, capped)
            if ended is None:
                logits = self.t.run(self.prompt.new_tensor([token]), n_logits=1).logits[-1]
                self.target_tokens += 1
        return ids, ended

    def _ended(self, ids: list[int], budget: int, capped: bool) -> str | None:
        if not ids:
            return None
        if ids[-1] in self.eos:
            return "eos"
        if self.options.stop and stop_string_end(self.tokenizer, ids, self.options.stop, len(ids) - 1) is not None:
            return "stop"
        if len(ids) >= budget:
            return "cap" if capped and len(ids) < self.options.max_new_tokens else "length"
        if self.options.stop_at_settled and self.scorer.settled(self.item, self._text(ids)):
            return "settled"
        return None

    def _text(self, ids: list[int]) -> str:
        return decode_output(self.tokenizer, ids, self.options.stop)

    def _scored(self, ids: list[int], ended: str) -> Continuation:
        """Score the text of ``ids`` (one sandbox run per distinct text of the item)."""
        text = self._text(ids)
        if text not in self._scores:
            self._scores[text] = self.scorer.score(self.item, text, ScoringContext(0))
        score = self._scores[text]
        return Continuation(ids, text, ended, score, self.scorer.outcome(self.item, score))
