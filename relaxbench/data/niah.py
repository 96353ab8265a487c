"""Needle in a haystack, multi-value (RULER's ``niah_multivalue``, Hsieh et al. 2404.06654), generated.

One key ("tidy-lantern") is given ``num_values`` 7-digit values ("One of the special magic numbers for
tidy-lantern is: 4820137."), hidden at sentence boundaries of a haystack at depths drawn from 40 evenly spaced
percentages; the model is asked for all of them. The haystack is filler prose made here from small word lists
by a seeded generator (RULER uses Paul Graham's essays, which are not ours to ship), and its size is fitted with
the target's tokenizer so that prompt + ``max_new_tokens`` fill ``context_tokens`` exactly as RULER fits it.

Rows have the schema of lm-eval's RULER port (``index, input, outputs, length, max_length, gen_prefix``), so
rows made by RULER or lm-eval (with the essay haystack) can be passed with ``--data-file`` instead.

FLy (2511.22972) runs it with 20 values at 4096 tokens (its lm-eval fork sets ``num_needle_v=20`` and the length
list to [4096]); RULER's default is 4 values.
"""

from __future__ import annotations

import random
from typing import Any

from relaxbench.data.generate import RowGenerator, register_generator
from relaxbench.validation import Integer, PositiveInteger, Spec

TEMPLATE = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz "
            "you about the numbers afterwards.\n{context}\nWhat are all the special magic numbers for {key} "
            "mentioned in the provided text?")
NEEDLE = "One of the special magic numbers for {key} is: {value}."
ANSWER_PREFIX = "The special magic numbers for {key} mentioned in the provided text are"
DEPTHS = [round(100 * i / 39) for i in range(40)]  # RULER: 40 evenly spaced percentages, 0..100

ADJECTIVES = (
    "amber brave calm dusty eager faint gentle hollow idle jolly keen lively mellow narrow odd pale quiet rapid "
    "rustic shy tidy upright vivid wary young zesty ancient bitter clever distant early fragile golden humble "
    "silent modest polished sturdy swift"
).split()
NOUNS = (
    "anchor basket candle desk engine feather garden harbor island jacket kettle lantern meadow needle orchard "
    "pebble quarry river saddle tunnel valley window yard bridge cabin ladder mirror pillow rocket violin compass "
    "canyon forest glacier hammer kitchen library market mountain notebook pocket station teacup village workshop"
).split()
VERBS = (
    "carried painted followed repaired measured visited borrowed noticed ignored polished counted described "
    "watched guarded sorted collected studied folded lifted traced"
).split()
PLACES = "at dawn|after the storm|near the old mill|before the market opened|in the late afternoon|" \
         "along the northern road|during the long winter|beside the quiet canal|under a grey sky|on the third day"
PLACE_LIST = PLACES.split("|")


def _sentence(rng: random.Random) -> str:
    """One filler sentence (no digits, so it can never be mistaken for a value)."""
    a, b = rng.sample(ADJECTIVES, 2)
    n1, n2, n3 = rng.sample(NOUNS, 3)
    shape = rng.randrange(5)
    if shape == 0:
        return f"The {a} {n1} {rng.choice(VERBS)} the {b} {n2} {rng.choice(PLACE_LIST)}."
    if shape == 1:
        return f"Nobody expected the {n1} to be so {a}, yet the {n2} by the {n3} stayed {b}."
    if shape == 2:
        return f"{rng.choice(PLACE_LIST).capitalize()}, a {a} {n1} was {rng.choice(VERBS)} near the {n2}."
    if shape == 3:
        return f"Every {n1} in the {b} {n2} {rng.choice(VERBS)} a {a} {n3}."
    return f"The story of the {a} {n1} and the {b} {n2} is told {rng.choice(PLACE_LIST)}."


class NiahOptions(Spec):
    """``num_values`` needles for one key, prompt + ``max_new_tokens`` = ``context_tokens`` of the target."""

    num_items: PositiveInteger = 500
    num_values: PositiveInteger = 20
    context_tokens: PositiveInteger = 4096
    max_new_tokens: PositiveInteger = 128  # RULER's tokens_to_generate, reserved when fitting the haystack
    seed: Integer = 0


@register_generator
class NiahMultiValue(RowGenerator):
    """RULER-style multi-value needle retrieval over a generated haystack, fitted to the target's tokenizer."""

    name = "niah-multivalue"
    summary = "RULER niah_multivalue: one key, N 7-digit values hidden in generated prose at a fixed context length"
    Options = NiahOptions
    uses_tokenizer = True

    def size(self) -> int:
        return int(self.options.num_items)

    def rows(self, limit: int | None, tokenizer: Any | None) -> list[dict[str, Any]]:
        count = self.size() if limit is None else min(limit, self.size())
        budget = self.options.context_tokens - self.options.max_new_tokens
        if tokenizer is None:
            raise ValueError("niah-multivalue fits its haystack with the target's tokenizer")

        def n_tokens(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        rows, guess = [], None
        for index in range(count):
            item = NiahItem(self.options.seed, index, self.options.num_values)
            size = item.fit(lambda n, item=item: n_tokens(item.prompt(n)), budget, guess)
            guess = size
            prompt = item.prompt(size)
            rows.append({"index": index, "input": prompt, "outputs": list(item.values),
                         "length": n_tokens(prompt) + self.options.max_new_tokens,
                         "max_length": self.options.context_tokens, "gen_prefix": ANSWER_PREFIX.format(key=item.key)})
        return rows


class NiahItem:
    """One item's random draws (its own stream, so item i is the same whatever the limit) and its prompt for a
    haystack of n sentences."""

    def __init__(self, seed: int, index: int, num_values: int) -> None:
        rng = random.Random(f"niah-multivalue:{seed}:{index}")
        self.key = f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"
        values: list[str] = []
        while len(values) < num_values:
            value = str(rng.randint(10 ** 6, 10 ** 7 - 1))
            if value not in values:
                values.append(value)
        self.values = tuple(values)
        self.needles = [NEEDLE.format(key=self.key, value=v) for v in values]
        rng.shuffle(self.needles)
        self.depths = sorted(rng.choices(DEPTHS, k=num_values) if num_values > len(DEPTHS)
                             else rng.sample(DEPTHS, num_values))
        self.text_seed = rng.getrandbits(64)
        self._sentences: list[str] = []

    def sentences(self, n: int) -> list[str]:
        """The first n haystack sentences (one stream, extended on demand)."""
        if len(self._sentences) < n:
            rng = random.Random(self.text_seed)
            self._sentences = [_sentence(rng) for _ in range(max(n, 2 * len(self._sentences)))]
        return self._sentences[:n]

    def prompt(self, n: int) -> str:
        haystack = self.sentences(n)
        cuts = [0] + [int(n * depth / 100) for depth in self.depths] + [n]
        parts: list[str] = []
        for i in range(1, len(cuts)):
            parts.append(" ".join(haystack[cuts[i - 1]:cuts[i]]))
            if i - 1 < len(self.needles):
                parts.append(self.needles[i - 1])
        context = " ".join(p for p in parts if p)
        return TEMPLATE.format(context=context, key=self.key)

    def fit(self, tokens_of, budget: int, guess: int | None) -> int:
        """The largest haystack (in sentences) whose prompt fits ``budget`` tokens (binary search, started around
        the previous item's size); 0 when even the needles alone do not fit."""
        if tokens_of(0) > budget:
            return 0
        low, high = 0, max(16, 2 * (guess or 64))
        while tokens_of(high) <= budget:
            low, high = high, 2 * high
        if guess is not None and low < guess < high:
            low, high = (guess, high) if tokens_of(guess) <= budget else (low, guess)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if tokens_of(middle) <= budget else (low, middle)
        return low
