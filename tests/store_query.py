"""Reading a results store in tests: plain SQL over the SQLite file, as a user would."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def rows(db: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    """The rows ``sql`` selects from the store at ``db`` (columns by name)."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()
