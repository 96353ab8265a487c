"""docs/extending.md's tutorials, followed as a user follows them, and what the guide promises then checked end to
end on the tiny random models, with no edit of the repository.

The user writes a separate package (the guide's "Plug-ins from another package"): the rule is the tutorial's class,
read from the guide's own code block and renamed ``my-topk``; a drafter registered with ``@register_drafter``; a row
format registered with ``@FORMATS.register``; a scorer registered with ``@register_scorer``. Each is declared by one
entry point in the package's ``pyproject.toml`` table, written to a throw-away ``*.dist-info`` as ``pip install``
would and put on ``PYTHONPATH`` (as ``tests/test_ray.py`` declares an executor). Method YAMLs (the rule, its sweep,
the drafter) and a task YAML over the new row format, all in a temporary folder, run through ``relaxbench compare``
in a subprocess that sees the package only through its entry points. Then:

* a rule: the guide's class registers, decides a block as topk does, is listed (``list rules --markdown``, what
  ``make generated`` writes) and refuses an out-of-range ``--knob`` in one line; ``@register_policy`` refuses, in one
  line naming it, the class missing each thing the guide says it checks (``judge``, ``origin``, a strict setting, a
  loosening, knobs those name, the docstring's deviations); the checks the registry generates (step 2, ``pytest -k
  NAME``) hold it with no test written; its method YAML and sweep are arms of the run, in the store and the printed
  table, with the YAML's knobs, its strict end reproducing AR and its loosest end accepting every draft;
* a drafter: it registers and is listed; in the run its knob bounds every round's drafts, each proposal is one
  lookup, the loop keeps the guide's ``reset`` / ``propose`` / ``commit`` contract (the drafter checks it, and a
  broken promise would fail the run) and, under exact match, its arm reproduces AR;
* a task: the YAML over the new row format, its rows from ``--data-file``, runs: its items, its rendered prompt
  template and its scorer's scores and details are in the store; the shipped ``jsonl`` task runs on a JSONL file of
  the user's;
* a metric: one record of the metric schema with ``compute`` shows, with the values its function gives on the stored
  samples, in the terminal table, the HTML report (cells and definition), ``relaxbench list metrics`` and the
  docs/metrics.md table.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from relaxbench.models.tiny import VOCAB_SIZE, build_tokenizer
from tests.conftest import run_cli
from tests.store_query import rows, sample_rows

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]
PACKAGE = "my_relaxbench_plugin"


# -- the user's package ---------------------------------------------------------------------------------------------
def guide_rule() -> str:
    """The tutorial's class, exactly as docs/extending.md shows it ("1. Write the class"), renamed to a rule of the
    user's own: ``my-topk``."""
    section = GUIDE.read_text(encoding="utf-8").split("### 1. Write the class", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    for old, new in (('name = "topk"', 'name = "my-topk"'), ("class LenientTopK(", "class MyTopK(")):
        assert code.count(old) == 1, f"docs/extending.md's tutorial no longer has {old!r}"
        code = code.replace(old, new)
    return code


# the module docstring the guide asks for: the rule, the reference it follows, its deviations
RULE_DOC = '''"""My lenient top-K: accept a draft iff it is among the target's K most likely tokens.

Reference: garipovroma/autojudge @ 8a4beb1, eval/generation_utils.py run_spec_dec_top_k (as relaxbench's topk).

Deviations: those of relaxbench's topk (membership by value; the bonus token after k accepted drafts).
"""

'''

DRAFTER = '''"""A drafter of my own: propose the last token again, up to ``tokens`` times."""

import torch
from pydantic import Field

from relaxbench.decoding.drafters.base import Drafter, Proposal, register_drafter
from relaxbench.validation import Integer, Spec


@register_drafter
class RepeatLast(Drafter):
    name = "repeat-last"
    summary = "propose the context's last token again, up to `tokens` times"
    provides_probs = False
    needs_draft_model = False

    class Knobs(Spec):
        tokens: Integer = Field(3, ge=1)

    def reset(self, prompt):
        self.committed = prompt.clone()

    def propose(self, context, k, sampling, generator):
        # the guide's contract: reset(prompt) before the sequence, commit(context) after every verdict; what is
        # proposed on is what was last reset or committed (a broken promise fails the run)
        if not torch.equal(context, self.committed):
            raise RuntimeError("propose() got a context that is not the last reset/committed sequence")
        n = min(k, self.knobs.tokens)
        return Proposal(context[-1:].repeat(n), None, lookups=1)

    def commit(self, context):
        self.committed = context.clone()
'''

ROWS = '''"""A row format and a scorer of my own."""

from relaxbench.data.formats import FORMATS
from relaxbench.data.items import TaskItem
from relaxbench.scoring.base import Score, Scorer, register_scorer


@FORMATS.register("my-rows")
def my_rows(row, index):
    return TaskItem(str(row["qid"]), (str(row["question"]),), reference=str(row["answer"]), fields=dict(row))


@register_scorer
class Letters(Scorer):
    name = "letters"
    summary = "the share of the output's characters that are ASCII letters"

    def score(self, item, text, context):
        letters = sum(c.isascii() and c.isalpha() for c in text)
        return Score(letters / len(text) if text else 0.0, None, {"why": f"{letters} of {len(text)} characters"})
'''

# the package's pyproject.toml: one entry point per plug-in, in the guide's form
PYPROJECT = f'''[project]
name = "my-relaxbench-plugin"
version = "0"

[project.entry-points."relaxbench.policies"]
my-topk = "{PACKAGE}.my_topk:MyTopK"

[project.entry-points."relaxbench.drafters"]
repeat-last = "{PACKAGE}.repeat_last:RepeatLast"

[project.entry-points."relaxbench.formats"]
my-rows = "{PACKAGE}.rows:my_rows"

[project.entry-points."relaxbench.scorers"]
letters = "{PACKAGE}.rows:Letters"
'''


def write_package(root: Path) -> Path:
    """The user's package under ``root`` and its installed metadata (the entry points ``pip install`` writes from
    the pyproject.toml); ``root`` is what goes on PYTHONPATH."""
    package = root / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "my_topk.py").write_text(RULE_DOC + guide_rule())
    (package / "repeat_last.py").write_text(DRAFTER)
    (package / "rows.py").write_text(ROWS)
    (root / "pyproject.toml").write_text(PYPROJECT)
    project = tomllib.loads(PYPROJECT)["project"]
    info = root / "my_relaxbench_plugin-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items()) + "\n"
        for group, points in project["entry-points"].items()))
    return root


# -- the user's YAML files and data ---------------------------------------------------------------------------------
METHODS = {
    # step 3 of the rule tutorial: the rule and its knobs, and the knob grid of its trade-off curve
    "my-topk.yaml": "rule: my-topk\nknobs:\n  top: 3\ndrafter: model\n"
                    'description: "my lenient top-K (greedy only)"\n',
    "my-topk-sweep.yaml": f"extends: my-topk.yaml\nsweep:\n  top: [1, {VOCAB_SIZE}]\n"
                          'description: "my lenient top-K sweep: exact match, then every token"\n',
    # the drafter, under exact match
    "repeat-last.yaml": "rule: exact\ndrafter: {kind: repeat-last, tokens: 2}\n"
                        'description: "exact match over my repeat-last drafter"\n',
}
# a YAML over the new row format, with no source: its rows come from --data-file my-task=PATH
TASK = """description: "my questions, one per row"
format: my-rows
prompt: "Question: {{ question }}"
max_new_tokens: 8
scorer: letters
"""
QUESTIONS = [{"qid": "sum", "question": "What is 2 + 3?", "answer": "5"},
             {"qid": "colour", "question": "What colour is the sky?", "answer": "blue"}]
PROMPTS = [{"id": "hello", "prompt": "Say hello."}, {"id": "count", "prompt": "Count to three."}]
ARMS = ["ar", "my-topk", "my-topk-sweep[top=1]", f"my-topk-sweep[top={VOCAB_SIZE}]", "repeat-last"]
TASKS = ["jsonl", "my-task"]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@dataclass(frozen=True)
class Run:
    folder: Path
    db: Path
    stdout: str


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    """The folder on PYTHONPATH that holds the user's package, installed."""
    return write_package(tmp_path_factory.mktemp("site"))


def plugin_env(plugin: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def run(plugin, tmp_path_factory) -> Run:
    """One compare of the user's methods on the user's tasks, in a subprocess that sees the plug-ins only through
    their entry points."""
    root = tmp_path_factory.mktemp("extending")
    for name, text in METHODS.items():
        (root / name).write_text(text)
    (root / "my-task.yaml").write_text(TASK)
    questions, prompts = write_jsonl(root / "questions.jsonl", QUESTIONS), write_jsonl(root / "prompts.jsonl", PROMPTS)
    out = root / "run"
    result = run_cli("compare", *TINY, "--methods", ",".join(str(root / name) for name in METHODS),
                     "--tasks", f"jsonl,{root / 'my-task.yaml'}", "--data-file", f"jsonl={prompts}",
                     "--data-file", f"my-task={questions}", "--limit", "2", "--max-new-tokens", "8",
                     "--warmup", "0", "--report-format", "none", "--out", str(out),
                     env=plugin_env(plugin), timeout=300)
    assert result.returncode == 0, result.stderr
    return Run(out, out / "results.sqlite", result.stdout)


def cells(db: Path) -> dict[tuple[str, str], dict]:
    return {(c["task"], c["arm"]): dict(c) for c in rows(db, "SELECT * FROM cells")}


def table_lines(text: str, task: str) -> list[str]:
    """The body lines of the task's main table ("TASK: speed and capability per arm") as printed."""
    block = text.split(f"{task}: speed and capability", 1)[1].split("└", 1)[0]
    return [line for line in block.splitlines() if line.startswith("│ ")]


def table_arms(text: str, task: str) -> list[str]:
    """The arm column of the task's main table as printed."""
    return [arm for line in table_lines(text, task) if (arm := line.split("│")[1].strip())]


# -- a verification policy ------------------------------------------------------------------------------------------
def import_file(path: Path, name: str):
    """Import ``path`` as the module ``name`` (kept in sys.modules while it runs: registration reads its docstring)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def test_the_guides_rule_registers_decides_and_is_listed(tmp_path, capsys):
    import torch

    from relaxbench.cli import main
    from relaxbench.ops.sampling import SamplingParams
    from relaxbench.policies import POLICIES, Block, make_policy

    (tmp_path / "my_topk.py").write_text(RULE_DOC + guide_rule())
    try:
        module = import_file(tmp_path / "my_topk.py", "my_topk_in_process")
        assert POLICIES.get("my-topk") is module.MyTopK
        target = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 5.0]])  # draft 1 is the target's 2nd choice
        block = Block(torch.tensor([1]), target, None, SamplingParams(), None)
        decided = {top: make_policy("my-topk", {"top": top}).verify(block) for top in (1, 2)}
        assert (decided[1].n_accepted, decided[1].n_relaxed, decided[1].next_token) == (0, 0, 0)  # strict: exact
        assert (decided[2].n_accepted, decided[2].n_relaxed, decided[2].next_token) == (1, 1, 3)
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["list", "rules", "--markdown"]) == 0  # what `make generated` writes into policies.md
        listed = next(line for line in buffer.getvalue().splitlines() if line.startswith("| `my-topk` |"))
        assert listed.split(" | ")[1:5] == [
            "lenient top-K: accept iff the draft is among the target's K most likely tokens",
            "as reference: garipovroma/autojudge@8a4beb1 eval/generation_utils.py run_spec_dec_top_k", "`top` 2",
            "top = 1"]
        # its knobs are validated: an out-of-range --knob is refused in one line, before any model loads
        code = main(["generate", *TINY, "--rule", "my-topk", "--knob", "top=0", "--prompt", "hi"])
        refusal = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(refusal) == 1, refusal
        assert refusal[0].endswith("rule 'my-topk': knob 'top' must be >= 1, got 0"), refusal
    finally:
        POLICIES.remove("my-topk")


# each thing the guide says @register_policy checks, left out of the guide's class: (edit, words of the refusal)
MISSING = {
    "judge": (lambda code: code.split("    def judge", 1)[0], "define judge(batch) -> Judgement"),
    "origin": (lambda code: re.sub(r"    origin = Origin\(.*?\)\n", "", code, count=1, flags=re.S),
               "set origin = Origin("),
    "strict setting": (lambda code: code.replace('strict_knobs={"top": 1}, ', ""),
                       "a relaxed rule must name the knob setting at which it is strict"),
    "loosening": (lambda code: code.replace(', loosening={"top": (1, 2, 3, 5, 48)}', ""),
                  "a relaxed rule must say how its knobs loosen it"),
    "knobs those name": (lambda code: code.replace('strict_knobs={"top": 1}', 'strict_knobs={"k": 1}'),
                         "strict_knobs name unknown knobs ['k']"),
    "deviations": (lambda code: code, "must list its deviations from its reference under 'Deviations'"),
}


@pytest.mark.parametrize("missing", MISSING)
def test_register_policy_refuses_a_rule_missing_what_the_guide_requires_in_one_line(missing, tmp_path):
    from relaxbench.policies import POLICIES

    edit, words = MISSING[missing]
    code = edit(guide_rule())
    assert code != guide_rule() or missing == "deviations", "the edit no longer applies to the guide's class"
    doc = RULE_DOC.replace("Deviations: ", "Differences: ") if missing == "deviations" else RULE_DOC
    (tmp_path / "refused.py").write_text(doc + code)
    with pytest.raises(TypeError) as refused:
        import_file(tmp_path / "refused.py", "my_topk_refused")
    message = str(refused.value)
    assert "\n" not in message and words in message, message
    assert message.startswith("rule 'my-topk' "), message
    assert "my-topk" not in POLICIES


# step 2: the checks the registry generates for a rule, which hold an installed plug-in's rule as a built-in one
GENERATED = ("test_greedy_strict_end_equals_exact", "test_greedy_loosening_never_lowers_acceptance",
             "test_n_relaxed_counts_accepted_drafts_exact_would_reject_greedy",
             "test_a_decision_never_synchronises_and_its_operations_do_not_grow_with_the_batch")


@pytest.mark.slow
def test_the_generated_checks_hold_the_rule_with_no_test_written(plugin, tmp_path):
    """``make check-rule RULE=NAME`` is ``pytest -k NAME`` over tests/: here over the files that hold the
    generated checks the guide lists, with the user's package installed."""
    outer = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}  # not this session's
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-n", "0", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "basetemp"), "-k", "my-topk",
                           "tests/test_policies.py", "tests/test_batched_rules.py"],
                          cwd=ROOT, env={**outer, **plugin_env(plugin)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    passed = {line.split("::")[1].split("[")[0] for line in proc.stdout.splitlines()
              if line.startswith("PASSED ") and "[my-topk" in line}
    assert set(GENERATED) <= passed, (passed, proc.stdout[-3000:])


@pytest.mark.slow
def test_a_method_yaml_naming_the_rule_runs_through_compare(run):
    stored = cells(run.db)
    assert sorted(stored) == sorted((task, arm) for task in TASKS for arm in ARMS)
    for task in TASKS:
        assert table_arms(run.stdout, task) == ARMS  # every arm printed, in order
        for arm in ARMS[1:4]:
            assert stored[(task, arm)]["policy"] == "my-topk"
        assert json.loads(stored[(task, "my-topk")]["knobs_json"]) == {"top": 3}  # the method YAML's knob
        assert json.loads(stored[(task, f"my-topk-sweep[top={VOCAB_SIZE}]")]["knobs_json"]) == {"top": VOCAB_SIZE}

    samples = sample_rows(run.db)
    strict = {key: s for key, s in samples.items() if key[1] == "my-topk-sweep[top=1]"}
    loosest = {key: s for key, s in samples.items() if key[1] == f"my-topk-sweep[top={VOCAB_SIZE}]"}
    assert len(strict) == len(loosest) == 4  # 2 tasks x 2 items
    for (task, _, item, turn, repeat), s in strict.items():  # top = 1 is exact match: AR's output, nothing relaxed
        assert s.output_ids == samples[(task, "ar", item, turn, repeat)].output_ids
        assert s.n_relaxed == 0 and s.n_drafted > 0
    for s in loosest.values():  # every token is among the target's top V: every draft accepted
        assert s.n_drafted > 0 and s.n_accepted == s.n_drafted


# -- a drafter ------------------------------------------------------------------------------------------------------
def test_the_drafter_registers_and_is_listed(tmp_path):
    from relaxbench.cli import main
    from relaxbench.decoding.drafters import DRAFTERS

    (tmp_path / "repeat_last.py").write_text(DRAFTER)
    try:
        module = import_file(tmp_path / "repeat_last.py", "repeat_last_in_process")
        assert DRAFTERS.get("repeat-last") is module.RepeatLast
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["list", "drafters", "--markdown"]) == 0
        assert "| `repeat-last` | propose the context's last token again, up to `tokens` times |" in buffer.getvalue()
    finally:
        DRAFTERS.remove("repeat-last")


def test_a_registered_drafter_drafts_in_a_run(run):
    stored = cells(run.db)
    for task in TASKS:
        drafter = json.loads(stored[(task, "repeat-last")]["drafter_json"])
        assert drafter == {"kind": "repeat-last", "knobs": {"tokens": 2}}  # the method YAML's drafter and knob
    samples = sample_rows(run.db)
    mine = {key: s for key, s in samples.items() if key[1] == "repeat-last"}
    assert len(mine) == 4
    for (task, _, item, turn, repeat), s in mine.items():
        drafted, lookups = s.rounds.drafted, s.rounds.lookups
        assert s.n_drafted == sum(drafted) > 0 and max(drafted) == 2  # its knob bounds every round's drafts
        assert all(n == (1 if d else 0) for d, n in zip(drafted, lookups, strict=True))  # one lookup per proposal
        assert s.output_ids == samples[(task, "ar", item, turn, repeat)].output_ids  # exact match stays lossless


# -- a task ---------------------------------------------------------------------------------------------------------
def test_a_task_yaml_over_a_new_row_format_and_the_jsonl_task_run(run):
    samples = sample_rows(run.db)
    tokenizer = build_tokenizer()
    questions = {q["qid"]: q["question"] for q in QUESTIONS}
    for arm in ARMS:
        mine = {key[2]: s for key, s in samples.items() if key[:2] == ("my-task", arm)}
        assert sorted(mine) == sorted(questions)  # the row format's item ids
        for item, s in mine.items():
            assert f"Question: {questions[item]}" in tokenizer.decode(s.prompt_ids)  # the task's prompt template
            text = s.output_text  # the task's scorer, on the stored text
            letters = sum(c.isascii() and c.isalpha() for c in text)
            assert s.score == pytest.approx(letters / len(text) if text else 0.0)
            assert s.score_details["why"] == f"{letters} of {len(text)} characters"
        jsonl = {key[2]: s for key, s in samples.items() if key[:2] == ("jsonl", arm)}
        assert sorted(jsonl) == sorted(p["id"] for p in PROMPTS)
        for item, s in jsonl.items():
            assert next(p["prompt"] for p in PROMPTS if p["id"] == item) in tokenizer.decode(s.prompt_ids)
    stored = cells(run.db)
    assert {stored[("my-task", arm)]["scorer"] for arm in ARMS} == {"letters"}


# -- a metric -------------------------------------------------------------------------------------------------------
def drafts_per_round(samples) -> float | None:
    rounds = sum(s.n_rounds for s in samples)
    return sum(s.n_drafted for s in samples) / rounds if rounds else None


class Cells(HTMLParser):
    """data-metric → the data-value of every table cell of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, list[str | None]] = defaultdict(list)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "td" and "data-metric" in found:
            self.values[found["data-metric"]].append(found.get("data-value"))


def test_a_metric_record_with_compute_shows_in_the_tables_the_report_and_the_docs(run, tmp_path, monkeypatch):
    from relaxbench.analysis import schema
    from relaxbench.analysis.schema import Metric
    from relaxbench.cli import main
    from relaxbench.commands.listing import markdown

    definition = "drafted tokens / verification rounds, over the arm's paired samples"
    record = Metric("drafts per round", definition, "drafts_per_round", "drafts/round", "main", 75, spec=".3f",
                    unit="tokens per round", better="", compute=drafts_per_round)
    monkeypatch.setattr(schema, "METRICS", (*schema.METRICS, record))  # the one record the guide asks for
    # the figure from the stored samples: Σ drafted / Σ rounds per (task, arm) (every unit of the run is paired)
    expected = {(r["task"], r["arm"]): r["drafted"] / r["rounds"]
                for r in rows(run.db, "SELECT c.task, c.arm, sum(s.n_drafted) AS drafted, sum(s.n_rounds) AS rounds "
                                      "FROM samples s JOIN cells c USING (cell_id) GROUP BY c.task, c.arm")}
    assert expected[("jsonl", "ar")] == 0 and expected[("jsonl", "repeat-last")] > 0

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["summary", str(run.folder), "--wide"]) == 0
    terminal = buffer.getvalue()
    assert "drafts/round" in terminal
    for task in TASKS:
        for arm in ARMS:
            line = next(line for line in table_lines(terminal, task) if line.startswith(f"│ {arm} "))
            assert f" {expected[(task, arm)]:.3f} " in line, (task, arm, line)

    assert main(["report", str(run.folder), "--format", "html", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    cells_of = Cells()
    cells_of.feed(page)
    assert sorted(float(v) for v in cells_of.values["drafts_per_round"]) == pytest.approx(sorted(expected.values()))
    assert f"<dt>drafts per round</dt><dd>{definition}</dd>" in html.unescape(page)  # the report's definitions

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["list", "metrics"]) == 0
    assert "drafts per round" in buffer.getvalue() and definition in buffer.getvalue()
    row = next(line for line in markdown("metrics").splitlines() if line.startswith("| drafts per round |"))
    assert definition in row and "speed and capability: drafts/round" in row  # docs/metrics.md's table
