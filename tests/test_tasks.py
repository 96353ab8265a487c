"""Tasks, loaders and scorers: YAML validation, the offline data sets, answer extraction, code scoring, planning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxbench.data import TaskItem
from relaxbench.errors import ConfigError, DataError, UnknownNameError
from relaxbench.harness.suite import SuiteSpec
from relaxbench.scoring import ScoringContext, make_scorer
from relaxbench.scoring.answers import flexible_answer, strict_answer
from relaxbench.scoring.code import build_program, extract_code
from relaxbench.tasks import load_task, task_files
from relaxbench.tasks.yaml_tasks import load_items, render_turn

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"


def test_every_shipped_task_loads():
    assert set(task_files()) >= {"humaneval", "mbpp", "gsm8k", "mt-bench", "jsonl"}
    for name in task_files():
        spec = load_task(name)
        assert spec.name == name and spec.scorer and spec.max_new_tokens > 0


def test_task_yaml_errors(tmp_path: Path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("format: jsonl\nscorer: auto\nstop: [a, b\n")
    with pytest.raises(ConfigError, match=rf"{broken}:\d+: malformed YAML"):
        load_task(str(broken))
    unknown_format = tmp_path / "fmt.yaml"
    unknown_format.write_text("format: jsonnl\nscorer: auto\n")
    with pytest.raises(UnknownNameError, match="did you mean 'jsonl'"):
        load_task(str(unknown_format))
    bad_template = tmp_path / "tpl.yaml"
    bad_template.write_text("format: jsonl\nscorer: auto\nprompt: '{{ prompt '\n")
    with pytest.raises(ConfigError, match="prompt template does not parse"):
        load_task(str(bad_template))
    bad_type = tmp_path / "type.yaml"
    bad_type.write_text("format: jsonl\nscorer: auto\nmax_new_tokens: lots\n")
    with pytest.raises(ConfigError, match="'max_new_tokens' must be a positive integer"):
        load_task(str(bad_type))


def test_jsonl_loader_and_errors(tmp_path: Path):
    items, fingerprint = load_items(load_task("jsonl"), DATA)
    assert [i.item_id for i in items] == ["add", "capital", "lighthouse", "primes"]
    assert items[3].turns[1].startswith("Now name") and items[0].test and items[1].reference == "Paris"
    assert load_items(load_task("jsonl"), DATA, limit=2)[1] == fingerprint  # the whole file's fingerprint
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    with pytest.raises(DataError, match=rf"{bad}:2: malformed JSON"):
        load_items(load_task("jsonl"), bad)
    no_prompt = tmp_path / "noprompt.jsonl"
    no_prompt.write_text('{"question": "x"}\n')
    with pytest.raises(DataError, match="no field 'prompt'"):
        load_items(load_task("jsonl"), no_prompt)


def test_humaneval_offline_and_canonical_solutions_pass():
    task = load_task("humaneval")
    items, _ = load_items(task)
    assert len(items) == 164 and items[0].item_id == "HumanEval/0"
    rows = [json.loads(line) for line in _humaneval_lines(3)]
    scorer = make_scorer("code-exec", {"timeout": 10})
    for row, item in zip(rows, items):
        # a plain completion (the canonical body) and a chat answer with the whole function in a fence both pass
        assert scorer.score(item, row["canonical_solution"], ScoringContext(0)).passed
        fenced = f"Here you go:\n```python\n{row['prompt']}{row['canonical_solution']}```\nDone."
        assert scorer.score(item, fenced, ScoringContext(0)).passed
        failed = scorer.score(item, "    return None\n", ScoringContext(0))
        assert not failed.passed and failed.details["status"] == "error"
    assert "```python" in render_turn(task, items[0], 0)


def _humaneval_lines(n: int) -> list[str]:
    import gzip

    from relaxbench.data.load import package_file

    source = load_task("humaneval").source
    with gzip.open(package_file(source.requirement, source.member), "rt") as f:
        return [next(f) for _ in range(n)]


def test_mt_bench_offline_two_turns_eight_categories():
    items, _ = load_items(load_task("mt-bench"))
    assert len(items) == 80 and all(len(i.turns) == 2 for i in items)
    assert len({i.category for i in items}) == 8


def test_hub_task_fails_fast_with_a_data_file_hint(tmp_path: Path):
    with pytest.raises(DataError, match="--data-file gsm8k=PATH"):
        load_items(load_task("gsm8k"))
    local = tmp_path / "gsm.jsonl"
    local.write_text(json.dumps({"question": "2+2?", "answer": "2 and 2 make 4.\n#### 4"}) + "\n")
    items, _ = load_items(load_task("gsm8k"), local)
    assert items[0].reference == "4"


def test_gsm8k_extraction_strict_and_flexible():
    assert strict_answer("so 3 + 4 = 7\n#### 7") == "7"
    assert strict_answer("The answer is 7.") is None
    assert flexible_answer("First 12, then $1,234.00.") == "1234"
    scorer = make_scorer("gsm8k")
    item = TaskItem("x", ("q",), reference="1234")
    loose = scorer.score(item, "It costs $1,234.", ScoringContext(0))
    assert loose.passed and loose.details["strict_match"] is False and loose.details["flexible_match"] is True
    assert not scorer.score(item, "#### 1000", ScoringContext(0)).passed
    strict = make_scorer("gsm8k", {"primary": "strict"})
    assert not strict.score(item, "It costs $1,234.", ScoringContext(0)).passed


def test_code_extraction():
    text = "Sure.\n```text\nnot code\n```\n```python\ndef f(x):\n    return x\n```\n"
    assert extract_code(text, "f") == "def f(x):\n    return x\n"
    assert extract_code("def g():\n    pass\n") == "def g():\n    pass\n"
    item = TaskItem("t", ("p",), test="def check(c):\n    assert c(2) == 3\n", entry_point="inc",
                    code_prefix="import math\n\ndef inc(x):\n")
    program = build_program(item, "```python\ndef inc(x):\n    return x + 1\n```")
    assert program.startswith("import math") and program.rstrip().endswith("check(inc)")
    assert build_program(item, "    return x + 1\n").startswith("import math\n\ndef inc(x):\n    return x + 1")


def test_agreement_scorer():
    scorer = make_scorer("agreement")
    item = TaskItem("x", ("q",))
    same = scorer.score(item, "the cat sat on the mat", ScoringContext(0, "the cat sat on the mat", lambda: -1.5))
    assert same.value == 1.0 and same.details == {"exact_match": True, "rouge_l": 1.0, "mean_logprob": -1.5}
    symbols = scorer.score(item, "?!", ScoringContext(0, "?!"))  # no alphanumeric token, still identical
    assert symbols.value == 1.0
    other = scorer.score(item, "the cat sat", ScoringContext(0, "the cat sat on the mat"))
    assert other.details["exact_match"] is False and other.value == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_plan_expands_sweeps_and_substitutes_ngram(tmp_path: Path):
    from relaxbench.harness.plan import build_arms

    method = tmp_path / "swept.yaml"
    method.write_text("policy: topk\nk: 3\nsweep:\n  top: [1, 2]\n")
    arms = build_arms(SuiteSpec(target="t", draft="ngram", methods=(str(method), "speculative-sampling"),
                                tasks=("jsonl",)))
    assert [a.name for a in arms] == ["ar", "swept[top=1]", "swept[top=2]", "speculative-sampling"]
    assert arms[1].method.knobs == {"top": 1} and arms[1].base_method == "swept" and arms[1].k == 3
    assert arms[0].drafter is None and arms[0].k == 0
    assert all(a.drafter.kind == "ngram" for a in arms[1:])
    with pytest.raises(ConfigError, match="appears twice"):
        build_arms(SuiteSpec(target="t", draft="d", methods=("exact", "exact"), tasks=("jsonl",)))
    with pytest.raises(ConfigError, match="AR baseline"):
        build_arms(SuiteSpec(target="t", draft="d", methods=("none",), tasks=("jsonl",)))
    method.write_text("policy: exact\nsweep:\n  level: [1, 2]\n")  # knobs are checked when the plan is built
    with pytest.raises(ConfigError, match="rule 'exact': unknown knob 'level'"):
        build_arms(SuiteSpec(target="t", draft="d", methods=(str(method),), tasks=("jsonl",)))


def test_multi_turn_with_prompt_lookup(tmp_path: Path, capsys, tiny_target):
    """Two turns, the second conditioned on the arm's own first answer; --draft ngram loads no draft model."""
    import sqlite3

    from relaxbench.cli import main

    data = tmp_path / "two.jsonl"
    data.write_text(json.dumps({"id": "t", "prompt": ["Say hello hello hello.", "Again, please."]}) + "\n")
    out = tmp_path / "run"
    assert main(["compare", "--target", "tiny-random-target", "--draft", "ngram", "--methods", "exact",
                 "--tasks", "jsonl", "--data-file", f"jsonl={data}", "--max-new-tokens", "8", "--dtype", "float64",
                 "--out", str(out)]) == 0
    conn = sqlite3.connect(out / "results.sqlite")
    samples = conn.execute("SELECT c.arm, s.turn, s.prompt_ids, s.output_text, s.output_ids, c.drafter_json "
                           "FROM samples s JOIN cells c USING (cell_id) ORDER BY c.position, s.turn").fetchall()
    conn.close()
    assert [(arm, turn) for arm, turn, *_ in samples] == [("ar", 0), ("ar", 1), ("exact", 0), ("exact", 1)]
    tokenizer = tiny_target.tokenizer
    second_prompt = tokenizer.decode(json.loads(samples[1][2]))
    assert samples[0][3] in second_prompt and "Again, please." in second_prompt
    assert samples[1][4] == samples[3][4]  # exact reproduces AR on the second turn too
    assert json.loads(samples[2][5])["kind"] == "ngram"
    assert "jsonl" in capsys.readouterr().out


def test_a_lossless_arm_that_differs_from_ar_is_diagnosed(tmp_path: Path, tiny_target):
    """The runner's comparison with AR: a difference of a lossless arm gets the near-tie diagnosis; a relaxed
    arm's difference is only recorded."""
    from relaxbench.harness.plan import build_plan
    from relaxbench.harness.runner import Output, SilentProgress, TaskRun, Worker, register_job
    from relaxbench.harness.store import Store

    plan = build_plan(SuiteSpec(target="tiny-random-target", draft="ngram", methods=("exact",), tasks=("jsonl",),
                                data_files={"jsonl": str(DATA)}, limit=1))
    with Store(tmp_path / "results.sqlite") as store:
        run_id = store.open_run(plan.key, "t", "ngram", {})
        worker = Worker(tiny_target, None, "ngram", store, store.start_session(run_id, {"command": "t"}))
        cells = register_job(store, run_id, plan.jobs[0], SilentProgress())
        task_run = TaskRun(worker, plan.jobs[0], cells, SilentProgress())
        ar_arm, exact_arm = plan.arms
        prompt = tiny_target.tokenizer("hello there")["input_ids"]
        ar = tiny_target.model.generate(torch_tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):]
        reference = ar.tolist()
        other = reference[:2] + [(reference[2] + 1) % 256] + reference[3:]
        item = plan.jobs[0].items[0]
        matches, divergence = task_run._against_baseline(exact_arm, item, Output(prompt, other, ""),
                                                         Output(prompt, reference, ""))
        assert matches == 0 and divergence["position"] == 2 and divergence["near_tie"] is False
        assert divergence["top2_gap"] > divergence["tolerance"]
        assert task_run._against_baseline(exact_arm, item, Output(prompt, reference, ""),
                                          Output(prompt, reference, "")) == (1, None)
        assert task_run._against_baseline(ar_arm, item, Output(prompt, reference, ""), None) == (None, None)


def torch_tensor(rows):
    import torch

    return torch.tensor(rows, dtype=torch.long)


def test_a_completion_that_exits_before_the_tests_does_not_pass():
    """Exit status 0 alone is not a pass: the tests must have run (the end-of-tests marker is printed last)."""
    task = load_task("humaneval")
    items, _ = load_items(task)
    item = items[0]
    row = json.loads(_humaneval_lines(1)[0])
    scorer = make_scorer("code-exec", {"timeout": 10})
    for escape in ("import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit(0)"):
        early_exit = f"{row['canonical_solution']}\n{escape}\n"
        result = scorer.score(item, early_exit, ScoringContext(0))
        assert result.details["returncode"] == 0  # the process did exit cleanly ...
        assert not result.passed and not result.details["reached_end_of_tests"]  # ... but the tests never ran
    assert scorer.score(item, row["canonical_solution"], ScoringContext(0)).details["reached_end_of_tests"]


def test_mt_bench_generates_as_fastchat_does():
    """FastChat's gen_model_answer.py: up to 1024 new tokens, the temperature of the question's category from
    common.py's temperature_config (0.7 when unlisted), greedy below 1e-4, the temperature alone (no top-k/top-p)."""
    from relaxbench.ops.sampling import SamplingParams
    from relaxbench.tasks.yaml_tasks import YamlTask

    spec = load_task("mt-bench")
    assert spec.max_new_tokens == 1024
    task = YamlTask(spec, [], "-")
    expected = {"writing": 0.7, "roleplay": 0.7, "extraction": 0.0, "math": 0.0, "coding": 0.0, "reasoning": 0.0,
                "stem": 0.1, "humanities": 0.1, "arena-hard-200": 0.7}
    for category, temperature in expected.items():
        assert task.item_sampling(TaskItem("x", ("q",), category=category)) == SamplingParams(temperature)
    assert YamlTask(load_task("gsm8k"), [], "-").item_sampling(TaskItem("x", ("q",), category="math")) is None


def test_a_suite_may_override_mt_bench_sampling_and_the_plan_records_it():
    from relaxbench.harness.plan import build_plan
    from relaxbench.harness.suite import SuiteSpec
    from relaxbench.ops.sampling import SamplingParams

    base = {"target": "tiny-random-target", "draft": "tiny-random-draft", "tasks": ["mt-bench"], "limit": 80}
    [job] = build_plan(SuiteSpec(**base, methods=["speculative-sampling"])).jobs
    categories = {item.item_id: item.category for item in job.items}
    assert job.sampling == SamplingParams() and job.overridden == ()
    assert {categories[i] for i in job.item_sampling} == {"writing", "roleplay", "stem", "humanities"}
    writing = next(i for i, c in categories.items() if c == "writing")
    math = next(i for i, c in categories.items() if c == "math")
    assert job.sampling_for(writing) == SamplingParams(0.7) and job.sampling_for(math).greedy
    assert job.sample_seed(math, 0, 0) == 0 and job.sample_seed(writing, 0, 0) != 0  # derived under sampling only
    record = job.decode_record(job.arms[1])
    assert record["sampling_by_category"]["stem"]["temperature"] == 0.1 and "math" not in record["sampling_by_category"]
    # the run's own sampling, or the override flag, wins, and the plan says the task's own was overridden
    for extra in ({"temperature": 0.5}, {"override_task_sampling": True, "max_new_tokens": 64}):
        [job] = build_plan(SuiteSpec(**base, methods=["speculative-sampling"], **extra)).jobs
        assert job.item_sampling == {} and "sampling" in job.overridden
        assert job.decode_record(job.arms[1])["overrides_task"] == list(job.overridden)
    assert "max_new_tokens" in job.overridden and job.max_new_tokens == 64
    # a greedy-only rule on a task that samples some items fails before any model loads, saying what to do
    with pytest.raises(ConfigError, match="override_task_sampling: true"):
        build_plan(SuiteSpec(**base, methods=["margin-greedy"]))
    assert build_plan(SuiteSpec(**base, methods=["margin-greedy"], override_task_sampling=True)).jobs


def test_the_report_words_per_category_sampling():
    from relaxbench.report.content import decoding_text

    decode = {"sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0}, "seed": 3,
              "sampling_by_category": {"stem": {"temperature": 0.1, "top_k": 0, "top_p": 1.0},
                                       "writing": {"temperature": 0.7, "top_k": 0, "top_p": 1.0}}}
    assert decoding_text(decode, False) == ("the task's own per category: stem T=0.1; writing T=0.7; other "
                                            "categories greedy, seed=3")
    assert decoding_text({"sampling": {"temperature": 0.6, "top_k": 20, "top_p": 0.95}, "seed": 7}, True) == \
        "T=0.6, top-k=20, top-p=0.95, seed=7 (the suite's, over the task's own sampling)"
