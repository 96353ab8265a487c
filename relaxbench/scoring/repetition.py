"""Degenerate repetition: an output that ends in a loop, the failure relaxed acceptance causes on reasoning models
(a sample that repeats itself until the token cap, with no answer).

Definition (on token ids, so it is the same for every arm and every task): the output *ends in a loop* when its
last tokens are at least ``MIN_COPIES`` back-to-back copies of one unit of ``period`` tokens (a partial copy at the
very end, where the budget cut it, is part of the loop), spanning at least ``MIN_SPAN`` tokens. The unit is the
shortest period that qualifies; periods up to ``MAX_PERIOD`` tokens are searched, in the last ``WINDOW`` tokens.

The thresholds follow chiatzenw-cur/lossy-spec-decode-repetition (commit 8e6f4c9, ``scripts/
consolidate_loop_events.py``: occurrences chained only when adjacent — no token between one copy and the next —,
kept when the chain has at least 3 copies and spans at least 15 tokens; its REPETITION_FINDINGS.md reports 98-99%
of such chains judged abnormal, against 75% false positives for repeats anywhere in the trace). Two differences,
both deliberate: only a loop at the end of the output counts (a loop the model escaped is not a failure of the
sample; one it never left is), and the loop is found by its period directly rather than by shingle seeds, so no LLM
confirmation step is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_COPIES = 3
MIN_SPAN = 15
MAX_PERIOD = 256
WINDOW = 8192


@dataclass(frozen=True)
class Loop:
    """The loop an output ends in: its unit's length, how many copies (the last may be partial) and the span in
    tokens (within the searched window)."""

    period: int
    span: int

    @property
    def copies(self) -> float:
        return self.span / self.period


def tail_loop(ids: Sequence[int], min_copies: int = MIN_COPIES, min_span: int = MIN_SPAN,
              max_period: int = MAX_PERIOD, window: int = WINDOW) -> Loop | None:
    """The loop ``ids`` ends in (shortest qualifying period), or None. A qualifying period repeats at least the
    last ``probe`` tokens (``min_span - period`` and ``(min_copies - 1) * period`` are both at least that for
    every period), so one vectorised comparison of the last tokens rules out most periods at once."""
    tail = np.asarray(ids[-window:], dtype=np.int64)
    n = int(tail.shape[0])
    top = min(max_period, n // min_copies)
    if top < 1:
        return None
    probe = min(_probe(min_copies, min_span, top), n - top)
    periods = np.arange(1, top + 1)
    offsets = np.arange(n - probe, n)
    candidates = periods[(tail[offsets[None, :] - periods[:, None]] == tail[offsets][None, :]).all(axis=1)]
    for period in map(int, candidates):
        same = tail[period:] == tail[:-period]  # same[j]: token j + period repeats token j
        breaks = np.flatnonzero(~same)
        run = int(same.shape[0] - (breaks[-1] + 1 if breaks.size else 0))  # trailing repeats
        span = run + period
        if span >= min_copies * period and span >= min_span:
            return Loop(period, span)
    return None


def _probe(min_copies: int, min_span: int, top: int) -> int:
    """The fewest trailing repeats any period up to ``top`` needs to qualify."""
    return max(0, min(max((min_copies - 1) * p, min_span - p) for p in range(1, top + 1)))


def ends_in_loop(ids: Sequence[int]) -> bool:
    return tail_loop(ids) is not None
