"""Repeats done right: under sampling every (item, turn, repeat) draws its own random stream, seeded from the run
seed and the sample's key (stored in the sample's ``seed`` column), so repeats are independent samples that two
runs with the same seed reproduce exactly; capability is avg@n over the repeats with CIs over items; greedy runs
keep one output per unit (a repeat re-times it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from relaxbench.analysis import load_run, summarize_run
from relaxbench.analysis.metrics import avg_at_n, unit_passed
from relaxbench.cli import main
from relaxbench.decoding.records import Rounds
from relaxbench.harness.plan import derive_seed
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now
from tests.store_query import rows, sample_rows

TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]
REPEATS = 48


@pytest.fixture(scope="module")
def one_item(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "one.jsonl"
    path.write_text(json.dumps({"id": "only", "prompt": "Name a colour."}) + "\n")
    return path


def sampled_run(out: Path, data: Path, seed: int, repeats: int = REPEATS, tokens: int = 3) -> Path:
    assert main(["compare", *TINY, "--methods", "speculative-sampling", "--tasks", "jsonl", "--data-file",
                 f"jsonl={data}", "--temperature", "1.0", "--repeats", str(repeats), "--max-new-tokens", str(tokens),
                 "--seed", str(seed), "--warmup", "0", "--out", str(out), "--report-format", "none"]) == 0
    return out / "results.sqlite"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, one_item) -> Path:
    return sampled_run(tmp_path_factory.mktemp("first"), one_item, seed=11)


def outputs(db: Path) -> dict[tuple[str, str, str, int, int], tuple]:
    """What a sample is, less its timings: the key → (output ids, seed, score)."""
    return {key: (s.output_ids, s.seed, s.score) for key, s in sample_rows(db).items()}


def test_sampled_repeats_are_independent_draws_from_the_target(first_run, tiny_target):
    """The first tokens of the 48 AR repeats are draws from the target's distribution: the number that fall in
    the head of the distribution (the most likely tokens holding half of its mass) passes a binomial test against
    that mass. Replaying one stream (the old behaviour) gives 0 or 48 hits, which the test rejects (p < 1e-10)."""
    samples = [s for (task, arm, *_), s in sample_rows(first_run).items() if arm == "ar"]
    assert len(samples) == REPEATS
    prompt = torch.tensor(samples[0].prompt_ids)
    with torch.inference_mode():
        probs = torch.softmax(tiny_target.model(prompt.unsqueeze(0)).logits[0, -1].double(), -1)
    order = torch.argsort(probs, descending=True)
    cumulative = torch.cumsum(probs[order], 0)
    head = set(order[: int((cumulative < 0.5).sum()) + 1].tolist())
    mass = float(probs[list(head)].sum())
    hits = sum(s.output_ids[0] in head for s in samples)
    assert stats.binomtest(hits, REPEATS, mass).pvalue > 1e-3, (hits, mass)
    assert stats.binomtest(0, REPEATS, mass).pvalue < 1e-10 and stats.binomtest(REPEATS, REPEATS, mass).pvalue < 1e-10
    assert len({s.output_ids for s in samples}) > REPEATS // 2  # 3 tokens over a 256-token vocabulary: few repeats
    seeds = [s.seed for s in samples]
    assert len(set(seeds)) == REPEATS and all(0 <= seed < 2 ** 63 for seed in seeds)


def test_every_arm_draws_the_same_stream_for_a_sample(first_run):
    by_key = sample_rows(first_run)
    for (task, arm, item, turn, repeat), sample in by_key.items():
        assert sample.seed == derive_seed(11, task, item, turn, repeat)
        assert sample.seed == by_key[(task, "ar" if arm != "ar" else "speculative-sampling", item, turn, repeat)].seed


@pytest.mark.slow
def test_the_same_seed_reproduces_a_run_exactly_and_another_seed_does_not(first_run, one_item, tmp_path: Path):
    again = sampled_run(tmp_path / "again", one_item, seed=11)
    assert outputs(again) == outputs(first_run)
    other = sampled_run(tmp_path / "other", one_item, seed=12)
    differs = sum(a[0] != b[0] for a, b in zip(outputs(other).values(), outputs(first_run).values()))
    assert differs > REPEATS  # of 2 × 48 samples, most differ


def test_greedy_repeats_re_time_one_output(one_item, tmp_path: Path):
    out = tmp_path / "greedy"
    assert main(["compare", *TINY, "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={one_item}",
                 "--repeats", "3", "--max-new-tokens", "4", "--seed", "5", "--warmup", "0", "--out", str(out),
                 "--report-format", "none"]) == 0
    samples = sample_rows(out / "results.sqlite")
    assert len(samples) == 6 and len({s.output_ids for s in samples.values()}) == 1
    assert {s.seed for s in samples.values()} == {5}  # the run seed, as before per-sample seeds


def test_derived_seeds_are_stable_across_versions():
    """A stored seed must mean the same stream in every later version: the derivation is pinned."""
    assert derive_seed(0, "jsonl", "only", 0, 0) == derive_seed(0, "jsonl", "only", 0, 0)
    assert derive_seed(0, "jsonl", "only", 0, 0) == 4539346171407178151
    assert len({derive_seed(0, "jsonl", "only", 0, r) for r in range(100)}) == 100
    assert derive_seed(0, "jsonl", "only", 0, 0) != derive_seed(1, "jsonl", "only", 0, 0)
    assert derive_seed(0, "jsonl", "only", 0, 0) != derive_seed(0, "gsm8k", "only", 0, 0)


def test_a_store_without_seeds_still_reads(tmp_path: Path):
    """A store written before samples recorded their seed reads, once upgraded, with seed None."""
    import shutil

    shutil.copy(Path(__file__).parent / "data" / "legacy_store_v1.sqlite", tmp_path / "results.sqlite")
    assert main(["store", "upgrade", str(tmp_path)]) == 0
    with Store(tmp_path / "results.sqlite") as store:
        columns = {r["name"] for r in store.rows("PRAGMA table_info(samples)")}
        assert "seed" in columns
    run = load_run(tmp_path)
    assert all(s.seed is None for cell in run.cells for s in cell.samples)


# ------------------------------------------------------------------------------------------------ avg@n


SAMPLED = {"k": 5, "max_new_tokens": 8, "seed": 0, "stop_strings": [],
           "sampling": {"temperature": 0.6, "top_k": 20, "top_p": 0.95}}


def _cell(arm: str, position: int) -> CellDefinition:
    return CellDefinition(task="t", arm=arm, position=position, is_baseline=arm == "ar", method=arm,
                          policy="none" if arm == "ar" else "cactus", lossless=arm == "ar", knobs={},
                          method_spec={"name": arm}, drafter=None, k=0 if arm == "ar" else 5, decode=SAMPLED,
                          task_spec={"name": "t"}, scorer="exact-match", data_fingerprint="f")


def _sample(cell_id: int, session: int, item: int, repeat: int, passed: bool, seconds: float,
            stop: str = "eos") -> SampleRow:
    return SampleRow(cell_id=cell_id, session_id=session, item_id=f"i{item}", item_index=item, turn=0, repeat=repeat,
                     category=None, created_at=now(), prompt_ids=(1,), output_ids=(2, 3), output_text="x",
                     stop_reason=stop, n_prompt_tokens=1, n_output_tokens=2, n_rounds=1, n_drafted=0, n_accepted=0,
                     n_relaxed=0, time_total=seconds, time_prefill=0.0, time_draft=0.0, time_verify=seconds,
                     time_policy=0.0, rounds=Rounds.of(drafted=(0,), accepted=(0,), relaxed=(0,), emitted=(2,),
                     t_draft=(0.0,), t_verify=(seconds,), t_policy=(0.0,)), score=float(passed),
                     passed=passed, score_details={}, matches_baseline=None, divergence=None, seed=repeat)


def test_capability_is_avg_at_n_with_intervals_over_items(tmp_path: Path):
    """4 items × 3 sampled repeats: the score is the mean over items of each item's pass share; speed-ups pair
    items by their mean time over repeats; McNemar does not apply (repeats disagree), the Δ interval is the test."""
    passes = {"ar": [[1, 1, 1], [1, 0, 1], [0, 0, 0], [1, 1, 0]], "relaxed": [[1, 0, 1], [0, 0, 1], [0, 0, 0], [1, 1,
    1]]}
    times = {"ar": 2.0, "relaxed": 1.0}
    with Store(tmp_path / "results.sqlite") as store:
        run_id = store.open_run("key", "t", "d", {})
        session = store.start_session(run_id, {"command": "test"})
        for position, arm in enumerate(passes):
            cell = store.ensure_cell(run_id, _cell(arm, position))
            for item, flags in enumerate(passes[arm]):
                for repeat, flag in enumerate(flags):
                    stop = "length" if arm == "relaxed" and item == 2 else "eos"
                    store.add_sample(_sample(cell, session, item, repeat, bool(flag), times[arm] * (1 + repeat),
                                             stop))
        store.finish_session(session, "finished")
    [summary] = summarize_run(load_run(tmp_path))
    ar, relaxed = summary.cells
    assert ar.repeats == relaxed.repeats == 3 and summary.n_units == 4
    assert ar.score == pytest.approx(np.mean([np.mean(f) for f in passes["ar"]]))
    assert relaxed.score == pytest.approx(np.mean([np.mean(f) for f in passes["relaxed"]]))
    assert relaxed.score_interval.value == pytest.approx(relaxed.score)
    assert relaxed.score_interval.low <= relaxed.score <= relaxed.score_interval.high
    assert relaxed.score_delta.value == pytest.approx(relaxed.score - ar.score)
    assert relaxed.mcnemar_p is None and relaxed.discordant is None
    assert relaxed.speedup_total.value == pytest.approx(2.0)  # each item's mean over its repeats, paired
    assert relaxed.truncated == 3 and ar.truncated == 0
    from relaxbench.report.tables import main_table, score_text

    assert score_text(relaxed, summary.binary).startswith(f"{100 * relaxed.score:.1f}% [")
    row = main_table(summary).rows[1]
    assert any(c.metric == "truncated" and c.text == "3/12 (25%)" for c in row.cells)
    from relaxbench.analysis.notices import Truncated, task_notices

    [truncated] = [f for f in task_notices(summary, load_run(tmp_path).cells_of("t")) if isinstance(f, Truncated)]
    assert truncated.level == "warning" and truncated.more_than_ar[0][0] == "relaxed"


def test_unit_helpers():
    group = [_sample(1, 1, 0, r, flag, 1.0) for r, flag in enumerate([True, False, True, True])]
    assert avg_at_n(group) == pytest.approx(0.75)
    assert unit_passed(group) is None and unit_passed(group[:1]) is True
    assert math.isclose(avg_at_n(group[2:]), 1.0)


def test_the_seed_column_is_in_the_store(first_run):
    assert {r["name"] for r in rows(first_run, "PRAGMA table_info(samples)")} >= {"seed"}
