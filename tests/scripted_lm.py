"""A scripted causal LM for hand-checked tests: the next character is a hand-written function of the text so far.

It speaks the interface the engine and the miner use (``model(input_ids=..., past_key_values=DynamicCache,
logits_to_keep=..., output_hidden_states=...)``); its KV cache stores the token ids themselves, so the model
always sees the whole prefix and rollback is the cache's own crop. Logits are 10 for the scripted token, 5 for a
runner-up (the next byte), 0 elsewhere. The "hidden state" at a position is ``[token id, position, plan code]``
— enough to check which position's state a feature was taken from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from relaxbench.models.tiny import VOCAB_SIZE, build_tokenizer

Rule = Callable[[str], str | None]  # text so far -> next character (None: end of text)


def plans(*texts: str, prompt: str = "Q:") -> Rule:
    """A rule that follows the first plan (in the order given) that the response — the text after ``prompt`` —
    is a prefix of: the plan's next character, or the end of text (EOS) when the response is the whole plan. An
    unplanned response also ends."""

    def rule(text: str) -> str | None:
        response = text[len(prompt):]
        for plan in texts:
            if plan.startswith(response):
                return plan[len(response)] if len(plan) > len(response) else None
        return None

    return rule


class ScriptedLM(torch.nn.Module):
    HIDDEN = 3

    def __init__(self, rule: Rule, code: float = 0.0) -> None:
        super().__init__()
        from transformers import LlamaConfig

        self.config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=self.HIDDEN, num_hidden_layers=1,
                                  num_attention_heads=1, num_key_value_heads=1, intermediate_size=4)
        self.tokenizer = build_tokenizer()
        self.rule = rule
        self.code = code
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # the engine reads the device from a parameter
        self.embed = torch.nn.Embedding(VOCAB_SIZE, self.HIDDEN)  # where the engine puts inputs (the first layer)
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed

    def token_id(self, char: str | None) -> int:
        if char is None:
            return self.eos
        (token,) = self.tokenizer(char)["input_ids"]
        return token

    def forward(self, input_ids: torch.Tensor, past_key_values: Any, use_cache: bool = True, logits_to_keep: int = 0,
                output_hidden_states: bool = False, **_: Any) -> SimpleNamespace:
        new = input_ids.to(torch.float64)[:, None, :, None]
        keys, _ = past_key_values.update(new, new, 0)
        full = keys[0, 0, :, 0].long().tolist()
        first = len(full) - input_ids.shape[1]
        logits, hidden = [], []
        for end in range(first, len(full)):
            prefix = full[: end + 1]
            nxt = self.token_id(self.rule(self.tokenizer.decode(prefix)))
            row = torch.zeros(VOCAB_SIZE, dtype=torch.float64)
            row[(nxt + 1) % VOCAB_SIZE] = 5.0
            row[nxt] = 10.0
            logits.append(row)
            hidden.append(torch.tensor([float(prefix[-1]), float(end), self.code], dtype=torch.float64))
        keep = logits_to_keep or len(logits)
        out = SimpleNamespace(logits=torch.stack(logits)[-keep:].unsqueeze(0))
        out.hidden_states = (torch.stack(hidden).unsqueeze(0),) if output_hidden_states else None
        return out

    def get_output_embeddings(self) -> SimpleNamespace:
        return SimpleNamespace(weight=torch.zeros(VOCAB_SIZE, 1))


@dataclass
class ScriptedModel:
    """Stands in for a ``LoadedModel``."""

    name: str
    model: ScriptedLM
    generation: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({self.model.eos})

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64

    @property
    def logit_dim(self) -> int:
        return VOCAB_SIZE

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": "float64", "parameters": 1, "architecture": "ScriptedLM",
                "vocab": "bytes", "ref": "scripted", "kind": "scripted", "device": "cpu"}
