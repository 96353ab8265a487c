"""The one-writer protocol without Ray: a job run shard by shard against in-memory ``ShardView``s, whose writes a
driver applies to its store, stores exactly what a direct in-process run stores, and a shard sent again after a
partial run does only what is missing."""

from __future__ import annotations

from pathlib import Path

from relaxbench.harness.plan import build_plan
from relaxbench.harness.runner import SilentProgress, Worker, missing_items, register_job, run_job
from relaxbench.harness.shard import ShardView, Write, cut_shards, shard_size
from relaxbench.harness.store import Store
from relaxbench.harness.suite import SuiteSpec
from tests.test_compare import DATA, record_set


def plan_of():
    # two turns on one item ('primes'): the second turn's prompt holds the first turn's answer, read from the view
    return build_plan(SuiteSpec(target="tiny-random-target", draft="tiny-random-draft", methods=("exact", "fly"),
                                tasks=("jsonl",), data_files={"jsonl": str(DATA)}, max_new_tokens=8, repeats=2))


def run_direct(path: Path, target, draft) -> None:
    plan = plan_of()
    with Store(path) as store:
        run_id = store.open_run(plan.key, "t", "d", {})
        [job] = plan.jobs
        cells = register_job(store, run_id, job, SilentProgress())
        worker = Worker(target, draft, "tiny-random-draft", store, store.start_session(run_id, {"command": "t"}))
        run_job(worker, job, cells, SilentProgress())


def run_by_shards(path: Path, target, draft, size: int, stop_after: int | None = None) -> int:
    """A driver's loop, in one process: send each shard with what the store holds, apply its writes. With
    ``stop_after``, the driver "dies" after that many applied writes. Returns the samples generated."""
    plan = plan_of()
    generated = 0
    with Store(path) as store:
        run_id = store.open_run(plan.key, "t", "d", {})
        [job] = plan.jobs
        cells = register_job(store, run_id, job, SilentProgress())
        session = store.start_session(run_id, {"command": "t"})
        applied: list[Write] = []

        def apply(write: Write) -> None:
            nonlocal generated
            if stop_after is not None and len(applied) >= stop_after:
                raise KeyboardInterrupt  # the driver is gone: this write is lost with it
            write.apply(store)
            applied.append(write)
            generated += write.sample is not None

        worker = Worker(target, draft, "tiny-random-draft", ShardView((), apply), session)
        try:
            for shard in cut_shards(job.name, missing_items(job, cells, store), size):
                worker.store = ShardView(store.samples_of_items(cells.values(), shard.item_ids), apply)
                run_job(worker, job, cells, SilentProgress(), shard.items(job.items))
        except KeyboardInterrupt:
            pass
    return generated


def test_shards_through_views_store_what_a_direct_run_stores(tmp_path, tiny_target, tiny_draft):
    direct, sharded, resumed = tmp_path / "direct.sqlite", tmp_path / "sharded.sqlite", tmp_path / "resumed.sqlite"
    run_direct(direct, tiny_target, tiny_draft)
    total = len(record_set(direct))
    assert total == 5 * 2 * 3  # 5 (item, turn) units × 2 repeats × 3 arms

    assert run_by_shards(sharded, tiny_target, tiny_draft, size=2) == total
    assert record_set(sharded) == record_set(direct)

    first = run_by_shards(resumed, tiny_target, tiny_draft, size=1, stop_after=17)
    assert 0 < first < total
    assert run_by_shards(resumed, tiny_target, tiny_draft, size=3) == total - first  # only what was missing
    assert record_set(resumed) == record_set(direct)


def test_shard_size_keeps_a_few_shards_per_worker():
    assert shard_size(100, 4) == 7 and shard_size(3, 2) == 1 and shard_size(0, 2) == 1
    assert [len(s.item_ids) for s in cut_shards("t", [_Item(str(i)) for i in range(7)], 3)] == [3, 3, 1]


class _Item:
    def __init__(self, item_id: str) -> None:
        self.item_id = item_id
