"""``relaxbench compare`` end to end on the tiny random models: the store's contents, resumption after SIGKILL,
and bad input (one line, exit 2, nothing stored lost)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from relaxbench.cli import main
from tests.conftest import assert_one_line_error
from tests.store_query import kill_after_samples, rows, sample_rows

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]


def compare_args(out: Path, *extra: str) -> list[str]:
    return ["compare", *TINY, "--methods", "exact,speculative-sampling", "--tasks", "jsonl,humaneval",
            "--data-file", f"jsonl={DATA}", "--limit", "3", "--max-new-tokens", "12", "--out", str(out),
            "--report-format", "none", *extra]  # the report after compare is tested in test_report.py


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("e2e")
    proc = subprocess.run([sys.executable, "-m", "relaxbench", *compare_args(out)], capture_output=True, text=True,
                          timeout=600)
    return out, proc


@pytest.mark.slow
def test_compare_end_to_end(e2e_run):
    out, proc = e2e_run
    assert proc.returncode == 0, proc.stderr
    db = out / "results.sqlite"
    cells = rows(db, "SELECT * FROM cells ORDER BY task, position")
    assert [(c["task"], c["arm"]) for c in cells] == [
        (task, arm) for task in ("humaneval", "jsonl") for arm in ("ar", "exact", "speculative-sampling")]
    assert all(json.loads(c["method_json"])["policy"] == c["policy"] for c in cells)
    by_key = sample_rows(db)
    # 3 single-turn jsonl items and 3 HumanEval problems, 3 arms each
    assert len(by_key) == 3 * 3 * 2
    for (task, arm, item, turn, repeat), s in by_key.items():
        assert sum(s.rounds.emitted) == s.n_output_tokens == len(s.output_ids) == s.counters.emitted
        assert len(s.rounds.emitted) == s.n_rounds and s.time_total > 0
        if arm == "ar":
            assert s.n_drafted == 0 and s.matches_baseline is None
            continue
        ar = by_key[(task, "ar", item, turn, repeat)]
        # lossless arms reproduce AR exactly, checked from the stored ids
        assert s.output_ids == ar.output_ids, (task, arm, item)
        assert s.output_text == ar.output_text and s.matches_baseline is True
        assert s.score == ar.score
        assert s.n_drafted > 0
    humaneval = [s for key, s in by_key.items() if key[0] == "humaneval"]
    assert {s.item_id for s in humaneval} == {"HumanEval/0", "HumanEval/1", "HumanEval/2"}
    assert all(s.score_details["status"] for s in humaneval)
    env = rows(db, "SELECT * FROM environment")
    assert len(env) == 1 and env[0]["status"] == "finished" and env[0]["target_dtype"] == "float64"
    assert env[0]["device"] == "cpu" and env[0]["torch"] and env[0]["command"].startswith("relaxbench compare")
    # one cost profile of the machine for the session, shared by every arm and task (no per-arm calibration)
    assert not rows(db, "SELECT name FROM sqlite_master WHERE name = 'calibrations'")
    [machine] = rows(db, "SELECT * FROM machine_profiles")
    profile = json.loads(machine["profile_json"])
    assert machine["session_id"] == env[0]["session_id"] and profile["name"] == "this-machine"
    assert profile["target"]["model"] == "tiny-random-target" and profile["draft"]["model"] == "tiny-random-draft"
    assert 5 + 1 in profile["target"]["forward"]["new_tokens"]  # the arms' verify block, k = 5
    assert all(v > 0 for row in profile["target"]["forward"]["seconds"] for v in row)
    # every round's work is recorded: no extra verify tokens for these rules, the draft model's forward sizes
    for (task, arm, *_), s in by_key.items():
        assert len(s.rounds.extra) == len(s.rounds.lookups) == len(s.rounds.draft_forwards) == s.n_rounds
        assert set(s.rounds.extra) <= {0} and set(s.rounds.lookups) <= {0}
        assert all(len(f) == d for f, d in zip(s.rounds.draft_forwards, s.rounds.drafted))  # one forward per draft
    for fragment in ("MAL", "speed-up", "Δ vs AR", "humaneval", "jsonl", "exact", "speculative-sampling"):
        assert fragment in proc.stdout


def test_a_run_in_a_log_prints_a_line_per_finished_sample(e2e_run):
    """stderr is a pipe here (no terminal, no bars): every finished sample of every cell is one line with its
    cell's count, the run's count, the elapsed time and the ETA; the tables on stdout fit 120 columns."""
    out, proc = e2e_run
    assert proc.returncode == 0, proc.stderr
    line = re.compile(r"^(\S+) / (.+?): (\d+)/(\d+); all cells (\d+)/(\d+), elapsed \d+:\d\d:\d\d, eta "
                      r"(\d+:\d\d:\d\d)$")
    found = [m for m in map(line.match, proc.stderr.splitlines()) if m]
    samples = [m for m in found if m[1] != "this-machine"]  # the machine's cost profile is measured first
    assert len(samples) == 3 * 3 * 2  # 3 units × 3 arms × 2 tasks, one line each
    per_cell: dict[tuple[str, str], list[int]] = {}
    for m in samples:
        per_cell.setdefault((m[1], m[2]), []).append(int(m[3]))
        assert int(m[4]) == 3
    assert per_cell == {(task, arm): [1, 2, 3] for task in ("humaneval", "jsonl")
                        for arm in ("ar", "exact", "speculative-sampling")}
    overall = [int(m[5]) for m in found]
    assert overall == list(range(1, len(found) + 1)) and {int(m[6]) for m in found} == {len(found)}
    assert found[-1][7] == "0:00:00"
    assert max(len(text) for text in proc.stdout.splitlines()) <= 120


def test_rerun_skips_finished_samples_and_summary_reads_the_store(e2e_run, capsys):
    out, _ = e2e_run
    db = out / "results.sqlite"
    before = rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")
    assert main(compare_args(out)) == 0  # in-process: the same code path, without a second interpreter start
    assert rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id") == before
    sessions = rows(db, "SELECT * FROM environment ORDER BY session_id")
    assert len(sessions) == 2 and sessions[1]["n_started"] == 0 and sessions[1]["status"] == "finished"
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    assert "speed-up" in capsys.readouterr().out


def record_set(db: Path) -> dict:
    """Everything about the samples that does not depend on timing or on when they were made."""
    keep = ("output_ids", "output_text", "stop_reason", "n_rounds", "n_drafted", "n_accepted", "n_relaxed",
            "accepted", "drafted", "score", "passed", "matches_baseline", "prompt_ids")
    return {(s["task"], s["arm"], s["item_id"], s["turn"], s["repeat"]): tuple(s[k] for k in keep)
            for s in rows(db, "SELECT s.*, c.task, c.arm, json_extract(s.rounds, '$.accepted') AS accepted, "
                              "json_extract(s.rounds, '$.drafted') AS drafted "
                              "FROM samples s JOIN cells c USING (cell_id)")}


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path: Path):
    args = ["compare", *TINY, "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}",
            "--max-new-tokens", "12", "--repeats", "2", "--report-format", "none"]
    total = 5 * 2 * 2  # 5 (item, turn) units, 2 arms, 2 repeats
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    db = killed / "results.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "relaxbench", *args, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_after_samples(db, proc, 4, 300)
    after_kill = rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")
    assert 4 <= len(after_kill) < total
    first = rows(db, "SELECT * FROM environment")[0]
    assert first["status"] == "running"  # it never got to say otherwise
    # every started generation but the one in flight was committed
    assert first["n_started"] - len(after_kill) <= 1

    # the rerun and the reference run go in-process (the kill needed a real process; these do not)
    assert main([*args, "--out", str(killed)]) == 0
    second = rows(db, "SELECT * FROM environment ORDER BY session_id")[1]
    assert second["n_started"] == total - len(after_kill)  # nothing finished was redone
    kept = rows(db, "SELECT sample_id, created_at FROM samples WHERE session_id=? ORDER BY sample_id",
                (first["session_id"],))
    assert kept == after_kill

    assert main([*args, "--out", str(clean)]) == 0
    assert len(record_set(db)) == total
    assert record_set(db) == record_set(clean / "results.sqlite")


# ------------------------------------------------------------------------------------------------ bad input


def run_main(capsys, *argv: str):
    """The CLI in-process (saves a torch import per case); the subprocess path is covered above."""
    code = main(list(argv))
    captured = capsys.readouterr()
    from tests.conftest import CliResult

    return CliResult(code, captured.out, captured.err)


def test_bad_input_is_one_line_and_keeps_the_store(e2e_run, tmp_path: Path, capsys):
    out, _ = e2e_run
    db = out / "results.sqlite"
    before = rows(db, "SELECT sample_id, output_ids FROM samples ORDER BY sample_id")
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("format: jsonl\nscorer: auto\nprompt: [unclosed\nmax_new_tokens: 8\n")
    typo_yaml = tmp_path / "typo.yaml"
    typo_yaml.write_text("format: jsonl\nscorer: auto\nmax_new_tokenz: 8\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    base = ["compare", *TINY, "--methods", "exact", "--out", str(out)]
    cases = [
        (["--tasks", "humaneva"], ("unknown task 'humaneva'", "did you mean 'humaneval'")),
        (["--tasks", str(bad_yaml)], (f"{bad_yaml}:4", "malformed YAML")),
        (["--tasks", str(typo_yaml)], ("unknown field 'max_new_tokenz'", "did you mean 'max_new_tokens'")),
        (["--tasks", "jsonl", "--data-file", f"jsonl={tmp_path / 'missing.jsonl'}"],
         ("missing.jsonl", "no such data file")),
        (["--tasks", "jsonl"], ("--data-file jsonl=PATH",)),
        (["--tasks", "jsonl", "--data-file", f"jsonl={empty}"], ("empty",)),
        (["--tasks", "gsm8k"], ("unreachable", "--data-file gsm8k=PATH")),
        (["--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--methods", "exactt"],
         ("unknown method 'exactt'", "did you mean 'exact'")),
    ]
    for extra, fragments in cases:
        argv = base + extra
        if "--methods" in extra:
            argv = [a for a in base if a not in ("--methods", "exact")] + extra
        assert_one_line_error(run_main(capsys, *argv), *fragments)
    assert rows(db, "SELECT sample_id, output_ids FROM samples ORDER BY sample_id") == before


@pytest.mark.slow
def test_unknown_task_from_a_real_process(cli):
    result = cli("compare", *TINY, "--methods", "exact", "--tasks", "nosuchtask")
    assert_one_line_error(result, "unknown task 'nosuchtask'")


def test_summary_of_a_folder_without_a_store(tmp_path: Path, capsys):
    assert_one_line_error(run_main(capsys, "summary", str(tmp_path)), "no results store")
