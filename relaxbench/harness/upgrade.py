"""``relaxbench store upgrade``: a version-1 results store converted to the current schema, in place and safely.

Version 1 grew by addition: columns added to ``samples`` after it was first written, a per-round JSON list per
``round_*`` column, a ``calibrations`` table nothing reads, and the grading tables under their earlier names
(``judges``, ``judgments``, ``sample_judgments``, keyed by ``judge_hash``). This module is the one place that
knows that layout. The conversion writes a new file beside the store (``results.sqlite.upgrading``), checks it row
for row against the original (every value of every table, and every sample as the original's columns decode it),
keeps the original as ``results.v1.sqlite`` (a hard link where the file system has them) and then swaps the new
file in with one rename. Until that rename the store is the original, untouched: a failure or a kill leaves it as
it was, and the next ``store upgrade`` starts over.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaxbench.errors import DataError
from relaxbench.harness.store import SCHEMA_VERSION, STORE_NAME, SampleRow, create_schema, schema_version
from relaxbench.sqlite_file import SQLiteFile, WriterLock

V1 = 1
# version 1's names → version 2's; the per-round columns are version 1's ``round_<field>``
RENAMED_TABLES = {"judges": "graders", "judgments": "verdicts", "sample_judgments": "sample_verdicts"}
RENAMED_COLUMNS = {"judge_hash": "grader_hash"}
DROPPED_TABLES = ("calibrations",)  # unit costs written before machine profiles; read by nothing
ROUND_PREFIX = "round_"
# version 2's tables in the order rows are copied (a row's references come first)
COPIED_TABLES = ("runs", "environment", "cells", "machine_profiles", "samples", "graders", "verdicts",
                 "sample_verdicts")


@dataclass(frozen=True)
class Upgraded:
    """What an upgrade did: the store, where the original was kept, rows copied per table."""

    store: Path
    original: Path
    rows: Mapping[str, int]


def store_file(run_dir: str | Path) -> Path:
    """``RUN_DIR/results.sqlite``, or the .sqlite file itself."""
    path = Path(run_dir)
    path = path / STORE_NAME if path.is_dir() else path
    if not path.is_file():
        raise DataError(f"{path}: no results store here")
    return path


def stored_version(path: Path) -> int | None:
    """The store's schema version, read without writing anything (None: no schema in it)."""
    probe = SQLiteFile(path, read_only=True)
    try:
        return schema_version(probe)
    finally:
        probe.close()


def upgrade(run_dir: str | Path, command: str = "relaxbench store upgrade") -> Upgraded | None:
    """Convert the version-1 store of ``run_dir`` in place; None when it already is the current version."""
    path = store_file(run_dir)
    version = stored_version(path)
    if version == SCHEMA_VERSION:
        return None
    if version != V1:
        raise DataError(f"{path}: schema version {version}; `store upgrade` converts version {V1} stores only")
    original = path.with_name(path.stem + f".v{V1}" + path.suffix)
    with WriterLock(path, command):
        if original.exists() and not original.samefile(path):
            raise DataError(f"{original}: already exists (an earlier upgrade's original?); move it away first")
        _checkpoint(path)
        staging = path.with_name(path.name + ".upgrading")
        _remove(staging)  # what an interrupted upgrade left
        try:
            counts = _convert(path, staging)
            _verify(path, staging)
        except (sqlite3.DatabaseError, ValueError, TypeError, KeyError) as exc:  # JSON errors are ValueErrors
            _remove(staging)
            raise DataError(f"{path}: cannot be converted ({type(exc).__name__}: {exc}); it is left as it "
                            "was") from None
        except BaseException:
            _remove(staging)
            raise
        os.chmod(staging, path.stat().st_mode & 0o7777)  # the store keeps its permissions
        if not original.exists():
            try:
                os.link(path, original)
            except OSError:  # a file system without hard links: a copy
                shutil.copy2(path, original)
        os.replace(staging, path)  # the one step that changes the store: atomic
        _sync_folder(path.parent)
    return Upgraded(path, original, counts)


# ---------------------------------------------------------------------------------------------- conversion

def _checkpoint(path: Path) -> None:
    """Everything in the store's WAL written into the file and the WAL emptied, so the file alone is the store
    (a WAL left beside the swapped file would be replayed into it)."""
    with closing(sqlite3.connect(path, timeout=30)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise DataError(f"{path}: in use by another process; stop it and run `store upgrade` again")
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        raise DataError(f"{wal}: still holds changes after a checkpoint; stop what uses the store and run "
                        "`store upgrade` again")
    wal.unlink(missing_ok=True)


def _convert(source: Path, staging: Path) -> dict[str, int]:
    """The version-2 store written to ``staging`` from the version-1 one at ``source``; rows per table."""
    counts: dict[str, int] = {}
    with closing(_read_only(source)) as old, closing(sqlite3.connect(staging)) as new:
        create_schema(new)
        new.execute("BEGIN")
        for key, value in old.execute("SELECT key, value FROM meta WHERE key != 'schema_version'"):
            new.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
        for table in COPIED_TABLES:
            columns = _columns(new, table)
            placeholders = ", ".join("?" * len(columns))
            n = 0
            for row in _v1_rows(old, table):
                new.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})",
                            tuple(row[c] for c in columns))
                n += 1
            counts[table] = n
        new.commit()
    return counts


def _v1_rows(old: sqlite3.Connection, table: str) -> Iterator[dict[str, Any]]:
    """The rows of version-2 table ``table`` as version 1 holds them: renamed tables and columns, columns added
    to version 1 later read as NULL where a row predates them, and a sample's ``round_*`` lists as its
    ``rounds`` object (a list that is NULL was not recorded and is left out)."""
    v1_table = next((old_name for old_name, name in RENAMED_TABLES.items() if name == table), table)
    if not _has_table(old, v1_table):
        return
    keys = ", ".join(_primary_key(old, v1_table))
    for raw in old.execute(f"SELECT * FROM {v1_table} ORDER BY {keys}"):
        row = {RENAMED_COLUMNS.get(name, name): raw[name] for name in raw.keys()}
        if table == "samples":
            row["rounds"] = _rounds_json(row)
        yield _Defaulted(row)


class _Defaulted(dict):
    """A row whose missing columns (added to version 1 after the row was written) read as NULL."""

    def __missing__(self, key: str) -> None:
        return None


def _rounds_json(row: Mapping[str, Any]) -> str:
    rounds = {name.removeprefix(ROUND_PREFIX): json.loads(value) for name, value in row.items()
              if name.startswith(ROUND_PREFIX) and value is not None}
    return json.dumps(rounds, sort_keys=True)


# ---------------------------------------------------------------------------------------------- verification

def _verify(source: Path, staging: Path) -> None:
    """The new file against the original, row for row: the same rows in every table (a dropped table aside), every
    value equal under its new name, and every sample read back as a ``SampleRow`` equal to the one the original's
    columns decode to. Raises on the first difference (the original is then left as it was)."""
    with closing(_read_only(source)) as old, closing(_read_only(staging)) as new:
        problems = [row[0] for row in new.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise DataError(f"{staging}: the converted store is damaged ({problems[0]}); the original is unchanged")
        for v1_table in _tables(old):
            if v1_table in DROPPED_TABLES or v1_table == "meta":
                continue
            table = RENAMED_TABLES.get(v1_table, v1_table)
            if not _has_table(new, table):
                raise DataError(f"{source}: table {v1_table} has no place in schema version {SCHEMA_VERSION}; "
                                "the store is left as it was")
            keys = _primary_key(old, v1_table)
            before = old.execute(f"SELECT * FROM {v1_table} ORDER BY {', '.join(keys)}").fetchall()
            after = new.execute(f"SELECT * FROM {table} ORDER BY "
                                f"{', '.join(RENAMED_COLUMNS.get(k, k) for k in keys)}").fetchall()
            if len(before) != len(after):
                raise DataError(f"{table}: {len(after)} rows converted of {len(before)}; the original is unchanged")
            for old_row, new_row in zip(before, after):
                _same_row(table, old_row, new_row)
        meta = dict(old.execute("SELECT key, value FROM meta WHERE key != 'schema_version'").fetchall())
        if meta != dict(new.execute("SELECT key, value FROM meta WHERE key != 'schema_version'").fetchall()):
            raise DataError("meta: converted differently; the original is unchanged")


def _same_row(table: str, old_row: sqlite3.Row, new_row: sqlite3.Row) -> None:
    """One row, original and converted: every original column's value under its new name (the ``round_*`` lists
    as the sample's rounds read back by field name)."""
    for name in old_row.keys():
        if name.startswith(ROUND_PREFIX) and table == "samples":
            continue
        if old_row[name] != new_row[RENAMED_COLUMNS.get(name, name)]:
            raise DataError(f"{table}: column {name} of a row changed in conversion; the original is unchanged")
    if table != "samples":
        return
    sample = SampleRow.from_columns(new_row)
    for name in old_row.keys():
        if not name.startswith(ROUND_PREFIX):
            continue
        value = old_row[name]
        expected = None if value is None else json.loads(value)
        got = sample.rounds[name.removeprefix(ROUND_PREFIX)]
        if expected != (None if got is None else json.loads(json.dumps(got))):
            raise DataError(f"samples: {name} of sample {old_row['sample_id']} changed in conversion; the "
                            "original is unchanged")


# ---------------------------------------------------------------------------------------------- SQLite, files

def _read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def _has_table(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _primary_key(conn: sqlite3.Connection, table: str) -> list[str]:
    """The table's primary-key columns in key order (every version-1 table has one)."""
    info = sorted((r[5], r[1]) for r in conn.execute(f"PRAGMA table_info({table})") if r[5])
    return [name for _, name in info] or ["rowid"]


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal"),
                     path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)


def _sync_folder(folder: Path) -> None:
    """The rename made durable (the folder's entry flushed), where the platform allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
