"""Spec-Bench's MT-Bench questions graded by an LLM grader: FastChat's single-answer grading of both turns, chosen by
the row's own MT-Bench category (Spec-Bench's item category is its subtask), the other five subtasks outside the
protocol — no request built, skipped by the analysis (not scored 0, not counted as failed calls) and counted apart
in the grader table, its notice and compare's grading line."""

from __future__ import annotations

from pathlib import Path

import pytest

import relaxbench.integrations.endpoint_grader  # noqa: F401  (registers the endpoint grader)
from relaxbench.analysis import load_run, summarize_run
from relaxbench.analysis.notices import GraderQuality, task_notices
from relaxbench.cli import main
from relaxbench.data.formats import FORMATS
from relaxbench.grading.llm_grader import UNPARSEABLE
from relaxbench.report.tables import grader_table, measured_by
from relaxbench.scoring import make_scorer
from relaxbench.tasks import load_task
from relaxbench.tasks.yaml_tasks import load_items
from tests.store_query import rows
from tests.test_grader import KEY_VAR, MODEL, completion, server_factory  # noqa: F401  (a fixture)

DATA = Path(__file__).parent / "data"
SPEC_BENCH = DATA / "spec_bench_questions.jsonl"  # 3 MT-Bench questions (writing, math, coding) + 2 of each subtask
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]


@pytest.fixture(scope="module")
def items():
    loaded, _ = load_items(load_task("spec-bench"), SPEC_BENCH)
    return {item.item_id: item for item in loaded}


def spec_bench_grader():
    spec = load_task("spec-bench")
    assert spec.grader == "llm-grader"
    return make_scorer(spec.grader, spec.grader_args)


def test_the_mt_bench_questions_are_graded_as_the_mt_bench_task_grades_them(items):
    """A Spec-Bench MT-Bench row gets exactly the request the mt-bench task builds for the same row: the prompt by
    the row's category (math and coding with GPT-4's reference answer), both turns; every other subtask none."""
    grader, mt_bench = spec_bench_grader(), make_scorer("llm-grader")
    grader.check_items(list(items.values()))  # reference answers for 111 (math) and 121 (coding) are found
    as_mt_bench = FORMATS.get("mt-bench")
    expected = {"81": ("single-v1", "single-v1-multi-turn"), "111": ("single-math-v1", "single-math-v1-multi-turn"),
                "121": ("single-math-v1", "single-math-v1-multi-turn")}
    for qid, names in expected.items():
        item = items[qid]
        assert item.category == "mt_bench"
        same = as_mt_bench(dict(item.fields), 0)  # the row as the mt-bench task reads it (category = the row's)
        for turn, name in enumerate(names):
            answers = [f"first answer to {qid}", f"second answer to {qid}"][: turn + 1]
            request = grader.request(item, turn, answers)
            assert request is not None and request.prompt_name == name
            assert request == mt_bench.request(same, turn, answers)
            assert answers[-1] in request.messages[-1]["content"]
        assert grader.request(item, 2, ["a", "b", "c"]) is None  # FastChat grades two turns
    if "<|The Start of Reference Answer|>" not in grader.request(items["111"], 1, ["a", "b"]).messages[-1]["content"]:
        pytest.fail("the math question's second turn is not graded against the reference answer")
    others = [item for item in items.values() if item.category != "mt_bench"]
    assert {item.category for item in others} == {"translation", "summarization", "qa", "math_reasoning", "rag"}
    assert all(grader.request(item, 0, ["an answer"]) is None for item in others)


def test_without_category_arguments_every_item_is_graded(items):
    """The default llm-grader (the mt-bench task's) grades every item by its own category: Spec-Bench's subtask
    names are no MT-Bench category, so they take the general prompt; the arguments are what restricts it."""
    request = make_scorer("llm-grader").request(items["161"], 0, ["The harbour is closed."])
    assert request is not None and request.prompt_name == "single-v1"


def verdict(body: dict) -> str:
    """Scripted verdicts: the writing question's are rated, the math/coding ones (graded against a reference) are
    not parseable, so both kinds of verdict reach the tables."""
    user = body["messages"][-1]["content"]
    if "Reference Answer" in user:
        return "Compared with the reference, it is wrong. Rating: 2"  # no brackets: FastChat's -1
    return "A fair answer. Rating: [[7]]" if "### Assistant A:" not in user else "Weaker. Rating: [[5]]"


def test_compare_grades_the_mt_bench_questions_and_skips_the_other_subtasks(tmp_path: Path, server_factory,
                                                                            monkeypatch, capsys):
    monkeypatch.setenv(KEY_VAR, "k")
    server = server_factory(lambda body, n: (200, completion(verdict(body)), 0.0, {}))
    out = tmp_path / "run"
    code = main(["compare", *TINY, "--methods", "exact", "--tasks", "spec-bench", "--data-file",
                 f"spec-bench={SPEC_BENCH}", "--max-new-tokens", "4", "--out", str(out), "--report-format", "none",
                 "--grader-endpoint", server.url, "--grader-model", MODEL, "--grader-api-key-env", KEY_VAR])
    err = capsys.readouterr().err
    assert code == 0, err
    db = out / "results.sqlite"
    samples = rows(db, "SELECT s.sample_id, s.category, s.turn FROM samples s")
    mt = [s for s in samples if s["category"] == "mt_bench"]
    assert len(mt) == 2 * 3 * 2 and len(samples) - len(mt) == 2 * 10  # (AR, exact) × items × turns
    # only MT-Bench samples were sent to the grader, and every one of them has a verdict
    sent = [body["messages"][-1]["content"] for body in server.bodies()]
    assert sent and all("[Question]" in s or "<|The Start of Assistant A's Conversation with User|>" in s
                        for s in sent)
    linked = {r["sample_id"] for r in rows(db, "SELECT sample_id FROM sample_verdicts")}
    assert linked == {s["sample_id"] for s in mt}
    assert "20 samples outside the tasks' grading protocols (not graded)" in " ".join(err.split())  # rich wraps

    run = load_run(out)
    [summary] = summarize_run(run)
    grader = summary.grader
    assert summary.rated_by_grader and summary.measure == "capability"
    assert (grader.graded, grader.skipped, grader.not_graded) == (12, 20, 0)
    assert grader.graded_categories == ("mt_bench",)
    stored = rows(db, "SELECT v.rating FROM sample_verdicts JOIN verdicts v USING (grader_hash, prompt_hash, "
                      "answer_hash, draw)")  # one per sample and pass, as the summary counts them
    assert grader.unparseable == sum(r["rating"] == UNPARSEABLE for r in stored) > 0
    assert {r["rating"] for r in stored} == {UNPARSEABLE, 7.0, 5.0}
    # capability over the rated MT-Bench units only: the writing question's turns (7 and 5 → 70 and 50 points);
    # the other subtasks have no score (not 0), and their fidelity figures stay in the details
    ar = summary.baseline
    assert ar.capability.score == pytest.approx(60.0 / 100)
    by_category = ar.capability.by_category
    assert by_category["mt_bench"].score == pytest.approx(0.6)
    assert all(by_category[c].score is None for c in ("translation", "summarization", "qa", "math_reasoning", "rag"))
    assert set(ar.capability.details) >= {"exact_match", "rouge_l"}  # agreement with AR, over every unit
    assert ar.n_units == 3 * 2 + 10
    # the counts reach the reader: the grader table, its notice, and what the score is
    table = grader_table(summary)
    cells = dict(zip(table.columns, table.rows[0].cells))
    assert (cells["graded"].text, cells["outside protocol"].text, cells["not graded"].text) == ("12", "20", "0")
    [quality] = [f for f in task_notices(summary, run.cells_of("spec-bench")) if isinstance(f, GraderQuality)]
    assert "graded: 12 samples of mt_bench, 20 samples of the other categories are outside" in quality.words()
    assert quality.level == "warning"  # half the verdicts have no rating
    assert "on mt_bench only (20 samples of the other categories not graded" in measured_by(summary)
