"""Reading a results store in tests: plain SQL over the SQLite file, as a user would, and the same rows as the
store's own row type."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
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


def kill_after_samples(db: Path, proc: subprocess.Popen, at_least: int, seconds: float, poll: float = 0.05) -> None:
    """SIGKILL the run ``proc`` writing the store ``db`` once it has committed ``at_least`` samples (within
    ``seconds``); the run must still be going then, or the test it serves proves nothing."""
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        if db.exists():
            try:
                if rows(db, "SELECT count(*) AS n FROM samples")[0]["n"] >= at_least:
                    break
            except sqlite3.OperationalError:  # the store is being created
                pass
        time.sleep(poll)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
