"""Reading a results store in tests: plain SQL over the SQLite file, as a user would, and the same rows as the
store's own row type."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaxbench.harness.store import SampleRow


def rows(db: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    """The rows ``sql`` selects from the store at ``db`` (columns by name)."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def sample_rows(db: Path) -> dict[tuple[str, str, str, int, int], SampleRow]:
    """Every stored sample as a ``SampleRow``, by (task, arm, item_id, turn, repeat)."""
    return {(r["task"], r["arm"], r["item_id"], r["turn"], r["repeat"]): SampleRow.from_columns(r)
            for r in rows(db, "SELECT s.*, c.task, c.arm FROM samples s JOIN cells c USING (cell_id)")}
