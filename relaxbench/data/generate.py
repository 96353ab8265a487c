"""Generated data sets: rows made by a seeded generator instead of read from a file (a task's ``source`` of kind
``generated``). A generator is one registered class; its ``Options`` (a ``Spec``) are the task's
``source.options``. Rows depend only on the options, the item index and, for generators that fit a context
length, the target's tokenizer, so every run and every machine builds the same items, and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from relaxbench.registry import Registry
from relaxbench.validation import Spec, validate


class NoOptions(Spec):
    """A generator without options."""


class RowGenerator:
    """Subclasses set ``name``, ``summary``, ``Options`` and implement ``rows``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Options: ClassVar[type[Spec]] = NoOptions
    uses_tokenizer: ClassVar[bool] = False  # rows are fitted to the target's tokenizer

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Any = self.check_options(options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any] | None, where: str = "") -> Spec:
        prefix = f"{where}: " if where else ""
        return validate(cls.Options, dict(options or {}), f"{prefix}generator {cls.name!r}", "option")

    def size(self) -> int:
        """How many rows the whole data set has."""
        raise NotImplementedError

    def rows(self, limit: int | None, tokenizer: Any | None) -> list[dict[str, Any]]:
        """The first ``limit`` rows (all when None); row i never depends on ``limit``."""
        raise NotImplementedError

    def fingerprint(self, tokenizer_name: str | None) -> str:
        """What identifies the whole data set without generating it: the generator, its options and (when rows
        are fitted to it) the tokenizer."""
        payload = {"generator": self.name, "options": self.options.model_dump(),
                   "tokenizer": tokenizer_name if self.uses_tokenizer else None}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


GENERATORS: Registry[type[RowGenerator]] = Registry("generator", "relaxbench.generators")


def register_generator(cls: type[RowGenerator]) -> type[RowGenerator]:
    GENERATORS.add(cls.name, cls)
    return cls
