"""The one table model (``Table`` of ``Row`` of ``Cell``) and the builders of the per-task tables.

The terminal (``terminal.py``, for ``compare`` and ``summary``), the HTML template and the PDF renderer all render
these same objects, so a count is worded and formatted once. Each cell keeps the analysis value it formats
(``metric`` names the ``CellSummary`` field), which the HTML writes as data attributes for readers and tests.
No figure is computed here: everything comes from ``relaxbench.analysis``' summaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relaxbench.analysis.metrics import POINTS, CellSummary, Estimate, FailureRate, GraderSummary, TaskSummary


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
        return Table(self.key, self.title, tuple(self.columns[i] for i in keep), rows, self.note)


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

MAIN_COLUMNS = ("method", "knobs", "MAL", "acc. rate", "speed-up [95% CI]", "latency s", "score",
                "Δ vs AR, pts [95% CI]", "p", "acc. retained", "relaxed frac.", "length ratio", "cut at budget")
# what the terminal shows by default: the arm, why it is fast, how fast (measured and priced), what it costs
MAIN_ESSENTIAL = ("method", "MAL", "speed-up [95% CI]", "score", "Δ vs AR, pts [95% CI]")
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
    return Row(cell.arm, (
        Cell(cell.arm, "arm"),
        Cell(knobs_text(cell.knobs), "knobs"),
        num(fmt(cell.mean_acceptance_length), "mean_acceptance_length", cell.mean_acceptance_length),
        num(fmt(cell.acceptance_rate, ".1%"), "acceptance_rate", cell.acceptance_rate),
        est(speed_ci(cell.speedup_total), "speedup_total", cell.speedup_total),
        *(proxy_cell(cell, p) for p in profiles),
        num(fmt(cell.latency_mean, ".2f"), "latency_mean", cell.latency_mean),
        Cell(score_text(cell, binary), "score", cell.score, cell.score_interval.low, cell.score_interval.high,
             numeric=True),
        est("-" if cell.is_baseline else pts_ci(cell.score_delta), "score_delta", cell.score_delta),
        num(fmt_p(cell.mcnemar_p), "mcnemar_p", cell.mcnemar_p),
        num(fmt(cell.accuracy_retained, ".1%"), "accuracy_retained", cell.accuracy_retained),
        num(fmt(cell.relaxed_fraction, ".1%"), "relaxed_fraction", cell.relaxed_fraction),
        num(fmt(cell.output_length_ratio, ".3f"), "output_length_ratio", cell.output_length_ratio),
        num(truncated_text(cell), "truncated", cell.truncated),
    ), emphasis=cell.is_baseline)


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
        return f"capability: llm grader {summary.grader.label}"
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
    columns = with_proxy_columns(MAIN_COLUMNS, "speed-up [95% CI]", profiles)
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
                 essential=with_proxy_columns(MAIN_ESSENTIAL, "speed-up [95% CI]", profiles))


GRADER_COLUMNS = ("grader", "verdicts", "unparseable", "not graded", "self-agreement", "mean |Δ rating|, pts")


def self_agreement_text(grader: GraderSummary) -> str:
    if not grader.self_check:
        return "not measured (see the note)"
    if grader.agreement_exact is None:
        return "AR graded twice, no pair with two ratings"
    return f"{grader.agreement_exact:.0%} same rating ({grader.agreement_pairs} AR samples)"


def grader_table(summary: TaskSummary) -> Table | None:
    """The grader behind the capability scores and how far to trust it (None when no grader graded the task)."""
    grader = summary.grader
    if grader is None:
        return None
    share = grader.unparseable_share
    row = Row(grader.label, (
        Cell(grader.label, "grader"), num(str(grader.verdicts), "verdicts", grader.verdicts),
        num(f"{grader.unparseable} ({fmt(share, '.1%')})", "unparseable_share", share),
        num(str(grader.not_graded), "not_graded", grader.not_graded),
        Cell(self_agreement_text(grader), "agreement_exact", grader.agreement_exact, numeric=grader.self_check),
        num(fmt(grader.agreement_mean_abs, ".1f"), "agreement_mean_abs", grader.agreement_mean_abs),
    ))
    return Table(f"{summary.task}-grader", f"{summary.task}: the grader behind the capability scores", GRADER_COLUMNS,
                 (row,), "Verdicts on this task's samples (both passes); unparseable = a verdict the task's grading "
                         "protocol cannot read (MT-Bench: no [[rating]] or [rating], FastChat's -1; refusal: neither "
                         "or both of [[YES]] and [[NO]]), left out of every average; not graded = samples whose grader "
                         "call failed (relaxbench rescore asks again); self-agreement = AR samples graded twice "
                         f"({grader.self_check_how}).")


DIAGNOSTIC_COLUMNS = ("method", "policy", "n units", "n samples", "geomean speed-up [95% CI]",
                      "median latency s", "tokens/s", "policy ms/round", "policy share", "discordant lost / gained",
                      "reproduced AR", "stop reasons")

# the rule, the other speed-up, the lossless check (the proxy geomean is in --wide, its total in the main table)
DIAGNOSTIC_ESSENTIAL = ("method", "policy", "geomean speed-up [95% CI]", "tokens/s", "reproduced AR")


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
    discordant = "-" if cell.discordant is None else f"{cell.discordant[0]} / {cell.discordant[1]}"
    stops = ", ".join(f"{reason} {count}" for reason, count in cell.stop_reasons.items()) or "-"
    policy_ms = None if cell.policy_time_per_round is None else cell.policy_time_per_round * 1e3
    return Row(cell.arm, (
        Cell(cell.arm, "arm"),
        Cell(cell.policy + (" (lossless)" if cell.lossless and not cell.is_baseline else ""), "policy"),
        num(str(cell.n_units), "n_units", cell.n_units),
        num(str(cell.n_samples), "n_samples", cell.n_samples),
        est(speed_ci(cell.speedup_geomean), "speedup_geomean", cell.speedup_geomean),
        *(proxy_cell(cell, p, geomean=True) for p in profiles),
        num(fmt(cell.latency_median, ".2f"), "latency_median", cell.latency_median),
        num(fmt(cell.tokens_per_second, ".2f"), "tokens_per_second", cell.tokens_per_second),
        Cell(fmt(policy_ms, ".3f"), "policy_time_per_round", cell.policy_time_per_round, numeric=True),
        num(fmt(cell.policy_share, ".1%"), "policy_share", cell.policy_share),
        Cell(discordant, "discordant", numeric=True),
        Cell(reproduced_text(cell), "divergences", numeric=True),
        Cell(stops, "stop_reasons"),
    ), emphasis=cell.is_baseline)


def diagnostics_table(summary: TaskSummary) -> Table:
    profiles = summary.profiles
    return Table(f"{summary.task}-diagnostics", f"{summary.task}: sample counts and diagnostics",
                 with_proxy_columns(DIAGNOSTIC_COLUMNS, "geomean speed-up [95% CI]", profiles, "geomean"),
                 tuple(diagnostic_row(c, profiles) for c in summary.cells),
                 "Geomean speed-up = exp(mean log(AR time / method time)) over units (proxy: of proxy times); "
                 "policy ms/round = the verification rule's decision time per round on this "
                 "run's device, policy share = Σ policy time / Σ generation time; discordant = units AR passed and "
                 "the arm failed / the reverse; reproduced AR = units whose output ids equal AR's (divergences of "
                 "lossless arms are diagnosed); stop reasons over the paired samples ('length' = cut at "
                 "max_new_tokens).",
                 essential=DIAGNOSTIC_ESSENTIAL)


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


FAILURE_COLUMNS = ("method", "no answer", "Δ no answer, pp [95% CI]", "cut at budget", "Δ cut, pp [95% CI]",
                   "ends in a loop", "Δ loop, pp [95% CI]", "length ratio [95% CI]", "forced",
                   "relaxed frac. in / out of thinking")


def rate_text(rate: FailureRate | None) -> str:
    """A failure count over the paired samples, 'n/N (share)'; '-' where the measure does not apply."""
    if rate is None or not rate.samples:
        return "-"
    return f"{rate.count}/{rate.samples} ({rate.count / rate.samples:.0%})"


def rate_delta_text(rate: FailureRate | None, is_baseline: bool) -> str:
    """The paired difference of failure shares to AR in percentage points, with its CI."""
    return "-" if rate is None or is_baseline else pts_ci(rate.delta)


def failure_cells(cell: CellSummary) -> tuple[Cell, ...]:
    f = cell.failures
    if f is None:
        return tuple(Cell("-", numeric=True) for _ in FAILURE_COLUMNS[1:])
    out: list[Cell] = []
    for name, rate in (("no_answer", f.no_answer), ("cut", f.cut), ("loop", f.loop)):
        out.append(Cell(rate_text(rate), f"failures.{name}", None if rate is None else rate.rate, numeric=True))
        delta = Estimate(None) if rate is None or cell.is_baseline else rate.delta
        out.append(est(rate_delta_text(rate, cell.is_baseline), f"failures.{name}.delta", delta))
    out.append(est(fmt_ci(f.length_ratio, ".3f"), "failures.length_ratio", f.length_ratio))
    out.append(num(str(f.forced), "failures.forced", f.forced))
    span = ("-" if cell.relaxed_in_span is None and cell.relaxed_outside_span is None else
            f"{fmt(cell.relaxed_in_span, '.1%')} / {fmt(cell.relaxed_outside_span, '.1%')}")
    out.append(Cell(span, "relaxed_in_span", cell.relaxed_in_span, numeric=True))
    return tuple(out)


def failure_table(summary: TaskSummary) -> Table:
    """How each arm fails, paired against AR: no answer, cut at the budget, ending in a loop, output length, and
    samples closed by a forced end of thinking. A rule that is fast because it stops early or loops shows here."""
    rows = tuple(Row(c.arm, (Cell(c.arm, "arm"), *failure_cells(c)), emphasis=c.is_baseline) for c in summary.cells)
    return Table(f"{summary.task}-failures", f"{summary.task}: failure modes per arm, paired against AR",
                 FAILURE_COLUMNS, rows,
                 "Over the paired samples. No answer = the task's scorer found none (nothing extracted, or the output "
                 "ended inside its thinking; '-' where the scorer has no notion of an answer); cut at budget = stopped "
                 "at max_new_tokens; ends in a loop = the output ends in ≥ 3 back-to-back copies of one unit of up to "
                 "256 tokens, spanning ≥ 15 tokens; Δ = mean over units of the arm's failing share minus AR's, in "
                 "percentage points, with a 95% paired-bootstrap CI; length ratio = output tokens / AR output "
                 "tokens (CI over units); forced = samples whose thinking hit the thinking budget and was closed by "
                 "the forced text; relaxed frac. in / out of thinking = a span-gated rule's (relax_in) relaxed "
                 "acceptances / emitted tokens inside <think> .. </think> and outside it.")


def failures_brief(cell: CellSummary) -> str:
    """The failure Δs of one arm in a few words (the summary table's column)."""
    f = cell.failures
    if f is None or cell.is_baseline:
        return "-"
    parts = [f"{label} {pts(rate.delta.value, signed=True)}" for label, rate in
             (("no answer", f.no_answer), ("cut", f.cut), ("loop", f.loop))
             if rate is not None and rate.delta.value is not None]
    return ", ".join(parts) + " pp" if parts else "-"


def task_tables(summary: TaskSummary) -> tuple[Table, ...]:
    """Every table of one task, in order: what ``compare``/``summary`` print and the report shows per task."""
    tables = [target_alone_table(summary)] if summary.target_alone else [main_table(summary),
                                                                          failure_table(summary),
                                                                          diagnostics_table(summary)]
    grader = grader_table(summary)
    if grader is not None:
        tables.insert(1, grader)
    categories = category_table(summary)
    if categories is not None:
        tables.append(categories)
    return tuple(tables)
