"""The vLLM engine's card in the executors' registry (``harness.executor.EXECUTORS``, entry point ``vllm``): what
``--engine vllm`` supports and refuses before anything starts, light to import — the executor itself
(``vllm_executor``) is imported when a run starts."""

from __future__ import annotations

from typing import Any

from relaxbench.harness.executor import Executor, ExecutorCard
from relaxbench.harness.suite import SuiteSpec
from relaxbench.integrations.vllm_client import ENGINE, check_engine_args, vllm_python


def check_vllm_early(suite: SuiteSpec) -> SuiteSpec:
    """A missing vLLM environment is one line, before anything else; then the engine arguments, by name and value
    as the installed vLLM types them (from the cached argument table where it settles them)."""
    vllm_python()
    if not suite.engine_args:
        return suite
    return suite.model_copy(update={"engine_args": check_engine_args(suite.engine_args)})


def check_vllm_plan(plan: Any) -> None:
    """The rules, drafters and tasks of the plan that vLLM's verification step cannot run (``vllm_executor``)."""
    from relaxbench.integrations.vllm_executor import check_plan

    check_plan(plan)


def executor() -> type[Executor]:
    from relaxbench.integrations.vllm_executor import VllmExecutor

    return VllmExecutor


CARD = ExecutorCard(ENGINE, ENGINE, executor, frozenset({"concurrency", "engine_args"}), check_vllm_early,
                    check_plan=check_vllm_plan)
