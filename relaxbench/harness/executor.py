"""Where a run's jobs execute. Cells are independent given the models, so an executor only has to hand each
``TaskJob`` to a worker; the in-process one is the default, and a distributed one (e.g. Ray actors each holding
the models and writing its own store, merged afterwards) plugs in behind the same interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from relaxbench.harness.plan import TaskJob
from relaxbench.harness.runner import ProgressSink, Worker
from relaxbench.registry import Registry


class Executor(ABC):
    name = ""

    @abstractmethod
    def run(self, jobs: Sequence[TaskJob], worker: Worker, progress: ProgressSink) -> None:
        """Run every job; return when all are stored."""


EXECUTORS: Registry[type[Executor]] = Registry("executor", "relaxbench.executors")


@EXECUTORS.register("in-process")
class InProcessExecutor(Executor):
    """Jobs one after another in this process, on the models already loaded."""

    name = "in-process"

    def run(self, jobs: Sequence[TaskJob], worker: Worker, progress: ProgressSink) -> None:
        runs = [worker.prepare(job, progress) for job in jobs]  # every cell known up front: an overall ETA
        for task_run in runs:
            task_run.run()
