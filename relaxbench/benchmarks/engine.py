"""Engine benchmark: our arms against transformers' own decoding on the same models, side by side in one run. The
figure is the *engine ratio* (``METRIC_DEFINITIONS``): our tokens/s over transformers' on the same decoding, which
compares two engines, not a method with AR (so it is not called a speed-up).

* our AR arm            vs ``model.generate`` greedy                         target ≥ 0.95×
* our ``exact`` arm     vs ``model.generate(assistant_model=draft)``, same k  target ≥ 1.0×
* our ``exact`` + ngram vs ``model.generate(prompt_lookup_num_tokens=...)``   target ≥ 1.0×

Arms are interleaved per prompt and repeat (HF, ours, then ours, HF in the next repeat, ...) so machine drift and
order effects hit both alike; outputs are asserted identical; the engine ratio is the median over repeats of the
paired tokens/s ratio.

With a breakdown (``--breakdown``) each side's time is also split into its model forwards, by model and by the
number of tokens a forward feeds (a prefill, a one-token step, a verify block), and the rest: forward hooks on the
models (``torch.nn.Module.register_forward_pre_hook``), so both engines are timed at the same points, and a gap
between them shows as more forwards, dearer forwards or more time outside them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from relaxbench.decoders import build_decoder
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.timing import Clock

CODE_PROMPTS = (
    "Write a Python function `is_palindrome(s: str) -> bool` that ignores case and non-alphanumeric characters. "
    "Include a docstring and three doctest examples.",
    "Write a Python class `LRUCache` with `get(key)` and `put(key, value)` methods and a fixed capacity, using "
    "collections.OrderedDict. Add type hints.",
    "Write a Python function that parses a CSV file given its path and returns the average of the column named "
    "'price', skipping rows where the value is missing.",
)


PREFILL = "prefill"  # a forward on an empty cache: the prompt


@dataclass
class Calls:
    """A number of calls and the seconds they took together."""

    count: int = 0
    seconds: float = 0.0


@dataclass
class Breakdown:
    """Where one side's time went, summed over its timed generations: its model forwards by (model, tokens fed per
    forward: a count, or ``PREFILL``), and the generations' own count and seconds."""

    forwards: dict[tuple[str, str], Calls] = field(default_factory=dict)
    generations: int = 0
    total_s: float = 0.0

    def add(self, model: str, feed: str, seconds: float) -> None:
        calls = self.forwards.setdefault((model, feed), Calls())
        calls.count += 1
        calls.seconds += seconds

    @property
    def outside_s(self) -> float:
        """Time not spent in a model forward: drafting logic, verification, cache handling, bookkeeping."""
        return self.total_s - sum(calls.seconds for calls in self.forwards.values())


@contextmanager
def forwards_into(models: dict[str, torch.nn.Module], clock: Clock,
                  breakdown: Breakdown | None) -> Iterator[None]:
    """Time every forward of ``models`` (name → model) into ``breakdown`` for the block (nothing when it is None):
    a pre-hook reads the clock and the forward's size, a hook after it adds the call."""
    if breakdown is None:
        yield
        return
    handles = []
    for name, model in models.items():
        started: list[tuple[float, str]] = []

        def before(module, args, kwargs, started=started):
            ids = kwargs.get("input_ids", args[0] if args else None)
            fed = int(ids.shape[-1]) if ids is not None else int(kwargs["inputs_embeds"].shape[-2])
            cache = kwargs.get("past_key_values")
            empty = cache is None or int(cache.get_seq_length()) == 0
            started.append((clock.now(), PREFILL if empty else str(fed)))

        def after(module, args, kwargs, output, name=name, started=started):
            start, feed = started.pop()
            breakdown.add(name, feed, clock.now() - start)

        handles += [model.register_forward_pre_hook(before, with_kwargs=True),
                    model.register_forward_hook(after, with_kwargs=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Comparison:
    """One 'ours vs transformers' line: per-repeat tokens/s of both, whether outputs matched, and (with a
    breakdown) where each side's time went."""

    label: str
    target_ratio: float
    ours_tps: list[float] = field(default_factory=list)
    ref_tps: list[float] = field(default_factory=list)
    identical: bool = True
    notes: str = ""  # where the outputs first differed, and whether it was a numerical near-tie
    ours_time: Breakdown | None = None
    ref_time: Breakdown | None = None

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.ours_tps, self.ref_tps)]

    @property
    def median_ratio(self) -> float:
        """The engine ratio."""
        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def holds(self) -> bool:
        return self.identical and self.median_ratio >= self.target_ratio

    def time_rows(self) -> list[tuple[str, Calls | None, Calls | None]]:
        """The breakdown side by side: (what, ours, transformers') per model and forward size (the target first;
        prefill, then by tokens fed; None where a side made no such forward), then the time outside forwards and
        the total, whose calls are the generations."""
        ours, ref = self.ours_time, self.ref_time
        if ours is None or ref is None:
            return []

        def order(key: tuple[str, str]) -> tuple[bool, int]:
            model, feed = key
            return model != "target", -1 if feed == PREFILL else int(feed)

        rows: list[tuple[str, Calls | None, Calls | None]] = []
        for key in sorted(set(ours.forwards) | set(ref.forwards), key=order):
            model, feed = key
            rows.append((f"{model} {feed}" if feed == PREFILL else f"{model}, {feed} token{'s' * (feed != '1')}",
                         ours.forwards.get(key), ref.forwards.get(key)))
        rows.append(("outside model forwards", Calls(ours.generations, ours.outside_s),
                     Calls(ref.generations, ref.outside_s)))
        rows.append(("total", Calls(ours.generations, ours.total_s), Calls(ref.generations, ref.total_s)))
        return rows


def cut_at_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    cut = next((i + 1 for i, t in enumerate(tokens) if t in eos), len(tokens))
    return tokens[:cut]


def hf_generate(target, prompt_ids: list[int], max_new_tokens: int, **kwargs) -> list[int]:
    """transformers' greedy ``generate`` (optionally assisted), output cut after the first EOS."""
    ids = torch.tensor([prompt_ids], device=target.device)
    out = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                do_sample=False, pad_token_id=target.tokenizer.pad_token_id
                                if target.tokenizer.pad_token_id is not None else min(target.eos_token_ids),
                                eos_token_id=sorted(target.eos_token_ids), **kwargs)
    return cut_at_eos(out[0, len(prompt_ids):].tolist(), target.eos_token_ids)


def hf_static_kwargs() -> dict[str, object]:
    """transformers' own counterpart of this process's ``--kv-cache``/``--graphs`` for plain ``generate``: its
    static cache, compiled (its automatic ``torch.compile`` of the decoding step) where ours replays graphs, eager
    where ours runs the static cache eagerly; nothing with the dynamic cache. Assisted and prompt-lookup generation
    keep their dynamic cache (transformers' assisted decoding has no static-cache path), so only the AR row compares
    the two engines under the same setting."""
    from relaxbench.decoding.cache import kv_settings

    settings = kv_settings()
    if settings.kv_cache != "static":
        return {}
    return {"cache_implementation": "static", "disable_compile": not settings.graphs}


def configure_assistant(draft, k: int) -> None:
    """Make HF assisted generation draft exactly k tokens per round, as our arm does."""
    config = draft.model.generation_config
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0  # no early stop of drafting


def timed(clock: Clock, fn: Callable[[], list[int]], models: dict[str, torch.nn.Module] | None = None,
          breakdown: Breakdown | None = None) -> tuple[list[int], float]:
    """``fn()`` and its seconds; with a ``breakdown``, the forwards of ``models`` during it and its time go there."""
    with forwards_into(models or {}, clock, breakdown):
        start = clock.now()
        tokens = fn()
        seconds = clock.now() - start
    if breakdown is not None:
        breakdown.generations += 1
        breakdown.total_s += seconds
    return tokens, seconds


def describe_difference(target, prompt: list[int], reference: list[int], ours: list[int]) -> str:
    """Where our output first left transformers' (the reference), and whether the target's top-2 logits were
    within rounding there (``diagnose_divergence``): a near-tie flipped by the chunk size, or a real bug."""
    d = diagnose_divergence(target, prompt, reference, ours)
    kind = "a numerical near-tie" if d.near_tie else "NOT a near-tie"
    return f"first difference at output token {d.position}: top-2 logit gap {d.top2_gap:.4f} ({kind}, " \
           f"tolerance {d.tolerance:g} for {target.dtype})"


def compare_pairwise(comparison: Comparison, target, prompts: list[list[int]], repeats: int, clock: Clock,
                     ours: Callable[[list[int]], list[int]], reference: Callable[[list[int]], list[int]],
                     models: dict[str, torch.nn.Module] | None = None) -> None:
    """Interleave reference and ours per prompt and repeat (which runs first alternates between repeats); record
    tokens/s per repeat (summed over prompts). With ``models`` (name → model), also each side's breakdown over
    those models' forwards."""
    if models is not None:
        comparison.ours_time, comparison.ref_time = Breakdown(), Breakdown()
    for repeat in range(repeats):
        ours_tokens = ours_time = ref_tokens = ref_time = 0.0
        for prompt in prompts:
            def run_ours():
                return timed(clock, lambda: ours(prompt), models, comparison.ours_time)

            def run_ref():
                return timed(clock, lambda: reference(prompt), models, comparison.ref_time)

            if repeat % 2:  # alternate which side runs first, so an order effect cancels over repeats
                (our_out, our_dt), (ref_out, ref_dt) = run_ours(), run_ref()
            else:
                (ref_out, ref_dt), (our_out, our_dt) = run_ref(), run_ours()
            if our_out != ref_out and comparison.identical:
                comparison.notes = describe_difference(target, prompt, ref_out, our_out)
            comparison.identical &= our_out == ref_out
            ours_tokens, ours_time = ours_tokens + len(our_out), ours_time + our_dt
            ref_tokens, ref_time = ref_tokens + len(ref_out), ref_time + ref_dt
        comparison.ours_tps.append(ours_tokens / ours_time)
        comparison.ref_tps.append(ref_tokens / ref_time)


def our_arm(method: MethodSpec, target, draft, k: int, max_new_tokens: int) -> Callable[[list[int]], list[int]]:
    decoder = build_decoder(method, target, draft, DecodeConfig(k=k, max_new_tokens=max_new_tokens))
    return lambda prompt: decoder.generate(prompt).output_ids


def bench_draft_model(target, draft, k: int, max_new_tokens: int, repeats: int, n_prompts: int,
                      breakdown: bool = False) -> list[Comparison]:
    clock = Clock(target.device)
    prompts = [encode_prompt(target.tokenizer, text) for text in CODE_PROMPTS[:n_prompts]]
    configure_assistant(draft, k)
    ar = our_arm(MethodSpec(name="ar", policy="none"), target, None, 0, max_new_tokens)
    exact = our_arm(MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="model")), target, draft, k, max_new_tokens)
    static = hf_static_kwargs()
    # warm-up: one short pass of every code path; with the static cache, ours on the longest prompt (its cache is
    # sized and its graphs captured for the run, not inside a timed generation) and transformers' compiled step
    warm = max(prompts, key=len) if static else prompts[0][:64]
    for fn, prompt in ((ar, warm), (exact, warm), (lambda p: hf_generate(target, p, 8, **static), prompts[0][:64]),
                       (lambda p: hf_generate(target, p, 8, assistant_model=draft.model), prompts[0][:64])):
        fn(prompt)
    models = {"target": target.model, "draft": draft.model} if breakdown else None
    label = "AR arm vs HF generate (greedy" + (", static cache" + (", compiled" if not static["disable_compile"]
                                                                   else "") if static else "") + ")"
    greedy = Comparison(label, 0.95)
    compare_pairwise(greedy, target, prompts, repeats, clock, ar,
                     lambda p: hf_generate(target, p, max_new_tokens, **static), models)
    assisted = Comparison(f"exact arm vs HF assisted generation (k={k})", 1.0)
    compare_pairwise(assisted, target, prompts, repeats, clock, exact,
                     lambda p: hf_generate(target, p, max_new_tokens, assistant_model=draft.model), models)
    return [greedy, assisted]


def bench_prompt_lookup(target, num_tokens: int, max_ngram: int, max_new_tokens: int, repeats: int,
                        n_prompts: int, breakdown: bool = False) -> list[Comparison]:
    clock = Clock(target.device)
    prompts = [encode_prompt(target.tokenizer, text) for text in CODE_PROMPTS[:n_prompts]]
    drafter = DrafterSpec(kind="ngram", knobs={"max_ngram": max_ngram, "num_tokens": num_tokens})
    method = MethodSpec(name="exact-ngram", policy="exact", drafter=drafter)
    ours = our_arm(method, target, None, num_tokens, max_new_tokens)

    def reference(prompt: list[int]) -> list[int]:
        return hf_generate(target, prompt, max_new_tokens, prompt_lookup_num_tokens=num_tokens,
                           max_matching_ngram_size=max_ngram)

    ours(max(prompts, key=len) if hf_static_kwargs() else prompts[0][:64])  # static: sized and captured here
    hf_generate(target, prompts[0][:64], 8, prompt_lookup_num_tokens=num_tokens)
    lookup = Comparison(f"exact+ngram arm vs HF prompt lookup (n≤{max_ngram}, {num_tokens} tokens)", 1.0)
    compare_pairwise(lookup, target, prompts, repeats, clock, ours, reference,
                     {"target": target.model} if breakdown else None)
    return [lookup]
