"""Code tasks: pull the program out of a model's answer, append the problem's tests, run it in the sandbox.

pass@1 with one greedy sample per problem: a problem passes when the program runs to its end within the limits:
it exits 0 *and* prints a random end-of-tests marker placed after the tests, so a completion that exits early
(``sys.exit(0)`` in a ``__main__`` block, ``os._exit(0)``) before the tests ran does not pass.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from pydantic import Field

from relaxbench.data.items import TaskItem
from relaxbench.scoring.agreement import AgreementScorer
from relaxbench.scoring.answers import ExactMatchScorer
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.sandbox import Limits, run_python
from relaxbench.validation import Finite, Integer, Spec

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
CLOSED_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(```|\Z)", re.DOTALL)  # FENCE; group 3: closed
PYTHON_FENCES = ("python", "py", "python3", "")
IMPORT_LINE = re.compile(r"^(?:import|from)[ \t][^\n]*$", re.MULTILINE)  # top-level import lines


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in a model's answer: the fenced block that defines ``entry_point`` (else the first Python or
    unlabelled block); the whole text when there is no fence (a plain completion)."""
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    if not blocks:
        return text
    if entry_point:
        for _, body in blocks:
            if _defines_entry(body, entry_point):
                return body
    for lang, body in blocks:
        if lang in PYTHON_FENCES:
            return body
    return blocks[0][1]


def code_settled(text: str, entry_point: str | None = None) -> bool:
    """Whether no continuation of ``text`` can change what ``extract_code`` returns: the block it picks is closed
    (the first block that defines ``entry_point``; without an entry point, the first Python or unlabelled block).
    Fences are read left to right and a closed block's body ends at its closing fence, so appended text cannot
    change it; with no fence yet, the whole text is the code."""
    blocks = [(lang.lower(), body, bool(end)) for lang, body, end in CLOSED_FENCE.findall(text)]
    if entry_point:
        defining = next((closed for _, body, closed in blocks if _defines_entry(body, entry_point)), None)
        return bool(defining)  # no block defines it yet: a later one may
    return next((closed for lang, _, closed in blocks if lang in PYTHON_FENCES), False)


def _defines_entry(body: str, entry_point: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", body, re.MULTILINE) is not None


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def build_program(item: TaskItem, text: str, end_marker: str | None = None) -> str:
    """Completion + tests. A full function from the model gets the problem's import lines; a continuation of the
    problem's code prefix (plain completion) is appended to it. ``check(entry_point)`` runs when the tests define
    ``check`` (the HumanEval convention); ``end_marker``, when given, is printed last."""
    code = extract_code(text, item.entry_point)
    prefix = item.code_prefix or ""
    if item.entry_point and prefix and not defines(code, item.entry_point):
        program = prefix + code
    else:
        imports = "\n".join(line.group(0).strip() for line in IMPORT_LINE.finditer(prefix))
        program = (imports + "\n\n" if imports else "") + code
    tests = item.test or ""
    program += "\n\n" + tests + "\n"
    if item.entry_point and re.search(r"^def\s+check\s*\(", tests, re.MULTILINE):
        program += f"\ncheck({item.entry_point})\n"
    if end_marker is not None:
        program += f"\nprint({end_marker!r}, flush=True)\n"
    return program


class SandboxArgs(Spec):
    """Limits of one sandboxed run: wall-clock seconds (the CPU limit follows it) and memory."""

    timeout: Finite = Field(10.0, gt=0)
    memory_mb: Integer = Field(Limits.memory_mb, ge=1)

    def limits(self) -> Limits:
        return Limits(wall_seconds=self.timeout, cpu_seconds=max(1, int(self.timeout)), memory_mb=self.memory_mb)


@register_scorer
class CodeExecutionScorer(Scorer):
    """pass@1: the program (answer + the item's tests) runs to its end in the sandbox: exit 0, within the limits,
    and the end-of-tests marker printed."""

    name = "code-exec"
    summary = "run the answer with the problem's tests in the sandbox; pass = ran to the end, exit 0, within limits"
    Args = SandboxArgs

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        return run_to_end(lambda marker: build_program(item, text, marker), self.args.limits())

    def settled(self, item: TaskItem, text: str) -> bool:
        return code_settled(text, item.entry_point)


def run_to_end(program_with_marker: Callable[[str], str], limits: Limits) -> Score:
    """Run the program that ``program_with_marker(marker)`` builds (it prints ``marker`` last) in the sandbox;
    pass = exit 0 within the limits and the marker printed. Details say what happened."""
    marker = f"relaxbench-end-of-tests-{secrets.token_hex(8)}"
    result = run_python(program_with_marker(marker), limits)
    reached_end = result.stdout.rstrip().endswith(marker)
    passed = result.passed and reached_end
    tail = (result.stderr.strip().splitlines() or [""])[-1][:300]
    return Score(float(passed), passed,
                 {"status": result.status, "returncode": result.returncode, "error": tail,
                  "reached_end_of_tests": reached_end,
                  "seconds": round(result.wall_seconds, 3), "containment": result.containment})


@register_scorer
class AutoScorer(Scorer):
    """For a user's JSONL file, per item: run its ``test`` when it has one, else exact match against its
    ``reference``, else agreement with the AR output."""

    name = "auto"
    summary = "per item: code-exec if it has a test, exact-match if it has a reference, else agreement"
    Args = SandboxArgs
    needs_baseline = True
    needs_logprob = True
    detail_metrics = AgreementScorer.detail_metrics

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        if item.test:
            chosen: Scorer = CodeExecutionScorer(self.args)
        elif item.reference is not None:
            chosen = ExactMatchScorer()
        else:
            chosen = AgreementScorer()
        score = chosen.score(item, text, context)
        return Score(score.value, score.passed, {**score.details, "scorer": chosen.name})

    def has_outcome(self, item: TaskItem) -> bool:
        return bool(item.test) or item.reference is not None

    def settled(self, item: TaskItem, text: str) -> bool:
        return bool(item.test) and code_settled(text, item.entry_point)
