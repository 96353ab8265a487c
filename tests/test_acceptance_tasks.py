"""Spec-Bench and SPEED-Bench's qualitative split: their row formats (fixtures in the published formats), their
categories as item categories, multi-turn rows as conversations, SPEED-Bench's withheld rows, the pinned URL source,
and the categories stored per sample by a run."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest

from relaxbench.cli import main
from relaxbench.data.url import url_file
from relaxbench.errors import ConfigError, DataError
from relaxbench.tasks import load_task
from relaxbench.tasks.spec import task_from_dict
from relaxbench.tasks.yaml_tasks import YamlTask, interleaved, load_items, read_items
from tests.store_query import rows

DATA = Path(__file__).parent / "data"
SPEC_BENCH = DATA / "spec_bench_questions.jsonl"  # the format of hemingkx/Spec-Bench data/spec_bench/question.jsonl
SPEED_BENCH = DATA / "speed_bench_qualitative.jsonl"  # the format of nvidia/SPEED-Bench, qualitative, test
SUBTASKS = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]


def test_spec_bench_items_carry_their_subtask_and_interleave():
    items, digest = load_items(load_task("spec-bench"), SPEC_BENCH)
    raw = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines()]
    assert len(items) == len(raw) and sorted(i.item_id for i in items) == sorted(str(r["question_id"]) for r in raw)
    # MT-Bench's categories read as Spec-Bench's one subtask; the row's own category stays in the fields
    by_id = {i.item_id: i for i in items}
    assert by_id["111"].category == "mt_bench" and by_id["111"].fields["category"] == "math"
    assert by_id["161"].category == "translation" and by_id["161"].fields["reference"][0].startswith("The harbour")
    assert Counter(i.category for i in items) == {"mt_bench": 3, "translation": 2, "summarization": 2, "qa": 2,
                                                  "math_reasoning": 2, "rag": 2}
    # round-robin over the subtasks in the order they first appear: --limit 6 runs one of each
    assert [i.category for i in items[:6]] == SUBTASKS
    first, _ = load_items(load_task("spec-bench"), SPEC_BENCH, limit=6)
    assert [i.category for i in first] == SUBTASKS and [i.item_id for i in first] == [i.item_id for i in items[:6]]
    assert load_items(load_task("spec-bench"), SPEC_BENCH, limit=6)[1] == digest  # the whole file's fingerprint
    # two-turn MT-Bench questions are two-turn items; the others one turn
    assert {i.item_id: len(i.turns) for i in items if len(i.turns) > 1} == {"81": 2, "111": 2, "121": 2}


def test_interleaving_keeps_each_category_in_order():
    from relaxbench.data import TaskItem

    items = [TaskItem(f"{c}{n}", ("q",), category=c) for c, n in
             [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("c", 2)]]
    assert [i.item_id for i in interleaved(items)] == ["a1", "b1", "c1", "a2", "c2", "a3"]


def test_speed_bench_withholds_placeholder_rows_and_says_so():
    loaded = read_items(load_task("speed-bench"), SPEED_BENCH)
    raw = [json.loads(line) for line in SPEED_BENCH.read_text().splitlines()]
    placeholders = [r for r in raw if any(t.startswith("FULL BENCHMARK DATA") for t in r["turns"])]
    assert len(placeholders) == 4 and loaded.rows == len(raw) == 10
    assert loaded.withheld == 4 and len(loaded.items) == 6
    assert not {i.item_id for i in loaded.items} & {r["question_id"] for r in placeholders}
    assert not any("SPECDEC_BENCH" in t for i in loaded.items for t in i.turns)
    note = loaded.note("speed-bench")
    assert note is not None and note.startswith("speed-bench: 4 of 10 rows hold no prompt")
    assert "prepare_data.py" in note and "--data-file speed-bench=PATH" in note
    assert note.endswith("6 items run; no item left in qa")  # every qa row is withheld
    # the categories are the rows' own, round-robin in first-appearance order
    assert [i.category for i in loaded.items] == ["coding", "multilingual", "roleplay", "summarization", "coding",
                                                  "multilingual"]
    roleplay = next(i for i in loaded.items if i.category == "roleplay")
    assert len(roleplay.turns) == 3 and roleplay.fields["multiturn"] is True
    assert roleplay.fields["sub_category"] == "character"
    # under a limit every row is still read (to interleave), so the count is the data set's
    limited = read_items(load_task("speed-bench"), SPEED_BENCH, limit=2)
    assert limited.withheld == 4 and [i.category for i in limited.items] == ["coding", "multilingual"]


def test_speed_bench_all_placeholders_and_bad_rows_are_one_line_errors(tmp_path: Path):
    raw = [json.loads(line) for line in SPEED_BENCH.read_text().splitlines()]
    only = tmp_path / "placeholders.jsonl"
    only.write_text("".join(json.dumps(r) + "\n" for r in raw if "SPECDEC_BENCH" in r["turns"][0]))
    with pytest.raises(DataError, match="no row holds a prompt: the published split withholds their text"):
        load_items(load_task("speed-bench"), only)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**raw[0], "turns": []}) + "\n")
    with pytest.raises(DataError, match="'turns' must be a non-empty list of non-empty strings"):
        load_items(load_task("speed-bench"), bad)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"question_id": "x", "turns": ["hi"]}) + "\n")
    with pytest.raises(DataError, match="row 1 has no field 'category'"):
        load_items(load_task("spec-bench"), missing)


class _Recorder:
    """A tokenizer with a chat template that records the conversation it is asked to render."""

    chat_template = "recorded"

    def __init__(self) -> None:
        self.conversations: list[list[dict[str, str]]] = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kwargs):
        self.conversations.append([dict(m) for m in messages])
        return "|".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(range(len(text.split("|"))))}


class _Target:
    def __init__(self) -> None:
        self.tokenizer = _Recorder()


def test_multi_turn_rows_run_as_conversations_with_the_arms_own_answers():
    loaded = read_items(load_task("speed-bench"), SPEED_BENCH)
    task = YamlTask(load_task("speed-bench"), loaded.items, loaded.fingerprint)
    roleplay = next(i for i in loaded.items if len(i.turns) == 3)
    target = _Target()
    task.encode(target, roleplay, 2, ["first answer", "second answer"], 16)
    [conversation] = target.tokenizer.conversations
    assert [m["role"] for m in conversation] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in conversation] == [roleplay.turns[0], "first answer", roleplay.turns[1],
                                                   "second answer", roleplay.turns[2]]
    spec_items, _ = load_items(load_task("spec-bench"), SPEC_BENCH)
    math = next(i for i in spec_items if i.item_id == "111")
    target = _Target()
    YamlTask(load_task("spec-bench"), spec_items, "-").encode(target, math, 1, ["Area 9."], 16)
    assert [m["content"] for m in target.tokenizer.conversations[0]] == [math.turns[0], "Area 9.", math.turns[1]]


def test_both_tasks_score_fidelity_to_ar_and_record_their_source():
    for name in ("spec-bench", "speed-bench"):
        spec = load_task(name)
        assert spec.scorer == "agreement" and spec.interleave_categories
        assert spec.to_record()["interleave_categories"] is True
    # with a grader, Spec-Bench's MT-Bench questions are graded (tests/test_spec_bench_grading.py); SPEED-Bench's none
    assert load_task("spec-bench").grader == "llm-grader" and load_task("speed-bench").grader is None
    assert "grader" not in load_task("spec-bench").to_record()  # not part of the run's identity
    assert load_task("speed-bench").source.model_dump(include={"kind", "path", "name", "split"}) == {
        "kind": "hub", "path": "nvidia/SPEED-Bench", "name": "qualitative", "split": "test"}
    source = load_task("spec-bench").source
    assert source.kind == "url" and "hemingkx/Spec-Bench/" in source.url
    assert source.url.endswith("/data/spec_bench/question.jsonl") and len(source.sha256) == 64
    # a task that does not interleave keeps its stored record (and an old run its key)
    assert "interleave_categories" not in load_task("mt-bench").to_record()
    assert {"url", "sha256"}.isdisjoint(load_task("gsm8k").to_record()["source"])


def test_a_url_source_needs_its_sha256():
    base = {"format": "spec-bench", "scorer": "agreement"}
    with pytest.raises(ConfigError, match="a url source needs 'url'"):
        task_from_dict({**base, "source": {"kind": "url", "url": "https://example.org/q.jsonl"}}, "t.yaml", "t")
    with pytest.raises(ConfigError, match="a url source needs 'url'"):
        task_from_dict({**base, "source": {"kind": "url", "url": "ftp://x/q.jsonl", "sha256": "0" * 64}}, "t.yaml", "t")


class _Files(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 (the handler's interface)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_url_file_is_fetched_once_and_checked(server, tmp_path: Path):
    body = SPEC_BENCH.read_bytes()
    _Files.body = body
    url = f"http://127.0.0.1:{server.server_port}/data/spec_bench/question.jsonl"
    good = hashlib.sha256(body).hexdigest()
    path = url_file(url, good, tmp_path)
    assert path.read_bytes() == body and path.name == "question.jsonl"
    _Files.body = b"changed"
    assert url_file(url, good, tmp_path).read_bytes() == body  # cached: not fetched again
    path.write_bytes(b"edited")  # a cached copy that no longer matches the pin is fetched again (and checked)
    _Files.body = body
    assert url_file(url, good, tmp_path).read_bytes() == body
    with pytest.raises(DataError, match="is not the pinned"):
        url_file(url, "1" * 64, tmp_path)
    assert not (tmp_path / ("1" * 16)).exists() or not any((tmp_path / ("1" * 16)).iterdir())


def test_an_unreachable_url_fails_in_one_line(tmp_path: Path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError, match="127.0.0.1 is unreachable"):
        url_file(f"http://127.0.0.1:{port}/q.jsonl", "0" * 64, tmp_path)


TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]


def test_a_run_stores_each_samples_category_and_every_turn(tmp_path: Path, capsys):
    out = tmp_path / "run"
    code = main(["compare", *TINY, "--methods", "exact", "--tasks", "speed-bench,spec-bench",
                 "--data-file", f"speed-bench={SPEED_BENCH}", "--data-file", f"spec-bench={SPEC_BENCH}",
                 "--task-limit", "speed-bench=3", "--task-limit", "spec-bench=6", "--max-new-tokens", "3",
                 "--out", str(out), "--report-format", "none"])
    assert code == 0
    assert "speed-bench: 4 of 10 rows hold no prompt" in capsys.readouterr().err
    stored = rows(out / "results.sqlite", "SELECT c.task, c.arm, s.item_id, s.turn, s.category FROM samples s "
                                          "JOIN cells c USING (cell_id)")
    loaded = {name: {i.item_id: i for i in read_items(load_task(name), path).items}
              for name, path in (("speed-bench", SPEED_BENCH), ("spec-bench", SPEC_BENCH))}
    for row in stored:
        assert row["category"] == loaded[row["task"]][row["item_id"]].category
    speed = {(r["item_id"], r["turn"]) for r in stored if r["task"] == "speed-bench" and r["arm"] == "ar"}
    roleplay = next(i for i in loaded["speed-bench"].values() if i.category == "roleplay")
    assert {(roleplay.item_id, t) for t in range(3)} <= speed  # the three-turn conversation, every turn stored
    assert {r["category"] for r in stored if r["task"] == "spec-bench"} == set(SUBTASKS)
    assert {r["category"] for r in stored if r["task"] == "speed-bench"} == {"coding", "multilingual", "roleplay"}
