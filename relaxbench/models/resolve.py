"""Where a model name comes from, decided without loading anything: a local directory or ``.gguf`` file, a
packaged alias (``zoo.py``), or a Hugging Face hub id; and whether the hub answers."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from relaxbench.errors import ModelError
from relaxbench.models.gguf_header import check_gguf
from relaxbench.models.zoo import MODELS, TinyRandomModel
from relaxbench.registry import did_you_mean

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


@dataclass(frozen=True)
class ModelLocation:
    """Where a model name resolved to: ``kind`` is 'local', 'gguf', 'packaged', 'tiny' or 'hub'."""

    name: str
    kind: str
    ref: str  # a path, an alias or a hub id


def resolve_model(name: str) -> ModelLocation:
    """Decide where ``name`` comes from without loading anything."""
    looks_like_path = name.startswith(("/", "./", "../", "~")) or os.path.exists(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{name}: a directory but not a model checkpoint (no config.json)")
        return ModelLocation(name, "local", str(path.resolve()))
    if path.is_file() and path.suffix == ".gguf":
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as exc:
            raise ModelError(f"{name}: cannot read ({exc.strerror})") from None
        if magic != b"GGUF":
            raise ModelError(f"{name}: not a GGUF file (it does not start with 'GGUF'); give a .gguf model file, "
                             "a checkpoint folder, a packaged alias or a hub id")
        check_gguf(path, name)
        return ModelLocation(name, "gguf", str(path.resolve()))
    if looks_like_path:
        raise ModelError(f"{name}: no such model directory or .gguf file")
    if name in MODELS:
        spec = MODELS.get(name)
        return ModelLocation(name, "tiny" if isinstance(spec, TinyRandomModel) else "packaged", name)
    if not _HUB_ID.match(name):
        raise ModelError(f"unknown model {name!r}{did_you_mean(name, MODELS.names())}: not a local path, "
                         "packaged alias or hub id")
    return ModelLocation(name, "hub", name)


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connect (checked once, so an offline machine fails in
    seconds instead of after the hub client's retries)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False
