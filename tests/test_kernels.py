"""The native greedy kernels (relaxbench/decoding/kernels.c) against torch, the reference.

* row reductions (max, first argmax, chunk maxima, draft logits) equal torch's exactly: ties inside a chunk,
  across chunks and in the short tail, -inf entries and rows, vocabularies shorter than a chunk;
* the early-stopping scan reads exactly through the first mismatching row, and resumes from there;
* NaN rows go to torch (its NaN semantics), so the answer is torch's;
* softmax sums match float64 within float rounding, -inf logits included; top values and the fused argmax equal
  torch's;
* every greedy rule gives the same verdicts on both backends over many random blocks at a real vocabulary size;
* without a compiler the backend falls back to torch with one warning; RELAXBENCH_KERNELS=native then fails
  with one line.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from relaxbench.decoding import kernels
from relaxbench.decoding.sampling import (
    CHUNK,
    SamplingParams,
    chunk_maxima,
    greedy_argmax,
    top_values,
    torch_greedy_reductions,
)
from relaxbench.policies import POLICIES, make_policy
from relaxbench.policies.base import Block, PolicyEnv

pytestmark = pytest.mark.skipif(kernels.compiler() is None, reason="no C compiler: native kernels cannot be built")


@pytest.fixture(autouse=True)
def native():
    with kernels.use_backend("native"):
        yield


def tricky_rows(vocab: int, seed: int) -> torch.Tensor:
    """Rows whose argmax is a tie (inside one chunk, across chunks, with the tail), -inf entries, an all -inf row."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(8, vocab, generator=g)
    top = float(rows.max()) + 1
    rows[0, [3 % vocab, 7 % vocab]] = top  # a tie inside the first chunk
    rows[1, [vocab - 1, 1 % vocab]] = top  # a tie between the tail (or the last chunk) and the first chunk
    rows[2, [vocab // 2, (vocab // 2 + CHUNK) % vocab]] = top  # a tie across chunks
    rows[3, vocab - 1] = top  # the maximum in the tail alone
    rows[4, : vocab // 2] = -math.inf  # half the row masked
    rows[5] = -math.inf  # everything masked: argmax is 0, like torch's
    rows[6] = 1.0  # all equal
    return rows


@pytest.mark.parametrize("vocab", [151_936, 1000, 256, 70, 5])
def test_row_reductions_equal_torch(vocab):
    rows = tricky_rows(vocab, seed=vocab)
    native = kernels.row_reductions(rows, CHUNK)
    assert native is not None
    row_max, argmax, maxima = native
    assert torch.equal(argmax, rows.argmax(dim=-1))
    assert torch.equal(row_max, rows.amax(dim=-1))
    assert torch.equal(maxima, chunk_maxima(rows, CHUNK))
    reference = torch_greedy_reductions(rows)
    assert torch.equal(greedy_argmax(rows), reference.argmax)


def test_batched_and_one_dimensional_inputs_keep_their_shape():
    logits = torch.randn(2, 3, 1000)
    assert torch.equal(greedy_argmax(logits), logits.argmax(dim=-1))
    assert torch.equal(greedy_argmax(logits[0, 0]), logits[0, 0].argmax())


def test_scan_stops_at_the_first_mismatch_and_resumes():
    logits = torch.randn(16, 20_000)
    drafts = logits[:15].argmax(dim=-1)
    drafts[[4, 9]] += 1  # mismatches at 4 and 9
    scan = kernels.start_scan(logits, drafts, CHUNK)
    assert scan.extend(stop_at_mismatch=True) and scan.done == 5  # rows 0..4: through the first mismatch
    assert scan.extend(stop_at_mismatch=True) and scan.done == 10
    assert scan.extend(stop_at_mismatch=True) and scan.done == 16  # no more mismatches: to the end (bonus row)
    row_max, argmax, maxima = scan.tensors()
    assert torch.equal(argmax, logits.argmax(dim=-1))
    assert torch.equal(row_max, logits.amax(dim=-1))
    assert [scan.draft_logit[i] for i in range(15)] == logits[torch.arange(15), drafts].tolist()


def test_nan_rows_are_left_to_torch():
    logits = torch.randn(4, 3000)
    logits[2, 100] = math.nan
    assert kernels.row_reductions(logits, CHUNK) is None
    assert torch.equal(greedy_argmax(logits), logits.argmax(dim=-1))  # torch's answer (NaN counts as the max)
    drafts = logits[:3].argmax(dim=-1)
    block = Block(drafts, logits, None, SamplingParams(), None, {})
    assert make_policy("exact").verify(block).n_accepted == 3


@pytest.mark.parametrize("vocab", [151_936, 4099, 1024, 17, 3])
def test_softmax_sums_match_float64(vocab):
    g = torch.Generator().manual_seed(vocab)
    row = 4 * torch.randn(vocab, generator=g)
    row[: vocab // 3] -= 60  # far below the max (e^-60 and less)
    row[1] = -math.inf
    m = float(row.max())
    total, weighted = kernels.row_softmax_sums(row, m)
    shifted = row.double() - m
    weights = shifted.exp()
    assert total == pytest.approx(float(weights.sum()), rel=2e-6)
    expected = float(torch.where(weights > 0, weights * shifted, 0.0).sum())
    assert weighted == pytest.approx(expected, rel=2e-6, abs=1e-9)


def test_softmax_sums_propagate_nan():
    row = torch.randn(5000)
    row[7] = math.nan
    total, weighted = kernels.row_softmax_sums(row, float(row[0]))
    assert math.isnan(total) and math.isnan(weighted)


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_top_values_equal_topk(n):
    logits = tricky_rows(151_936, seed=n)[:5]
    logits[0, [10, 20, 30]] = 50.0  # repeated top values
    scan = kernels.start_scan(logits, None, CHUNK)
    assert scan.extend(stop_at_mismatch=False)
    for r in range(5):
        assert scan.top_values(r, n) == torch.topk(logits[r], n).values.tolist()
        assert scan.top_values(r, n) == top_values(logits[r: r + 1], n)[0].tolist()


def test_fused_argmax_equals_torch():
    g = torch.Generator().manual_seed(0)
    for vocab in (151_936, 1000, 63):
        x, y = torch.randn(vocab, generator=g), torch.randn(vocab, generator=g)
        expected = int(torch.add(0.7 * x, y, alpha=0.3).argmax())
        assert kernels.fused_argmax(x, y, 0.7, 0.3) == expected


def test_every_greedy_rule_decides_alike_on_both_backends():
    from relaxbench.benchmarks.policies import _CountingTokenizer, synthetic_inputs

    pool = [synthetic_inputs(151_936, 15, torch.device("cpu"), seed) for seed in range(12)]
    names = [name for name, cls in POLICIES.items() if "greedy" in cls.modes and name != "none"]
    verdicts = {}
    for backend in ("native", "torch"):
        with kernels.use_backend(backend):
            for name in names:
                policy = make_policy(name)
                policy.bind(PolicyEnv(_CountingTokenizer(), 151_936, torch.device("cpu")))
                verdicts[backend, name] = [
                    policy.verify(Block(b.drafts, b.target_logits, b.draft_logits, SamplingParams(), None,
                                        {"extra_logits": b.extra_logits})) for b in pool]
    for name in names:
        assert verdicts["native", name] == verdicts["torch", name], name
    relaxed = sum(v.n_relaxed for name in names for v in verdicts["native", name])
    assert relaxed > 0  # the blocks exercise the relaxations, not only exact matches


def test_without_a_compiler_auto_falls_back_to_torch_and_native_is_an_error(tmp_path):
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "RELAXBENCH_CACHE": str(tmp_path / "cache")}
    probe = ("import torch; from relaxbench.decoding import kernels; "
             "print(kernels.active_backend()); print(int(kernels.row_reductions(torch.randn(2, 300), 256) is None))")
    auto = subprocess.run([sys.executable, "-c", probe], env={**env, "RELAXBENCH_KERNELS": "auto"},
                          capture_output=True, text=True, timeout=120)
    assert auto.returncode == 0, auto.stderr
    assert auto.stdout.split() == ["torch", "1"]
    assert auto.stderr.count("native greedy kernels unavailable") == 1
    strict = subprocess.run([sys.executable, "-m", "relaxbench", "bench", "policies", "--policy", "exact",
                             "--rounds", "2", "--mode", "greedy"],
                            env={**env, "RELAXBENCH_KERNELS": "native"}, capture_output=True, text=True, timeout=120)
    assert strict.returncode != 0
    assert "native kernels unavailable" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_build_is_cached_per_source_compiler_and_cpu(tmp_path):
    first = kernels.build(tmp_path)
    assert first.exists() and kernels.build(tmp_path) == first  # built once, then reused
    assert first.parent == tmp_path / "kernels"
