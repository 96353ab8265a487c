"""The vLLM engine without vLLM: the adapter's batch handling replayed against relaxbench's own loop, the run key,
the records, the mapping of drafters, and every refusal (one line, exit 2, before anything starts).

* replay: blocks recorded in the transformers engine (a recording policy around the real one), laid out as vLLM
  lays out a batch, read back by the adapter's ``engine_batch`` and decided at once: the same verdicts;
* the run key of a transformers run is what it was (engine and concurrency enter only away from their default);
* the worker's round records: the first token from prefill, the last step cut where the output ends.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from relaxbench.decoders import build_decoder
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.harness.suite import ADDED_KEY_FIELDS, VOLATILE_FIELDS, SuiteSpec
from relaxbench.integrations.vllm_batch import engine_batch, flatten, output_tokens
from relaxbench.integrations.vllm_rules import RuleRequest, check_rule, speculative_config
from relaxbench.integrations.vllm_worker import error_line, trim_rounds, verify_steps
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.ops.sampling import BatchSampling, SamplingParams
from relaxbench.policies import POLICIES, Batch, Block, make_policy
from tests.conftest import assert_one_line_error, run_cli
from tests.test_losslessness import random_prompts

DATA = "tests/data/tiny_tasks.jsonl"


@pytest.fixture
def native():
    """The vLLM engine's ``native`` rule, registered as ``compare --engine vllm`` registers it, and unregistered
    afterwards: it is no rule of the transformers engine, so the rest of the suite must not see it."""
    from relaxbench.integrations.vllm_native import register_native

    register_native()  # imported and unregistered by an earlier test: register it again
    yield
    POLICIES._items.pop("native", None)
    POLICIES._items.pop("fly-native", None)


class Recorder:
    """Wraps a policy: records every batch (of one request) the engine decided and the verdict."""

    def __init__(self, policy):
        self.policy, self.seen = policy, []

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def decide(self, batch):
        verdict = self.policy.decide(batch)
        self.seen.append((batch, verdict.to_host()[0]))
        return verdict


def block_of(batch: Batch) -> Block:
    """The one-request round a recorded batch holds, as the engine handed it over."""
    k = int(batch.num_drafts[0])
    return Block(batch.drafts[0, :k], batch.target.source,
                 None if batch.draft_logits is None else batch.draft_logits.source, batch.sampling.uniform, None,
                 draft_probs_given=None if batch.draft_probs is None else batch.draft_probs.source)


def replayed(seen, sampling: SamplingParams) -> Batch:
    """Every recorded round as ONE vLLM step: flattened as vLLM lays a batch out, read back by ``engine_batch``,
    with the uniforms each round drew."""
    flat = flatten([block_of(b) for b, _ in seen])
    width = max(int(b.num_drafts[0]) for b, _ in seen)
    accept_u = torch.zeros(len(seen), width, dtype=seen[0][0].accept_u.dtype)
    for i, (b, _) in enumerate(seen):
        accept_u[i, : b.accept_u.shape[1]] = b.accept_u[0]
    draw_u = torch.cat([b.draw_u for b, _ in seen])
    return engine_batch(flat["num_draft_tokens"], flat["draft_token_ids"], flat["target_logits_indices"],
                        flat["bonus_logits_indices"], flat["logits"], flat["draft_probs"],
                        BatchSampling.of([sampling] * len(seen)), accept_u, draw_u)


REPLAYED = [("exact", SamplingParams(), "model"), ("fly", SamplingParams(), "model"),
            ("typical-greedy", SamplingParams(), "ngram"),
            ("speculative-sampling", SamplingParams(0.8, 20, 0.95), "model"),
            ("fly", SamplingParams(1.0), "ngram"), ("native", SamplingParams(1.0), "ngram")]


@pytest.mark.parametrize("name,sampling,drafter", REPLAYED, ids=[f"{n}-{d}-T{s.temperature}" for n, s, d in REPLAYED])
def test_adapter_replays_the_transformers_engine_verdicts(name, sampling, drafter, tiny_target, tiny_draft, native):
    """Every round the transformers engine decided (one request each), decided again as one vLLM batch of all of
    them (mixed k, some 0): the same verdicts, and the output rows in vLLM's layout."""
    method = MethodSpec(name=name, policy=name, drafter=DrafterSpec(kind=drafter))
    decoder = build_decoder(method, tiny_target, tiny_draft, DecodeConfig(k=4, max_new_tokens=24, sampling=sampling))
    recorder = Recorder(decoder.policy)
    decoder.policy = recorder
    for prompt in random_prompts(3, 200, seed=7):
        decoder.generate(prompt, seed=11)
    seen = recorder.seen
    assert len(seen) >= 8 and any(int(b.num_drafts[0]) for b, _ in seen)
    batch = replayed(seen, sampling)
    for i, (b, _) in enumerate(seen):
        k = int(b.num_drafts[0])
        assert torch.equal(batch.drafts[i, :k], b.drafts[0, :k])
        assert torch.equal(batch.target.source[batch.target.index[i, : k + 1]], b.target.source.float())
    fresh = make_policy(name)
    verdict = fresh.decide(batch)
    assert verdict.to_host() == [outcome for _, outcome in seen]
    width = batch.width + 1
    rows = output_tokens(batch, verdict, width, -1).tolist()
    for i, (outcome, row) in enumerate(zip(verdict.to_host(), rows)):
        n = outcome.n_accepted
        assert row[: n + 1] == batch.drafts[i, :n].tolist() + [outcome.next_token]
        assert row[n + 1:] == [-1] * (width - n - 1)


def test_draft_probabilities_come_back_as_the_blocks_distributions(tiny_target, tiny_draft):
    """The engine batch's q is the distribution the engine hands over (the one the drafts were sampled from), row for
    row, whatever the run's truncation (re-applying top-p to a truncated q would cut it further)."""
    sampling = SamplingParams(0.7, 30, 0.9)
    method = MethodSpec(name="ss", policy="speculative-sampling")
    decoder = build_decoder(method, tiny_target, tiny_draft, DecodeConfig(k=3, max_new_tokens=8, sampling=sampling))
    recorder = Recorder(decoder.policy)
    decoder.policy = recorder
    decoder.generate(random_prompts(1, 200, seed=3)[0], seed=5)
    seen = [(b, o) for b, o in recorder.seen if int(b.num_drafts[0])]
    batch = replayed(seen, sampling)
    for i, (b, _) in enumerate(seen):
        k = int(b.num_drafts[0])
        for j in range(k):
            assert torch.allclose(batch.q_at(torch.full((batch.size,), j))[i], b.q_at(torch.tensor([j]))[0], atol=1e-6)


def test_run_key_of_the_transformers_engine_is_unchanged():
    suite = SuiteSpec(target="t", methods=("exact",), tasks=("jsonl",))
    data = suite.model_dump()
    for name in (*VOLATILE_FIELDS, *ADDED_KEY_FIELDS, "engine", "concurrency"):
        data.pop(name)
    assert suite.key_fields() == data  # the key's fields before the engine existed, exactly
    vllm = suite.model_copy(update={"engine": "vllm"})
    assert vllm.key_fields()["engine"] == "vllm"
    assert "concurrency" not in vllm.key_fields()
    assert vllm.model_copy(update={"concurrency": (8,)}).key_fields()["concurrency"] == (8,)


def test_concurrency_is_validated():
    assert SuiteSpec(target="t", methods="exact", tasks="jsonl", concurrency="1,8").concurrency == (1, 8)
    for bad in ("0", "1,1", "x", []):
        with pytest.raises(ConfigError):
            from relaxbench.validation import validate

            validate(SuiteSpec, {"target": "t", "methods": "exact", "tasks": "jsonl", "concurrency": bad}, "test")


def test_engines_follow_the_drafter_duties(native):
    """One engine per (drafter, k, how it drafts): under sampling FLy verifies greedy drafts (its duties), so it
    needs an engine apart from speculative sampling's sampled drafts; under greedy decoding they share one."""
    from relaxbench.harness.plan import Arm
    from relaxbench.integrations.vllm_executor import engine_groups

    def arm(name, policy):
        return Arm(name, MethodSpec(name=name, policy=policy), name, DrafterSpec(kind="model"), 4)

    ar = Arm("ar", MethodSpec(name="ar", policy="none"), "ar", None, 0)
    arms = [ar, arm("fly", "fly"), arm("ss", "speculative-sampling")]
    sampled = engine_groups(arms, SamplingParams(1.0))
    assert [[a.name for a in group] for _, group in sampled] == [["ar"], ["fly"], ["ss"]]
    greedy = engine_groups(arms, SamplingParams())
    assert [[a.name for a in group] for _, group in greedy] == [["ar"], ["fly", "ss"]]


def test_rules_the_engine_cannot_feed_are_refused():
    for name in ("reflective", "judge-decoding"):
        cls = POLICIES.get(name)
        policy = cls.__new__(cls)  # needs only the class's declared needs
        with pytest.raises(ConfigError, match="vllm engine"):
            check_rule(policy)
    check_rule(make_policy("fly"))  # logits and drafts are all it reads


def test_a_span_gated_method_is_refused_by_the_vllm_engine():
    from relaxbench.integrations.vllm_executor import check_ungated

    gated = MethodSpec(name="tkd", policy="relaxed-topk-delta")  # gated to the thinking span by default
    with pytest.raises(ConfigError, match="relaxes only in the thinking span.*relax_in: all") as info:
        check_ungated(gated)
    assert "\n" not in str(info.value)
    check_ungated(gated.model_copy(update={"relax_in": "all"}))  # relaxed everywhere: nothing to track
    check_ungated(MethodSpec(name="fly", policy="fly"))


def test_drafters_map_to_vllm_methods():
    assert speculative_config("ngram", {"max_ngram": 4, "min_ngram": 2}, 5, None) == {
        "method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert speculative_config("model", {}, 3, "/m") == {"method": "draft_model", "num_speculative_tokens": 3,
                                                        "model": "/m", "draft_sample_method": "greedy"}
    assert speculative_config("model", {}, 3, "/m", greedy_drafts=False)["draft_sample_method"] == "probabilistic"
    assert speculative_config("eagle3", {"head": "/head"}, 3, None) == {
        "method": "eagle3", "num_speculative_tokens": 3, "model": "/head", "draft_sample_method": "greedy"}
    with pytest.raises(ConfigError, match="'eagle3' on the vllm engine needs its head checkpoint: --drafter-knob"):
        speculative_config("eagle3", {}, 3, None)
    assert speculative_config("mtp", {}, 2, None) == {"method": "mtp", "num_speculative_tokens": 2}
    with pytest.raises(ConfigError, match="target's own MTP layers .* loads no separate MTP file"):
        speculative_config("mtp", {"head": "/mtp"}, 2, None)
    for kind in ("layerskip", "ngram+lm"):
        with pytest.raises(ConfigError, match="transformers engine"):
            speculative_config(kind, {}, 3, "/m")


def test_mtp_on_vllm_needs_a_target_that_declares_mtp_layers():
    from relaxbench.integrations.vllm_rules import check_mtp_target, declared_mtp_layers

    assert declared_mtp_layers({"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}) == 1
    assert declared_mtp_layers({"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 1}}) == 1
    check_mtp_target("Qwen/Qwen3-Next-80B-A3B-Instruct", {"num_nextn_predict_layers": 1})
    with pytest.raises(ConfigError, match=r"'smollm2-135m-instruct' \(LlamaForCausalLM\) declares none") as info:
        check_mtp_target("smollm2-135m-instruct", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    assert "\n" not in str(info.value)


def test_the_workers_error_line_says_why_vllm_refused_a_value():
    """vLLM's configuration refuses a value with a pydantic ValidationError whose first line only names the config:
    the worker's one line carries the reason (the real refusal: tests/test_generate_engine_args.py)."""
    from pydantic import field_validator
    from pydantic.dataclasses import dataclass

    @dataclass
    class ModelConfig:
        max_model_len: int

        @field_validator("max_model_len")
        @classmethod
        def fits(cls, value: int) -> int:
            if value > 8192:
                raise ValueError(f"User-specified max_model_len ({value}) is greater than 8192\nsee the docs")
            return value

    with pytest.raises(ValueError) as refused:
        ModelConfig(max_model_len=100000)
    assert error_line(refused.value) == "ModelConfig: User-specified max_model_len (100000) is greater than 8192"
    assert error_line(RuntimeError("first line\nsecond")) == "RuntimeError: first line"


def test_rule_request_round_trips():
    rule = RuleRequest(tag="r1", policy="fly", knobs={"theta": 0.3}, log="/tmp/x")
    assert RuleRequest.model_validate(rule.model_dump()) == rule


def test_rounds_start_at_prefill_and_end_with_the_output():
    steps = [{"drafted": 4, "accepted": 4, "relaxed": 1, "emitted": 5, "t_policy": 0.1},
             {"drafted": 4, "accepted": 3, "relaxed": 0, "emitted": 4, "t_policy": 0.1},
             {"drafted": 2, "accepted": 2, "relaxed": 0, "emitted": 3, "t_policy": 0.1}]  # after the end: dropped
    rounds = trim_rounds(list(range(8)), steps, speculative=True)
    assert rounds["emitted"] == [1, 5, 2]  # the prefill token, a full step, a step cut at the end
    assert rounds["accepted"] == [0, 4, 2] and rounds["relaxed"] == [0, 1, 0]
    assert trim_rounds(list(range(3)), [], speculative=False)["emitted"] == [1, 1, 1]
    # steps without drafts anywhere in the batch run vLLM's plain sampler: their tokens are rounds of their own
    assert trim_rounds(list(range(4)), steps[:0], speculative=True)["emitted"] == [1, 1, 1, 1]
    assert verify_steps(steps + [{"drafted": 0, "accepted": 0, "relaxed": 0, "emitted": 1}]) == {
        "drafted": [4, 4, 2], "accepted": [4, 3, 2]}


def test_every_round_field_the_adapter_reports_reaches_the_rounds():
    """A declared per-round fact the adapter logs (a span-gated rule's in-span counts here) travels by name from
    the worker's rounds into the sample's RoundLog; the prefill round, which the adapter never logs, takes the
    field's default."""
    from relaxbench.integrations.vllm_executor import by_round, engine_rounds

    steps = [{"drafted": 3, "accepted": 2, "relaxed": 1, "emitted": 3, "t_policy": 0.1, "emitted_in_span": 2,
              "relaxed_in_span": 1, "extra": 4},
             {"drafted": 3, "accepted": 3, "relaxed": 0, "emitted": 4, "t_policy": 0.1, "emitted_in_span": 0,
              "relaxed_in_span": 0, "extra": 4}]
    columns = trim_rounds(list(range(6)), steps, speculative=True)
    assert columns["emitted_in_span"] == [None, 2, 0] and columns["extra"] == [None, 4, 4]
    rounds = engine_rounds(by_round(columns), "model")
    assert list(rounds.emitted_in_span) == [None, 2, 0] and list(rounds.relaxed_in_span) == [None, 1, 0]
    assert list(rounds.extra) == [0, 4, 4] and list(rounds.emitted) == [1, 3, 2]


def test_sample_rows_keep_the_engine_columns(tmp_path):
    from relaxbench.harness.store import SampleRow, Store
    from tests.store_query import rows

    Store(tmp_path / "results.sqlite").close()
    columns = {r["name"] for r in rows(tmp_path / "results.sqlite", "PRAGMA table_info(samples)")}
    names = {"time_to_first_token", "time_per_output_token", "concurrency", "engine_metrics"}
    assert names <= columns and names <= {f.name for f in dataclasses.fields(SampleRow)}


# ---------------------------------------------------------------------------------------- refusals (CLI)

COMPARE = ["compare", "--engine", "vllm", "--target", "tiny-random-target", "--tasks", "jsonl", "--data-file",
           f"jsonl={DATA}", "--max-new-tokens", "4", "--report-format", "none"]


def test_missing_vllm_environment_is_one_line(tmp_path):
    env = {"RELAXBENCH_VLLM_PYTHON": str(tmp_path / "nowhere" / "python")}
    result = run_cli(*COMPARE, "--draft", "ngram", "--methods", "exact", "--out", str(tmp_path), env=env)
    assert_one_line_error(result, "vllm engine is not installed", "make install-vllm")
    result = run_cli("generate", "--engine", "vllm", "--target", "tiny-random-target", "--rule", "none",
                     "--prompt", "hi", env=env)
    assert_one_line_error(result, "make install-vllm")


@pytest.mark.parametrize("flags,fragment", [
    (["--draft", "ngram", "--methods", "reflective"], "vllm engine's verification step"),
    (["--draft", "layerskip", "--methods", "exact"], "no counterpart on the vllm engine"),
    (["--draft", "ngram", "--methods", "exact", "--executor", "ray"], "--engine vllm"),
    (["--draft", "mtp", "--methods", "exact-mtp"], "'tiny-random-target' (LlamaForCausalLM) declares none"),
    (["--draft", "eagle3", "--methods", "exact"], "'eagle3' on the vllm engine needs its head checkpoint"),
], ids=["rule", "drafter", "executor", "mtp-without-mtp-layers", "eagle3-without-head"])
@pytest.mark.slow
def test_what_the_engine_cannot_run_is_refused(flags, fragment, tmp_path):
    env = {"RELAXBENCH_VLLM_PYTHON": sys.executable}  # an environment "exists": the refusal comes before it starts
    result = run_cli(*COMPARE, *flags, "--out", str(tmp_path), env=env)
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "results.sqlite").exists()


def test_concurrency_needs_the_vllm_engine(tmp_path):
    result = run_cli("compare", "--target", "tiny-random-target", "--draft", "ngram", "--methods", "exact",
                     "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--concurrency", "4", "--out",
                     str(tmp_path))
    assert_one_line_error(result, "--concurrency", "--engine vllm")


def test_the_vllm_bench_suite_plans_and_passes_the_engines_checks(native):
    """``make bench ENGINE=vllm`` runs suites/default-vllm.yaml: the default suite's pair and tasks, every arm one
    the vLLM engine runs (checked before anything starts)."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.compare import suite_from_args
    from relaxbench.harness.plan import build_plan
    from relaxbench.integrations.vllm_executor import check_plan

    plan = build_plan(suite_from_args(build_parser().parse_args(["compare", "--suite", "default-vllm"])))
    assert (plan.suite.engine, plan.suite.concurrency) == ("vllm", (1, 4))
    assert [arm.method.policy for arm in plan.arms] == ["none", "exact", "native", "fly", "margin-greedy",
                                                         "typical-greedy"]
    check_plan(plan)


def _cell(arm, samples, baseline=False):
    from relaxbench.analysis.records import CellRecord

    return CellRecord(task="t", arm=arm, position=0 if baseline else 1, is_baseline=baseline, method=arm,
                      policy="none" if baseline else "exact", lossless=True, knobs={}, method_spec={}, drafter=None,
                      k=0 if baseline else 4, decode={}, task_spec={}, scorer="agreement", data_fingerprint="x",
                      cell_id=1 if baseline else 2, samples=tuple(samples))


def _sample(item, tokens, seconds, batch, tpot=0.01):
    from relaxbench.decoding.records import Rounds
    from relaxbench.harness.store import SampleRow

    return SampleRow(cell_id=0, session_id=1, item_id=item, item_index=0, turn=0, repeat=0, category=None,
                     created_at="", prompt_ids=(1,), output_ids=tuple(range(tokens)), output_text="",
                     stop_reason="length",
                     n_prompt_tokens=1, n_output_tokens=tokens, n_rounds=tokens, n_drafted=0, n_accepted=0,
                     n_relaxed=0, time_total=seconds, time_prefill=0.1, time_draft=0.0, time_verify=0.0,
                     time_policy=0.0, rounds=Rounds.of(drafted=(), accepted=(), relaxed=(), emitted=()), score=None,
                     passed=None,
                     score_details={}, matches_baseline=None, divergence=None, time_per_output_token=tpot,
                     engine_metrics={"batch": batch}, sample_id=hash((item, seconds)) % 10 ** 6)


def test_speed_against_concurrency_pairs_against_ar_at_the_same_concurrency(tmp_path):
    from relaxbench.analysis.concurrency import concurrency_points
    from relaxbench.analysis.records import RunRecord
    from relaxbench.report.concurrency import concurrency_figure, concurrency_tables

    def run(level, ar_seconds, arm_seconds, wall):
        ar_batch, arm_batch = {"id": f"a{level}", "wall": wall}, {"id": f"b{level}", "wall": wall / 2}
        cells = (_cell("ar", [_sample(i, 10, ar_seconds, ar_batch) for i in "xy"], baseline=True),
                 _cell("exact", [_sample(i, 10, arm_seconds, arm_batch) for i in "xy"]))
        return RunRecord(level, f"k{level}", "", "", "t", None, {"concurrency": [level]}, cells, ())

    points = concurrency_points([run(1, 2.0, 1.0, 4.0), run(8, 1.0, 1.0, 1.0)])
    by = {(p.arm, p.concurrency): p for p in points}
    assert by[("ar", 1)].tokens_per_second == 20 / 4.0  # one batch of 20 tokens in 4 s (counted once)
    assert by[("exact", 1)].tokens_per_second == 20 / 2.0
    assert by[("exact", 1)].speedup.value == pytest.approx(2.0)  # against AR at concurrency 1
    assert by[("exact", 8)].speedup.value == pytest.approx(1.0)  # against AR at concurrency 8, not 1
    tables = concurrency_tables(points)
    assert [row.key for row in tables[0].rows] == ["ar", "ar", "exact", "exact"]
    concurrency_figure(points, "t").savefig(tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_bench_engines_prints_its_figures_and_fails_on_a_missed_target(capsys):
    """``relaxbench bench engines``' verdicts from its lines (no vLLM needed): the adapter's throughput against the
    native sampler's at concurrency 8 (median of the per-repeat ratios) and the policy's share of the step."""
    from relaxbench.benchmarks.engines import Line
    from relaxbench.commands.bench.engines import print_results

    native = Line("vllm", "native exact", 8, [60.0, 62.0], [0.0, 0.0])
    lines = [Line("transformers", "ar", 1, [20.0]), native, Line("vllm", "adapter exact", 8, [61.0, 63.0],
                                                                    [0.010, 0.012])]
    assert print_results(lines)
    out = capsys.readouterr().out
    assert "1.016" in out and "0.011" in out and "1.20%" in out and "NO" not in out
    slow = Line("vllm", "adapter exact", 8, [50.0, 52.0], [0.010, 0.012])
    assert not print_results([native, slow])
    assert "NO" in capsys.readouterr().out


def test_the_vllm_engine_sizes_its_context_for_the_longest_conversation():
    """vLLM's max_model_len (its KV cache is sized for one request of it) covers the longest MT-Bench conversation,
    earlier answers at their full max_new_tokens, plus the answer and a verify block; rounded up, not the model's
    own maximum, and never past it: a conversation the model cannot hold is refused in one line."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.compare import suite_from_args
    from relaxbench.harness.plan import build_plan
    from relaxbench.integrations.vllm_executor import MODEL_LEN_STEP, EngineTarget, config_context, required_model_len
    from relaxbench.models.convert import materialize
    from relaxbench.models.load import load_tokenizer
    from relaxbench.models.resolve import resolve_model

    plan = build_plan(suite_from_args(build_parser().parse_args(
        ["compare", "--engine", "vllm", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods",
         "exact", "--tasks", "mt-bench", "--limit", "3", "--override-task-sampling", "--max-new-tokens", "64"])))
    job = plan.jobs[0]
    target = EngineTarget("tiny-random-target", None, "", load_tokenizer("tiny-random-target", quiet=True), "float32")
    second = max(len(job.source.encode(target, item, 1, [""], 64)) for item in job.items)
    floor = second + 64 + 64 + max(arm.k for arm in job.arms) + 1  # turn 2's prompt, answer 1, answer 2, a block
    need = required_model_len(job, target)
    assert need % MODEL_LEN_STEP == 0 and floor <= need < floor + 64 + MODEL_LEN_STEP
    # at most the model's own context, and a conversation that cannot fit it is one line before vLLM starts
    assert required_model_len(job, dataclasses.replace(target, context=floor)) == floor
    assert required_model_len(job, dataclasses.replace(target, context=need + 1000)) == need
    with pytest.raises(ConfigError, match=r"task 'mt-bench' item .* turn 2: the conversation so far .* need "
                                          rf"{floor} positions, over the target's context of {floor - 1} "):
        required_model_len(job, dataclasses.replace(target, context=floor - 1))
    model_dir = materialize(resolve_model("tiny-random-target"), quiet=True)
    assert config_context(model_dir) == 4096  # the tiny model's config


def test_the_engines_own_arm_is_not_listed_among_the_rules(native):
    from relaxbench.commands.listing import listed, markdown

    assert "native" in POLICIES and "native" not in dict(listed(POLICIES))
    assert "`native`" not in markdown("rules")
