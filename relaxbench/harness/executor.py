"""Where a run's jobs execute. An executor loads the model pair where its workers run (``start``, before the store
is opened, so a model that cannot load costs nothing stored), then runs every job's missing units (``run``) and
lets go of what it holds (``close``).

Whatever the executor, the unit of work keeps the pairing (a task's arms interleaved on one worker, runner.py) and
the driver process is the store's one writer. The in-process executor here is the default; others are plug-ins
registered through the ``relaxbench.executors`` entry-point group and loaded by name (Ray's:
``relaxbench.integrations.ray_executor``), each with its own ``Options`` spec (a suite's ``executor_options``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from relaxbench.harness.environment import describe_environment
from relaxbench.harness.plan import RunPlan
from relaxbench.harness.runner import ProgressSink, Worker, check_prompts_fit, run_job
from relaxbench.harness.store import Store
from relaxbench.registry import Registry
from relaxbench.validation import Spec


@dataclass(frozen=True)
class ModelSetup:
    """How a worker loads the pair and runs: the same on every worker, wherever it is."""

    target: str
    draft: str | None  # the suite's --draft: a model name or a model-free drafter ('ngram', 'layerskip')
    load_draft: bool  # whether an arm drafts with the draft model
    device: str = "auto"
    dtype: str = "auto"
    draft_dtype: str = "auto"
    device_map: str | None = None  # spread the target over the worker's GPUs (accelerate)
    threads: int | None = None
    warmup: int = 1
    argv: tuple[str, ...] | None = None  # the command line, recorded with every session
    kv_cache: str = "auto"  # --kv-cache and --graphs: the decode path (recorded in the environment, not the key)
    graphs: str = "auto"

    def load(self, quiet: bool = True) -> tuple[str, Any, Any | None]:
        """Apply the runtime settings to this process and load the pair here: (device, target, draft)."""
        from relaxbench.arms import load_pair
        from relaxbench.decoding.cache import configure_kv, resolve_kv_settings
        from relaxbench.models.device import configure_runtime

        device = configure_runtime(self.device, self.threads)
        configure_kv(resolve_kv_settings(self.kv_cache, self.graphs, device, self.device_map))
        target, draft = load_pair(self.target, self.draft if self.load_draft else None, device, self.dtype,
                                  self.draft_dtype, quiet=quiet, device_map=self.device_map)
        return device, target, draft

    def describe(self, target: Any, draft: Any | None, device: str, executor: str) -> dict[str, Any]:
        """The environment of a session that runs on these loaded models in this process."""
        argv = None if self.argv is None else list(self.argv)
        return describe_environment(target, draft, device, argv, executor)


@dataclass(frozen=True)
class RunContext:
    """What ``Executor.run`` works on: the open store, the run, its plan, and every job's cells (task → arm →
    cell id), registered by the driver before anything runs."""

    store: Store
    run_id: int
    plan: RunPlan
    cells: Mapping[str, Mapping[str, int]]


class NoOptions(Spec):
    """An executor that takes no options."""


class Executor(ABC):
    name: ClassVar[str] = ""
    Options: ClassVar[type[Spec]] = NoOptions

    def __init__(self, options: Spec | None = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def start(self, setup: ModelSetup, plan: RunPlan) -> None:
        """Load the models where the jobs will run; a user error here is one line, before the store is opened."""

    @abstractmethod
    def run(self, context: RunContext, progress: ProgressSink) -> None:
        """Run every job's missing units; return when all are stored. Sessions are started and finished here."""

    def close(self) -> None:
        """Let go of workers and clusters (called whatever happened)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


EXECUTORS: Registry[type[Executor]] = Registry("executor", "relaxbench.executors")


@contextmanager
def session_outcome(finish: Callable[[str], None]) -> Iterator[None]:
    """Ends the block's session(s) as ``finished``, ``interrupted`` (SIGINT, SIGTERM) or ``failed``, whichever way the
    block ends, so the store never keeps a ``running`` session of a process that is gone (but for SIGKILL)."""
    status = "failed"
    try:
        yield
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        finish(status)


@EXECUTORS.register("in-process")
class InProcessExecutor(Executor):
    """Jobs one after another in this process, on one copy of the models, as one session."""

    name = "in-process"

    def start(self, setup: ModelSetup, plan: RunPlan) -> None:
        self.setup = setup
        self.device, self.target, self.draft = setup.load(quiet=False)
        check_prompts_fit(plan, self.target)

    def run(self, context: RunContext, progress: ProgressSink) -> None:
        store = context.store
        session_id = store.start_session(context.run_id, self.setup.describe(self.target, self.draft, self.device,
                                                                             self.name))
        worker = Worker(self.target, self.draft, self.setup.draft, store, session_id, warmup=self.setup.warmup)
        with session_outcome(lambda status: store.finish_session(session_id, status)):
            for job in context.plan.jobs:
                run_job(worker, job, context.cells[job.name], progress)

    def close(self) -> None:
        """Let go of the models, so what runs next in this process (the LLM grader) gets their memory."""
        import gc

        self.target = self.draft = None
        gc.collect()
