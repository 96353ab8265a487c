"""Relaxation by drafter: each relaxed arm against exact verification with the same drafter and k, paired by unit,
in the tables ``compare``/``summary`` print, the report's table and its figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_reliability import DATA, run_main

METHODS = {"exact-ngram": "policy: exact\ndrafter:\n  kind: ngram\n",
           "typical-greedy-ngram": "policy: typical-greedy\ndrafter:\n  kind: ngram\n"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny run with two drafters (the draft model and prompt lookup), each with exact and typical-greedy."""
    folder = tmp_path_factory.mktemp("drafters")
    paths = []
    for name, text in METHODS.items():
        (folder / f"{name}.yaml").write_text(text)
        paths.append(str(folder / f"{name}.yaml"))
    out = folder / "run"
    from relaxbench.cli import main

    code = main(["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods",
                 ",".join(["exact", "typical-greedy", *paths]), "--tasks", "jsonl", "--data-file", f"jsonl={DATA}",
                 "--limit", "3", "--max-new-tokens", "12", "--report-format", "none", "--out", str(out)])
    assert code == 0
    return out


def _per_arm(run, arm: str) -> tuple[float, float]:
    """(MAL, total time) of one arm straight from its stored samples (one repeat: a unit is a sample)."""
    [cell] = [c for c in run.cells if c.arm == arm]
    emitted = sum(s.counters.emitted for s in cell.samples)
    rounds = sum(s.counters.rounds for s in cell.samples)
    return emitted / rounds, sum(s.time_total for s in cell.samples)


def test_each_rule_is_paired_with_exact_of_its_own_drafter(run_dir: Path):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.drafters import run_drafter_gains

    run = load_run(run_dir)
    summaries = summarize_run(run)
    [gains] = run_drafter_gains(run, summaries).values()
    assert {(g.drafter, g.arm, g.exact_arm) for g in gains} == {
        ("model (tiny-random-draft)", "typical-greedy", "exact"),
        ("ngram", "typical-greedy-ngram", "exact-ngram")}
    for gain in gains:
        mal, time = _per_arm(run, gain.arm)
        exact_mal, exact_time = _per_arm(run, gain.exact_arm)
        assert gain.mal_gain.value == pytest.approx(mal / exact_mal)
        assert gain.speed_gain.value == pytest.approx(exact_time / time)
        assert gain.mal == pytest.approx(mal) and gain.exact_mal == pytest.approx(exact_mal)
        assert gain.mal_gain.low <= gain.mal_gain.value <= gain.mal_gain.high
        assert gain.n_units == 3


def test_one_drafter_has_no_such_section(run_dir: Path):
    """With exact arms for one drafter only, the main table already says it all: no table, no figure."""
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.drafters import drafter_gains
    from relaxbench.analysis.metrics import complete_units

    run = load_run(run_dir)
    [summary] = summarize_run(run)
    cells = [c for c in run.cells if c.arm in ("ar", "exact", "typical-greedy")]
    assert drafter_gains(cells, summary.cells, complete_units(cells), run.draft) == ()


def test_summary_prints_the_table_and_the_report_draws_the_figure(run_dir: Path, capsys):
    from relaxbench.report.content import load_report

    result = run_main(capsys, "summary", str(run_dir), "--wide")
    assert result.returncode == 0, result.stderr
    assert "jsonl: relaxation by drafter" in result.stdout and "typical-greedy-ngram" in result.stdout
    report = load_report(run_dir)
    [section] = report.tasks
    assert [t.key for t in section.tables].count("jsonl-drafters") == 1
    [figure] = [f for f in section.figures if f.kind == "drafters"]
    assert figure.title == "jsonl: Relaxation by drafter"
    assert any(title == "Relaxation by drafter" for title, _ in report.figure_methods)


def test_the_speed_gain_is_priced_on_the_deployments_profile(run_dir: Path, capsys):
    """On a device profile each gain is also exact's proxy time over the rule's; the report prices it on the
    profile it ranks by and draws it as a third panel; without a deployment profile there is none."""
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.drafters import run_drafter_gains
    from relaxbench.analysis.proxy import choose_profiles, sample_proxy
    from relaxbench.report.content import load_report

    run = load_run(run_dir)
    profiles = choose_profiles(run, ["h100-sxm"]).profiles
    [h100] = [p for p in profiles if p.name == "h100-sxm"]
    [gains] = run_drafter_gains(run, summarize_run(run, profiles), profiles).values()
    cells = {cell.arm: cell for cell in run.cells}
    for gain in gains:
        totals = [sum(sample_proxy(h100, cells[arm], s).total for s in cells[arm].samples)
                  for arm in (gain.exact_arm, gain.arm)]
        assert gain.proxy_profile == "h100-sxm"
        assert gain.proxy_gain.value == pytest.approx(totals[0] / totals[1])
    machine_only = [p for p in profiles if p.name == "this-machine"]
    [unpriced] = run_drafter_gains(run, summarize_run(run, machine_only), machine_only).values()
    assert all(g.proxy_gain.value is None and g.proxy_profile is None for g in unpriced)
    result = run_main(capsys, "summary", str(run_dir), "--wide", "--profile", "h100-sxm")
    assert result.returncode == 0 and "proxy gain" in result.stdout
    report = load_report(run_dir, profiles=["h100-sxm"])
    [figure] = [f for f in report.tasks[0].figures if f.kind == "drafters"]
    assert len(figure.figure.axes) == 3 and "h100-sxm" in figure.figure.axes[2].get_title(loc="left")
