"""The installed vLLM's engine-argument table, kept per installed version, so that ``--engine-arg`` answers in a
fraction of a second instead of the 20 s of starting the vLLM environment's interpreter and importing vLLM.

``vllm_args`` (in the vLLM environment) describes every field of vLLM's ``EngineArgs`` as its own parser takes it —
its options, whether it is a flag, whether its type is a plain ``int``/``float`` or has choices — and the driver
(``vllm_client.check_engine_args``) stores that table and every verdict the parser gave, under the cache, keyed by
the vLLM distribution installed (its ``.dist-info`` name and time) and this module's table format. Later checks
answer from the table what it settles exactly as the parser would — an unknown name (with the same did-you-mean), a
code-only field, a flag given something other than true or false, a plain number that does not parse (argparse's
own message) — and repeat any verdict seen before; anything else (vLLM's own value types such as ``4k``, choices,
JSON) still goes to vLLM's parser. Nothing here imports vLLM.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from relaxbench.registry import did_you_mean

TABLE_FORMAT = 1


class Refused(Exception):
    """A key or a value vLLM's parser refuses (one line)."""


class NotSettled(Exception):
    """The table cannot answer this value exactly: vLLM's parser must."""


def value_text(value: Any) -> str:
    """A value as it would be typed on vLLM's command line."""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def where(key: str, value: Any) -> str:
    return f"--engine-arg {key}={value_text(value)}"


def unknown_key(key: str, value: Any, fields: list[str], version: str) -> Refused:
    return Refused(f"{where(key, value)}: not an engine argument of vLLM {version}{did_you_mean(key, fields)}")


def code_only(key: str, value: Any, version: str) -> Refused:
    return Refused(f"{where(key, value)}: vLLM {version} takes it from code only, not from its command line")


def not_a_flag_value(key: str, value: Any) -> Refused:
    return Refused(f"{where(key, value)}: a flag of vLLM's, give true or false")


def check_one(key: str, value: Any, table: dict[str, Any]) -> Any:
    """``value`` in vLLM's type, as its parser would give it, when the table settles it; ``Refused`` as the parser
    would refuse it; ``NotSettled`` otherwise."""
    version, fields, actions = table["vllm"], table["fields"], table["actions"]
    if key not in fields:
        raise unknown_key(key, value, fields, version)
    action = actions.get(key)
    if action is None:
        raise code_only(key, value, version)
    if action["flag"]:
        if not isinstance(value, bool):
            raise not_a_flag_value(key, value)
        return value  # --x gives true, --no-x (or leaving the flag out) false
    kind = action["type"]
    if kind not in ("int", "float") or action["choices"] or isinstance(value, (bool, dict, list)):
        raise NotSettled()
    text = value_text(value)
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        raise Refused(f"{where(key, value)}: argument {'/'.join(action['options'])}: invalid {kind} value: "
                      f"{text!r}") from None


def installed_identity(python: Path) -> str | None:
    """The vLLM distribution installed beside ``python`` (its ``.dist-info`` folder's name and time) and this table
    format, hashed; None when no such folder is found (then nothing is cached)."""
    root = python.parent.parent
    found = sorted(root.glob("lib/python*/site-packages/vllm*.dist-info"))
    if not found:
        return None
    marks = [f"{p.name}:{p.stat().st_mtime_ns}" for p in found] + [f"format {TABLE_FORMAT}", str(python)]
    return hashlib.sha256("\n".join(marks).encode()).hexdigest()[:16]


class ArgTableCache:
    """The table and the parser's verdicts for one installed vLLM, in one JSON file under the cache."""

    def __init__(self, folder: Path, identity: str) -> None:
        self.path = folder / f"engine-args-{identity}.json"
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    @property
    def table(self) -> dict[str, Any] | None:
        return self.data.get("table")

    def verdict(self, key: str, value: Any) -> dict[str, Any] | None:
        return self.data.get("verdicts", {}).get(verdict_key(key, value))

    def store(self, table: dict[str, Any] | None, verdicts: dict[str, dict[str, Any]]) -> None:
        """Write the table and the new verdicts (atomically: a rename; a cache that cannot be written is skipped)."""
        if table is not None:
            self.data["table"] = table
        self.data.setdefault("verdicts", {}).update(verdicts)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
            partial.write_text(json.dumps(self.data))
            partial.replace(self.path)
        except OSError:
            pass


def verdict_key(key: str, value: Any) -> str:
    """The cache's key of one (name, value) check."""
    return json.dumps([key, value], sort_keys=True)
