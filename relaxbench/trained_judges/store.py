"""The mining store: one SQLite file of its own (``judge-mining.sqlite`` by default), separate from compare's
results store, holding every mined mismatch with its label, its features and its provenance.

One store holds one mining setup (pair, dtypes, device, task and data set, generation budget and options; hashed
into ``mining_key``); mining more items with the same setup extends it, another setup is an error. Each mismatch is
committed together with its item's search state (current response, left border), so a killed run resumes inside
the item it was mining.

Tables:
  meta        schema version
  mining      one row: the setup (its key and full record)
  sessions    one row per invocation: environment (device, dtypes, threads, versions, CPU, load), status
  items       one row per mined item: prompt, the target's reference response and its outcome, the search state,
              status, wall seconds and target positions computed
  mismatches  one row per labelled mismatch, in search order: position, draft and target tokens, label, the
              continuation and its outcome, probabilities, the shortcut taken if any, and the features (float32
              blobs of the draft's and the target's last hidden states at the mismatch)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from relaxbench.errors import DataError
from relaxbench.sqlite_file import SQLiteFile, dumps, now
from relaxbench.trained_judges.search import Continuation, Mismatch, SearchState

SCHEMA_VERSION = 1
DEFAULT_STORE = "judge-mining.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mining (
    mining_key TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    target TEXT NOT NULL,
    draft TEXT NOT NULL,
    task TEXT NOT NULL,
    data_fingerprint TEXT NOT NULL,
    config_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    environment_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    item_id TEXT PRIMARY KEY,
    item_index INTEGER NOT NULL,
    status TEXT NOT NULL,
    prompt_ids TEXT NOT NULL,
    reference_ids TEXT NOT NULL,
    reference_text TEXT NOT NULL,
    reference_end TEXT NOT NULL,
    reference_score REAL,
    reference_outcome TEXT NOT NULL,
    response_ids TEXT NOT NULL,
    left_border INTEGER NOT NULL,
    handled INTEGER NOT NULL,
    target_tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS mismatches (
    mismatch_id INTEGER PRIMARY KEY,
    item_id TEXT NOT NULL REFERENCES items(item_id),
    seq INTEGER NOT NULL,
    position INTEGER NOT NULL,
    draft_token INTEGER NOT NULL,
    target_token INTEGER NOT NULL,
    important INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    score REAL,
    continuation_ids TEXT NOT NULL,
    continuation_text TEXT NOT NULL,
    continuation_end TEXT NOT NULL,
    generated INTEGER NOT NULL,
    target_prob_draft REAL NOT NULL,
    target_prob_target REAL NOT NULL,
    draft_prob_draft REAL NOT NULL,
    shortcut TEXT,
    draft_hidden BLOB NOT NULL,
    target_hidden BLOB NOT NULL,
    seconds REAL NOT NULL,
    session_id INTEGER NOT NULL REFERENCES sessions(session_id),
    created_at TEXT NOT NULL,
    UNIQUE (item_id, seq)
);
"""


def _blob(vector: torch.Tensor) -> bytes:
    return vector.detach().to(torch.float32).cpu().numpy().tobytes()


@dataclass(frozen=True)
class StoredItem:
    item_id: str
    status: str
    prompt_ids: list[int]
    reference: Continuation
    state: SearchState
    seconds: float


@dataclass(frozen=True)
class MinedData:
    """Everything ``judge train`` reads: one row per mismatch of the finished items, in search order."""

    item_ids: list[str]  # the mismatch's item
    positions: np.ndarray  # [n]
    important: np.ndarray  # [n] bool
    draft_hidden: np.ndarray  # [n, H_draft] float32
    target_hidden: np.ndarray  # [n, H_target] float32
    items: list[str]  # the finished items, in task order (items with no mismatch included)
    config: Mapping[str, Any]
    mining_key: str


class MiningStore(SQLiteFile):
    """Open with ``MiningStore(path)``; ``bind(key, config)`` fixes (or checks) the setup it holds."""

    what = "relaxbench mining store"
    flag = "--store"

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        has_meta, other = self.has_table("meta"), self.has_table("samples")
        if other:
            raise DataError(f"{self.path}: this is a compare results store, not a mining store; use another --store")
        version = (self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                   if has_meta else None)
        if version is not None and int(version["value"]) != SCHEMA_VERSION:
            raise DataError(f"{self.path}: mining store schema version {version['value']}, this relaxbench reads "
                            f"{SCHEMA_VERSION}")
        with self.conn:
            self.conn.executescript(SCHEMA)
            if version is None:
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def __enter__(self) -> MiningStore:
        return self

    # -- the setup -----------------------------------------------------------------------------------------------
    def setup(self) -> tuple[str, dict[str, Any]] | None:
        row = self.conn.execute("SELECT mining_key, config_json FROM mining").fetchone()
        return None if row is None else (row["mining_key"], json.loads(row["config_json"]))

    def bind(self, key: str, config: Mapping[str, Any]) -> None:
        """Record the setup of a new store, or check that an existing one was mined with the same setup."""
        existing = self.setup()
        if existing is None:
            with self.transaction() as conn:
                conn.execute("INSERT INTO mining VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (key, now(), config["target"]["name"], config["draft"]["name"], config["task"]["name"],
                              config["task"]["data_fingerprint"], dumps(config)))
            return
        if existing[0] != key:
            before = existing[1]
            changed = [name for name in ("target", "draft", "task", "options", "device")
                       if dumps(before.get(name)) != dumps(config.get(name))] or ["setup"]
            raise DataError(f"{self.path} holds mining with a different {', '.join(changed)}; use another --store "
                            "for this setup")

    def precheck(self, known: Mapping[str, Any]) -> None:
        """Before the models load: the parts of the setup known from the command line (``target``/``draft``
        names, ``task`` name and fingerprint, ``options``, ``device``) must match a store's existing setup."""
        existing = self.setup()
        if existing is None:
            return
        before = existing[1]
        recorded = {"target": before["target"]["name"], "draft": before["draft"]["name"],
                    "task": before["task"]["name"], "data": before["task"]["data_fingerprint"],
                    "options": before["options"], "device": before["device"]}
        changed = [name for name, value in known.items() if dumps(recorded.get(name)) != dumps(value)]
        if changed:
            raise DataError(f"{self.path} holds mining with a different {', '.join(changed)} "
                            f"({'; '.join(f'{name}: {recorded[name]!r}' for name in changed[:2])}); use another "
                            "--store for this setup")

    # -- sessions ------------------------------------------------------------------------------------------------
    def start_session(self, environment: Mapping[str, Any]) -> int:
        with self.transaction() as conn:
            cur = conn.execute("INSERT INTO sessions (started_at, status, environment_json) VALUES (?, 'running', ?)",
                               (now(), dumps(environment)))
            return int(cur.lastrowid)

    def finish_session(self, session_id: int, status: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE sessions SET finished_at=?, status=? WHERE session_id=?", (now(), status, session_id))

    # -- items ---------------------------------------------------------------------------------------------------
    def item(self, item_id: str) -> StoredItem | None:
        row = self.conn.execute("SELECT * FROM items WHERE item_id=?", (item_id,)).fetchone()
        if row is None:
            return None
        reference = Continuation(json.loads(row["reference_ids"]), row["reference_text"], row["reference_end"],
                                 None, json.loads(row["reference_outcome"]))
        state = SearchState(json.loads(row["response_ids"]), int(row["left_border"]), int(row["handled"]),
                            row["status"] == "done", int(row["target_tokens"]))
        return StoredItem(item_id, row["status"], json.loads(row["prompt_ids"]), reference, state,
                          float(row["seconds"]))

    def start_item(self, item_id: str, item_index: int, prompt_ids: list[int], reference: Continuation,
                   state: SearchState, seconds: float) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO items (item_id, item_index, status, prompt_ids, reference_ids, reference_text, "
                "reference_end, reference_score, reference_outcome, response_ids, left_border, handled, "
                "target_tokens, seconds, started_at) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, item_index, dumps(prompt_ids), dumps(reference.ids), reference.text, reference.ended,
                 None if reference.score is None else reference.score.value, dumps(reference.outcome),
                 dumps(state.response), state.left, state.handled, state.target_tokens, seconds, now()))

    def add_mismatch(self, item_id: str, found: Mismatch, state: SearchState, session_id: int,
                     seconds: float) -> None:
        """One labelled mismatch and the item's state after it, in one transaction."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO mismatches (item_id, seq, position, draft_token, target_token, important, outcome, "
                "score, continuation_ids, continuation_text, continuation_end, generated, target_prob_draft, "
                "target_prob_target, draft_prob_draft, shortcut, draft_hidden, target_hidden, seconds, session_id, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, state.handled - 1, found.position, found.draft_token, found.target_token,
                 int(found.important), dumps(found.outcome), found.score, dumps(found.continuation_ids),
                 found.continuation_text, found.continuation_end, found.generated, found.target_prob_draft,
                 found.target_prob_target, found.draft_prob_draft, found.shortcut, _blob(found.draft_hidden),
                 _blob(found.target_hidden), found.seconds, session_id, now()))
            self._save_state(conn, item_id, state, seconds)

    def finish_item(self, item_id: str, state: SearchState, seconds: float) -> None:
        with self.transaction() as conn:
            self._save_state(conn, item_id, state, seconds)
            conn.execute("UPDATE items SET status='done', finished_at=? WHERE item_id=?", (now(), item_id))

    @staticmethod
    def _save_state(conn: sqlite3.Connection, item_id: str, state: SearchState, seconds: float) -> None:
        conn.execute("UPDATE items SET response_ids=?, left_border=?, handled=?, target_tokens=?, "
                     "seconds=seconds + ? WHERE item_id=?",
                     (dumps(state.response), state.left, state.handled, state.target_tokens, seconds, item_id))

    # -- reading -------------------------------------------------------------------------------------------------
    def mismatch_rows(self, item_id: str | None = None) -> list[sqlite3.Row]:
        where, args = ("WHERE item_id=?", (item_id,)) if item_id is not None else ("", ())
        return self.conn.execute(f"SELECT * FROM mismatches {where} ORDER BY item_id, seq", args).fetchall()

    def item_rows(self) -> list[sqlite3.Row]:
        return self.conn.execute("SELECT * FROM items ORDER BY item_index").fetchall()

    def data(self) -> MinedData:
        """The finished items' mismatches with labels and features."""
        setup = self.setup()
        if setup is None:
            raise DataError(f"{self.path}: nothing mined yet (run `relaxbench judge mine --store {self.path}`)")
        done = [row["item_id"] for row in self.item_rows() if row["status"] == "done"]
        rows = self.conn.execute(
            "SELECT m.item_id, m.position, m.important, m.draft_hidden, m.target_hidden FROM mismatches m "
            "JOIN items i USING (item_id) WHERE i.status='done' ORDER BY i.item_index, m.seq").fetchall()
        config = setup[1]
        dims = config["dims"]

        def matrix(column: str, width: int) -> np.ndarray:
            if not rows:
                return np.zeros((0, width), dtype=np.float32)
            return np.stack([np.frombuffer(row[column], dtype=np.float32) for row in rows])

        return MinedData([row["item_id"] for row in rows], np.array([row["position"] for row in rows], dtype=int),
                         np.array([bool(row["important"]) for row in rows], dtype=bool),
                         matrix("draft_hidden", dims["draft"]), matrix("target_hidden", dims["target"]), done,
                         config, setup[0])
