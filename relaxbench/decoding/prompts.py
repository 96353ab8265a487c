"""Prompt formatting: chat templates for instruct models, raw text otherwise; and whether a prompt fits the target's
context with the tokens a generation adds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relaxbench.errors import ConfigError


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


def stated_positions(config: Any) -> int | None:
    """The positions a model config states it takes (``max_position_embeddings``); None when it states none."""
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def context_window(model: Any) -> int | None:
    """The positions a model takes (its config's ``max_position_embeddings``); None when it states none. ``model``
    is a loaded model (its transformers model's config) or a preview of one (its ``config``, no weights)."""
    config = getattr(model, "config", None)
    if config is None:
        config = getattr(getattr(model, "model", None), "config", None)
    return stated_positions(config)


def prompt_room(model: Any, max_new_tokens: int, k: int) -> int | None:
    """How many prompt tokens the model's context leaves beside ``max_new_tokens`` and a verify block (k + 1);
    None when the model states no context."""
    limit = context_window(model)
    return None if limit is None else limit - max_new_tokens - k - 1


def check_fits_context(model: Any, what: str, prompt_tokens: int, max_new_tokens: int, k: int) -> None:
    """Refuse a generation whose prompt, ``max_new_tokens`` and a verify block (k + 1) exceed the model's context:
    it would run past the model's positions (and a cost profile would size its grid for them)."""
    check_positions(context_window(model), what, prompt_tokens, max_new_tokens, k)


def check_positions(limit: int | None, what: str, prompt_tokens: int, max_new_tokens: int, k: int,
                    at_least: bool = False) -> None:
    """``check_fits_context`` given the context ``limit``; ``at_least``: ``prompt_tokens`` is a lower bound (counted
    from the model's files before the prompt is encoded, ``models.preview.files_on_disk``), so a refusal is certain
    and the message says so."""
    need = prompt_tokens + max_new_tokens + k + 1
    if limit is None or need <= limit:
        return
    if at_least:
        raise ConfigError(f"{what}: the prompt (at least {prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) "
                          f"need at least {need} positions with the last verify position, over the target's context "
                          f"of {limit} (max_position_embeddings); lower --max-new-tokens, shorten the prompt, or set "
                          "the task's truncate_prompt")
    raise ConfigError(f"{what}: the prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) + a verify "
                      f"block (k + 1 = {k + 1}) need {need} positions, over the target's context of {limit} "
                      "(max_position_embeddings); lower --max-new-tokens or -k, shorten the prompt, or set the task's "
                      "truncate_prompt")
