"""The failure measures: degenerate repetition (an output that ends in a loop) on synthetic and real outputs, the
scorers' "no answer", and their first-class place in the analysis and the tables (every arm, paired against AR,
with CIs)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.data import TaskItem
from relaxbench.decoding.records import Rounds
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now
from relaxbench.scoring import ScoringContext, make_scorer
from relaxbench.scoring.repetition import MIN_SPAN, Loop, ends_in_loop, tail_loop

REAL = Path(__file__).parent / "data" / "real_outputs_smollm2.json"


# ------------------------------------------------------------------------------------------------ repetition


def slow_tail_loop(ids, min_copies=3, min_span=15, max_period=256):
    """The definition written out: the shortest period whose trailing run of repeats makes >= 3 copies and >= 15
    tokens."""
    for period in range(1, min(max_period, len(ids) // min_copies) + 1):
        run, i = 0, len(ids) - 1
        while i - period >= 0 and ids[i] == ids[i - period]:
            run, i = run + 1, i - 1
        if run + period >= min_copies * period and run + period >= min_span:
            return Loop(period, run + period)
    return None


def test_an_output_ending_in_back_to_back_copies_is_a_loop():
    unit = [5, 6, 7, 8, 9]
    assert tail_loop([1, 2, 3] + unit * 3) == Loop(5, 15)
    assert tail_loop([1, 2, 3] + unit * 4 + unit[:2]) == Loop(5, 22)  # the budget cut the last copy: still a loop
    assert tail_loop([1, 2, 3] + unit * 2 + unit[:4]) is None  # fewer than 3 copies
    assert tail_loop([4] * 14) is None and tail_loop([4] * MIN_SPAN) == Loop(1, 15)  # at least 15 tokens
    assert tail_loop(unit * 5 + [1, 2, 3, 4]) is None  # a loop the model left is not a failure of the sample
    assert tail_loop([1, 2] * 8) == Loop(2, 16)  # the shortest period, not 4 or 8
    assert tail_loop([]) is None and tail_loop([3]) is None


def test_the_fast_search_is_the_definition():
    rng = random.Random(0)
    for _ in range(2000):
        ids = [rng.randint(0, 3) for _ in range(rng.randint(0, 200))]
        if rng.random() < 0.5:
            unit = [rng.randint(0, 5) for _ in range(rng.randint(1, 40))]
            ids += unit * rng.randint(1, 6) + unit[:rng.randint(0, len(unit))]
        assert tail_loop(ids) == slow_tail_loop(ids), ids


def test_real_outputs_of_a_small_model():
    """SmolLM2-135M's greedy outputs: a haiku that degenerates into one line repeated until the cap is a loop; a
    numbered list (similar lines, never the same) and a one-sentence answer are not. An instructed repetition
    ('banana' a hundred times) is one too: AR does the same, which the paired Δ against AR removes."""
    outputs = {key: o for o in json.loads(REAL.read_text())["outputs"]
               for key in ("haiku", "numbers", "capital", "banana") if key in o["prompt"]}
    haiku = outputs["haiku"]
    assert haiku["stop_reason"] == "length" and "A moment of stillness, a fleeting sight," in haiku["text"]
    loop = tail_loop(haiku["output_ids"])
    assert loop is not None and loop.period == 11 and loop.copies > 10
    for key in ("numbers", "capital"):
        ids = outputs[key]["output_ids"]
        assert outputs[key]["stop_reason"] == "eos" and not ends_in_loop(ids[:-1])
    assert tail_loop(outputs["banana"]["output_ids"]).period == 3


# ------------------------------------------------------------------------------------------------ no answer


@pytest.mark.parametrize("scorer, args, item, text, answered", [
    ("boxed-integer", {}, TaskItem("a", ("q",), reference="5"), "<think>so</think> \\boxed{5}", True),
    ("boxed-integer", {}, TaskItem("a", ("q",), reference="5"), "<think>so it is 5 and then", False),
    ("boxed-integer", {}, TaskItem("a", ("q",), reference="5"), "<think>so</think> I do not know", False),
    ("gsm8k", {}, TaskItem("g", ("q",), reference="4"), "2 and 2 make 4", True),
    ("gsm8k", {}, TaskItem("g", ("q",), reference="4"), "I cannot say", False),
    ("gsm8k", {"primary": "strict"}, TaskItem("g", ("q",), reference="4"), "2 and 2 make 4", False),
    ("exact-match", {}, TaskItem("e", ("q",), reference="x"), "y", None),
    ("agreement", {}, TaskItem("m", ("q",)), "text", None),
])
def test_scorers_say_whether_they_found_an_answer(scorer, args, item, text, answered):
    chosen = make_scorer(scorer, args)
    score = chosen.score(item, text, ScoringContext(0, baseline_text="text", mean_logprob=lambda: -1.0))
    assert chosen.answered(score.details) is answered


def test_the_other_extracting_scorers_read_their_details():
    assert make_scorer("choice-letter").answered({"answer": None, "thinking": "closed"}) is False
    assert make_scorer("choice-letter").answered({"answer": "B", "thinking": "closed"}) is True
    assert make_scorer("acp-progression").answered({"positive": None}) is False
    patterns = make_scorer("answer-match", {"strict": "#### (\\d+)"})
    assert patterns.answered({"primary": "strict", "strict_answer": "[invalid]"}) is False
    assert patterns.answered({"primary": "flexible", "strict_answer": "[invalid]", "flexible_answer": "7"}) is True
    assert make_scorer("livecodebench").answered({"code_chars": 0, "thinking": "closed"}) is False
    assert make_scorer("mbpp-plus").answered({"code_chars": 120}) is True


# ------------------------------------------------------------------------------------------------ analysis


DECODE = {"k": 5, "max_new_tokens": 40, "seed": 0, "stop_strings": [], "sampling": {"temperature": 0.0}}
LOOP = (1, 2, 3, 4, 5) * 8  # 40 tokens, at the cap
ANSWER = (9, 8, 7, 6, 2)  # an answer, then EOS (2)


def _cell(arm: str, position: int) -> CellDefinition:
    return CellDefinition(task="aime", arm=arm, position=position, is_baseline=arm == "ar", method=arm,
                          policy="none" if arm == "ar" else "cactus", lossless=arm == "ar", knobs={},
                          method_spec={"name": arm}, drafter=None, k=0 if arm == "ar" else 5, decode=DECODE,
                          task_spec={"name": "aime", "scorer_args": {}}, scorer="boxed-integer",
                          data_fingerprint="f")


def _sample(cell_id: int, session: int, item: int, looped: bool) -> SampleRow:
    ids = LOOP if looped else ANSWER
    details = {"answer": None if looped else 7, "thinking": "unclosed" if looped else "closed"}
    return SampleRow(cell_id=cell_id, session_id=session, item_id=f"i{item}", item_index=item, turn=0, repeat=0,
                     category=None, created_at=now(), prompt_ids=(1,), output_ids=ids, output_text="x",
                     stop_reason="length" if looped else "eos", n_prompt_tokens=1, n_output_tokens=len(ids),
                     n_rounds=1, n_drafted=0, n_accepted=0, n_relaxed=0, time_total=1.0, time_prefill=0.0,
                     time_draft=0.0, time_verify=1.0, time_policy=0.0, rounds=Rounds.of(drafted=(0,), accepted=(0,),
                     relaxed=(0,), emitted=(len(ids),), t_draft=(0.0,), t_verify=(1.0,), t_policy=(0.0,)), score=0.0,
                     passed=False, score_details=details, matches_baseline=None,
                     divergence=None)


def test_failure_measures_are_paired_against_ar_in_the_summary_and_the_tables(tmp_path: Path):
    """8 items; AR loops on item 0, the relaxed arm on items 0-3: +37.5 pp of no answer, cut and loop, each with
    a paired-bootstrap CI, and the output-length ratio with its CI."""
    looped = {"ar": {0}, "relaxed": {0, 1, 2, 3}}
    with Store(tmp_path / "results.sqlite") as store:
        run_id = store.open_run("key", "t", "d", {})
        session = store.start_session(run_id, {"command": "test"})
        for position, arm in enumerate(looped):
            cell = store.ensure_cell(run_id, _cell(arm, position))
            for item in range(8):
                store.add_sample(_sample(cell, session, item, item in looped[arm]))
        store.finish_session(session, "finished")
    [summary] = summarize_run(load_run(tmp_path))
    ar, relaxed = summary.cells
    for rate in (relaxed.failures.no_answer, relaxed.failures.cut, relaxed.failures.loop):
        assert (rate.count, rate.samples, rate.rate) == (4, 8, 0.5)
        assert rate.delta.value == pytest.approx(3 / 8) and rate.delta.low <= 3 / 8 <= rate.delta.high
        assert rate.delta.low >= 0  # AR never fails where the arm does not
    assert ar.failures.loop.rate == 1 / 8 and ar.failures.forced == 0
    ratio = (4 * 40 + 4 * 5) / (40 + 7 * 5)
    assert relaxed.failures.length_ratio.value == pytest.approx(ratio) == pytest.approx(relaxed.output_length_ratio)
    assert relaxed.failures.length_ratio.low < ratio < relaxed.failures.length_ratio.high
    from relaxbench.report.tables import failure_table, failures_brief, task_tables

    table = failure_table(summary)
    assert table in task_tables(summary)
    cells = {c.metric: c for c in table.rows[1].cells}
    assert cells["failures.no_answer"].text == "4/8 (50%)" and cells["failures.loop.delta"].text.startswith("+37.5 [")
    assert cells["failures.cut.delta"].value == pytest.approx(3 / 8)
    assert {c.metric: c for c in table.rows[0].cells}["failures.loop.delta"].text == "-"
    assert failures_brief(relaxed) == "no answer +37.5, cut +37.5, loop +37.5 pp"
    from relaxbench.report.content import build_report

    [row] = build_report(load_run(tmp_path), str(tmp_path)).summary_table.rows
    assert {c.metric: c.text for c in row.cells}["failures"] in ("-", failures_brief(relaxed))


def test_an_eos_closing_a_loop_is_left_out_and_agreement_has_no_answer_measure(tmp_path: Path):
    from relaxbench.analysis.metrics import sample_ends_in_loop

    closed = _sample(1, 1, 0, looped=True)
    from dataclasses import replace

    assert sample_ends_in_loop(replace(closed, output_ids=LOOP + (2,), stop_reason="eos"))
    assert not sample_ends_in_loop(replace(closed, output_ids=LOOP + (2,), stop_reason="length"))
    assert np.isclose(tail_loop(LOOP).copies, 8.0)
