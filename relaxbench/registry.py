"""One typed registry for every pluggable kind: policies, drafters, scorers, row formats, model aliases, task
sources, executors.

A miss gives a did-you-mean error. Packages (relaxbench's own integrations included) add entries through the
entry-point group ``relaxbench.<kind>`` (e.g. ``relaxbench.policies``); an entry point may name the object itself
or a module whose import registers it. Entry points load on demand — the one asked for by name, all of them for a
listing — so a plug-in whose optional dependency is missing costs nothing until it is asked for, and then fails
with one line.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from relaxbench.errors import ConfigError, UnknownNameError

T = TypeVar("T")


def did_you_mean(name: str, candidates: list[str]) -> str:
    """A short suggestion suffix for an unknown name ('' when nothing is close)."""
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    if not close:
        close = [c for c in candidates if name.lower() in c.lower() or c.lower() in name.lower()][:3]
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def unknown_name(kind: str, name: str, known: list[str]) -> UnknownNameError:
    """The one refusal of a name no entry of a ``kind`` has: a did-you-mean and the known names."""
    return UnknownNameError(f"unknown {kind} {name!r}{did_you_mean(name, known)} (known: {', '.join(known) or 'none'})")


class Registry(Generic[T]):
    """Names to objects of one kind, with plug-ins loaded on first miss or listing."""

    def __init__(self, kind: str, entry_point_group: str | tuple[str, ...] | None = None) -> None:
        """``entry_point_group``: the plug-ins' group, or several (a group's current name, then earlier ones)."""
        self.kind = kind
        self.entry_point_groups = ((entry_point_group,) if isinstance(entry_point_group, str)
                                   else tuple(entry_point_group or ()))
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}  # another name -> the registered name it resolves to
        self._plugins_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name``."""

        def add(obj: T) -> T:
            self.add(name, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        if (name in self._items and self._items[name] is not obj) or name in self._aliases:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = obj

    def alias(self, alias: str, name: str) -> None:
        """Let ``alias`` resolve to the entry ``name`` (a renamed entry keeps its old name working); aliases are
        not listed."""
        if alias in self._items or self._aliases.get(alias, name) != name:
            raise ValueError(f"{self.kind} alias {alias!r} is already a name")
        self._aliases[alias] = name

    def remove(self, name: str) -> None:
        """Forget the entry ``name`` and its aliases (one registered for a while only: the vLLM engine's own arms
        while a command reads a stored run)."""
        self._items.pop(name, None)
        for alias in [a for a, target in self._aliases.items() if target == name]:
            del self._aliases[alias]

    def _entry_points(self, name: str | None = None) -> list[EntryPoint]:
        out: list[EntryPoint] = []
        for group in self.entry_point_groups:
            found = entry_points(group=group)
            out.extend(found if name is None else found.select(name=name))
        return out

    def _load(self, ep: EntryPoint) -> None:
        try:
            obj = ep.load()
        except ImportError as exc:
            raise ConfigError(f"{self.kind} {ep.name!r} could not be loaded: {exc} "
                              "(is the optional dependency it needs installed?)") from None
        if ep.name not in self._items and not isinstance(obj, types.ModuleType):
            self._items[ep.name] = obj

    def _load_plugins(self) -> None:
        """Every entry point of the group (for a listing); one that fails to import is left out."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in self._entry_points():
            if ep.name not in self._items:
                try:
                    self._load(ep)
                except ConfigError:
                    continue

    def get(self, name: str) -> T:
        name = self._aliases.get(name, name)
        if name not in self._items:
            for ep in self._entry_points(name):
                self._load(ep)
        if name not in self._items:
            self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise unknown_name(self.kind, name, sorted(self._items)) from None

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items or name in self._aliases

    def aliases_of(self, name: str) -> list[str]:
        """The aliases that resolve to ``name``."""
        return sorted(alias for alias, target in self._aliases.items() if target == name)

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        self._load_plugins()
        yield from sorted(self._items.items())
