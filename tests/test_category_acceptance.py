"""Acceptance by item category (``summary`` and the report): MAL, acceptance rate, the AR-paired relaxed fraction
and per-position acceptance by category × arm, each recomputed here from the stored per-round columns of the
fixture store's samples; the heat map in the report; the categories where each relaxed rule's relaxation gains
most and least, named in the summary."""

from __future__ import annotations

import contextlib
import io
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.report_fixture import build_fixture_run

TASK = "chat"  # the fixture's task with item categories (writing, coding)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> Path:
    return build_fixture_run(tmp_path_factory.mktemp("categories") / "fixture")


def from_rounds(run_dir: Path) -> dict[tuple[str, str], dict[str, object]]:
    """(category, arm) → MAL, acceptance rate, relaxed fraction and per-position acceptance, from the rounds."""
    from relaxbench.analysis import load_run

    sums: dict[tuple[str, str], dict[str, object]] = defaultdict(
        lambda: {"emitted": 0, "rounds": 0, "drafted": 0, "accepted": 0, "relaxed": 0, "drafts": 0,
                 "at": defaultdict(int)})
    for cell in load_run(run_dir).cells_of(TASK):
        for sample in cell.samples:
            s = sums[(sample.category, cell.arm)]
            s["emitted"] += sum(sample.rounds.emitted)
            s["rounds"] += len(sample.rounds.emitted)
            s["drafted"] += sum(sample.rounds.drafted)
            s["accepted"] += sum(sample.rounds.accepted)
            s["relaxed"] += sum(sample.rounds.relaxed)
            for drafted, accepted in zip(sample.rounds.drafted, sample.rounds.accepted):
                if drafted:
                    s["drafts"] += 1
                    for i in range(accepted):
                        s["at"][i] += 1
    out = {}
    for key, s in sums.items():
        width = max(s["at"], default=-1) + 1
        out[key] = {"mal": s["emitted"] / s["rounds"], "rate": s["accepted"] / s["drafted"] if s["drafted"] else None,
                    "relaxed": s["relaxed"] / s["emitted"],
                    "positions": [s["at"][i] / s["drafts"] for i in range(width)] if s["drafts"] else []}
    return out


def test_category_counters_equal_the_stored_rounds(fixture_run):
    from relaxbench.analysis import load_run, summarize_run

    expected = from_rounds(fixture_run)
    summary = next(s for s in summarize_run(load_run(fixture_run)) if s.task == TASK)
    checked = 0
    for cell in summary.cells:
        assert set(cell.acceptance.categories) == {"coding", "writing"}
        for name, part in cell.acceptance.categories.items():
            want = expected[(name, cell.arm)]
            assert part.mean_acceptance_length == pytest.approx(want["mal"])
            assert part.relaxed_fraction == pytest.approx(want["relaxed"])
            if want["rate"] is None:
                assert part.acceptance_rate is None and part.acceptance_by_position == ()
            else:
                assert part.acceptance_rate == pytest.approx(want["rate"])
                positions = list(part.acceptance_by_position)
                assert positions[:len(want["positions"])] == pytest.approx(want["positions"])
                assert all(p == 0 for p in positions[len(want["positions"]):])
            checked += 1
    assert checked == 2 * len(summary.cells)


def test_summary_prints_the_category_tables_and_names_where_relaxation_gains(fixture_run):
    from relaxbench.cli import main

    expected = from_rounds(fixture_run)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["summary", str(fixture_run), "--wide"]) == 0
    text = buffer.getvalue()
    block = text.split(f"{TASK}: acceptance by category")[1].split(f"{TASK}: acceptance by draft position")[0]
    for (name, arm), want in expected.items():
        row = next(line for line in block.splitlines() if re.match(rf"│ {name} +│ {re.escape(arm)} +│", line))
        assert f" {want['mal']:.2f} " in row and f" {want['relaxed']:.1%} " in row, row
    positions = text.split(f"{TASK}: acceptance by draft position and category")[1]
    row = next(line for line in positions.splitlines() if re.match(r"│ writing +│ exact +│", line))
    assert f" {expected[('writing', 'exact')]['positions'][0]:.1%} " in row
    # every relaxed arm of the fixture: where its MAL gains most over the lossless exact arm, and where least
    caption = " ".join(block.split())
    for arm in {a for _, a in expected} - {"ar", "exact"}:
        gains = {c: expected[(c, arm)]["mal"] - expected[(c, "exact")]["mal"] for c in ("coding", "writing")}
        most, least = max(gains, key=gains.get), min(gains, key=gains.get)
        assert (f"{arm} gains most in {most} ({gains[most]:+.2f} MAL) and least in {least} "
                f"({gains[least]:+.2f} MAL) over exact.") in caption


def test_the_report_has_the_category_table_and_heat_map(fixture_run, tmp_path):
    from relaxbench.cli import main

    expected = from_rounds(fixture_run)
    assert main(["report", str(fixture_run), "--format", "html", "--out", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    assert f'id="fig-{TASK}-categories"' in html and "Acceptance by category" in html
    for (name, arm), want in expected.items():
        found = re.findall(rf'data-metric="acceptance\.categories\.{name}\.mean_acceptance_length" '
                           rf'data-value="([^"]+)"', html)
        assert any(float(v) == pytest.approx(want["mal"]) for v in found), (name, arm)


def test_a_task_without_categories_has_no_category_tables(fixture_run):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.report.figures import category_heatmap
    from relaxbench.report.tables import task_tables

    summary = next(s for s in summarize_run(load_run(fixture_run)) if s.task == "tiny-code")
    assert not any("acceptance-" in t.key for t in task_tables(summary))
    assert category_heatmap(summary) is None
