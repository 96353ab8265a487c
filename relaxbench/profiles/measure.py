"""Measure a cost profile on the current device: the grid of forward costs of the loaded target (and draft model),
their prefill costs, and the cost of an n-gram lookup.

Each grid point is timed as the engine runs it: a ``CachedLM`` holding ``L`` tokens runs ``n`` new tokens with
logits for all of them (as a verify pass and FLy's n-gram check do), then is cut back to ``L``. At a batch size
B > 1 the same model call runs B rows of ``n`` new tokens over one B-row KV cache of ``L`` tokens each (the
transformers model and cache the engine uses, cut back by the engine's ``rollback``): a step of B requests at one
context and verify size, as the analytic roofline assumes. Prefill is one request's at every batch size. Every
shape gets ``warmup`` untimed runs (first calls select kernels), then ``repeats`` timed ones; the table holds their
median. ``timing.Clock`` synchronises the device before reading the time, so on CUDA the work is timed, not its
launch. The same function measures ``relaxbench profile``'s file and the ``this-machine`` profile a ``compare``
session measures once at its start for every arm (at batch 1: that engine runs one request at a time).
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from relaxbench.decoding.bf16_rows import fp32_linears_for_wide_rows
from relaxbench.decoding.cache import CachedLM, new_cache, rollback
from relaxbench.decoding.drafters import prompt_lookup
from relaxbench.errors import ConfigError
from relaxbench.machine import isa_limits
from relaxbench.profiles.spec import Curve, ForwardTable, ModelCosts, Profile, batch_text, check_batch_sizes
from relaxbench.timing import Clock

MACHINE_PROFILE = "this-machine"
LOOKUP_REPEATS = 25  # a lookup takes well under a millisecond: more repeats for a steady median
LOOKUP_NGRAM = (4, 1, 6)  # max n, min n, tokens copied: FLy's defaults (the widest search of the shipped methods)


def median(times: Sequence[float]) -> float:
    """The median, to 6 significant digits (a profile file stays readable; timings are not that precise)."""
    return float(f"{statistics.median(times):.6g}")


@dataclass(frozen=True)
class Grid:
    """Where to measure: target forwards at ``new_tokens`` × ``context``, draft forwards at ``draft_new_tokens`` ×
    ``context``, each at every batch size in ``batch``; prefill at ``prefill`` tokens, n-gram lookups at
    ``lookup_context`` tokens (none: no lookup)."""

    new_tokens: tuple[int, ...]
    context: tuple[int, ...]
    prefill: tuple[int, ...]
    draft_new_tokens: tuple[int, ...] = (1, 2, 4, 8)
    lookup_context: tuple[int, ...] = ()
    batch: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        check_batch_sizes(self.batch)
        for name in ("new_tokens", "context", "prefill", "draft_new_tokens", "lookup_context"):
            values = getattr(self, name)
            if list(values) != sorted(set(values)) or any(v < 0 for v in values):
                raise ConfigError(f"profile grid {name}: sizes must be distinct, increasing and >= 0, got "
                                  f"{list(values)}")
        if not self.new_tokens or self.new_tokens[0] < 1 or not self.draft_new_tokens or self.draft_new_tokens[0] < 1:
            raise ConfigError("profile grid: new-token counts must start at 1 or more")
        if not self.context or not self.prefill or self.prefill[0] < 1:
            raise ConfigError("profile grid: give at least one context length and one prefill length >= 1")

    def steps(self, with_draft: bool) -> int:
        """Timed shapes, for a progress bar: one per forward grid point and batch size, prefill length and lookup
        length."""
        per_model = len(self.batch) * len(self.context) * len(self.new_tokens) + len(self.prefill)
        draft = len(self.batch) * len(self.context) * len(self.draft_new_tokens) + len(self.prefill) \
            if with_draft else 0
        return per_model + draft + len(self.lookup_context)


def power_grid(top: int, start: int = 1) -> tuple[int, ...]:
    """start, 2·start, 4·start, ... up to and including ``top`` (``top`` itself last)."""
    values, v = [], start
    while v < top:
        values.append(v)
        v *= 2
    return tuple(values + [top])


def token_ids(vocab: int, length: int, seed: int = 0, device: torch.device | str = "cpu",
              source: Sequence[int] | None = None) -> torch.Tensor:
    """``length`` ids to feed: ``source`` repeated (a real prompt), else seeded random ids (costs do not depend on
    which tokens a dense model reads)."""
    if source:
        repeated = (list(source) * (length // len(source) + 1))[:length]
        return torch.tensor(repeated, dtype=torch.long, device=device)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(100, max(101, min(vocab, 32000)), (length,), generator=generator).to(device)


class RowsLM:
    """B requests' KV caches as one B-row cache of the model (what a batched step runs over): ``run`` feeds the same
    new ids to every row, ``truncate`` cuts every row back. The interface of ``CachedLM`` that timing needs."""

    def __init__(self, model: torch.nn.Module, rows: int) -> None:
        self.model = model
        self.rows = rows
        self.cache = new_cache(model)

    def reset(self) -> None:
        self.cache = new_cache(self.model)

    def run(self, new_ids: torch.Tensor, n_logits: int) -> torch.Tensor:
        with fp32_linears_for_wide_rows(self.model, self.rows * int(new_ids.shape[0])):  # as the engine's forward
            out = self.model(input_ids=new_ids.unsqueeze(0).expand(self.rows, -1), past_key_values=self.cache,
                             use_cache=True, logits_to_keep=max(n_logits, 1))
        return out.logits[:, -n_logits:].float() if n_logits > 0 else out.logits[:, :0].float()

    def truncate(self, keep: int) -> None:
        rollback(self.cache, keep)


@torch.inference_mode()
def measure_forwards(loaded: Any, batch: int, new_tokens: Sequence[int], context: Sequence[int], ids: torch.Tensor,
                     repeats: int, warmup: int, clock: Clock, advance: Callable[[str], None]) -> ForwardTable:
    """The forward table of one loaded model at one batch size: batch 1 through the engine's own ``CachedLM``,
    larger batches through a ``RowsLM`` of that many rows."""
    lm: CachedLM | RowsLM = CachedLM(loaded.model) if batch == 1 else RowsLM(loaded.model, batch)
    where = "" if batch == 1 else f" × {batch} requests"
    rows = []
    for ctx in context:
        lm.reset()
        if ctx:
            lm.run(ids[:ctx], n_logits=0)
        row = []
        for n in new_tokens:
            feed = ids[ctx: ctx + n]
            times = []
            for i in range(warmup + repeats):
                start = clock.now()
                lm.run(feed, n_logits=n)
                elapsed = clock.now() - start
                lm.truncate(ctx)
                if i >= warmup:
                    times.append(elapsed)
            row.append(median(times))
            advance(f"{loaded.name}: {n} new tokens on a {ctx}-token cache{where}")
        rows.append(tuple(row))
    return ForwardTable(batch=batch, new_tokens=tuple(new_tokens), context=tuple(context), seconds=tuple(rows))


@torch.inference_mode()
def measure_model(loaded: Any, new_tokens: Sequence[int], context: Sequence[int], prefill: Sequence[int],
                  repeats: int, warmup: int, advance: Callable[[str], None], source: Sequence[int] | None = None,
                  prefill_repeats: int | None = None, prefill_warmup: int | None = None,
                  batch: Sequence[int] = (1,)) -> ModelCosts:
    """The forward costs of one loaded model at every batch size in ``batch``, and its prefill costs (timed
    ``prefill_repeats`` times after ``prefill_warmup`` untimed runs; default: as the forwards)."""
    prefill_repeats = repeats if prefill_repeats is None else prefill_repeats
    prefill_warmup = warmup if prefill_warmup is None else prefill_warmup
    clock = Clock(loaded.device)
    ids = token_ids(loaded.logit_dim, max(max(context) + max(new_tokens), max(prefill)), device=loaded.device,
                    source=source)
    first, *more = (measure_forwards(loaded, b, new_tokens, context, ids, repeats, warmup, clock, advance)
                    for b in check_batch_sizes(batch))
    lm = CachedLM(loaded.model)
    prefill_seconds = []
    for tokens in prefill:
        times = []
        for i in range(prefill_warmup + prefill_repeats):
            lm.reset()
            start = clock.now()
            lm.run(ids[:tokens], n_logits=0)
            elapsed = clock.now() - start
            if i >= prefill_warmup:
                times.append(elapsed)
        prefill_seconds.append(median(times))
        advance(f"{loaded.name}: prefill of {tokens} tokens")
    return ModelCosts(model=loaded.name, dtype=str(loaded.dtype).removeprefix("torch."), forward=first,
                      forward_batches=tuple(more), prefill=Curve(tokens=tuple(prefill), seconds=tuple(prefill_seconds)))


@torch.inference_mode()
def measure_lookup(device: torch.device | str, contexts: Sequence[int], advance: Callable[[str], None],
                   repeats: int = LOOKUP_REPEATS) -> Curve:
    """Seconds of one prompt lookup (FLy's n = 4..1, 6 tokens) over a context of each length, on seeded random ids
    (so the longer n-grams rarely match: the costlier case)."""
    clock = Clock(device)
    seconds = []
    for length in contexts:
        context = token_ids(32000, max(length, 2), seed=length, device=device)
        times = []
        for i in range(repeats + 1):
            start = clock.now()
            prompt_lookup(context, *LOOKUP_NGRAM)
            if i:
                times.append(clock.now() - start)
        seconds.append(median(times))
        advance(f"n-gram lookup over {length} tokens")
    return Curve(tokens=tuple(contexts), seconds=tuple(seconds))


def describe_device(device: torch.device) -> str:
    """The device in words: the GPU's name, or the CPU's model and torch's thread count."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA)"
    from relaxbench.machine import cpu_model

    return f"{cpu_model()}, {torch.get_num_threads()} torch threads (CPU)"


def measure_profile(target: Any, draft: Any | None, grid: Grid, repeats: int = 3, warmup: int = 1,
                    name: str = MACHINE_PROFILE, advance: Callable[[str], None] | None = None,
                    source: Sequence[int] | None = None, prefill_repeats: int | None = None,
                    prefill_warmup: int | None = None) -> Profile:
    """Measure ``grid`` for the loaded ``target`` (and ``draft``) on their device; ``advance`` is called once per
    timed shape (a progress bar's step). Prefill is timed ``prefill_repeats`` times after ``prefill_warmup``
    untimed runs (default: as the forwards; a prefill is a long forward, and every sample's prefill is a first call
    of its length anyway)."""
    prefill_repeats = repeats if prefill_repeats is None else prefill_repeats
    prefill_warmup = warmup if prefill_warmup is None else prefill_warmup
    if repeats < 1 or warmup < 0 or prefill_repeats < 1 or prefill_warmup < 0:
        raise ConfigError(f"profile: need repeats >= 1 and warmup >= 0 (got {repeats}, {warmup})")
    step = advance or (lambda _: None)
    prefill_runs = {"prefill_repeats": prefill_repeats, "prefill_warmup": prefill_warmup}
    target_costs = measure_model(target, grid.new_tokens, grid.context, grid.prefill, repeats, warmup, step, source,
                                 **prefill_runs, batch=grid.batch)
    draft_costs = None
    if draft is not None:
        draft_costs = measure_model(draft, grid.draft_new_tokens, grid.context, grid.prefill, repeats, warmup, step,
                                    source, **prefill_runs, batch=grid.batch)
    lookup = measure_lookup(target.device, grid.lookup_context, step) if grid.lookup_context else None
    settings = {"repeats": repeats, "warmup": warmup, **prefill_runs, "batch_sizes": list(grid.batch),
                "statistic": "median", "threads": torch.get_num_threads(),
                "torch": torch.__version__, "host": platform.node(), "device": str(target.device),
                "isa_limits": isa_limits(),
                "load_average": _load_average()}
    return Profile(
        name=name, kind="measured", device=describe_device(target.device),
        assumptions=((f"measured at {batch_text(grid.batch)} with this relaxbench's engine (CachedLM forwards, "
                      "logits for every new token"
                      + ("; a batch of B: B rows over one B-row KV cache, every row at the same context and new "
                         "tokens" if grid.batch != (1,) else "")
                      + "), on this machine as it was loaded at the time"),),
        sources={"forward": f"median of {repeats} timed forwards per grid point after {warmup} untimed",
                 "prefill": f"median of {prefill_repeats} timed prefills per length after {prefill_warmup} untimed",
                 **({"ngram_lookup": f"median of {LOOKUP_REPEATS} timed lookups per length"} if lookup else {})},
        settings=settings, target=target_costs, draft=draft_costs, ngram_lookup=lookup)


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None
