"""Work for a distributed executor: a task's missing items cut into shards, and the in-memory store view a remote
worker runs a shard against.

A shard keeps the pairing: it holds whole items (every turn of every repeat), run with every arm of the task
interleaved on one worker, exactly as in-process. The worker never writes the store: its ``ShardView`` answers the
runner's reads from the rows the driver sent with the shard (and the ones the shard adds), and hands every write
on as a ``Write``, which the driver, the store's one writer, applies to ``results.sqlite`` as it arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relaxbench.data import TaskItem
from relaxbench.harness.store import SampleKey, SampleRow, Store

# the runner's writes (``runner.SampleSink``), replayed on the driver's store by name
WRITES = frozenset({"mark_started", "add_sample", "add_machine_profile"})


@dataclass(frozen=True)
class Shard:
    """Some items of one task: the unit of work a distributed executor hands to a worker."""

    task: str
    item_ids: tuple[str, ...]

    def items(self, job_items: Sequence[TaskItem]) -> list[TaskItem]:
        """This shard's items, in the job's data order."""
        wanted = set(self.item_ids)
        return [item for item in job_items if item.item_id in wanted]


def cut_shards(task: str, items: Sequence[TaskItem], size: int) -> list[Shard]:
    """``items`` in data order, ``size`` at a time."""
    ids = [item.item_id for item in items]
    return [Shard(task, tuple(ids[i:i + size])) for i in range(0, len(ids), size)]


def shard_size(n_items: int, n_workers: int, per_worker: int = 4) -> int:
    """Items per shard: about ``per_worker`` shards per worker, so a lost worker costs little to redo and the last
    shards spread over every worker, while each shard still amortises its set-up (the arms' decoders)."""
    return max(1, -(-n_items // max(1, n_workers * per_worker)))


@dataclass(frozen=True)
class Write:
    """One write of the runner, by ``SampleSink`` method name: made on a worker, applied by the driver."""

    method: str
    args: tuple[Any, ...]

    def apply(self, store: Store) -> None:
        if self.method not in WRITES:
            raise ValueError(f"not a store write: {self.method!r}")
        getattr(store, self.method)(*self.args)

    @property
    def sample(self) -> SampleRow | None:
        """The finished sample this write stores, if it stores one."""
        return self.args[0] if self.method == "add_sample" else None


class ShardView:
    """A ``runner.SampleSink`` over one shard: reads are answered from ``rows`` (what the store held for the
    shard's items when it was sent) and the samples added since; every write goes to ``emit``."""

    def __init__(self, rows: Iterable[SampleRow], emit: Callable[[Write], None]) -> None:
        self._rows: dict[tuple[int, SampleKey], SampleRow] = {(row.cell_id, row.key): row for row in rows}
        self._emit = emit

    def done_keys(self, cell_id: int) -> set[SampleKey]:
        return {key for cell, key in self._rows if cell == cell_id}

    def sample(self, cell_id: int, key: SampleKey) -> SampleRow | None:
        return self._rows.get((cell_id, key))

    def mark_started(self, session_id: int) -> None:
        self._emit(Write("mark_started", (session_id,)))

    def add_sample(self, row: SampleRow) -> None:
        if (row.cell_id, row.key) in self._rows:  # as the store's UNIQUE constraint would
            raise ValueError(f"sample {row.key} of cell {row.cell_id} is stored already")
        self._rows[(row.cell_id, row.key)] = row
        self._emit(Write("add_sample", (row,)))

    def add_machine_profile(self, session_id: int, profile: Mapping[str, Any]) -> None:
        self._emit(Write("add_machine_profile", (session_id, dict(profile))))
