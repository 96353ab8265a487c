"""The ``drafters`` suite: every rule family crossed with each drafter through the ``drafter`` sweep key, heads found
with ``head=trained`` where ``relaxbench drafter train`` cached them, and the run's relaxation-by-drafter table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error
from tests.test_reliability import DATA

FAMILIES = ("exact", "fly", "reflective", "margin-greedy", "typical-greedy")
DRAFTERS = ("model", "eagle3(head=trained)", "mtp(head=trained)", "ngram")


def drafters_suite():
    from relaxbench.harness.suite import SuiteSpec, suite_file_fields, suite_path
    from relaxbench.validation import load_yaml

    path = suite_path("drafters")
    return SuiteSpec(**suite_file_fields(load_yaml(path), str(path)))


def test_the_suite_crosses_each_rule_family_with_four_drafters_at_one_k():
    from relaxbench.harness.plan import build_arms

    suite = drafters_suite()
    arms = build_arms(suite)
    assert arms[0].name == "ar"
    expected = {f"{family}-by-drafter[drafter={drafter}]" for family in FAMILIES for drafter in DRAFTERS}
    assert {arm.name for arm in arms[1:]} == expected and len(arms) == 1 + 20
    for arm in arms[1:]:
        family = arm.base_method.removesuffix("-by-drafter")
        assert arm.method.policy == family  # the rule's own policy and knobs, only the drafter swept
        kind = arm.name.split("drafter=")[1].split("(")[0].rstrip("]")
        assert arm.drafter.kind == kind
        assert arm.drafter.knobs == ({"head": "trained"} if kind in ("eagle3", "mtp") else {})
        assert arm.k == 10  # every rule meets exact with its drafter at one draft length
    fly = [arm for arm in arms if arm.base_method == "fly-by-drafter"]
    assert all(arm.method.knobs == {"theta": 0.3, "window": 6} for arm in fly)


def test_a_drafter_sweep_replaces_the_drafter_whole_and_then_sets_its_knobs():
    from relaxbench.methods import MethodSpec

    method = MethodSpec(name="m", policy="exact", drafter={"kind": "ngram+lm", "max_ngram": 4},
                        sweep={"drafter": ["model", {"kind": "ngram", "max_ngram": 2}], "drafter.min_ngram": [1]})
    points = {point.name: point.drafter for point in method.expand()}
    assert set(points) == {"m[drafter=model,drafter.min_ngram=1]",
                           "m[drafter=ngram(max_ngram=2),drafter.min_ngram=1]"}
    assert points["m[drafter=model,drafter.min_ngram=1]"].knobs == {"min_ngram": 1}  # ngram+lm's max_ngram dropped
    assert points["m[drafter=ngram(max_ngram=2),drafter.min_ngram=1]"].knobs == {"max_ngram": 2, "min_ngram": 1}
    with pytest.raises(ValueError, match="drafter kinds"):
        MethodSpec(name="m", policy="exact", sweep={"drafter": [{"max_ngram": 2}]})


def test_head_trained_without_a_trained_head_is_one_line_naming_the_command(cli):
    result = cli("generate", "--rule", "exact", "--target", "tiny-random-draft", "--draft", "mtp", "--drafter-knob",
                 "head=trained", "--prompt", "hello", "--max-new-tokens", "8", "-k", "3")
    assert_one_line_error(result, "no trained head for target 'tiny-random-draft'",
                          "relaxbench drafter train mtp --target tiny-random-draft")


@pytest.mark.slow
def test_the_suite_runs_on_the_tiny_models_with_heads_trained_into_the_cache(cli, tmp_path):
    """Heads trained without --out land in the cache, where head=trained finds them; the suite then runs every
    rule with every drafter, exact is lossless with each, and the relaxation-by-drafter table pairs each rule with
    exact of its own drafter."""
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.drafters import run_drafter_gains
    from relaxbench.analysis.proxy import choose_profiles, sample_proxy
    from relaxbench.paths import trained_head_dir
    from relaxbench.models import preview_model

    target_path = str(preview_model("tiny-random-target", quiet=True).config.name_or_path)
    for kind in ("eagle3", "mtp"):
        trained = cli("drafter", "train", kind, "--target", "tiny-random-target", "--steps", "4",
                      "--self-distill-tokens", "0", "--draft-vocab", "100", "--dtype", "float64")
        assert trained.returncode == 0, trained.stderr
        assert f"--draft {kind} --drafter-knob head=trained" in trained.stderr
        folder = trained_head_dir(target_path, kind)
        assert json.loads((folder / "card.json").read_text())["steps"] == 4
        assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()

    out = tmp_path / "run"
    result = cli("compare", "--suite", "drafters", "--target", "tiny-random-target", "--draft", "tiny-random-draft",
                 "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--limit", "2", "--max-new-tokens", "12",
                 "--warmup", "0", "--report-format", "none", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    run = load_run(out)
    outputs = {cell.arm: [s.output_ids for s in sorted(cell.samples, key=lambda s: s.item_index)]
               for cell in run.cells}
    assert len(outputs) == 21
    for drafter in DRAFTERS:  # exact match is lossless whatever drafts
        assert outputs[f"exact-by-drafter[drafter={drafter}]"] == outputs["ar"], drafter
    [gains] = run_drafter_gains(run, summarize_run(run)).values()
    labels = {gain.drafter for gain in gains}
    assert labels == {"model (tiny-random-draft)", "eagle3 (trained)", "mtp (trained)", "ngram"}
    for gain in gains:
        assert gain.exact_arm.startswith("exact-by-drafter[") and gain.k == 10 and gain.n_units == 2
        assert gain.exact_arm.split("[")[1] == gain.arm.split("[")[1]  # paired with exact of the same drafter
    assert len(gains) == 4 * 4
    summary = cli("summary", str(out), "--wide")
    assert summary.returncode == 0 and "relaxation by drafter" in summary.stdout
    # the suite's analytic profile prices the head arms with the heads' own rooflines (read from their checkpoints)
    profiles = choose_profiles(run, ["h100-sxm"]).profiles
    [h100] = [p for p in profiles if p.name == "h100-sxm"]
    assert {costs.model for costs in h100.heads} == {"eagle3(head=trained)", "mtp(head=trained)"}
    for cells in summarize_run(run, profiles):
        for cell in cells.cells:
            assert cell.proxy["h100-sxm"].unpriced is None, (cell.arm, cell.proxy["h100-sxm"].unpriced)
            assert cell.proxy["h100-sxm"].total.value is not None
    # and the relaxation-by-drafter table gives each rule's speed gain over exact on that profile's proxy times
    [priced] = run_drafter_gains(run, summarize_run(run, profiles), profiles).values()
    cells = {cell.arm: cell for cell in run.cells}
    for gain in priced:
        assert gain.proxy_profile == "h100-sxm"
        totals = [sum(sample_proxy(h100, cells[arm], s).total for s in cells[arm].samples)
                  for arm in (gain.exact_arm, gain.arm)]
        assert gain.proxy_gain.value == pytest.approx(totals[0] / totals[1], rel=1e-6)
        assert gain.proxy_gain.low <= gain.proxy_gain.value <= gain.proxy_gain.high
    table = cli("summary", str(out), "--wide", "--profile", "h100-sxm")
    assert table.returncode == 0 and "proxy gain" in table.stdout and "h100-sxm's proxy times" in table.stdout


def test_compare_refuses_an_arm_without_its_trained_head_before_loading(cli, tmp_path):
    result = cli("compare", "--suite", "drafters", "--target", "tiny-random-draft", "--draft", "tiny-random-target",
                 "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--limit", "1", "--max-new-tokens", "12",
                 "--report-format", "none", "--out", str(tmp_path / "run"))
    assert_one_line_error(result, "arm 'exact-by-drafter[drafter=eagle3(head=trained)]'",
                          "no trained head for target 'tiny-random-draft'")
    assert not (tmp_path / "run").exists()  # nothing loaded, nothing stored


@pytest.mark.parametrize("layer_types", [["linear_attention", "full_attention"], ["mamba", "attention"]])
def test_a_target_with_recurrent_layers_is_refused_before_loading(layer_types):
    """A hybrid target's recurrent state cannot be cut back after a rejected draft, as the KV cache is."""
    from types import SimpleNamespace

    from relaxbench.decoders import check_truncatable_cache
    from relaxbench.errors import ConfigError

    nested = SimpleNamespace(architectures=["Qwen3_5ForConditionalGeneration"],
                             text_config=SimpleNamespace(layer_types=layer_types))
    with pytest.raises(ConfigError, match=f"{layer_types[0]} layers.*--engine vllm"):
        check_truncatable_cache("Qwen/Qwen3.5-27B", nested)
    check_truncatable_cache("plain", SimpleNamespace(layer_types=["full_attention", "sliding_attention"]))


def test_a_head_trained_again_starts_a_new_run(tmp_path, monkeypatch):
    """``head=trained`` names whatever head is cached now: the card of the head enters the run key, so training it
    again (other weights) starts a new run instead of resuming one drafted by the old head."""
    from relaxbench.harness.plan import build_arms, run_key
    from relaxbench.paths import trained_head_dir

    monkeypatch.setenv("RELAXBENCH_CACHE", str(tmp_path))
    suite = drafters_suite()
    before = run_key(suite, build_arms(suite), [])
    card = trained_head_dir(suite.target, "eagle3") / "card.json"
    card.parent.mkdir(parents=True)
    card.write_text('{"trained_at": "2026-12-06T18:00:00Z"}')
    first = run_key(suite, build_arms(suite), [])
    card.write_text('{"trained_at": "2026-12-06T19:00:00Z"}')
    second = run_key(suite, build_arms(suite), [])
    assert len({before, first, second}) == 3
    assert run_key(suite, build_arms(suite), []) == second  # the same head: the same run, resumed


@pytest.mark.slow
def test_head_trained_is_found_by_the_targets_name_wherever_its_weights_load_from(cli, tiny_target, monkeypatch):
    """A packaged target loaded in bf16 loads from a half-precision copy in another folder: the trained head is found
    by the name the user gave, as the pre-load check and the run key find it."""
    from relaxbench.decoders import build_drafter
    from relaxbench.methods import DrafterSpec

    trained = cli("drafter", "train", "mtp", "--target", "tiny-random-target", "--steps", "2",
                  "--self-distill-tokens", "0", "--dtype", "float64")
    assert trained.returncode == 0, trained.stderr
    monkeypatch.setattr(tiny_target.model.config, "name_or_path", "/elsewhere/tiny-random-target.bfloat16")
    drafter = build_drafter(DrafterSpec(kind="mtp", knobs={"head": "trained"}), tiny_target, None)
    assert drafter.spec.path.parts[-2:] == ("tiny-random-target", "mtp")
