"""Reasoning models' thinking: what a scorer reads is the answer after it.

Xia et al.'s scorers (``relaxed-spec-dec-repro`` ``tasks/_text.py``, after Cactus) delete every
``<think>…</think>`` block and any unclosed ``<think>…`` tail before extracting an answer, so an output cut
inside its thinking has no answer. One addition here: a ``</think>`` with no opening tag (templates that put
``<think>`` in the prompt, as Qwen3-2507's do) ends the thinking too, so everything before it is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL | re.IGNORECASE)
UNCLOSED = re.compile(r"<think>.*", re.DOTALL | re.IGNORECASE)
CLOSE = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class Split:
    """An output split at its thinking: the answer text, and how the thinking ended."""

    answer: str
    thinking: str  # "none" (no tags), "closed", "unclosed" (cut inside the thinking: no answer)

    def details(self) -> dict[str, object]:
        return {"thinking": self.thinking, "answer_chars": len(self.answer)}


def split_thinking(text: str) -> Split:
    lowered = text.lower()
    if "<think>" not in lowered and "</think>" not in lowered:
        return Split(text.strip(), "none")
    without = THINK_BLOCK.sub("", text)  # closed blocks
    unclosed = UNCLOSED.search(without)  # an opening tag never closed: the output ended inside its thinking
    if unclosed:
        without = without[:unclosed.start()]
    orphans = list(CLOSE.finditer(without))  # a closing tag whose opening tag was in the prompt
    if orphans:
        without = without[orphans[-1].end():]
    return Split(without.strip(), "unclosed" if unclosed else "closed")


def strip_thinking(text: str) -> str:
    """The answer text of an output (thinking removed)."""
    return split_thinking(text).answer
