"""The relaxed rules and the new drafters inside the engine, on the tiny random models.

* every policy, in every mode it supports, runs through ``relaxbench generate`` (in process: the real command,
  argument parsing to counters table) and a few real CLI calls;
* configuration errors: a rule that needs q with a drafter that has none; a mode a rule refuses;
* the strict knobs of every greedy rule reproduce the autoregressive output through the engine;
* ``ngram+lm`` proposes exactly the draft model's greedy continuation, with fewer draft forwards, and both new
  drafters keep exact match lossless (output == AR output), on Llama and on a tiny Qwen2.
"""

from __future__ import annotations

import pytest
import torch

from relaxbench.cli import main as cli_main
from relaxbench.decoders import build_decoder
from relaxbench.decoding.drafters import DrafterInputs, DraftModelDrafter, LayerSkipDrafter, NgramVerifiedByDraftLM
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import POLICIES
from relaxbench.policies.base import Need
from tests.conftest import assert_one_line_error
from tests.test_losslessness import random_prompts
from tests.test_policies import BUILD_WITH_DEFAULTS

AR = MethodSpec(name="ar", policy="none")
RUNS = [(name, mode) for name, cls in POLICIES.items() if name != "none" and name in BUILD_WITH_DEFAULTS
        for mode in sorted(cls.modes)]


def generate(method: MethodSpec, target, draft, prompt, k: int, max_new_tokens: int = 32, **config):
    return build_decoder(method, target, draft, DecodeConfig(k=k, max_new_tokens=max_new_tokens, **config)
                         ).generate(prompt)


@pytest.mark.parametrize("name,mode", RUNS, ids=[f"{n}-{m}" for n, m in RUNS])
def test_every_policy_runs_through_relaxbench_generate(name, mode, capsys):
    args = ["generate", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--rule", name,
            "--prompt", "the cat sat on the mat; the cat sat", "-k", "6", "--max-new-tokens", "24",
            "--dtype", "float64", "--draft-dtype", "float64", "--no-chat"]
    if mode == "sampling":
        args += ["--temperature", "0.9", "--top-p", "0.95", "--seed", "3"]
    assert cli_main(args) == 0
    err = capsys.readouterr().err
    assert f"({name}, k=6, transformers)" in err and "mean acc." in err and "relaxed" in err


@pytest.mark.slow
def test_fly_method_through_the_real_cli(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--method", "fly",
                 "--prompt", "abcabcabcabc", "--max-new-tokens", "40", "--no-chat")
    assert result.returncode == 0, result.stderr
    assert "fly (fly, k=15, transformers)" in result.stderr


def test_draft_layerskip_needs_no_draft_model(capsys):
    assert cli_main(["generate", "--target", "tiny-random-target", "--draft", "layerskip", "--rule", "margin",
                     "--prompt", "hello", "--max-new-tokens", "12", "--drafter-knob", "layers=2"]) == 0
    assert "(margin, k=5, transformers)" in capsys.readouterr().err


def test_q_needing_rule_with_the_ngram_drafter_is_a_one_line_error(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "ngram", "--rule", "cactus",
                 "--temperature", "1", "--prompt", "x")
    assert_one_line_error(result, "rule 'cactus' needs draft-model probabilities", "'ngram'")


@pytest.mark.parametrize("drafter", ["ngram", "ngram+lm"])
def test_every_q_needing_rule_refuses_drafters_without_a_distribution(tiny_target, tiny_draft, drafter):
    needing = [name for name, cls in POLICIES.items() if Need.DRAFT_PROBS in cls.needs]
    assert len(needing) >= 8  # speculative sampling and the seven relaxed-target rules
    for name in needing:
        method = MethodSpec(name=name, policy=name, drafter=DrafterSpec(kind=drafter))
        with pytest.raises(ConfigError, match=f"rule '{name}' needs draft-model probabilities"):
            build_decoder(method, tiny_target, tiny_draft, DecodeConfig(k=4, sampling=SamplingParams(1.0)))


def test_refused_modes_are_configuration_errors(tiny_target, tiny_draft):
    with pytest.raises(ConfigError, match="'margin-greedy' does not support sampling"):
        build_decoder(MethodSpec(name="margin-greedy", policy="margin-greedy"), tiny_target, tiny_draft,
                      DecodeConfig(sampling=SamplingParams(1.0)))
    with pytest.raises(ConfigError, match="'contrastive' does not support greedy"):
        build_decoder(MethodSpec(name="contrastive", policy="contrastive"), tiny_target, tiny_draft, DecodeConfig())
    with pytest.raises(ConfigError, match="needs a draft model"):
        build_decoder(MethodSpec(name="fly", policy="fly", drafter=DrafterSpec(kind="ngram+lm")), tiny_target, None, DecodeConfig())


@pytest.mark.parametrize("name", sorted(n for n, c in POLICIES.items()
                                        if not c.modes.lossless and "greedy" in c.modes and n in BUILD_WITH_DEFAULTS))
@pytest.mark.slow
def test_strict_knobs_reproduce_the_autoregressive_output(tiny_target, tiny_draft, name):
    strict = MethodSpec(name=name, policy=name, knobs=dict(POLICIES.get(name).modes.strict_knobs))
    # a rule gated to the thinking span by default relaxes nowhere in these prompts: measure it relaxed everywhere
    everywhere = "all" if POLICIES.get(name).modes.relax_in != "all" else None
    loose = MethodSpec(name=name, policy=name, relax_in=everywhere)
    relaxed = 0
    for prompt in random_prompts(4, 200, seed=21):
        reference = generate(AR, tiny_target, None, prompt, 0)
        result = generate(strict, tiny_target, tiny_draft, prompt, 8)
        assert result.output_ids == reference.output_ids
        assert sum(result.rounds.relaxed) == 0
        relaxed += sum(generate(loose, tiny_target, tiny_draft, prompt, 8).rounds.relaxed)
    # a rule whose greedy mode is exact match cannot relax; fly's window needs long agreement
    if not POLICIES.get(name).modes.greedy_is_exact and name != "fly":
        assert relaxed > 0, f"{name} at its defaults never relaxed anything in the engine"


# -- the n-gram-accelerated drafter ------------------------------------------------------------------------------
class ForwardCounter:
    """Counts forward calls of a module through a forward pre-hook (no patching)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = module.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.calls += 1

    def close(self) -> None:
        self.handle.remove()


@torch.inference_mode()
def test_ngram_lm_proposes_the_draft_models_greedy_continuation_with_fewer_forwards(tiny_target, tiny_draft):
    inputs = DrafterInputs(tiny_target, tiny_draft)
    accelerated = NgramVerifiedByDraftLM(NgramVerifiedByDraftLM.Knobs(), inputs)
    plain = DraftModelDrafter(DraftModelDrafter.Knobs(), inputs)
    counter = ForwardCounter(tiny_draft.model)
    plain_calls = accelerated_calls = 0
    greedy = SamplingParams()
    for prompt in random_prompts(6, 200, seed=8):
        context = torch.tensor(prompt)
        for drafter in (accelerated, plain):
            drafter.reset(context)
        for k in (1, 6, 15):
            before = counter.calls
            fast = accelerated.propose(context, k, greedy, None)
            accelerated_calls += counter.calls - before
            before = counter.calls
            slow = plain.propose(context, k, greedy, None)
            plain_calls += counter.calls - before
            assert fast.tokens.tolist() == slow.tokens.tolist()
            assert fast.logits is None and len(fast.tokens) == k
            # the next round starts from a longer context: both drafters roll their caches back to it
            context = torch.cat([context, slow.tokens[: k // 2]])
            accelerated.commit(context)
            plain.commit(context)
    counter.close()
    assert accelerated_calls < plain_calls  # the prompts repeat segments, so n-gram guesses are kept


@pytest.mark.parametrize("k", [3, 15])
def test_exact_with_ngram_lm_equals_autoregressive(tiny_target, tiny_draft, k):
    method = MethodSpec(name="exact-ngram-lm", policy="exact", drafter=DrafterSpec(kind="ngram+lm"))
    for prompt in random_prompts(6, 200, seed=k):
        assert generate(method, tiny_target, tiny_draft, prompt, k).output_ids == \
            generate(AR, tiny_target, None, prompt, 0).output_ids


# -- layer-skip self-speculation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", [1, 2])
def test_exact_with_layerskip_equals_autoregressive(tiny_target, layers):
    method = MethodSpec(name="exact-layerskip", policy="exact", drafter=DrafterSpec(kind="layerskip", knobs={"layers": layers}))
    for prompt in random_prompts(5, 200, seed=layers):
        assert generate(method, tiny_target, None, prompt, 4).output_ids == \
            generate(AR, tiny_target, None, prompt, 0).output_ids


def test_layerskip_shares_the_targets_weights_and_with_every_layer_drafts_the_target_itself(tiny_target):
    drafter = LayerSkipDrafter.build({"layers": 2}, DrafterInputs(tiny_target, None))
    shallow, target = drafter.lm.model, tiny_target.model
    target_storage = {p.data_ptr() for p in target.parameters()}
    assert all(p.data_ptr() in target_storage for p in shallow.parameters())  # nothing copied
    assert len(shallow.model.layers) == 2 and shallow.model.layers[1] is target.model.layers[1]
    assert drafter.describe()["layers"] == 2
    full = MethodSpec(name="full", policy="exact", drafter=DrafterSpec(kind="layerskip", knobs={"layers": 4}))
    result = generate(full, tiny_target, None, random_prompts(1, 200, seed=3)[0], 5, max_new_tokens=40)
    assert result.counters.acceptance_rate == 1.0  # all four layers: the drafts are the target's own greedy tokens
    with pytest.raises(ConfigError, match=r"layers must be in 1\.\.4"):
        LayerSkipDrafter.build({"layers": 5}, DrafterInputs(tiny_target, None))


def test_layerskip_and_ngram_lm_on_a_qwen2_model():
    """Qwen2 (bias in q/k/v, tied embeddings, its own attention and cache code) through the shallow model.

    Full attention, as the packaged Qwen2.5 models: a sliding-window layer's cache cannot be cut back once its
    window is full (transformers raises in ``crop``), which is a limit of the engine's rollback, not of layerskip."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from relaxbench.models.load import LoadedModel
    from relaxbench.models.resolve import ModelLocation
    from relaxbench.models.tiny import build_tokenizer

    config = Qwen2Config(vocab_size=264, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         use_sliding_window=False,
                         initializer_range=0.3, eos_token_id=None, bos_token_id=None)
    torch.manual_seed(5)
    qwen = LoadedModel("tiny-qwen2", ModelLocation("tiny-qwen2", "test", "test"),
                       Qwen2ForCausalLM(config).double().eval(), build_tokenizer(), torch.float64,
                       torch.device("cpu"))
    qwen.model.generation_config.eos_token_id = None
    layerskip = MethodSpec(name="ls", policy="exact", drafter=DrafterSpec(kind="layerskip", knobs={"layers": 3}))
    ngram_lm = MethodSpec(name="nl", policy="exact", drafter=DrafterSpec(kind="ngram+lm"))
    for prompt in random_prompts(3, 250, seed=13):
        reference = generate(AR, qwen, None, prompt, 0, max_new_tokens=40).output_ids
        assert generate(layerskip, qwen, None, prompt, 4, max_new_tokens=40).output_ids == reference
        assert generate(ngram_lm, qwen, qwen, prompt, 6, max_new_tokens=40).output_ids == reference


def test_bench_policies_prints_a_row_per_policy_and_mode_with_its_share_of_a_round(capsys):
    """The benchmark runs and reports every policy against a measured round; its figures are not asserted (speed is
    a benchmark's job)."""
    code = cli_main(["bench", "rules", "--target", "tiny-random-target", "--context", "16", "--repeats", "2",
                     "--vocab", "2048", "-k", "6", "--rounds", "3", "--sampling-rounds", "2", "--threads", "1"])
    out = capsys.readouterr().out
    assert code in (0, 1)  # 1 when a rule takes more than 1 % of the (tiny model's, very short) round
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.count("│") > 3]
    assert set(RUNS) <= {tuple(cells[:2]) for cells in rows}
    for cells in rows[1:]:
        if tuple(cells[:2]) in RUNS:
            assert cells[-3].endswith("%") and cells[-1] in ("yes", "NO")
            assert float(cells[-3].rstrip(" %")) == pytest.approx(100 * float(cells[3]) / float(cells[-4]), rel=0.1,
                                                                   abs=0.01)


def test_drafter_knobs_are_validated_and_described():
    from relaxbench.decoding.drafters import DRAFTERS

    inputs = DrafterInputs(None, None)
    with pytest.raises(ConfigError, match="^drafter 'ngram': need min_ngram <= max_ngram, got 5 > 3$"):
        DRAFTERS.get("ngram").build({"min_ngram": 5}, inputs)
    with pytest.raises(ConfigError, match="drafter 'ngram': unknown knob 'max_ngrams'; did you mean 'max_ngram'"):
        DRAFTERS.get("ngram").build({"max_ngrams": 2}, inputs)
    drafter = DRAFTERS.get("ngram").build({"max-ngram": 2}, inputs)
    assert drafter.describe() == {"drafter": "ngram", "max_ngram": 2, "min_ngram": 1, "num_tokens": 10}
    assert NgramVerifiedByDraftLM.Knobs().max_ngram == 4 and NgramVerifiedByDraftLM.Knobs().num_tokens == 6


def test_mars_and_medusa_verify_greedy_drafts_and_mars_keeps_the_draft_logits(tiny_target, tiny_draft):
    """Their authors verify the top-1 path of a draft tree: greedy drafts whatever the temperature; MARS reads the
    draft's (untempered) probability of its token, so the engine keeps the draft logits under sampling."""
    sampling = DecodeConfig(sampling=SamplingParams(0.8))
    margin = build_decoder(MethodSpec(name="margin", policy="margin"), tiny_target, tiny_draft, sampling)
    typical = build_decoder(MethodSpec(name="typical", policy="typical"), tiny_target, tiny_draft, sampling)
    assert margin.draft_sampling.greedy and typical.draft_sampling.greedy
    assert margin.drafter.keep_logits and not typical.drafter.keep_logits
    greedy = build_decoder(MethodSpec(name="margin", policy="margin"), tiny_target, tiny_draft, DecodeConfig())
    assert not greedy.drafter.keep_logits  # exact match reads no draft distribution
