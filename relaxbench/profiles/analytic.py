"""Analytic profiles: a roofline of each model's forward on a device the user does not have at hand.

One forward step of ``B`` requests, each feeding ``n`` new tokens on top of its own KV cache of ``L`` tokens, on
``tp`` devices (tensor parallel):

* bytes read per device = (weights read per forward × bytes per weight + B × KV values of ``L + n`` tokens × bytes
  per value) / tp, at an achieved fraction of peak memory bandwidth: the weights are streamed once per step
  whatever B, every request's KV cache is read;
* FLOPs per device = B × (2 × weights read × n + 4 × layers × heads × head size × n × (L + (n + 1) / 2)) / tp
  (the matmuls of B × n tokens, then every request's attention scores and weighted values), at an achieved fraction
  of dense bf16 peak;
* time = max(memory time, compute time) + a fixed overhead per step.

At B = 1 this is one request's forward. As B grows the weights' bytes are shared by more tokens, so a step that is
memory-bound at batch 1 (where verifying k + 1 tokens costs about one token) turns compute-bound, and then every
drafted token a request verifies costs its FLOPs: the reason the best draft length falls with batch size.

Assumptions (recorded in every analytic profile and shown in the report): a step of B requests has every request
at the same context and the same number of new tokens (the priced request's own), so a request's round costs the
step it would share with B − 1 requests like it; decode is memory-bound at small B (a step streams every weight
once) and a long block or a large batch becomes compute-bound (the max); one device, or ``tp`` devices that split
weights, KV and FLOPs evenly with tensor-parallel communication not modelled (optimistic for tp > 1); the KV caches
of the B requests fit in device memory (not checked); activations, sampling and the host are free; the achieved
fractions and the overhead are the serving stack's (``profiles/devices.yaml``: measured figures of CUDA-graphed
engines), not the device's, and the same at every batch size.

The profile is the roofline evaluated on a dense grid (``ANALYTIC_NEW_TOKENS`` × ``ANALYTIC_CONTEXT``) at each batch
size asked for (default 1) and written as the same tables a measured profile is, so pricing has one code path
(``relaxbench.profiles.spec`` says why a table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from relaxbench.errors import ConfigError
from relaxbench.models.dtypes import parse_dtype
from relaxbench.models.shape import ModelShape
from relaxbench.profiles.devices import DeviceCatalog, device_catalog
from relaxbench.profiles.spec import Curve, ForwardTable, ModelCosts, Profile, batch_text, check_batch_sizes

ANALYTIC_NEW_TOKENS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128)
ANALYTIC_CONTEXT = (0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
ANALYTIC_PREFILL = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "fp8": 1, "int8": 1}

DEFAULT_BATCH = (1,)

ASSUMPTIONS = (
    "a step of B requests has every request at the same context and the same number of new tokens as the priced "
    "one: it streams every weight once, reads the B requests' KV caches and computes B × n tokens",
    "decode is memory-bound at small B; a long block or a large batch becomes compute-bound",
    "time = max(bytes / achieved bandwidth, FLOPs / achieved dense bf16 FLOP/s) + a fixed overhead per step",
    "tensor-parallel degree tp splits weights, KV cache and FLOPs evenly; its communication is not modelled",
    "the B requests' KV caches fit in device memory (not checked)",
    "activations, sampling, the policy and the host are free; the serving stack's achieved fractions and overhead "
    "are the same at every batch size",
)
HEAD_ASSUMPTION = ("a draft head's forward pays the per-forward overhead in proportion to its decoder layers: the "
                   "target's × (head layers + 1) / (target layers + 1)")


@dataclass(frozen=True)
class Roofline:
    """The cost of one model's forwards on ``tp`` devices of one kind."""

    shape: ModelShape
    bytes_per_value: float
    bandwidth: float  # bytes/s achieved per device
    flops: float  # FLOP/s achieved per device
    overhead: float  # seconds per forward
    tp: int = 1

    def memory_seconds(self, new_tokens: int, context: int, batch: int = 1) -> float:
        """Time to stream the weights once and every request's KV cache, at the achieved bandwidth."""
        s = self.shape
        weights = s.parameters_read_per_forward * self.bytes_per_value
        kv = batch * s.kv_values_per_token() * (context + new_tokens) * self.bytes_per_value
        return (weights + kv) / self.tp / self.bandwidth

    def compute_seconds(self, new_tokens: int, context: int, batch: int = 1) -> float:
        """Time of every request's matmuls and attention at the achieved FLOP/s."""
        s = self.shape
        matmul = 2.0 * s.parameters_read_per_forward * new_tokens
        attention = 4.0 * s.layers * s.attention_heads * s.head_dim * new_tokens * (context + (new_tokens + 1) / 2)
        return batch * (matmul + attention) / self.tp / self.flops

    def memory_bound(self, new_tokens: int, context: int, batch: int = 1) -> bool:
        return self.memory_seconds(new_tokens, context, batch) >= self.compute_seconds(new_tokens, context, batch)

    def seconds(self, new_tokens: int, context: int, batch: int = 1) -> float:
        """One step of ``batch`` requests, each feeding ``new_tokens`` on top of ``context`` cached tokens."""
        return max(self.memory_seconds(new_tokens, context, batch),
                   self.compute_seconds(new_tokens, context, batch)) + self.overhead


def dtype_name(dtype: str) -> str:
    """``bf16`` → ``bfloat16``; ``float8``/``fp8``/``int8`` are accepted for weights of one byte."""
    name = dtype.lower()
    if name in BYTES:
        return name
    if name == "auto":
        raise ConfigError("an analytic profile needs a dtype (bfloat16, float16, float32, fp8 or int8), not 'auto'")
    parsed = str(parse_dtype(dtype)).removeprefix("torch.")
    if parsed not in BYTES:
        raise ConfigError(f"an analytic profile cannot price {dtype!r} (dtypes: {', '.join(BYTES)})")
    return parsed


def bytes_per_value(dtype: str) -> float:
    return BYTES[dtype_name(dtype)]


def roofline(device_name: str, shape: ModelShape, dtype: str = "bfloat16", tp: int = 1,
             catalog: DeviceCatalog | None = None) -> Roofline:
    catalog = catalog or device_catalog()
    device = catalog.get(device_name)
    stack = catalog.stack_of(device)
    if tp < 1:
        raise ConfigError(f"tensor-parallel degree must be >= 1, got {tp}")
    per_device = shape.parameters * bytes_per_value(dtype) / tp
    if per_device > device.memory_gb * 1e9:
        raise ConfigError(f"{device_name}: {per_device / 1e9:.1f} GB of weights per device do not fit in "
                          f"{device.memory_gb:g} GB; raise the tensor-parallel degree (--tp)")
    return Roofline(shape, bytes_per_value(dtype), device.bandwidth * stack.achieved_bandwidth,
                    device.flops * stack.achieved_flops, stack.overhead_per_forward_s, tp)


def head_roofline(device_name: str, shape: ModelShape, target_shape: ModelShape, dtype: str = "bfloat16", tp: int = 1,
                  catalog: DeviceCatalog | None = None) -> Roofline:
    """A draft head's roofline. The stack's overhead per forward is kernel launches (``profiles/devices.yaml``: about
    1.3 us a kernel, 100-200 kernels a forward of the 0.5-1.5B targets), and a forward launches them per decoder
    layer: a head's overhead is the target's scaled by (the head's layers + 1) / (the target's layers + 1), the one
    counting the embedding, output head and sampling. Charged the target's whole overhead, a one-layer head drafting
    ten tokens a round would cost more than the verify it saves on any GPU, which EAGLE-3's measured speed-ups
    contradict."""
    line = roofline(device_name, shape, dtype, tp, catalog)
    return replace(line, overhead=line.overhead * (shape.layers + 1) / (target_shape.layers + 1))


def forward_table(line: Roofline, batch: int) -> ForwardTable:
    """The roofline of a step of ``batch`` requests on the analytic grid."""
    return ForwardTable(batch=batch, new_tokens=ANALYTIC_NEW_TOKENS, context=ANALYTIC_CONTEXT,
                        seconds=tuple(tuple(line.seconds(n, ctx, batch) for n in ANALYTIC_NEW_TOKENS)
                                      for ctx in ANALYTIC_CONTEXT))


def model_costs(name: str, shape: ModelShape, line: Roofline, dtype: str,
                batch_sizes: Sequence[int] = DEFAULT_BATCH) -> ModelCosts:
    first, *more = (forward_table(line, batch) for batch in check_batch_sizes(batch_sizes))
    prefill = Curve(tokens=ANALYTIC_PREFILL, seconds=tuple(line.seconds(p, 0) for p in ANALYTIC_PREFILL))
    return ModelCosts(model=name, dtype=dtype, forward=first, forward_batches=tuple(more), prefill=prefill)


def analytic_profile(device_name: str, target: str, target_shape: ModelShape, draft: str | None = None,
                     draft_shape: ModelShape | None = None, dtype: str = "bfloat16", tp: int = 1,
                     name: str | None = None, catalog: DeviceCatalog | None = None,
                     batch_sizes: Sequence[int] = DEFAULT_BATCH,
                     heads: Mapping[str, ModelShape] | None = None) -> Profile:
    """The roofline profile of ``target`` (and ``draft``, and each draft head of ``heads``: drafter label → the
    head's shape) on ``device_name`` (a shipped device spec), a forward table per batch size in ``batch_sizes``. A
    head is priced as the one-layer model its shape describes, in the profile's dtype, split over ``tp`` devices as
    the target is, with its share of the per-forward overhead (``head_roofline``)."""
    catalog = catalog or device_catalog()
    device = catalog.get(device_name)
    stack = catalog.stack_of(device)
    dtype = dtype_name(dtype)
    batch_sizes = check_batch_sizes(batch_sizes)
    target_costs = model_costs(target, target_shape, roofline(device_name, target_shape, dtype, tp, catalog), dtype,
                               batch_sizes)
    draft_costs = None
    if draft is not None and draft_shape is not None:
        draft_costs = model_costs(draft, draft_shape, roofline(device_name, draft_shape, dtype, tp, catalog), dtype,
                                  batch_sizes)
    head_costs = tuple(model_costs(label, shape, head_roofline(device_name, shape, target_shape, dtype, tp, catalog),
                                   dtype, batch_sizes) for label, shape in (heads or {}).items())
    sources = {f"device.{key}": value for key, value in device.sources.items()}
    sources.update({f"stack.{key}": value for key, value in stack.sources.items()})
    sources.update({f"ngram_lookup.{key}": value for key, value in catalog.host.sources.items()})
    label = device_name if tp == 1 else f"{device_name}-tp{tp}"
    return Profile(
        name=name or label, kind="analytic",
        device=f"{device.name}{f' × {tp} (tensor parallel)' if tp > 1 else ''}, analytic roofline",
        assumptions=(batch_text(batch_sizes), *ASSUMPTIONS, *((HEAD_ASSUMPTION,) if heads else ()),
                     f"tensor-parallel degree {tp}", f"weights and KV cache in {dtype}"),
        sources=sources,
        settings={"device": device_name, "tp": tp, "dtype": dtype, "batch_sizes": list(batch_sizes),
                  "memory_bandwidth_tb_s": device.memory_bandwidth_tb_s,
                  "bf16_dense_tflops": device.bf16_dense_tflops, "achieved_bandwidth": stack.achieved_bandwidth,
                  "achieved_flops": stack.achieved_flops, "overhead_per_forward_s": stack.overhead_per_forward_s,
                  "target_shape": target_shape.record(),
                  **({"draft_shape": draft_shape.record()} if draft_costs is not None and draft_shape else {}),
                  **({"head_shapes": {label: shape.record() for label, shape in heads.items()}} if heads else {})},
        target=target_costs, draft=draft_costs, heads=head_costs, ngram_lookup=catalog.host.ngram_lookup)
