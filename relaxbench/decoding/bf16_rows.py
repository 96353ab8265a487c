"""A bf16 model's wide forwards on a CPU without bf16 units: each linear layer computed in fp32.

Without AVX512-BF16 or AMX, torch multiplies bf16 matrices with a kernel whose cost grows with the number of rows
nearly as one product per row, while fp32's matrix product stays nearly flat (docs/performance.md, "bf16 on a CPU
without bf16 units"). A bf16 draft on such a CPU (the AVX2 default) therefore paid about one one-token step per
prompt token for its prefill. Inside ``fp32_linears_for_wide_rows`` a linear layer that multiplies
``FP32_ROWS_FROM`` rows or more upcasts its weights, a slice of output features at a time (exact: every bf16 value
is an fp32 value), multiplies in fp32 and rounds the result to bf16, which is what the bf16 kernel does with a
different order of summation; a narrower product (a one- or two-token step, a prefill's one row of logits) keeps
the bf16 kernel, which is faster there. Where the CPU has bf16 units, on a GPU and for other dtypes nothing changes.

The switch is a ``torch.overrides.TorchFunctionMode`` around one model call: it intercepts
``torch.nn.functional.linear`` for that call alone, with no change to the model or to transformers.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from relaxbench.machine import has_bf16_units

FP32_ROWS_FROM = 16  # rows from which fp32 was faster on every CPU measured (docs/performance.md)
FP32_SLICE_ELEMENTS = 1 << 24  # weight elements upcast at once: 64 MB of fp32, whatever the layer's size


def wide_rows_in_fp32(model: Any) -> bool:
    """Whether ``model`` computes its wide linear layers in fp32: a bf16 model (its input embeddings' dtype) on a
    CPU without bf16 units."""
    weight = model.get_input_embeddings().weight
    return weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and not has_bf16_units()


def fp32_linears_for_wide_rows(model: Any, rows: int):
    """A context for one call of ``model`` on ``rows`` input rows (batch × new tokens): fp32 linear layers where
    ``wide_rows_in_fp32`` holds and ``rows >= FP32_ROWS_FROM``, else nothing."""
    if rows >= FP32_ROWS_FROM and wide_rows_in_fp32(model):
        return _Fp32WideLinears()
    return nullcontext()


def linear_in_fp32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   scratch: list[torch.Tensor]) -> torch.Tensor:
    """``F.linear`` of bf16 operands computed in fp32 and rounded to bf16, the weight upcast a slice of output
    features at a time (at most ``FP32_SLICE_ELEMENTS`` elements), so a vocabulary-sized head adds a bounded
    temporary. ``scratch`` (a one-element list) holds the fp32 buffer the upcasts reuse, grown as needed: one
    allocation for all the layers of a forward instead of one per layer."""
    xf = x.float()
    step = max(1, min(weight.shape[0], FP32_SLICE_ELEMENTS // max(1, weight.shape[1])))
    out = None if step >= weight.shape[0] else x.new_empty(*x.shape[:-1], weight.shape[0])
    for start in range(0, weight.shape[0], step):
        part = slice(start, start + step)
        product = torch.nn.functional.linear(xf, _upcast(weight[part], scratch),
                                             None if bias is None else bias[part].float())
        if out is None:
            return product.to(x.dtype)
        out[..., part] = product
    return out


def _upcast(weight: torch.Tensor, scratch: list[torch.Tensor]) -> torch.Tensor:
    """``weight`` in fp32, as a view of the reused buffer ``scratch[0]`` (grown first if it is too small)."""
    if scratch[0].numel() < weight.numel():
        scratch[0] = torch.empty(weight.numel(), dtype=torch.float32, device=weight.device)
    return scratch[0][:weight.numel()].view(weight.shape).copy_(weight)


class _Fp32WideLinears(TorchFunctionMode):
    """Routes each bf16 ``F.linear`` of ``FP32_ROWS_FROM`` rows or more to ``linear_in_fp32``, every upcast into
    one buffer for the call (torch runs the handler with this mode off, so its own calls are not intercepted)."""

    def __init__(self) -> None:
        super().__init__()
        self.scratch = [torch.empty(0)]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if (x.dtype == weight.dtype == torch.bfloat16 and x.dim() >= 2
                    and x.numel() // x.shape[-1] >= FP32_ROWS_FROM):
                return linear_in_fp32(x, weight, bias, self.scratch)
        return func(*args, **kwargs)
