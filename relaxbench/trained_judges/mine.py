"""``relaxbench judge mine``: run the semi-greedy search (``search.py``) over a task's items and commit every
labelled mismatch to the mining store (``store.py``), resuming whatever is there.

Everything a user can get wrong — the task, the item selection, a task without an automatic outcome, a multi-turn
or likelihood-only task, a store mined with another setup — fails before a model is loaded where it can be known
then, and as a one-line error in any case.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from relaxbench.data.items import TaskItem
from relaxbench.errors import ConfigError, DataError
from relaxbench.tasks.source import TaskSource
from relaxbench.trained_judges.search import MiningOptions, Mismatch, MismatchSearch, SearchState
from relaxbench.trained_judges.store import MiningStore, dumps


class MiningProgress(Protocol):
    """Where mining reports progress (the CLI draws rich bars with an ETA; tests pass a silent sink)."""

    def start(self, total: int, done: int) -> None: ...

    def item(self, item_id: str, length: int) -> None: ...

    def update(self, left: int, length: int, handled: int, important: int) -> None: ...

    def item_done(self, item_id: str, handled: int, important: int, seconds: float) -> None: ...


class SilentProgress:
    def start(self, total: int, done: int) -> None:
        pass

    def item(self, item_id: str, length: int) -> None:
        pass

    def update(self, left: int, length: int, handled: int, important: int) -> None:
        pass

    def item_done(self, item_id: str, handled: int, important: int, seconds: float) -> None:
        pass


def check_minable(source: TaskSource, items: Sequence[TaskItem]) -> None:
    """The task must be answered by generation and scored by an automatic outcome on every chosen item."""
    if source.likelihood_only:
        raise ConfigError(f"task {source.name!r} is scored by the target's likelihoods: no generated answer to mine")
    if not items:
        raise ConfigError(f"task {source.name!r}: no items selected")
    scorer = source.scorer()
    for item in items:
        if len(item.turns) != 1:
            raise ConfigError(f"task {source.name!r}, item {item.item_id!r}: mining reads single-turn items "
                              f"({len(item.turns)} turns)")
        if not scorer.has_outcome(item):
            raise ConfigError(f"task {source.name!r}, item {item.item_id!r}: scorer {source.scorer_name!r} gives it "
                              "no automatic outcome (a test or a reference); mining labels need one")


def hidden_size(loaded: Any) -> int:
    config = loaded.model.config
    return int((config.get_text_config() if hasattr(config, "get_text_config") else config).hidden_size)


def model_record(loaded: Any) -> dict[str, Any]:
    """What a store and a head keep of a model: its description and its hidden size."""
    return {**loaded.describe(), "hidden_size": hidden_size(loaded)}


def mining_config(source: TaskSource, target: Any, draft: Any, options: MiningOptions, device: str
                  ) -> tuple[str, dict[str, Any]]:
    """The store's setup record and its key (a hash of everything that decides the labels and features)."""
    task = {key: value for key, value in source.record().items() if key not in ("origin", "description")}
    config = {
        "target": model_record(target), "draft": model_record(draft), "device": device,
        "task": {"name": source.name, "scorer": source.scorer_name, "data_fingerprint": source.fingerprint,
                 "record": task},
        "options": options.model_dump(),
        "dims": {"draft": hidden_size(draft), "target": hidden_size(target)},
    }
    identity = {**config, "target": {k: config["target"][k] for k in ("name", "dtype", "hidden_size", "vocab")},
                "draft": {k: config["draft"][k] for k in ("name", "dtype", "hidden_size", "vocab")}}
    return hashlib.sha256(dumps(identity).encode()).hexdigest()[:20], config


@dataclass(frozen=True)
class ItemReport:
    item_id: str
    mismatches: int
    important: int
    seconds: float
    resumed: bool


def mine(source: TaskSource, items: Sequence[TaskItem], target: Any, draft: Any, store: MiningStore,
         options: MiningOptions, session_id: int, progress: MiningProgress | None = None) -> list[ItemReport]:
    """Mine ``items`` of ``source`` into ``store`` (bound to this setup), item by item; finished items are
    skipped, an unfinished one resumes from its stored state."""
    progress = progress or SilentProgress()
    scorer = source.scorer()
    positions = {item.item_id: i for i, item in enumerate(source.items)}
    todo = [item for item in items if (stored := store.item(item.item_id)) is None or stored.status != "done"]
    progress.start(len(items), len(items) - len(todo))
    reports = []
    for item in todo:
        stored = store.item(item.item_id)
        clock = time.perf_counter()
        if stored is None:
            prompt_ids = source.encode(target, item, 0, [], options.max_new_tokens)
            search = MismatchSearch(target, draft, scorer, item, prompt_ids, options)
            reference = search.reference()
            state = SearchState(list(reference.ids), target_tokens=search.target_tokens)
            now = time.perf_counter()
            store.start_item(item.item_id, positions[item.item_id], prompt_ids, reference, state, now - clock)
            clock = now
        else:
            prompt_ids, reference, state = stored.prompt_ids, stored.reference, stored.state
            search = MismatchSearch(target, draft, scorer, item, prompt_ids, options)
        important = sum(row["important"] for row in store.mismatch_rows(item.item_id))
        progress.item(item.item_id, len(state.response))

        def commit(found: Mismatch, after: SearchState, item_id: str = item.item_id) -> None:
            nonlocal clock, important
            now = time.perf_counter()
            store.add_mismatch(item_id, found, after, session_id, now - clock)
            clock = now
            important += int(found.important)
            progress.update(after.left, len(after.response), after.handled, important)

        search.run(state, reference, commit)
        now = time.perf_counter()
        store.finish_item(item.item_id, state, now - clock)
        total = store.item(item.item_id)
        if total is None:
            raise DataError(f"{store.path}: item {item.item_id!r} vanished while mining")
        progress.item_done(item.item_id, state.handled, important, total.seconds)
        reports.append(ItemReport(item.item_id, state.handled, important, total.seconds, stored is not None))
    return reports
