"""relaxbench's own tasks (``tasks/*.yaml``) as task sources: rows from ``--data-file``, a wheel or the hub,
turned into items by the task's row format; prompts rendered per user turn from the task's template (with the
target's chat template unless ``chat: false``), earlier turns answered by the arm itself; scored by the task's
scorer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from relaxbench.data import TaskItem, fingerprint, hub_rows, package_rows, read_records
from relaxbench.data.formats import FORMATS
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.errors import ConfigError, DataError, RelaxbenchError
from relaxbench.scoring import Scorer, make_scorer
from relaxbench.tasks.source import Generation, LoadRequest, TaskFacts, TaskSource
from relaxbench.tasks.spec import TaskSpec, load_task


def _data_file_hint(task: TaskSpec) -> str:
    fields = f" (JSONL with fields: {', '.join(task.source.fields)})" if task.source.fields else " (JSONL)"
    return f"pass a local file with --data-file {task.name}=PATH{fields}"


def read_rows(task: TaskSpec, data_file: str | Path | None) -> list[dict[str, Any]]:
    """The task's rows: ``data_file`` when given, else its own source; a failure says how to pass a file."""
    if data_file is not None:
        return read_records(Path(data_file).expanduser())
    source = task.source
    if source.kind == "file":
        raise DataError(f"task {task.name!r} reads a user's file: {_data_file_hint(task)}")
    try:
        if source.kind == "package":
            return package_rows(source.requirement, source.member)
        return hub_rows(source.path, source.name, source.split)
    except RelaxbenchError as exc:
        joiner = "; or " if source.kind == "package" else "; "
        raise DataError(f"task {task.name!r}: {exc}{joiner}{_data_file_hint(task)}") from None


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


class YamlTask(TaskSource):
    """One of relaxbench's own tasks with its items loaded."""

    def __init__(self, spec: TaskSpec, items: Sequence[TaskItem], fingerprint: str) -> None:
        self.spec = spec
        self.name = spec.name
        self.items = tuple(items)
        self.fingerprint = fingerprint
        self.scorer_name = spec.scorer

    def record(self) -> dict[str, Any]:
        return self.spec.to_record()

    def generation(self) -> Generation:
        return Generation(self.spec.max_new_tokens, self.spec.stop)

    def scorer(self) -> Scorer:
        return make_scorer(self.spec.scorer, self.spec.scorer_args)

    def judge_scorer(self) -> Scorer | None:
        return None if self.spec.judge is None else make_scorer(self.spec.judge, self.spec.judge_args)

    def encode(self, target: Any, item: TaskItem, turn: int, history: Sequence[str], max_new_tokens: int) -> list[int]:
        messages: list[dict[str, str]] = []
        for i in range(turn):
            messages.append({"role": "user", "content": render_turn(self.spec, item, i)})
            messages.append({"role": "assistant", "content": history[i]})
        messages.append({"role": "user", "content": render_turn(self.spec, item, turn)})
        return encode_prompt(target.tokenizer, messages, chat=self.spec.chat, system=self.spec.system)


class YamlTaskLoader:
    """Loads ``tasks/*.yaml`` names and YAML paths; ``--data-file`` applies to these tasks."""

    reads_data_files = True

    def load(self, names: Sequence[str], request: LoadRequest) -> dict[str, list[TaskSource]]:
        out: dict[str, list[TaskSource]] = {}
        for given in names:
            spec = load_task(given)
            items, digest = load_items(spec, request.data_file_for(spec.name, given),
                                       request.limit_for(spec.name, given))
            out[given] = [YamlTask(spec, items, digest)]
        return out

    def facts(self, record: Mapping[str, Any], scorer: str) -> TaskFacts:
        from relaxbench.scoring import SCORERS

        if scorer not in SCORERS:
            return TaskFacts()
        cls = SCORERS.get(scorer)
        return TaskFacts(False, cls.detail_metrics, cls.measure)

    def names(self, given: Sequence[str]) -> dict[str, list[str]]:
        """The task names each given name stands for (validation before any data is read)."""
        return {name: [load_task(name).name] for name in given}


YAML_LOADER = YamlTaskLoader()
