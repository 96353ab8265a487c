"""Schema version 2 and ``relaxbench store upgrade``: the committed version-1 store (``tests/data/
legacy_store_v1.sqlite``) upgrades to the tables and summaries the version-1 code read from it
(``tests/data/legacy_store_v1.reading.json``, taken by ``tests/legacy_reading.py`` before the upgrade existed);
every command that meets a version-1 store says in one line to upgrade it; a failed upgrade leaves the original
as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from relaxbench.cli import main
from relaxbench.harness.store import SCHEMA, SCHEMA_VERSION, Store
from tests.legacy_reading import reading
from tests.store_query import rows

DATA = Path(__file__).parent / "data"
LEGACY = DATA / "legacy_store_v1.sqlite"
V1_READING = DATA / "legacy_store_v1.reading.json"


@pytest.fixture
def legacy_run(tmp_path: Path) -> Path:
    run = tmp_path / "legacy"
    run.mkdir()
    shutil.copy(LEGACY, run / "results.sqlite")
    return run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tables(db: Path) -> set[str]:
    return {r["name"] for r in rows(db, "SELECT name FROM sqlite_master WHERE type='table'")}


def test_the_upgraded_legacy_store_reads_as_version_1_read_it(legacy_run: Path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "160")  # the width the version-1 reading was taken at
    assert main(["store", "upgrade", str(legacy_run)]) == 0
    assert "upgraded to schema version 2" in capsys.readouterr().out
    db = legacy_run / "results.sqlite"
    assert rows(db, "SELECT value FROM meta WHERE key='schema_version'")[0]["value"] == str(SCHEMA_VERSION)
    assert _tables(db) == {"meta", "runs", "environment", "cells", "machine_profiles", "samples", "graders",
                           "verdicts", "sample_verdicts"}
    assert _digest(legacy_run / "results.v1.sqlite") == _digest(LEGACY)  # the original, kept as it was
    expected = json.loads(V1_READING.read_text())
    got = json.loads(json.dumps(reading(legacy_run)))
    assert got["tables"] == expected["tables"]
    assert got["summary"] == expected["summary"] and got["summary_wide"] == expected["summary_wide"]
    assert main(["store", "upgrade", str(legacy_run)]) == 0  # a second upgrade has nothing to do
    assert "nothing to do" in capsys.readouterr().out


def test_every_column_is_in_its_tables_definition(tmp_path: Path):
    """A new store is exactly SCHEMA: no column added after the fact, nothing temporary, no unused table."""
    Store(tmp_path / "results.sqlite").close()
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    try:
        stored = {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")}
    finally:
        conn.close()
    for name, sql in stored.items():
        assert sql.split("(")[0].strip() in SCHEMA, name
    assert "calibrations" not in stored and "judges" not in stored


@pytest.mark.parametrize("command", [["summary"], ["report", "--format", "html"], ["compare", "--out"],
                                     ["rescore", "--grader", "x"]])
def test_a_version_1_store_is_refused_with_the_upgrade_command(legacy_run: Path, command: list[str], capsys):
    before = _digest(legacy_run / "results.sqlite")
    argv = ([*command, str(legacy_run), "--target", "tiny-random-target", "--draft", "tiny-random-draft",
             "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA / 'tiny_tasks.jsonl'}",
             "--limit", "1"] if command[0] == "compare"
            else [command[0], str(legacy_run), *command[1:]])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"relaxbench store upgrade {legacy_run}" in err, err
    assert _digest(legacy_run / "results.sqlite") == before


def test_a_failed_upgrade_leaves_the_original_untouched(legacy_run: Path, capsys):
    """A sample whose per-round column is not JSON fails the conversion: one line, exit 2, the store byte for byte
    as it was, no copy left behind; a later upgrade clears what an interrupted one left."""
    db = legacy_run / "results.sqlite"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE samples SET round_accepted='[1, 2' WHERE sample_id=(SELECT MAX(sample_id) FROM samples)")
    conn.close()
    before = _digest(db)
    assert main(["store", "upgrade", str(legacy_run)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert _digest(db) == before
    assert sorted(p.name for p in legacy_run.iterdir()) == ["results.sqlite", "results.sqlite.lock"]

    fixed = legacy_run.parent / "fixed"
    fixed.mkdir()
    shutil.copy(LEGACY, fixed / "results.sqlite")
    (fixed / "results.sqlite.upgrading").write_bytes(b"what a killed upgrade left")
    assert main(["store", "upgrade", str(fixed)]) == 0
    assert not (fixed / "results.sqlite.upgrading").exists()
    assert len(rows(fixed / "results.sqlite", "SELECT * FROM samples")) == 6


def test_upgrade_refuses_what_it_cannot_convert(tmp_path: Path, capsys):
    assert main(["store", "upgrade", str(tmp_path)]) == 2
    assert "no results store" in capsys.readouterr().err
    (tmp_path / "results.sqlite").write_text("not sqlite at all")
    assert main(["store", "upgrade", str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
