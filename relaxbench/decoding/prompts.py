"""Prompt formatting: chat templates for instruct models, raw text otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def encode_prompt(tokenizer: Any, prompt: str | Sequence[dict[str, str]], chat: bool = True,
                  system: str | None = None, chat_template_args: Mapping[str, Any] | None = None,
                  prefill: str = "") -> list[int]:
    """Token ids for ``prompt`` (a user message, or a list of chat messages).

    With ``chat`` and a tokenizer that has a chat template, the template is applied with a generation prompt and
    ``chat_template_args`` (e.g. Qwen3's ``enable_thinking``); the rendered text is then encoded without adding
    special tokens again. ``prefill`` is text the assistant's turn starts with (the model continues it).
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system is not None:
        messages = [{"role": "system", "content": system}, *messages]
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **dict(chat_template_args or {}))
        return list(tokenizer(text + prefill, add_special_tokens=False)["input_ids"])
    text = "\n\n".join([m["content"] for m in messages] + ([prefill] if prefill else []))
    return list(tokenizer(text)["input_ids"])
