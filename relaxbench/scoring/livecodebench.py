"""LiveCodeBench code generation (Jain et al. 2403.07974), judged in the sandbox as Xia et al. judge it.

Code: after the thinking, the text between the last two lines that contain a fence (LiveCodeBench's
``extraction_utils``; fewer than two such lines → no code, a failure). Tests: public then private, in order;
stdin/stdout problems run the program with the test's input on stdin and compare its output line by line after
stripping, a differing line still matching when its whitespace-separated tokens are equal as decimals; functional
(LeetCode) problems call ``fn_name`` (a module-level function or a method of ``Solution()``) with each input line
parsed as JSON and compare the result with the expected JSON (tuples as lists). The program gets LiveCodeBench's
preamble (star imports of common standard-library modules, recursion limit 50000). The first failing test ends
the judging; pass = every test passed (pass@1 per sample).

Limits (Xia et al., ``relaxed-spec-dec-repro`` ``evaluation/lcb_codegen.py``, LiveCodeBench's default): 6 s per
test and at most min(60 s, 6 s × (tests + 1)) per problem. Here every test runs in its own interpreter process
inside the sandbox (one judge program per sample starts them), so a test's time includes the interpreter's start
(a few tens of ms) and the problem limit gets that start-up time per test on top.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, ScoringContext, register_scorer
from relaxbench.scoring.sandbox import Limits, run_python
from relaxbench.scoring.thinking import split_thinking
from relaxbench.validation import Finite, Flag, Integer, Spec

PREAMBLE = """\
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from typing import *
import builtins, string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools
import functools, operator, io, sys, json
pow = builtins.pow
sys.setrecursionlimit(50000)
"""

# Runs in the sandbox: calls fn_name of solution.py with the JSON lines on stdin, writes the result as JSON.
CALLER = """\
import json, runpy, sys
name = sys.argv[1]
args = [json.loads(line) for line in sys.stdin.read().split("\\n") if line != ""]
space = runpy.run_path("solution.py", run_name="__lcb_solution__")
target = space.get(name)
if target is None and isinstance(space.get("Solution"), type):
    target = getattr(space["Solution"](), name, None)
if target is None:
    sys.stderr.write("MissingFunction: " + name)
    sys.exit(3)
result = target(*args)
with open("result.json", "w") as f:
    json.dump(result, f)
"""

# The judge: runs in the sandbox, one process per test; prints one JSON line with the verdict, then the marker.
JUDGE = """\
import json, os, subprocess, sys, time
from decimal import Decimal, InvalidOperation

SPEC = json.loads(SPEC_JSON)

def lines(text):
    return [line.strip() for line in text.strip().split("\\n")]

def decimals(text):
    try:
        return [Decimal(token) for token in text.split()]
    except InvalidOperation:
        return None

def stdout_matches(got, want):
    got_lines, want_lines = lines(got), lines(want)
    if len(got_lines) != len(want_lines):
        return False, "wrong answer: %d output lines, expected %d" % (len(got_lines), len(want_lines))
    for index, (a, b) in enumerate(zip(got_lines, want_lines)):
        if a != b and (decimals(a) is None or decimals(a) != decimals(b)):
            return False, "wrong answer at output line %d" % index
    return True, "ok"

def cut(value, length=200):
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= length else text[:length // 2] + "..." + text[-length // 2:]

with open("solution.py", "w") as f:
    f.write(SPEC["preamble"] + "\\n" + SPEC["code"])
with open("call.py", "w") as f:
    f.write(SPEC["caller"])
verdict = {"passed": 0, "tests": len(SPEC["inputs"]), "failure": None}
started = time.monotonic()
for index, (given, expected) in enumerate(zip(SPEC["inputs"], SPEC["outputs"])):
    functional = SPEC["fn_name"] is not None
    command = [sys.executable, "-I", "call.py", SPEC["fn_name"]] if functional else [sys.executable, "-I",
                                                                                      "solution.py"]
    if os.path.exists("result.json"):
        os.remove("result.json")
    failure = None
    try:
        proc = subprocess.run(command, input=given.encode(), capture_output=True, timeout=SPEC["timeout"])
    except subprocess.TimeoutExpired:
        failure = {"kind": "time limit exceeded"}
    else:
        error = proc.stderr.decode(errors="replace").strip().splitlines()
        if proc.returncode != 0:
            failure = {"kind": "runtime error", "error": cut(error[-1] if error else "exit %d" % proc.returncode)}
        elif functional:
            try:
                with open("result.json") as f:
                    got = json.load(f)
            except (OSError, ValueError) as exc:
                failure = {"kind": "runtime error", "error": "no JSON result: %s" % exc}
            else:
                if got != json.loads(expected):
                    failure = {"kind": "wrong answer", "got": cut(got), "expected": cut(expected)}
        else:
            got = proc.stdout.decode(errors="replace")
            ok, why = stdout_matches(got, expected)
            if not ok:
                failure = {"kind": why, "got": cut(got), "expected": cut(expected)}
    if failure is not None:
        failure.update(test=index, input=cut(given))
        verdict["failure"] = failure
        break
    verdict["passed"] += 1
verdict["seconds"] = round(time.monotonic() - started, 3)
print(json.dumps(verdict), flush=True)
print(SPEC["marker"], flush=True)
"""


def extract_last_block(text: str) -> str:
    """LiveCodeBench's extraction: the lines between the last two lines that contain a fence ('' if < 2)."""
    lines = text.strip().split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1:fences[-1]]).strip()


class JudgeArgs(Spec):
    timeout: Finite = Field(6.0, gt=0)  # seconds per test
    problem_timeout: Finite = Field(60.0, gt=0)  # at most this many seconds per problem (plus interpreter start-ups)
    # seconds per test added to the problem limit for the interpreter's start
    startup_allowance: Finite = Field(0.25, ge=0)
    memory_mb: Integer = Field(4096, ge=1)
    strip_thinking: Flag = True


@register_scorer
class LiveCodeBenchScorer(Scorer):
    """pass@1: the last fenced block passes every public and private test, each within its time limit."""

    name = "livecodebench"
    summary = "last fenced block run on every public+private test in the sandbox (stdin or functional), 6 s/test"
    Args = JudgeArgs

    def limits(self, n_tests: int) -> Limits:
        wall = min(self.args.problem_timeout, self.args.timeout * (n_tests + 1))
        wall += self.args.startup_allowance * n_tests + 1.0
        return Limits(wall_seconds=wall, cpu_seconds=int(self.args.timeout) + 1, memory_mb=self.args.memory_mb,
                      tmpfs_mb=256, file_size_mb=64)

    def program(self, item: TaskItem, code: str, marker: str) -> str:
        spec: dict[str, Any] = {"code": code, "preamble": PREAMBLE, "caller": CALLER, "marker": marker,
                                "inputs": list(item.fields["inputs"]), "outputs": list(item.fields["outputs"]),
                                "fn_name": item.fields.get("fn_name"), "timeout": self.args.timeout}
        return f"SPEC_JSON = {json.dumps(json.dumps(spec))}\n" + JUDGE

    def answered(self, details: Mapping[str, Any]) -> bool | None:
        return details.get("thinking") != "unclosed" and bool(details.get("code_chars"))

    def score(self, item: TaskItem, text: str, context: ScoringContext) -> Score:
        split = split_thinking(text) if self.args.strip_thinking else None
        code = extract_last_block(split.answer if split is not None else text)
        details: dict[str, Any] = {"code_chars": len(code), "tests": len(item.fields["inputs"])}
        if split is not None:
            details.update(split.details())
        if not code:
            why = ("the output ended inside its thinking: no code" if split is not None and split.thinking ==
                   "unclosed" else "no code: fewer than two fence lines after the thinking")
            return Score(0.0, False, {**details, "passed_tests": 0, "why": why})
        marker = f"relaxbench-judge-done-{secrets.token_hex(8)}"
        result = run_python(self.program(item, code, marker), self.limits(len(item.fields["inputs"])))
        lines = result.stdout.strip().splitlines()
        verdict = None
        if result.passed and len(lines) >= 2 and lines[-1] == marker:
            verdict = json.loads(lines[-2])
        if verdict is None:
            tail = (result.stderr.strip().splitlines() or [""])[-1][:300]
            return Score(0.0, False, {**details, "passed_tests": 0, "status": result.status, "error": tail,
                                      "why": f"the judge did not finish ({result.status}; the problem's limit)"})
        passed = verdict["failure"] is None and verdict["passed"] == verdict["tests"]
        failure = verdict["failure"] or {}
        why = (f"passed all {verdict['tests']} tests" if passed else
               f"test {failure.get('test')}: {failure.get('kind')} ({verdict['passed']} passed before it)")
        return Score(float(passed), passed, {**details, "passed_tests": verdict["passed"], "failure": failure or None,
                                             "seconds": verdict["seconds"], "why": why,
                                             "containment": result.containment})
