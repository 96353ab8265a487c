"""The acceptance suites (suites/acceptance.yaml, acceptance-sampling.yaml) validate, plan every arm on the tiny
models with the Spec-Bench and SPEED-Bench fixtures, and run one unit per task through every arm."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.decoders import build_decoder
from relaxbench.harness.plan import build_plan
from relaxbench.harness.runner import SilentProgress, Worker, register_job, run_job
from relaxbench.harness.store import open_store
from relaxbench.harness.suite import SuiteSpec, suite_file_fields, suite_path
from relaxbench.methods import load_method
from relaxbench.policies import POLICIES
from relaxbench.validation import load_yaml

DATA = Path(__file__).parent / "data"
FIXTURES = {"spec-bench": DATA / "spec_bench_questions.jsonl", "speed-bench": DATA / "speed_bench_qualitative.jsonl"}


def suite_fields(name: str) -> dict:
    path = suite_path(name)
    return suite_file_fields(load_yaml(path), str(path))


def tiny_suite(name: str, **changes) -> SuiteSpec:
    fields = suite_fields(name)
    fields.update(target="tiny-random-target", draft="tiny-random-draft", dtype="float64", draft_dtype="float64",
                  data_files={task: str(path) for task, path in FIXTURES.items()}, max_new_tokens=4, warmup=0,
                  **changes)
    return SuiteSpec(**fields)


def test_the_acceptance_suites_run_every_relaxing_family_at_default_knobs():
    greedy, sampling = SuiteSpec(**suite_fields("acceptance")), SuiteSpec(**suite_fields("acceptance-sampling"))
    assert greedy.tasks == sampling.tasks == ("spec-bench", "speed-bench")
    assert greedy.target == "qwen2.5-coder-1.5b-instruct" and greedy.draft == "qwen2.5-coder-0.5b-instruct"
    assert greedy.temperature == 0 and sampling.temperature > 0
    families = set()
    for suite in (greedy, sampling):
        for name in suite.methods:
            method = load_method(name)
            assert not method.sweep, name  # one point each: the default knobs
            families.add(method.policy)
    # every registered rule but AR and the trained judges (whose heads are trained per pair) runs in one of them
    # (an engine's own arms, registered with the vLLM engine, are not rules of the transformers engine)
    from relaxbench.commands.listing import listed

    trained = {"autojudge", "judge-decoding"}
    assert families == set(dict(listed(POLICIES))) - {"none"} - trained


@pytest.mark.parametrize("name", ["acceptance", "acceptance-sampling"])
def test_the_acceptance_suites_plan_and_run_on_the_tiny_models(name: str, tmp_path: Path, tiny_target, tiny_draft):
    plan = build_plan(tiny_suite(name, limits={"spec-bench": 6, "speed-bench": 3}))
    assert [job.name for job in plan.jobs] == ["spec-bench", "speed-bench"]
    spec_bench, speed_bench = plan.jobs
    assert Counter(i.category for i in spec_bench.items) == Counter(
        ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"])
    assert [i.category for i in speed_bench.items] == ["coding", "multilingual", "roleplay"]
    assert any("speed-bench: 4 of 10 rows hold no prompt" in note for note in plan.notes())
    for arm in plan.arms:
        decoder = build_decoder(arm.method, tiny_target, tiny_draft, spec_bench.decode_config(arm), "tiny-random-draft")
        assert decoder.config.k == arm.k
    jobs = build_plan(tiny_suite(name, limits={}, limit=1)).jobs  # one unit per task through every arm
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
    assert set(summaries) == {"spec-bench", "speed-bench"}
    for task, summary in summaries.items():
        assert len(summary.cells) == len(plan.arms), task
        for cell in summary.cells:
            assert cell.score is not None, (task, cell.arm)
    for cell in load_run(tmp_path).cells:
        assert {s.category for s in cell.samples} == {"mt_bench" if cell.task == "spec-bench" else "coding"}
