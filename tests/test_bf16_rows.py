"""A bf16 model's wide forwards on a CPU without bf16 units compute their linear layers in fp32
(``relaxbench.decoding.bf16_rows``): which forwards, which layers, the numbers they give, and that nothing changes
elsewhere. The CPU is set by ``RELAXBENCH_CPU_FLAGS`` (``avx2,fma``: no bf16 units; ``amx_bf16``: bf16 units)."""

from __future__ import annotations

import pytest
import torch

from relaxbench.decoding import bf16_rows
from relaxbench.decoding.bf16_rows import FP32_ROWS_FROM, linear_in_fp32
from relaxbench.decoding.cache import forward, new_cache

NO_BF16_UNITS, BF16_UNITS = "avx2,fma", "avx2,fma,avx512f,amx_bf16"


@pytest.fixture(scope="module")
def bf16_target():
    from relaxbench.models import load_model

    return load_model("tiny-random-target", dtype="bfloat16", quiet=True)


@pytest.fixture
def fp32_calls(monkeypatch):
    """Counts the linear layers routed to fp32 (the mode looks ``linear_in_fp32`` up at each call)."""
    calls: list[tuple[int, ...]] = []

    def counted(x, weight, bias, scratch):
        calls.append(tuple(weight.shape))
        return linear_in_fp32(x, weight, bias, scratch)

    monkeypatch.setattr(bf16_rows, "linear_in_fp32", counted)
    return calls


def _linears(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _logits(model, rows: int) -> torch.Tensor:
    ids = torch.arange(3, 3 + rows) % 50
    with torch.inference_mode():
        return forward(model, ids, new_cache(model), n_logits=1).logits


def test_linear_in_fp32_is_the_fp32_product_rounded_whatever_the_slicing(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 9, 16).bfloat16()
    weight, bias = torch.randn(40, 16).bfloat16(), torch.randn(40).bfloat16()
    whole = torch.nn.functional.linear(x.float(), weight.float(), bias.float()).to(torch.bfloat16)
    assert torch.equal(linear_in_fp32(x, weight, bias, [torch.empty(0)]), whole)
    monkeypatch.setattr(bf16_rows, "FP32_SLICE_ELEMENTS", 16 * 7)  # 7 output features a slice: 6 slices, one short
    scratch = [torch.empty(0)]
    sliced = linear_in_fp32(x, weight, bias, scratch)  # the slices' upcasts through one reused buffer
    assert sliced.dtype == torch.bfloat16 and torch.equal(sliced, whole)
    assert scratch[0].numel() == 16 * 7  # grown once, to a slice's size
    small = torch.randn(3, 16).bfloat16()
    assert torch.equal(linear_in_fp32(x, small, None, scratch),  # a smaller weight reuses it
                       torch.nn.functional.linear(x.float(), small.float()).to(torch.bfloat16))
    assert scratch[0].numel() == 16 * 7
    assert torch.equal(linear_in_fp32(x, weight, None, scratch),
                       torch.nn.functional.linear(x.float(), weight.float()).to(torch.bfloat16))
    native = torch.nn.functional.linear(x, weight, bias)  # bf16's own kernel: the same sums in another order
    assert torch.allclose(native.float(), whole.float(), rtol=2 ** -6, atol=2 ** -6)


def test_without_bf16_units_a_wide_forward_runs_every_wide_linear_in_fp32(bf16_target, fp32_calls, monkeypatch):
    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", NO_BF16_UNITS)
    model = bf16_target.model
    wide = _logits(model, FP32_ROWS_FROM)
    head = tuple(model.get_output_embeddings().weight.shape)
    # every linear layer but the head, which computes the one row of logits asked for
    assert sorted(fp32_calls) == sorted(tuple(m.weight.shape) for m in _linears(model) if m.weight.shape != head)
    fp32_calls.clear()
    _logits(model, FP32_ROWS_FROM - 1)  # narrower: bf16's own kernel throughout
    assert fp32_calls == []
    monkeypatch.delenv("RELAXBENCH_CPU_FLAGS")
    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", BF16_UNITS)
    native = _logits(model, FP32_ROWS_FROM)
    assert fp32_calls == []  # with bf16 units nothing changes
    assert wide.dtype == native.dtype == torch.float32
    # the fp32 products agree with bf16's own kernel to bf16's precision; whether they are equal to the bit depends
    # on the CPU's bf16 kernel (equal where it accumulates in fp32 as they do: an AVX512-BF16 EPYC; not on VM-SPR's
    # AMX or on AVX2), so it is not asserted: the counted calls above are what show the fp32 path ran
    scale = native.abs().max()
    assert (wide - native).abs().max() <= 0.05 * scale


def test_with_bf16_units_or_in_fp32_the_forward_is_the_models_own(bf16_target, fp32_calls, monkeypatch):
    from relaxbench.models import load_model

    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", BF16_UNITS)
    ids = torch.arange(3, 3 + 2 * FP32_ROWS_FROM) % 50
    with torch.inference_mode():
        plain = bf16_target.model(input_ids=ids.unsqueeze(0), logits_to_keep=1).logits[0].float()
    assert torch.equal(_logits(bf16_target.model, 2 * FP32_ROWS_FROM), plain)
    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", NO_BF16_UNITS)
    fp32 = load_model("tiny-random-target", dtype="float32", quiet=True).model
    with torch.inference_mode():
        plain = fp32(input_ids=ids.unsqueeze(0), logits_to_keep=1).logits[0]
    assert torch.equal(_logits(fp32, 2 * FP32_ROWS_FROM), plain)
    assert fp32_calls == []


def test_a_bf16_draft_without_bf16_units_keeps_exact_decoding_lossless(monkeypatch):
    """The draft's prefill in fp32 changes drafts at most, never the target's verdicts: exact still equals AR."""
    from relaxbench.decoders import build_decoder
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.methods import DrafterSpec, MethodSpec
    from relaxbench.models import load_model

    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", NO_BF16_UNITS)
    target = load_model("tiny-random-target", dtype="float64", quiet=True)
    draft = load_model("tiny-random-draft", dtype="bfloat16", quiet=True)
    prompt = [int(t) for t in torch.arange(5, 5 + 3 * FP32_ROWS_FROM) % 60]  # a prefill wide enough for fp32
    config = DecodeConfig(k=4, max_new_tokens=24)
    ar = build_decoder(MethodSpec(name="ar", policy="none"), target, None, config).generate(prompt)
    exact = build_decoder(MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="model")), target,
                          draft, config).generate(prompt)
    assert exact.output_ids == ar.output_ids and len(ar.output_ids) > 0
    assert len(exact.rounds.drafted) < len(ar.output_ids)  # drafts were accepted: not AR against AR


def test_bench_forward_times_both_kernels_where_there_is_a_choice(monkeypatch, capsys):
    """``bench forward`` on a bf16 model without bf16 units: the engine's row and bf16's own kernel's, and the
    exit status follows the verdict (speed itself is not asserted: the machine is noisy)."""
    from relaxbench.benchmarks.forward_cost import measure_forward_costs
    from relaxbench.cli import main
    from relaxbench.models import load_model

    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", NO_BF16_UNITS)
    code = main(["bench", "forward", "tiny-random-target", "--dtypes", "bfloat16,float32", "--chunks",
                 f"1,{FP32_ROWS_FROM}", "--context", "8", "--repeats", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "tiny-random-target" in line]
    assert [line.split("│")[3].strip() for line in lines] == ["engine", "bf16 kernel", "engine"]
    bf16_verdict = lines[0].rstrip(" │").rsplit("│", 1)[1].strip()
    assert bf16_verdict in ("yes", "NO") and lines[2].rstrip(" │").endswith("-")  # float32: no choice to judge
    assert code == (0 if bf16_verdict == "yes" else 1)
    costs = measure_forward_costs(load_model("tiny-random-target", dtype="bfloat16", quiet=True), (1, 9), 8, 2,
                                  both_kernels=True)
    assert [(c.chunk, c.kernel) for c in costs] == [(1, ""), (9, ""), (1, "bf16 kernel"), (9, "bf16 kernel")]
    assert all(c.median_ms > 0 and c.runs == 2 for c in costs)
