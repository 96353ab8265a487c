"""``compare --executor ray``: the run's tasks on Ray workers, across the GPUs and machines of a cluster.

* **Where**: ``--ray-address ADDR`` joins a running cluster (``auto``: the one ``ray start`` made on this
  machine); without it a local cluster is started for the run and shut down after it.
* **Workers** are actors (``ray_worker.ShardWorker``) that load the model pair once and keep it. Each declares
  its resources, ``--gpus-per-worker`` (default 1 on CUDA) and ``--cpus-per-worker``, so Ray places them.
* **Work**: each task's missing items are cut into shards (``harness.shard``); a worker runs a shard's units with
  every arm of the task interleaved, as in-process, so each paired speed-up is measured on one device.
* **One writer**: a worker streams every write (a started generation, a finished sample, the session's machine profile) back as
  it makes it; this process, the driver, commits each to ``results.sqlite`` at once. Each worker incarnation is a
  session of its own, with its environment (host, GPU, driver, versions).
* **Faults**: Ray restarts a worker that dies (``restarts`` times); its shard goes back to the queue and, sent
  again with what the store now holds, runs only its units not yet committed. A killed driver resumes with the
  same command, in-process or on Ray: the run key does not depend on the executor.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

try:
    import ray
    from ray.exceptions import (
        ActorUnavailableError,
        NodeDiedError,
        ObjectLostError,
        OutOfMemoryError,
        RayActorError,
        RayTaskError,
        WorkerCrashedError,
    )
except ImportError as exc:  # the registry turns this into one line: executor 'ray' could not be loaded: ...
    raise ImportError(f"{exc}; install it with: pip install 'relaxbench[ray]'") from exc
from pydantic import Field

from relaxbench.errors import ConfigError, DataError, ModelError, RelaxbenchError, UnknownNameError
from relaxbench.harness.executor import (ExecutorCard, Executor, ModelSetup, RunContext, check_transformers_early,
                                         session_outcome)
from relaxbench.harness.plan import RunPlan
from relaxbench.harness.runner import ProgressSink, missing_items
from relaxbench.harness.shard import Shard, Write, cut_shards, shard_size
from relaxbench.integrations.ray_worker import STALE, Identity, LoadFailure, ShardWorker
from relaxbench.validation import Integer, Number, PositiveInteger, Spec, Text

# a worker's process, node or results are gone: its shard goes back to the queue
WORKER_LOST = (RayActorError, WorkerCrashedError, ObjectLostError, NodeDiedError, OutOfMemoryError)
CONNECT_TIMEOUT_S = 5.0
RETRY_S = 1.0  # a restarting worker is asked again who it is after this long
RAY_GCS_PORT, RAY_CLIENT_PORT = 6379, 10001
_QUIET = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": True}
_USER_ERRORS = {cls.__name__: cls for cls in (ConfigError, ModelError, DataError, UnknownNameError, RelaxbenchError)}


class RayOptions(Spec):
    """The Ray executor's options (a suite's ``executor_options``; the ``--ray-address``, ``--workers``,
    ``--gpus-per-worker`` and ``--cpus-per-worker`` flags)."""

    address: Text | None = None  # None: a local cluster for this run
    workers: PositiveInteger | None = None  # None: as many as the cluster's free resources fit
    gpus_per_worker: Number | None = Field(None, ge=0)  # None: 1 on CUDA, 0 on CPU
    # None: 1 on CUDA; on CPU --threads, else this machine's CPU count
    cpus_per_worker: Number | None = Field(None, gt=0)
    # how often Ray restarts a worker that died; a shard is tried at most restarts + 1 times
    restarts: Integer = Field(3, ge=0)
    shards_per_worker: PositiveInteger = 4  # a task's missing items are cut into about this many shards per worker



# ------------------------------------------------------------------------------------------------ the cluster


def check_reachable(address: str) -> None:
    """A ``HOST[:PORT]`` (or ``ray://HOST[:PORT]``) address must answer within seconds: Ray itself retries an
    unreachable one for a minute or more, printing as it goes."""
    client = address.startswith("ray://")
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":") if ":" in host_port else (host_port, "", "")
    try:
        port_number = int(port) if port else (RAY_CLIENT_PORT if client else RAY_GCS_PORT)
    except ValueError:
        raise ConfigError(f"--ray-address {address!r}: expected HOST:PORT, ray://HOST:PORT or 'auto'") from None
    try:
        with socket.create_connection((host, port_number), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(f"--ray-address {address}: no Ray cluster answers at {host}:{port_number} ({why}); start "
                          "one there with `ray start --head`, or leave --ray-address out for a local cluster") from None


def connect(address: str | None, num_cpus: int | None = None) -> float:
    """Join the cluster at ``address`` or start a local one (with ``num_cpus`` logical CPUs); seconds it took."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a benchmark run does not report usage to anyone
    if address not in (None, "auto"):
        check_reachable(address)
    start = time.perf_counter()
    try:
        if address is None:  # "local": a new cluster, never one that happens to run on this machine
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **_QUIET)
        else:
            ray.init(address=address, **_QUIET)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = "a local Ray cluster" if address is None else f"the Ray cluster at {address!r}"
        raise ConfigError(f"could not start or join {where}: {_first_line(exc)}") from None
    return time.perf_counter() - start


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


@dataclass(frozen=True)
class Placement:
    """What each worker declares and how many there are."""

    device: str
    workers: int
    cpus: float
    gpus: float
    threads: int | None  # torch threads in each worker (None: torch's choice)


def place_workers(options: RayOptions, device: str, threads: int | None, free: dict[str, float]) -> Placement:
    """The workers' device and resources, checked against the cluster's free resources ``free``."""
    gpus_free, cpus_free = free.get("GPU", 0.0), free.get("CPU", 0.0)
    if device == "auto":
        device = "cuda" if gpus_free > 0 else "cpu"
    cuda = device.startswith("cuda")
    if cuda and gpus_free <= 0:
        raise ConfigError(f"--device {device}, but the Ray cluster has no free GPU")
    gpus = options.gpus_per_worker if options.gpus_per_worker is not None else (1.0 if cuda else 0.0)
    if cuda and gpus <= 0:
        raise ConfigError("--gpus-per-worker must be > 0 on CUDA")
    cpus = options.cpus_per_worker
    if cpus is None:
        cpus = 1.0 if cuda else float(threads or os.cpu_count() or 1)
    fit = math.floor(cpus_free / cpus + 1e-9)
    if gpus > 0:
        fit = min(fit, math.floor(gpus_free / gpus + 1e-9))
    workers = options.workers or fit
    if fit < 1 or workers > fit:
        have = f"{cpus_free:g} CPUs" + (f" and {gpus_free:g} GPUs" if cuda else "")
        need = f"{cpus:g} CPUs" + (f" and {gpus:g} GPUs" if gpus else "")
        raise ConfigError(f"the Ray cluster has {have} free, room for {fit} worker(s) of {need} each, not "
                          f"{workers}; lower --workers, --cpus-per-worker or --gpus-per-worker")
    worker_threads = threads if threads is not None else (None if cuda else max(1, int(cpus)))
    return Placement(device, workers, cpus, gpus, worker_threads)


class _Bare:
    def ready(self) -> bool:
        return True


def fixed_cost(workers: int, cpus: float = 1.0) -> dict[str, float]:
    """Ray's own start-up, without relaxbench or a model: start a local cluster, have ``workers`` bare actors answer
    once, shut it down (seconds for each)."""
    start = time.perf_counter()
    connect(None, max(os.cpu_count() or 1, math.ceil(workers * cpus)))
    started = time.perf_counter()
    try:
        actors = [ray.remote(_Bare).options(num_cpus=cpus).remote() for _ in range(workers)]
        ray.get([actor.ready.remote() for actor in actors])
        ready = time.perf_counter()
    finally:
        ray.shutdown()
    return {"cluster": started - start, "actors": ready - started, "shutdown": time.perf_counter() - ready}


# ------------------------------------------------------------------------------------------------ the executor


@dataclass
class Slot:
    """One worker as the driver sees it: its actor, current incarnation and that incarnation's session."""

    index: int
    handle: Any
    identity: Identity | None = None
    session_id: int | None = None
    gone: bool = False  # Ray gave up restarting it
    ended: bool = False  # its incarnation's session is finished already

    @property
    def incarnation(self) -> str | None:
        return None if self.identity is None else self.identity.incarnation


class RayExecutor(Executor):
    """Shards of every task on Ray workers; this process is the store's one writer."""

    name = "ray"
    Options = RayOptions

    def __init__(self, options: RayOptions | None = None) -> None:
        super().__init__(options)
        self.slots: list[Slot] = []
        self.connected = False
        self.startup: dict[str, float] = {}

    def start(self, setup: ModelSetup, plan: RunPlan) -> None:
        from relaxbench.ui import console

        options: RayOptions = self.options  # type: ignore[assignment]
        local_cpus = None
        if options.address is None and options.workers and options.cpus_per_worker:
            local_cpus = max(os.cpu_count() or 1, math.ceil(options.workers * options.cpus_per_worker))
        self.startup["cluster_s"] = connect(options.address, local_cpus)
        self.connected = True
        placement = place_workers(options, setup.device, setup.threads, ray.available_resources())
        worker_setup = replace(setup, device=placement.device, threads=placement.threads)
        err = console(stderr=True)
        where = "a local Ray cluster" if options.address is None else f"the Ray cluster at {options.address}"
        err.print(f"ray: {placement.workers} worker(s) on {where} ({placement.cpus:g} CPUs"
                  f"{f', {placement.gpus:g} GPUs' if placement.gpus else ''} each, {placement.device}); "
                  "each loads the models", markup=False, highlight=False)
        start = time.perf_counter()
        actor = ray.remote(ShardWorker).options(num_cpus=placement.cpus, num_gpus=placement.gpus,
                                                max_restarts=options.restarts, max_task_retries=0)
        self.slots = [Slot(i, actor.remote(worker_setup, i)) for i in range(placement.workers)]
        try:
            identities = ray.get([slot.handle.identify.remote() for slot in self.slots])
        except WORKER_LOST as exc:  # e.g. killed for memory while loading
            raise RelaxbenchError(f"a Ray worker died while loading the models: {_first_line(exc)}") from None
        for identity in identities:
            if isinstance(identity, LoadFailure):
                raise _USER_ERRORS.get(identity.kind, RelaxbenchError)(identity.message)
        for slot, identity in zip(self.slots, identities):
            slot.identity = identity
        self.startup["workers_s"] = time.perf_counter() - start
        err.print(f"ray: cluster ready in {self.startup['cluster_s']:.1f} s, workers loaded in "
                  f"{self.startup['workers_s']:.1f} s", markup=False, highlight=False)

    def run(self, context: RunContext, progress: ProgressSink) -> None:
        for slot in self.slots:  # the start-up is recorded with the sessions it preceded
            assert slot.identity is not None, "start() identified every worker"
            environment = {**slot.identity.environment, "ray_startup_s": dict(self.startup)}
            slot.session_id = context.store.start_session(context.run_id, environment)
        def finish(status: str) -> None:
            for slot in self.slots:
                if not slot.ended and slot.session_id is not None:
                    context.store.finish_session(slot.session_id, status)
                    slot.ended = True

        with session_outcome(finish):
            Dispatcher(context, progress, self.slots, self.options).run()  # type: ignore[arg-type]

    def close(self) -> None:
        if self.connected:
            ray.shutdown()  # a local cluster stops; on a running cluster our workers end with this driver
            self.connected = False


# ------------------------------------------------------------------------------------------------ the driver loop


@dataclass
class Dispatcher:
    """Hands shards to idle workers, commits what they stream back, and re-queues the shard of a lost worker."""

    context: RunContext
    progress: ProgressSink
    slots: list[Slot]
    options: RayOptions
    queue: deque[Shard] = field(default_factory=deque)
    idle: deque[Slot] = field(default_factory=deque)
    running: dict[Any, tuple[Slot, Shard]] = field(default_factory=dict)  # stream → (worker, shard)
    waking: dict[Any, Slot] = field(default_factory=dict)  # identify() call → worker
    restarting: list[tuple[float, Slot]] = field(default_factory=list)  # (when to ask again, worker)
    losses: Counter[Shard] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        # each task's job goes to the object store once; a shard call passes the reference (resolved by Ray)
        self.jobs = {job.name: ray.put(job) for job in self.context.plan.jobs}
        self.cell_names = {cell: (task, arm) for task, cells in self.context.cells.items()
                           for arm, cell in cells.items()}

    def shards(self) -> list[Shard]:
        """Every task's items with a unit missing from the store, cut into shards, tasks in plan order."""
        workers = sum(not slot.gone for slot in self.slots)
        out = []
        for job in self.context.plan.jobs:
            items = missing_items(job, self.context.cells[job.name], self.context.store)
            out += cut_shards(job.name, items, shard_size(len(items), workers, self.options.shards_per_worker))
        return out

    def run(self) -> None:
        self.queue.extend(self.shards())
        self.idle.extend(slot for slot in self.slots if not slot.gone)
        while self.queue or self.running:  # a worker still restarting when the work is done is not waited for
            self._wake_restarted()
            self._dispatch()
            if not self.running and not self.waking and not self.restarting:
                raise RelaxbenchError("every Ray worker is gone (each died more often than Ray restarts it); the "
                                      "finished samples are stored: rerun the same command to resume")
            timeout = (max(0.0, min(when for when, _ in self.restarting) - time.monotonic())
                       if self.restarting else None)
            if not self.running and not self.waking:
                time.sleep(timeout or 0.0)
                continue
            ready, _ = ray.wait([*self.running, *self.waking], num_returns=1, timeout=timeout)
            for waitable in ready:
                if waitable in self.waking:
                    self._woken(waitable)
                else:
                    self._receive(waitable)
        for slot in [*self.waking.values(), *(slot for _, slot in self.restarting)]:
            self._end(slot, "lost")  # died, and no work was left for its next life
        left = [job.name for job in self.context.plan.jobs
                if missing_items(job, self.context.cells[job.name], self.context.store)]
        if left:
            raise RuntimeError(f"units of {', '.join(left)} are missing after every shard finished")

    def _dispatch(self) -> None:
        store = self.context.store
        while self.idle and self.queue:
            slot, shard = self.idle.popleft(), self.queue.popleft()
            cells = dict(self.context.cells[shard.task])
            rows = tuple(store.samples_of_items(cells.values(), shard.item_ids))  # what is committed now
            stream = slot.handle.run.options(num_returns="streaming").remote(
                shard, self.jobs[shard.task], cells, rows, slot.session_id, slot.incarnation)
            self.running[stream] = (slot, shard)

    def _receive(self, stream: Any) -> None:
        slot, shard = self.running[stream]
        try:
            message = ray.get(next(stream))
        except StopIteration:
            del self.running[stream]
            self.idle.append(slot)
            return
        except WORKER_LOST as exc:
            del self.running[stream]
            self._lost(slot, shard, exc)
            return
        except RayTaskError as exc:  # the shard raised: a user error is one line, anything else a bug
            cause = exc.cause
            if isinstance(cause, RelaxbenchError):
                raise cause from None
            raise
        if message == STALE:  # the worker restarted since it was identified
            del self.running[stream]
            self.queue.appendleft(shard)
            self._wake(slot)
            return
        self._commit(message)

    def _commit(self, write: Write) -> None:
        write.apply(self.context.store)
        row = write.sample
        if row is not None:
            self.progress.advance(*self.cell_names[row.cell_id])

    def _lost(self, slot: Slot, shard: Shard, exc: BaseException) -> None:
        self.losses[shard] += 1
        self.progress.note(f"ray: worker {slot.index} lost while running {len(shard.item_ids)} item(s) of "
                           f"{shard.task} ({type(exc).__name__}); the shard goes back to the queue")
        if self.losses[shard] > self.options.restarts:
            raise RelaxbenchError(f"a shard of {shard.task} (items {', '.join(shard.item_ids)}) lost its worker "
                                  f"{self.losses[shard]} times (last: {_first_line(exc)}); the finished samples are "
                                  "stored: rerun the same command to resume")
        self.queue.appendleft(shard)
        self._wake(slot)

    def _wake(self, slot: Slot) -> None:
        """Ask a worker that may have restarted who it is now (the call waits for Ray to restart it)."""
        self.waking[slot.handle.identify.remote()] = slot

    def _wake_restarted(self) -> None:
        now = time.monotonic()
        for entry in [entry for entry in self.restarting if entry[0] <= now]:
            self.restarting.remove(entry)
            self._wake(entry[1])

    def _woken(self, ref: Any) -> None:
        slot = self.waking.pop(ref)
        store = self.context.store
        try:
            identity = ray.get(ref)
        except ActorUnavailableError:  # Ray is restarting it: ask again in a while
            self.restarting.append((time.monotonic() + RETRY_S, slot))
            return
        except WORKER_LOST as exc:
            identity = LoadFailure(type(exc).__name__, _first_line(exc))
        if isinstance(identity, LoadFailure):
            self.progress.note(f"ray: worker {slot.index} is gone ({identity.message})")
            self._end(slot, "lost")
            slot.gone = True
            return
        if identity.incarnation != slot.incarnation:  # a new life: the old session ends, a new one starts
            self._end(slot, "lost")
            slot.identity, slot.ended = identity, False
            slot.session_id = store.start_session(self.context.run_id, identity.environment)
        self.idle.append(slot)

    def _end(self, slot: Slot, status: str) -> None:
        if not slot.ended:
            self.context.store.finish_session(slot.session_id, status)
            slot.ended = True


CARD = ExecutorCard(
    "ray", "transformers", lambda: RayExecutor, frozenset({"device_map", "kv_cache", "graphs"}),
    check_transformers_early)
