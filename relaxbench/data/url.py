"""Rows of a data file that a project publishes at a URL (Spec-Bench's ``question.jsonl`` in its GitHub
repository), downloaded once into ``$RELAXBENCH_CACHE/data/url`` and checked against the sha256 the task pins, so a
moved or edited file is refused rather than run as the same data set. The host is checked with one quick TCP connect
first: an offline machine gets a one-line error within seconds."""

from __future__ import annotations

import hashlib
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from relaxbench.data.load import read_records
from relaxbench.errors import DataError

TIMEOUT_S = 30.0
MAX_BYTES = 256 << 20  # a published question file is megabytes; more is refused rather than held


def url_file(url: str, sha256: str, cache: Path | None = None) -> Path:
    """The file at ``url``, cached by its pinned ``sha256`` (fetched when not cached yet)."""
    if cache is None:
        from relaxbench.models.zoo import cache_root

        cache = cache_root() / "data" / "url"
    name = Path(urlparse(url).path).name or "data"
    out = cache / sha256[:16] / name
    if out.is_file():
        if hashlib.sha256(out.read_bytes()).hexdigest() == sha256:
            return out
        out.unlink()  # a damaged or edited copy: fetched again
    _check_host(url)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + f".partial-{os.getpid()}")
    try:
        data = _download(url)
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise DataError(f"{url}: sha256 {actual} is not the pinned {sha256} (the published file changed)")
        partial.write_bytes(data)
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def url_rows(url: str, sha256: str) -> list[dict[str, Any]]:
    """The rows of the data file at ``url`` (JSONL or a JSON list)."""
    return read_records(url_file(url, sha256))


def _check_host(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise DataError(f"{url}: not an http(s) URL")
    try:
        with socket.create_connection((parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)),
                                      timeout=3.0):
            pass
    except OSError:
        raise DataError(f"{parsed.hostname} is unreachable, so {url} cannot be downloaded") from None


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 (http(s) checked above)
            data = response.read(MAX_BYTES + 1)
    except OSError as exc:  # URLError, HTTPError and timeouts are all OSErrors
        raise DataError(f"could not download {url} ({exc})") from None
    if len(data) > MAX_BYTES:
        raise DataError(f"{url}: larger than {MAX_BYTES >> 20} MiB; not a question file")
    return data
