"""A Ray worker (an actor): loads the model pair once, keeps it, and runs shards of the run's tasks, streaming
every store write back to the driver as it is made.

An incarnation is one life of the actor's process: Ray restarts a worker that died (OOM, a lost node, SIGKILL) by
constructing it again, which loads the models again and draws a new incarnation id. The driver keeps one session
per incarnation, so a worker's environment, samples and machine profile are stored with the session that made them;
a shard sent for an incarnation that is gone is answered with ``STALE`` instead of being run.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from relaxbench.errors import RelaxbenchError
from relaxbench.harness.executor import ModelSetup
from relaxbench.harness.plan import TaskJob
from relaxbench.harness.runner import SilentProgress, Worker, run_job
from relaxbench.harness.shard import Shard, ShardView, Write
from relaxbench.harness.store import SampleRow

STALE = "stale"  # the shard was meant for an earlier incarnation of this worker: the driver re-identifies it


@dataclass(frozen=True)
class Identity:
    """Who a worker is now: its incarnation and the environment its session records."""

    incarnation: str
    environment: dict[str, Any]


@dataclass(frozen=True)
class LoadFailure:
    """A worker whose models did not load: the user error, as one line (sent as a value, not raised, so that Ray
    does not restart a worker that would fail the same way)."""

    kind: str  # the RelaxbenchError subclass name
    message: str


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_DONE = object()


class ShardWorker:
    """The actor class (``ray.remote`` is applied by the executor, with the resources it declares)."""

    def __init__(self, setup: ModelSetup, index: int) -> None:
        self.incarnation = uuid.uuid4().hex
        self.failure: LoadFailure | None = None
        try:
            device, target, draft = setup.load(quiet=True)
        except RelaxbenchError as exc:
            self.failure = LoadFailure(type(exc).__name__, str(exc))
            return
        self.environment = setup.describe(target, draft, device, "ray")
        self.environment["ray_worker"] = _placement(index)
        self.worker = Worker(target, draft, setup.draft, store=ShardView((), _nowhere), session_id=0,
                             warmup=setup.warmup)

    def identify(self) -> Identity | LoadFailure:
        return self.failure or Identity(self.incarnation, self.environment)

    def run(self, shard: Shard, job: TaskJob, cells: Mapping[str, int], rows: tuple[SampleRow, ...],
            session_id: int, incarnation: str) -> Iterator[Write | str]:
        """Run ``shard`` of ``job`` against ``rows`` (what the store holds for its items), yielding every write as
        it is made. The runner works in a thread so that this generator can pass each write on at once."""
        if incarnation != self.incarnation or self.failure is not None:
            yield STALE
            return
        writes: queue.Queue[Any] = queue.Queue()
        self.worker.store = ShardView(rows, writes.put)
        self.worker.session_id = session_id

        def work() -> None:
            try:
                run_job(self.worker, job, cells, SilentProgress(), shard.items(job.items))
                writes.put(_DONE)
            except BaseException as exc:  # noqa: BLE001 — handed to the generator, which raises it to the driver
                writes.put(_Failed(exc))

        threading.Thread(target=work, name=f"shard-{shard.task}", daemon=True).start()
        while (message := writes.get()) is not _DONE:
            if isinstance(message, _Failed):
                raise message.error
            yield message


def _nowhere(write: Write) -> None:
    raise RuntimeError("a worker writes only while it runs a shard")


def _placement(index: int) -> dict[str, Any]:
    """Where Ray placed this worker: its index in the run, node, process and accelerators."""
    import ray

    context = ray.get_runtime_context()
    return {"index": index, "node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "actor_id": context.get_actor_id(), "pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "ray": ray.__version__}
