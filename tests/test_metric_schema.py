"""The metric schema (relaxbench/analysis/schema.py) is the one place a metric is declared: every record's
formatter exists and its path reads a figure of a real summary, and a metric added in a test (one record and the
function that computes it) shows in the terminal table, the HTML report and the generated docs table."""

from __future__ import annotations

import contextlib
import io
import statistics
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from relaxbench.analysis import schema
from relaxbench.analysis.schema import TABLES, Metric, table_metrics
from tests.report_fixture import build_fixture_run


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> Path:
    return build_fixture_run(tmp_path_factory.mktemp("schema") / "fixture")


def test_every_format_resolves_and_every_path_reads_a_summary_figure(fixture_run):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.report.tables import FORMATTERS

    cell = summarize_run(load_run(fixture_run))[0].cells[1]
    for metric in schema.metrics():
        assert metric.better in schema.BETTER, metric
        if not metric.table:
            assert not metric.key, f"{metric.name}: a key without a table"
            continue
        assert metric.format in FORMATTERS, f"{metric.name}: no formatter {metric.format!r}"
        if metric.format not in ("proxy_total", "proxy_geomean"):
            cell.value(metric.path)  # raises AttributeError on a path the summary does not have
    for table in TABLES:
        labels = [m.column for m in table_metrics(table)]
        assert len(labels) == len(set(labels)), f"table {table}: a column label twice"
    names = [name for name, _ in schema.definitions()]
    assert len(names) == len(set(names)), "a metric defined twice"


def mean_output_tokens(samples) -> float | None:
    return statistics.fmean(s.n_output_tokens for s in samples) if samples else None


NEW = Metric("mean output tokens", "output tokens per sample, mean over the paired samples",
             "mean_output_tokens", "out tokens", "main", 75, spec=".1f", unit="tokens", better="",
             narrow=False, compute=mean_output_tokens)


class Cells(HTMLParser):
    """(data-metric → [(text, data-value)]) of every table cell of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, list[tuple[str, str | None]]] = {}
        self._open: tuple[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "td" and "data-metric" in found:
            self._open, self._text = (found["data-metric"], found.get("data-value")), ""

    def handle_data(self, data):
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "td" and self._open is not None:
            self.cells.setdefault(self._open[0], []).append((self._text.strip(), self._open[1]))
            self._open = None


def test_a_metric_added_in_a_test_shows_in_the_terminal_the_html_and_the_docs(fixture_run, tmp_path, monkeypatch):
    from relaxbench.analysis import load_run
    from relaxbench.cli import main
    from relaxbench.commands.listing import markdown

    monkeypatch.setattr(schema, "METRICS", (*schema.METRICS, NEW))
    run = load_run(fixture_run)
    # the figure recomputed from the stored samples of each arm (every unit of the fixture is paired)
    expected = {(c.task, c.arm): statistics.fmean(s.n_output_tokens for s in c.samples) for c in run.cells}

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["summary", str(fixture_run), "--wide"]) == 0
    wide = buffer.getvalue()
    assert "out tokens" in wide
    for task in run.tasks():
        block = wide.split(f"{task}: speed and")[1].split("\n\n")[0]
        for (name, arm), value in expected.items():
            if name == task:
                row = next(line for line in block.splitlines() if line.startswith(f"│ {arm} "))
                assert f" {value:.1f} " in row, (task, arm, row)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["summary", str(fixture_run)]) == 0
    assert "out tokens" in buffer.getvalue().split("Not shown to fit 120 columns:")[1]  # --wide only

    assert main(["report", str(fixture_run), "--format", "html", "--out", str(tmp_path)]) == 0
    page = Cells()
    page.feed((tmp_path / "report.html").read_text())
    shown = page.cells["mean_output_tokens"]
    assert sorted(float(v) for _, v in shown) == pytest.approx(sorted(expected.values()))
    assert sorted(t for t, _ in shown) == sorted(f"{v:.1f}" for v in expected.values())
    assert "output tokens per sample, mean over the paired samples" in (tmp_path / "report.html").read_text()

    table = markdown("metrics")
    row = next(line for line in table.splitlines() if line.startswith("| mean output tokens |"))
    assert "output tokens per sample" in row and "speed and capability: out tokens" in row


def test_a_narrow_metric_is_among_the_columns_the_terminal_keeps(monkeypatch):
    from relaxbench.report.tables import schema_columns, schema_essential

    monkeypatch.setattr(schema, "METRICS", (*schema.METRICS, replace(NEW, narrow=True)))
    assert "out tokens" in schema_columns("main", narrow=True)
    assert "out tokens" in schema_essential("main", ("this-machine",))
