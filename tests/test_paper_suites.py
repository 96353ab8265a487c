"""The shipped paper suites (suites/fly-paper.yaml, xia-paper.yaml, xia-paper-8b.yaml) run end to end on the tiny
models with the offline fixtures: the full plan builds (every arm of the grid, every task with its fixture), every
arm's decoder builds, and one unit of every task is generated and scored by AR and the first point of every method,
so a broken suite, task or scorer fails here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.decoders import build_decoder
from relaxbench.harness.plan import build_plan
from relaxbench.harness.runner import SilentProgress, Worker, register_job, run_job
from relaxbench.harness.store import open_store
from relaxbench.harness.suite import SuiteSpec, suite_file_fields, suite_path
from relaxbench.validation import load_yaml

PAPERS = Path(__file__).parent / "data" / "papers"
FIXTURES = {
    "gsm8k-cot-llama": "gsm8k", "mbpp-plus": "mbpp_plus", "mbpp-plus-fly": "mbpp_plus", "mgsm-native-cot-de": "mgsm_de",
    "mgsm-native-cot-fr": "mgsm_fr", "mgsm-native-cot-th": "mgsm_th", "niah-multivalue": "niah",
    "acp-prog-gen": "acp_prog_gen", "aime-2024": "aime_2024", "gpqa-diamond": "gpqa_diamond",
    "livecodebench-v6": "livecodebench_v6",
}
EXPECTED = {  # suite: (arms including AR, tasks, sampled, repeats per task)
    "fly-paper": (3, 7, False, {}),
    "xia-paper": (97, 3, True, {"aime-2024": 48, "gpqa-diamond": 6, "livecodebench-v6": 6}),
    "xia-paper-8b": (97, 3, True, {"aime-2024": 48, "gpqa-diamond": 6, "livecodebench-v6": 6}),
}


def tiny_suite(name: str, **changes) -> SuiteSpec:
    """The shipped suite with the tiny pair, the fixtures as data files and one item per task."""
    path = suite_path(name)
    fields = suite_file_fields(load_yaml(path), str(path))
    fields.update(target="tiny-random-target", draft="tiny-random-draft", dtype="float64", draft_dtype="float64",
                  data_files={task: str(PAPERS / f"{FIXTURES[task]}.jsonl") for task in fields["tasks"]}, limit=1,
                  max_new_tokens=8, warmup=0, **changes)
    if fields.get("thinking_budget"):  # Xia et al.'s forcing, scaled down: at 4 tokens, a one-byte closing text
        fields.update(thinking_budget=4, thinking_budget_text="!")
    return SuiteSpec(**fields)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.slow
def test_paper_suite_runs_on_the_tiny_models(name: str, tmp_path: Path, tiny_target, tiny_draft):
    n_arms, n_tasks, sampled, repeats = EXPECTED[name]
    plan = build_plan(tiny_suite(name))
    assert len(plan.arms) == n_arms and len(plan.jobs) == n_tasks
    for job in plan.jobs:
        assert job.sampling.greedy is not sampled
        assert job.repeats == repeats.get(job.name, 1)
        assert len(job.items) == 1
    job = plan.jobs[0]
    for arm in plan.arms:  # every point of the grid is a decoder this pair can run
        decoder = build_decoder(arm.method, tiny_target, tiny_draft, job.decode_config(arm), "tiny-random-draft")
        assert decoder.config.k == arm.k
    first_points: dict[str, object] = {}
    for arm in plan.arms:
        first_points.setdefault(arm.base_method, arm)
    arms = tuple(first_points.values())
    jobs = [replace(j, arms=arms, repeats=1) for j in plan.jobs]
    for job in jobs:  # the tiny models' tokenizer makes a long few-shot prompt (FLy's 8-shot GSM8K) outgrow their
        job.source.truncates_prompts = True  # 4,096 positions: keep its last tokens, as truncate_prompt does
    store = open_store(tmp_path)
    try:
        run_id = store.open_run(plan.key, plan.suite.target, plan.suite.draft, plan.suite.record())
        session = store.start_session(run_id, {"command": "test"})
        worker = Worker(tiny_target, tiny_draft, "tiny-random-draft", store, session, warmup=0)
        for job in jobs:
            run_job(worker, job, register_job(store, run_id, job, SilentProgress()), SilentProgress())
        store.finish_session(session, "finished")
    finally:
        store.close()
    summaries = {s.task: s for s in summarize_run(load_run(tmp_path))}
    assert set(summaries) == {j.name for j in plan.jobs}
    for task, summary in summaries.items():
        assert summary.n_units == 1 and len(summary.cells) == len(arms), task
        for cell in summary.cells:
            assert cell.score is not None and cell.n_samples == 1, (task, cell.arm)
    run = load_run(tmp_path)
    for cell in run.cells:
        [sample] = cell.samples
        assert "why" in sample.score_details, (cell.task, cell.arm, sample.score_details)
        assert sample.seed is not None
        # the xia suites force the end of thinking at the (scaled-down) budget: the tiny model never writes one
        assert sample.forced_tokens in (None, 1) and (sample.forced_tokens == 1) is (
            plan.suite.thinking_budget > 0 and (sample.stop_reason == "length" or sample.forced_tokens == 1))


def test_the_xia_suites_force_the_end_of_thinking_as_xia_et_al_do():
    from relaxbench.decoding.budget import XIA_CLOSING_TEXT

    for name in ("xia-paper", "xia-paper-8b"):
        path = suite_path(name)
        suite = SuiteSpec(**suite_file_fields(load_yaml(path), str(path)))
        assert suite.thinking_budget == 32768 and suite.thinking_budget_text is None
    assert XIA_CLOSING_TEXT.endswith("directly now.\n</think>\n\n")
    for name in ("default", "full", "fly-paper"):
        path = suite_path(name)
        assert not suite_file_fields(load_yaml(path), str(path)).get("thinking_budget")


def test_paper_suites_are_listed(capsys):
    from relaxbench.cli import main

    assert main(["list", "suites"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED:
        assert name in out


def test_the_papers_drafter_suites_declare_their_dedicated_drafters():
    """xia-paper-mtp: Xia et al.'s grid with the target's native MTP layer drafting every arm, on vLLM (whose mtp
    method it maps to); fly-paper-eagle3: FLy's grid with the EAGLE-3 authors' head as a third arm."""
    from relaxbench.harness.plan import build_arms
    from relaxbench.integrations.vllm_rules import check_mtp_target, declared_mtp_layers, speculative_config

    path = suite_path("xia-paper-mtp")
    xia = SuiteSpec(**suite_file_fields(load_yaml(path), str(path)))
    assert (xia.target, xia.draft, xia.engine) == ("Qwen/Qwen3.5-27B", "mtp", "vllm")
    arms = build_arms(xia)
    assert len(arms) == EXPECTED["xia-paper"][0]
    assert {arm.drafter.kind for arm in arms[1:]} == {"mtp"} and {arm.k for arm in arms[1:]} == {3, 5, 10, 20}
    assert speculative_config("mtp", {}, 5, None) == {"method": "mtp", "num_speculative_tokens": 5}
    qwen35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"mtp_num_hidden_layers": 1}}
    assert declared_mtp_layers(qwen35) == 1
    check_mtp_target(xia.target, qwen35)  # the target's own MTP layer: accepted before any engine starts

    path = suite_path("fly-paper-eagle3")
    fly = SuiteSpec(**suite_file_fields(load_yaml(path), str(path)))
    arms = {arm.name: arm for arm in build_arms(fly)}
    assert set(arms) == {"ar", "exact-k15", "fly", "eagle3-llama3.3-70b"}
    eagle = arms["eagle3-llama3.3-70b"]
    assert (eagle.method.policy, eagle.drafter.kind, eagle.k) == ("exact", "eagle3", 7)
    assert eagle.drafter.knobs == {"head": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}
    assert fly.tasks == SuiteSpec(**suite_file_fields(load_yaml(suite_path("fly-paper")), "fly-paper")).tasks
