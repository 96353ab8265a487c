"""The last edges of bad input: each refused in one line with exit 2, before any weights load where the input
alone settles it, and readers that write nothing beside a store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from relaxbench.errors import DataError, ModelError
from tests.conftest import assert_one_line_error
from tests.test_reliability import compare, run_main

# ------------------------------------------------------------------------------ GGUF files


def _write_gguf(path: Path) -> int:
    """A small valid GGUF (two tensors, some metadata); its size."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_token_list(["a", "b", "c"])
    writer.add_tensor("token_embd.weight", np.ones((3, 64), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.stat().st_size


def test_a_whole_gguf_resolves(tmp_path: Path):
    from relaxbench.models.resolve import resolve_model

    path = tmp_path / "m.gguf"
    _write_gguf(path)
    assert resolve_model(str(path)).kind == "gguf"


@pytest.mark.parametrize("keep", [6, 40, "header", "data"])
def test_a_gguf_cut_short_is_refused_when_resolved(tmp_path: Path, keep):
    from relaxbench.models.resolve import resolve_model

    path = tmp_path / "m.gguf"
    size = _write_gguf(path)
    whole = path.read_bytes()
    cut = {"header": size - 3 * 64 * 4 - 64 * 4 - 40, "data": size - 100}.get(keep, keep)
    path.write_bytes(whole[:cut])
    with pytest.raises(ModelError, match="cut short") as info:
        resolve_model(str(path))
    assert "fetch or copy it again" in str(info.value)


def test_a_cut_gguf_target_is_one_line_before_anything_loads(capsys, tmp_path: Path):
    path = tmp_path / "m.gguf"
    size = _write_gguf(path)
    path.write_bytes(path.read_bytes()[: size // 2])
    result = run_main(capsys, "generate", "--target", str(path), "--policy", "none", "--prompt", "hi")
    assert_one_line_error(result, str(path), "cut short")


# ------------------------------------------------------------------------------ data files


def _rows(path: Path) -> list:
    from relaxbench.data.load import read_records

    return read_records(path)


@pytest.mark.parametrize("text", ['[{"prompt": "a"}, {"prompt": "b", "n": [1, 2, {"c": 3}]}]',
                                  ' \n[\n  {"prompt": "a"} ,\n{"prompt": "b", "n": [1, 2, {"c": 3}]}\n]\n'])
def test_a_json_list_is_read_element_by_element(tmp_path: Path, monkeypatch, text):
    import relaxbench.data.load as load

    monkeypatch.setattr(load, "_CHUNK", 5)  # elements and numbers split across reads
    path = tmp_path / "rows.json"
    path.write_text(text)
    assert _rows(path) == json.loads(text)


@pytest.mark.parametrize(("text", "fragment"), [
    ('[{"prompt": "a"},]', "rows.json:1: malformed JSON"),
    ('[{"prompt": "a"}', "the list is not closed"),
    ('[{"prompt": "a"}] [', "text after the list"),
    ('[{"prompt": "a"} {"prompt": "b"}]', "expected ',' or ']'"),
    ('[\n{"prompt": "a"},\n{"prompt": }\n]', "rows.json:3: malformed JSON"),
])
def test_a_malformed_json_list_names_its_line(tmp_path: Path, text, fragment):
    path = tmp_path / "rows.json"
    path.write_text(text)
    with pytest.raises(DataError) as info:
        _rows(path)
    assert fragment in str(info.value)


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".json.gz"])
def test_a_prompt_past_the_cap_is_refused_unread_in_every_format(capsys, tmp_path: Path, monkeypatch, suffix):
    """The cap (lowered for speed) holds for a JSON list's element as for a JSONL line, gzipped or not; the reader
    holds at most the cap plus one read, whatever the file's size."""
    import gzip

    import relaxbench.data.load as load

    monkeypatch.setattr(load, "MAX_LINE_CHARS", 1000)
    monkeypatch.setattr(load, "_CHUNK", 64)
    rows = [{"prompt": "ok"}, {"prompt": "x" * 50_000}]
    text = json.dumps(rows) if suffix == ".json" else "".join(json.dumps(r) + "\n" for r in rows)
    path = tmp_path / f"huge{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    reads: list[int] = []
    real_open = gzip.open if suffix.endswith(".gz") else open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

        def readline(self, n=-1):
            reads.append(n)
            return self.f.readline(n)

    if suffix == ".json":
        monkeypatch.setattr(load, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=path))
    assert_one_line_error(result, str(path), "longer than 1,000 characters")
    if suffix == ".json":
        assert reads and all(0 <= n <= 64 for n in reads)  # never a whole-file read
        assert sum(reads) < 3000  # stopped soon after the cap, not at the file's end


def test_a_named_pipe_as_a_data_file(capsys, tmp_path: Path):
    pipe = tmp_path / "rows.jsonl"
    os.mkfifo(pipe)
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=pipe))
    assert_one_line_error(result, str(pipe), "is a named pipe, not a data file")


def test_a_device_as_a_data_file(capsys, tmp_path: Path):
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=Path("/dev/zero")))
    assert_one_line_error(result, "/dev/zero", "is a device, not a data file")


# ------------------------------------------------------------------------------ settled before any weight loads


@pytest.fixture
def no_weights(monkeypatch):
    """Loading weights fails the test: what the tokenizer and config settle must be refused before."""
    import relaxbench.models.load as load

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(load, "load_model", refuse)


TINY_PAIR = ["--target", "tiny-random-target", "--draft", "tiny-random-draft"]


def test_generate_refuses_an_empty_prompt(capsys, no_weights):
    for prompt in ("", "  \n"):
        result = run_main(capsys, "generate", *TINY_PAIR, "--policy", "exact", "--prompt", prompt)
        assert_one_line_error(result, "--prompt is empty")


def test_generate_refuses_a_prompt_over_the_context_before_loading(capsys, no_weights):
    result = run_main(capsys, "generate", *TINY_PAIR, "--policy", "exact", "--prompt", "word " * 10_000)
    assert_one_line_error(result, "--prompt", "over the target's context of 4096")


def test_generate_refuses_a_budget_over_the_context_before_loading(capsys, no_weights):
    result = run_main(capsys, "generate", *TINY_PAIR, "--policy", "exact", "--prompt", "hi",
                      "--max-new-tokens", "1000000000")
    assert_one_line_error(result, "max_new_tokens (1000000000)", "over the target's context of 4096")


def test_compare_refuses_a_budget_over_the_context_before_loading(capsys, tmp_path: Path, no_weights):
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", "--max-new-tokens", "1000000000"))
    assert_one_line_error(result, "max_new_tokens (1000000000)", "over the target's context of 4096")
    assert not (tmp_path / "run" / "results.sqlite").exists()


@pytest.mark.slow
def test_a_vocabulary_mismatch_is_refused_before_loading(capsys, tmp_path: Path, no_weights):
    """The packaged SmolLM2 (its tokenizer and config only) against a tiny draft of another vocabulary."""
    result = run_main(capsys, "generate", "--target", "smollm2-135m-instruct", "--draft", "tiny-random-draft",
                      "--policy", "exact", "--prompt", "hi")
    assert_one_line_error(result, "do not share a tokenizer vocabulary")
    argv = compare(tmp_path / "run", "--draft", "tiny-random-draft")
    argv[argv.index("tiny-random-target")] = "smollm2-135m-instruct"
    result = run_main(capsys, *argv)
    assert_one_line_error(result, "do not share a tokenizer vocabulary")


def test_a_k_beyond_the_budget_is_cut_with_a_notice(capsys):
    result = run_main(capsys, "generate", *TINY_PAIR, "--dtype", "float64", "--draft-dtype", "float64",
                      "--policy", "exact", "--prompt", "hi", "-k", "1000", "--max-new-tokens", "6")
    assert result.returncode == 0, result.stderr
    assert "-k 1000: a budget of 6 new tokens uses at most 5 draft tokens per round; drafting 5" in result.stderr


def test_compare_says_when_k_is_beyond_a_tasks_budget(capsys, tmp_path: Path):
    result = run_main(capsys, *compare(tmp_path / "run", *TINY_PAIR[2:], "-k", "50"))
    assert result.returncode == 0, result.stderr
    assert "jsonl: k 50 is more than max_new_tokens 4 can use; rounds draft at most 3 tokens" in result.stderr
