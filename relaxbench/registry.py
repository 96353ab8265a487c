"""One typed registry for every pluggable kind: policies, drafters, tasks' scorers, model aliases.

A miss gives a did-you-mean error. Third-party packages add entries through the entry-point group
``relaxbench.<kind>`` (e.g. ``relaxbench.policies``); an entry point may name the object itself or a module
whose import registers it.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from relaxbench.errors import UnknownNameError

T = TypeVar("T")


def did_you_mean(name: str, candidates: list[str]) -> str:
    """A short suggestion suffix for an unknown name ('' when nothing is close)."""
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    if not close:
        close = [c for c in candidates if name.lower() in c.lower() or c.lower() in name.lower()][:3]
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class Registry(Generic[T]):
    """Names to objects of one kind, with plug-ins loaded on first miss or listing."""

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, T] = {}
        self._plugins_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name``."""

        def add(obj: T) -> T:
            self.add(name, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        if name in self._items and self._items[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = obj

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self.entry_point_group is None:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            obj = ep.load()
            if ep.name not in self._items and not isinstance(obj, types.ModuleType):
                self._items[ep.name] = obj

    def get(self, name: str) -> T:
        if name not in self._items:
            self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            known = sorted(self._items)
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, known)} (known: {', '.join(known) or 'none'})"
            ) from None

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        self._load_plugins()
        yield from sorted(self._items.items())
