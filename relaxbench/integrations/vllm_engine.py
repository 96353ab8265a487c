"""The vLLM engine's card in the executors' registry (``harness.executor.EXECUTORS``, entry point ``vllm``): what
``--engine vllm`` supports and refuses before anything starts, light to import — the executor itself
(``vllm_executor``) is imported when a run starts.

``generate --engine vllm`` reads the same card: its ``check_completion`` (the environment and the engine arguments,
as ``compare``'s ``check_early``) and its ``generate``, ``vllm_executor.generate_once``, imported when it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from relaxbench.harness.executor import Executor, ExecutorCard
from relaxbench.harness.suite import SuiteSpec
from relaxbench.integrations.vllm_client import ENGINE, check_engine_args, vllm_python

if TYPE_CHECKING:  # the decoders bring torch: the records are only named here
    from relaxbench.decoders import Completion, CompletionRequest


def checked_engine_args(engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """A missing vLLM environment is one line, before anything else; then the engine arguments, by name and value
    as the installed vLLM types them (from the cached argument table where it settles them)."""
    python = vllm_python()
    return check_engine_args(engine_args, python) if engine_args else dict(engine_args)


def check_vllm_early(suite: SuiteSpec) -> SuiteSpec:
    """``compare``'s vLLM environment and engine arguments (``checked_engine_args``), before anything loads."""
    engine_args = checked_engine_args(suite.engine_args)
    return suite.model_copy(update={"engine_args": engine_args}) if suite.engine_args else suite


def check_vllm_request(request: CompletionRequest) -> CompletionRequest:
    """``generate``'s vLLM environment and engine arguments (``checked_engine_args``), before the engine starts."""
    engine_args = checked_engine_args(request.engine_args)
    return replace(request, engine_args=engine_args) if request.engine_args else request


def check_vllm_plan(plan: Any) -> None:
    """The rules, drafters and tasks of the plan that vLLM's verification step cannot run (``vllm_executor``)."""
    from relaxbench.integrations.vllm_executor import check_plan

    check_plan(plan)


def executor() -> type[Executor]:
    from relaxbench.integrations.vllm_executor import VllmExecutor

    return VllmExecutor


def generate() -> Callable[[CompletionRequest], Completion]:
    from relaxbench.integrations.vllm_executor import generate_once

    return generate_once


CARD = ExecutorCard(ENGINE, ENGINE, executor, frozenset({"concurrency", "engine_args"}), check_vllm_early,
                    check_plan=check_vllm_plan, generate=generate, check_completion=check_vllm_request)
