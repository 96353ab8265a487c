"""Finding a task's source by its name and loading tasks through it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relaxbench.tasks.source import TASK_SOURCES, LoadRequest, TaskFacts, TaskLoader, TaskSource
from relaxbench.tasks.yaml_tasks import YAML_LOADER


def source_prefix(name: str) -> str | None:
    """``lm_eval`` for ``lm_eval:gsm8k``; None for a name of relaxbench's own tasks (a path never has a prefix)."""
    prefix, sep, _ = name.partition(":")
    return prefix if sep and prefix and "/" not in prefix and "." not in prefix else None


def loader_for(name: str) -> TaskLoader:
    prefix = source_prefix(name)
    return YAML_LOADER if prefix is None else TASK_SOURCES.get(prefix)


def stored_task_facts(task: str, record: Mapping[str, Any], scorer: str) -> TaskFacts:
    """The facts of a stored task (its name, the cells' task record and scorer), from the source that wrote it."""
    return loader_for(task).facts(record, scorer)


def load_sources(names: Sequence[str], request: LoadRequest) -> dict[str, list[TaskSource]]:
    """Every named task, grouped by its loader, keyed by the name given (in the order given)."""
    groups: dict[int, tuple[TaskLoader, list[str]]] = {}
    for name in names:
        loader = loader_for(name)
        groups.setdefault(id(loader), (loader, []))[1].append(name)
    loaded: dict[str, list[TaskSource]] = {}
    for loader, members in groups.values():
        loaded.update(loader.load(members, request))
    return {name: loaded[name] for name in names}
