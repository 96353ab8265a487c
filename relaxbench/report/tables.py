"""The one table model (``Table`` of ``Row`` of ``Cell``) and the builders of the per-task tables.

The terminal (``terminal.py``, for ``compare`` and ``summary``), the HTML template and the PDF renderer all render
these same objects, so a count is worded and formatted once. Each cell keeps the analysis value it formats
(``metric`` names the ``CellSummary`` field), which the HTML writes as data attributes for readers and tests.
The per-arm tables' columns and cells are generated from the metric schema (``relaxbench.analysis.schema``): a
record's ``format`` names one of ``FORMATTERS`` below.
No figure is computed here: everything comes from ``relaxbench.analysis``' summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relaxbench.analysis.agreement import Agreement
from relaxbench.analysis.categories import RelaxationGain, categories_of, relaxation_gains
from relaxbench.analysis.drafters import DrafterGain
from relaxbench.analysis.metrics import POINTS, CellSummary, Estimate, FailureRate, GraderSummary, TaskSummary
from relaxbench.analysis.notices import self_agreement_words
from relaxbench.analysis.schema import Metric, table_metrics


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, and the analysis figure it formats (``metric`` names the CellSummary field)."""

    text: str
    metric: str = ""
    value: float | None = None
    low: float | None = None
    high: float | None = None
    numeric: bool = False
    alert: bool = False  # a missed target (a benchmark's "NO"): the terminal shows it in red

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
    # the columns a narrow display keeps (the terminal by default, so a table fits 120 columns); () keeps them all
    essential: tuple[str, ...] = ()
    # columns beside the first whose text a terminal never wraps or cuts (a second arm's name)
    unbroken: tuple[str, ...] = ()

    def hidden(self) -> tuple[str, ...]:
        """The columns a narrow display leaves out, in table order."""
        keep = set(self.essential)
        return tuple(c for c in self.columns if keep and c not in keep)

    def narrow(self) -> Table:
        """This table with its essential columns only (the same cells, the same note)."""
        if not self.hidden():
            return self
        unknown = set(self.essential) - set(self.columns)
        if unknown:
            raise ValueError(f"table {self.key}: essential columns {sorted(unknown)} are not among its columns")
        keep = [i for i, c in enumerate(self.columns) if c in set(self.essential)]
        rows = tuple(Row(r.key, tuple(r.cells[i] for i in keep if i < len(r.cells)), r.emphasis) for r in self.rows)
        return Table(self.key, self.title, tuple(self.columns[i] for i in keep), rows, self.note,
                     unbroken=tuple(c for c in self.unbroken if c in set(self.essential)))


# ------------------------------------------------------------------------------------------------ formatting


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def fmt_ci(estimate: Estimate, spec: str = ".2f", suffix: str = "") -> str:
    if estimate.value is None:
        return "-"
    text = f"{estimate.value:{spec}}{suffix}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{estimate.low:{spec}}, {estimate.high:{spec}}]"
    return text


def fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


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


def num(text: str, metric: str, value: float | None) -> Cell:
    return Cell(text, metric, value, numeric=True)


def est(text: str, metric: str, estimate: Estimate) -> Cell:
    return Cell(text, metric, estimate.value, estimate.low, estimate.high, numeric=True)


def score_text(cell: CellSummary, binary: bool) -> str:
    """The score in points; with repeated samples per unit (avg@n, n > 1) its 95% CI over items follows."""
    text = pts(cell.score) + ("%" if binary and cell.score is not None else "")
    interval = cell.score_interval
    if cell.repeats > 1 and interval.low is not None and interval.high is not None:
        text += f" [{pts(interval.low)}, {pts(interval.high)}]"
    return text


def truncated_text(cell: CellSummary) -> str:
    """Samples cut at the token budget, 'n/N (share)'."""
    if not cell.n_samples:
        return "-"
    return f"{cell.truncated}/{cell.n_samples} ({cell.truncated / cell.n_samples:.0%})"


# ------------------------------------------------------------------------------------------------ per-task tables

# ------------------------------------------------------------------------------------------------ the schema's cells


@dataclass(frozen=True)
class Context:
    """What a cell needs beside its arm's summary: whether scores are pass/fail, the profiles of the proxy columns."""

    binary: bool = False
    profiles: tuple[str, ...] = ()


Formatter = Callable[[CellSummary, Metric, Context], tuple[Cell, ...]]


def _number(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    value = cell.value(metric.path)
    return (num(fmt(value, metric.spec or ".2f"), metric.key, value),)


def _count(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    value = cell.value(metric.path)
    return (num(str(value), metric.key, value),)


def _speed(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    estimate = cell.value(metric.path)
    return (est(speed_ci(estimate), metric.key, estimate),)


def _estimate(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    estimate = cell.value(metric.path)
    return (est(fmt_ci(estimate, metric.spec or ".2f"), metric.key, estimate),)


def _score(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (Cell(score_text(cell, ctx.binary), metric.key, cell.score, cell.score_interval.low,
                 cell.score_interval.high, numeric=True),)


def _pts_delta(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    estimate = cell.value(metric.path)
    return (est("-" if cell.is_baseline else pts_ci(estimate), metric.key, estimate),)


def _p(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    value = cell.value(metric.path)
    return (num(fmt_p(value), metric.key, value),)


def _truncated(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (num(truncated_text(cell), metric.key, cell.truncated),)


def _proxy_total(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return tuple(proxy_cell(cell, p) for p in ctx.profiles)


def _proxy_geomean(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return tuple(proxy_cell(cell, p, geomean=True) for p in ctx.profiles)


def _arm(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (Cell(cell.arm, metric.key),)


def _knobs(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (Cell(knobs_text(cell.knobs), metric.key),)


def _policy(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (Cell(cell.policy + (" (lossless)" if cell.lossless and not cell.is_baseline else ""), metric.key),)


def _ms(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    seconds = cell.value(metric.path)
    return (Cell(fmt(None if seconds is None else seconds * 1e3, ".3f"), metric.key, seconds, numeric=True),)


def _discordant(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    pair = cell.value(metric.path)
    return (Cell("-" if pair is None else f"{pair[0]} / {pair[1]}", metric.key, numeric=True),)


def _reproduced(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    return (Cell(reproduced_text(cell), metric.key, numeric=True),)


def _stop_reasons(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    stops = ", ".join(f"{reason} {count}" for reason, count in cell.stop_reasons.items()) or "-"
    return (Cell(stops, metric.key),)


def _failure_count(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    rate = cell.value(metric.path)
    return (Cell(rate_text(rate), metric.key, None if rate is None else rate.rate, numeric=True),)


def _failure_delta(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    rate = cell.value(metric.path)
    delta = Estimate(None) if rate is None or cell.is_baseline else rate.delta
    return (est(rate_delta_text(rate, cell.is_baseline), metric.key, delta),)


def _span(cell: CellSummary, metric: Metric, ctx: Context) -> tuple[Cell, ...]:
    inside, outside = cell.span.relaxed_in_span, cell.span.relaxed_outside_span
    text = "-" if inside is None and outside is None else f"{fmt(inside, '.1%')} / {fmt(outside, '.1%')}"
    return (Cell(text, metric.key, inside, numeric=True),)


# the schema's ``format`` names: how a metric's figure becomes its cells (a proxy column becomes one per profile)
FORMATTERS: dict[str, Formatter] = {
    "number": _number, "count": _count, "speed": _speed, "estimate": _estimate, "score": _score,
    "pts_delta": _pts_delta, "p": _p, "truncated": _truncated, "proxy_total": _proxy_total,
    "proxy_geomean": _proxy_geomean, "arm": _arm, "knobs": _knobs, "policy": _policy, "ms": _ms,
    "discordant": _discordant, "reproduced": _reproduced, "stop_reasons": _stop_reasons,
    "failure_count": _failure_count, "failure_delta": _failure_delta, "span": _span,
}
PROXY_FORMATS = {"proxy_total": "", "proxy_geomean": "geomean"}  # a column per profile: proxy NAME [kind]
# a table whose cells all read one part of the summary: an arm without that part shows '-' throughout
TABLE_PART = {"failures": "failures"}


def schema_columns(table: str, profiles: tuple[str, ...] = (), narrow: bool = False) -> tuple[str, ...]:
    """The column labels of a per-arm table, from the metric schema (``narrow``: those shown at 120 columns)."""
    out: list[str] = []
    for metric in table_metrics(table):
        if narrow and not metric.narrow:
            continue
        if metric.format in PROXY_FORMATS:
            out.extend(proxy_column(p, PROXY_FORMATS[metric.format]) for p in profiles)
        else:
            out.append(metric.column)
    return tuple(out)


def schema_essential(table: str, profiles: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a narrow display keeps: () when it keeps every column."""
    essential = schema_columns(table, profiles, narrow=True)
    return () if essential == schema_columns(table, profiles) else essential


def schema_cells(table: str, cell: CellSummary, ctx: Context) -> tuple[Cell, ...]:
    """One arm's row of a per-arm table: each column's formatter over the summary's figure."""
    part = TABLE_PART.get(table)
    metrics = table_metrics(table)
    if part is not None and getattr(cell, part) is None:
        return (_arm(cell, metrics[0], ctx)[0], *(Cell("-", numeric=True) for m in metrics[1:]
                                                  for _ in range(len(ctx.profiles) if m.format in PROXY_FORMATS
                                                                 else 1)))
    return tuple(c for m in metrics for c in FORMATTERS[m.format](cell, m, ctx))


def schema_row(table: str, cell: CellSummary, ctx: Context) -> Row:
    return Row(cell.arm, schema_cells(table, cell, ctx), emphasis=cell.is_baseline)


MAIN_COLUMNS = schema_columns("main")
# what the terminal shows by default: the arm, why it is fast, how fast (measured and priced), what it costs
MAIN_ESSENTIAL = schema_columns("main", narrow=True)
PROXY_NOTE = (" Proxy NAME = the speed-up with every sample priced on cost profile NAME's device (prefill + each "
              "round's verify forward and drafter work; this-machine = the table this run measured); same units, "
              "same paired bootstrap.")


def proxy_column(profile: str, kind: str = "") -> str:
    return f"proxy {profile}{' ' + kind if kind else ''} [95% CI]"


def proxy_cell(cell: CellSummary, profile: str, geomean: bool = False) -> Cell:
    """A proxy speed-up on ``profile`` (total or geomean); metric ``proxy.<profile>.total`` / ``.geomean``."""
    proxy = cell.proxy.get(profile)
    kind = "geomean" if geomean else "total"
    estimate = Estimate(None) if proxy is None else (proxy.geomean if geomean else proxy.total)
    return est(speed_ci(estimate), f"proxy.{profile}.{kind}", estimate)


def with_proxy_columns(columns: tuple[str, ...], after: str, profiles: tuple[str, ...], kind: str = "") -> tuple[str, ...]:
    at = columns.index(after) + 1
    return columns[:at] + tuple(proxy_column(p, kind) for p in profiles) + columns[at:]


def main_row(cell: CellSummary, binary: bool, profiles: tuple[str, ...] = ()) -> Row:
    """The headline columns of one arm; each cell keeps the CellSummary value it formats."""
    return schema_row("main", cell, Context(binary, profiles))


def _repeats_note(summary: TaskSummary) -> str:
    n = max((c.repeats for c in summary.cells), default=1)
    if n <= 1:
        return ""
    return (f" Score = avg@n: each unit's mean over its n = {n} repeats, averaged over units, with its 95% CI over "
            "items (under greedy decoding the repeats are one output, re-timed).")


def _agreement_note(summary: TaskSummary) -> str:
    """Scorers that compare with the AR output give AR full marks by definition; say so under the table."""
    from relaxbench.scoring import SCORERS

    if summary.grader is None and summary.scorer in SCORERS and SCORERS.get(summary.scorer).needs_baseline:
        return (" Open-ended items are scored by agreement with AR's output of the same item and turn, so AR scores "
                "100 there by definition and Δ measures how far an arm's text drifts from AR's: fidelity to AR, not "
                "capability.")
    return ""


def measured_by(summary: TaskSummary) -> str:
    """What a task's score is, in a few words: its scorer (and the classifier it names), the grader, or fidelity
    only."""
    if summary.rated_by_grader:
        grader = summary.grader
        only = (f" on {', '.join(grader.graded_categories)} only ({grader.skipped} samples of the other categories "
                "not graded, left out)") if grader.skipped else ""
        return f"capability: llm grader {grader.label}{only}"
    if summary.measure == "fidelity":
        return f"fidelity to AR only: {summary.scorer} (capability not measured)"
    classifier = f", classifier: {summary.classifier}" if summary.classifier else ""
    return f"capability: {summary.scorer}{classifier}"


def score_unit(summary: TaskSummary) -> str:
    if summary.binary:
        return "pass rate, %"
    if summary.rated_by_grader:
        return "the grader's rating 1-10 × 10"
    return summary.scorer + " × 100"


def main_table(summary: TaskSummary) -> Table:
    what = "capability" if summary.measure == "capability" else "fidelity to AR (capability not measured)"
    profiles = summary.profiles
    columns = schema_columns("main", profiles)
    return Table(f"{summary.task}-table", f"{summary.task}: speed and {what} per arm", columns,
                 tuple(main_row(c, summary.binary, profiles) for c in summary.cells),
                 f"n = {summary.n_units} paired units. Speed-up = Σ AR time / Σ method time; latency = mean "
                 f"seconds per unit; score in points ({score_unit(summary)}; {measured_by(summary)});"
                 f" Δ vs AR = mean paired score difference; p = exact McNemar test "
                 f"({'pass/fail' if summary.binary else 'not applicable to non-binary scores'}); acc. retained = "
                 "score / AR score; relaxed frac. = relaxed acceptances / emitted tokens; length ratio = output "
                 "tokens / AR output tokens; cut at budget = samples stopped at max_new_tokens (a reasoning model "
                 "cut there has no answer). Brackets: 95% paired-bootstrap CI." + (PROXY_NOTE if profiles else "")
                 + _repeats_note(summary) + _agreement_note(summary),
                 essential=schema_essential("main", profiles))


GRADER_COLUMNS = ("grader", "graded", "verdicts", "unparseable", "not graded", "outside protocol", "self-agreement",
                  "mean |Δ rating|, pts")


def self_agreement_text(grader: GraderSummary) -> str:
    return self_agreement_words(grader)


def grader_table(summary: TaskSummary) -> Table | None:
    """The grader behind the capability scores and how far to trust it (None when no grader graded the task)."""
    grader = summary.grader
    if grader is None:
        return None
    share = grader.unparseable_share
    row = Row(grader.label, (
        Cell(grader.label, "grader"), num(str(grader.graded), "graded", grader.graded),
        num(str(grader.verdicts), "verdicts", grader.verdicts),
        num(f"{grader.unparseable} ({fmt(share, '.1%')})", "unparseable_share", share),
        num(str(grader.not_graded), "not_graded", grader.not_graded),
        num(str(grader.skipped), "skipped", grader.skipped),
        Cell(self_agreement_text(grader), "agreement_exact", grader.agreement_exact, numeric=grader.self_check),
        num(fmt(grader.agreement_mean_abs, ".1f"), "agreement_mean_abs", grader.agreement_mean_abs),
    ))
    return Table(f"{summary.task}-grader", f"{summary.task}: the grader behind the capability scores", GRADER_COLUMNS,
                 (row,), "Graded = samples with a first-pass verdict; verdicts = on this task's samples (both "
                         "passes); unparseable = a verdict the task's grading "
                         "protocol cannot read (MT-Bench: no [[rating]] or [rating], FastChat's -1; refusal: neither "
                         "or both of [[YES]] and [[NO]]), left out of every average; not graded = samples whose grader "
                         "call failed (relaxbench rescore asks again); outside protocol = samples of categories the "
                         "task's grading protocol does not grade (Spec-Bench's subtasks other than MT-Bench), left out "
                         "of the capability figures; self-agreement = AR samples graded twice "
                         f"({grader.self_check_how}).")


DIAGNOSTIC_COLUMNS = schema_columns("diagnostics")
# the rule, the other speed-up, the lossless check (the proxy geomean is in --wide, its total in the main table)
DIAGNOSTIC_ESSENTIAL = schema_columns("diagnostics", narrow=True)


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


def diagnostic_row(cell: CellSummary, profiles: tuple[str, ...] = ()) -> Row:
    return schema_row("diagnostics", cell, Context(profiles=profiles))


def diagnostics_table(summary: TaskSummary) -> Table:
    profiles = summary.profiles
    return Table(f"{summary.task}-diagnostics", f"{summary.task}: sample counts and diagnostics",
                 schema_columns("diagnostics", profiles), tuple(diagnostic_row(c, profiles) for c in summary.cells),
                 "Geomean speed-up = exp(mean log(AR time / method time)) over units (proxy: of proxy times); "
                 "rule ms/round = the verification rule's decision time per round on this "
                 "run's device, rule share = Σ rule time / Σ generation time; discordant = units AR passed and "
                 "the arm failed / the reverse; reproduced AR = units whose output ids equal AR's (divergences of "
                 "lossless arms are diagnosed); stop reasons over the paired samples ('length' = cut at "
                 "max_new_tokens).",
                 essential=schema_essential("diagnostics", profiles))


def target_alone_table(summary: TaskSummary) -> Table:
    """A task scored by the target's likelihoods: AR's score, and every method equal to it by definition."""
    rows = tuple(Row(cell.arm, (
        Cell(cell.arm, "arm"),
        num(score_text(cell, summary.binary), "score", cell.score),
        est("-" if cell.is_baseline else pts(cell.score_delta.value, signed=True), "score_delta", cell.score_delta),
        Cell("= AR by definition: no rule changes a likelihood" if cell.by_definition else "measured", "why"),
    ), emphasis=cell.is_baseline) for cell in summary.cells)
    return Table(f"{summary.task}-table", f"{summary.task}: scored by the target's likelihoods alone (no generation, "
                                          "so no speed figures)", ("method", "score", "Δ vs AR, pts", "why"), rows,
                 f"n = {summary.n_units} units, scored once by the target alone; score in points "
                 f"({'pass rate, %' if summary.binary else summary.scorer + ' × 100'}).")


CATEGORY_ESSENTIAL = ("method", "category", "n", "score", "Δ vs AR, pts [95% CI]")  # then the scorer's details


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
                num(str(n), "n_units", n), num(pts(score), "score", score),
                est("-" if cell.is_baseline else pts_ci(delta), "score_delta", delta),
                *(num(fmt(details.get(k), ".3f"), f"details.{k}", details.get(k)) for k in keys),
            ), emphasis=name == "all"))
    fidelity = (" (fidelity to AR: exact match, ROUGE-L, log-likelihood)" if summary.measure == "fidelity"
                or summary.rated_by_grader and keys else "")
    return Table(f"{summary.task}-categories", f"{summary.task}: scores by category and the scorer's details",
                 (*CATEGORY_ESSENTIAL, *keys), tuple(rows),
                 f"Scores in points ({measured_by(summary)}); the detail columns are the task scorer's own metrics"
                 f"{fidelity} averaged over units (first repeat).", essential=CATEGORY_ESSENTIAL)


FAILURE_COLUMNS = schema_columns("failures")


def rate_text(rate: FailureRate | None) -> str:
    """A failure count over the paired samples, 'n/N (share)'; '-' where the measure does not apply."""
    if rate is None or not rate.samples:
        return "-"
    return f"{rate.count}/{rate.samples} ({rate.count / rate.samples:.0%})"


def rate_delta_text(rate: FailureRate | None, is_baseline: bool) -> str:
    """The paired difference of failure shares to AR in percentage points, with its CI."""
    return "-" if rate is None or is_baseline else pts_ci(rate.delta)


def failure_cells(cell: CellSummary) -> tuple[Cell, ...]:
    """The failure table's cells of one arm after its name ('-' throughout for an arm with no failure measures)."""
    return schema_cells("failures", cell, Context())[1:]


def failure_table(summary: TaskSummary) -> Table:
    """How each arm fails, paired against AR: no answer, cut at the budget, ending in a loop, output length, and
    samples closed by a forced end of thinking. A rule that is fast because it stops early or loops shows here."""
    rows = tuple(schema_row("failures", c, Context()) for c in summary.cells)
    return Table(f"{summary.task}-failures", f"{summary.task}: failure modes per arm, paired against AR",
                 schema_columns("failures"), rows,
                 "Over the paired samples. No answer = the task's scorer found none (nothing extracted, or the output "
                 "ended inside its thinking; '-' where the scorer has no notion of an answer); cut at budget = stopped "
                 "at max_new_tokens; ends in a loop = the output ends in ≥ 3 back-to-back copies of one unit of up to "
                 "256 tokens, spanning ≥ 15 tokens; Δ = mean over units of the arm's failing share minus AR's, in "
                 "percentage points, with a 95% paired-bootstrap CI; length ratio = output tokens / AR output "
                 "tokens (CI over units); forced = samples whose thinking hit the thinking budget and was closed by "
                 "the forced text; relaxed frac. in / out of thinking = a span-gated rule's (relax_in) relaxed "
                 "acceptances / emitted tokens inside <think> .. </think> and outside it.",
                 essential=schema_essential("failures"))


def failures_brief(cell: CellSummary) -> str:
    """The failure Δs of one arm in a few words (the summary table's column)."""
    f = cell.failures
    if f is None or cell.is_baseline:
        return "-"
    parts = [f"{label} {pts(rate.delta.value, signed=True)}" for label, rate in
             (("no answer", f.no_answer), ("cut", f.cut), ("loop", f.loop))
             if rate is not None and rate.delta.value is not None]
    return ", ".join(parts) + " pp" if parts else "-"


# ---------------------------------------------------------------------------------------- acceptance by category

CATEGORY_ACCEPTANCE_COLUMNS = ("category", "method", "n units", "MAL", "acc. rate", "relaxed frac. (AR-paired)",
                               "relaxation gain")
POSITIONS_SHOWN = 6  # the per-position table's columns a narrow display keeps


def gains_text(gains: tuple[RelaxationGain, ...]) -> str:
    """Where each relaxed arm's relaxation gains most and least, in one sentence per arm."""
    def signed(gain: RelaxationGain, value: float) -> str:
        return f"{value:+.2f} MAL" if gain.reference is not None else f"{value:.1%} relaxed"

    return " ".join(f"{g.arm} gains most in {g.most[0]} ({signed(g, g.most[1])}) and least in {g.least[0]} "
                    f"({signed(g, g.least[1])}){'' if g.reference is None else ' over ' + g.reference}."
                    for g in gains)


def category_acceptance_table(summary: TaskSummary) -> Table | None:
    """MAL, acceptance rate and the AR-paired relaxed fraction by item category × arm, with each relaxed arm's gain
    over the strict reference there (None when the task's items have no categories)."""
    categories = categories_of(summary)
    if not categories or summary.target_alone:
        return None
    gains = relaxation_gains(summary)
    by_arm = {g.arm: dict(g.gains) for g in gains}
    rows = []
    for name in categories:
        for cell in summary.cells:
            part = cell.acceptance.categories.get(name)
            if part is None:
                continue
            path = f"acceptance.categories.{name}"
            gain = by_arm.get(cell.arm, {}).get(name)
            reference = next((g.reference for g in gains if g.arm == cell.arm), None)
            gain_text = "-" if gain is None else (f"{gain:+.2f}" if reference is not None else f"{gain:.1%}")
            rows.append(Row(f"{name}/{cell.arm}", (
                Cell(name, "category"), Cell(cell.arm, "arm"),
                num(str(part.n_units), f"{path}.n_units", part.n_units),
                num(fmt(part.mean_acceptance_length), f"{path}.mean_acceptance_length", part.mean_acceptance_length),
                num(fmt(part.acceptance_rate, ".1%"), f"{path}.acceptance_rate", part.acceptance_rate),
                num(fmt(part.relaxed_fraction, ".1%"), f"{path}.relaxed_fraction", part.relaxed_fraction),
                num(gain_text, f"{path}.gain", gain),
            ), emphasis=cell.is_baseline))
    said = gains_text(gains)
    return Table(f"{summary.task}-acceptance-categories", f"{summary.task}: acceptance by category",
                 CATEGORY_ACCEPTANCE_COLUMNS, tuple(rows),
                 "Over each category's paired units (the units every arm finished), every repeat counted. MAL = "
                 "emitted tokens / verification rounds; acc. rate = accepted / drafted tokens; relaxed frac. = "
                 "relaxed acceptances / emitted tokens over the same AR-paired units; relaxation gain = the arm's "
                 "MAL minus that of the strict reference (the lossless drafted arm with the same drafter and k), or "
                 "its relaxed fraction where the run has no lossless drafted arm." + (f" {said}" if said else ""))


def category_positions_table(summary: TaskSummary) -> Table | None:
    """Per-position acceptance (vLLM's num_accepted_tokens_per_pos / num_drafts) by item category × arm."""
    categories = categories_of(summary)
    if not categories or summary.target_alone:
        return None
    width = max((len(p.acceptance_by_position) for c in summary.cells for p in c.acceptance.categories.values()),
                default=0)
    if not width:
        return None
    positions = tuple(f"pos {i}" for i in range(1, width + 1))
    rows = []
    for name in categories:
        for cell in summary.cells:
            part = cell.acceptance.categories.get(name)
            if part is None or not part.acceptance_by_position:
                continue
            path = f"acceptance.categories.{name}.acceptance_by_position"
            values = part.acceptance_by_position
            rows.append(Row(f"{name}/{cell.arm}", (
                Cell(name, "category"), Cell(cell.arm, "arm"),
                *(num(fmt(values[i] if i < len(values) else None, ".1%"), f"{path}.{i}",
                      values[i] if i < len(values) else None) for i in range(width)),
            )))
    columns = ("category", "method", *positions)
    return Table(f"{summary.task}-acceptance-positions", f"{summary.task}: acceptance by draft position and category",
                 columns, tuple(rows),
                 "pos i = rounds that accepted draft position i / rounds with a draft, over the category's paired "
                 "units (vLLM's num_accepted_tokens_per_pos / num_drafts): P(accepted length ≥ i).",
                 essential=columns[:2 + POSITIONS_SHOWN] if width > POSITIONS_SHOWN else ())


# ------------------------------------------------------------------------------------------------ agreement of two arms

AGREEMENT_COLUMNS = ("arm A", "arm B", "n", "identical outputs", "token agreement", "median first divergence",
                     "rounds alike", "MAL A", "MAL B")


def divergence_text(position: float | None) -> str:
    """A median token position: whole when it is one, else to one decimal (the mean of two middle samples)."""
    if position is None:
        return "-"
    return f"{position:.0f}" if float(position).is_integer() else f"{position:.1f}"


def agreement_row(pair: Agreement) -> Row:
    share = pair.identical_share
    return Row(f"{pair.arm_a}:{pair.arm_b}", (
        Cell(pair.arm_a, "arm_a"), Cell(pair.arm_b, "arm_b"),
        num(str(pair.n), "agreement.n", pair.n),
        num("-" if share is None else f"{pair.identical}/{pair.n} ({share:.0%})", "agreement.identical", share),
        num(fmt(pair.token_agreement, ".1%"), "agreement.token_agreement", pair.token_agreement),
        num(divergence_text(pair.median_first_divergence), "agreement.median_first_divergence",
            pair.median_first_divergence),
        num(fmt(pair.rounds_alike, ".1%"), "agreement.rounds_alike", pair.rounds_alike),
        num(fmt(pair.mal_a), "agreement.mal_a", pair.mal_a),
        num(fmt(pair.mal_b), "agreement.mal_b", pair.mal_b),
    ))


def agreement_table(task: str, pairs: Sequence[Agreement]) -> Table | None:
    """How closely pairs of arms agree on the same samples (None when the task has no pair): the rules' declared
    counterparts (fly-native and fly-vllm) and the pairs named with --agree."""
    if not pairs:
        return None
    declared = [f"{p.arm_a} / {p.arm_b}" for p in pairs if p.declared]
    unlike = [f"{p.arm_a} / {p.arm_b}" for p in pairs if not p.same_drafts]
    note = ("Over the samples both arms finished (the same item, turn and repeat); n = those samples. Identical "
            "outputs = equal output token ids; token agreement = mean of (tokens shared before the first difference) "
            "/ (tokens of the longer output); median first divergence = the tokens shared before the first "
            "difference, median over the samples that differ; rounds alike = A's rounds whose (drafted, accepted) "
            "equal B's from the first round until the first that does not / A's rounds, which compares decisions "
            "only when both arms have the same drafter and k; MAL A / MAL B = each arm's emitted tokens / rounds "
            "over the same samples.")
    if declared:
        note += (f" Paired because one rule is the other's counterpart (another implementation of the same rule): "
                 f"{', '.join(declared)}.")
    if unlike:
        note += f" Different drafter or k, so rounds alike does not compare decisions: {', '.join(unlike)}."
    return Table(f"{task}-agreement", f"{task}: agreement between arms", AGREEMENT_COLUMNS,
                 tuple(agreement_row(p) for p in pairs), note, unbroken=AGREEMENT_COLUMNS[1:2])


DRAFTER_COLUMNS = ("drafter", "arm", "k", "MAL (exact)", "MAL gain", "speed gain", "proxy gain", "speed-up",
                   "Δ score", "relaxed")


def drafter_row(gain: DrafterGain) -> Row:
    return Row(f"{gain.drafter}:{gain.arm}", (
        Cell(gain.drafter, "drafters.drafter"), Cell(gain.arm, "drafters.arm"), num(str(gain.k), "drafters.k", gain.k),
        num(f"{fmt(gain.mal)} ({fmt(gain.exact_mal)})", "drafters.mal", gain.mal),
        est(speed_ci(gain.mal_gain), "drafters.mal_gain", gain.mal_gain),
        est(speed_ci(gain.speed_gain), "drafters.speed_gain", gain.speed_gain),
        est(speed_ci(gain.proxy_gain), "drafters.proxy_gain", gain.proxy_gain),
        est(speed_ci(gain.speedup), "drafters.speedup", gain.speedup),
        est(pts_ci(gain.score_delta), "drafters.score_delta", gain.score_delta),
        num(fmt(gain.relaxed_fraction, ".1%"), "drafters.relaxed_fraction", gain.relaxed_fraction),
    ))


def drafter_table(task: str, gains: Sequence[DrafterGain]) -> Table | None:
    """Relaxation by drafter (None when the task has exact arms for fewer than two drafters): what each relaxed
    rule gains over exact verification with the same drafter and k."""
    if not gains:
        return None
    note = ("Each relaxed arm against the exact arm with the same drafter and k, over the units both finished "
            f"(n = {gains[0].n_units}): MAL gain = the arm's MAL / exact's MAL (MAL (exact) shows both); speed gain "
            "= exact's total time / the arm's; proxy gain = the same on "
            f"{gains[0].proxy_profile or 'a deployment profile (none declared: --profile DEVICE)'}'s proxy times; "
            "each with a 95% paired bootstrap CI over units. Speed-up and Δ score "
            "are against AR, as in the main table; relaxed = relaxed acceptances / emitted tokens. A rule "
            "that pays with one drafter may not with another (Xia et al.: relaxation needs a drafter that is a "
            "good language model).")
    return Table(f"{task}-drafters", f"{task}: relaxation by drafter", DRAFTER_COLUMNS,
                 tuple(drafter_row(g) for g in gains), note, unbroken=DRAFTER_COLUMNS[:2])


def task_tables(summary: TaskSummary, agreements: Sequence[Agreement] = (),
                drafter_gains: Sequence[DrafterGain] = ()) -> tuple[Table, ...]:
    """Every table of one task, in order: what ``compare``/``summary`` print and the report shows per task
    (``agreements``: the task's pairs of arms, ``relaxbench.analysis.agreement``; their table comes last;
    ``drafter_gains``: relaxation by drafter, ``relaxbench.analysis.drafters``, after the main tables)."""
    tables = [target_alone_table(summary)] if summary.target_alone else [main_table(summary),
                                                                          failure_table(summary),
                                                                          diagnostics_table(summary)]
    grader = grader_table(summary)
    if grader is not None:
        tables.insert(1, grader)
    categories = category_table(summary)
    if categories is not None:
        tables.append(categories)
    tables += [t for t in (drafter_table(summary.task, drafter_gains), category_acceptance_table(summary),
                           category_positions_table(summary), agreement_table(summary.task, agreements))
               if t is not None]
    return tuple(tables)
