"""Prompt formatting: chat templates for instruct models, raw text otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def encode_prompt(tokenizer: Any, prompt: str | Sequence[dict[str, str]], chat: bool = True,
                  system: str | None = None) -> list[int]:
    """Token ids for ``prompt`` (a user message, or a list of chat messages).

    With ``chat`` and a tokenizer that has a chat template, the template is applied with a generation prompt;
    the rendered text is then encoded without adding special tokens again.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system is not None:
        messages = [{"role": "system", "content": system}, *messages]
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "\n\n".join(m["content"] for m in messages)
    return list(tokenizer(text)["input_ids"])
