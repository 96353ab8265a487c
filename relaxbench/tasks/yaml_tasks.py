"""relaxbench's own tasks (``tasks/*.yaml``) as task sources: rows from ``--data-file``, a wheel, the hub or a
seeded generator, turned into items by the task's row format; prompts rendered per user turn from the task's
template (with the target's chat template and its arguments unless ``chat: false``), after the task's few-shot
examples as earlier turns, earlier turns of the item answered by the arm itself, and the assistant's turn
pre-filled with the task's ``gen_prefix``; scored by the task's scorer, which reads the pre-filled prefix in
front of the generated text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxbench.data import TaskItem, fingerprint, hub_file_rows, hub_rows, package_rows, read_records
from relaxbench.data.formats import FORMATS, WithheldRow
from relaxbench.data.generate import GENERATORS
from relaxbench.data.text import check_row_text
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.errors import ConfigError, DataError, RelaxbenchError
from relaxbench.ops.sampling_params import SamplingParams
from relaxbench.scoring import Score, Scorer, ScoringContext, make_scorer
from relaxbench.tasks.source import Generation, LoadRequest, TaskFacts, TaskSource
from relaxbench.tasks.spec import TaskSpec, load_task


GREEDY_BELOW = 1e-4  # FastChat gen_model_answer.py: do_sample = temperature >= 1e-4


def _data_file_hint(task: TaskSpec) -> str:
    fields = f" (JSONL with fields: {', '.join(task.source.fields)})" if task.source.fields else " (JSONL)"
    return f"pass a local file with --data-file {task.name}=PATH{fields}"


def read_rows(task: TaskSpec, data_file: str | Path | None) -> list[dict[str, Any]]:
    """The task's rows: ``data_file`` when given, else its own source (not a generator: ``generated_rows``); a
    failure says how to pass a file (and, for a gated hub data set, how to get access)."""
    if data_file is not None:
        return read_records(Path(data_file).expanduser())
    source = task.source
    if source.kind == "file":
        raise DataError(f"task {task.name!r} reads a user's file: {_data_file_hint(task)}")
    try:
        if source.kind == "package":
            return package_rows(source.requirement, source.member)
        if source.kind == "url":
            from relaxbench.data.url import url_rows

            return url_rows(source.url, source.sha256)
        if source.file:
            return hub_file_rows(source.path, source.file, source.revision)
        return hub_rows(source.path, source.name, source.split, source.revision)
    except RelaxbenchError as exc:
        joiner = "; or " if source.kind == "package" else "; "
        access = f"; {source.access}" if source.access else ""
        raise DataError(f"task {task.name!r}: {exc}{access}{joiner}{_data_file_hint(task)}") from None


def generated_rows(task: TaskSpec, limit: int | None, target: str | None) -> tuple[list[dict[str, Any]], str]:
    """A generated task's first ``limit`` rows and the fingerprint of the whole set (generator, options and the
    tokenizer the rows are fitted to)."""
    generator = GENERATORS.get(task.source.generator)(task.source.options)
    tokenizer = None
    if generator.uses_tokenizer:
        if target is None:
            raise ConfigError(f"task {task.name!r} is fitted to the target's tokenizer: give a target")
        from relaxbench.models import load_tokenizer

        tokenizer = load_tokenizer(target, quiet=True)
    try:
        rows = generator.rows(limit, tokenizer)
    except ValueError as exc:
        raise DataError(f"task {task.name!r}: {exc}") from None
    return rows, generator.fingerprint(target)


@dataclass(frozen=True)
class LoadedItems:
    """A task's items, the fingerprint of its whole data set, and the rows its format withheld (a count and the
    remedy, said before the run starts)."""

    items: list[TaskItem]
    fingerprint: str
    withheld: int = 0
    rows: int = 0
    why: str = ""
    emptied: tuple[str, ...] = ()  # categories every row of which was withheld

    def note(self, task: str) -> str | None:
        if not self.withheld:
            return None
        emptied = f"; no item left in {', '.join(self.emptied)}" if self.emptied else ""
        return (f"{task}: {self.withheld} of {self.rows} rows hold no prompt and are left out ({self.why}); "
                f"{len(self.items)} items run{emptied}")


def interleaved(items: Sequence[TaskItem]) -> list[TaskItem]:
    """``items`` round-robin over their categories, in the order the categories first appear."""
    groups: dict[str | None, list[TaskItem]] = {}
    for item in items:
        groups.setdefault(item.category, []).append(item)
    longest = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(longest) for g in groups.values() if i < len(g)]


def read_items(task: TaskSpec, data_file: str | Path | None = None, limit: int | None = None,
               target: str | None = None) -> LoadedItems:
    """The task's first ``limit`` items (all when None; after interleaving the categories when the task asks),
    the fingerprint of the whole data set, and how many rows the format withheld. ``target`` (a model name) is
    read by generators that fit rows to its tokenizer."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    where = str(data_file) if data_file is not None else task.name
    if data_file is None and task.source.kind == "generated":
        rows, digest = generated_rows(task, limit, target)
    else:
        rows = read_rows(task, data_file)
        digest = fingerprint(rows)
    if not rows:
        raise DataError(f"task {task.name!r}: the data set is empty ({where})")
    convert = FORMATS.get(task.format)
    items: list[TaskItem] = []
    withheld: list[WithheldRow] = []
    every = task.interleave_categories or limit is None
    for index, row in enumerate(rows):
        if not every and len(items) == limit:
            break
        try:
            check_row_text(row, f"row {index + 1}")
            items.append(convert(row, index))
        except WithheldRow as exc:
            withheld.append(exc)
        except DataError as exc:
            raise DataError(f"task {task.name!r} ({where}): {exc}") from None
    if not items:
        why = f": {withheld[0].why}" if withheld else ""
        raise DataError(f"task {task.name!r} ({where}): no row holds a prompt{why}")
    kept = {item.category for item in items}
    if task.interleave_categories:
        items = interleaved(items)[:limit]
    ids = [item.item_id for item in items]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"task {task.name!r} ({where}): duplicate item id {duplicate!r}")
    emptied = tuple(dict.fromkeys(w.category for w in withheld if w.category is not None and w.category not in kept))
    return LoadedItems(items, digest, len(withheld), len(rows), withheld[0].why if withheld else "", emptied)


def load_items(task: TaskSpec, data_file: str | Path | None = None, limit: int | None = None,
               target: str | None = None) -> tuple[list[TaskItem], str]:
    """The task's first ``limit`` items (all when None) and the fingerprint of the whole data set
    (``read_items`` without the count of withheld rows)."""
    loaded = read_items(task, data_file, limit, target)
    return loaded.items, loaded.fingerprint


def _render(task: TaskSpec, what: str, template: str, variables: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        return env.from_string(template).render(variables)
    except jinja2.UndefinedError as exc:
        fields = ", ".join(sorted(k for k in variables if k not in ("prompt", "turn_index")))
        raise ConfigError(f"{task.origin or task.name}: {what} template: {exc.message} "
                          f"(fields: {fields})") from None


def render_turn(task: TaskSpec, item: TaskItem, turn_index: int) -> str:
    """The user message for one turn: the task's template over the row's fields and this turn's text."""
    return _render(task, "prompt", task.prompt,
                   {**item.fields, "prompt": item.turns[turn_index], "turn_index": turn_index})


def fewshot_messages(task: TaskSpec) -> list[dict[str, str]]:
    """The task's few-shot examples as user/assistant turns (each example's fields through the prompt template;
    ``prompt`` is the example's own ``prompt`` field when the template reads it)."""
    messages = []
    for example in task.fewshot:
        variables = {"turn_index": 0, **example}
        messages.append({"role": "user", "content": _render(task, "prompt (few-shot example)", task.prompt,
                                                            variables)})
        messages.append({"role": "assistant", "content": example["target"]})
    return messages


def render_prefix(task: TaskSpec, item: TaskItem) -> str:
    """The text that pre-fills the assistant's turn ('' when the task has none)."""
    if task.gen_prefix is None:
        return ""
    return _render(task, "gen_prefix", task.gen_prefix, {**item.fields, "prompt": item.turns[0], "turn_index": 0})


def scored_text(task: TaskSpec, item: TaskItem, text: str) -> str:
    """What the scorer reads: the pre-filled ``gen_prefix`` and the generated text, cut at the first ``cut_at``
    string."""
    cuts = [i for i in (text.find(s) for s in task.cut_at) if i >= 0]
    return render_prefix(task, item) + (text[:min(cuts)] if cuts else text)


class TaskTextScorer(Scorer):
    """The task's scorer reading ``scored_text`` (lm-eval's MBPP+ extraction likewise reads the code after the
    pre-filled fence, and its ``until`` strings cut the text before the filters)."""

    def __init__(self, inner: Scorer, task: TaskSpec) -> None:
        self.inner, self.task = inner, task
        self.name, self.summary, self.args = inner.name, inner.summary, inner.args
        self.needs_baseline, self.needs_logprob = inner.needs_baseline, inner.needs_logprob
        self.detail_metrics = inner.detail_metrics

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        return self.inner.score(item, scored_text(self.task, item, text), context)


class YamlTask(TaskSource):
    """One of relaxbench's own tasks with its items loaded."""

    def __init__(self, spec: TaskSpec, items: Sequence[TaskItem], fingerprint: str,
                 load_notes: Sequence[str] = ()) -> None:
        self.spec = spec
        self.name = spec.name
        self.items = tuple(items)
        self.fingerprint = fingerprint
        self.scorer_name = spec.scorer
        self.truncates_prompts = spec.truncate_prompt
        self.load_notes = tuple(load_notes)

    def notes(self) -> list[str]:
        return list(self.load_notes)

    def record(self) -> dict[str, Any]:
        return self.spec.to_record()

    def generation(self) -> Generation:
        return Generation(self.spec.max_new_tokens, self.spec.stop)

    def scorer(self) -> Scorer:
        scorer = make_scorer(self.spec.scorer, self.spec.scorer_args)
        return TaskTextScorer(scorer, self.spec) if self.spec.gen_prefix is not None or self.spec.cut_at else scorer

    def item_sampling(self, item: TaskItem) -> SamplingParams | None:
        """The task's own temperature for the item's category (FastChat: greedy below 1e-4, else the temperature
        alone: no top-k, no top-p); None when the task has none."""
        temperature = self.spec.own_temperature(item.category)
        if temperature is None:
            return None
        return SamplingParams(0.0 if temperature < GREEDY_BELOW else temperature)

    def grader_scorer(self) -> Scorer | None:
        return None if self.spec.grader is None else make_scorer(self.spec.grader, self.spec.grader_args)

    def encode(self, target: Any, item: TaskItem, turn: int, history: Sequence[str], max_new_tokens: int) -> list[int]:
        messages = fewshot_messages(self.spec)
        for i in range(turn):
            messages.append({"role": "user", "content": render_turn(self.spec, item, i)})
            messages.append({"role": "assistant", "content": history[i]})
        messages.append({"role": "user", "content": render_turn(self.spec, item, turn)})
        return encode_prompt(target.tokenizer, messages, chat=self.spec.chat, system=self.spec.system,
                             chat_template_args=self.spec.chat_template_args,
                             prefill=render_prefix(self.spec, item) if turn == 0 else "")


class YamlTaskLoader:
    """Loads ``tasks/*.yaml`` names and YAML paths; ``--data-file`` applies to these tasks."""

    reads_data_files = True

    def load(self, names: Sequence[str], request: LoadRequest) -> dict[str, list[TaskSource]]:
        out: dict[str, list[TaskSource]] = {}
        suite_args = dict(request.options.get("chat_template_args") or {})
        for given in names:
            spec = load_task(given)
            if suite_args:  # the suite's chat-template arguments over the task's own, stored with the task
                spec = spec.model_copy(update={"chat_template_args": {**spec.chat_template_args, **suite_args}})
            fewshot_messages(spec)  # a template that cannot render an example fails now, not mid-run
            loaded = read_items(spec, request.data_file_for(spec.name, given), request.limit_for(spec.name, given),
                                request.target)
            note = loaded.note(spec.name)
            out[given] = [YamlTask(spec, loaded.items, loaded.fingerprint, [note] if note else [])]
        return out

    def facts(self, record: Mapping[str, Any], scorer: str) -> TaskFacts:
        from relaxbench.scoring import SCORERS

        if scorer not in SCORERS:
            return TaskFacts()
        cls = SCORERS.get(scorer)
        try:
            instance = cls(record.get("scorer_args") or {})
        except RelaxbenchError:  # arguments an earlier version accepted: no answer check rather than no report
            return TaskFacts(False, cls.detail_metrics, cls.measure)
        return TaskFacts(False, cls.detail_metrics, cls.measure, instance.answered,
                         instance.score_verdict if cls.scores_verdicts else None)

    def names(self, given: Sequence[str]) -> dict[str, list[str]]:
        """The task names each given name stands for (validation before any data is read)."""
        return {name: [load_task(name).name] for name in given}


YAML_LOADER = YamlTaskLoader()
