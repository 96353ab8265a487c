"""What a report says, decided once for every output format: the summary, per-task tables (each cell keeps the
analysis value it shows), figures, method definitions, setup, environment, notices and definitions.

Run → summarize → present: this module reads a stored run through ``relaxbench.analysis`` (``load_run``,
``summarize_run``) and only selects and formats what those functions return; it computes no metric.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relaxbench.analysis import RunRecord, TaskSummary, load_run, summarize_run
from relaxbench.analysis.metrics import METRIC_DEFINITIONS, CellSummary, Estimate, by_unit
from relaxbench.analysis.present import fmt, fmt_ci, fmt_p
from relaxbench.analysis.records import CellRecord
from relaxbench.report.figures import FIGURE_METHODS, POINTS, FigureArt, method_palette, task_figures

DEFAULT_BUDGET = 1.0  # capability-loss budget for the summary, in score points
FEW_UNITS = 30  # below this many paired units, intervals are wide and McNemar has little power
WIDE_SPEEDUP = 0.25  # CI width / value above which a speed-up interval is called wide
WIDE_DELTA = 10.0  # points: a Δ-vs-AR interval wider than this is called wide
MODEL_GAP = 2.0  # measured / modelled speed-up beyond this factor (either way) is flagged
BUSY_LOAD = 0.5  # 1-min load average per CPU at a session's start above which timings are flagged as noisy


# ------------------------------------------------------------------------------------------------ building blocks


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, and the analysis figure it formats (``metric`` names the CellSummary field)."""

    text: str
    metric: str = ""
    value: float | None = None
    low: float | None = None
    high: float | None = None
    numeric: bool = False

    def attributes(self) -> dict[str, str]:
        """HTML attributes: the metric and its exact values (``repr``), so a reader or a test can check the text
        against the analysis."""
        out = {"data-metric": self.metric} if self.metric else {}
        for name in ("value", "low", "high"):
            number = getattr(self, name)
            if number is not None:
                out[f"data-{name}"] = repr(float(number))
        if self.numeric:
            out["class"] = "num"
        return out


@dataclass(frozen=True)
class Row:
    key: str  # the arm (or task) the row is about
    cells: tuple[Cell, ...]
    emphasis: bool = False


@dataclass(frozen=True)
class Table:
    key: str  # stable id (HTML anchor)
    title: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    note: str = ""


@dataclass(frozen=True)
class Notice:
    level: str  # "warning" (a reader must know this to trust a figure) or "info"
    text: str


@dataclass(frozen=True)
class TaskSection:
    task: str
    description: str
    scorer: str
    n_units: int
    headline: str
    tables: tuple[Table, ...]
    figures: tuple[FigureArt, ...]
    notices: tuple[Notice, ...]


@dataclass(frozen=True)
class Report:
    title: str
    run_dir: str
    run_key: str
    generated_at: str
    budget: float
    summary_lines: tuple[str, ...]
    summary_table: Table
    tasks: tuple[TaskSection, ...]
    methods_table: Table
    setup_table: Table
    tasks_table: Table
    environment_table: Table
    sessions_table: Table
    notices: tuple[Notice, ...]
    figure_methods: tuple[tuple[str, str], ...]
    definitions: tuple[tuple[str, str], ...]
    sections: tuple[tuple[str, str], ...] = field(default=(
        ("summary", "Summary"), ("results", "Results per task"), ("methods", "Method definitions"),
        ("setup", "Setup"), ("environment", "Environment"), ("figures-how", "How the figures were computed"),
        ("definitions", "Metric definitions")))

    def all_figures(self) -> list[FigureArt]:
        return [f for t in self.tasks for f in t.figures]


# ------------------------------------------------------------------------------------------------ formatting


def pts(value: float | None, signed: bool = False) -> str:
    """A score (a fraction) in points."""
    return "-" if value is None else f"{value * POINTS:{'+' if signed else ''}.1f}"


def pts_ci(estimate: Estimate) -> str:
    if estimate.value is None:
        return "-"
    text = pts(estimate.value, signed=True)
    if estimate.low is not None and estimate.high is not None:
        text += f" [{pts(estimate.low, True)}, {pts(estimate.high, True)}]"
    return text


def speed_ci(estimate: Estimate) -> str:
    return fmt_ci(estimate, ".2f", "×")


def knobs_text(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items())) or "-"


def _num(text: str, metric: str, value: float | None) -> Cell:
    return Cell(text, metric, value, numeric=True)


def _est(text: str, metric: str, estimate: Estimate) -> Cell:
    return Cell(text, metric, estimate.value, estimate.low, estimate.high, numeric=True)


# ------------------------------------------------------------------------------------------------ tables

MAIN_COLUMNS = ("method", "knobs", "MAL", "acc. rate", "speed-up [95% CI]", "latency s", "score",
                "Δ vs AR, pts [95% CI]", "p", "acc. retained", "relaxed frac.", "length ratio")


def main_row(cell: CellSummary, binary: bool) -> Row:
    """The issue's per-task columns; each cell keeps the CellSummary value it formats."""
    score = pts(cell.score) + ("%" if binary and cell.score is not None else "")
    return Row(cell.arm, (
        Cell(cell.arm, "arm"),
        Cell(knobs_text(cell.knobs), "knobs"),
        _num(fmt(cell.mean_acceptance_length), "mean_acceptance_length", cell.mean_acceptance_length),
        _num(fmt(cell.acceptance_rate, ".1%"), "acceptance_rate", cell.acceptance_rate),
        _est(speed_ci(cell.speedup_total), "speedup_total", cell.speedup_total),
        _num(fmt(cell.latency_mean, ".2f"), "latency_mean", cell.latency_mean),
        _num(score, "score", cell.score),
        _est("-" if cell.is_baseline else pts_ci(cell.score_delta), "score_delta", cell.score_delta),
        _num(fmt_p(cell.mcnemar_p), "mcnemar_p", cell.mcnemar_p),
        _num(fmt(cell.accuracy_retained, ".1%"), "accuracy_retained", cell.accuracy_retained),
        _num(fmt(cell.relaxed_fraction, ".1%"), "relaxed_fraction", cell.relaxed_fraction),
        _num(fmt(cell.output_length_ratio, ".3f"), "output_length_ratio", cell.output_length_ratio),
    ), emphasis=cell.is_baseline)


DIAGNOSTIC_COLUMNS = ("method", "policy", "n units", "n samples", "geomean speed-up [95% CI]", "modelled",
                      "median latency s", "tokens/s", "McNemar discordant (lost/gained)", "reproduced AR",
                      "stop reasons")


def reproduced_text(cell: CellSummary) -> str:
    d = cell.divergences
    if d is None:
        return "-"
    text = f"{d.reproduced}/{d.compared}"
    if cell.lossless and d.reproduced < d.compared:
        parts = [f"{d.near_tie} near-tie", f"{d.not_near_tie} not near-tie"]
        if d.inherited:
            parts.append(f"{d.inherited} inherited")
        text += f" ({', '.join(parts)})"
    return text


def diagnostic_row(cell: CellSummary) -> Row:
    discordant = "-" if cell.discordant is None else f"{cell.discordant[0]} / {cell.discordant[1]}"
    stops = ", ".join(f"{reason} {count}" for reason, count in cell.stop_reasons.items()) or "-"
    return Row(cell.arm, (
        Cell(cell.arm, "arm"),
        Cell(cell.policy + (" (lossless)" if cell.lossless and not cell.is_baseline else ""), "policy"),
        _num(str(cell.n_units), "n_units", cell.n_units),
        _num(str(cell.n_samples), "n_samples", cell.n_samples),
        _est(speed_ci(cell.speedup_geomean), "speedup_geomean", cell.speedup_geomean),
        _num(fmt(cell.modelled_speedup, ".2f", "×"), "modelled_speedup", cell.modelled_speedup),
        _num(fmt(cell.latency_median, ".2f"), "latency_median", cell.latency_median),
        _num(fmt(cell.tokens_per_second, ".2f"), "tokens_per_second", cell.tokens_per_second),
        Cell(discordant, "discordant", numeric=True),
        Cell(reproduced_text(cell), "divergences", numeric=True),
        Cell(stops, "stop_reasons"),
    ), emphasis=cell.is_baseline)


def category_table(summary: TaskSummary) -> Table | None:
    """Per-category score and the scorer's detail metrics (agreement: exact match, ROUGE-L, log-likelihood)."""
    keys = sorted({k for c in summary.cells for k in c.details})
    categories = sorted({name for c in summary.cells for name in c.by_category})
    if not keys and not categories:
        return None
    rows = []
    for cell in summary.cells:
        groups = [("all", cell.n_units, cell.score, cell.score_delta, cell.details)]
        groups += [(name, g.n_units, g.score, g.score_delta, g.details) for name, g in cell.by_category.items()]
        for name, n, score, delta, details in groups:
            rows.append(Row(f"{cell.arm}/{name}", (
                Cell(cell.arm if name == "all" else "", "arm"), Cell(name, "category"),
                _num(str(n), "n_units", n), _num(pts(score), "score", score),
                _est("-" if cell.is_baseline else pts_ci(delta), "score_delta", delta),
                *(_num(fmt(details.get(k), ".3f"), f"details.{k}", details.get(k)) for k in keys),
            ), emphasis=name == "all"))
    return Table(f"{summary.task}-categories", f"{summary.task}: scores by category and the scorer's details",
                 ("method", "category", "n", "score", "Δ vs AR, pts [95% CI]", *keys), tuple(rows),
                 "Scores in points; the detail columns are the scorer's own metrics averaged over units (first "
                 "repeat).")


# ------------------------------------------------------------------------------------------------ the summary


def best_within_budget(summary: TaskSummary, budget: float) -> CellSummary | None:
    """The fastest arm (measured speed-up, total) whose mean score loss vs AR is at most ``budget`` points; None
    when no arm within the budget is faster than AR."""
    eligible = [c for c in summary.cells if not c.is_baseline and c.speedup_total.value is not None
                and c.score_delta.value is not None and c.score_delta.value * POINTS >= -budget]
    best = max(eligible, key=lambda c: c.speedup_total.value, default=None)
    return best if best is not None and best.speedup_total.value > 1.0 else None


def fastest(summary: TaskSummary) -> CellSummary | None:
    cells = [c for c in summary.cells if not c.is_baseline and c.speedup_total.value is not None]
    return max(cells, key=lambda c: c.speedup_total.value, default=None)


def _lossless_reference(summary: TaskSummary) -> CellSummary | None:
    cells = [c for c in summary.cells if not c.is_baseline and c.lossless and c.speedup_total.value is not None]
    return max(cells, key=lambda c: c.speedup_total.value, default=None)


def headline(summary: TaskSummary, budget: float) -> str:
    ar = summary.baseline
    unit, suffix = ("pass@1", "%") if summary.binary else ("score", " pts")
    ar_score = "-" if ar.score is None else pts(ar.score) + suffix
    text = f"{summary.task} (n = {summary.n_units} paired units, AR {unit} {ar_score}): "
    best = best_within_budget(summary, budget)
    if best is None:
        text += f"no method is faster than AR while losing at most {budget:g} point(s)"
        top = fastest(summary)
        if top is not None:
            text += (f"; the fastest, {top.arm}, runs at {speed_ci(top.speedup_total)} with Δ "
                     f"{pts_ci(top.score_delta)} pts")
        text += "."
    else:
        text += (f"the fastest method within a {budget:g}-point loss budget is {best.arm}: "
                 f"{speed_ci(best.speedup_total)} over AR, Δ {pts_ci(best.score_delta)} pts, "
                 f"MAL {fmt(best.mean_acceptance_length)}.")
        if best.score_delta.low is not None and best.score_delta.low * POINTS < -budget:
            text += " Its Δ interval reaches below the budget, so the loss is within budget on average only."
        if best.speedup_total.low is not None and best.speedup_total.low <= 1.0:
            text += " Its speed-up interval includes 1.0×."
    ref = _lossless_reference(summary)
    if ref is not None:
        text += f" Lossless reference ({ref.arm}): {speed_ci(ref.speedup_total)}."
    return text


def summary_table(summaries: Sequence[TaskSummary], budget: float) -> Table:
    rows = []
    for summary in summaries:
        ar = summary.baseline
        best = best_within_budget(summary, budget)
        top = fastest(summary)
        ref = _lossless_reference(summary)
        chosen = best or ar
        rows.append(Row(summary.task, (
            Cell(summary.task, "task"), _num(str(summary.n_units), "n_units", summary.n_units),
            Cell(summary.scorer, "scorer"), _num(pts(ar.score), "score", ar.score),
            Cell(chosen.arm if best else "ar (none faster within budget)", "arm"),
            _est(speed_ci(chosen.speedup_total), "speedup_total", chosen.speedup_total),
            _est("-" if best is None else pts_ci(best.score_delta), "score_delta", chosen.score_delta),
            _num(fmt(chosen.accuracy_retained, ".1%"), "accuracy_retained", chosen.accuracy_retained),
            Cell("-" if top is None else f"{top.arm}: {speed_ci(top.speedup_total)}, Δ {pts_ci(top.score_delta)}",
                 "fastest"),
            Cell("-" if ref is None else f"{ref.arm}: {speed_ci(ref.speedup_total)}", "lossless"),
        )))
    return Table("summary-table", f"Best method per task within a {budget:g}-point capability-loss budget",
                 ("task", "n", "scorer", "AR score", "best within budget", "speed-up [95% CI]",
                  "Δ vs AR, pts [95% CI]", "acc. retained", "fastest overall", "lossless reference"),
                 tuple(rows),
                 f"Best = the highest measured speed-up (Σ AR time / Σ method time) among arms whose mean score "
                 f"difference to AR is at least −{budget:g} point(s); AR when none of them is faster than AR. "
                 "Scores in points (pass rate in %, agreement × 100).")


# ------------------------------------------------------------------------------------------------ notices


def task_notices(summary: TaskSummary, cells: Sequence[CellRecord]) -> list[Notice]:
    notices: list[Notice] = []
    baseline = next(c for c in cells if c.is_baseline)
    stored_units = len(by_unit(baseline.samples))
    if summary.target_alone:
        notices.append(Notice("info", "Scored by the target's likelihoods alone (no generation): no verification "
                                      "rule changes a likelihood, so every method has AR's score by definition "
                                      "and there are no speed or acceptance figures for this task."))
    if summary.n_units == 0:
        notices.append(Notice("warning", "No unit was finished by every arm: this task has no figures yet."))
        return notices
    if summary.target_alone:
        if summary.n_units < FEW_UNITS:
            notices.append(Notice("warning", f"Only {summary.n_units} units: AR's score has a wide interval."))
        return notices
    if stored_units > summary.n_units:
        notices.append(Notice("info", f"{stored_units - summary.n_units} of the {stored_units} AR units are left "
                                      "out because not every arm finished them (figures use only paired units)."))
    if summary.n_units < FEW_UNITS:
        notices.append(Notice("warning", f"Only {summary.n_units} paired units: intervals are wide and the McNemar "
                                         "test has little power; read differences as indicative."))
    wide_speed = [c.arm for c in summary.cells if not c.is_baseline and c.speedup_total.value
                  and c.speedup_total.low is not None
                  and (c.speedup_total.high - c.speedup_total.low) / c.speedup_total.value > WIDE_SPEEDUP]
    if wide_speed:
        notices.append(Notice("warning", f"Wide speed-up intervals (width > {WIDE_SPEEDUP:.0%} of the estimate): "
                                         f"{', '.join(wide_speed)}. Timings vary a lot between units or the machine "
                                         "was noisy."))
    wide_delta = [c.arm for c in summary.cells if not c.is_baseline and c.score_delta.low is not None
                  and (c.score_delta.high - c.score_delta.low) * POINTS > WIDE_DELTA]
    if wide_delta:
        notices.append(Notice("warning", f"Wide Δ-vs-AR intervals (wider than {WIDE_DELTA:g} points): "
                                         f"{', '.join(wide_delta)}."))
    for cell in summary.cells:
        if cell.is_baseline or not cell.lossless:
            continue
        d = cell.divergences
        if d is None:
            notices.append(Notice("info", f"{cell.arm} (lossless) was not compared token by token with AR (sampled "
                                          "decoding reproduces AR's distribution, not its tokens)."))
        elif d.reproduced == d.compared:
            notices.append(Notice("info", f"{cell.arm} (lossless) reproduced AR's output exactly on all "
                                          f"{d.compared} units."))
        else:
            level = "warning" if d.not_near_tie else "info"
            text = (f"{cell.arm} (lossless) reproduced AR's output exactly on {d.reproduced} of {d.compared} units; "
                    f"of the {d.compared - d.reproduced} that differ, {d.near_tie} diverged at a numerical near-tie "
                    "(the top-2 target logits within the dtype's tolerance, so rounding in a k-token verify pass can "
                    "flip the argmax)")
            if d.inherited:
                text += f", {d.inherited} inherited an earlier turn's difference"
            if d.not_near_tie:
                text += f", and {d.not_near_tie} diverged where no near-tie explains it — investigate before trusting"
            notices.append(Notice(level, text + "."))
    truncated = {c.arm: c.stop_reasons.get("length", 0) for c in summary.cells if c.stop_reasons.get("length")}
    if truncated:
        max_new = {c.decode.get("max_new_tokens") for c in cells} - {None}
        limit = f" ({', '.join(map(str, sorted(max_new)))} tokens)" if max_new else ""
        parts = ", ".join(f"{arm} {n}/{next(c.n_samples for c in summary.cells if c.arm == arm)}"
                          for arm, n in truncated.items())
        ar_share = truncated.get(summary.baseline.arm, 0) / max(1, summary.baseline.n_samples)
        notices.append(Notice("warning" if ar_share > 0.25 else "info",
                              f"Outputs cut at max_new_tokens{limit}: {parts}. A truncated answer can fail where a "
                              "complete one would pass, and truncation caps any length change."))
    apart = [f"{c.arm} ({c.speedup_total.value:.2f}× measured, {c.modelled_speedup:.2f}× modelled)"
             for c in summary.cells if not c.is_baseline and c.modelled_speedup and c.speedup_total.value
             and not 1 / MODEL_GAP <= c.speedup_total.value / c.modelled_speedup <= MODEL_GAP]
    if apart:
        notices.append(Notice("warning", f"Measured and modelled speed-ups differ by more than {MODEL_GAP:g}×: "
                                         f"{'; '.join(apart)}. Overheads the model leaves out rarely explain that "
                                         "much; timing noise (load spikes during some samples) usually does. The "
                                         "geomean speed-up and the modelled figure are less sensitive to it."))
    no_model = [c.arm for c in summary.cells if c.modelled_speedup is None]
    if no_model:
        notices.append(Notice("info", f"No modelled speed-up (no calibration stored) for: {', '.join(no_model)}."))
    return notices


def run_notices(run: RunRecord) -> list[Notice]:
    notices: list[Notice] = []
    sessions = run.environment
    if not sessions:
        notices.append(Notice("warning", "No environment was recorded with this run."))
        return notices
    for env in sessions:
        if env.get("status") != "finished":
            notices.append(Notice("info", f"Session {env.get('session_id')} (started {env.get('started_at')}) ended "
                                          f"'{env.get('status')}'; its finished samples are kept and used."))
        load, cpus = env.get("load_average"), env.get("cpu_count")
        if load and cpus and load[0] / cpus > BUSY_LOAD:
            notices.append(Notice("warning", f"Session {env.get('session_id')} started on a busy machine (1-min load "
                                             f"average {load[0]:g} on {cpus} CPUs): wall-clock speed-ups are noisy; "
                                             "the modelled speed-up is steadier."))
    for key in ("device", "target_dtype", "draft_dtype", "threads", "cpu_model", "torch", "transformers",
                "git_revision", "hostname"):
        values = {json.dumps(env.get(key), default=str) for env in sessions}
        if len(values) > 1:
            notices.append(Notice("warning", f"Sessions of this run differ in {key} "
                                             f"({', '.join(sorted(values))}): samples timed in different setups "
                                             "are pooled."))
    return notices


# ------------------------------------------------------------------------------------------------ definitions


def _drafter_text(drafter: Mapping[str, Any] | None) -> str:
    if drafter is None:
        return "-"
    knobs = drafter.get("knobs") or {}
    return str(drafter.get("kind")) + (f" ({knobs_text(knobs)})" if knobs else "")


def methods_table(run: RunRecord, summaries: Sequence[TaskSummary]) -> Table:
    """One row per arm (as first defined in the run): what was run, from the stored cell definitions."""
    seen: dict[str, CellRecord] = {}
    for cell in sorted(run.cells, key=lambda c: (c.position, c.task)):
        seen.setdefault(cell.arm, cell)
    rows = []
    for arm, cell in seen.items():
        spec = cell.method_spec
        rows.append(Row(arm, (
            Cell(arm, "arm"), Cell(cell.method, "method"), Cell(cell.policy, "policy"),
            Cell("AR baseline" if cell.is_baseline else ("lossless" if cell.lossless else "relaxed"), "kind"),
            Cell(knobs_text(cell.knobs), "knobs"), Cell(_drafter_text(cell.drafter), "drafter"),
            _num(str(cell.k), "k", cell.k),
            Cell(str(spec.get("description") or ("the target alone, one token per step" if cell.is_baseline
                                                 else "-")), "description"),
            Cell(str(spec.get("source") or "-"), "source"),
        ), emphasis=cell.is_baseline))
    return Table("methods-table", "Arms: policy, knobs, drafter and draft length k",
                 ("arm", "method", "policy", "kind", "knobs", "drafter", "k", "description", "defined in"),
                 tuple(rows), "An arm is one point of a method's knob sweep (its name carries the knob values); "
                              "arms of the same method form one curve in the trade-off plots. The drafter is the one "
                              "actually used (with --draft ngram, prompt lookup replaces a draft model).")


def setup_tables(run: RunRecord, summaries: Sequence[TaskSummary]) -> tuple[Table, Table]:
    latest = run.environment[-1] if run.environment else {}
    suite = run.suite

    def model_text(role: str, name: str | None) -> str:
        described = latest.get(role)
        if isinstance(described, Mapping):
            extra = ", ".join(f"{k}={v}" for k, v in described.items() if k != "name" and not isinstance(v, Mapping))
            return f"{name}" + (f" ({extra})" if extra else "")
        return str(name or "-")

    pairs = [("run", run.run_key), ("created", run.created_at), ("last updated", run.updated_at),
             ("target", model_text("target", run.target)), ("draft", model_text("draft", run.draft)),
             ("methods", ", ".join(map(str, suite.get("methods") or ())) or "-"),
             ("repeats", str(suite.get("repeats", "-"))), ("item limit", str(suite.get("limit") or "all")),
             ("warm-up generations per arm", str(suite.get("warmup", "-")))]
    setup = Table("setup-table", "Run", ("field", "value"),
                  tuple(Row(k, (Cell(k, "field"), Cell(v, "value"))) for k, v in pairs))
    rows = []
    for summary in summaries:
        cell = next(c for c in run.cells_of(summary.task) if c.is_baseline)
        decode, task = cell.decode, cell.task_spec
        sampling = decode.get("sampling") or {}
        temperature = sampling.get("temperature", 0.0)
        decoding = "greedy" if not temperature else (f"T={temperature}, top-k={sampling.get('top_k')}, "
                                                     f"top-p={sampling.get('top_p')}, seed={decode.get('seed')}")
        rows.append(Row(summary.task, (
            Cell(summary.task, "task"), Cell(str(task.get("description") or "-"), "description"),
            Cell(summary.scorer, "scorer"), _num(str(summary.n_units), "n_units", summary.n_units),
            _num(str(decode.get("max_new_tokens", "-")), "max_new_tokens", None), Cell(decoding, "decoding"),
            Cell(", ".join(repr(s) for s in decode.get("stop_strings") or ()) or "-", "stop"),
        )))
    tasks = Table("tasks-table", "Tasks and decoding settings",
                  ("task", "description", "scorer", "paired units", "max new tokens", "decoding", "stop strings"),
                  tuple(rows))
    return setup, tasks


ENVIRONMENT_FIELDS = (
    ("date", "date"), ("device", "device"), ("gpu", "GPU"), ("cpu_model", "CPU"), ("cpu_count", "CPUs"),
    ("threads", "torch threads"), ("load_average", "load average at start (1/5/15 min)"),
    ("target_dtype", "target dtype"), ("draft_dtype", "draft dtype"), ("python", "Python"), ("torch", "torch"),
    ("transformers", "transformers"), ("relaxbench", "relaxbench"), ("numpy", "numpy"), ("scipy", "scipy"),
    ("datasets", "datasets"), ("platform", "platform"), ("hostname", "host"), ("git_revision", "git revision"),
    ("command", "command"),
)


def environment_tables(run: RunRecord) -> tuple[Table, Table]:
    latest = run.environment[-1] if run.environment else {}
    rows = []
    for key, label in ENVIRONMENT_FIELDS:
        value = latest.get(key)
        if isinstance(value, (list, tuple)):
            value = " / ".join(map(str, value))
        rows.append(Row(key, (Cell(label, "field"), Cell("-" if value in (None, "") else str(value), key))))
    environment = Table("environment-table", "Environment (latest session)", ("field", "value"), tuple(rows))
    counts = Counter(s.session_id for c in run.cells for s in c.samples)
    session_rows = tuple(Row(str(env.get("session_id")), (
        _num(str(env.get("session_id")), "session_id", env.get("session_id")),
        Cell(str(env.get("started_at") or "-"), "started_at"), Cell(str(env.get("finished_at") or "-"), "finished_at"),
        Cell(str(env.get("status")), "status"),
        _num(str(counts.get(env.get("session_id"), 0)), "samples", counts.get(env.get("session_id"), 0)),
        Cell(f"{env.get('device')}, {env.get('target_dtype')}/{env.get('draft_dtype')}, {env.get('threads')} threads",
             "setup"),
        Cell(str(env.get("git_revision") or "-"), "git_revision"),
    )) for env in run.environment)
    sessions = Table("sessions-table", "Sessions (invocations that worked on this run)",
                     ("session", "started", "finished", "status", "samples stored", "device, dtypes, threads",
                      "git revision"), session_rows)
    return environment, sessions


# ------------------------------------------------------------------------------------------------ the report


def _agreement_note(scorer: str) -> str:
    """Scorers that compare with the AR output give AR full marks by definition; say so under the table."""
    from relaxbench.scoring import SCORERS

    if scorer in SCORERS and SCORERS.get(scorer).needs_baseline:
        return (" Open-ended items are scored by agreement with AR's output of the same item and turn, so AR scores "
                "100 there by definition and Δ measures how far an arm's text drifts from AR's.")
    return ""


def task_section(run: RunRecord, summary: TaskSummary, palette: Mapping[str, str], budget: float) -> TaskSection:
    cells = run.cells_of(summary.task)
    baseline = next(c for c in cells if c.is_baseline)
    main = Table(f"{summary.task}-table", f"{summary.task}: speed and capability per arm", MAIN_COLUMNS,
                 tuple(main_row(c, summary.binary) for c in summary.cells),
                 f"n = {summary.n_units} paired units. Speed-up = Σ AR time / Σ method time; latency = mean "
                 f"seconds per unit; score in points ({'pass rate, %' if summary.binary else summary.scorer + ' × 100'});"
                 f" Δ vs AR = mean paired score difference; p = exact McNemar test "
                 f"({'pass/fail' if summary.binary else 'not applicable to non-binary scores'}); acc. retained = "
                 "score / AR score; relaxed frac. = relaxed acceptances / emitted tokens; length ratio = output "
                 "tokens / AR output tokens. Brackets: 95% paired-bootstrap CI." + _agreement_note(summary.scorer))
    diagnostics = Table(f"{summary.task}-diagnostics", f"{summary.task}: sample counts and diagnostics",
                        DIAGNOSTIC_COLUMNS, tuple(diagnostic_row(c) for c in summary.cells),
                        "Geomean speed-up = exp(mean log(AR time / method time)) over units; modelled = from counters "
                        "and the run's calibration; discordant = units AR passed and the arm failed / the reverse; "
                        "reproduced AR = units whose output ids equal AR's (divergences of lossless arms are "
                        "diagnosed); stop reasons over the paired samples ('length' = cut at max_new_tokens).")
    tables = [main, diagnostics]
    categories = category_table(summary)
    if categories is not None:
        tables.append(categories)
    return TaskSection(task=summary.task, description=str(baseline.task_spec.get("description") or ""),
                       scorer=summary.scorer, n_units=summary.n_units, headline=headline(summary, budget),
                       tables=tuple(tables),
                       figures=() if summary.target_alone else tuple(task_figures(summary, palette)),
                       notices=tuple(task_notices(summary, cells)))


def build_report(run: RunRecord, run_dir: str, budget: float = DEFAULT_BUDGET) -> Report:
    summaries = summarize_run(run)
    palette = method_palette(["ar", *(c.method for c in sorted(run.cells, key=lambda c: c.position))])
    tasks = tuple(task_section(run, s, palette, budget) for s in summaries)
    setup, tasks_table = setup_tables(run, summaries)
    environment, sessions = environment_tables(run)
    title = f"relaxbench: {run.target} with draft {run.draft or '-'}"
    lines = [t.headline for t in tasks] or ["This run has no tasks yet."]
    return Report(
        title=title, run_dir=run_dir, run_key=run.run_key,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), budget=budget,
        summary_lines=tuple(lines), summary_table=summary_table(summaries, budget), tasks=tasks,
        methods_table=methods_table(run, summaries), setup_table=setup, tasks_table=tasks_table,
        environment_table=environment, sessions_table=sessions, notices=tuple(run_notices(run)),
        figure_methods=tuple(FIGURE_METHODS.values()), definitions=METRIC_DEFINITIONS)


def load_report(run_dir: str | Path, budget: float = DEFAULT_BUDGET, run_id: int | None = None) -> Report:
    return build_report(load_run(run_dir, run_id), str(run_dir), budget)
