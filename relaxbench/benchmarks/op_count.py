"""Counting what a piece of code asks of torch: every aten operation it dispatches, and every host synchronisation.

A batched rule's promise is a fixed number of tensor operations, whatever the batch size, and no device→host round
trip inside a decision. Both are properties of the code, not of the machine, so they are counted rather than timed:
``count(fn)`` runs ``fn`` under a ``TorchDispatchMode`` (every aten operation, after autograd and the Python API are
resolved: what a device would launch; views, which launch nothing, are counted apart) and a ``TorchFunctionMode``
(the Python calls that read a tensor's value on the host: ``Tensor.item``, ``tolist``, ``__bool__``, ``__int__``,
``__float__``, ``__index__``, ``numpy``).

A synchronisation is any of:

* a host read of a tensor's value (the calls above; on a GPU each waits for the device);
* an aten operation whose output shape depends on the data (``nonzero``, ``masked_select``, the ``unique`` family,
  ``repeat_interleave`` without ``output_size``, ``bincount``, ...): the host must read a count before it can
  allocate;
* indexing with a boolean mask (``x[mask]``, ``x[mask] = y``: the kernel turns the mask into positions);
* ``_local_scalar_dense`` (what ``item`` and ``bool`` dispatch to) and a copy from a device to the host;
* a tensor made from host data (``torch.tensor(x)``, ``as_tensor``: ``lift_fresh``) or a blocking copy from the
  host to a device: on a GPU, copying pageable host memory waits for the stream (the sync debug mode flags it),
  and on a CPU run the counter sees the ``lift_fresh`` that would become that copy.

A host read is named once, by its Python call: the ``_local_scalar_dense`` it dispatches to is not counted again.

``random_batch`` builds what a count (or a timing) runs a rule on: a valid random ``Batch`` for any registered rule,
with what its ``needs`` ask for (``random_step`` and ``batch_for``: one step shared by many rules).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from relaxbench.benchmarks.policies import HIDDEN
from relaxbench.ops.sampling import BatchSampling, SamplingParams
from relaxbench.policies.base import Need, VerificationPolicy
from relaxbench.policies.batch import Batch, Rows
from relaxbench.policies.compatibility import drafter_duties

__all__ = ["DATA_DEPENDENT_OPS", "HOST_READS", "Counts", "RandomStep", "batch_for", "count", "random_batch",
           "random_step"]

# aten operations (overload packet names) whose output shape, or whose result on the host, depends on the data
DATA_DEPENDENT_OPS = frozenset({
    "_local_scalar_dense", "nonzero", "nonzero_static_fallback", "masked_select", "_unique", "_unique2",
    "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount", "equal", "is_nonzero", "allclose",
    "lift_fresh", "lift_fresh_copy",
})
# indexing operations that turn a boolean mask among their indices into positions (a ``nonzero`` inside the kernel)
MASK_INDEXING_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index",
                               "_unsafe_index_put"})
# Tensor methods that read a value onto the host
HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy"})


@dataclass(frozen=True)
class Counts:
    """What one call dispatched: ``ops`` aten operations that compute (views excluded: torch picks a view or not
    by shape, e.g. ``repeat_interleave`` of one element, and a view launches nothing), ``syncs`` host
    synchronisations among or besides them, ``sync_names`` the name of each in order, ``views`` the view operations,
    ``op_names`` how often each aten operation (views included) ran."""

    ops: int
    syncs: int
    sync_names: tuple[str, ...] = ()
    views: int = 0
    op_names: Counter[str] = field(default_factory=Counter, compare=False, repr=False)


def _is_blocking_transfer(func: Any, args: tuple, kwargs: dict) -> bool:
    """A copy between the host and a device that waits: device → host always (``.cpu()``, ``.to("cpu")``), host →
    device unless ``non_blocking``."""
    name = func.overloadpacket.__name__
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and kwargs.get("device") is not None:
        source, target = args[0].device.type, torch.device(kwargs["device"]).type
        return source != target and (target == "cpu" or not kwargs.get("non_blocking", False))
    if name == "copy_" and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        target, source = args[0].device.type, args[1].device.type
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        return source != target and (target == "cpu" or not non_blocking)
    return False


def _has_mask_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


class _Recorder:
    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.views = 0
        self.syncs: list[str] = []
        self.host_read_depth = 0  # inside a recorded host read: its _local_scalar_dense is that read


class _OpMode(TorchDispatchMode):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.recorder.ops[name] += 1
        self.recorder.views += bool(func.is_view)
        data_dependent = name in DATA_DEPENDENT_OPS or (
            name == "repeat_interleave" and func._overloadname in ("Tensor", "self_Tensor")
            and kwargs.get("output_size") is None) or (
            name in MASK_INDEXING_OPS and _has_mask_index(args))
        if (data_dependent or _is_blocking_transfer(func, args, kwargs)) and not (
                name == "_local_scalar_dense" and self.recorder.host_read_depth):
            self.recorder.syncs.append(f"aten.{name}")
        return func(*args, **kwargs)


class _HostReadMode(TorchFunctionMode):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_READS and args and isinstance(args[0], torch.Tensor):
            self.recorder.syncs.append(f"Tensor.{name}")
            self.recorder.host_read_depth += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.recorder.host_read_depth -= 1
        return func(*args, **kwargs)


def count(fn: Callable[[], Any]) -> Counts:
    """Run ``fn()`` once and count its aten operations and host synchronisations (its result is discarded)."""
    recorder = _Recorder()
    with _HostReadMode(recorder), _OpMode(recorder):
        fn()
    total = sum(recorder.ops.values())
    return Counts(total - recorder.views, len(recorder.syncs), tuple(recorder.syncs), recorder.views, recorder.ops)


# -- a random batch for any rule ----------------------------------------------------------------------------------
SAMPLED = SamplingParams(temperature=0.7)  # the sampling-mode setting of a random batch
Settings = SamplingParams | Sequence[SamplingParams] | None  # one setting for every request, or one per request


@dataclass(frozen=True, eq=False)
class RandomStep:
    """One random verification step, laid out as an engine hands it over (flattened rows and index maps), holding
    everything any rule may read; ``batch_for`` gives a rule the ``Batch`` of what it reads, sharing the tensors, so
    many rules are timed side by side on one step without a copy each. The draft logits and hidden states are drawn
    on first use, each from its own seed, so what a rule gets does not depend on which rules asked before, and are
    shared with the step in the other mode (``in_mode``)."""

    drafts: torch.Tensor  # [B, K]
    num_drafts: torch.Tensor  # [B]
    k_list: tuple[int, ...]
    target: Rows  # [T + B, V], index [B, K + 1]
    draft_index: torch.Tensor  # [B, K]
    accept_u: torch.Tensor  # [B, K] float64 (zeros for a greedy request)
    draw_u: torch.Tensor  # [B] float64
    params: tuple[SamplingParams, ...]  # each request's
    device: torch.device
    dtype: torch.dtype
    seed: int
    hidden: Mapping[str, int]
    drawn: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)  # lazily drawn rows, shared by modes

    @property
    def sampling(self) -> bool:
        """Whether any request samples."""
        return any(not p.greedy for p in self.params)

    @property
    def modes(self) -> set[str]:
        """The decoding modes of the step's requests."""
        return {"greedy" if p.greedy else "sampling" for p in self.params}

    @property
    def total(self) -> int:
        return sum(self.k_list)

    def _generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 7919 + offset)

    def _drawn(self, key: str, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key not in self.drawn:
            self.drawn[key] = draw()
        return self.drawn[key]

    @property
    def draft_logits(self) -> torch.Tensor:
        """[T, V] the drafter's logits: its target row plus noise."""
        def draw() -> torch.Tensor:
            valid = self.num_drafts.unsqueeze(-1) > torch.arange(self.drafts.shape[1], device=self.device)
            rows = self.target.index[:, :-1][valid]
            noise = torch.randn(self.total, int(self.target.source.shape[-1]), generator=self._generator(1))
            return (self.target.source[rows].float() + 1.5 * noise.to(self.device)).to(self.dtype)
        return self._drawn("draft_logits", draw)

    @property
    def hidden_states(self) -> torch.Tensor:
        rows = int(self.target.source.shape[0])
        return self._drawn("hidden_states", lambda: torch.randn(rows, self.hidden["target"], generator=self._generator(
            2)).to(self.device, self.dtype))

    @property
    def draft_hidden_states(self) -> torch.Tensor:
        return self._drawn("draft_hidden_states", lambda: torch.randn(
            self.total, self.hidden["draft"], generator=self._generator(3)).to(self.device, self.dtype))

    def in_mode(self, sampling: bool, settings: Settings = None) -> RandomStep:
        """The same step decoded in another mode (or with other settings): the same rows (shared, not copied), its
        own uniforms."""
        params = _params(sampling, settings, len(self.k_list))
        accept_u, draw_u = _uniforms(int(self.drafts.shape[1]), params, self._generator(5))
        return replace(self, params=params, accept_u=accept_u.to(self.device), draw_u=draw_u.to(self.device))

    def extra_logits(self, counts: list[int]) -> Rows:
        """``counts[b]`` rows per request (the target's logits at a rule's extra verify tokens), index [B, E]."""
        total = sum(counts)
        counted = torch.tensor(counts, device=self.device)
        first = self.target.index[:, 0].repeat_interleave(counted, output_size=total)
        noise = torch.randn(total, int(self.target.source.shape[-1]), generator=self._generator(4))
        source = (self.target.source[first].float() + 2.0 * noise.to(self.device)).to(self.dtype)
        starts = torch.cumsum(counted, 0) - counted
        columns = torch.arange(max(counts), device=self.device)
        index = starts.unsqueeze(-1) + torch.minimum(columns, (counted - 1).clamp_min(0).unsqueeze(-1))
        return Rows(source, index.clamp_max(total - 1))


def random_step(size: int, width: int, vocab: int, *, sampling: bool, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, seed: int = 0, mixed_k: bool = True, settings: Settings = None,
                hidden: Mapping[str, int] = HIDDEN) -> RandomStep:
    """A random step of ``size`` requests (see ``random_batch``), drawn on the CPU from ``seed`` and moved to
    ``device`` in ``dtype``."""
    if size < 1 or width < 1 or vocab < 4:
        raise ValueError("a random batch needs size >= 1, width >= 1 and vocab >= 4")
    params = _params(sampling, settings, size)
    g = torch.Generator().manual_seed(seed)
    ks = torch.randint(0, width + 1, (size,), generator=g) if mixed_k else torch.full((size,), width)
    ks[0] = width
    if mixed_k and size > 1:
        ks[-1] = 0
    k_list = tuple(int(k) for k in ks.tolist())
    total = sum(k_list)
    starts = torch.cumsum(ks + 1, 0) - (ks + 1)
    positions = torch.arange(width + 1)
    target_index = starts.unsqueeze(-1) + torch.minimum(positions, ks.unsqueeze(-1))
    draft_starts = torch.cumsum(ks, 0) - ks
    draft_index = (draft_starts.unsqueeze(-1) + torch.minimum(positions[:-1], (ks - 1).clamp_min(0).unsqueeze(-1))
                   ).clamp_max(total - 1)
    # LLM-like target rows: a tail of scale 2, a leading token holding most of the mass, three close alternatives
    rows = total + size
    target = 2.0 * torch.randn(rows, vocab, generator=g)
    lead = 12.0 + 6.0 * torch.rand(rows, 1, generator=g)
    boosts = torch.cat([lead, lead - 3.0 * torch.rand(rows, 3, generator=g)], dim=-1)
    target.scatter_(-1, torch.randint(0, vocab, (rows, 4), generator=g), boosts)
    # a draft is the target's argmax with probability 0.8, else one of the next three tokens
    valid = positions[:-1] < ks.unsqueeze(-1)
    ranked = torch.topk(target[target_index[:, :-1]], min(4, vocab), dim=-1).indices  # [B, K, 4]
    rank = torch.where(torch.rand(size, width, generator=g) < 0.8, 0, torch.randint(1, 4, (size, width), generator=g))
    drafts = torch.where(valid, ranked.gather(-1, rank.unsqueeze(-1)).squeeze(-1), 0)
    accept_u, draw_u = _uniforms(width, params, g)
    device = torch.device(device)
    return RandomStep(drafts.to(device), ks.to(device), k_list, Rows(target.to(device, dtype), target_index.to(device)),
                      draft_index.to(device), accept_u.to(device), draw_u.to(device), params, device, dtype, seed,
                      hidden)


def _params(sampling: bool, settings: Settings, size: int) -> tuple[SamplingParams, ...]:
    """Each request's settings: ``settings`` (one for all, or one per request), by default greedy or ``SAMPLED``;
    ``sampling`` says whether any request samples."""
    if settings is None or isinstance(settings, SamplingParams):
        params = ((settings or SAMPLED) if sampling else (settings or SamplingParams()),) * size
    else:
        params = tuple(settings)
        if len(params) != size:
            raise ValueError(f"{len(params)} sampling settings for {size} requests")
    if any(not p.greedy for p in params) != sampling:
        raise ValueError(f"settings {sorted(set(params), key=str)} do not match sampling={sampling}")
    return params


def _uniforms(width: int, params: Sequence[SamplingParams], g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 acceptance and draw uniforms, zeros for a greedy request."""
    size = len(params)
    sampled = torch.tensor([not p.greedy for p in params])
    accept = torch.rand(size, width, generator=g, dtype=torch.float64)
    draw = torch.rand(size, generator=g, dtype=torch.float64)
    return accept * sampled.unsqueeze(-1), draw * sampled


def batch_for(policy: VerificationPolicy, step: RandomStep, engine_q: bool = False) -> Batch:
    """The ``Batch`` ``policy`` (an instance, bound where it needs a tokenizer) reads from ``step``: the draft
    logits where its drafter keeps them in the step's mode (``policies.compatibility.drafter_duties``; with ``engine_q``
    the engine's q, softmax(z / T), instead), the hidden states and extra-token logits its ``needs`` ask for, the
    uniforms in its ``uniform_dtype``."""
    for mode in sorted(step.modes):
        if mode not in policy.modes:
            raise ValueError(f"rule {policy.name!r} does not run in {mode} mode")
    draft_logits = draft_probs = None
    if any(drafter_duties(policy, p).keep_logits for p in set(step.params)):
        if engine_q:
            temperature = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in step.params],
                                       device=step.device).repeat_interleave(step.num_drafts, output_size=step.total)
            draft_probs = Rows(torch.softmax(step.draft_logits.float() / temperature.unsqueeze(-1), dim=-1),
                               step.draft_index)
        else:
            draft_logits = Rows(step.draft_logits, step.draft_index)
    extras: dict[str, Rows] = {}
    if Need.HIDDEN_STATES in policy.needs:
        extras["hidden_states"] = Rows(step.hidden_states, step.target.index)
    if Need.DRAFT_HIDDEN_STATES in policy.needs:
        extras["draft_hidden_states"] = Rows(step.draft_hidden_states, step.draft_index)
    if Need.EXTRA_TOKENS in policy.needs:
        counts = []
        for b, k in enumerate(step.k_list):
            extra = policy.extra_verify_tokens(step.drafts[b, :k])
            counts.append(0 if extra is None else int(extra.shape[0]))
        if sum(counts):
            extras["extra_logits"] = step.extra_logits(counts)
    return Batch(step.drafts, step.num_drafts, step.total, step.target,
                 BatchSampling.of(step.params, step.device), step.accept_u.to(policy.uniform_dtype),
                 step.draw_u, draft_logits=draft_logits, draft_probs=draft_probs, extras=extras,
                 any_empty=0 in step.k_list)


def random_batch(policy: VerificationPolicy, size: int, width: int, vocab: int, *, sampling: bool,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None, mixed_k: bool = True, settings: Settings = None,
                 engine_q: bool = False,
                 hidden: Mapping[str, int] = HIDDEN) -> Batch:
    """A valid random ``Batch`` of ``size`` requests for ``policy`` (an instance, bound where it needs a tokenizer).

    Each request drafts ``width`` tokens, or with ``mixed_k`` a random k_i ≤ ``width`` (the first request ``width``,
    the last, when there are two or more, none). Target rows are LLM-like (a long tail and a leading token); a draft
    is the target's argmax with probability 0.8, else one of the next three tokens. What the rule reads beyond that
    follows its ``needs`` and its drafter's duties in the mode (``batch_for``); hidden states have the sizes
    ``hidden`` (by default those of the heads ``benchmarks.policies.bench_knobs`` writes). ``settings``: one
    setting for every request (default: greedy, or temperature 0.7 with ``sampling``) or one per request, which may
    mix greedy and sampled requests (``sampling`` then says whether any samples); a greedy request's uniforms are
    zeros.
    ``generator`` (CPU) draws the step's seed, so successive calls give different batches (None: seed 0)."""
    seed = 0 if generator is None else int(torch.randint(0, 2 ** 31 - 1, (1,), generator=generator))
    step = random_step(size, width, vocab, sampling=sampling, device=device, dtype=dtype, seed=seed, mixed_k=mixed_k,
                       settings=settings, hidden=hidden)
    return batch_for(policy, step, engine_q)
