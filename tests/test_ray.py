"""``compare --executor ray`` on a local Ray cluster of two 1-CPU workers, with the tiny random models: the same
samples as in-process, a worker killed mid-shard, a driver killed mid-run, and the one-line errors.

Each test that starts a cluster shuts it down (the executor does; ``no_cluster_left`` checks), and is bounded in
time. The Ray executor is found through the ``relaxbench.executors`` entry point, which the tests declare in a
throw-away ``*.dist-info`` folder put on the path (the installed package declares it too once reinstalled).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from relaxbench.cli import main
from tests.conftest import CliResult, assert_one_line_error
from tests.store_query import rows
from tests.test_compare import DATA, TINY, record_set

ROOT = Path(__file__).resolve().parents[1]

RAY = ["--executor", "ray", "--workers", "2", "--cpus-per-worker", "1"]
TIMING = ("speedup", "latency", "tokens_per_second", "policy_time", "policy_share")  # metrics that are timings

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed (pip install 'relaxbench[ray]'; `make install` does)")


@pytest.fixture(scope="module")
def entry_point_dir(tmp_path_factory) -> Path:
    """A folder holding a distribution that declares the executor entry point, as pyproject.toml does."""
    root = tmp_path_factory.mktemp("entry_point")
    info = root / "relaxbench_ray_entry_point-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: relaxbench-ray-entry-point\nVersion: 0\n")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["relaxbench.executors"]
    (info / "entry_points.txt").write_text(f"[relaxbench.executors]\nray = {declared['ray']}\n")  # as declared there
    return root


@pytest.fixture
def ray_entry_point(entry_point_dir: Path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(entry_point_dir))
    return entry_point_dir


@pytest.fixture
def no_cluster_left():
    """After the test: no Ray connection is left open in this process (the executor shut its cluster down)."""
    yield
    import ray

    assert not ray.is_initialized(), "the executor left its Ray cluster running"


@pytest.fixture
def one_thread():
    """Runs in this process with --threads 1 (as each 1-CPU worker): restore the test process's threads after."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def compare_args(out: Path, *extra: str) -> list[str]:
    return ["compare", *TINY, "--methods", "exact,fly", "--tasks", "jsonl,humaneval", "--data-file",
            f"jsonl={DATA}", "--limit", "3", "--max-new-tokens", "12", "--repeats", "2", "--threads", "1",
            "--report-format", "none", "--out", str(out), *extra]


def task_tables(out: Path) -> list:
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.report.tables import task_tables as tables_of

    return [table for summary in summarize_run(load_run(out)) for table in tables_of(summary)]


def without_timings(table) -> tuple:
    return (table.key, table.title, table.columns, table.note,
            tuple((row.key, tuple(cell.text for cell in row.cells if not any(t in cell.metric for t in TIMING)))
                  for row in table.rows))


def sessions_of(db: Path) -> list[dict]:
    return [{**json.loads(r["environment_json"]), "session_id": r["session_id"], "status": r["status"],
             "n_started": r["n_started"]} for r in rows(db, "SELECT * FROM environment ORDER BY session_id")]


def samples_by_session(db: Path) -> Counter:
    return Counter({r["session_id"]: r["n"] for r in rows(db, "SELECT session_id, count(*) AS n FROM samples "
                                                              "GROUP BY session_id")})


# ------------------------------------------------------------------------------------------------ same results


@needs_ray
@pytest.mark.timeout(420)
@pytest.mark.slow
def test_ray_gives_the_samples_and_tables_of_an_in_process_run(tmp_path, ray_entry_point, no_cluster_left,
                                                               one_thread):
    local, distributed = tmp_path / "in-process", tmp_path / "ray"
    assert main(compare_args(local, "--device-map", "auto")) == 0  # (on a CPU run: everything on the CPU)
    assert main(compare_args(distributed, *RAY)) == 0
    db = distributed / "results.sqlite"

    # the same output ids, texts, counters and scores for every sample (greedy), every unit exactly once
    assert record_set(db) == record_set(local / "results.sqlite")
    assert len(record_set(db)) == 3 * 2 * 3 * 2  # (3 jsonl items + 3 HumanEval problems) × 2 repeats × 3 arms
    # and the same tables, apart from the timings
    assert [without_timings(t) for t in task_tables(distributed)] == [without_timings(t) for t in task_tables(local)]

    # each worker is a session with its own environment, and both did work
    sessions = sessions_of(db)
    assert len(sessions) == 2 and all(s["status"] == "finished" and s["executor"] == "ray" for s in sessions)
    assert len({s["ray_worker"]["pid"] for s in sessions}) == 2 and {s["threads"] for s in sessions} == {1}
    counts = samples_by_session(db)
    assert set(counts) == {s["session_id"] for s in sessions}
    assert all(s["n_started"] == counts[s["session_id"]] for s in sessions)  # nothing started twice

    # the pairing: every arm of a unit ran on the same worker
    units = defaultdict(set)
    for r in rows(db, "SELECT s.session_id, c.task, s.item_id, s.turn, s.repeat FROM samples s JOIN cells c "
                      "USING (cell_id)"):
        units[(r["task"], r["item_id"], r["turn"], r["repeat"])].add(r["session_id"])
    assert all(len(sessions_with_it) == 1 for sessions_with_it in units.values())

    # machine profiles are per worker: every session that ran samples measured its own, stored with that session
    ran = {r["session_id"] for r in rows(db, "SELECT DISTINCT session_id FROM samples")}
    profiled = Counter(r["session_id"] for r in rows(db, "SELECT session_id FROM machine_profiles"))
    assert set(profiled) == ran and all(n == 1 for n in profiled.values())
    assert not rows(db, "SELECT name FROM sqlite_master WHERE name = 'calibrations'")


# ------------------------------------------------------------------------------------------------ faults


def kill_args(out: Path) -> list[str]:
    """Two one-turn items, each a long shard (8 repeats × 2 arms): one per worker."""
    return ["compare", *TINY, "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--limit",
            "2", "--max-new-tokens", "32", "--repeats", "8", "--threads", "1", "--report-format", "none", "--out",
            str(out), *RAY]


KILL_TOTAL = 2 * 8 * 2


def count(db: Path, sql: str, params: tuple = ()) -> int:
    try:
        return rows(db, sql, params)[0][0] if db.exists() else 0
    except sqlite3.OperationalError:  # the store is being created
        return 0


@needs_ray
@pytest.mark.timeout(420)
@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_its_shard_finished(tmp_path, ray_entry_point, no_cluster_left, one_thread):
    out = tmp_path / "run"
    db = out / "results.sqlite"
    killed: dict = {}

    def kill_a_worker_mid_shard() -> None:
        deadline = time.time() + 300
        while time.time() < deadline:
            if count(db, "SELECT count(*) FROM samples WHERE session_id=1") >= 2:
                [worker] = [s for s in sessions_of(db) if s["session_id"] == 1]
                os.kill(worker["ray_worker"]["pid"], signal.SIGKILL)
                killed["kept"] = [tuple(r) for r in rows(db, "SELECT sample_id, item_id, created_at FROM samples "
                                                             "WHERE session_id=1 ORDER BY sample_id")]
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_a_worker_mid_shard, daemon=True)
    killer.start()
    assert main(kill_args(out)) == 0
    killer.join(timeout=5)
    assert killed, "the worker was not killed"

    # every unit stored exactly once
    assert count(db, "SELECT count(*) FROM samples") == KILL_TOTAL
    assert count(db, "SELECT count(DISTINCT cell_id || item_id || turn || '/' || repeat) FROM samples") == KILL_TOTAL
    sessions = {s["session_id"]: s for s in sessions_of(db)}
    # its session ended 'lost'; the other worker's finished (and, if Ray restarted the killed one before the work
    # ran out, so did the restarted worker's: a new incarnation is a new session)
    assert sessions[1]["status"] == "lost" and len(sessions) in (2, 3)
    assert all(s["status"] == "finished" for sid, s in sessions.items() if sid != 1)
    # what the killed worker had committed is kept, nothing of it redone: the only generation started and not
    # stored is the one in flight when it died
    kept = [tuple(r) for r in rows(db, "SELECT sample_id, item_id, created_at FROM samples WHERE session_id=1 "
                                       "ORDER BY sample_id")]
    assert kept[:len(killed["kept"])] == killed["kept"]
    counts = samples_by_session(db)
    assert sessions[1]["n_started"] - counts[1] <= 1
    assert all(s["n_started"] == counts[sid] for sid, s in sessions.items() if sid != 1)
    # the killed worker's shard was finished by another session, from where it stopped
    [item] = {item for _, item, _ in killed["kept"]}
    assert len(kept) < KILL_TOTAL // 2
    finishers = {r["session_id"] for r in rows(db, "SELECT session_id FROM samples WHERE item_id=?", (item,))}
    assert 1 in finishers and len(finishers) >= 2


@needs_ray
@pytest.mark.timeout(420)
@pytest.mark.slow
def test_a_killed_driver_resumes_with_the_same_command(tmp_path, entry_point_dir, ray_entry_point, no_cluster_left,
                                                        one_thread):
    out = tmp_path / "run"
    db = out / "results.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(entry_point_dir), os.environ.get("PYTHONPATH", "")])}
    # its own process group: killing the group ends the driver and the local cluster it started
    driver = subprocess.Popen([sys.executable, "-m", "relaxbench", *kill_args(out)], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and driver.poll() is None and count(db, "SELECT count(*) FROM samples") < 4:
            time.sleep(0.02)
        assert driver.poll() is None, "the run ended before it could be killed"
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    after_kill = [tuple(r) for r in rows(db, "SELECT sample_id, created_at FROM samples ORDER BY sample_id")]
    assert 4 <= len(after_kill) < KILL_TOTAL
    first_sessions = {s["session_id"] for s in sessions_of(db)}
    assert all(s["status"] == "running" for s in sessions_of(db))  # the driver never got to say otherwise

    assert main(kill_args(out)) == 0  # the same command
    assert [tuple(r) for r in rows(db, "SELECT sample_id, created_at FROM samples WHERE sample_id <= ? ORDER BY "
                                       "sample_id", (after_kill[-1][0],))] == after_kill
    assert count(db, "SELECT count(*) FROM samples") == KILL_TOTAL
    rerun = [s for s in sessions_of(db) if s["session_id"] not in first_sessions]
    assert len(rerun) == 2 and all(s["status"] == "finished" for s in rerun)
    assert sum(s["n_started"] for s in rerun) == KILL_TOTAL - len(after_kill)  # only the missing samples ran


# ------------------------------------------------------------------------------------------------ one-line errors


def test_without_ray_the_executor_is_one_line(tmp_path, entry_point_dir):
    """Ray made unimportable in a fresh interpreter: one line, exit 2, before any model loads or a store opens."""
    launcher = ("import sys; sys.modules['ray'] = None; from relaxbench.cli import main; "
                "raise SystemExit(main(sys.argv[1:]))")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(entry_point_dir), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", launcher, *compare_args(out, "--executor", "ray")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert_one_line_error(CliResult(proc.returncode, proc.stdout, proc.stderr), "executor 'ray' could not be loaded",
                          "relaxbench[ray]")
    assert not out.exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_ray
def test_an_unreachable_cluster_is_one_line(tmp_path, capsys, ray_entry_point, no_cluster_left):
    """Given by flags, or by a suite file (``executor: ray`` and its options)."""
    port = free_port()  # nothing listens there any more
    out = tmp_path / "run"
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"executor: ray\nexecutor_options: {{address: '127.0.0.1:{port}', workers: 2}}\n")
    for extra in (["--executor", "ray", "--ray-address", f"127.0.0.1:{port}"], ["--suite", str(suite)]):
        code = main(compare_args(out, *extra))
        captured = capsys.readouterr()
        assert_one_line_error(CliResult(code, captured.out, captured.err), f"127.0.0.1:{port}",
                              "no Ray cluster answers")
    assert not out.exists()


def test_executor_options_are_checked(tmp_path, capsys):
    out = tmp_path / "run"
    for extra, fragments in ((["--ray-address", "auto"], ("executor 'in-process'", "unknown option 'address'")),
                             (["--executor", "rya"], ("unknown executor 'rya'",)),
                             (["--device-map", "autoo"], ("--device-map", "did you mean 'auto'"))):
        code = main(compare_args(out, *extra))
        captured = capsys.readouterr()
        assert_one_line_error(CliResult(code, captured.out, captured.err), *fragments)
    assert not out.exists()


def test_the_run_key_does_not_depend_on_where_it_runs():
    """So a run started in-process resumes on Ray and back."""
    from relaxbench.harness.plan import build_plan
    from relaxbench.harness.suite import SuiteSpec

    base = {"target": "tiny-random-target", "draft": "tiny-random-draft", "methods": ("exact",), "tasks": ("jsonl",),
            "data_files": {"jsonl": str(DATA)}, "limit": 1}
    keys = {build_plan(SuiteSpec(**base, **where)).key for where in (
        {}, {"executor": "ray", "executor_options": {"workers": 2, "address": "auto"}}, {"device_map": "auto"})}
    assert len(keys) == 1
