"""Cluster benchmark: the same ``relaxbench compare`` in-process and on Ray workers, each a child process into a
fresh store, timed from the outside (interpreter start to exit: imports, model loads, the cluster, the run, the
tables). Greedy outputs must be the same either way; the wall times and Ray's start-up are the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxbench.harness.store import STORE_NAME, Store

# what a sample's result is, apart from its timings and when it was made
RESULT_COLUMNS = ("s.output_ids", "s.output_text", "s.stop_reason", "s.n_rounds", "s.n_drafted", "s.n_accepted",
                  "s.n_relaxed", "json_extract(s.rounds, '$.accepted')", "s.score", "s.passed", "s.matches_baseline")


@dataclass(frozen=True)
class TimedCompare:
    executor: str
    exit_code: int
    wall_s: float
    samples: int
    sessions: int
    startup: dict[str, float] | None  # Ray's start-up as the driver recorded it with its workers' sessions
    stderr_tail: str


def timed_compare(args: list[str], out: Path, executor_args: list[str]) -> TimedCompare:
    """Run ``relaxbench compare ARGS EXECUTOR_ARGS --out OUT`` in a child process; wall time from outside."""
    command = [sys.executable, "-m", "relaxbench", "compare", *args, *executor_args, "--out", str(out),
               "--report-format", "none"]
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - start
    samples, sessions, startup = 0, 0, None
    if (out / STORE_NAME).is_file():
        with Store(out / STORE_NAME) as store:
            samples = store.rows("SELECT count(*) AS n FROM samples")[0]["n"]
            envs = [json.loads(r["environment_json"]) for r in store.rows("SELECT environment_json FROM environment")]
        sessions = len(envs)
        startup = next((env["ray_startup_s"] for env in envs if "ray_startup_s" in env), None)
    executor = executor_args[executor_args.index("--executor") + 1] if "--executor" in executor_args else "in-process"
    return TimedCompare(executor, done.returncode, wall, samples, sessions, startup, done.stderr[-2000:])


def sample_results(out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """(task, arm, item, turn, repeat) → the sample's result columns."""
    with Store(out / STORE_NAME) as store:
        columns = ", ".join(RESULT_COLUMNS)
        found = store.rows(f"SELECT c.task, c.arm, s.item_id, s.turn, s.repeat, {columns} "
                           "FROM samples s JOIN cells c USING (cell_id)")
    return {tuple(row)[:5]: tuple(row)[5:] for row in found}
