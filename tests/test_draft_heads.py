"""The EAGLE-3 and MTP drafters: their logits equal an independent transcription of the references' arithmetic
(``tests/draft_heads.py`` names each reference file and commit), every checkpoint layout gives the same drafts from
the same weights, a head that does not fit is refused in one line before its weights load, and exact verification
with each head reproduces the target (greedy: token for token; sampling: in distribution, by chi-square)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import draft_heads as dh
from relaxbench.benchmarks.gpu.lossless import (AR, LENGTH, PROMPT, VOCAB, chi_square_pvalue, exact_joint,
                                                random_prompts, small_vocab_model)
from relaxbench.decoders import build_decoder, build_drafter
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.errors import ConfigError, ModelError
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.ops.sampling import SamplingParams
from relaxbench.policies import make_policy

LAYOUTS = ["eagle3-original", "eagle3-speculators", "mtp-qwen3_next", "mtp-deepseek", "mtp-speculators"]


def target_dir(target) -> Path:
    return Path(target.model.name_or_path)


def save_head(layout: str, target, path: Path, seed: int = 0) -> Path:
    cfg = target.model.config
    if layout == "eagle3-original":
        return dh.save_eagle3_original(path, cfg, seed)
    if layout == "eagle3-speculators":
        return dh.save_eagle3_speculators(path, cfg, seed)
    if layout == "mtp-speculators":
        return dh.save_mtp_speculators(path, json.loads((target_dir(target) / "config.json").read_text()), seed)
    return dh.save_mtp_in_target(path, target_dir(target), layout.split("-")[1], seed)


def target_dir_of_tiny() -> Path:
    from relaxbench.models import preview_model

    return Path(preview_model("tiny-random-target", quiet=True).config.name_or_path)


def kind_of(layout: str) -> str:
    return layout.split("-")[0]


def drafter_for(target, kind: str, head: Path):
    return build_drafter(DrafterSpec(kind=kind, knobs={"head": str(head)}), target, None)


def method(kind: str, head: Path, policy: str = "exact", **knobs) -> MethodSpec:
    return MethodSpec(name=policy, policy=policy, knobs=knobs,
                      drafter=DrafterSpec(kind=kind, knobs={"head": str(head)}))


@pytest.fixture(scope="module")
def heads(tmp_path_factory, tiny_target):
    root = tmp_path_factory.mktemp("heads")
    return {layout: save_head(layout, tiny_target, root / layout) for layout in LAYOUTS}


def target_features(target, ids: list[int], layers: tuple[int, ...]) -> torch.Tensor:
    out = target.model(torch.tensor([ids]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


def drafter_rows(drafter, target, ids: list[int], k: int):
    """Feed the drafter the target's features of ``ids[:-1]`` as the loop's prefill does, then draft greedily."""
    context = torch.tensor(ids)
    drafter.reset(context)
    drafter.keep_logits = True
    out = target.model(context[None, :-1], output_hidden_states=True)
    drafter.observe_target(0, context[:-1], tuple(out.hidden_states[i][0] for i in drafter.hidden_layers))
    return drafter.propose(context, k, SamplingParams(0.0), None)


@torch.inference_mode()
@pytest.mark.parametrize("layout", LAYOUTS)
def test_logits_equal_the_reference_arithmetic_and_greedy_drafts_agree(tiny_target, heads, layout):
    from safetensors.torch import load_file

    target, kind, k = tiny_target, kind_of(layout), 5
    drafter = drafter_for(target, kind, heads[layout])
    ids = random_prompts(1, target.logit_dim - 8, seed=3)[0][:14]
    proposal = drafter_rows(drafter, target, ids, k)
    cfg = {"num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6}
    embed = target.model.get_input_embeddings().weight
    tokens = torch.tensor(ids)
    n_layers = target.model.config.num_hidden_layers
    if kind == "eagle3":
        w = {k: v.double() if v.is_floating_point() else v
             for k, v in dh.eagle3_weights(0, target.model.config, 200).items()}
        feats = target_features(target, ids[:-1], (2, n_layers // 2, n_layers - 3))  # EAGLE-3's default layers
        cfg["rope_theta"] = dh.EAGLE3_ROPE_THETA  # the head's rotary base, from its own config
        rows = dh.reference_chain(lambda t, f, p, past, ft: dh.eagle3_step(w, cfg, embed, t, f, p, past, ft),
                                  lambda h: dh.eagle3_logits(w, h, target.logit_dim), tokens, feats, k)
    else:
        mtp_layout = "deepseek" if layout == "mtp-deepseek" else "qwen3_next"
        w = {k: v.double() for k, v in dh.mtp_weights(0, target.model.config).items()}
        feats = target_features(target, ids[:-1], (n_layers,))  # the last hidden state, after the final norm
        lm_head = target.model.get_output_embeddings().weight
        rows = dh.reference_chain(lambda t, f, p, past, ft: dh.mtp_step(w, cfg, embed, t, f, p, past, mtp_layout),
                                  lambda h: dh.mtp_logits(w, h, lm_head, mtp_layout, 1e-6), tokens, feats, k)
        assert load_file(str(heads[layout] / "model.safetensors"))  # the file really holds the module
    reference = torch.stack(rows).float()
    assert proposal.logits.shape == (k, target.logit_dim)
    finite = torch.isfinite(reference)
    assert torch.equal(finite, torch.isfinite(proposal.logits))  # -inf exactly outside the draft vocabulary
    torch.testing.assert_close(proposal.logits[finite], reference[finite], rtol=1e-4, atol=1e-4)
    assert proposal.tokens.tolist() == reference.argmax(-1).tolist()
    assert proposal.forwards == (len(ids) - 1,) + (1,) * (k - 1)


@torch.inference_mode()
@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_every_layout_gives_the_same_drafts_from_the_same_weights(tiny_target, heads, kind):
    ids = random_prompts(1, tiny_target.logit_dim - 8, seed=7)[0][:12]
    layouts = [layout for layout in LAYOUTS if kind_of(layout) == kind]
    results = [drafter_rows(drafter_for(tiny_target, kind, heads[layout]), tiny_target, ids, 4) for layout in layouts]
    if kind == "mtp":  # DeepSeek-V3's arithmetic differs (position-0 embedding, pre-norm feature): its own check
        results = [r for r, layout in zip(results, layouts) if layout != "mtp-deepseek"]
    for other in results[1:]:
        assert other.tokens.tolist() == results[0].tokens.tolist()
        torch.testing.assert_close(other.logits, results[0].logits)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_exact_with_each_head_equals_autoregressive_greedy(tiny_target, heads, layout):
    for k in (1, 3):
        for prompt in random_prompts(3, tiny_target.logit_dim - 8, seed=k):
            reference = build_decoder(AR, tiny_target, None, DecodeConfig(k=0, max_new_tokens=24)).generate(prompt)
            result = build_decoder(method(kind_of(layout), heads[layout]), tiny_target, None,
                                   DecodeConfig(k=k, max_new_tokens=24)).generate(prompt)
            assert result.output_ids == reference.output_ids
            assert sum(result.rounds.drafted) > 0


@pytest.mark.parametrize("layout", ["eagle3-original", "mtp-qwen3_next"])
def test_a_one_token_prompt_drafts_from_the_second_round(tiny_target, heads, layout):
    reference = build_decoder(AR, tiny_target, None, DecodeConfig(k=0, max_new_tokens=10)).generate([65])
    result = build_decoder(method(kind_of(layout), heads[layout]), tiny_target, None,
                           DecodeConfig(k=3, max_new_tokens=10)).generate([65])
    assert result.output_ids == reference.output_ids
    assert result.rounds.drafted[0] == 0 and sum(result.rounds.drafted) > 0


@pytest.mark.parametrize("policy,knobs", [("fly", {}), ("typical-greedy", {})])
@pytest.mark.parametrize("layout", ["eagle3-speculators", "mtp-deepseek"])
def test_relaxed_rules_run_with_each_head(tiny_target, heads, layout, policy, knobs):
    prompt = random_prompts(1, tiny_target.logit_dim - 8, seed=11)[0]
    result = build_decoder(method(kind_of(layout), heads[layout], policy, **knobs), tiny_target, None,
                           DecodeConfig(k=3, max_new_tokens=16)).generate(prompt)
    assert len(result.output_ids) == 16 and sum(result.rounds.drafted) > 0


# ---- refusals: one line, decided from config.json before any weight loads ----------------------------------------

def _edited(src: Path, dst: Path, **changes) -> Path:
    dst.mkdir()
    config = json.loads((src / "config.json").read_text())
    for key, value in changes.items():
        if isinstance(config.get("transformer_layer_config"), dict) and key in config["transformer_layer_config"]:
            config["transformer_layer_config"][key] = value
        else:
            config[key] = value
    (dst / "config.json").write_text(json.dumps(config))  # no weights at all: a refusal must not need them
    return dst


@pytest.mark.parametrize("layout,change,fragment", [
    ("eagle3-original", {"hidden_size": 32}, "hidden states of size 32"),
    ("eagle3-original", {"vocab_size": 300}, "vocabulary of 300"),
    ("eagle3-original", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 9]}}, "layer ids"),
    ("eagle3-speculators", {"model_type": "qwen2"}, "Llama layer"),
    ("mtp-speculators", {"model_type": "qwen3"}, "the target is 'llama'"),
    ("mtp-speculators", {"hidden_size": 48}, "hidden size 48"),
])
def test_a_head_that_does_not_fit_is_one_config_error(tiny_target, heads, tmp_path, layout, change, fragment):
    bad = _edited(heads[layout], tmp_path / "bad", **change)
    with pytest.raises(ConfigError) as err:
        drafter_for(tiny_target, kind_of(layout), bad)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_wrong_kind_of_head_and_a_missing_head_are_refused(tiny_target, heads, tmp_path):
    with pytest.raises(ConfigError, match="needs an MTP head"):
        drafter_for(tiny_target, "mtp", heads["eagle3-original"])
    with pytest.raises(ConfigError, match="holds no EAGLE-3 or MTP head"):
        drafter_for(tiny_target, "eagle3", target_dir(tiny_target))
    with pytest.raises(ConfigError, match="head=PATH"):
        build_drafter(DrafterSpec(kind="eagle3"), tiny_target, None)
    with pytest.raises(ModelError, match="no such folder"):
        drafter_for(tiny_target, "eagle3", tmp_path / "absent")


@pytest.mark.slow
def test_generate_cli_drafts_with_a_head_and_refuses_a_misfit_in_one_line(cli, heads, tmp_path):
    from conftest import assert_one_line_error

    ok = cli("generate", "--target", "tiny-random-target", "--draft", "eagle3", "--drafter-knob",
             f"head={heads['eagle3-original']}", "--rule", "exact", "--prompt", "hello there", "--no-chat",
             "--max-new-tokens", "8", "-k", "3", "--dtype", "float32")
    assert ok.returncode == 0, ok.stderr
    bad = _edited(heads["mtp-speculators"], tmp_path / "bad", hidden_size=48)
    result = cli("generate", "--target", "tiny-random-target", "--draft", "mtp", "--drafter-knob", f"head={bad}",
                 "--rule", "exact", "--prompt", "hello", "--no-chat", "--max-new-tokens", "4", "-k", "2",
                 "--dtype", "float32")
    assert_one_line_error(result, "hidden size 48")
    weightless = tmp_path / "weightless-target"  # its config and tokenizer, no weights: loading it would fail
    weightless.mkdir()
    for file in target_dir_of_tiny().iterdir():
        if not file.name.endswith(".safetensors"):
            (weightless / file.name).write_bytes(file.read_bytes())
    result = cli("generate", "--target", str(weightless), "--draft", "mtp", "--drafter-knob", f"head={bad}",
                 "--rule", "exact", "--prompt", "hello", "--no-chat", "--max-new-tokens", "4", "-k", "2")
    assert_one_line_error(result, "hidden size 48")  # refused from the configs, before the target's weights load


# ---- sampling: exact + a head keeps the target's distribution ----------------------------------------------------

@pytest.mark.parametrize("kind,sampling", [("eagle3", SamplingParams(1.0)), ("mtp", SamplingParams(1.0)),
                                           ("eagle3", SamplingParams(0.8, top_k=3, top_p=0.9))],
                         ids=["eagle3-T=1", "mtp-T=1", "eagle3-T=0.8,top-k=3,top-p=0.9"])
@pytest.mark.slow
def test_speculative_sampling_with_a_head_matches_the_target_distribution(tmp_path, kind, sampling):
    """The GPU kit's chi-square check (tests/test_distribution.py) with the head as drafter, over a 4-token target;
    the EAGLE-3 head's draft vocabulary holds 3 of the 4 tokens, so its q is -inf on the fourth."""
    target = small_vocab_model(VOCAB, 11, torch.float64, "cpu")
    cfg = target.model.config
    if kind == "eagle3":
        head = dh.save_eagle3_original(tmp_path / "h", cfg, seed=5, draft_vocab=3, layer_ids=(0, 1, 1))
    else:
        src = tmp_path / "target"
        target.model.save_pretrained(src)
        head = dh.save_mtp_in_target(tmp_path / "h", src, "qwen3_next", seed=5)
    drafter = build_drafter(DrafterSpec(kind=kind, knobs={"head": str(head)}), target, None)
    policy = make_policy("speculative-sampling")
    counts = exact_joint(target, sampling) * 0
    drafted = 0
    for seed in range(1200):
        config = DecodeConfig(k=2, max_new_tokens=LENGTH, sampling=sampling, seed=seed)
        result = SpeculativeDecoder(target, drafter, policy, config).generate(PROMPT)
        counts[tuple(result.output_ids)] += 1
        drafted += sum(result.rounds.drafted)
    assert drafted > 1000  # the head really drafted
    expected = exact_joint(target, sampling)
    assert counts[expected == 0].sum() == 0  # never a token the target's truncation excludes
    assert chi_square_pvalue(counts, expected) > 1e-3


class Planted:
    """Wraps a head drafter: the head drafts as usual (its proposals are recorded), then its first ``plan`` tokens
    of a round are replaced by the target's own greedy ones, so exact verification accepts some drafts and rejects
    the rest. What the head itself keeps across rounds is then exercised under partial acceptance."""

    def __init__(self, inner, reference: list[int], plan: tuple[int, ...]) -> None:
        self.inner, self.reference, self.plan, self.seen = inner, reference, plan, []
        self.hidden_layers, self.model_name, self.provides_probs = inner.hidden_layers, inner.model_name, True
        self.name, self.costless, self.keep_logits, self.keep_hidden = inner.name, False, False, False
        inner.keep_logits = True

    def reset(self, prompt):
        self.inner.reset(prompt)
        self.round = 0

    def observe_target(self, start, ids, layers):
        self.inner.observe_target(start, ids, layers)

    def commit(self, context):
        self.inner.commit(context)

    def propose(self, context, k, sampling, generator):
        from relaxbench.decoding.drafters import Proposal

        proposal = self.inner.propose(context, k, sampling, generator)
        self.seen.append((context.clone(), proposal.tokens.clone(), proposal.logits))
        n = min(self.plan[self.round % len(self.plan)], int(proposal.tokens.shape[0]))
        self.round += 1
        planted = torch.tensor(self.reference[int(context.shape[0]): int(context.shape[0]) + n], dtype=torch.long)
        tokens = torch.cat([planted, proposal.tokens[planted.shape[0]:]])
        return Proposal(tokens, None, proposal.forwards)


@torch.inference_mode()
@pytest.mark.parametrize("layout", ["eagle3-original", "mtp-deepseek", "mtp-speculators"])
def test_the_head_state_after_partial_acceptance_equals_a_fresh_heads(tiny_target, heads, layout):
    """Every round's drafts (and logits) equal those of a new drafter fed the same committed context from scratch:
    features of rejected positions and the chained positions are rolled back, accepted ones kept."""
    prompt = random_prompts(1, tiny_target.logit_dim - 8, seed=21)[0]
    reference = build_decoder(AR, tiny_target, None, DecodeConfig(k=0, max_new_tokens=30)).generate(prompt)
    full = prompt + reference.output_ids
    planted = Planted(drafter_for(tiny_target, kind_of(layout), heads[layout]), full, (2, 0, 3, 1))
    decoder = SpeculativeDecoder(tiny_target, planted, make_policy("exact"), DecodeConfig(k=3, max_new_tokens=30))
    result = decoder.generate(prompt)
    assert result.output_ids == reference.output_ids
    assert sum(result.rounds.accepted) >= 10 and len(planted.seen) >= 8
    fresh = drafter_for(tiny_target, kind_of(layout), heads[layout])
    for context, tokens, logits in planted.seen:
        again = drafter_rows(fresh, tiny_target, context.tolist(), int(tokens.shape[0]))
        assert again.tokens.tolist() == tokens.tolist()
        torch.testing.assert_close(again.logits, logits, rtol=1e-6, atol=1e-6)


# ---- the trainer -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
@pytest.mark.slow
def test_drafter_train_writes_a_loadable_head_with_its_card(cli, tiny_target, tmp_path, kind):
    out, cache = tmp_path / kind, {"RELAXBENCH_CACHE": str(tmp_path / "cache")}  # its own: no earlier run's text
    argv = ("drafter", "train", kind, "--target", "tiny-random-target", "--out", str(out), "--steps", "6",
            "--self-distill-tokens", "4", "--draft-vocab", "100", "--dtype", "float64")
    result = cli(*argv, env=cache)
    assert result.returncode == 0, result.stderr
    assert "step 6/6" in result.stderr and "eta" in result.stderr
    found = re.search(r"self-distilling (\d+)/\1 texts \((\d+) tokens\)  elapsed .*  eta ", result.stderr)
    assert found
    # a second head for the same target reuses the target's continuations from the cache instead of generating them
    [kept] = (tmp_path / "cache" / "heads" / "tiny-random-target").glob("self-distilled-float64-4.json")
    assert len(json.loads(kept.read_text())) == int(found.group(1))
    again = cli(*argv, env=cache)
    assert again.returncode == 0 and "self-distilling" not in again.stderr, again.stderr
    assert f"self-distilled text from the cache: {found.group(1)} texts ({found.group(2)} tokens)" in again.stderr
    card = json.loads((out / "card.json").read_text())
    assert card["steps"] == 6 and card["data"]["sequences"] > 10 and card["data"]["self_distilled_tokens"] > 0
    assert 0.0 <= card["heldout_acceptance"] <= 1.0 and card["final_loss"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == kind and "speculators_config" in config
    drafter = drafter_for(tiny_target, kind, out)  # the trained head loads through the drafters' own reader
    assert drafter.spec.layout == "speculators"
    for prompt in random_prompts(2, tiny_target.logit_dim - 8, seed=4):
        reference = build_decoder(AR, tiny_target, None, DecodeConfig(k=0, max_new_tokens=16)).generate(prompt)
        result = build_decoder(method(kind, out), tiny_target, None, DecodeConfig(k=3, max_new_tokens=16)).generate(
            prompt)
        assert result.output_ids == reference.output_ids


def test_training_generalises_to_held_out_sequences(tiny_target):
    """The trainer learns more than its training set: on the tiny target's own greedy outputs of 240 random prompts,
    an MTP head trained 150 steps (512 pairs each, about nine passes over the data) has a lower loss and a higher top-1 agreement with the target on the held-out
    sequences than the untrained head (the tiny target is a random function, so the gain is modest; on the training
    sequences themselves it is large)."""
    from relaxbench.decoding.drafters.head_training import TrainSettings, train

    prompts = torch.randint(0, 256, (240, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        sequences = tiny_target.model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32,
                                               do_sample=False, pad_token_id=0).tolist()
    lines: list[str] = []
    _, _, untrained = train(tiny_target, sequences, TrainSettings("mtp", steps=1, lr=1e-9), lines.append)
    _, _, trained = train(tiny_target, sequences, TrainSettings("mtp", steps=150, lr=2e-3), lines.append)
    assert trained["heldout_loss"] < untrained["heldout_loss"] - 0.5
    assert trained["heldout_acceptance"] > untrained["heldout_acceptance"]
    assert trained["train_acceptance"] > untrained["train_acceptance"] + 0.02
    assert any(line.startswith("step 150/150") for line in lines)
    total = sum(len(s) for s in sequences)  # the target's pass over the data reports its progress too, to the end
    assert any(line.startswith(f"target features {total}/{total} tokens") for line in lines)



@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_the_top_k_teacher_is_the_full_soft_cross_entropy_when_it_covers_the_vocabulary(tiny_target, monkeypatch,
                                                                                        kind):
    """The trainer keeps the target's top tokens per position; kept whole, its loss is the soft cross-entropy
    against the full distribution (restricted to the draft vocabulary for EAGLE-3), and its hits the top-1's."""
    import relaxbench.decoding.drafters.head_training as ht

    vocab = int(tiny_target.logit_dim)
    monkeypatch.setattr(ht, "TEACHER_TOP", vocab)
    ids = random_prompts(1, vocab - 8, seed=5)[0][:12]
    layers = ht.target_layers(kind, tiny_target.model.config)
    [example] = ht.examples(tiny_target, [ids], layers)
    kept = ht.draft_vocabulary([ids], vocab, 100) if kind == "eagle3" else None
    head, _ = ht.new_head(kind, tiny_target, kept)
    index = None if kept is None else ht.draft_columns(kept, vocab)
    with torch.no_grad():
        loss, hits, n = ht._loss_and_hits(head, kind, example, index)
        out = tiny_target.model(torch.tensor([ids]))
        teacher = out.logits[0, 1: len(ids) - 1].float()
        hidden = head(example.ids[1:-1], example.features[:-2], torch.arange(len(ids) - 2), None, True)
        if kind == "eagle3":
            student = head.lm_head(head.norm(hidden))
            full = -(teacher[:, kept].softmax(-1) * student.log_softmax(-1)).sum(-1).mean()
            want = int((kept[student.argmax(-1)] == teacher.argmax(-1)).sum())
        else:
            student = torch.nn.functional.linear(hidden, head.output_weight().float())
            full = -(teacher.softmax(-1) * student.log_softmax(-1)).sum(-1).mean()
            want = int((student.argmax(-1) == teacher.argmax(-1)).sum())
    torch.testing.assert_close(loss, full, rtol=1e-4, atol=1e-5)
    assert (hits, n) == (want, len(ids) - 2)

@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_packed_sequences_train_as_if_each_ran_alone(tiny_target, kind):
    """The trainer packs several sequences into one forward (``packs``, ``packed_mask``): the packed loss is the
    pair-weighted mean of each sequence's own loss and the hits their sum, so no sequence attends to another."""
    import relaxbench.decoding.drafters.head_training as ht

    vocab = int(tiny_target.logit_dim)
    rng = torch.Generator().manual_seed(11)
    sequences = [torch.randint(0, vocab, (n,), generator=rng).tolist() for n in (6, 9, 12)]
    examples = ht.examples(tiny_target, sequences, ht.target_layers(kind, tiny_target.model.config))
    kept = ht.draft_vocabulary(sequences, vocab, 100) if kind == "eagle3" else None
    head, _ = ht.new_head(kind, tiny_target, kept)
    index = None if kept is None else ht.draft_columns(kept, vocab)
    with torch.no_grad():
        alone = [ht._loss_and_hits(head, kind, ex, index) for ex in examples]
        loss, hits, pairs = ht._loss_and_hits(head, kind, examples, index)
    weighted = sum(float(a[0]) * a[2] for a in alone) / sum(a[2] for a in alone)
    assert pairs == sum(a[2] for a in alone) == sum(len(s) - 2 for s in sequences)
    assert hits == sum(a[1] for a in alone)
    assert float(loss) == pytest.approx(weighted, rel=1e-4)
    assert [len(g) for g in ht.packs(examples, 15)] == [2, 1]  # 4 + 7 pairs fit in 15, the 10 start a new step


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_an_unrolled_training_step_is_the_chain_the_drafter_runs(tiny_target, kind):
    """Training-time test (``unroll``): step s of the packed, unrolled forward is, for each pair, the head's s-th
    chained draft as the drafter computes it at inference (committed pairs in the cache, its own output fed back),
    so the mask lets no pair see another sequence, a later pair or another chain."""
    import relaxbench.decoding.drafters.head_training as ht
    from transformers import DynamicCache

    vocab = int(tiny_target.logit_dim)
    rng = torch.Generator().manual_seed(13)
    sequences = [torch.randint(0, vocab, (n,), generator=rng).tolist() for n in (7, 10)]
    examples = ht.examples(tiny_target, sequences, ht.target_layers(kind, tiny_target.model.config))
    kept = ht.draft_vocabulary(sequences, vocab, 100) if kind == "eagle3" else None
    head, _ = ht.new_head(kind, tiny_target, kept)
    head.eval()
    lengths = [n - 2 for n in (7, 10)]
    with torch.no_grad():
        steps = ht.unrolled_hidden(head, examples, unroll=3)
        assert [int(h.shape[0]) for h, _, _ in steps] == [sum(n - s + 1 for n in lengths) for s in (1, 2, 3)]
        for seg, t in ((0, 1), (1, 0), (1, 4)):
            ex = examples[seg]
            cache = DynamicCache()
            last = head(ex.ids[1: t + 2], ex.features[: t + 1], torch.arange(t + 1), cache, True)[-1:]
            for s in (1, 2, 3):
                if s > 1:
                    last = head(ex.ids[t + s].view(1), last, torch.tensor([t + s - 1]), cache, False)
                row = (0 if seg == 0 else lengths[0] - s + 1) + t
                torch.testing.assert_close(steps[s - 1][0][row], last[0], rtol=1e-4, atol=1e-5)
                torch.testing.assert_close(steps[s - 1][2][row], ex.top_ids[t + s])


def test_a_run_cut_by_time_reports_progress_as_it_goes(tiny_target, monkeypatch):
    """With --max-minutes far below --steps (the suite's heads: 100,000 steps asked, minutes given), progress lines
    still come every ``PROGRESS_EVERY_S``, not only at each twentieth of the steps asked."""
    import relaxbench.decoding.drafters.head_training as ht

    monkeypatch.setattr(ht, "PROGRESS_EVERY_S", 0.0)
    sequences = random_prompts(12, int(tiny_target.logit_dim) - 8, seed=14)
    lines: list[str] = []
    _, _, record = ht.train(tiny_target, sequences, ht.TrainSettings("eagle3", steps=100_000, max_minutes=0.02,
                                                                     draft_vocab=64), lines.append)
    steps = [line for line in lines if line.startswith("step ")]
    assert record["stopped_by_time"] and 0 < record["steps"] < 100_000
    assert len(steps) == record["steps"] and steps[-1].startswith(f"step {record['steps']}/100000")


def test_the_time_budget_counts_the_feature_pass(tiny_target, monkeypatch):
    """``max_minutes`` bounds the whole of ``train``: a feature pass that uses up the budget leaves one step (a head
    is still saved), where a budget counted from the first step would have trained on for the full minutes."""
    import time

    import relaxbench.decoding.drafters.head_training as ht

    features = ht.examples

    def slow_features(*args, **kwargs):
        time.sleep(1.5)  # past the 1.2 s budget below
        return features(*args, **kwargs)

    monkeypatch.setattr(ht, "examples", slow_features)
    sequences = random_prompts(12, int(tiny_target.logit_dim) - 8, seed=15)
    _, _, record = ht.train(tiny_target, sequences, ht.TrainSettings("eagle3", steps=100_000, max_minutes=0.02,
                                                                     draft_vocab=64), lambda line: None)
    assert record["steps"] == 1 and record["stopped_by_time"]


def test_the_time_budget_holds_back_the_evaluations_after_training(tiny_target, monkeypatch):
    """The held-out and training evaluations after the last step are inside ``max_minutes``: on a clock where a pack
    of ``batch_tokens`` pairs costs a second, forward or backward alike, the whole call ends within the budget (give or
    take the step in progress), where stopping the steps at the deadline would overrun it by the evaluations."""
    import types

    import relaxbench.decoding.drafters.head_training as ht

    clock = [0.0]
    scored = ht._loss_and_hits

    def costed(head, kind, example, *args, **kwargs):
        packed = example if isinstance(example, list) else [example]
        clock[0] += sum(int(e.ids.shape[0]) for e in packed) / 64
        return scored(head, kind, example, *args, **kwargs)

    monkeypatch.setattr(ht, "_loss_and_hits", costed)
    monkeypatch.setattr(ht, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    sequences = random_prompts(40, int(tiny_target.logit_dim) - 8, seed=16)
    settings = ht.TrainSettings("eagle3", steps=100_000, max_minutes=0.5, draft_vocab=64, batch_tokens=64)
    _, _, record = ht.train(tiny_target, sequences, settings, lambda line: None)
    evaluated = sum(len(ids) for ids in sequences) * 0.2 / 64  # seconds the evaluations take here, at the least
    assert record["stopped_by_time"] and record["steps"] > 5 and evaluated > 1.0
    assert clock[0] <= 30 + 1.5, clock[0]


def test_more_training_text_is_read_from_files_and_folders(tmp_path):
    """``drafter train --text``: a JSONL file gives its rows' strings, a source file its text in pieces cut at line
    ends of at most about ``CHUNK_CHARS`` (nothing lost), a folder its files of those kinds; ``--text-limit`` draws
    that many pieces; ``stdlib`` reads the standard library's source; a missing path is refused."""
    from relaxbench.commands.drafter import CHUNK_CHARS, extra_texts, stdlib_sources

    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    lines = [f"def f{i}(x):\n    return x + {i}\n" for i in range(400)]
    (folder / "sub" / "code.py").write_text("".join(lines))
    (folder / "rows.jsonl").write_text(json.dumps({"q": "a question", "n": 3, "more": ["first", "second"]}) + "\n")
    (folder / "image.png").write_bytes(b"\x89PNG")
    pieces = extra_texts([str(folder)], None, 0)
    code = [p for p in pieces if p not in ("a question", "first", "second")]
    assert "".join(code) == "".join(lines)
    assert len(code) > 1 and all(len(p) <= CHUNK_CHARS for p in code)
    assert {"a question", "first", "second"} <= set(pieces) and not any("PNG" in p for p in pieces)
    assert len(extra_texts([str(folder)], 2, 0)) == 2
    with pytest.raises(ConfigError, match="--text .*nope: no such file or folder"):
        extra_texts([str(tmp_path / "nope")], None, 0)
    sources = stdlib_sources()  # --text stdlib: the standard library's own modules, not its tests or packages
    names = {f.name for f in sources}
    assert {"json/__init__.py", "collections/__init__.py"} <= {f"{f.parent.name}/{f.name}" for f in sources}
    assert "test_json.py" not in names and not any("site-packages" in f.parts for f in sources)
    assert len(extra_texts(["stdlib"], 3, 0)) == 3


def test_a_text_and_its_continuation_are_held_out_together(tiny_target):
    """``heldout_split`` keeps a text and the same text continued by the target on one side, whether the text is
    shorter than ``SOURCE_PREFIX`` tokens or longer; unrelated texts are separate sources."""
    import random

    import relaxbench.decoding.drafters.head_training as ht

    vocab = int(tiny_target.logit_dim)
    rng = torch.Generator().manual_seed(15)
    texts = [torch.randint(0, vocab, (n,), generator=rng).tolist() for n in (5, 8, 30, 40, 6, 9)]
    continued = [t + torch.randint(0, vocab, (12,), generator=rng).tolist() for t in texts]
    data = ht.examples(tiny_target, texts + continued, ht.target_layers("mtp", tiny_target.model.config))
    for seed in range(5):
        held, train = ht.heldout_split(data, 0.3, random.Random(seed))
        held_ids = {tuple(ex.ids.tolist()) for ex in held}
        assert held and train
        for text, longer in zip(texts, continued):
            assert (tuple(text) in held_ids) == (tuple(longer) in held_ids)


def test_a_warm_started_eagle3_head_reads_the_targets_vocabulary_rows(tiny_target):
    """``warm_start`` gives a new EAGLE-3 head the target's output rows of its draft vocabulary and the target's
    final norm."""
    import relaxbench.decoding.drafters.head_training as ht

    vocab = int(tiny_target.logit_dim)
    sequences = random_prompts(4, vocab - 8, seed=12)
    kept = ht.draft_vocabulary(sequences, vocab, 50)
    head, _ = ht.new_head("eagle3", tiny_target, kept)
    ht.warm_start(head, "eagle3", tiny_target, kept)
    rows = tiny_target.model.get_output_embeddings().weight.float()
    torch.testing.assert_close(head.lm_head.weight, rows[kept])
    torch.testing.assert_close(head.norm.weight, tiny_target.model.model.norm.weight.float())


# ---- other on-disk forms of the same heads -----------------------------------------------------------------------

@torch.inference_mode()
def test_a_pytorch_bin_eagle3_checkpoint_and_a_sharded_target_give_the_same_drafts(tiny_target, heads, tmp_path):
    """Original EAGLE-3 heads ship ``pytorch_model.bin``; large targets shard their safetensors behind an index
    (only the shards holding the MTP keys are read)."""
    from safetensors.torch import load_file, save_file

    ids = random_prompts(1, tiny_target.logit_dim - 8, seed=8)[0][:10]
    src = heads["eagle3-original"]
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "config.json").write_text((src / "config.json").read_text())
    torch.save(load_file(str(src / "model.safetensors")), binary / "pytorch_model.bin")
    expected = drafter_rows(drafter_for(tiny_target, "eagle3", src), tiny_target, ids, 4)
    got = drafter_rows(drafter_for(tiny_target, "eagle3", binary), tiny_target, ids, 4)
    assert got.tokens.tolist() == expected.tokens.tolist()

    src = heads["mtp-deepseek"]
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    n = tiny_target.model.config.num_hidden_layers
    shards = {"a.safetensors": {k: v for k, v in tensors.items() if not k.startswith(f"model.layers.{n}.")},
              "b.safetensors": {k: v for k, v in tensors.items() if k.startswith(f"model.layers.{n}.")}}
    for name, part in shards.items():
        save_file(part, str(sharded / name))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: name for name, part in shards.items() for k in part}}))
    (sharded / "a.safetensors").write_bytes(b"not read")  # holds no MTP key: the index says so, it is never opened
    expected = drafter_rows(drafter_for(tiny_target, "mtp", src), tiny_target, ids, 4)
    got = drafter_rows(drafter_for(tiny_target, "mtp", sharded), tiny_target, ids, 4)
    assert got.tokens.tolist() == expected.tokens.tolist()


def test_an_unreachable_hub_id_is_one_line(cli):
    from conftest import assert_one_line_error

    result = cli("generate", "--target", "tiny-random-target", "--draft", "eagle3", "--drafter-knob",
                 "head=nobody/no-such-eagle3-head", "--rule", "exact", "--prompt", "hi", "--no-chat",
                 "--max-new-tokens", "4", "-k", "2", env={"HF_HUB_OFFLINE": "1"})
    assert_one_line_error(result, "nobody/no-such-eagle3-head", "cannot fetch from the hub")


@pytest.mark.slow
def test_the_exact_mtp_method_drafts_with_the_targets_own_mtp_layer(cli, heads):
    """``--method exact-mtp`` on a checkpoint that ships an MTP module (no head knob): the target's text, and the
    rounds drafted."""
    target = str(heads["mtp-qwen3_next"])  # the tiny target's files with Qwen3-Next-layout mtp.* tensors added
    common = ("--prompt", "hello there", "--no-chat", "--max-new-tokens", "12", "--dtype", "float32")
    ar = cli("generate", "--target", target, "--rule", "none", *common)
    mtp = cli("generate", "--target", target, "--method", "exact-mtp", "-k", "3", *common)
    assert ar.returncode == 0 and mtp.returncode == 0, (ar.stderr, mtp.stderr)
    assert mtp.stdout == ar.stdout
    assert "exact-mtp (exact, k=3" in mtp.stderr


SAMPLING_RULES = ["speculative-sampling", "cactus", "mentored", "casc-opt", "fuzzy", "ensemble", "contrastive",
                  "margin", "typical", "fly", "reflective", "diversed"]


@pytest.mark.parametrize("rule", SAMPLING_RULES)
def test_every_sampling_rule_runs_with_a_reduced_vocabulary_head(tiny_target, heads, rule):
    """An EAGLE-3 head's q is -inf outside its 200-token draft vocabulary: every rule that reads q in sampling mode
    decodes with it and emits tokens of the target's vocabulary."""
    from relaxbench.methods import load_method

    spec = load_method(rule).model_copy(update={"drafter": DrafterSpec(kind="eagle3",
                                                                       knobs={"head": str(heads["eagle3-original"])})})
    prompt = random_prompts(1, tiny_target.logit_dim - 8, seed=13)[0]
    result = build_decoder(spec, tiny_target, None,
                           DecodeConfig(k=3, max_new_tokens=12, sampling=SamplingParams(0.8), seed=1)).generate(prompt)
    assert len(result.output_ids) == 12 or result.stop_reason == "eos"
    assert all(0 <= t < tiny_target.logit_dim for t in result.output_ids) and sum(result.rounds.drafted) > 0
