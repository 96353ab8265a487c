"""The draft length as a swept knob: a method's sweep may vary ``k`` and drafter knobs (``drafter.NAME``) besides
its policy knobs; the trade-off plot draws the strict rule's curve over k next to the relaxed rules, a relaxed
grid over (knob, k) as one line over k per knob value."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.errors import ConfigError
from relaxbench.harness.plan import build_arms
from relaxbench.harness.suite import SuiteSpec
from relaxbench.methods import load_method
from relaxbench.report.figures import lines_of, method_palette, tradeoff
from tests.report_fixture import build_fixture_run


def test_a_sweep_varies_k_drafter_knobs_and_policy_knobs(tmp_path: Path):
    method = tmp_path / "grid.yaml"
    method.write_text("policy: fly\nknobs: {window: 6}\ndrafter: {kind: ngram, max_ngram: 3}\n"
                      "sweep:\n  k: [3, 10]\n  drafter.max_ngram: [2, 4]\n  theta: [0.3]\n")
    points = load_method(str(method)).expand()
    assert [p.name for p in points] == [
        "grid[drafter.max_ngram=2,k=3,theta=0.3]", "grid[drafter.max_ngram=2,k=10,theta=0.3]",
        "grid[drafter.max_ngram=4,k=3,theta=0.3]", "grid[drafter.max_ngram=4,k=10,theta=0.3]"]
    assert [(p.k, p.drafter.knobs["max_ngram"], p.knobs) for p in points[:2]] == [
        (3, 2, {"window": 6, "theta": 0.3}), (10, 2, {"window": 6, "theta": 0.3})]
    assert all(p.drafter.kind == "ngram" and not p.sweep for p in points)
    arms = build_arms(SuiteSpec(target="t", draft="d", methods=(str(method), "strict-k-sweep"), tasks=("jsonl",)))
    assert [a.k for a in arms] == [0, 3, 10, 3, 10, 3, 5, 10, 20]
    assert arms[-1].name == "strict-k-sweep[k=20]" and arms[-1].method.policy == "speculative-sampling"
    with pytest.raises(ConfigError, match="sweeps the draft length k, which -k 4 would override"):
        build_arms(SuiteSpec(target="t", draft="d", methods=("strict-k-sweep",), tasks=("jsonl",), k=4))
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: exact\nsweep: {k: [0, 3]}\n")
    with pytest.raises(ConfigError, match="'k' values must be positive integers"):
        load_method(str(bad))


def test_the_paper_grids_cover_knob_values_times_draft_lengths():
    cactus = load_method("cactus-paper-grid").expand()
    assert len(cactus) == 16 and {(p.knobs["delta"], p.k) for p in cactus} == {
        (d, k) for d in (0.1, 0.25, 1.0, 10.0) for k in (3, 5, 10, 20)}
    assert [p.k for p in load_method("strict-k-sweep").expand()] == [3, 5, 10, 20]
    assert {p.knobs["w"] for p in load_method("always-accept-k-sweep").expand()} == {0.0}


def test_tradeoff_plot_draws_the_strict_curve_over_k_next_to_relaxed_lines(tmp_path: Path):
    summary = summarize_run(load_run(build_fixture_run(tmp_path / "run")))[0]
    exact = next(c for c in summary.cells if c.arm == "exact")
    fly = next(c for c in summary.cells if c.method == "fly-sweep")
    def faster(cell, value):  # the summary's speed part with another total speed-up
        return replace(cell.speed, speedup_total=replace(cell.speedup_total, value=value))

    strict = [replace(exact, arm=f"strict-k-sweep[k={k}]", method="strict-k-sweep", k=k,
                      speed=faster(exact, 1.0 + k / 10)) for k in (10, 3, 20, 5)]
    grid = [replace(fly, arm=f"grid[k={k},theta={t}]", method="grid", k=k, knobs={"theta": t, "window": 6},
                    speed=faster(fly, 1.0 + k / 8 + t))
            for t in (0.3, 0.6) for k in (3, 10)]
    swept = replace(summary, cells=(summary.cells[0], *strict, *grid))
    assert [label for label, _ in lines_of(grid)] == ["theta=0.3", "theta=0.6"]
    assert lines_of(strict) == [("", strict)]  # k alone: one line in sweep order
    figure = tradeoff(swept, method_palette(["ar", "strict-k-sweep", "grid"]))
    lines = figure.figure.axes[0].get_lines()
    by_label = {line.get_label(): line for line in lines}
    curve = by_label["strict-k-sweep (lossless)"]
    assert curve.get_marker() == "s" and list(curve.get_xdata()) == [c.speedup_total.value for c in strict]
    relaxed = [line for line in lines if "grid" in line.get_label()]
    assert len(relaxed) == 2 and relaxed[0].get_label() == "grid (relaxed)"
    assert relaxed[1].get_label().startswith("_")  # one legend entry per method
    assert list(relaxed[0].get_xdata()) == sorted(relaxed[0].get_xdata())  # joined over k
    texts = [t.get_text() for t in figure.figure.axes[0].texts]
    assert "k=3" in texts and "k=20" in texts and "theta=0.6" in texts
