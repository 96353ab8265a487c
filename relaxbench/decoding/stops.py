"""Where a generation ends on a stop string, and its text: shared by the engine's loop and every other greedy
loop that must end and read a response the way the engine does (mining a trained judge's labels)."""

from __future__ import annotations


def contains_stop(tokenizer, ids: list[int], stops: tuple[str, ...]) -> bool:
    """Whether the text of ``ids`` contains a stop string, read both with and without special tokens: a stop
    string may be a special token's text (``<|im_end|>`` when it is not the EOS; lm-eval's own HF model stops
    there), and a special token inside ordinary text may split a stop string that the plain text shows whole."""
    return any(any(s in tokenizer.decode(ids, skip_special_tokens=skip) for s in stops) for skip in (True, False))


def stop_string_end(tokenizer, generated: list[int], stops: tuple[str, ...], first_new: int) -> int | None:
    """Smallest token count j > first_new such that the text of generated[:j] contains a stop string (see
    ``contains_stop``); None if none.

    Only prefixes ending in this round's tokens are examined (earlier rounds were checked already)."""
    if not contains_stop(tokenizer, generated, stops):
        return None
    for j in range(first_new + 1, len(generated) + 1):
        if contains_stop(tokenizer, generated[:j], stops):
            return j
    return None


def decode_output(tokenizer, output: list[int], stops: tuple[str, ...]) -> str:
    """Output text without special tokens, cut before the first stop string. (A stop string that only the text
    with special tokens shows ended the output at that special token, which this text leaves out.)"""
    text = tokenizer.decode(output, skip_special_tokens=True)
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[: min(cuts)] if cuts else text
