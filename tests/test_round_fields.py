"""Per-round records by declaration: a round's facts are declared once (``decoding/records.ROUND_FIELDS``), filled
by name (the loop, the vLLM executor), stored in the sample's one ``rounds`` column and read back by name. A new
fact declared here, in the test, is stored and read back with no other change; and a fact a rule reports with its
verdict (``Verdict.facts``) reaches the rounds of the transformers loop, and the vLLM adapter's step log, by name."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from relaxbench.analysis import load_run
from relaxbench.decoders import build_decoder
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.errors import ConfigError
from relaxbench.integrations.vllm_client import vllm_python
from relaxbench.methods import load_method
from relaxbench.policies import make_policy
from relaxbench.decoding import records
from relaxbench.decoding.records import GenerationResult, RoundField, RoundLog, Rounds
from relaxbench.harness.store import SampleRow, Store
from tests.report_fixture import ARMS, _cell
from tests.store_query import rows

ROUND = {"drafted": 4, "accepted": 3, "relaxed": 1, "emitted": 4, "t_draft": 0.01, "t_verify": 0.02,
         "t_policy": 0.001}


@pytest.fixture
def bonus_field(monkeypatch) -> RoundField:
    """One more per-round fact, declared the way every other one is."""
    declared = RoundField("bonus", int, "tokens", "tokens the round emitted past its accepted drafts", 0)
    monkeypatch.setattr(records, "ROUND_FIELDS", records.ROUND_FIELDS + (declared,))
    return declared


def _store_one(path: Path, rounds: RoundLog) -> SampleRow:
    """A generation with these rounds, stored as a sample of a run; returns the row as written."""
    result = GenerationResult([1, 2], list(range(5, 5 + sum(rounds.emitted))), "text", "eos", rounds, 0.1, 0.2)
    with Store(path / "results.sqlite") as store:
        run_id = store.open_run("key", "t", "d", {})
        session = store.start_session(run_id, {"command": "test"})
        cell = store.ensure_cell(run_id, _cell("task", ARMS[1], 1, "code-exec", 8))
        row = SampleRow.from_generation(result, cell_id=cell, session_id=session, item_id="a", item_index=0, turn=0,
                                        repeat=0, category=None, score=1.0, passed=True, score_details={})
        store.add_sample(row)
        store.finish_session(session, "finished")
    return row


def test_a_field_declared_in_a_test_is_stored_and_read_back_by_name(tmp_path: Path, bonus_field: RoundField):
    rounds = RoundLog()
    rounds.add(**ROUND, bonus=1)
    rounds.add(**{**ROUND, "accepted": 0, "relaxed": 0, "emitted": 1})  # left out: the declared default
    _store_one(tmp_path, rounds)
    [raw] = rows(tmp_path / "results.sqlite", "SELECT rounds FROM samples")
    assert json.loads(raw["rounds"])["bonus"] == [1, 0]
    [cell] = load_run(tmp_path).cells
    [sample] = cell.samples
    assert sample.rounds.bonus == sample.rounds["bonus"] == (1, 0)
    assert sample.rounds.accepted == (3, 0) and sample.counters.accepted == 3


def test_the_vllm_executor_keeps_every_declared_field_the_adapter_reports(bonus_field: RoundField):
    """The adapter's rounds, as columns or one mapping per round, are read by name: a declared field it reports is
    kept, names nobody declared are left out, and what vLLM does not measure is filled in."""
    from relaxbench.integrations.vllm_executor import by_round, engine_rounds  # registers the engine's own arm

    columns = {"drafted": [3, 0], "accepted": [2, 0], "relaxed": [1, 0], "emitted": [3, 1], "t_policy": [0.5, 0.0],
               "bonus": [1, 1], "adapter_only": ["x", "y"]}
    for reported in (columns, by_round(columns)):
        log = engine_rounds(by_round(reported), "model")
        assert log.bonus == [1, 1] and log.t_verify == [0.0, 0.0] and log.t_policy == [0.5, 0.0]
        assert log.draft_forwards == [(1, 1, 1), ()]  # the tokens committed last round, then one per draft
        assert "adapter_only" not in log.columns
    assert engine_rounds(by_round(columns), "ngram").lookups == [1, 0]


class ReportingBonus:
    """A rule that reports one more per-round fact with its verdict: the drafts it did not accept. Everything else
    is exact match's."""

    def __init__(self) -> None:
        self.inner = make_policy("exact", {})

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def decide(self, batch):
        verdict = self.inner.decide(batch)
        return dataclasses.replace(verdict, facts={"bonus": batch.num_drafts - verdict.accepted})


def test_a_fact_a_rule_reports_is_a_round_field_of_the_loop(bonus_field: RoundField, tiny_target, tiny_draft):
    config = DecodeConfig(k=3, max_new_tokens=24)
    exact = build_decoder(load_method("exact"), tiny_target, tiny_draft, config, "tiny-random-draft")
    decoder = SpeculativeDecoder(tiny_target, exact.drafter, ReportingBonus(), config)
    rounds = decoder.generate(tiny_target.tokenizer.encode("def f(x):")).rounds
    assert len(rounds) > 1 and any(rounds.drafted)
    assert rounds.bonus == [d - a for d, a in zip(rounds.drafted, rounds.accepted, strict=True)]
    assert any(rounds.bonus)  # the tiny random pair disagrees: some drafts are rejected


ADAPTER_LOG = """
import sys, types, torch
from relaxbench.integrations.vllm_adapter import STEP_COLUMNS, PendingStep, StepLog
layout = types.SimpleNamespace(req_ids=("a", "b"), tags=["t0", "t1"], logs=[sys.argv[1], sys.argv[1]])
names = STEP_COLUMNS + ("bonus",)
records = torch.tensor([[4, 3, 1, 4, 1], [2, 0, 0, 1, -1]])  # the second request's rule reports no bonus
StepLog([PendingStep(layout, names, records, None, [([0, 1], 0.25)])]).write()
"""


@pytest.mark.slow
def test_a_fact_a_rule_reports_reaches_the_vllm_adapters_log_and_the_executors_rounds(tmp_path: Path,
                                                                                      bonus_field: RoundField):
    """The adapter's step records travel by name: a fact column is written under its name for the requests whose
    rule reports it, and the worker's trim and the executor keep it as a declared round field."""
    from relaxbench.integrations.vllm_executor import by_round, engine_rounds
    from relaxbench.integrations.vllm_worker import trim_rounds

    try:
        python = vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))
    log = tmp_path / "steps.jsonl"
    subprocess.run([str(python), "-c", ADAPTER_LOG, str(log)], check=True, capture_output=True, text=True,
                   timeout=300)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert steps == [{"tag": "t0", "drafted": 4, "accepted": 3, "relaxed": 1, "emitted": 4, "bonus": 1,
                      "t_policy": 0.25},
                     {"tag": "t1", "drafted": 2, "accepted": 0, "relaxed": 0, "emitted": 1, "t_policy": 0.25}]
    rounds = engine_rounds(by_round(trim_rounds(list(range(5)), steps[:1], True)), "model")
    assert rounds.bonus == [0, 1]  # the prefill's round takes the declared default; the step reports its bonus


def test_rounds_are_filled_by_declared_names_only():
    log = RoundLog()
    with pytest.raises(TypeError, match="no per-round field 'drafts'"):
        log.add(**{**ROUND, "drafts": 1})
    with pytest.raises(TypeError, match="a round needs 't_policy'"):
        log.add(**{k: v for k, v in ROUND.items() if k != "t_policy"})
    assert len(log) == 0  # a refused round leaves nothing half-written
    log.add(**ROUND)
    stored = log.frozen()
    assert stored.emitted_in_span is None  # every round of an ungated rule has none: not recorded
    assert stored.extra == (0,) and stored.draft_forwards == ((),)
    with pytest.raises(AttributeError, match="no per-round field 'nonsense'"):
        stored["nonsense"]
    assert Rounds.from_json(stored.to_json()) == stored


def test_a_generation_without_rounds_keeps_the_fields_that_cannot_be_none():
    stored = RoundLog().frozen()
    assert stored.drafted == () and stored.extra == () and stored.relaxed_in_span is None


# ---------------------------------------------------------------------------------------------- docs/store.md

ROOT = Path(__file__).resolve().parents[1]
STORE_DOC = ROOT / "docs" / "store.md"
BEGIN = "<!-- generated from decoding/records.ROUND_FIELDS; regenerate with `make generated` -->\n"
END = "<!-- end of generated table -->"


def rounds_table() -> str:
    """The declared per-round fields as docs/store.md lists them."""
    lines = ["| field | kind | unit | meaning | when left out |", "|---|---|---|---|---|"]
    for f in records.round_fields():
        kind = "list of int" if f.kind is tuple else f.kind.__name__
        absent = "required" if f.required else ("not recorded" if f.default is None else f"`{f.default!r}`")
        lines.append(f"| `{f.name}` | {kind} | {f.unit} | {f.doc} | {absent} |")
    return "\n".join(lines) + "\n"


def _split(text: str) -> tuple[str, str, str]:
    head, rest = text.split(BEGIN, 1)
    table, tail = rest.split(END, 1)
    return head + BEGIN, table, END + tail


def test_the_store_doc_lists_every_declared_field():
    _, committed, _ = _split(STORE_DOC.read_text())
    assert committed == rounds_table(), "docs/store.md is out of date: `make generated` regenerates it"


if __name__ == "__main__":
    head, _, tail = _split(STORE_DOC.read_text())
    STORE_DOC.write_text(head + rounds_table() + tail)
