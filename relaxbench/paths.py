"""Where things live and whether a path can be written: the model cache ($RELAXBENCH_CACHE) and its trained heads,
and a path checked before any expensive work, so a bad ``--out`` or ``--report-out`` is one line naming the path and
what to do (not a traceback after the run)."""

from __future__ import annotations

import os
from pathlib import Path

from relaxbench.errors import DataError


def check_can_write(path: str | Path, flag: str, folder: bool = False) -> None:
    """``path`` (a file, or with ``folder`` a folder) can be created or overwritten: its nearest existing ancestor
    is a writable folder, and the path itself, if present, is of the right kind and writable. ``flag`` names the
    option that gave it."""
    path = Path(path)
    if path.exists():
        if folder and not path.is_dir():
            raise DataError(f"{path}: is a file, not a folder; give {flag} a folder")
        if not folder and path.is_dir():
            raise DataError(f"{path}: is a folder, not a file; give {flag} a file name")
        if not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
            raise DataError(f"{path}: read-only (cannot write it); make it writable or choose another {flag}")
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DataError(f"{ancestor}: is a file, not a folder, so {path} cannot be created; choose another {flag}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise DataError(f"{ancestor}: read-only folder (cannot create {path} in it); choose another {flag}")


def cache_root() -> Path:
    """Where fetched wheels, assembled GGUFs and converted checkpoints live ($RELAXBENCH_CACHE)."""
    return Path(os.environ.get("RELAXBENCH_CACHE", Path.home() / ".cache" / "relaxbench")).expanduser()


TRAINED = "trained"  # a drafter's ``head=trained``: the head ``relaxbench drafter train`` cached for its target


def target_key(name_or_path: str) -> str:
    """The folder name a target's trained heads are cached under, from the target as the user names it (or its
    preview's ``name_or_path``: a packaged alias converts to a folder named after it): a local checkpoint's folder
    name, else the alias or the hub id with ``/`` as ``--``."""
    path = Path(name_or_path).expanduser()
    return path.name if path.is_dir() else name_or_path.replace("/", "--")


def trained_head_dir(target_name_or_path: str, kind: str) -> Path:
    """Where ``relaxbench drafter train KIND --target T`` saves its head when no ``--out`` is given (both engines
    find it there for ``head=trained``)."""
    return cache_root() / "heads" / target_key(target_name_or_path) / kind


def trained_head(target: str, kind: str) -> Path:
    """The folder of the ``kind`` head ``relaxbench drafter train`` cached for ``target`` (``head=trained``), or a
    one-line refusal naming the command that trains it."""
    from relaxbench.errors import ConfigError

    folder = trained_head_dir(target, kind)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"drafter {kind!r}: no trained head for target {target_key(target)!r} in the cache "
                          f"({folder}); train one with `relaxbench drafter train {kind} --target "
                          f"{target_key(target)}`, or give --drafter-knob head=PATH_OR_HUB_ID")
    return folder
