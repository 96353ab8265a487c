"""Where a run's jobs execute, and with which engine. An executor loads the model pair where its workers run
(``start``, before the store is opened, so a model that cannot load costs nothing stored), then runs every job's
missing units (``run``) and lets go of what it holds (``close``).

Whatever the executor, the unit of work keeps the pairing (a task's arms interleaved on one worker, runner.py) and
the driver process is the store's one writer.

Every executor is declared by an ``ExecutorCard`` in one registry, ``EXECUTORS``: the decoding engine it runs, the
suite options it honours (``SUPPORTS``), the checks its engine makes from the files alone before torch loads, and
whether its models load in this process; and, for ``relaxbench generate --engine``, how its engine makes one
completion. The run's pipeline (``relaxbench.pipeline``) and ``generate`` ask the registry and every "is this
supported" refusal comes from these declarations, here. The cards are light (no torch): the executor class itself
is imported when a run starts, an engine's one completion when ``generate`` runs. The in-process card is built in;
the others are plug-ins of the ``relaxbench.executors`` entry-point group, loaded by name (Ray's:
``relaxbench.integrations.ray_executor``, the vLLM engine's: ``relaxbench.integrations.vllm_engine``), each executor
with its own ``Options`` spec (a suite's ``executor_options``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.harness.environment import describe_environment
from relaxbench.harness.suite import SuiteSpec
from relaxbench.registry import Registry, did_you_mean
from relaxbench.validation import Spec

if TYPE_CHECKING:  # the runner, the plan and the decoders bring torch: imported when a run starts, not for a card
    from relaxbench.decoders import Completion, CompletionRequest
    from relaxbench.harness.plan import RunPlan
    from relaxbench.harness.runner import ProgressSink
    from relaxbench.harness.store import Store


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
        from relaxbench.decoders import load_pair
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


@dataclass(frozen=True)
class RunOptions:
    """What the command line sets beside the suite that an engine may not take: the transformers engine's decode
    path (``--kv-cache``, ``--graphs``), which is recorded in the environment, not in the run key."""

    kv_cache: str = "auto"
    graphs: str = "auto"


# the options an executor may support: (is it asked for by this suite and these options, how the refusal names it)
SUPPORTS: dict[str, tuple[Callable[[SuiteSpec, RunOptions], bool], Callable[[SuiteSpec, RunOptions], str]]] = {
    "concurrency": (lambda suite, _: suite.concurrency != (1,), lambda suite, _: "--concurrency"),
    "engine_args": (lambda suite, _: bool(suite.engine_args),
                    lambda suite, _: f"--engine-arg {next(iter(suite.engine_args))}=..."),
    "device_map": (lambda suite, _: suite.device_map is not None, lambda suite, _: "--device-map"),
    "kv_cache": (lambda _, options: options.kv_cache != "auto", lambda _, options: f"--kv-cache {options.kv_cache}"),
    "graphs": (lambda _, options: options.graphs != "auto", lambda _, options: f"--graphs {options.graphs}"),
}


def no_early_check(suite: SuiteSpec) -> SuiteSpec:
    return suite


def no_plan_check(plan: Any) -> None:
    return None


def no_completion_check(request: CompletionRequest) -> CompletionRequest:
    return request


@dataclass(frozen=True)
class ExecutorCard:
    """An executor as the pipeline sees it before anything loads: a declaration, light to import."""

    name: str  # --executor NAME; an engine with an executor of its own has it under the engine's name
    engine: str  # the decoding engine its workers run (--engine)
    load: Callable[[], type[Executor]]  # the executor class, imported when a run starts (torch comes with it)
    supports: frozenset[str] = field(default_factory=frozenset)  # keys of SUPPORTS it honours
    # the engine's refusals from the files alone (names, knobs, budgets), before torch loads; may return the suite
    # with values normalised (vLLM's engine arguments as the installed vLLM types them)
    check_early: Callable[[SuiteSpec], SuiteSpec] = no_early_check
    loads_in_driver: bool = False  # the models load in this process: prompts and heads are fitted before the lock
    # the engine's refusals of the built plan (a rule, a drafter or a task its workers cannot run), one line each,
    # before the store is locked or anything starts
    check_plan: Callable[[Any], None] = no_plan_check
    # ``relaxbench generate --engine ENGINE``'s one completion on this card's engine, imported when generate runs
    # (torch comes with it): the function that takes the request and returns the completion; None for an executor
    # that is not its engine's own (generate runs an engine in this process, never on a cluster)
    generate: Callable[[], Callable[[CompletionRequest], Completion]] | None = None
    # the engine's refusals of generate's request before anything loads (its environment, its engine arguments),
    # one line each; may return the request with values normalised, as ``check_early`` the suite
    check_completion: Callable[[CompletionRequest], CompletionRequest] = no_completion_check

    def check_supported(self, suite: SuiteSpec, options: RunOptions) -> None:
        """The first option this suite asks for that this executor does not honour, refused in one line."""
        for option, (asked, flag) in SUPPORTS.items():
            if asked(suite, options):
                self.refuse_unsupported(option, flag(suite, options))

    def refuse_unsupported(self, option: str, flag: str) -> None:
        """``flag``, as the command line gave an option of the kind ``option`` (a key of ``SUPPORTS``), refused in
        one line unless this executor honours it: ``compare`` through ``check_supported``, ``generate`` directly."""
        if option not in self.supports:
            raise ConfigError(f"{flag} {APPLIES_TO[option]}")


# where an option applies, said when an executor that lacks it refuses it
APPLIES_TO = {
    "concurrency": "applies to --engine vllm (vLLM's requests in flight; the transformers engine runs one request at "
                   "a time)",
    "engine_args": "applies to --engine vllm (vLLM's engine arguments); the transformers engine takes --device, "
                   "--dtype and --device-map",
    "device_map": "applies to the transformers engine (accelerate's placement); vLLM spreads a model with "
                  "--engine-arg tensor_parallel_size=N",
    "kv_cache": "applies to the transformers engine (vLLM manages its own paged KV cache: --engine-arg "
                "kv_cache_memory_bytes=..., block_size=...)",
    "graphs": "applies to the transformers engine (vLLM captures its own: --engine-arg enforce_eager=...)",
}

EXECUTORS: Registry[ExecutorCard] = Registry("executor", "relaxbench.executors")
DEFAULT_EXECUTOR = "in-process"


def executor_card(suite: SuiteSpec, options: RunOptions) -> ExecutorCard:
    """The executor a suite runs on: its ``executor`` when that runs its engine, or the engine's own executor (the
    one registered under the engine's name) when the suite leaves the executor at the default; every option the
    card does not support is refused here, in one line."""
    card = EXECUTORS.get(suite.executor)
    if card.engine != suite.engine:
        if suite.executor != DEFAULT_EXECUTOR:
            raise ConfigError(f"--executor {suite.executor} runs the {card.engine} engine, not --engine "
                              f"{suite.engine}: leave out --executor {suite.executor}, or use --engine {card.engine}")
        card = engine_card(suite.engine)
    card.check_supported(suite, options)
    return card


def engine_card(engine: str) -> ExecutorCard:
    """The executor an engine runs on when none is named: the default executor where it runs that engine, else the
    one registered under the engine's name (``compare`` with the default executor; ``generate --engine``). An
    engine no card runs under its name is one line naming the engines there are."""
    card = EXECUTORS.get(DEFAULT_EXECUTOR)
    if card.engine == engine:
        return card
    try:
        card = EXECUTORS.get(engine)
    except UnknownNameError:
        pass
    if card.engine != engine:
        known = sorted({other.engine for _, other in EXECUTORS.items()})
        raise UnknownNameError(f"unknown engine {engine!r}{did_you_mean(engine, known)} (known: {', '.join(known)})")
    return card


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


class InProcessExecutor(Executor):
    """Jobs one after another in this process, on one copy of the models, as one session."""

    name = "in-process"

    def start(self, setup: ModelSetup, plan: RunPlan) -> None:
        from relaxbench.harness.runner import check_prompts_fit

        self.setup = setup
        self.device, self.target, self.draft = setup.load(quiet=False)
        check_prompts_fit(plan, self.target)

    def run(self, context: RunContext, progress: ProgressSink) -> None:
        from relaxbench.harness.runner import Worker, run_job

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


def check_transformers_early(suite: SuiteSpec) -> SuiteSpec:
    """The transformers engine's refusals before torch loads: every method's names and knobs, a draft model whose
    vocabulary is not the target's (from pinned vocabularies or tokenizer files: nothing fetched or converted), and
    a --max-new-tokens over the context the target's files on disk (or the zoo's pin) state (every prompt is
    fitted before loading)."""
    from relaxbench.decoding.prompts import check_positions
    from relaxbench.methods import check_methods
    from relaxbench.models.preview import check_vocabularies, files_on_disk

    drafts_with_model = check_methods(suite.methods, suite.draft) and suite.draft is not None
    if suite.max_new_tokens is not None:
        facts = files_on_disk(suite.target)
        if facts is not None:
            check_positions(facts.context, "--max-new-tokens", 1, suite.max_new_tokens, 0, at_least=True)
    if drafts_with_model:
        check_vocabularies(suite.target, suite.draft)
    return suite


def generate_in_process() -> Callable[[CompletionRequest], Completion]:
    """The transformers engine's one completion (``decoders.generate_completion``), imported when generate runs."""
    from relaxbench.decoders import generate_completion

    return generate_completion


EXECUTORS.add(DEFAULT_EXECUTOR, ExecutorCard(DEFAULT_EXECUTOR, "transformers", lambda: InProcessExecutor,
                                             frozenset({"device_map", "kv_cache", "graphs"}), check_transformers_early,
                                             loads_in_driver=True, generate=generate_in_process))
