"""lm-eval tasks inside ``relaxbench compare`` (``--tasks lm_eval:NAME``) on the tiny models: per-sample scores in
the store equal lm-eval's own, Δ vs AR comes from the store, target-alone (likelihood) tasks, resumption, one-line
errors, and HumanEval's pass@1 scored in the sandbox."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from relaxbench.cli import main
from relaxbench.harness.store import SampleRow
from tests.conftest import CliResult, assert_one_line_error
from tests.store_query import rows, sample_rows

TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]
TASKS = "lm_eval:relaxbench_arith,lm_eval:relaxbench_mc"
ARITH, MC = "lm_eval:relaxbench_arith", "lm_eval:relaxbench_mc"


def compare_args(out: Path) -> list[str]:
    return ["compare", *TINY, "--methods", "exact", "--tasks", TASKS, "--limit", "3", "--out", str(out)]


def samples(db: Path) -> dict[tuple[str, str, str], SampleRow]:
    return {(task, arm, item): s for (task, arm, item, _, _), s in sample_rows(db).items()}


@pytest.fixture(scope="module")
def lm_eval_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("lm_eval_compare")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(compare_args(out)) == 0
    return out, stdout.getvalue()


def lm_eval_reference(tasks: list[str], limit: int, **options) -> dict:
    """The same documents through lm-eval's own evaluator with ``--model relaxbench`` and method ``none``."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from relaxbench.integrations.lm_eval_tasks import ensure_prepared

    return lm_eval.simple_evaluate(
        model="relaxbench", model_args={"target": "tiny-random-target", "method": "none", "dtype": "float64"},
        tasks=tasks, limit=limit, log_samples=True, device="cpu", **options,
        task_manager=TaskManager(include_path=str(ensure_prepared(humaneval=False)), include_defaults=False))


def test_generation_task_scores_equal_lm_evals_own(lm_eval_run, tiny_target):
    """Every arm's answer is scored by lm-eval's filters and metric; AR's answers, prompts and scores are what
    lm-eval's own evaluator gets with ``--model relaxbench,method=none``; the lossless arm reproduces AR."""
    from relaxbench.integrations.lm_eval import RelaxbenchLM

    out, _ = lm_eval_run
    db = out / "results.sqlite"
    cells = rows(db, "SELECT * FROM cells ORDER BY task, position")
    assert [(c["task"], c["arm"]) for c in cells] == [(ARITH, "ar"), (ARITH, "exact"), (MC, "ar"), (MC, "exact")]
    arith_cell = json.loads(cells[0]["task_json"])
    assert arith_cell["lm_eval"]["primary_metric"] == "exact_match,first-number"
    assert json.loads(cells[0]["decode_json"])["stop_strings"] == ["\n", "Question:"]  # the task's own `until`
    stored = samples(db)
    reference = lm_eval_reference(["relaxbench_arith"], 3)
    ref = {str(s["doc_id"]): s for s in reference["samples"]["relaxbench_arith"]}
    assert sorted(ref) == ["0", "1", "2"]
    lm = RelaxbenchLM.from_models(tiny_target, method="none")  # the session's copy: read only
    for doc_id, sample in ref.items():
        ar, exact = stored[(ARITH, "ar", doc_id)], stored[(ARITH, "exact", doc_id)]
        context, gen_kwargs = sample["arguments"][0]
        assert list(ar.prompt_ids) == lm.encode_context(context, gen_kwargs["max_gen_toks"])
        assert ar.output_text == sample["resps"][0][0]
        details = ar.score_details
        assert ar.score == details["exact_match,first-number"] == sample["exact_match"]
        assert details["filtered"]["first-number"] == sample["filtered_resps"][0]
        assert ar.passed == (ar.score == 1.0)
        assert exact.output_ids == ar.output_ids and exact.matches_baseline is True
        assert exact.score == ar.score and exact.n_drafted > 0 and exact.time_total > 0
    assert len(rows(db, "SELECT * FROM machine_profiles")) == 1  # measured once, by the generation task


def test_target_alone_task_is_scored_once_with_lm_evals_likelihoods(lm_eval_run):
    out, _ = lm_eval_run
    stored = samples(out / "results.sqlite")
    mc = {key[2]: s for key, s in stored.items() if key[0] == MC}
    assert {key[1] for key in stored if key[0] == MC} == {"ar"} and sorted(mc) == ["0", "1", "2"]
    reference = {str(s["doc_id"]): s for s in lm_eval_reference(["relaxbench_mc"], 3)["samples"]["relaxbench_mc"]}
    for doc_id, s in mc.items():
        details = s.score_details
        assert s.score == details["acc,none"] == reference[doc_id]["acc"]
        assert details["acc_norm,none"] == reference[doc_id]["acc_norm"]
        assert s.stop_reason == "likelihood" and s.n_output_tokens == 0 and s.time_total > 0
        assert s.time_prefill == s.time_total and s.counters.rounds == 0


def test_summary_reports_delta_from_the_store(lm_eval_run, tmp_path):
    """Δ vs AR and McNemar are computed from the stored lm-eval scores: changing one stored score changes them."""
    from relaxbench.analysis import load_run, summarize_run

    out, printed = lm_eval_run
    for fragment in ("Δ vs AR", ARITH, MC, "exact", "by definition", "no speed figures"):
        assert fragment in printed
    copy = tmp_path / "results.sqlite"
    shutil.copy(out / "results.sqlite", copy)
    summaries = {s.task: s for s in summarize_run(load_run(copy))}
    arith, mc = summaries[ARITH], summaries[MC]
    assert arith.binary and arith.n_units == 3 and not arith.target_alone
    base_score = arith.baseline.score
    assert arith.cells[1].score == base_score and arith.cells[1].score_delta.value == 0.0
    assert arith.cells[1].mcnemar_p == 1.0 and arith.cells[1].speedup_total.value > 0
    assert mc.target_alone and mc.n_units == 3
    assert mc.cells[1].by_definition and mc.cells[1].score == mc.baseline.score
    assert mc.cells[1].score_delta.value == 0.0 and mc.cells[1].speedup_total.value is None
    assert mc.baseline.speedup_total.value is None and mc.baseline.tokens_per_second is None

    # flip one stored score of the method arm: the paired statistics follow the store
    conn = sqlite3.connect(copy)
    with conn:
        conn.execute("UPDATE samples SET score = 1 - score, passed = 1 - passed WHERE item_id = '1' AND cell_id = "
                     "(SELECT cell_id FROM cells WHERE task = ? AND arm = 'exact')", (ARITH,))
    conn.close()
    flipped = {s.task: s for s in summarize_run(load_run(copy))}[ARITH].cells[1]
    ar_passed = rows(copy, "SELECT passed FROM samples JOIN cells USING (cell_id) WHERE task = ? AND arm = 'ar' "
                           "AND item_id = '1'", (ARITH,))[0]["passed"]
    assert flipped.score_delta.value == pytest.approx((1 if ar_passed == 0 else -1) / 3)
    assert flipped.discordant == ((0, 1) if ar_passed == 0 else (1, 0))


def test_chat_template_and_fewshot_prompts_equal_lm_evals():
    """--apply-chat-template and --num-fewshot build the prompts lm-eval's own --apply_chat_template --num_fewshot
    builds (same few-shot examples, as conversation turns); they change the run's identity."""
    from relaxbench.harness.plan import build_plan
    from relaxbench.harness.suite import SuiteSpec

    suite = SuiteSpec(target="tiny-random-target", draft="ngram", methods=("exact",), tasks=(ARITH,), limit=2,
                      num_fewshot=2, apply_chat_template=True)
    plan = build_plan(suite)
    [job] = plan.jobs
    reference = lm_eval_reference(["relaxbench_arith"], 2, num_fewshot=2, apply_chat_template=True,
                                  fewshot_as_multiturn=True)
    expected = {str(s["doc_id"]): s["arguments"][0][0] for s in reference["samples"]["relaxbench_arith"]}
    assert {item.item_id: item.turns[0] for item in job.items} == expected
    assert all(prompt.startswith("<|im_start|>") and prompt.count("<|im_start|>user") == 3
               for prompt in expected.values())  # two few-shot turns and the question
    plain = build_plan(SuiteSpec(target="tiny-random-target", draft="ngram", methods=("exact",), tasks=(ARITH,)))
    assert plain.key != plan.key and plain.jobs[0].items[0].turns[0].startswith("Question:")


def test_rerun_resumes_lm_eval_tasks(lm_eval_run):
    out, _ = lm_eval_run
    db = out / "results.sqlite"
    before = rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(compare_args(out)) == 0
    assert rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id") == before
    sessions = rows(db, "SELECT * FROM environment ORDER BY session_id")
    assert len(rows(db, "SELECT * FROM runs")) == 1  # the same run key: lm-eval's task records are stable
    assert len(sessions) == 2 and sessions[1]["n_started"] == 0


@pytest.mark.slow
def test_missing_lm_eval_task_is_one_line(cli, tmp_path):
    result = cli("compare", *TINY, "--methods", "exact", "--tasks", "lm_eval:relaxbench_arithmetic",
                 "--out", str(tmp_path))
    assert_one_line_error(result, "unknown lm-eval task lm_eval:relaxbench_arithmetic",
                          "did you mean 'relaxbench_arith'")
    assert not (tmp_path / "results.sqlite").exists()


UNSUPPORTED = {
    "corpus_metric": ("metric_list:\n  - metric: bleu\n    aggregation: bleu\n    higher_is_better: true\n",
                      "none of its metrics (bleu) is a per-sample mean"),
    "runs_code": ("unsafe_code: true\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n",
                  "relaxbench runs generated code only in its sandbox"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_lm_eval_tasks_are_one_line(name, tmp_path, capsys):
    """Tasks compare cannot pair sample by sample, or that would run code in-process, fail before any model
    loads (a user's task folder, given with --include-path)."""
    extra, message = UNSUPPORTED[name]
    (tmp_path / "data.jsonl").write_text('{"q": "1+1", "a": "2"}\n')
    (tmp_path / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / 'data.jsonl'}\n"
        "output_type: generate_until\ntest_split: test\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n" + extra)
    code = main(["compare", *TINY, "--methods", "exact", "--tasks", f"lm_eval:{name}", "--include-path",
                 str(tmp_path), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert_one_line_error(CliResult(code, captured.out, captured.err), f"lm_eval:{name}", message)


# --------------------------------------------------------------------------------------------------- HumanEval

# A completion of HumanEval/0 (has_close_elements), written for this test. It also fails if it can see the
# harness's environment, so passing shows it ran in the sandbox's scrubbed process, not in lm-eval's.
CORRECT = """    import os
    assert "RELAXBENCH_HARNESS_MARKER" not in os.environ, "ran inside the harness process"
    ordered = sorted(numbers)
    return any(b - a < threshold for a, b in zip(ordered, ordered[1:]))
"""
WRONG = "    return len(numbers) > 1\n"


@pytest.mark.slow
def test_humaneval_lm_eval_task_is_scored_in_the_sandbox(monkeypatch):
    """pass@1 of lm_eval:relaxbench_humaneval through lm-eval's process_results: a correct completion passes (in a
    process without the harness's environment), a wrong one fails; both through compare's scoring path."""
    from relaxbench.integrations.lm_eval_source import load_lm_eval_tasks

    monkeypatch.setenv("RELAXBENCH_HARNESS_MARKER", "1")
    [task] = load_lm_eval_tasks(["lm_eval:relaxbench_humaneval"], limit=1)["lm_eval:relaxbench_humaneval"]
    assert task.primary == "pass@1,none" and not task.likelihood_only
    [item] = task.items
    assert item.item_id == "0" and "def has_close_elements" in item.turns[0]
    passed, failed = task.score_generation(item, CORRECT), task.score_generation(item, WRONG)
    assert (passed.value, passed.passed) == (1.0, True)
    assert (failed.value, failed.passed) == (0.0, False)
    assert failed.details["filtered"]["none"] == WRONG
