"""Losslessness on the device: exact match (draft model and n-gram drafter) against the AR arm token for token,
and speculative sampling's output distribution against the target's, in each dtype, with tiny random models built
on the device.

Exact match is lossless when a k-token verify forward and a 1-token forward agree on the argmax. Where an output
differs from AR, the first difference is diagnosed (``decoding/divergence.py``): a flip at a top-2 logit gap under
the dtype's rounding tolerance is a numerical near-tie (reported, as a compare run reports it); anything else is a
real divergence, and the target is no real divergence. The distribution check is the chi-square test that
tests/test_distribution.py runs on CPU, here on the device: 3 tokens from a 4-token vocabulary, the empirical joint against the
target's enumerated joint; a rule that resamples from p instead of the residual must fail it (the test's power).
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import torch

from relaxbench.benchmarks.gpu.results import StepResult, verdict
from relaxbench.decoders import build_decoder
from relaxbench.decoding.divergence import diagnose_divergence
from relaxbench.decoding.drafters import DrafterInputs, DraftModelDrafter
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.models.dtypes import parse_dtype
from relaxbench.models.load import LoadedModel, load_model
from relaxbench.models.resolve import ModelLocation
from relaxbench.ops.sampling import SamplingParams, logits_to_probs
from relaxbench.policies import make_policy
from relaxbench.policies.base import Batch, Judgement, Need, VerificationPolicy
from relaxbench.policies.rejection import rejection_judgement

AR = MethodSpec(name="ar", policy="none")
EXACT = {"model": MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="model")),
         "ngram": MethodSpec(name="exact-ngram", policy="exact", drafter=DrafterSpec(kind="ngram",
                                                                                       knobs={"max_ngram": 3}))}
VOCAB, LENGTH, K = 4, 3, 2
PROMPT = [0, 2, 1, 3, 1]
P_FLOOR = 1e-3  # a correct rule fails the chi-square test this rarely
P_WRONG = 1e-6  # the wrong rule must fall below this


def random_prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    """Random prompts with a repeated segment, so prompt lookup finds matches."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        segment = [rng.randrange(vocab) for _ in range(rng.randint(3, 8))]
        noise = [rng.randrange(vocab) for _ in range(rng.randint(2, 10))]
        prompts.append(noise + segment + noise[:3] + segment + [rng.randrange(vocab)])
    return prompts


def exact_vs_ar(step: StepResult, dtype: str, device: str, prompts: int, tokens: int, ks: tuple[int, ...]) -> None:
    target = load_model("tiny-random-target", dtype=dtype, device=device, quiet=True)
    draft = load_model("tiny-random-draft", dtype=dtype, device=device, quiet=True)
    cases = random_prompts(prompts, target.logit_dim - 8, seed=7)
    reference = [build_decoder(AR, target, None, DecodeConfig(k=0, max_new_tokens=tokens)).generate(p)
                 for p in cases]
    rows = []
    for kind, method in EXACT.items():
        identical = near_tie = real = 0
        accepted = drafted = 0
        for k in ks:
            decoder = build_decoder(method, target, draft, DecodeConfig(k=k, max_new_tokens=tokens))
            for prompt, ref in zip(cases, reference):
                out = decoder.generate(prompt)
                drafted += sum(out.rounds.drafted)
                accepted += sum(out.rounds.accepted)
                found = diagnose_divergence(target, prompt, ref.output_ids, out.output_ids)
                identical += found.identical
                near_tie += bool(found.near_tie)
                real += not found.identical and not found.near_tie
                rows.append({"drafter": kind, "k": k, "prompt_tokens": len(prompt), **found.to_record()})
        total = identical + near_tie + real
        step.add(f"exact ({kind}) == AR, {dtype}",
                 f"{identical}/{total} identical, {near_tie} near-tie flips, {real} real",
                 "0 real divergences", verdict(real == 0 and identical > 0))
        rate = accepted / drafted if drafted else 0.0
        if kind == "model":  # the perturbed draft model agrees often; prompt lookup on random text may never match
            step.add(f"exact ({kind}) accepts drafts, {dtype}", f"acceptance {rate:.2f} ({accepted}/{drafted})",
                     "> 0.3 (not vacuous)", verdict(rate > 0.3))
        else:
            step.add(f"exact ({kind}) acceptance, {dtype}", f"{rate:.2f} ({accepted}/{drafted})")
    step.data.setdefault("exact", {})[dtype] = rows


def small_vocab_model(vocab: int, seed: int, dtype: torch.dtype, device: str) -> LoadedModel:
    """A 2-layer Llama over a ``vocab``-token tokenizer with no EOS (every token stays reachable, and the exact
    distribution is cheap to enumerate)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={chr(ord("a") + i): i for i in range(vocab)}, unk_token="a"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.15,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    return LoadedModel(f"small-vocab-{vocab}-{seed}", ModelLocation("kit", "kit", "kit"), model,
                       PreTrainedTokenizerFast(tokenizer_object=core), dtype, torch.device(device))


class ResampleFromTarget(VerificationPolicy):
    """WRONG on purpose: after a rejection, draws from p rather than from norm((p − q)+)."""

    name = "wrong-resample"
    needs = frozenset({Need.DRAFT_PROBS})

    def judge(self, batch: Batch) -> Judgement:
        def from_p_plus_q(n):  # the residual (π − q)+ with π = p + q is p itself
            return batch.p_at(n) + batch.q_at(n)

        return rejection_judgement(batch, batch.p_of_drafts, from_p_plus_q, batch.p_at)


@torch.inference_mode()
def exact_joint(target: LoadedModel, sampling: SamplingParams) -> np.ndarray:
    """P(t1, t2, t3 | prompt) under the target in its own dtype on its device, enumerated over every prefix."""
    joint = np.ones([VOCAB] * LENGTH)
    for depth in range(LENGTH):
        for prefix in itertools.product(range(VOCAB), repeat=depth):
            ids = torch.tensor([PROMPT + list(prefix)], device=target.device)
            probs = logits_to_probs(target.model(ids).logits[0, -1].float(), sampling).double().cpu().numpy()
            for token in range(VOCAB):
                joint[prefix + (token,) + (slice(None),) * (LENGTH - depth - 1)] *= probs[token]
    return joint


def empirical_joint(target: LoadedModel, draft: LoadedModel, policy: VerificationPolicy, sampling: SamplingParams,
                    n: int) -> np.ndarray:
    counts = np.zeros([VOCAB] * LENGTH)
    drafter = DraftModelDrafter(DraftModelDrafter.Knobs(), DrafterInputs(target, draft))
    for seed in range(n):
        config = DecodeConfig(k=K, max_new_tokens=LENGTH, sampling=sampling, seed=seed)
        counts[tuple(SpeculativeDecoder(target, drafter, policy, config).generate(PROMPT).output_ids)] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    """Chi-square goodness of fit; cells with an expected count under 5 are pooled into one."""
    from scipy import stats

    n = counts.sum()
    expected = expected_probs.ravel() / expected_probs.sum() * n
    observed = counts.ravel()
    small = expected < 5
    if small.any() and expected[small].sum() > 0:
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    else:
        expected, observed = expected[~small], observed[~small]
    return float(stats.chisquare(observed, expected).pvalue)


def distribution(step: StepResult, dtype: str, device: str, samples: int, power_samples: int,
                 power_held: bool) -> None:
    """The chi-square check; the wrong rule's power is held only at the full sample size (``power_held``)."""
    torch_dtype = parse_dtype(dtype)
    target = small_vocab_model(VOCAB, 11, torch_dtype, device)
    draft = small_vocab_model(VOCAB, 12, torch_dtype, device)
    sampling = SamplingParams(1.0)
    expected = exact_joint(target, sampling)
    counts = empirical_joint(target, draft, make_policy("speculative-sampling"), sampling, samples)
    p = chi_square_pvalue(counts, expected)
    step.add(f"speculative sampling ~ target, {dtype}", f"chi-square p = {p:.3g} ({samples} generations)",
             f"p > {P_FLOOR:g}", verdict(p > P_FLOOR))
    record = {"samples": samples, "p_value": p, "counts": counts.ravel().tolist(),
              "expected": expected.ravel().tolist()}
    wrong = chi_square_pvalue(empirical_joint(target, draft, ResampleFromTarget(), sampling, power_samples),
                              expected)
    step.add(f"a wrong rule fails the test, {dtype}", f"chi-square p = {wrong:.3g} ({power_samples} generations)",
             f"p < {P_WRONG:g}", verdict(wrong < P_WRONG, held=power_held))
    record["wrong_rule_p_value"] = wrong
    step.data.setdefault("distribution", {})[dtype] = record
