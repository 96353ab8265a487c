"""The store's one row type: ``SampleRow`` is every column of ``samples``, and reads the store written by the code
before it once upgraded (``tests/data/legacy_store_v1.sqlite``: ``relaxbench compare`` on the tiny models,
``exact`` on two jsonl items and two lm-eval multiple-choice documents, schema version 1)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.cli import main
from relaxbench.decoding.records import GenerationResult, RoundLog
from relaxbench.harness.store import LIKELIHOOD_STOP_REASON, SampleRow, Store
from tests.report_fixture import ARMS, _cell
from tests.store_query import rows

LEGACY = Path(__file__).parent / "data" / "legacy_store_v1.sqlite"
LEGACY_TASKS = ("jsonl", "lm_eval:relaxbench_mc")


@pytest.fixture
def legacy_run(tmp_path: Path) -> Path:
    """A copy of the legacy store in a run folder, upgraded to the current schema."""
    run = tmp_path / "legacy"
    run.mkdir()
    shutil.copy(LEGACY, run / "results.sqlite")
    assert main(["store", "upgrade", str(run)]) == 0
    return run


def test_sample_row_is_every_column_of_samples(tmp_path: Path):
    with Store(tmp_path / "results.sqlite"):
        pass
    columns = [r["name"] for r in rows(tmp_path / "results.sqlite", "PRAGMA table_info(samples)")]
    names = [f.name for f in dataclasses.fields(SampleRow)]
    assert names == columns[1:] + ["sample_id"]  # sample_id (the key) is assigned by the store, so it comes last


def test_legacy_rows_read_and_write_back_unchanged(legacy_run: Path):
    """Every stored value survives SQLite → SampleRow → SQLite byte for byte."""
    stored = rows(legacy_run / "results.sqlite", "SELECT * FROM samples ORDER BY sample_id")
    assert len(stored) == 6
    for raw in stored:
        assert SampleRow.from_columns(raw).to_columns() == dict(raw)
    reasons = {raw["stop_reason"] for raw in stored}
    assert LIKELIHOOD_STOP_REASON in reasons and len(reasons) == 2  # generations and likelihood-only samples


def test_summary_and_report_read_the_upgraded_legacy_store(legacy_run: Path, tmp_path: Path, capsys):
    run = load_run(legacy_run)
    assert {s.task for s in summarize_run(run)} == set(LEGACY_TASKS)
    jsonl = next(s for s in summarize_run(run) if s.task == "jsonl")
    exact = jsonl.cells[1]
    assert exact.arm == "exact" and exact.mean_acceptance_length > 1.0 and exact.divergences.reproduced == 2
    assert main(["summary", str(legacy_run)]) == 0
    out = capsys.readouterr().out
    for fragment in (*LEGACY_TASKS, "exact", "MAL", "by definition"):
        assert fragment in out
    assert main(["report", str(legacy_run), "--out", str(tmp_path / "report")]) == 0
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'data-table="jsonl-table"' in html and 'data-table="lm_eval:relaxbench_mc-table"' in html
    assert (tmp_path / "report" / "report.pdf").stat().st_size > 0


def test_rows_built_from_a_generation_round_trip_through_the_store(tmp_path: Path):
    rounds = RoundLog()
    rounds.add(drafted=4, accepted=3, relaxed=1, emitted=4, t_draft=0.01, t_verify=0.02, t_policy=0.001)
    rounds.add(drafted=4, accepted=0, relaxed=0, emitted=1, t_draft=0.01, t_verify=0.02, t_policy=0.002)
    result = GenerationResult([1, 2], [5, 6, 7, 8, 9], "text", "eos", rounds, 0.1, 0.2)
    with Store(tmp_path / "results.sqlite") as store:
        run_id = store.open_run("key", "t", "d", {})
        session = store.start_session(run_id, {"command": "test"})
        cells = [store.ensure_cell(run_id, _cell("task", arm, i, "code-exec", 8)) for i, arm in enumerate(ARMS[:2])]
        made = SampleRow.from_generation(
            result, cell_id=cells[1], session_id=session, item_id="a", item_index=0, turn=0, repeat=0, category="c",
            score=1.0, passed=True, score_details={"b": 1, "a": [2]}, matches_baseline=False,
            divergence={"near_tie": True})
        alone = SampleRow.likelihood_only(0.5, cell_id=cells[0], session_id=session, item_id="a", item_index=0,
                                          category=None, score=0.0, passed=False, score_details={})
        store.add_sample(made)
        store.add_sample(alone)
        [read] = store.samples(cells[1])
        assert read == dataclasses.replace(made, sample_id=read.sample_id) and read.sample_id is not None
        assert store.sample(cells[1], ("a", 0, 0)) == read and store.sample(cells[1], ("b", 0, 0)) is None
        [read_alone] = store.samples(cells[0])
    assert (read.n_output_tokens, read.n_rounds, read.n_drafted, read.n_accepted, read.n_relaxed) == (5, 2, 8, 3, 1)
    assert read.time_policy == pytest.approx(0.003) and read.rounds.t_policy == (0.001, 0.002)
    assert read.counters == result.counters
    assert read_alone.stop_reason == LIKELIHOOD_STOP_REASON and read_alone.counters.rounds == 0
    assert read_alone.time_total == read_alone.time_prefill == 0.5 and read_alone.prompt_ids == ()
    raw = rows(tmp_path / "results.sqlite", "SELECT * FROM samples ORDER BY sample_id")
    assert raw[0]["score_details"] == '{"a": [2], "b": 1}' and raw[0]["passed"] == 1
    assert raw[0]["matches_baseline"] == 0 and json.loads(raw[0]["rounds"])["drafted"] == [4, 4]
    assert json.loads(raw[1]["rounds"])["t_policy"] == [] and raw[1]["divergence"] is None


def test_the_upgraded_legacy_store_has_empty_grading_tables(legacy_run: Path):
    """The legacy store was written before grading: upgraded, its grading tables are there and empty, and the run
    reads with no verdicts."""
    db = legacy_run / "results.sqlite"
    tables = {r["name"] for r in rows(db, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"graders", "verdicts", "sample_verdicts"} <= tables
    assert not rows(db, "SELECT * FROM verdicts") and not rows(db, "SELECT * FROM graders")
    run = load_run(legacy_run)
    assert run.graders == {} and all(cell.verdicts == () for cell in run.cells)
    assert all(summary.grader is None for summary in summarize_run(run))
