"""The oracle drafter: a validation tool, not a speculative method. It replays a known greedy output of the target
(the AR arm's, saved to a file) and drafts exactly as many of its next tokens per round as an acceptance pattern
says, then deliberately wrong ones, so that under exact verification each round accepts the planned number.

Why: a speed-up measurement needs rounds of chosen lengths on models whose drafts would otherwise mean nothing
(random-weight models of real shapes, on a GPU, where timing does not depend on the weights). Every round still
drafts ``k`` tokens, so the verify forward has the size a draft model's round would have; the oracle's own work
(slicing a list) costs nothing a cost profile could price, so the proxy prices it at zero (``costless``).

Knobs: ``replay`` — a JSON file ``{"sequences": [[prompt ids + AR output ids], ...]}``; ``accept`` — the planned
accepted drafts per round, cycled (``[5]`` accepts every draft at k = 5, ``[2, 0]`` alternates). A round plans
``min(accept[r], k)`` correct tokens; the next is the reference token + 1 (mod the vocabulary), so it is rejected,
and the rest repeat it. If the output leaves the reference (a target that does not reproduce its own greedy
output), later drafts are still read at the same positions and simply get rejected.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from pydantic import field_validator

from relaxbench.decoding.drafters.base import Drafter, DrafterInputs, Proposal, register_drafter
from relaxbench.errors import ConfigError
from relaxbench.validation import Integer, Spec, Text


@lru_cache(maxsize=8)
def _sequences(path: str) -> tuple[tuple[int, ...], ...]:
    try:
        data = json.loads(Path(path).read_text())
        sequences = tuple(tuple(int(t) for t in seq) for seq in data["sequences"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"drafter 'oracle': cannot read replay file {path}: {type(exc).__name__}: {exc}") from None
    if not sequences:
        raise ConfigError(f"drafter 'oracle': replay file {path} holds no sequences")
    return sequences


def write_replay(path: str | Path, sequences: list[list[int]]) -> Path:
    """Write the replay file the oracle reads (each sequence: the prompt ids followed by the AR output ids)."""
    path = Path(path)
    path.write_text(json.dumps({"sequences": [list(map(int, s)) for s in sequences]}))
    return path


@register_drafter
class OracleDrafter(Drafter):
    """Replays the target's known greedy output to a planned acceptance pattern (a validation tool)."""

    name = "oracle"
    costless = True
    summary = "validation tool: replays a saved AR output, drafting the planned number of correct tokens per round"

    class Knobs(Spec):
        replay: Text
        accept: tuple[Integer, ...] = (5,)

        @field_validator("accept")
        @classmethod
        def _accept(cls, value: tuple[int, ...]) -> tuple[int, ...]:
            if not value or any(a < 0 for a in value):
                raise ValueError("accept must list one or more counts >= 0")
            return value

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        super().__init__(knobs, inputs)
        self.vocab = int(inputs.target.logit_dim)
        _sequences(knobs.replay)  # a missing or malformed file fails when the drafter is built
        self.reference: tuple[int, ...] = ()
        self.round = 0

    def reset(self, prompt: torch.Tensor) -> None:
        ids = tuple(prompt.tolist())
        matches = [s for s in _sequences(self.knobs.replay) if s[: len(ids)] == ids]
        if not matches:
            raise ConfigError(f"drafter 'oracle': no sequence of {self.knobs.replay} starts with this prompt "
                              f"({len(ids)} tokens)")
        self.reference = max(matches, key=len)
        self.round = 0

    def propose(self, context, k, sampling, generator) -> Proposal:
        pos, ref = int(context.shape[0]), self.reference
        planned = min(self.knobs.accept[self.round % len(self.knobs.accept)], k)
        self.round += 1
        tokens = list(ref[pos: pos + planned])
        nxt = pos + len(tokens)
        wrong = (ref[nxt] + 1) % self.vocab if nxt < len(ref) else 0
        tokens += [wrong] * (k - len(tokens))
        return Proposal(torch.tensor(tokens, dtype=torch.long, device=context.device), None)
