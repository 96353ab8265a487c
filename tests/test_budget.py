"""Xia et al.'s thinking-budget forcing (decoding/budget.py): a sample still thinking at the budget gets the closing
text appended and its answer generated after it, with the records of both phases summed and the forced tokens left
out of the counters; a sample that closed its thinking continues without the text; lossless arms stay lossless."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxbench.decoding.budget import ThinkingBudget, generate_with_budget
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.errors import ConfigError
from relaxbench.policies import make_policy

TEXT = " ok</think>"


def ar(target, max_new_tokens: int) -> SpeculativeDecoder:
    return SpeculativeDecoder(target, None, make_policy("none", {}), DecodeConfig(k=0, max_new_tokens=max_new_tokens))


def test_a_sample_thinking_at_the_budget_is_forced_and_answers_after_it(tiny_target):
    prompt = tiny_target.tokenizer("Solve it.")["input_ids"]
    first = ar(tiny_target, 6).generate(prompt, seed=3)
    assert first.stop_reason == "length"  # the tiny model never ends this early
    forced = tiny_target.tokenizer.encode(TEXT, add_special_tokens=False)
    second = ar(tiny_target, 30 - 6 - len(forced)).generate(prompt + first.output_ids + forced, seed=3)
    result = generate_with_budget(ar(tiny_target, 30), prompt, ThinkingBudget(6, TEXT), seed=3)
    assert result.output_ids == first.output_ids + forced + second.output_ids
    assert result.text.startswith(first.text + TEXT) and result.prompt_ids == prompt
    assert result.forced_tokens == len(forced) == 11
    assert result.n_rounds == first.n_rounds + second.n_rounds and result.stop_reason == second.stop_reason
    assert result.counters.emitted == len(result.output_ids) - len(forced)  # no round emitted the forced text
    assert result.counters.rounds == result.counters.emitted  # AR: one token per round
    # both phases' time is in the total (not compared with the separate runs' times: wall time varies between runs)
    assert result.time_total >= sum(result.rounds.t_verify) + sum(result.rounds.t_policy) > 0


def test_a_sample_that_closed_its_thinking_continues_unforced(tiny_target):
    prompt = tiny_target.tokenizer("Solve it.")["input_ids"]
    first = ar(tiny_target, 6).generate(prompt, seed=3)
    encode = tiny_target.tokenizer.encode
    end = next(text for i in range(5) if encode(text := tiny_target.tokenizer.decode(first.output_ids[i:i + 2]),
                                               add_special_tokens=False) == first.output_ids[i:i + 2])
    # ``end`` plays the "</think>" the output already contains
    result = generate_with_budget(ar(tiny_target, 12), prompt, ThinkingBudget(6, TEXT, end), seed=3)
    second = ar(tiny_target, 6).generate(prompt + first.output_ids, seed=3)
    assert result.forced_tokens == 0 and result.output_ids == first.output_ids + second.output_ids


def test_lossless_arms_reproduce_ar_under_the_budget(tiny_target, tiny_draft):
    from relaxbench.decoders import build_decoder
    from relaxbench.methods import load_method

    prompt = tiny_target.tokenizer("Solve it.")["input_ids"]
    budget = ThinkingBudget(7, TEXT)
    reference = generate_with_budget(ar(tiny_target, 28), prompt, budget)
    exact = build_decoder(load_method("exact"), tiny_target, tiny_draft, DecodeConfig(k=3, max_new_tokens=28),
                          "tiny-random-draft")
    result = generate_with_budget(exact, prompt, budget)
    assert result.output_ids == reference.output_ids and result.forced_tokens == reference.forced_tokens > 0


def test_the_budget_must_leave_room_for_an_answer(tiny_target):
    with pytest.raises(ConfigError, match="must be below max_new_tokens"):
        generate_with_budget(ar(tiny_target, 8), [1, 2], ThinkingBudget(8, TEXT))
    from relaxbench.harness.plan import build_plan
    from relaxbench.harness.suite import SuiteSpec

    with pytest.raises(ConfigError, match="task 'jsonl': the thinking budget \\(64 tokens\\) must be below"):
        build_plan(SuiteSpec(target="tiny-random-target", methods=["exact"], draft="ngram", tasks=["jsonl"],
                             data_files={"jsonl": str(Path(__file__).parent / "data" / "tiny_tasks.jsonl")},
                             max_new_tokens=64, thinking_budget=64))


def test_compare_stores_forced_samples_and_the_report_counts_them(tmp_path: Path):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.cli import main
    from relaxbench.report.content import load_report
    from relaxbench.report.tables import failure_table

    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "only", "prompt": "Think."}) + "\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text("target: tiny-random-target\ndraft: tiny-random-draft\ndtype: float64\ndraft_dtype: float64\n"
                     "methods: [exact]\ntasks: [jsonl]\nmax_new_tokens: 24\nwarmup: 0\nthinking_budget_text: '</think>'\n")
    out = tmp_path / "run"
    assert main(["compare", "--suite", str(suite), "--data-file", f"jsonl={data}", "--thinking-budget", "8",
                 "--out", str(out), "--report-format", "none"]) == 0
    [summary] = summarize_run(load_run(out))
    samples = [s for c in load_run(out).cells for s in c.samples]
    assert all(s.forced_tokens == 8 and s.n_output_tokens > 16 for s in samples)
    assert [c.failures.forced for c in summary.cells] == [1, 1]
    assert all(cells.text == "1" for row in failure_table(summary).rows for cells in row.cells
               if cells.metric == "failures.forced")
    [row] = load_report(out).tasks_table.rows
    assert "thinking budget 8 tokens" in {c.metric: c.text for c in row.cells}["decoding"]
