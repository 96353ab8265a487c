"""Speed against concurrency, for the runs of one store that differ only in concurrency (``compare --engine vllm
--concurrency 1,8``; ``relaxbench.analysis.concurrency`` finds them and computes the points): a table per task
(samples, tokens/s, time per output token and speed-up over AR at each concurrency) and a figure per task (tokens/s
and time per output token against concurrency, a line per arm). The report, the terminal and the figure files in
the run folder all take them from here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from relaxbench.analysis.concurrency import ConcurrencyPoint, concurrency_points, concurrency_runs
from relaxbench.report.figures import AR_COLOR, FigureArt
from relaxbench.report.tables import Cell, Row, Table, est, fmt, num, speed_ci

FIGURE_NAME = "concurrency.png"
FIGURE_KIND = "concurrency"  # its entry in figures.FIGURE_METHODS


def tasks_of(points: Sequence[ConcurrencyPoint]) -> list[str]:
    return list(dict.fromkeys(p.task for p in points))


def concurrency_tables(points: Sequence[ConcurrencyPoint]) -> list[Table]:
    tables = []
    for task in tasks_of(points):
        rows = tuple(Row(p.arm, (Cell(p.arm), num(str(p.concurrency), "concurrency", p.concurrency),
                                 num(str(p.samples), "samples", p.samples),
                                 num(fmt(p.tokens_per_second), "tokens_per_second", p.tokens_per_second),
                                 num(fmt(None if p.time_per_output_token is None else p.time_per_output_token * 1e3,
                                         ".1f"), "time_per_output_token", p.time_per_output_token),
                                 est(speed_ci(p.speedup), "speedup", p.speedup)),
                         emphasis=p.arm == "ar")
                     for p in points if p.task == task)
        tables.append(Table(f"{task}-concurrency", f"{task}: speed against concurrency",
                            ("arm", "concurrency", "samples", "tokens/s", "ms/token", "speed-up vs AR [95% CI]"),
                            rows,
                            "tokens/s = the engine's output tokens over the wall time of the arm's batches; ms/token "
                            "= a request's time per output token after its first; speed-up = geometric mean over "
                            "units of AR time / arm time at the same concurrency, with its 95% paired-bootstrap CI"))
    return tables


def concurrency_figure(points: Sequence[ConcurrencyPoint], task: str) -> Figure:
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    speed, latency = fig.subplots(1, 2)
    levels = sorted({p.concurrency for p in points if p.task == task})
    for arm in dict.fromkeys(p.arm for p in points if p.task == task):
        line = sorted((p for p in points if p.task == task and p.arm == arm), key=lambda p: p.concurrency)
        xs = [p.concurrency for p in line]
        style = {"color": AR_COLOR, "linewidth": 2.0} if arm == "ar" else {}
        speed.plot(xs, [p.tokens_per_second or float("nan") for p in line], marker="o", label=arm, **style)
        latency.plot(xs, [(p.time_per_output_token or float("nan")) * 1e3 for p in line], marker="o", label=arm,
                     **style)
    for ax, label in ((speed, "output tokens/s"), (latency, "time per output token (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(label)
        ax.grid(True, color="#dddddd", linewidth=0.6)
    speed.legend(fontsize=8)
    fig.suptitle(f"{task}: speed against concurrency")
    return fig


def concurrency_figure_art(points: Sequence[ConcurrencyPoint], task: str) -> FigureArt:
    """The task's figure as the report draws its others (SVG in the HTML, PNG in the PDF, caption from
    ``FIGURE_METHODS``)."""
    return FigureArt(f"{task}-concurrency", FIGURE_KIND, task, concurrency_figure(points, task))


def figure_path(out: Path, task: str, first: bool) -> Path:
    """Where ``compare`` saves a task's figure in the run folder: ``concurrency.png`` for the first task."""
    return out / (FIGURE_NAME if first else f"concurrency-{task}.png")


def save_concurrency_figures(out: Path, run_id: int | None = None) -> list[Path]:
    """Save the figure of every task of run ``run_id`` (default: the latest) and its concurrency siblings in the
    store at ``out`` into that folder; none when the run has no siblings."""
    from relaxbench.analysis import load_run

    points = concurrency_points(concurrency_runs(out, load_run(out, run_id)))
    paths = []
    for i, task in enumerate(tasks_of(points)):
        path = figure_path(out, task, i == 0)
        concurrency_figure(points, task).savefig(path, dpi=120)
        paths.append(path)
    return paths
