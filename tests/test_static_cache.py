"""The static-cache decode path and the captured-graph wrapper, on CPU.

* ``CachedLM`` on a static cache gives the dynamic cache's logits across feeds, rollbacks and a growth of the cache;
* the loop on a static cache (and with graphs, replayed here by the CPU stand-in of a CUDA graph) produces the
  dynamic path's tokens under greedy decoding for every drafter and a set of rules, across rollbacks, k and
  prompts of different lengths on one decoder;
* ``StepGraphs``: bucketing, padding, copy-in and copy-out, one capture per bucket;
* ``--graphs on`` on a CPU is refused in one line; ``--kv-cache``/``--graphs`` resolve as documented.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import draft_heads as dh
from relaxbench.decoders import build_decoder
from relaxbench.decoding.cache import CachedLM, KVSettings, configure_kv, kv_settings, resolve_kv_settings
from relaxbench.decoding.graphs import ReplayGraph, StepGraphs, exact_buckets, replay_capture
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.methods import DrafterSpec, MethodSpec
from tests.conftest import assert_one_line_error
from tests.test_losslessness import random_prompts

LAYOUTS = {"eagle3": "eagle3-speculators", "mtp": "mtp-deepseek"}


@pytest.fixture
def settings() -> Iterator[None]:
    before = kv_settings()
    yield
    configure_kv(before)


@pytest.fixture(scope="module")
def heads(tmp_path_factory, tiny_target) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heads")
    target_dir = Path(tiny_target.model.config.name_or_path)
    cfg = tiny_target.model.config
    return {"eagle3": dh.save_eagle3_speculators(root / "eagle3", cfg, 0),
            "mtp": dh.save_mtp_in_target(root / "mtp", target_dir, "deepseek", 0)}


# ---- CachedLM: static against dynamic ---------------------------------------------------------------------------

@torch.inference_mode()
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "replayed"])
def test_static_cachedlm_matches_dynamic_across_rollbacks_and_growth(tiny_target, graphs):
    model = tiny_target.model
    dynamic, static = CachedLM(model), CachedLM(model, "static", graphs=graphs)
    static.reserve(8)  # smaller than the sequence: the cache must grow, keeping what it holds
    if graphs:
        static.capture(exact_buckets(4), want_hidden=True)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 200, (40,), generator=gen)
    steps = [(0, 9), (9, 13), (12, 13), (13, 16), (10, 14), (14, 15), (15, 30), (20, 24), (5, 6)]
    for keep, end in steps:  # roll back to ``keep``, then feed ids[keep:end]
        for lm in (dynamic, static):
            lm.truncate(min(keep, lm.length))
        feed = ids[dynamic.length:end]
        a = dynamic.run(feed, n_logits=int(feed.shape[0]), want_hidden=True)
        b = static.run(feed, n_logits=int(feed.shape[0]), want_hidden=True)
        assert static.length == dynamic.length
        torch.testing.assert_close(b.logits, a.logits)
        torch.testing.assert_close(b.hidden, a.hidden)
    assert static.capacity >= 30
    if graphs:
        replays = sum(bucket.graph.replays for g in static.step_graphs.values() for bucket in g.captured.values())
        assert replays > 0, "no forward replayed a captured graph"


@torch.inference_mode()
def test_a_padded_bucket_gives_the_unpadded_forwards_logits(tiny_target):
    """Only a bucket of 4 is captured: forwards of 1..4 tokens are padded to it, and still match eager."""
    model = tiny_target.model
    eager, padded = CachedLM(model, "static"), CachedLM(model, "static", graphs=True)
    padded.capture([4])
    ids = torch.arange(10, 30)
    for width in (3, 1, 2, 4, 1):
        feed = ids[eager.length: eager.length + width]
        a, b = eager.run(feed, n_logits=width), padded.run(feed, n_logits=width)
        torch.testing.assert_close(b.logits, a.logits)
    (graphs,) = padded.step_graphs.values()
    assert list(graphs.captured) == [4] and graphs.captured[4].graph.replays == 5


@torch.inference_mode()
def test_a_last_token_graph_gives_the_eager_last_logits(tiny_target):
    """A draft LM's pending feed reads one row of logits: its graph multiplies the LM head by that row alone."""
    model = tiny_target.model
    eager, graphed = CachedLM(model, "static"), CachedLM(model, "static", graphs=True)
    graphed.capture(range(2, 5), want_hidden=True, last_only=True)
    ids = torch.arange(40, 60)
    for width in (4, 2, 3):
        feed = ids[eager.length: eager.length + width]
        a = eager.run(feed, n_logits=1, want_hidden=True)
        b = graphed.run(feed, n_logits=1, want_hidden=True)
        assert b.logits.shape == (1, a.logits.shape[-1])
        torch.testing.assert_close(b.logits, a.logits)
        torch.testing.assert_close(b.hidden, a.hidden)
    (graphs,) = graphed.step_graphs.values()
    assert sum(bucket.graph.replays for bucket in graphs.captured.values()) == 3
    assert graphed.run(ids[9:11], n_logits=2).logits.shape[0] == 2  # no every-token graph: eager


# ---- the loop: static (and replayed graphs) against dynamic, every drafter ---------------------------------------

RULES = [("exact", {}), ("fly", {}), ("typical-greedy", {}), ("margin-greedy", {}), ("cactus", {}),
         ("reflective", {})]


def _method(drafter: str, policy: str, knobs: dict, heads: dict[str, Path]) -> tuple[MethodSpec, bool]:
    drafter_knobs = {"head": str(heads[drafter])} if drafter in heads else {}
    spec = DrafterSpec(kind=drafter, knobs=drafter_knobs)
    return MethodSpec(name=policy, policy=policy, knobs=knobs, drafter=spec), drafter in ("model", "ngram+lm")


def _outputs(method, target, draft, prompts, k: int, settings: KVSettings) -> list[list[int]]:
    from relaxbench.decoding.drafters.head_modules import HeadStaticCache

    configure_kv(settings)
    decoder = build_decoder(method, target, draft, DecodeConfig(k=k, max_new_tokens=20))
    outputs = [decoder.generate(p).output_ids for p in prompts]
    if decoder.drafter is not None and hasattr(decoder.drafter, "head"):  # a head keeps a cache of the same layout
        assert isinstance(decoder.drafter.cache, HeadStaticCache) == (settings.kv_cache == "static")
    lm = getattr(decoder.drafter, "lm", None)
    if lm is not None:
        assert lm.kv_cache == settings.kv_cache
    if settings.graphs:
        report = decoder.graph_report()
        assert report["target"]["graphs"] >= k + 1, report
    return outputs


@pytest.mark.parametrize("drafter", ["model", "ngram", "ngram+lm", "layerskip", "eagle3", "mtp"])
@pytest.mark.slow
def test_static_and_replayed_paths_give_the_dynamic_paths_tokens(tiny_target, tiny_draft, heads, settings, drafter):
    # prompts of different lengths on one decoder: the cache is reused, grown and rolled back; k changes too
    prompts = [p[:n] for p, n in zip(random_prompts(3, 200, seed=5), (6, 40, 12), strict=True)]
    ran = 0
    for policy, knobs in RULES:
        method, needs_draft = _method(drafter, policy, knobs, heads)
        draft = tiny_draft if needs_draft else None
        for k in (2, 5):
            try:
                reference = _outputs(method, tiny_target, draft, prompts, k, KVSettings())
            except ConfigError:  # a rule that needs q with a drafter that has none
                break
            for setting in (KVSettings("static"), KVSettings("static", graphs=True)):
                assert _outputs(method, tiny_target, draft, prompts, k, setting) == reference, (policy, k, setting)
            ran += 1
    assert ran >= 6, f"only {ran} (rule, k) runs for drafter {drafter}"


def test_the_replayed_path_replays_the_targets_and_the_drafters_graphs(tiny_target, tiny_draft, settings):
    configure_kv(KVSettings("static", graphs=True))
    decoder = build_decoder(MethodSpec(name="exact", policy="exact", drafter=DrafterSpec(kind="model")),
                            tiny_target, tiny_draft, DecodeConfig(k=3, max_new_tokens=12))
    decoder.generate(list(range(5, 15)))
    for lm in (decoder.lm, decoder.drafter.lm):
        replays = [b.graph.replays for g in lm.step_graphs.values() for b in g.captured.values()]
        assert sum(replays) > 0
    before = decoder.graph_report()["target"]["graphs"]
    decoder.generate(list(range(5, 12)))  # a shorter prompt: nothing to capture again
    assert decoder.graph_report()["target"]["graphs"] == before


# ---- StepGraphs' buffers ------------------------------------------------------------------------------------------

class Recorder:
    """A step whose outputs show what it read: row i = (ids[i], start + i); counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ids: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.calls += 1
        positions = start + torch.arange(ids.shape[0])
        return (torch.stack([ids, positions], dim=-1).float(),)


def test_step_graphs_buckets_pad_copy_in_and_copy_out():
    step = Recorder()
    graphs = StepGraphs(step, [4, 2, 2, 0], "cpu", replay_capture)
    assert graphs.buckets == (2, 4)
    assert [graphs.bucket_for(n) for n in (1, 2, 3, 4, 5)] == [2, 2, 4, 4, None]
    assert graphs.run(torch.arange(5), 0) is None  # wider than any bucket: the caller runs it eagerly
    (out,) = graphs.run(torch.tensor([7, 8, 9]), 10)
    assert out.tolist() == [[7, 10], [8, 11], [9, 12]]  # cut to the real width
    bucket = graphs.captured[4]
    assert bucket.ids.tolist() == [7, 8, 9, 9]  # padded with the last id, after the real ones
    (again,) = graphs.run(torch.tensor([1]), 3)
    assert again.tolist() == [[1, 3]]
    (later,) = graphs.run(torch.tensor([4, 5, 6]), 0)
    assert out.tolist() == [[7, 10], [8, 11], [9, 12]], "an earlier result changed: outputs must be copied out"
    assert later.tolist() == [[4, 0], [5, 1], [6, 2]]
    assert isinstance(bucket.graph, ReplayGraph) and bucket.graph.replays == 2
    calls = step.calls
    graphs.capture_all()  # both buckets captured already (lazily): nothing is captured again
    assert step.calls == calls and graphs.report.graphs == 2 and graphs.report.buckets == [4, 2]


# ---- the flags ------------------------------------------------------------------------------------------------------

def test_kv_settings_resolve_as_documented():
    def resolved(*args, **kwargs) -> tuple[str, bool, bool]:
        settings = resolve_kv_settings(*args, **kwargs)
        return settings.kv_cache, settings.graphs, settings.asked

    assert resolved("auto", "auto", "cpu") == ("dynamic", False, False)
    assert resolved("static", "auto", "cpu") == ("static", False, True)
    assert resolved("auto", "auto", "cuda:0") == ("static", True, False)
    assert resolved("dynamic", "auto", "cuda") == ("dynamic", False, False)
    assert resolved("auto", "off", "cuda") == ("dynamic", False, False)
    assert resolved("auto", "on", "cuda") == ("static", True, True)
    assert resolved("auto", "auto", "cuda", device_map="auto") == ("dynamic", False, False)
    with pytest.raises(ConfigError, match="--device-map"):
        resolve_kv_settings("auto", "on", "cuda", device_map="auto")
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        resolve_kv_settings("auto", "on", "cpu")
    with pytest.raises(ConfigError, match="needs --kv-cache static"):
        resolve_kv_settings("dynamic", "on", "cuda")


def test_a_model_with_sliding_layers_keeps_the_dynamic_cache_under_auto_and_is_refused_when_asked(settings):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=8,
                         max_window_layers=0)
    model = Qwen2ForCausalLM(config).eval()
    assert "sliding_attention" in config.layer_types
    configure_kv(KVSettings("static", graphs=False, asked=False))  # what auto resolves to on a GPU, without graphs
    assert CachedLM.configured(model).kv_cache == "dynamic"
    configure_kv(KVSettings("static", graphs=False, asked=True))
    with pytest.raises(ConfigError, match="sliding-window layers"):
        CachedLM.configured(model)


@pytest.mark.parametrize("command", ["generate", "compare", "bench engine"])
def test_graphs_on_a_cpu_is_one_line(cli, command):
    args = {"generate": ["generate", "--target", "tiny-random-target", "--rule", "none", "--prompt", "hi"],
            "compare": ["compare", "--target", "tiny-random-target", "--methods", "exact", "--tasks", "mt-bench"],
            "bench engine": ["bench", "engine", "--target", "tiny-random-target"]}[command]
    result = cli(*args, "--device", "cpu", "--graphs", "on")
    assert_one_line_error(result, "--graphs on needs a CUDA device")


@pytest.mark.slow
def test_generate_on_the_static_cache_reports_it(cli):
    result = cli("generate", "--target", "tiny-random-target", "--rule", "none", "--prompt", "hello there",
                 "--device", "cpu", "--kv-cache", "static", "--max-new-tokens", "4")
    assert result.returncode == 0, result.stderr
    assert "kv cache static" in result.stderr


def test_the_environment_record_holds_the_setting_and_no_run_key_does(settings, tiny_target):
    from relaxbench.harness.environment import describe_environment

    configure_kv(KVSettings("static", False))
    env = describe_environment(tiny_target, None, "cpu", argv=["generate"])
    assert env["kv_cache"] == "static" and env["graphs"] is False
    assert json.dumps(env)  # recorded as JSON with the session


@pytest.mark.parametrize("drafter", ["eagle3", "mtp"])
def test_a_heads_static_cache_drafts_what_its_dynamic_cache_drafts(tiny_target, heads, settings, drafter):
    """Every round's drafts and draft logits, through rollbacks of chained and rejected positions: a head on its
    static cache against the same head on a dynamic one (outputs alone could hide a wrong draft the target
    rejects)."""
    from relaxbench.decoding.drafters.head_modules import HeadStaticCache

    prompt = random_prompts(1, 200, seed=8)[0][:10]
    seen: dict[str, list] = {}
    for kind in ("dynamic", "static"):
        configure_kv(KVSettings(kind))
        method, _ = _method(drafter, "exact", {}, heads)
        decoder = build_decoder(method, tiny_target, None, DecodeConfig(k=3, max_new_tokens=24))
        head = decoder.drafter
        head.keep_logits = True
        original, rounds = head.propose, []

        def recorded(*args, original=original, rounds=rounds):
            proposal = original(*args)
            rounds.append((proposal.tokens.tolist(), proposal.logits))
            return proposal

        head.propose = recorded
        decoder.generate(prompt)
        decoder.generate(prompt[:6])  # a second, shorter sequence on the same cache
        assert isinstance(head.cache, HeadStaticCache) == (kind == "static")
        seen[kind] = rounds
    assert len(seen["static"]) == len(seen["dynamic"]) >= 10
    for (tokens_s, logits_s), (tokens_d, logits_d) in zip(seen["static"], seen["dynamic"], strict=True):
        assert tokens_s == tokens_d
        if logits_d is not None and logits_d.numel():
            torch.testing.assert_close(logits_s, logits_d)
