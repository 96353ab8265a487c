"""Bad input, damaged files, concurrent writers and signals: one line on stderr, exit 2 (130/143 for signals), before
anything expensive, and nothing stored lost or rewritten. In-process CLI calls where a process is not the point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxbench.cli import main
from tests.conftest import CliResult, assert_one_line_error

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]


def run_main(capsys, *argv: str) -> CliResult:
    """The CLI in-process; a usage error (argparse exits) counts as its exit status."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def compare(out: Path, *extra: str, methods: str = "exact", data: Path = DATA) -> list[str]:
    return ["compare", "--target", "tiny-random-target", "--methods", methods, "--tasks", "jsonl",
            "--data-file", f"jsonl={data}", "--limit", "1", "--max-new-tokens", "4", "--report-format", "none",
            "--out", str(out), *extra]


# ------------------------------------------------------------------------------ settings, checked before loading

@pytest.mark.parametrize(("extra", "fragments"), [
    (["--temperature", "nan"], ("--temperature", "must be a number", "nan")),
    (["--temperature", "inf"], ("--temperature", "finite")),
    (["--top-p", "0"], ("--top-p", "must be > 0")),
    (["--limit", "0"], ("--limit", "must be >= 1, got 0")),
    (["--warmup", "-1"], ("--warmup", "must be >= 0, got -1")),
    (["--repeats", "0"], ("--repeats", "must be >= 1")),
    (["--max-new-tokens", "0"], ("--max-new-tokens", "must be >= 1")),
    (["-k", "0"], ("-k ", "must be >= 1")),
    (["--seed", "-3"], ("--seed", "must be >= 0")),
    (["--threads", "0"], ("--threads", "must be >= 1, got 0")),
    (["--budget", "nan"], ("--budget", "nan")),
    (["--report-format", "none", "--report-out", "somewhere"], ("--report-out", "--report-format none")),
])
def test_settings_are_refused_before_any_model_loads(capsys, tmp_path: Path, extra, fragments):
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", *extra))
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "run").exists()  # nothing was created: the refusal came before the store


def test_suite_file_settings_are_checked_by_name(capsys, tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("target: tiny-random-target\nmethods: [exact]\ntasks: [jsonl]\ntemperature: .nan\n")
    assert_one_line_error(run_main(capsys, "compare", "--suite", str(suite), "--out", str(tmp_path / "r")),
                          str(suite), "field 'temperature'", "must be a number")


@pytest.mark.parametrize(("knob", "fragments"), [
    ("theta=.nan", ("rule 'fly'", "knob 'theta'", "must be a number")),
    ("window=0", ("knob 'window'", "must be >= 1, got 0")),
])
def test_knobs_refuse_nan_and_out_of_range(knob, fragments):
    from relaxbench.errors import ConfigError
    from relaxbench.policies import make_policy
    from relaxbench.validation import parse_assignments

    with pytest.raises(ConfigError) as info:
        make_policy("fly", parse_assignments([knob], "--knob"))
    assert all(fragment in str(info.value) for fragment in fragments), str(info.value)


def test_inf_stays_a_valid_knob_value():
    from relaxbench.policies import make_policy

    assert make_policy("fly", {"theta": "inf"}).knobs.theta == float("inf")  # strict at theta = inf
    assert make_policy("typical", {"epsilon": "inf", "delta": "inf"}).knobs.delta == float("inf")


@pytest.mark.parametrize(("extra", "fragments"), [
    (["--methods", "fly", "--draft", "ngram"], ("'fly'", "'ngram+lm'", "--draft ngram is model-free",
                                                "pass --draft MODEL")),
    (["--methods", "fly"], ("'fly'", "no --draft was given")),
    (["--methods", "exact", "--draft", "tiny-random-draft", "--temperature", "0.7"],
     ("'exact'", "temperature 0.7", "does not support sampling")),
    (["--methods", "speculative-sampling", "--draft", "ngram", "--temperature", "1"],
     ("'speculative-sampling'", "needs draft-model probabilities", "'ngram'")),
])
def test_incompatible_arms_are_refused_before_loading(capsys, tmp_path: Path, extra, fragments):
    argv = [a for a in compare(tmp_path / "run") if a not in ("--methods", "exact")]
    assert_one_line_error(run_main(capsys, *argv, *extra), *fragments)
    assert not (tmp_path / "run").exists()


def test_generate_checks_the_arm_before_loading(capsys):
    result = run_main(capsys, "generate", "--target", "no-such-model-is-loaded", "--draft", "ngram",
                      "--method", "fly", "--prompt", "x")
    assert_one_line_error(result, "'fly'", "--draft ngram is model-free")


def test_prompt_and_max_new_tokens_beyond_the_context_are_refused(capsys, tmp_path: Path):
    """The tiny target's context is 4096 positions: a budget over it alone is refused from its config before torch;
    one that fits alone but not beside an item's prompt (85 tokens) and a verify block, once the tokenizer is loaded;
    both before the store."""
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", "--max-new-tokens", "5000"))
    assert_one_line_error(result, "--max-new-tokens", "max_new_tokens (5000)", "context of 4096",
                          "max_position_embeddings")
    result = run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", "--max-new-tokens", "4050"))
    assert_one_line_error(result, "item 'add'", "max_new_tokens (4050)", "context of 4096",
                          "max_position_embeddings")
    assert not (tmp_path / "run" / "results.sqlite").exists()


@pytest.mark.parametrize(("row", "fragment"), [
    ({"prompt": ""}, "'prompt' must be a non-empty string"),
    ({"prompt": ["hi", "  "]}, "'prompt' must be a non-empty string"),
    ({"prompt": "hi", "test": 42}, "'test' must be a string, got int"),
])
def test_malformed_rows_are_refused(capsys, tmp_path: Path, row, fragment):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(row) + "\n")
    assert_one_line_error(run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=data)), fragment)


def test_a_huge_line_is_refused_unread(capsys, tmp_path: Path, monkeypatch):
    """A line past the cap is refused with its line number, without holding it (the cap lowered for speed)."""
    import relaxbench.data.load as load

    monkeypatch.setattr(load, "MAX_LINE_CHARS", 1000)
    data = tmp_path / "huge.jsonl"
    data.write_text(json.dumps({"prompt": "ok"}) + "\n" + json.dumps({"prompt": "x" * 5000}) + "\n")
    assert_one_line_error(run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=data)),
                          f"{data}:2", "longer than")


def test_data_file_naming_a_folder(capsys, tmp_path: Path):
    assert_one_line_error(run_main(capsys, *compare(tmp_path / "run", "--draft", "ngram", data=tmp_path)),
                          str(tmp_path), "is a folder, not a data file")


# ------------------------------------------------------------------------------ files, devices, stores

@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A folder nothing can be written in, for root too: a read-only tmpfs where mounting is allowed (root),
    else permissions (a normal user)."""
    import os
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", str(folder)],
                          capture_output=True).returncode != 0:
            pytest.skip("running as root where mount is refused: no way to make a read-only folder")
        yield folder
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


def test_unknown_device_is_one_line(capsys, tmp_path: Path):
    assert_one_line_error(run_main(capsys, *compare(tmp_path / "r", "--draft", "ngram", "--device", "gpu0")),
                          "--device 'gpu0'", "cpu, cuda")
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device, fragment = (("cuda", "torch sees no CUDA device") if count == 0 else
                        (f"cuda:{count}", f"has {count} CUDA device"))
    assert_one_line_error(run_main(capsys, *compare(tmp_path / "r", "--draft", "ngram", "--device", device)),
                          f"--device {device}", fragment)
    assert not (tmp_path / "r").exists()


def test_out_naming_a_file(capsys, tmp_path: Path):
    out = tmp_path / "file"
    out.write_text("not a folder")
    assert_one_line_error(run_main(capsys, *compare(out, "--draft", "ngram")), str(out), "is a file, not a folder")
    assert out.read_text() == "not a folder"


def test_read_only_out_and_report_out(capsys, read_only_folder: Path):
    assert_one_line_error(run_main(capsys, *compare(read_only_folder / "run", "--draft", "ngram")),
                          str(read_only_folder), "read-only", "--out")
    argv = [a if a != "none" else "html" for a in compare(read_only_folder.parent / "run2", "--draft", "ngram")]
    assert_one_line_error(run_main(capsys, *argv, "--report-out", str(read_only_folder / "rep")),
                          str(read_only_folder), "read-only", "--report-out")


def test_a_gguf_name_that_is_not_gguf(capsys, tmp_path: Path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip, not a model")
    result = run_main(capsys, "generate", "--target", str(fake), "--rule", "none", "--prompt", "x")
    assert_one_line_error(result, str(fake), "not a GGUF file")


def fresh_store(folder: Path) -> Path:
    """A real store written by a real (tiny) run: the fixture every damaged-store case starts from."""
    from relaxbench.harness.store import STORE_NAME

    assert main(compare(folder, "--draft", "ngram")) == 0
    return folder / STORE_NAME


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    return fresh_store(tmp_path_factory.mktemp("stored"))


def files_of(db: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name) and
            not p.name.endswith("-shm")}


def copy_store(db: Path, folder: Path) -> Path:
    import shutil

    folder.mkdir()
    for p in db.parent.iterdir():
        if p.name.startswith(db.name):
            shutil.copy(p, folder / p.name)
    return folder / db.name


def test_a_store_with_zeroed_pages_is_reported_damaged_and_kept(capsys, stored: Path, tmp_path: Path):
    db = copy_store(stored, tmp_path / "z")
    import sqlite3

    with sqlite3.connect(db) as conn:  # everything into the main file, so the damage is where SQLite reads
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page:4 * page] = bytes(2 * page)
    db.write_bytes(bytes(data))
    before = files_of(db)
    for argv in (["summary", str(db.parent)], ["report", str(db.parent), "--out", str(tmp_path / "rep")],
                 compare(db.parent, "--draft", "ngram")):
        assert_one_line_error(run_main(capsys, *argv), str(db), "damaged")
        assert files_of(db) == before


@pytest.mark.parametrize("state", ["empty", "cut-wal"])
def test_read_only_commands_never_write(capsys, tmp_path: Path, state):
    """summary and report on a 0-byte store, or on one whose WAL a kill cut, leave every byte as it was."""
    folder = tmp_path / "s"
    folder.mkdir()
    db = folder / "results.sqlite"
    if state == "empty":
        db.write_bytes(b"")
    else:
        import sqlite3

        conn = sqlite3.connect(db)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        with conn:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        wal = folder / "results.sqlite-wal"
        snapshot = wal.read_bytes()
        conn.close()  # (checkpoints and removes the WAL: put the cut copy back, as a kill leaves it)
        db.write_bytes(db.read_bytes()[:4096] if db.stat().st_size else b"")
        wal.write_bytes(snapshot[:40])
    before = files_of(db)
    for argv in (["summary", str(folder)], ["report", str(folder), "--out", str(tmp_path / "rep")]):
        result = run_main(capsys, *argv)
        assert_one_line_error(result, str(db))
        assert files_of(db) == before, argv
    if state == "cut-wal":
        assert_one_line_error(run_main(capsys, *compare(folder, "--draft", "ngram")), str(db), "damaged")
        assert files_of(db) == before


def test_a_read_only_store_is_called_read_only(capsys, stored: Path, read_only_folder: Path):
    import os
    import subprocess

    if os.geteuid() == 0:  # the read-only tmpfs is mounted empty: remount it writable, copy, then read-only again
        subprocess.run(["mount", "-o", "remount,rw", str(read_only_folder)], check=True)
    else:
        read_only_folder.chmod(0o755)
    import shutil

    for p in stored.parent.iterdir():
        if p.name.startswith(stored.name):
            shutil.copy(p, read_only_folder / p.name)
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(read_only_folder)], check=True)
    else:
        read_only_folder.chmod(0o555)
        for p in read_only_folder.iterdir():
            p.chmod(0o444)
    result = run_main(capsys, *compare(read_only_folder, "--draft", "ngram"))
    assert_one_line_error(result, "read-only")
    assert "not a relaxbench results store" not in result.stderr
    assert run_main(capsys, "summary", str(read_only_folder)).returncode == 0  # reading needs no write


@pytest.mark.parametrize("cut", [20, 5000])
def test_a_wal_cut_by_a_kill_is_never_reset(capsys, tmp_path: Path, cut):
    """The store's data lives in its WAL (nothing checkpointed yet) and a kill cut the WAL: every command refuses,
    and the main file and the WAL keep every byte (a writer's open and close would have reset the WAL)."""
    import shutil

    from relaxbench.harness.store import Store

    live = Store(tmp_path / "live" / "results.sqlite")
    live.conn.execute("PRAGMA wal_autocheckpoint=0")
    for i in range(20):
        with live.transaction() as conn:
            conn.execute("INSERT INTO meta VALUES (?, ?)", (f"k{i}", "v" * 500))
    folder = tmp_path / "killed"
    folder.mkdir()
    shutil.copy(live.path, folder / "results.sqlite")  # copied while open: as a kill leaves the files
    (folder / "results.sqlite-wal").write_bytes((live.path.parent / "results.sqlite-wal").read_bytes()[:cut])
    live.close()
    db = folder / "results.sqlite"
    before = files_of(db)
    for argv in (["summary", str(folder)], compare(folder, "--draft", "ngram")):
        assert_one_line_error(run_main(capsys, *argv), str(db), "damaged", "WAL")
        assert files_of(db) == before


# ------------------------------------------------------------------------------ one writer, signals

HOLD_LOCK = """
import sys, time
from relaxbench.sqlite_file import WriterLock
lock = WriterLock(sys.argv[1], "relaxbench compare (the first one)").acquire()
print("locked", flush=True)
time.sleep(120)  # bounded: the test kills it long before
"""


def test_a_second_writer_is_refused_at_once_and_a_killed_one_leaves_no_lock(capsys, tmp_path: Path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out / "results.sqlite")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        result = run_main(capsys, *compare(out, "--draft", "ngram"))
        assert time.monotonic() - start < 30  # at once: before any model loads
        assert_one_line_error(result, "already being written by", f"pid {holder.pid}", "since",
                              "relaxbench compare (the first one)")
        assert not (out / "results.sqlite").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert main(compare(out, "--draft", "ngram")) == 0  # the OS released the dead holder's lock
    capsys.readouterr()


@pytest.mark.slow
def test_sigterm_marks_the_session_interrupted_and_keeps_samples(tmp_path: Path):
    """SIGTERM (timeout, schedulers, Ray) stops a run as SIGINT does: one line, exit 143, session 'interrupted',
    finished samples kept; the rerun finishes the rest. Bounded: the run is killed if it outlives the test."""
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from tests.store_query import rows

    out = tmp_path / "run"
    db = out / "results.sqlite"
    argv = ["compare", *TINY, "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}",
            "--max-new-tokens", "12", "--repeats", "3", "--report-format", "none", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "relaxbench", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        count = 0
        while time.time() < deadline and proc.poll() is None and count < 3:
            if db.exists():
                try:
                    count = rows(db, "SELECT count(*) AS n FROM samples")[0]["n"]
                except sqlite3.OperationalError:
                    count = 0
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        stderr = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if "relaxbench:" in line] == [
        "relaxbench: terminated by SIGTERM (finished samples are kept; rerun to resume)"]
    [session] = rows(db, "SELECT * FROM environment")
    assert session["status"] == "interrupted"
    kept = rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")
    assert len(kept) >= 3
    assert main(argv) == 0
    assert rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")[:len(kept)] == kept


def test_a_task_that_truncates_keeps_the_last_tokens_and_others_refuse():
    """fit_prompt: with the task's truncate_prompt a prompt too long for the context keeps its last tokens (the
    room the context leaves beside max_new_tokens and k + 1); without it the sample is refused naming the item."""
    from types import SimpleNamespace

    from relaxbench.data import TaskItem
    from relaxbench.errors import ConfigError
    from relaxbench.harness.runner import fit_prompt

    target = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4096)))
    item = TaskItem("long", ("x",))
    prompt = list(range(85))

    def job(truncates: bool):
        return SimpleNamespace(name="t", source=SimpleNamespace(truncates_prompts=truncates), max_new_tokens=4050,
                               arms=(SimpleNamespace(k=0), SimpleNamespace(k=5)))

    assert fit_prompt(job(True), target, item, 0, prompt) == prompt[-(4096 - 4050 - 6):]
    assert fit_prompt(job(True), target, item, 0, prompt[:10]) == prompt[:10]  # fits: unchanged
    with pytest.raises(ConfigError, match="item 'long' turn 1: .* over the target's context of 4096"):
        fit_prompt(job(False), target, item, 0, prompt)


def test_truncate_prompt_is_a_task_field_left_out_of_the_record_when_unset():
    from relaxbench.tasks.spec import TaskSpec
    from relaxbench.validation import validate

    plain = validate(TaskSpec, {"name": "t", "format": "jsonl", "scorer": "auto"}, "t.yaml")
    assert "truncate_prompt" not in plain.to_record()  # old runs keep their keys
    cut = validate(TaskSpec, {"name": "t", "format": "jsonl", "scorer": "auto", "truncate_prompt": True}, "t.yaml")
    assert cut.to_record()["truncate_prompt"] is True


def test_a_lock_that_wrote_no_store_leaves_nothing_and_one_beside_a_store_stays(tmp_path: Path):
    from relaxbench.sqlite_file import WriterLock

    out = tmp_path / "a" / "b"
    with WriterLock(out / "results.sqlite", "test"):
        assert (out / "results.sqlite.lock").exists()
    assert not (tmp_path / "a").exists()  # every folder the lock made is gone with it
    kept = tmp_path / "kept"
    kept.mkdir()
    with WriterLock(kept / "results.sqlite", "test"):
        pass
    assert kept.is_dir() and not any(kept.iterdir())  # a folder the user made stays
    with WriterLock(kept / "results.sqlite", "test"):
        (kept / "results.sqlite").write_bytes(b"")
    assert (kept / "results.sqlite.lock").exists()  # beside a store the file stays

