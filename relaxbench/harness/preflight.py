"""What the files on disk and the flags settle before torch loads, for every command that runs models: a target or
data file that cannot be read, a decode path the device cannot take. Each refusal is one line."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from relaxbench.errors import ConfigError


def check_graphs_early(graphs: str, device: str | None, device_map: str | None = None) -> None:
    """What ``--graphs`` settles with the device before torch loads: ``on`` with ``--device cpu`` or with
    ``--device-map`` is one line. (Whether the engine takes ``--graphs`` at all is its executor card's
    ``supports``.)"""
    if graphs == "on" and str(device or "auto") == "cpu":
        raise ConfigError("--graphs on needs a CUDA device (captured graphs are CUDA graphs); this run is on cpu")
    if graphs == "on" and device_map:
        raise ConfigError("--graphs on cannot be used with --device-map (a target spread over GPUs is not captured "
                          "as one graph); use --graphs off")


def check_files_early(target: str | None, draft: str | None, data_files: Mapping[str, str] | None = None,
                      tasks: Collection[str] = ()) -> None:
    """What the files on disk settle, before torch is imported: a target (or a draft given as a path) that is a cut
    or foreign GGUF file, or a path that is not there; a data file that is a folder, a pipe or a device, or that is
    missing for a task of the run named as in ``tasks`` (the data file of a task not in the run is left to the
    plan, which says so)."""
    from relaxbench.data.load import check_data_file
    from relaxbench.models.resolve import resolve_model

    if target:
        resolve_model(target)
    if draft and (draft.endswith(".gguf") or os.path.sep in draft):  # a drafter's name is no path
        resolve_model(draft)
    for task, name in (data_files or {}).items():
        path = Path(name).expanduser()
        if os.path.lexists(path) or (task in tasks and ":" not in task):
            check_data_file(path)
