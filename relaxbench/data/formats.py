"""Row formats: how one raw row of each data set becomes a ``TaskItem``. One function per format, registered."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from relaxbench.data.items import TaskItem
from relaxbench.errors import DataError
from relaxbench.registry import Registry

RowFormat = Callable[[Mapping[str, Any], int], TaskItem]
FORMATS: Registry[RowFormat] = Registry("row format", "relaxbench.formats")


class WithheldRow(DataError):
    """Raised by a row format for a published row that holds no prompt (SPEED-Bench's placeholders for text its
    sources do not let it redistribute): the loader leaves the row out and says how many, instead of failing or
    running the placeholder as a prompt. ``why`` is the one remedy shared by every such row of the data set;
    ``category`` the row's, so the loader can name a category left with no item."""

    def __init__(self, message: str, why: str, category: str | None = None) -> None:
        super().__init__(message)
        self.why, self.category = why, category


def _need(row: Mapping[str, Any], index: int, *keys: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DataError(f"row {index + 1} has no field {', '.join(repr(k) for k in missing)} "
                        f"(its fields: {', '.join(sorted(map(str, row))) or 'none'})")


@FORMATS.register("humaneval")
def humaneval(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "task_id", "prompt", "test", "entry_point")
    return TaskItem(str(row["task_id"]), (str(row["prompt"]),), test=str(row["test"]),
                    entry_point=str(row["entry_point"]), code_prefix=str(row["prompt"]), fields=dict(row))


@FORMATS.register("mbpp")
def mbpp(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "task_id", "test_list")
    text = row.get("text", row.get("prompt"))
    if text is None:
        raise DataError(f"row {index + 1} has neither 'text' nor 'prompt'")
    tests = [str(t) for t in row["test_list"]]
    setup = str(row.get("test_setup_code") or "")
    fields = {**row, "tests": "\n".join(tests)}
    return TaskItem(str(row["task_id"]), (str(text),), test=(setup + "\n" if setup else "") + "\n".join(tests),
                    fields=fields)


GSM8K_ANSWER = re.compile(r"####\s*(-?[0-9.,]+)")


@FORMATS.register("gsm8k")
def gsm8k(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question", "answer")
    answer = str(row["answer"])
    match = GSM8K_ANSWER.search(answer)
    reference = match.group(1).replace(",", "").rstrip(".") if match else answer.strip()
    return TaskItem(str(row.get("id", index)), (str(row["question"]),), reference=reference, fields=dict(row))


@FORMATS.register("mt-bench")
def mt_bench(row: Mapping[str, Any], index: int) -> TaskItem:
    _need(row, index, "question_id", "turns")
    turns = row["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise DataError(f"row {index + 1}: 'turns' must be a non-empty list of strings")
    return TaskItem(str(row["question_id"]), tuple(turns), category=row.get("category"), fields=dict(row))


@FORMATS.register("jsonl")
def jsonl(row: Mapping[str, Any], index: int) -> TaskItem:
    """A user's file: ``prompt`` (a string, or a list of user turns) and optional ``id``, ``reference``,
    ``test`` (code run after the completion), ``entry_point``, ``category``."""
    _need(row, index, "prompt")
    prompt = row["prompt"]
    turns = (prompt,) if isinstance(prompt, str) else tuple(prompt) if isinstance(prompt, list) else None
    if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise DataError(f"row {index + 1}: 'prompt' must be a non-empty string or a non-empty list of them")
    for key in ("test", "entry_point"):  # code, and a name in it: a number or a list here is a mistake
        if row.get(key) is not None and not isinstance(row[key], str):
            raise DataError(f"row {index + 1}: {key!r} must be a string, got {type(row[key]).__name__}")
    optional = {key: (None if row.get(key) is None else str(row[key]))
                for key in ("reference", "test", "entry_point", "category")}
    return TaskItem(str(row.get("id", index)), turns, fields=dict(row), **optional)


@FORMATS.register("mbpp-plus")
def mbpp_plus(row: Mapping[str, Any], index: int) -> TaskItem:
    """EvalPlus's MBPP+ (``evalplus/mbppplus``): ``prompt`` (one sentence), ``test_list`` (MBPP's base asserts),
    ``test_imports`` and ``test`` (EvalPlus's script: inputs, expected outputs and an ``assertion`` helper that
    calls the function by name). ``test`` is the item's test; the first base assert is kept for FLy's setting."""
    _need(row, index, "task_id", "prompt", "test_list", "test")
    tests = [str(t) for t in row["test_list"]]
    if not tests:
        raise DataError(f"row {index + 1}: 'test_list' is empty")
    imports = [str(i) for i in row.get("test_imports") or []]
    fields = {**row, "first_assert": tests[0], "test_imports": imports}
    return TaskItem(str(row["task_id"]), (str(row["prompt"]),), test=str(row["test"]), fields=fields)


@FORMATS.register("mgsm")
def mgsm(row: Mapping[str, Any], index: int) -> TaskItem:
    """MGSM (``juletxara/mgsm``, one configuration per language): ``question`` and ``answer_number``."""
    _need(row, index, "question", "answer_number")
    number = row["answer_number"]
    reference = str(int(number)) if isinstance(number, float) and number.is_integer() else str(number)
    return TaskItem(str(row.get("id", index)), (str(row["question"]),), reference=reference, fields=dict(row))


@FORMATS.register("aime")
def aime(row: Mapping[str, Any], index: int) -> TaskItem:
    """AIME (``HuggingFaceH4/aime_2024``): ``problem`` and ``answer`` (an integer 0-999, often zero-padded)."""
    _need(row, index, "problem", "answer")
    return TaskItem(str(row.get("id", index)), (str(row["problem"]),), reference=str(row["answer"]),
                    fields=dict(row))


@FORMATS.register("jbb-behaviors")
def jbb_behaviors(row: Mapping[str, Any], index: int) -> TaskItem:
    """JailbreakBench's JBB-Behaviors (``JailbreakBench/JBB-Behaviors``, config ``behaviors``, splits ``harmful``
    and ``benign``): ``Index``, ``Goal`` (the request, the prompt), ``Target``, ``Behavior``, ``Category``,
    ``Source``."""
    _need(row, index, "Goal", "Category")
    return TaskItem(str(row.get("Index", index + 1)), (str(row["Goal"]),), category=str(row["Category"]),
                    fields=dict(row))


@FORMATS.register("acp-progression")
def acp_progression(row: Mapping[str, Any], index: int) -> TaskItem:
    """ACPBench Hard's progression task (``ibm-research/acp_bench``, ``acp_prog_gen``): ``context``,
    ``question`` and ``answer`` = {"pos": [atoms], "neg": [atoms]}, the action's positive and negative effects."""
    _need(row, index, "context", "question", "answer")
    answer = row["answer"]
    if not (isinstance(answer, Mapping) and all(isinstance(answer.get(k), list) for k in ("pos", "neg"))):
        raise DataError(f"row {index + 1}: 'answer' must be {{\"pos\": [...], \"neg\": [...]}}")
    return TaskItem(str(row.get("id", index)), (str(row["question"]),), fields=dict(row))


@FORMATS.register("niah")
def niah(row: Mapping[str, Any], index: int) -> TaskItem:
    """RULER needle-in-a-haystack rows (lm-eval's RULER port schema, or the ``niah-multivalue`` generator's):
    ``input`` (the whole prompt), ``outputs`` (the values to recall) and ``gen_prefix`` (the answer's start)."""
    _need(row, index, "input", "outputs")
    outputs = row["outputs"]
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, str) for o in outputs):
        raise DataError(f"row {index + 1}: 'outputs' must be a non-empty list of strings")
    return TaskItem(str(row.get("index", index)), (str(row["input"]),), fields={"gen_prefix": "", **row})
