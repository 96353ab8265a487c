"""Dedicated draft heads in cost profiles: a head's shape is read from its checkpoint (config and weight headers, no
tensor read) in every layout relaxbench loads, an analytic profile prices the head's forwards with the head's own
roofline (its first forward, over the prompt's features, as its prefill), and a profile without the head's costs
says so instead of pricing the arm as something else."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

import draft_heads as dh
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.methods import DrafterSpec
from relaxbench.models.shape import ModelShape
from relaxbench.profiles import Unpriced, Work, proxy_time
from relaxbench.profiles.analytic import analytic_profile, head_roofline, roofline
from test_draft_heads import LAYOUTS, kind_of, save_head

TARGET_SHAPE = ModelShape(parameters=1_500_000_000, embedding_parameters=230_000_000, tied_embeddings=False,
                          layers=28, hidden_size=1536, attention_heads=12, kv_heads=2, head_dim=128)


@pytest.fixture(scope="module")
def heads(tmp_path_factory, tiny_target):
    root = tmp_path_factory.mktemp("priced-heads")
    return {layout: save_head(layout, tiny_target, root / layout) for layout in LAYOUTS}


def stored_sizes(folder) -> dict[str, int]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        return {key: handle.get_slice(key).get_shape() for key in handle.keys()}


def expected_parameters(layout: str, folder, config) -> int:
    """Independently of the reader: the head's own tensors (an MTP inside its target: those under its prefix), the
    vocabulary maps left out, plus the target's output head for an MTP that has none of its own."""
    n_layers = config.num_hidden_layers
    prefix = {"mtp-qwen3_next": "mtp.", "mtp-deepseek": f"model.layers.{n_layers}."}.get(layout, "")
    total = 0
    for key, shape in stored_sizes(folder).items():
        if key.startswith(prefix) and key not in ("d2t", "t2d"):
            count = 1
            for size in shape:
                count *= size
            total += count
    if kind_of(layout) == "mtp":
        total += config.vocab_size * config.hidden_size
    return total


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_heads_shape_is_read_from_its_checkpoint_in_every_layout(tiny_target, heads, layout):
    config = tiny_target.model.config
    kind = kind_of(layout)
    fields = DRAFTERS.get(kind).head_shape_for({"head": str(heads[layout])}, "tiny-random-target")
    shape = ModelShape(**fields)
    assert shape.layers == 1 and not shape.tied_embeddings
    assert shape.hidden_size == config.hidden_size
    assert (shape.attention_heads, shape.kv_heads) == (config.num_attention_heads, config.num_key_value_heads)
    assert shape.head_dim == config.hidden_size // config.num_attention_heads
    assert shape.parameters == expected_parameters(layout, heads[layout], config)
    assert shape.parameters_read_per_forward == shape.parameters - shape.embedding_parameters


def test_layouts_of_the_same_weights_have_the_same_shape(tiny_target, heads):
    shapes = {layout: DRAFTERS.get(kind_of(layout)).head_shape_for({"head": str(heads[layout])}, "t")
              for layout in LAYOUTS}
    assert shapes["eagle3-original"] == shapes["eagle3-speculators"]
    assert shapes["mtp-qwen3_next"] == shapes["mtp-deepseek"] == shapes["mtp-speculators"]
    # EAGLE-3's output head is its reduced vocabulary's rows, not the target's
    config = tiny_target.model.config
    draft_vocab = json.loads((heads["eagle3-original"] / "config.json").read_text())["draft_vocab_size"]
    assert draft_vocab < config.vocab_size
    assert stored_sizes(heads["eagle3-original"])["lm_head.weight"] == [draft_vocab, config.hidden_size]


def head_profile(label: str, shape: ModelShape):
    return analytic_profile("h100-sxm", "target", TARGET_SHAPE, heads={label: shape})


HEAD = ModelShape(parameters=60_000_000, embedding_parameters=0, tied_embeddings=False, layers=1,
                  hidden_size=1536, attention_heads=12, kv_heads=2, head_dim=128)
LABEL = DrafterSpec(kind="eagle3", knobs={"head": "trained"}).label


def test_an_analytic_profile_prices_a_heads_forwards_with_its_own_roofline():
    profile = head_profile(LABEL, HEAD)
    costs = profile.head(LABEL)
    assert costs is not None and costs.model == "eagle3(head=trained)"
    target = profile.target
    # one layer of the target's width reads a small share of the target's weights: a step costs much less
    assert costs.forward.at(1, 512) < target.forward.at(1, 512)
    # and launches a share of its kernels: the per-forward overhead scaled by (1 + 1) / (28 + 1) layers
    whole, scaled = roofline("h100-sxm", HEAD), head_roofline("h100-sxm", HEAD, TARGET_SHAPE)
    assert scaled.overhead == pytest.approx(whole.overhead * 2 / 29) and whole.overhead > 0
    assert costs.forward.at(1, 0) == pytest.approx(scaled.seconds(1, 0))
    assert any("head layers + 1" in line for line in profile.assumptions)
    work = Work(prompt_tokens=100, drafted=(4, 4, 4), emitted=(3, 5, 1), extra=(0, 0, 0),
                draft_forwards=((99, 1, 1, 1), (4, 1, 1, 1), (6, 1, 1, 1)), lookups=(0, 0, 0))
    priced = proxy_time(profile, work, "eagle3", head=LABEL)
    context = [99, 102, 107]
    verify = sum(target.forward.at(5, c) for c in context)
    first_round = [costs.forward.at(1, 99)] * 3  # the prompt's feed goes to prefill
    later = [costs.forward.at(n, c) for c, sizes in zip(context[1:], ((4, 1, 1, 1), (6, 1, 1, 1)))
             for n in sizes]
    assert priced.verify == pytest.approx(verify)
    assert priced.draft == pytest.approx(sum(first_round) + sum(later))
    assert priced.prefill == pytest.approx(target.prefill.at(99) + costs.prefill.at(99))
    assert not priced.approximate
    # the same rounds drafted by a heavier head cost more, and AR is not touched by the head
    heavier = head_profile(LABEL, ModelShape(**{**HEAD.record(), "parameters": 10 * HEAD.parameters}))
    assert proxy_time(heavier, work, "eagle3", head=LABEL).draft > priced.draft
    ar = Work(prompt_tokens=100, drafted=(0,) * 9, emitted=(1,) * 9, extra=(0,) * 9, draft_forwards=((),) * 9,
              lookups=(0,) * 9)
    assert proxy_time(heavier, ar, None).total == pytest.approx(proxy_time(profile, ar, None).total)


def test_a_profile_without_the_heads_costs_leaves_its_arm_unpriced():
    work = Work(prompt_tokens=10, drafted=(2,), emitted=(3,), extra=(0,), draft_forwards=((9, 1),), lookups=(0,))
    other = head_profile("mtp", HEAD)
    with pytest.raises(Unpriced, match=r"no costs for the draft head 'eagle3\(head=trained\)'.*analytic"):
        proxy_time(other, work, "eagle3", head=LABEL)
    with pytest.raises(Unpriced, match="no costs for the draft head"):
        proxy_time(analytic_profile("h100-sxm", "target", TARGET_SHAPE), work, "mtp", head="mtp")
    assert proxy_time(other, work, "mtp", head="mtp").draft > 0


def test_a_head_whose_files_are_gone_is_left_out_of_the_profile(tmp_path):
    from types import SimpleNamespace

    from relaxbench.analysis.proxy import run_head_shapes

    cell = SimpleNamespace(is_baseline=False, drafter={"kind": "eagle3", "knobs": {"head": str(tmp_path / "gone")}})
    run = SimpleNamespace(cells=[cell], target="tiny-random-target")
    assert run_head_shapes(run) == {}


def test_profile_analytic_writes_a_heads_table_and_refuses_a_bad_head_in_one_line(cli, heads, tmp_path):
    from conftest import assert_one_line_error
    from relaxbench.profiles import load_profile

    out = tmp_path / "h100.yaml"
    head = heads["eagle3-speculators"]
    result = cli("profile", "--analytic", "h100-sxm", "--target", "tiny-random-target", "--head", f"eagle3={head}",
                 "--head", f"mtp={heads['mtp-speculators']}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    profile = load_profile(out)
    labels = [costs.model for costs in profile.heads]
    assert labels == [f"eagle3(head={head})", f"mtp(head={heads['mtp-speculators']})"]
    assert profile.settings["head_shapes"][labels[0]]["layers"] == 1
    assert_one_line_error(cli("profile", "--analytic", "h100-sxm", "--target", "tiny-random-target", "--head",
                              "ngram=x", "--out", str(tmp_path / "b.yaml")), "--head ngram=x", "eagle3, mtp")
    assert_one_line_error(cli("profile", "--analytic", "h100-sxm", "--target", "tiny-random-target", "--head",
                              f"eagle3={tmp_path / 'missing'}", "--out", str(tmp_path / "c.yaml")), "no such folder")
    assert_one_line_error(cli("profile", "--target", "tiny-random-target", "--head", f"eagle3={head}", "--out",
                              str(tmp_path / "d.yaml")), "--head", "--analytic")
    assert not any((tmp_path / name).exists() for name in ("b.yaml", "c.yaml", "d.yaml"))
