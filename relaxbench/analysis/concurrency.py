"""Speed against concurrency: one stored run per concurrency (``compare --engine vllm --concurrency 1,8``), read
together. ``concurrency_runs`` finds the runs of a store that differ from a given run only in concurrency (its
siblings); ``concurrency_points`` gives, per task, arm and concurrency, output tokens per second of the engine (the
arm's batches' output tokens over their wall time), the mean time per output token of a request, and the arm's
speed-up over AR at the same concurrency, paired per unit (item, turn) as every other speed-up.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from relaxbench.analysis.metrics import Estimate, by_unit, speedups
from relaxbench.analysis.records import CellRecord, RunRecord, open_read_only, read_run
from relaxbench.harness.suite import VOLATILE_FIELDS


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


def suite_concurrency(suite: Mapping[str, Any]) -> int:
    """The requests in flight of a stored run's suite record (each run of ``--concurrency 1,8`` holds one value)."""
    values = suite.get("concurrency") or (1,)
    return int(values[0])


def run_concurrency(run: RunRecord) -> int:
    return suite_concurrency(run.suite)


def _suite_identity(suite: Mapping[str, Any]) -> dict[str, Any]:
    """What must match for two runs to be siblings: the suite record less concurrency and the fields that do not
    enter the run key (limit, repeats, warm-up, profiles, ...: raising them extends a run)."""
    return {key: value for key, value in suite.items() if key not in VOLATILE_FIELDS and key != "concurrency"}


def _cells_identity(run: RunRecord) -> list[str]:
    """The run's cells as stored (method, drafter, k, decoding, task record, data), which the run key hashes too: a
    method or task file edited between two runs makes them different runs, not two concurrencies of one."""
    return sorted(json.dumps([c.task, c.arm, c.is_baseline, c.method_spec, c.drafter, c.k, c.decode, c.task_spec,
                              c.scorer, c.data_fingerprint], sort_keys=True, default=str) for c in run.cells)


def concurrency_runs(path: str | Path, run: RunRecord) -> tuple[RunRecord, ...]:
    """``run`` and the runs of the store at ``path`` that differ from it only in concurrency (same target, draft,
    suite and cells), one per concurrency (the most recently updated), in concurrency order; () when they span a
    single concurrency (a transformers run, or a vLLM run alone), so there is nothing to set side by side."""
    chosen = {run_concurrency(run): run}
    identity, cells = _suite_identity(run.suite), _cells_identity(run)
    with open_read_only(path) as store:
        for row in store.rows("SELECT run_id, target, draft, suite_json FROM runs "
                              "ORDER BY updated_at DESC, run_id DESC"):
            suite = json.loads(row["suite_json"])
            if (row["run_id"] == run.run_id or (row["target"], row["draft"]) != (run.target, run.draft)
                    or suite_concurrency(suite) in chosen or _suite_identity(suite) != identity):
                continue
            candidate = read_run(store, row["run_id"])
            if _cells_identity(candidate) == cells:
                chosen[suite_concurrency(suite)] = candidate
    return tuple(chosen[level] for level in sorted(chosen)) if len(chosen) > 1 else ()


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
