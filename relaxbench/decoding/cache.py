"""KV-cache creation, forward passes and the one rollback helper.

``rollback`` is the only caller of transformers' ``Cache.crop``, whose argument (under the pinned transformers 5.x)
is a negative number of tokens to remove.

Two cache layouts (``KVSettings``): ``dynamic`` (transformers' ``DynamicCache``, grown by concatenation, cropped on
rollback) and ``static`` (transformers' ``StaticCache``: one preallocated buffer per layer, written at the cache's
own length, which ``CachedLM`` sets before every forward, so a rollback is a length change and nothing is
reallocated). Only the static layout can be captured as CUDA graphs (``decoding.graphs``): its addresses never move.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from relaxbench.decoding.bf16_rows import fp32_linears_for_wide_rows
from relaxbench.decoding.graphs import Capture, GraphReport, StepGraphs
from relaxbench.errors import ConfigError

KV_CACHES = ("dynamic", "static")
CAPACITY_STEP = 256  # a static cache's length is rounded up to this, so a slightly longer prompt reuses it


@dataclass(frozen=True)
class KVSettings:
    """The process's decode-path setting (``--kv-cache``, ``--graphs``): how the loop's and the LM drafters' caches
    are laid out and whether their small forwards replay captured graphs. Not part of a run's key: the outputs are
    the same (docs/design.md, "Static cache and graphs")."""

    kv_cache: str = "dynamic"
    graphs: bool = False
    asked: bool = False  # the user named static or graphs on (not auto): a model that cannot have them is an error

    def describe(self) -> dict[str, object]:
        return {"kv_cache": self.kv_cache, "graphs": self.graphs}


_SETTINGS = KVSettings()


def resolve_kv_settings(kv_cache: str, graphs: str, device: str, device_map: str | None = None) -> KVSettings:
    """``--kv-cache`` and ``--graphs`` (auto/on/off) for ``device``: graphs auto is on for CUDA, off elsewhere and
    for a target spread over GPUs (``--device-map``: a graph is captured on one device); graphs need the static
    cache (auto picks it), and a CUDA device."""
    cuda = str(device).startswith("cuda")
    if graphs == "on" and not cuda:
        raise ConfigError(f"--graphs on needs a CUDA device (captured graphs are CUDA graphs); this run is on {device}")
    if graphs == "on" and device_map:
        raise ConfigError("--graphs on cannot be used with --device-map (a target spread over GPUs is not captured "
                          "as one graph); use --graphs off")
    use_graphs = graphs == "on" or (graphs == "auto" and cuda and kv_cache != "dynamic" and not device_map)
    if use_graphs and kv_cache == "dynamic":
        raise ConfigError("--graphs on needs --kv-cache static (or auto): a captured forward needs a cache whose "
                          "buffers never move")
    kind = "static" if use_graphs or kv_cache == "static" else "dynamic"
    return KVSettings(kind, use_graphs, asked=graphs == "on" or kv_cache == "static")


def configure_kv(settings: KVSettings) -> None:
    global _SETTINGS
    _SETTINGS = settings


def kv_settings() -> KVSettings:
    return _SETTINGS


def new_cache(model: torch.nn.Module):
    """An empty dynamic cache laid out for ``model`` (sliding-window layers included)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def has_sliding_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` has sliding-window attention layers in use (a ring buffer: no rollback by a length)."""
    layer_types = getattr(model.config, "layer_types", None) or ()
    return any("sliding" in str(kind) for kind in layer_types) and bool(getattr(model.config, "use_sliding_window",
                                                                                True))


def new_static_cache(model: torch.nn.Module, capacity: int):
    """A preallocated cache of ``capacity`` positions per layer for ``model``; sliding-window layers are refused."""
    from transformers import StaticCache

    if has_sliding_layers(model):
        raise ConfigError(f"--kv-cache static: {type(model).__name__} has sliding-window layers, which a static cache "
                          "cannot roll back; use --kv-cache dynamic")
    return StaticCache(config=model.config, max_cache_len=capacity)


def _set_static_length(cache, length: torch.Tensor | int) -> None:
    """Where the next forward writes: each layer's ``cumulative_length`` (a device tensor once allocated)."""
    for layer in cache.layers:
        if isinstance(length, torch.Tensor):
            layer.cumulative_length.copy_(length.reshape(()))
        else:
            layer.cumulative_length.fill_(length)


def _outputs(out, n_logits: int, want_hidden: bool, hidden_layers: tuple[int, ...]) -> ForwardOutput:
    logits = out.logits[0, -n_logits:].float() if n_logits > 0 else out.logits[0, :0].float()
    hidden = out.hidden_states[-1][0, -n_logits:] if want_hidden else None
    layers = tuple(out.hidden_states[i][0] for i in hidden_layers)
    return ForwardOutput(logits, hidden, layers)


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def rollback(cache, keep: int) -> None:
    """Drop every cached position at index >= ``keep``."""
    current = cache_length(cache)
    if keep > current or keep < 0:
        raise ValueError(f"cannot roll a cache of length {current} back to {keep}")
    if keep == current:
        return
    cache.crop(keep - current)


@dataclass(frozen=True)
class ForwardOutput:
    logits: torch.Tensor  # [n_logits, V], float32
    hidden: torch.Tensor | None  # [n_logits, H] last-layer hidden states, when asked for
    layers: tuple[torch.Tensor, ...] = ()  # [n_fed, H] each: ``hidden_states[i]`` for each asked index i


def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache, n_logits: int,
            want_hidden: bool = False, fp32_wide_rows: bool = True,
            hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
    """Run ``input_ids`` (1-D) through ``model`` on top of ``cache``; logits for the last ``n_logits`` positions.
    A bf16 model on a CPU without bf16 units computes a wide forward's linear layers in fp32 (``bf16_rows``;
    ``fp32_wide_rows=False`` keeps bf16's own kernel, for ``relaxbench bench forward`` to compare the two).
    ``hidden_layers``: indices into transformers' ``hidden_states`` tuple (0 the embeddings, i the input of decoder
    layer i, the last the final normed state) returned for every fed position, for drafters fed by the target."""
    rows = int(input_ids.shape[0]) if fp32_wide_rows else 0
    with fp32_linears_for_wide_rows(model, rows):
        out = model(
            input_ids=input_ids.unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=max(n_logits, 1),
            output_hidden_states=want_hidden or bool(hidden_layers),
        )
    return _outputs(out, n_logits, want_hidden, hidden_layers)


def forward_static(model: torch.nn.Module, input_ids: torch.Tensor, cache, start: int | torch.Tensor,
                   n_logits: int, want_hidden: bool = False, hidden_layers: tuple[int, ...] = (),
                   fp32_wide_rows: bool = True) -> ForwardOutput:
    """``forward`` on a static cache: positions ``start``... are written (``start`` a host int or a device tensor of
    one element, as a captured graph reads it), whatever the cache held there before."""
    n = int(input_ids.shape[0])
    if isinstance(start, torch.Tensor):
        positions = start.reshape(1) + torch.arange(n, device=input_ids.device)
    else:
        positions = torch.arange(start, start + n, device=input_ids.device)
    _set_static_length(cache, start)
    rows = n if fp32_wide_rows else 0
    with fp32_linears_for_wide_rows(model, rows):
        out = model(
            input_ids=input_ids.unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            position_ids=positions.unsqueeze(0),
            logits_to_keep=max(n_logits, 1),
            output_hidden_states=want_hidden or bool(hidden_layers),
        )
    return _outputs(out, n_logits, want_hidden, hidden_layers)


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of leading positions where the 1-D tensors ``a`` and ``b`` agree."""
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n


class CachedLM:
    """A causal LM, its KV cache and the ids that cache holds.

    Keeping the ids next to the cache makes rollback exact and general: after any round, the cache is cut back to
    the longest prefix it shares with the committed sequence (a cached position depends only on the tokens up to
    it, so every kept entry is valid), whatever the drafter or policy fed.

    ``kv_cache="static"``: the cache is preallocated (``reserve``; it grows, copying what it holds, only when a
    sequence outruns it) and a rollback only shortens ``ids``: the next forward writes from ``length`` on, and the
    causal mask hides whatever lies beyond. ``graphs``: forwards of a captured width (``capture``) replay a graph.
    """

    def __init__(self, model: torch.nn.Module, kv_cache: str = "dynamic", graphs: bool = False,
                 capture: Capture | None = None) -> None:
        if kv_cache not in KV_CACHES:
            raise ConfigError(f"kv cache must be one of {', '.join(KV_CACHES)}, got {kv_cache!r}")
        if graphs and kv_cache != "static":
            raise ConfigError("captured graphs need the static kv cache")
        self.model, self.kv_cache, self.graphs, self.capture_fn = model, kv_cache, graphs, capture
        self.device = model.get_input_embeddings().weight.device  # the first layer's (a model may span GPUs)
        self.capacity = 0
        self.cache = new_cache(model) if kv_cache == "dynamic" else None
        self.ids = torch.empty(0, dtype=torch.long, device=self.device)
        self.step_graphs: dict[tuple[bool, tuple[int, ...], bool], StepGraphs] = {}  # (hidden, layers, last only)
        self.report = GraphReport()

    @classmethod
    def configured(cls, model: torch.nn.Module) -> CachedLM:
        """A CachedLM laid out as this process's ``--kv-cache``/``--graphs`` say (the loop's and LM drafters')."""
        settings = kv_settings()
        if settings.kv_cache == "static" and has_sliding_layers(model):
            if settings.asked:
                new_static_cache(model, 1)  # the one-line refusal, before any decoding
            return cls(model)  # auto: this model keeps the dynamic cache
        return cls(model, settings.kv_cache, settings.graphs)

    @property
    def static(self) -> bool:
        return self.kv_cache == "static"

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    def reset(self) -> None:
        if self.static:  # the buffers (and the graphs reading them) stay: the length alone goes back to 0
            self.ids = self.ids[:0]
            return
        self.cache = new_cache(self.model)
        self.ids = self.ids[:0]

    def reserve(self, positions: int) -> None:
        """Make room for ``positions`` cached tokens (static layout; a dynamic cache grows by itself). A larger
        buffer is allocated, what the cache holds copied into it and the graphs, which read the old one, dropped."""
        if not self.static or positions <= self.capacity:
            return
        capacity = -(-positions // CAPACITY_STEP) * CAPACITY_STEP
        old, self.cache = self.cache, new_static_cache(self.model, capacity)
        if old is not None and self.length:
            self._copy_prefix(old, self.cache, self.length)
        self.capacity = capacity
        self.step_graphs.clear()

    @staticmethod
    def _copy_prefix(old, new, n: int) -> None:
        for src, dst in zip(old.layers, new.layers, strict=True):
            if not getattr(src, "is_initialized", False):
                continue
            dst.lazy_initialization(src.keys, src.values)
            dst.keys[:, :, :n].copy_(src.keys[:, :, :n])
            dst.values[:, :, :n].copy_(src.values[:, :, :n])

    def capture(self, widths: Iterable[int], want_hidden: bool = False, hidden_layers: tuple[int, ...] = (),
                last_only: bool = False) -> None:
        """Capture the forwards of ``widths`` tokens now (before timing), for outputs of this kind: logits of every
        fed token, or with ``last_only`` of the last one (a draft LM's pending feed: the LM head then multiplies one
        row, as the eager call does). The cache is written at positions 0.. during the capture, so this is done on
        an empty sequence."""
        if not self.graphs:
            return
        if self.length:
            raise ValueError("capture graphs on an empty sequence (reset first)")
        widths = tuple(widths)
        self.reserve(max(widths, default=1))
        graphs = self._graphs((want_hidden, tuple(hidden_layers), last_only), widths)
        before = graphs.report.graphs, graphs.report.seconds, len(graphs.report.buckets)
        graphs.capture_all()
        self.report.graphs += graphs.report.graphs - before[0]
        self.report.seconds += graphs.report.seconds - before[1]
        self.report.buckets += graphs.report.buckets[before[2]:]

    def _graphs(self, key: tuple[bool, tuple[int, ...], bool], widths: Iterable[int] = ()) -> StepGraphs:
        graphs = self.step_graphs.get(key)
        if graphs is None or not set(widths) <= set(graphs.buckets):
            buckets = set(widths) | set(graphs.buckets if graphs is not None else ())
            captured = graphs.captured if graphs is not None else {}
            report = graphs.report if graphs is not None else GraphReport()
            graphs = StepGraphs(self._step(*key), buckets, self.device, self.capture_fn or _default_capture(self.device))
            graphs.captured.update(captured)
            graphs.report = report
            self.step_graphs[key] = graphs
        return graphs

    def _step(self, want_hidden: bool, hidden_layers: tuple[int, ...], last_only: bool):
        def step(ids: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, ...]:
            n_logits = 1 if last_only else int(ids.shape[0])
            out = forward_static(self.model, ids, self.cache, start, n_logits, want_hidden, hidden_layers,
                                 fp32_wide_rows=False)
            return (out.logits, *((out.hidden,) if want_hidden else ()), *out.layers)
        return step

    def run(self, new_ids: torch.Tensor, n_logits: int, want_hidden: bool = False,
            hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Append ``new_ids`` to the cache; return logits (and hidden states) for the last ``n_logits`` of them, and
        the ``hidden_layers`` asked for at every one of them."""
        if not self.static:
            out = forward(self.model, new_ids, self.cache, n_logits, want_hidden, hidden_layers=hidden_layers)
        else:
            n = int(new_ids.shape[0])
            self.reserve(self.length + n)
            out = self._replayed(new_ids, n_logits, want_hidden, hidden_layers) if self.graphs else None
            if out is None:
                out = forward_static(self.model, new_ids, self.cache, self.length, n_logits, want_hidden,
                                     hidden_layers)
        self.ids = torch.cat([self.ids, new_ids])
        return out

    def _replayed(self, new_ids: torch.Tensor, n_logits: int, want_hidden: bool,
                  hidden_layers: tuple[int, ...]) -> ForwardOutput | None:
        """The forward as a replayed graph, when one of this kind was captured for its width (a last-token graph:
        exactly its width; an every-token graph: a width >= it, padded) and the padding fits the cache; else None
        (run eagerly)."""
        n = int(new_ids.shape[0])
        if n == 0:
            return None
        layers = tuple(hidden_layers)
        if n_logits == 1 and n > 1:
            graphs = self.step_graphs.get((want_hidden, layers, True))
            if graphs is not None and n in graphs.captured:
                return self._cut(graphs.run(new_ids, self.length), 1, 1, want_hidden)
        graphs = self.step_graphs.get((want_hidden, layers, False))
        bucket = None if graphs is None else graphs.bucket_for(n)
        if bucket is None or bucket not in graphs.captured or self.length + bucket > self.capacity:
            return None
        return self._cut(graphs.run(new_ids, self.length), n, n_logits, want_hidden)

    @staticmethod
    def _cut(outs: tuple[torch.Tensor, ...], rows: int, n_logits: int, want_hidden: bool) -> ForwardOutput:
        """A graph's outputs (logits and hidden state for ``rows`` rows, then the asked layers) as ``forward``'s."""
        logits, rest = outs[0], list(outs[1:])
        hidden = rest.pop(0) if want_hidden else None
        cut = slice(rows - n_logits, rows) if n_logits > 0 else slice(0, 0)
        return ForwardOutput(logits[cut], None if hidden is None else hidden[cut], tuple(rest))

    def truncate(self, keep: int) -> None:
        if not self.static:
            rollback(self.cache, keep)
        elif not 0 <= keep <= self.length:
            raise ValueError(f"cannot roll a cache of length {self.length} back to {keep}")
        self.ids = self.ids[:keep]

    def sync_to(self, context: torch.Tensor) -> None:
        """Keep the longest valid prefix of the cache for ``context``, leaving at least its last token unfed
        (the next forward must produce logits for the position after it)."""
        keep = min(common_prefix_length(self.ids, context), context.shape[0] - 1)
        if keep < self.length:
            self.truncate(keep)

    def pending(self, context: torch.Tensor) -> torch.Tensor:
        """The ids of ``context`` not yet in the cache (``sync_to`` first)."""
        return context[self.length:]


def _default_capture(device: torch.device) -> Capture:
    """CUDA graphs sharing one memory pool on a GPU; elsewhere the eager stand-in (tests only: the settings refuse
    graphs off CUDA)."""
    if device.type != "cuda":
        from relaxbench.decoding.graphs import replay_capture

        return replay_capture
    from functools import partial

    from relaxbench.decoding.graphs import cuda_capture

    return partial(cuda_capture, pool=torch.cuda.graph_pool_handle())
