"""Terminal presentation of the summaries (rich tables). No figure is computed here."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from relaxbench.analysis.metrics import CellSummary, Estimate, TaskSummary


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


def _reproduced(cell: CellSummary) -> str:
    d = cell.divergences
    if d is None:
        return "-"
    text = f"{d.reproduced}/{d.compared}"
    if d.near_tie or d.not_near_tie:
        text += f" ({d.near_tie} near-tie, {d.not_near_tie} other)"
    return text


def task_table(summary: TaskSummary) -> Table:
    """Method, MAL, acceptance rate, speed-up [CI], score, Δ vs AR [CI], p — one row per arm."""
    if summary.target_alone:
        return target_alone_table(summary)
    table = Table(title=f"{summary.task}  ({summary.n_units} samples, scorer {summary.scorer})", title_justify="left")
    columns = ("method", "MAL", "acc. rate", "speed-up [95% CI]", "geomean", "modelled", "latency s",
               "score", "Δ vs AR [95% CI]", "p", "reproduced AR")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for cell in summary.cells:
        score_spec = ".1%" if summary.binary else ".3f"
        table.add_row(
            escape(cell.arm), fmt(cell.mean_acceptance_length), fmt(cell.acceptance_rate, ".1%"),
            fmt_ci(cell.speedup_total, ".2f", "x"), fmt(cell.speedup_geomean.value, ".2f", "x"),
            fmt(cell.modelled_speedup, ".2f", "x"), fmt(cell.latency_mean, ".2f"), fmt(cell.score, score_spec),
            "-" if cell.is_baseline else fmt_ci(cell.score_delta, "+.3f"), fmt_p(cell.mcnemar_p),
            _reproduced(cell))
    return table


def target_alone_table(summary: TaskSummary) -> Table:
    """A task scored by the target's likelihoods: AR's score, and every method equal to it by definition."""
    table = Table(title=f"{summary.task}  ({summary.n_units} samples, {summary.scorer}: likelihoods of the target "
                        "alone; no generation, so no speed figures)", title_justify="left")
    for i, name in enumerate(("method", "score", "Δ vs AR", "why")):
        table.add_column(name, justify="left" if i in (0, 3) else "right", no_wrap=i == 0)
    score_spec = ".1%" if summary.binary else ".3f"
    for cell in summary.cells:
        delta = "-" if cell.is_baseline else fmt(cell.score_delta.value, "+.3f")
        why = "= AR by definition: no rule changes a likelihood" if cell.by_definition else "measured"
        table.add_row(cell.arm, fmt(cell.score, score_spec), delta, why)
    return table


def details_table(summary: TaskSummary) -> Table | None:
    """Secondary metrics the scorer stores (agreement's exact match / ROUGE-L / log-likelihood), per category."""
    keys = sorted({k for c in summary.cells for k in c.details})
    if not keys:
        return None
    table = Table(title=f"{summary.task}: details", title_justify="left")
    table.add_column("method", no_wrap=True)
    table.add_column("category")
    for key in keys:
        table.add_column(key, justify="right")
    for cell in summary.cells:
        table.add_row(escape(cell.arm), "all", *(fmt(cell.details.get(k), ".3f") for k in keys))
        for name, group in cell.by_category.items():
            table.add_row("", name, *(fmt(group.details.get(k), ".3f") for k in keys))
    return table
