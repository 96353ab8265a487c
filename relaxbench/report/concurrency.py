"""Speed against concurrency, for the runs of one store that differ only in concurrency (``compare --engine vllm
--concurrency 1,8``): a table per task (tokens/s, time per output token and speed-up over AR at each
concurrency) and a figure (tokens/s and time per output token against concurrency, a line per arm)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from relaxbench.analysis.concurrency import ConcurrencyPoint, concurrency_points
from relaxbench.report.tables import Cell, Row, Table, est, fmt, num

FIGURE_NAME = "concurrency.png"


def concurrency_tables(points: Sequence[ConcurrencyPoint]) -> list[Table]:
    tables = []
    for task in dict.fromkeys(p.task for p in points):
        rows = tuple(Row(p.arm, (Cell(p.arm), num(str(p.concurrency), "concurrency", p.concurrency),
                                 num(str(p.samples), "samples", p.samples),
                                 num(fmt(p.tokens_per_second), "tokens_per_second", p.tokens_per_second),
                                 num(fmt(None if p.time_per_output_token is None else p.time_per_output_token * 1e3,
                                         ".1f"), "time_per_output_token", p.time_per_output_token),
                                 est(fmt(p.speedup.value, ".2f", "×"), "speedup", p.speedup)),
                         emphasis=p.arm == "ar")
                     for p in points if p.task == task)
        tables.append(Table(f"concurrency-{task}", f"{task}: speed against concurrency",
                            ("arm", "concurrency", "samples", "tokens/s", "ms/token", "speed-up vs AR"), rows,
                            "tokens/s = the engine's output tokens over the wall time of the arm's batches; ms/token "
                            "= a request's time per output token after its first; speed-up = geometric mean over "
                            "units of AR time / arm time at the same concurrency"))
    return tables


def concurrency_figure(points: Sequence[ConcurrencyPoint], task: str) -> Figure:
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    speed, latency = fig.subplots(1, 2)
    for arm in dict.fromkeys(p.arm for p in points if p.task == task):
        line = sorted((p for p in points if p.task == task and p.arm == arm), key=lambda p: p.concurrency)
        xs = [p.concurrency for p in line]
        speed.plot(xs, [p.tokens_per_second or float("nan") for p in line], marker="o", label=arm)
        latency.plot(xs, [(p.time_per_output_token or float("nan")) * 1e3 for p in line], marker="o", label=arm)
    for ax, label in ((speed, "output tokens/s"), (latency, "time per output token (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(label)
        ax.grid(True, color="#dddddd", linewidth=0.6)
    speed.legend(fontsize=8)
    fig.suptitle(f"{task}: speed against concurrency")
    return fig


def print_concurrency(out: Path, run_ids: Sequence[int]) -> None:
    """Print the tables of the runs ``run_ids`` of the store in ``out`` and write one figure per task there."""
    from relaxbench.analysis import load_run
    from relaxbench.report.terminal import rich_table
    from relaxbench.ui import console

    points = concurrency_points([load_run(out, run_id) for run_id in run_ids])
    screen = console()
    for table in concurrency_tables(points):
        screen.print(rich_table(table))
    for i, task in enumerate(dict.fromkeys(p.task for p in points)):
        path = out / (FIGURE_NAME if i == 0 else f"concurrency-{task}.png")
        concurrency_figure(points, task).savefig(path, dpi=120)
        screen.print(f"figure: {path}")
