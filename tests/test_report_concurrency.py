"""Speed against concurrency in ``relaxbench report`` and ``relaxbench summary``, without vLLM: a store written
through the Store API holding vLLM-shaped runs (per-request time per output token, batches with their wall time)
of one suite at concurrency 1 and 4, beside runs that must not be read with them (another temperature, an edited
method). The report gains the section (table and figure per task) with numbers recomputed here from the stored
times; a run at one concurrency, or a transformers run, has no such section. ``compare --engine vllm
--concurrency 1,4`` (its executor replaced by the in-process one) ends with a report that has it."""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from relaxbench.cli import main
from relaxbench.decoding.records import Rounds
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now
from tests.report_fixture import build_fixture_run
from tests.test_report import cells_by_metric, parse, poppler

TASKS = ("code", "chat")
ARMS = (("ar", "none", True, 0), ("exact", "exact", True, 4), ("fly", "fly", False, 4))
ITEMS = 5
# per concurrency: AR's time for unit 0, and each arm's speed-up over AR (varied per unit below)
LEVELS = {1: (2.0, {"exact": 1.6, "fly": 2.4}), 4: (3.0, {"exact": 1.2, "fly": 1.5})}
SUITE = {"target": "t", "draft": "ngram", "methods": ["exact", "fly"], "tasks": list(TASKS), "engine": "vllm",
         "temperature": 0.0, "limit": 5, "warmup": 1, "profiles": []}


@dataclass(frozen=True)
class Stored:
    """What the builder stored for one (task, arm, concurrency): the samples' tokens, times and time per output
    token, and the wall time of the arm's one batch."""

    tokens: tuple[int, ...]
    times: tuple[float, ...]
    tpots: tuple[float, ...]
    wall: float


def cell(task: str, arm: str, policy: str, lossless: bool, k: int, position: int,
         description: str = "fixture method") -> CellDefinition:
    return CellDefinition(task=task, arm=arm, position=position, is_baseline=arm == "ar", method=arm, policy=policy,
                          lossless=lossless, knobs={}, method_spec={"name": arm, "description": description},
                          drafter=None if arm == "ar" else {"kind": "ngram", "knobs": {}}, k=k,
                          decode={"k": k, "max_new_tokens": 32}, task_spec={"name": task, "description": task},
                          scorer="agreement", data_fingerprint="fp")


def sample(cell_id: int, session: int, index: int, tokens: int, seconds: float, tpot: float, batch: dict,
           concurrency: int) -> SampleRow:
    return SampleRow(cell_id=cell_id, session_id=session, item_id=f"i{index}", item_index=index, turn=0, repeat=0,
                     category=None, created_at=now(), prompt_ids=(1, 2), output_ids=tuple(range(tokens)),
                     output_text="x", stop_reason="eos", n_prompt_tokens=2, n_output_tokens=tokens, n_rounds=tokens,
                     n_drafted=0, n_accepted=0, n_relaxed=0, time_total=seconds, time_prefill=0.05, time_draft=0.0,
                     time_verify=0.0, time_policy=0.0, rounds=Rounds.of(drafted=(0,) * tokens, accepted=(0,) * tokens,
                     relaxed=(0,) * tokens, emitted=(1,) * tokens, t_draft=(0.0,) * tokens, t_verify=(0.0,) * tokens,
                     t_policy=(0.0,) * tokens), score=1.0, passed=None,
                     score_details={}, matches_baseline=None, divergence=None, time_to_first_token=0.05,
                     time_per_output_token=tpot, concurrency=concurrency, engine_metrics={"batch": batch})


def write_run(store: Store, key: str, concurrency: int, suite: dict, description: str = "fixture method",
              scale: float = 1.0) -> tuple[int, dict[tuple[str, str], Stored]]:
    """One vLLM-shaped run: every arm of every task on ITEMS units, one batch per arm."""
    run_id = store.open_run(key, "t", "ngram", {**suite, "concurrency": [concurrency]})
    session = store.start_session(run_id, {"command": "relaxbench compare --engine vllm", "device": "cpu"})
    base, ratios = LEVELS[concurrency]
    stored = {}
    for task in TASKS:
        for position, (arm, policy, lossless, k) in enumerate(ARMS):
            cell_id = store.ensure_cell(run_id, cell(task, arm, policy, lossless, k, position, description))
            tokens = tuple(12 + 3 * i for i in range(ITEMS))
            ar_times = [scale * base * (1 + 0.25 * i) for i in range(ITEMS)]
            times = tuple(t if arm == "ar" else t / ratios[arm] * (1 + 0.15 * (i % 3 - 1))
                          for i, t in enumerate(ar_times))
            tpots = tuple((t - 0.05) / (n - 1) for t, n in zip(times, tokens))
            wall = (sum(times) if concurrency == 1 else max(times)) * 1.1
            batch = {"id": f"{key}/{task}/{arm}", "wall": wall, "size": ITEMS}
            for i in range(ITEMS):
                store.add_sample(sample(cell_id, session, i, tokens[i], times[i], tpots[i], batch, concurrency))
            stored[(task, arm)] = Stored(tokens, times, tpots, wall)
    store.finish_session(session, "finished")
    return run_id, stored


@dataclass(frozen=True)
class ConcurrencyStore:
    path: Path
    run_ids: dict[int, int]  # concurrency -> run id of the siblings
    stored: dict[tuple[str, str, int], Stored]
    others: tuple[int, ...]  # run ids that must not be read with them


@pytest.fixture(scope="module")
def concurrency_store(tmp_path_factory) -> ConcurrencyStore:
    path = tmp_path_factory.mktemp("vllm") / "run"
    path.mkdir()
    run_ids, stored = {}, {}
    with Store(path / "results.sqlite") as store:
        # another temperature (a key field) and an edited method file: other runs, not other concurrencies
        hot, _ = write_run(store, "hot-c4", 4, {**SUITE, "temperature": 0.7}, scale=5.0)
        edited, _ = write_run(store, "edited-c1", 1, SUITE, description="edited", scale=7.0)
        for level in LEVELS:  # the last, at concurrency 4, is the report's default run (the latest)
            suite = SUITE if level == 1 else {**SUITE, "limit": 8, "warmup": 0}  # fields outside the run key
            run_ids[level], by_arm = write_run(store, f"run-c{level}", level, suite)
            stored.update({(task, arm, level): s for (task, arm), s in by_arm.items()})
    return ConcurrencyStore(path, run_ids, stored, (hot, edited))


def expected_speedup(ar: Stored, arm: Stored) -> float:
    """The geometric mean over units of AR time / arm time, from the stored times."""
    return math.exp(np.mean([math.log(a / b) for a, b in zip(ar.times, arm.times)]))


class TableRows(HTMLParser):
    """Every row of every table of a page, in order, as {metric: cell} (the arm under "arm"): a concurrency table has
    a row per arm and concurrency, so rows are not keyed by arm alone."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, dict]]] = {}
        self._table: str | None = None
        self._cell: dict | None = None
        self._row: list[dict] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("data-table")
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and a.get("data-row") is not None:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = {**a, "text": ""}

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append({"arm": self._row[0], **cells_by_metric(self._row)})
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def table_rows(html: str, key: str) -> list[dict[str, dict]]:
    parser = TableRows()
    parser.feed(html)
    return parser.tables[key]


def check_table(rows: list[dict[str, dict]], task: str, store: ConcurrencyStore) -> None:
    """Every (arm, concurrency) row of a task's table against the stored samples."""
    by_level = {(row["arm"]["text"], int(float(row["concurrency"]["data-value"]))): row for row in rows}
    assert len(by_level) == len(rows) == len(ARMS) * len(LEVELS)
    assert set(by_level) == {(arm, level) for arm, _, _, _ in ARMS for level in LEVELS}
    for (arm, level), cells in by_level.items():
        stored, ar = store.stored[(task, arm, level)], store.stored[(task, "ar", level)]
        assert int(cells["samples"]["text"]) == ITEMS
        assert float(cells["tokens_per_second"]["data-value"]) == pytest.approx(sum(stored.tokens) / stored.wall)
        assert cells["tokens_per_second"]["text"] == f"{sum(stored.tokens) / stored.wall:.2f}"
        assert float(cells["time_per_output_token"]["data-value"]) == pytest.approx(np.mean(stored.tpots))
        assert cells["time_per_output_token"]["text"] == f"{np.mean(stored.tpots) * 1e3:.1f}"
        speedup = expected_speedup(ar, stored)
        assert float(cells["speedup"]["data-value"]) == pytest.approx(speedup)
        assert cells["speedup"]["text"].startswith(f"{speedup:.2f}×")
        if arm != "ar":  # an interval around it, from the paired units
            low, high = map(float, re.search(r"\[([\d.]+), ([\d.]+)\]", cells["speedup"]["text"]).groups())
            assert low <= speedup <= high and low < high


# ------------------------------------------------------------------------------------------------ analysis


def test_siblings_are_the_runs_that_differ_only_in_concurrency(concurrency_store):
    from relaxbench.analysis import load_run
    from relaxbench.analysis.concurrency import concurrency_runs

    for level, run_id in concurrency_store.run_ids.items():
        runs = concurrency_runs(concurrency_store.path, load_run(concurrency_store.path, run_id))
        assert [r.run_id for r in runs] == [concurrency_store.run_ids[1], concurrency_store.run_ids[4]], level
    for other in concurrency_store.others:  # nothing of their own to set side by side
        assert concurrency_runs(concurrency_store.path, load_run(concurrency_store.path, other)) == ()


# ------------------------------------------------------------------------------------------------ the report


@pytest.fixture(scope="module")
def report(concurrency_store, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("report")
    assert main(["report", str(concurrency_store.path), "--out", str(out)]) == 0
    return {"html": out / "report.html", "pdf": out / "report.pdf"}


def intro_of(text: str) -> str:
    return re.search(r"\d+ runs of this store differ only in [^.]*\.", text).group(0)


def test_the_html_report_shows_speed_against_concurrency(report, concurrency_store):
    html = report["html"].read_text()
    page = parse(html)
    assert {"concurrency", *(f"concurrency-{task}" for task in TASKS)} <= page.ids
    assert 'href="#concurrency"' in html  # in the contents
    text = " ".join(page.text)
    assert "Speed against concurrency" in text
    c1, c4 = concurrency_store.run_ids[1], concurrency_store.run_ids[4]
    intro = intro_of(text)
    assert f"concurrency 1: run {c1} (run-c1); concurrency 4: run {c4} (run-c4), this report's run" in intro
    assert all(f"run {other} " not in intro for other in concurrency_store.others)
    for task in TASKS:
        check_table(table_rows(html, f"{task}-concurrency"), task, concurrency_store)
        assert f"fig-{task}-concurrency" in page.ids
    assert html.count("<svg") == 6 * len(TASKS)  # the five figures per task, and the concurrency figure
    assert "output tokens of an arm's batches over their wall time" in text  # how the figure was computed


def test_the_report_of_any_sibling_shows_them_all(concurrency_store, tmp_path):
    c1 = concurrency_store.run_ids[1]
    assert main(["report", str(concurrency_store.path), "--run-id", str(c1), "--format", "html",
                 "--out", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    assert f"concurrency 1: run {c1} (run-c1), this report's run; concurrency 4" in intro_of(" ".join(parse(html).text))
    for task in TASKS:
        check_table(table_rows(html, f"{task}-concurrency"), task, concurrency_store)


def pdf_pages(pdf: Path) -> list[str]:
    return subprocess.run([poppler("pdftotext"), "-layout", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout.split("\f")


def test_the_pdf_report_shows_speed_against_concurrency(report, concurrency_store):
    pages = pdf_pages(report["pdf"])
    first = next(i for i, p in enumerate(pages) if "Speed against concurrency" in p and "Results per task" not in p)
    end = next(i for i, p in enumerate(pages) if i > first and "Method definitions" in p)
    section = "\n".join(pages[first:end])
    for task in TASKS:
        assert f"{task}: speed against concurrency" in section
        for arm, _, _, _ in ARMS:
            for level in LEVELS:
                stored, ar = concurrency_store.stored[(task, arm, level)], concurrency_store.stored[(task, "ar", level)]
                assert f"{sum(stored.tokens) / stored.wall:.2f}" in section
                assert f"{expected_speedup(ar, stored):.2f}×" in section
    images = subprocess.run([poppler("pdfimages"), "-list", "-f", str(first + 1), "-l", str(end), str(report["pdf"])],
                            capture_output=True, text=True, check=True).stdout.splitlines()[2:]
    assert len(images) >= len(TASKS)  # a figure per task


def test_summary_prints_the_concurrency_tables(concurrency_store, capsys):
    assert main(["summary", str(concurrency_store.path)]) == 0
    out = capsys.readouterr().out
    for task in TASKS:
        assert out.count(f"{task}: speed against concurrency") == 1
        for arm, _, _, _ in ARMS[1:]:
            for level in LEVELS:
                stored, ar = concurrency_store.stored[(task, arm, level)], concurrency_store.stored[(task, "ar", level)]
                assert f"{expected_speedup(ar, stored):.2f}×" in out


def test_compare_saves_a_figure_per_task_in_the_run_folder(concurrency_store):
    from PIL import Image

    from relaxbench.report.concurrency import save_concurrency_figures

    paths = save_concurrency_figures(concurrency_store.path)
    try:
        # the tasks in the report's order (by name): the first one's figure is concurrency.png
        assert paths == [concurrency_store.path / "concurrency.png", concurrency_store.path / "concurrency-code.png"]
        for path in paths:
            assert np.asarray(Image.open(path).convert("L"), dtype=float).std() > 5  # lines and labels drawn
    finally:
        for path in paths:
            path.unlink()
    assert save_concurrency_figures(concurrency_store.path, concurrency_store.others[0]) == []


# ------------------------------------------------------------------------------------------------ no section


def assert_no_concurrency(report_dir: Path, summary: str) -> None:
    html = (report_dir / "report.html").read_text()
    assert "concurrency" not in parse(html).ids and "Speed against concurrency" not in html
    assert "Speed against concurrency" not in "".join(pdf_pages(report_dir / "report.pdf"))
    assert "speed against concurrency" not in summary


def test_a_run_at_one_concurrency_has_no_such_section(concurrency_store, tmp_path, capsys):
    alone = str(concurrency_store.others[0])  # the run at another temperature: alone at its concurrency
    assert main(["report", str(concurrency_store.path), "--run-id", alone, "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["summary", str(concurrency_store.path), "--run-id", alone]) == 0
    assert_no_concurrency(tmp_path, capsys.readouterr().out)


@pytest.mark.slow
def test_a_transformers_run_has_no_such_section(tmp_path, capsys):
    run = build_fixture_run(tmp_path / "fixture")
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["summary", str(run)]) == 0
    assert_no_concurrency(tmp_path / "out", capsys.readouterr().out)


# ------------------------------------------------------------------------------------------------ compare


@pytest.mark.slow
def test_compare_at_two_concurrencies_ends_with_the_section(tmp_path, monkeypatch, capsys):
    """``compare --engine vllm --concurrency 1,4`` runs twice into one store and reports after each run: the last
    report sets both runs side by side, and the tables are printed once. vLLM's executor is replaced by the
    in-process one (the tiny models, relaxbench's own loop), which is all the report needs of it."""
    import sys

    import relaxbench.integrations.vllm_executor as vllm_executor
    from relaxbench.analysis import load_run
    from relaxbench.harness.executor import InProcessExecutor

    monkeypatch.setenv("RELAXBENCH_VLLM_PYTHON", sys.executable)  # an environment "exists"
    monkeypatch.setattr(vllm_executor, "VllmExecutor", InProcessExecutor)
    data = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
    out, reports = tmp_path / "run", tmp_path / "reports"
    assert main(["compare", "--engine", "vllm", "--concurrency", "1,4", "--target", "tiny-random-target", "--draft",
                 "tiny-random-draft", "--dtype", "float64", "--draft-dtype", "float64", "--methods", "exact",
                 "--tasks", "jsonl", "--data-file", f"jsonl={data}", "--limit", "2", "--max-new-tokens", "6",
                 "--warmup", "0", "--out", str(out), "--report-format", "html", "--report-out", str(reports)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("jsonl: speed against concurrency") == 1  # after the last run, not after each
    assert (out / "concurrency.png").stat().st_size > 0 and f"figure: {out / 'concurrency.png'}" in printed
    html = (reports / "report.html").read_text()
    runs = {int(load_run(out, i).suite["concurrency"][0]): load_run(out, i) for i in (1, 2)}
    assert f"concurrency 4: run {runs[4].run_id} ({runs[4].run_key}), this report's run" in intro_of(
        " ".join(parse(html).text))
    rows = {(r["arm"]["text"], int(float(r["concurrency"]["data-value"]))): r
            for r in table_rows(html, "jsonl-concurrency")}
    assert set(rows) == {(arm, level) for arm in ("ar", "exact") for level in (1, 4)}
    for level, run in runs.items():
        ar, exact = (next(c for c in run.cells if c.arm == arm) for arm in ("ar", "exact"))
        times = {arm: {s.item_id: s.time_total for s in cell.samples} for arm, cell in (("ar", ar), ("exact", exact))}
        speedup = math.exp(np.mean([math.log(times["ar"][i] / times["exact"][i]) for i in times["ar"]]))
        assert float(rows[("exact", level)]["speedup"]["data-value"]) == pytest.approx(speedup)
        assert int(rows[("exact", level)]["samples"]["text"]) == len(exact.samples) == 2
