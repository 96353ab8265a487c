"""Typed, frozen views of a stored run: what the metric functions (and the reports) read. No computation here.

A sample is the store's own row type (``SampleRow``), so what the runner writes and what the analysis reads are
one type; its rounds are read by the names ``decoding/records.ROUND_FIELDS`` declares (``sample.rounds.drafted``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaxbench.errors import DataError
from relaxbench.harness.store import STORE_NAME, CellDefinition, SampleRow, Store


@dataclass(frozen=True)
class GraderRecord:
    """An LLM grader that graded samples in the store: its identity (what decides its verdicts) and what the
    grading pass recorded about it (``label``, whether it graded the AR arm twice and how, or why not)."""

    grader_hash: str
    identity: Mapping[str, Any]
    description: Mapping[str, Any]

    @property
    def label(self) -> str:
        return str(self.description.get("label") or self.identity.get("model") or self.grader_hash[:12])


@dataclass(frozen=True)
class SampleVerdict:
    """One grader's verdict on one sample: ``draw`` 0, or 1 for the self-check pass; ``rating`` -1 when the verdict
    had no rating (then ``score`` is None)."""

    sample_id: int
    grader_hash: str
    draw: int
    rating: float
    score: float | None
    linked_at: str


@dataclass(frozen=True)
class CellRecord(CellDefinition):
    """A stored cell: its definition (the store's one list of cell fields) plus its id and samples, and the graders'
    verdicts on its samples."""

    cell_id: int
    samples: tuple[SampleRow, ...]
    verdicts: tuple[SampleVerdict, ...] = ()


@dataclass(frozen=True)
class RunRecord:
    run_id: int
    run_key: str
    created_at: str
    updated_at: str
    target: str
    draft: str | None
    suite: Mapping[str, Any]
    cells: tuple[CellRecord, ...]
    environment: tuple[Mapping[str, Any], ...]  # one per session, oldest first
    graders: Mapping[str, GraderRecord] = field(default_factory=dict)  # by hash
    machine_profile: Mapping[str, Any] | None = None  # the cost profile the latest session measured (a file's mapping)

    def tasks(self) -> list[str]:
        seen: dict[str, None] = {}
        for cell in self.cells:
            seen.setdefault(cell.task, None)
        return list(seen)

    def cells_of(self, task: str) -> list[CellRecord]:
        return sorted((c for c in self.cells if c.task == task), key=lambda c: c.position)


def read_run(store: Store, run_id: int | None = None) -> RunRecord:
    """One run (the most recently updated when ``run_id`` is None) with its cells, samples and environment."""
    if run_id is None:
        rows = store.rows("SELECT * FROM runs ORDER BY updated_at DESC, run_id DESC LIMIT 1")
    else:
        rows = store.rows("SELECT * FROM runs WHERE run_id=?", (run_id,))
    if not rows:
        raise DataError(f"{store.path}: no run{'' if run_id is None else f' with id {run_id}'} stored")
    run = rows[0]
    cells = []
    for c in store.rows("SELECT * FROM cells WHERE run_id=? ORDER BY task, position", (run["run_id"],)):
        samples = tuple(store.samples(c["cell_id"]))
        cells.append(CellRecord(
            cell_id=c["cell_id"], task=c["task"], arm=c["arm"], position=c["position"],
            is_baseline=bool(c["is_baseline"]), method=c["method"], policy=c["policy"], lossless=bool(c["lossless"]),
            knobs=json.loads(c["knobs_json"]), method_spec=json.loads(c["method_json"]),
            drafter=None if c["drafter_json"] is None else json.loads(c["drafter_json"]), k=c["k"],
            decode=json.loads(c["decode_json"]), task_spec=json.loads(c["task_json"]), scorer=c["scorer"],
            data_fingerprint=c["data_fingerprint"], samples=samples, verdicts=_verdicts(store, c["cell_id"])))
    environment = tuple({**json.loads(e["environment_json"]), "session_id": e["session_id"], "status": e["status"],
                         "started_at": e["started_at"], "finished_at": e["finished_at"]}
                        for e in store.rows("SELECT * FROM environment WHERE run_id=? ORDER BY session_id",
                                            (run["run_id"],)))
    graders = {g["grader_hash"]: GraderRecord(g["grader_hash"], json.loads(g["identity_json"]),
                                              json.loads(g["description_json"]))
               for g in store.rows("SELECT * FROM graders")}
    return RunRecord(run["run_id"], run["run_key"], run["created_at"], run["updated_at"], run["target"], run["draft"],
                     json.loads(run["suite_json"]), tuple(cells), environment, graders,
                     store.machine_profile(run["run_id"]))


def _verdicts(store: Store, cell_id: int) -> tuple[SampleVerdict, ...]:
    return tuple(SampleVerdict(r["sample_id"], r["grader_hash"], r["draw"], r["rating"], r["score"], r["created_at"])
                 for r in store.rows(
        "SELECT l.sample_id, l.grader_hash, l.draw, l.created_at, v.rating, v.score FROM sample_verdicts l "
        "JOIN verdicts v ON v.grader_hash=l.grader_hash AND v.prompt_hash=l.prompt_hash "
        "AND v.answer_hash=l.answer_hash AND v.draw=l.draw JOIN samples s ON s.sample_id=l.sample_id WHERE s.cell_id=? ORDER BY l.sample_id, l.draw",
        (cell_id,)))


def open_read_only(path: str | Path) -> Store:
    """The store of ``DIR`` (holding results.sqlite) or the .sqlite file itself, opened read-only: summary and
    report never write, whatever state the file is in."""
    path = Path(path)
    if path.is_dir():
        path = path / STORE_NAME
    if not path.is_file():
        raise DataError(f"{path}: no results store (run `relaxbench compare --out DIR` first)")
    return Store(path, read_only=True)


def load_run(path: str | Path, run_id: int | None = None) -> RunRecord:
    """A run from ``DIR`` (holding results.sqlite) or from the .sqlite file itself."""
    with open_read_only(path) as store:
        return read_run(store, run_id)
