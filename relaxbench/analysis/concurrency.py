"""Speed against concurrency: one stored run per concurrency (``compare --engine vllm --concurrency 1,8``), read
together. Per task, arm and concurrency: output tokens per second of the engine (the arm's batches' output tokens
over their wall time), the mean time per output token of a request, and the arm's speed-up over AR at the same
concurrency, paired per unit (item, turn) as every other speed-up.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxbench.analysis.metrics import Estimate, by_unit, speedups
from relaxbench.analysis.records import CellRecord, RunRecord


@dataclass(frozen=True)
class ConcurrencyPoint:
    task: str
    arm: str
    concurrency: int
    samples: int
    output_tokens: int
    tokens_per_second: float | None  # the engine's: output tokens / wall time of the arm's batches
    time_per_output_token: float | None  # a request's, after its first token (mean over samples)
    speedup: Estimate  # geometric mean over units of AR time / arm time at this concurrency


def run_concurrency(run: RunRecord) -> int:
    values = run.suite.get("concurrency") or (1,)
    return int(values[0])


def throughput(cell: CellRecord) -> float | None:
    """Output tokens per second of the cell's batches (each batch's wall time counted once); without batch records
    (relaxbench's own loop runs one request at a time) its tokens over the sum of its samples' times."""
    walls: dict[str, float] = {}
    tokens = 0
    for sample in cell.samples:
        tokens += sample.n_output_tokens
        batch = (sample.engine_metrics or {}).get("batch")
        key = batch["id"] if batch else f"sample-{sample.sample_id}"
        walls[key] = float(batch["wall"]) if batch else sample.time_total
    wall = sum(walls.values())
    return tokens / wall if wall > 0 else None


def concurrency_points(runs: Sequence[RunRecord]) -> list[ConcurrencyPoint]:
    """Every (task, arm, concurrency) of the runs, in task, arm and concurrency order."""
    points = []
    for run in runs:
        level = run_concurrency(run)
        baselines = {c.task: c for c in run.cells if c.is_baseline}
        for cell in run.cells:
            if not cell.samples:
                continue
            tpots = [s.time_per_output_token for s in cell.samples if s.time_per_output_token is not None]
            speedup = Estimate(1.0) if cell.is_baseline else _paired(baselines.get(cell.task), cell)
            points.append(ConcurrencyPoint(cell.task, cell.arm, level, len(cell.samples),
                                           sum(s.n_output_tokens for s in cell.samples), throughput(cell),
                                           statistics.fmean(tpots) if tpots else None, speedup))
    return sorted(points, key=lambda p: (p.task, p.arm != "ar", p.arm, p.concurrency))


def _paired(baseline: CellRecord | None, cell: CellRecord) -> Estimate:
    if baseline is None:
        return Estimate(None)
    ar, arm = by_unit(baseline.samples), by_unit(cell.samples)
    units = sorted(set(ar) & set(arm))
    if not units:
        return Estimate(None)
    ar_times = np.array([statistics.fmean(s.time_total for s in ar[u]) for u in units])
    arm_times = np.array([statistics.fmean(s.time_total for s in arm[u]) for u in units])
    return speedups(ar_times, arm_times)[1]
