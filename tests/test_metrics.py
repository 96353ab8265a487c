"""Metrics against values computed by hand, on a fixture store written through the Store API (no models)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.analysis.metrics import bootstrap_interval, mcnemar_exact, mean
from relaxbench.decoding.records import Rounds
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now


def cell_def(task: str, arm: str, position: int, scorer: str = "code-exec", k: int = 4) -> CellDefinition:
    baseline = arm == "ar"
    return CellDefinition(task=task, arm=arm, position=position, is_baseline=baseline, method=arm,
                          policy="none" if baseline else "exact", lossless=True, knobs={}, method_spec={"name": arm},
                          drafter=None if baseline else {"kind": "model", "knobs": {}}, k=0 if baseline else k,
                          decode={}, task_spec={"name": task}, scorer=scorer, data_fingerprint="f")


def sample(cell_id: int, session_id: int, item: str, index: int, *, time: float, rounds: list[tuple[int, int, int]],
           score: float | None = None, passed: bool | None = None, repeat: int = 0, turn: int = 0,
           category: str | None = None, details: dict | None = None, relaxed: int = 0) -> SampleRow:
    """``rounds``: (drafted, accepted, emitted) per round."""
    drafted = tuple(r[0] for r in rounds)
    accepted = tuple(r[1] for r in rounds)
    emitted = tuple(r[2] for r in rounds)
    relaxed_rounds = (relaxed,) + (0,) * (len(rounds) - 1)
    return SampleRow(
        cell_id=cell_id, session_id=session_id, item_id=item, item_index=index, turn=turn, repeat=repeat,
        category=category, created_at=now(), prompt_ids=(1,), output_ids=tuple(range(sum(emitted))),
        output_text="x", stop_reason="length", n_prompt_tokens=1, n_output_tokens=sum(emitted), n_rounds=len(rounds),
        n_drafted=sum(drafted), n_accepted=sum(accepted), n_relaxed=relaxed, time_total=time, time_prefill=0.0,
        time_draft=0.0, time_verify=0.0, time_policy=0.0, rounds=Rounds.of(drafted=drafted, accepted=accepted,
        relaxed=relaxed_rounds, emitted=emitted),
        score=score, passed=passed, score_details=details or {}, matches_baseline=None, divergence=None)


@pytest.fixture
def fixture_store(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        run_id = store.open_run("fixture", "t", "d", {"target": "t"})
        session = store.start_session(run_id, {"command": "test"})
        # task "speed": two items; AR takes 2 s and 4 s, the method 1 s each -> per-item speed-ups 2 and 4
        ar = store.ensure_cell(run_id, cell_def("speed", "ar", 0))
        fast = store.ensure_cell(run_id, cell_def("speed", "fast", 1))
        for index, (item, t) in enumerate((("a", 2.0), ("b", 4.0))):
            store.add_sample(sample(ar, session, item, index, time=t, rounds=[(0, 0, 1)] * 6, score=1.0, passed=True))
        # item a: rounds (4 drafted, 3 accepted, 4 emitted) and (4, 0, 1); item b: (4, 4, 5) and (2, 1, 1)
        store.add_sample(sample(fast, session, "a", 0, time=1.0, rounds=[(4, 3, 4), (4, 0, 1)], score=1.0, passed=True,
                                relaxed=1))
        store.add_sample(sample(fast, session, "b", 1, time=1.0, rounds=[(4, 4, 5), (2, 1, 1)], score=0.0,
                                passed=False))
        # task "repeats": one item timed twice per arm; a unit's time is the mean over its repeats
        ar_r = store.ensure_cell(run_id, cell_def("repeats", "ar", 0))
        twice = store.ensure_cell(run_id, cell_def("repeats", "twice", 1))
        for repeat, (t_ar, t_m) in enumerate(((2.0, 1.0), (4.0, 2.0))):
            store.add_sample(sample(ar_r, session, "r", 0, time=t_ar, rounds=[(0, 0, 1)], repeat=repeat))
            store.add_sample(sample(twice, session, "r", 0, time=t_m, rounds=[(4, 0, 1)], repeat=repeat))
        # task "quality": six items; AR passes all, the method fails five -> McNemar on 5 discordant pairs
        ar_q = store.ensure_cell(run_id, cell_def("quality", "ar", 0))
        bad = store.ensure_cell(run_id, cell_def("quality", "bad", 1))
        for index in range(6):
            item = f"q{index}"
            store.add_sample(sample(ar_q, session, item, index, time=1.0, rounds=[(0, 0, 1)] * 4, score=1.0,
                                    passed=True, category="even" if index % 2 == 0 else "odd"))
            ok = index == 0
            store.add_sample(sample(bad, session, item, index, time=0.5, rounds=[(4, 2, 3), (4, 0, 1)],
                                    score=float(ok), passed=ok, category="even" if index % 2 == 0 else "odd"))
        # an unfinished unit (only AR has it) is left out of every figure
        store.add_sample(sample(ar_q, session, "q6", 6, time=100.0, rounds=[(0, 0, 1)], score=0.0, passed=False))
    return path


def by_arm(path: Path, task: str):
    summary = next(s for s in summarize_run(load_run(path)) if s.task == task)
    return summary, {c.arm: c for c in summary.cells}


def test_counters_and_speedups_match_hand_computation(fixture_store: Path):
    summary, cells = by_arm(fixture_store, "speed")
    fast = cells["fast"]
    assert summary.n_units == 2 and fast.n_samples == 2
    assert fast.mean_acceptance_length == pytest.approx(11 / 4)  # 4+1+5+1 emitted over 4 rounds
    assert fast.acceptance_rate == pytest.approx(8 / 14)  # 3+0+4+1 accepted of 4+4+4+2 drafted
    # vLLM's convention, accepted at position i / rounds with a draft (4): rounds (4,3) (4,0) (4,4) (2,1) accept
    # position 0 in 3 rounds, 1 in 2, 2 in 2, 3 in 1 (the last round drafted only 2: not accepted at 2 or 3)
    assert fast.acceptance_by_position == pytest.approx((3 / 4, 2 / 4, 2 / 4, 1 / 4))
    assert fast.relaxed_fraction == pytest.approx(1 / 11)
    assert fast.output_length_ratio == pytest.approx(11 / 12)  # AR emitted 6 + 6
    assert fast.speedup_total.value == pytest.approx(3.0)  # (2 + 4) / (1 + 1)
    assert fast.speedup_geomean.value == pytest.approx(math.sqrt(8))  # sqrt(2 * 4)
    # with two units, the bootstrap resamples (a,a) -> 2, (b,b) -> 4 each a quarter of the time, so the 2.5% and
    # 97.5% percentiles are exactly the per-item speed-ups
    assert (fast.speedup_total.low, fast.speedup_total.high) == pytest.approx((2.0, 4.0))
    assert (fast.speedup_geomean.low, fast.speedup_geomean.high) == pytest.approx((2.0, 4.0))
    assert fast.latency_mean == pytest.approx(1.0) and cells["ar"].latency_mean == pytest.approx(3.0)
    assert fast.tokens_per_second == pytest.approx(11 / 2)
    assert cells["ar"].mean_acceptance_length == 1.0 and cells["ar"].acceptance_rate is None


def test_repeats_are_averaged_per_unit(fixture_store: Path):
    summary, cells = by_arm(fixture_store, "repeats")
    assert summary.n_units == 1 and cells["twice"].n_samples == 2
    assert cells["twice"].latency_mean == pytest.approx(1.5) and cells["ar"].latency_mean == pytest.approx(3.0)
    assert cells["twice"].speedup_total.value == pytest.approx(2.0)
    assert cells["twice"].speedup_total.low is None  # one unit: no interval


def test_capability_and_mcnemar_match_hand_computation(fixture_store: Path):
    summary, cells = by_arm(fixture_store, "quality")
    bad = cells["bad"]
    assert summary.binary and summary.n_units == 6  # the unit only AR finished is left out
    assert cells["ar"].score == 1.0 and bad.score == pytest.approx(1 / 6)
    assert bad.discordant == (5, 0)
    assert bad.mcnemar_p == pytest.approx(2 * 0.5 ** 5)  # 0.0625: two-sided binomial, 5 of 5 discordant one way
    assert bad.accuracy_retained == pytest.approx(1 / 6)
    # differences: one 0 and five -1. Bootstrap mean: P(all -1) = (5/6)^6 = 0.33 > 2.5% -> low = -1;
    # P(>= 4 zeros) = 0.9% < 2.5% < P(>= 3 zeros) = 6.2% -> high = -3/6
    assert bad.score_delta.value == pytest.approx(-5 / 6)
    assert (bad.score_delta.low, bad.score_delta.high) == pytest.approx((-1.0, -0.5))
    assert bad.speedup_total.value == pytest.approx(2.0)
    assert set(bad.by_category) == {"even", "odd"}
    assert bad.by_category["even"].score == pytest.approx(1 / 3) and bad.by_category["odd"].score == 0.0


def test_cis_are_reproducible_and_tighten_with_more_samples():
    import numpy as np

    rng = np.random.default_rng(1)
    small, large = rng.normal(0, 1, 20), rng.normal(0, 1, 400)
    assert bootstrap_interval((small,), mean) == bootstrap_interval((small,), mean)
    low_s, high_s = bootstrap_interval((small,), mean)
    low_l, high_l = bootstrap_interval((large,), mean)
    assert low_s < small.mean() < high_s and low_l < large.mean() < high_l
    assert high_l - low_l < (high_s - low_s) / 2
    assert bootstrap_interval((np.array([1.0]),), mean) == (None, None)


def test_mcnemar_known_cases():
    assert mcnemar_exact([True] * 4, [True] * 4) == (1.0, (0, 0))
    p, discordant = mcnemar_exact([True, True, False, True, True, True, True, True],
                                  [False, False, True, False, False, False, False, True])
    assert discordant == (6, 1)
    assert p == pytest.approx(2 * (1 + 7) / 2 ** 7)  # P(X <= 1) for Binomial(7, 1/2), doubled


def test_proxy_speedup_is_the_speedup_of_proxy_times(tmp_path: Path):
    """The run's machine profile prices every arm (one table, so load at one moment cannot favour an arm), and the
    proxy speed-ups are ``speedups`` of the per-unit proxy times: the same definition as the measured ones."""
    from relaxbench.analysis.metrics import speedups
    from relaxbench.analysis.proxy import choose_profiles

    machine = {"name": "this-machine", "kind": "measured", "device": "test",
               "target": {"model": "t", "dtype": "float32",
                          "forward": {"new_tokens": [1, 5], "context": [0, 100], "seconds": [[0.010, 0.012]] * 2},
                          "prefill": {"tokens": [1, 100], "seconds": [0.0, 0.0]}},
               "draft": {"model": "d", "dtype": "float32",
                         "forward": {"new_tokens": [1, 2], "context": [0, 100], "seconds": [[0.002, 0.002]] * 2},
                         "prefill": {"tokens": [1, 100], "seconds": [0.0, 0.0]}}}
    with Store(tmp_path / "results.sqlite") as store:
        run_id = store.open_run("cal", "t", "d", {})
        session = store.start_session(run_id, {"command": "test"})
        store.add_machine_profile(session, machine)
        ar = store.ensure_cell(run_id, cell_def("cal", "ar", 0))
        arm = store.ensure_cell(run_id, cell_def("cal", "arm", 1))
        for index, item in enumerate("ij"):  # item i: one round of 4 drafts; item j: two rounds
            store.add_sample(sample(ar, session, item, index, time=1.0, rounds=[(0, 0, 1)] * 4))
            rounds = [(4, 3, 4)] if item == "i" else [(4, 1, 2), (4, 1, 2)]
            store.add_sample(sample(arm, session, item, index, time=1.0, rounds=rounds))
    run = load_run(tmp_path)
    cell = summarize_run(run, choose_profiles(run).profiles)[0].cells[1]
    # no draft forwards recorded by this helper: estimated as one 1-token forward per drafted token (approximate)
    proxy = cell.proxy["this-machine"]
    assert proxy.approximate and proxy.outside_grid == 0
    ar_times = [4 * 0.010, 4 * 0.010]
    arm_times = [0.012 + 4 * 0.002, 2 * (0.012 + 4 * 0.002)]
    total, geo = speedups(np.array(ar_times), np.array(arm_times))
    assert proxy.total == total and proxy.geomean == geo
    assert proxy.total.value == pytest.approx(0.08 / 0.06)
    assert summarize_run(run)[0].cells[1].proxy == {}  # priced on nothing when no profile is given


def test_counters_add_and_define_each_ratio_once():
    from relaxbench.decoding.records import Counters

    # rounds (drafted, accepted): (4, 3) (4, 0) and (2, 1); 9 tokens emitted, 1 of them relaxed
    a = Counters.of_rounds([4, 4], [3, 0], [1, 0], emitted=5)
    b = Counters.of_rounds([2], [1], [0], emitted=4)
    total = sum((a, b), Counters())
    assert (total.emitted, total.rounds, total.drafted, total.accepted, total.relaxed) == (9, 3, 10, 4, 1)
    assert total.accepted_per_position == (2, 1, 1, 0) and total.drafted_per_position == (3, 3, 2, 2)
    assert total.mean_acceptance_length == 3.0 and total.acceptance_rate == 0.4
    assert total.relaxed_fraction == pytest.approx(1 / 9)  # relaxed / emitted, everywhere
    assert total.drafts == 3 and total.acceptance_by_position == pytest.approx((2 / 3, 1 / 3, 1 / 3, 0.0))
    # it sums to the mean accepted drafts per round with a draft, as vLLM's mean acceptance length - 1
    assert sum(total.acceptance_by_position) == pytest.approx(total.accepted / total.drafts)
    ar = Counters.of_rounds([0, 0], [0, 0], [0, 0], emitted=2)
    assert ar.mean_acceptance_length == 1.0 and ar.acceptance_rate is None and ar.acceptance_by_position == ()
    assert Counters().mean_acceptance_length is None and Counters().relaxed_fraction is None


def test_one_speed_up_and_the_benchmarks_quantities_named_apart():
    """"speed-up" means the report's (Σ AR time / Σ method time, and its geomean and proxy variants); the
    benchmarks' ratios have their own names and definitions in the same list, which the report leaves out."""
    from relaxbench.analysis.metrics import (
        BENCHMARK_METRICS,
        METRIC_DEFINITIONS,
        metric_definition,
        report_definitions,
    )

    names = [name for name, _ in METRIC_DEFINITIONS]
    assert len(names) == len(set(names))
    assert [n for n in names if "speed-up" in n] == ["speed-up (total)", "speed-up (geomean)",
                                                     "proxy speed-up (profile)"]
    assert BENCHMARK_METRICS <= set(names) and not any("speed-up" in n for n in BENCHMARK_METRICS)
    assert "prefill is left out" in metric_definition("decode-rate ratio")
    assert "not a method with AR" in metric_definition("engine ratio")
    assert {n for n, _ in report_definitions()} == set(names) - BENCHMARK_METRICS
    with pytest.raises(KeyError, match="no metric named 'speedup'"):
        metric_definition("speedup")
