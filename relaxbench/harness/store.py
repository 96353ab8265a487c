"""The results store: one SQLite file (stdlib ``sqlite3``, WAL) per output folder, ``DIR/results.sqlite``.

Every generated sample is committed in its own transaction as soon as it is scored, so a killed run loses at most
the sample in flight, and a rerun skips what is there. Every figure a report shows is derived from these rows.

Tables (schema version 2; docs/store.md describes every column):
  meta          schema version
  runs          one row per distinct run (its key is a hash of everything that decides the results)
  environment   one row per session (invocation) that worked on a run: device, dtypes, threads, versions, CPU,
                git revision, date, command line
  cells         one row per (run, task, arm): the full method spec, effective drafter, k, decoding settings,
                task spec, scorer and data fingerprint
  machine_profiles  per session: the cost profile of this machine measured at its start ("this-machine"), shared
                by every arm (relaxbench.profiles)
  samples       one row per (cell, item, turn, repeat): ids, text, counters, timings, its rounds (one columnar
                JSON object, ``rounds``: each declared per-round field by name, decoding/records.ROUND_FIELDS),
                score (+ pass/fail + JSON details), agreement with AR and divergence diagnosis, the seed of its
                random stream, the vLLM engine's latency and metrics
  graders       one row per LLM grader that graded anything in this store: its identity (hashed: the key) and
                what the report says about it
  verdicts      the verdict cache, keyed by (grader, prompt, answer) hashes and the draw (0; 1 = the self-check):
                the messages sent, the verdict text, its rating and score; shared by every run in the store, so
                rescoring, resuming and sweeps never pay for the same verdict twice
  sample_verdicts  which verdict grades which sample, per grader and draw

The schema is written whole when a store is created; a store of an earlier version is refused with the one line
that names ``relaxbench store upgrade`` (harness/upgrade.py converts it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from relaxbench.decoding.records import Counters, GenerationResult, RoundLog, Rounds, per_position
from relaxbench.errors import DataError
from relaxbench.sqlite_file import SQLiteFile, dumps, now

SCHEMA_VERSION = 2
STORE_NAME = "results.sqlite"

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY,
    run_key TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    target TEXT NOT NULL,
    draft TEXT,
    suite_json TEXT NOT NULL
);
CREATE TABLE environment (
    session_id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    command TEXT NOT NULL,
    git_revision TEXT,
    device TEXT,
    target_dtype TEXT,
    draft_dtype TEXT,
    threads INTEGER,
    cpu_model TEXT,
    python TEXT,
    torch TEXT,
    transformers TEXT,
    relaxbench TEXT,
    environment_json TEXT NOT NULL,
    n_started INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE cells (
    cell_id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    task TEXT NOT NULL,
    arm TEXT NOT NULL,
    position INTEGER NOT NULL,
    is_baseline INTEGER NOT NULL,
    method TEXT NOT NULL,
    policy TEXT NOT NULL,
    lossless INTEGER NOT NULL,
    knobs_json TEXT NOT NULL,
    method_json TEXT NOT NULL,
    drafter_json TEXT,
    k INTEGER NOT NULL,
    decode_json TEXT NOT NULL,
    task_json TEXT NOT NULL,
    scorer TEXT NOT NULL,
    data_fingerprint TEXT NOT NULL,
    UNIQUE (run_id, task, arm)
);
CREATE TABLE machine_profiles (
    session_id INTEGER PRIMARY KEY REFERENCES environment(session_id),
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    created_at TEXT NOT NULL,
    profile_json TEXT NOT NULL
);
CREATE TABLE samples (
    sample_id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(cell_id),
    session_id INTEGER NOT NULL REFERENCES environment(session_id),
    item_id TEXT NOT NULL,
    item_index INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    category TEXT,
    created_at TEXT NOT NULL,
    prompt_ids TEXT NOT NULL,
    output_ids TEXT NOT NULL,
    output_text TEXT NOT NULL,
    stop_reason TEXT NOT NULL,
    n_prompt_tokens INTEGER NOT NULL,
    n_output_tokens INTEGER NOT NULL,
    n_rounds INTEGER NOT NULL,
    n_drafted INTEGER NOT NULL,
    n_accepted INTEGER NOT NULL,
    n_relaxed INTEGER NOT NULL,
    time_total REAL NOT NULL,
    time_prefill REAL NOT NULL,
    time_draft REAL NOT NULL,
    time_verify REAL NOT NULL,
    time_policy REAL NOT NULL,
    rounds TEXT NOT NULL,
    score REAL,
    passed INTEGER,
    score_details TEXT NOT NULL,
    matches_baseline INTEGER,
    divergence TEXT,
    seed INTEGER,
    forced_tokens INTEGER,
    time_to_first_token REAL,
    time_per_output_token REAL,
    concurrency INTEGER,
    engine_metrics TEXT,
    UNIQUE (cell_id, item_id, turn, repeat)
);
CREATE INDEX samples_by_cell ON samples (cell_id, item_index, turn, repeat);
CREATE TABLE graders (
    grader_hash TEXT PRIMARY KEY,
    identity_json TEXT NOT NULL,
    description_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE verdicts (
    grader_hash TEXT NOT NULL REFERENCES graders(grader_hash),
    prompt_hash TEXT NOT NULL,
    answer_hash TEXT NOT NULL,
    draw INTEGER NOT NULL,
    prompt_name TEXT NOT NULL,
    messages_json TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rating REAL NOT NULL,
    score REAL,
    seconds REAL NOT NULL,
    attempts INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (grader_hash, prompt_hash, answer_hash, draw)
);
CREATE TABLE sample_verdicts (
    sample_id INTEGER NOT NULL REFERENCES samples(sample_id),
    grader_hash TEXT NOT NULL,
    draw INTEGER NOT NULL,
    prompt_hash TEXT NOT NULL,
    answer_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (sample_id, grader_hash, draw),
    FOREIGN KEY (grader_hash, prompt_hash, answer_hash, draw)
        REFERENCES verdicts (grader_hash, prompt_hash, answer_hash, draw)
);
"""


def upgrade_hint(path: Path) -> str:
    """The one line that sends a version-1 store to ``relaxbench store upgrade``."""
    folder = path.parent if path.name == STORE_NAME else path
    return (f"{path}: a version-1 results store; this relaxbench reads version {SCHEMA_VERSION}: run "
            f"`relaxbench store upgrade {folder}` once (it converts the store in place, keeping the original "
            "beside it)")


@dataclass(frozen=True)
class CellDefinition:
    """What a cell is, as stored; a rerun must define the same cell the same way."""

    task: str
    arm: str
    position: int
    is_baseline: bool
    method: str
    policy: str
    lossless: bool
    knobs: Mapping[str, Any]
    method_spec: Mapping[str, Any]
    drafter: Mapping[str, Any] | None
    k: int
    decode: Mapping[str, Any]
    task_spec: Mapping[str, Any]
    scorer: str
    data_fingerprint: str


SampleKey = tuple[str, int, int]  # (item_id, turn, repeat)
VerdictKey = tuple[str, str, str, int]  # (grader_hash, prompt_hash, answer_hash, draw)
LIKELIHOOD_STOP_REASON = "likelihood"  # a target-alone sample: likelihoods, no generation

# how a column's Python value is written: JSON lists (no key order to fix), JSON objects (keys sorted), flags as 0/1,
# the rounds as their columnar JSON object
_LIST_COLUMNS = frozenset({"prompt_ids", "output_ids"})
_OBJECT_COLUMNS = frozenset({"score_details", "divergence", "engine_metrics"})
_FLAG_COLUMNS = frozenset({"passed", "matches_baseline"})
_ROUNDS_COLUMN = "rounds"


@dataclass(frozen=True)
class SampleRow:
    """One row of ``samples``, with Python values: the one type the runner writes and the analysis reads. Field
    names are the column names, in the table's order; ``to_columns``/``from_columns`` are the only translation to
    and from SQLite."""

    cell_id: int
    session_id: int
    item_id: str
    item_index: int
    turn: int
    repeat: int
    category: str | None
    created_at: str
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    output_text: str
    stop_reason: str
    n_prompt_tokens: int
    n_output_tokens: int
    n_rounds: int
    n_drafted: int
    n_accepted: int
    n_relaxed: int
    time_total: float
    time_prefill: float
    time_draft: float
    time_verify: float
    time_policy: float
    rounds: Rounds  # every declared per-round field by name (decoding/records.ROUND_FIELDS)
    score: float | None
    passed: bool | None
    score_details: Mapping[str, Any]
    matches_baseline: bool | None
    divergence: Mapping[str, Any] | None
    seed: int | None = None  # the seed of the sample's random stream (see TaskJob.sample_seed)
    forced_tokens: int | None = None  # the forced end-of-thinking text's tokens in output_ids (None: none)
    # the vLLM engine's (None for relaxbench's own loop): latency beyond time_total (arrival to finish) and
    # time_prefill, the batch it ran in, and vLLM's own per-request spec-decode metrics
    time_to_first_token: float | None = None
    time_per_output_token: float | None = None
    concurrency: int | None = None
    engine_metrics: Mapping[str, Any] | None = None
    sample_id: int | None = None  # assigned by the store

    @classmethod
    def from_generation(cls, result: GenerationResult, *, cell_id: int, session_id: int, item_id: str,
                        item_index: int, turn: int, repeat: int, category: str | None, score: float | None,
                        passed: bool | None, score_details: Mapping[str, Any], matches_baseline: bool | None = None,
                        divergence: Mapping[str, Any] | None = None, seed: int | None = None) -> SampleRow:
        """The row of one scored generation: its counters, rounds and timings."""
        rounds, counters = result.rounds, result.counters
        return cls(
            cell_id=cell_id, session_id=session_id, item_id=item_id, item_index=item_index, turn=turn, repeat=repeat,
            category=category, created_at=now(), prompt_ids=tuple(result.prompt_ids),
            output_ids=tuple(result.output_ids), output_text=result.text, stop_reason=result.stop_reason,
            n_prompt_tokens=len(result.prompt_ids), n_output_tokens=len(result.output_ids), n_rounds=counters.rounds,
            n_drafted=counters.drafted, n_accepted=counters.accepted, n_relaxed=counters.relaxed,
            time_total=result.time_total, time_prefill=result.time_prefill, time_draft=sum(rounds.t_draft, 0.0),
            time_verify=sum(rounds.t_verify, 0.0), time_policy=sum(rounds.t_policy, 0.0), rounds=rounds.frozen(),
            score=score, passed=passed, score_details=score_details, matches_baseline=matches_baseline,
            divergence=divergence, seed=seed, forced_tokens=result.forced_tokens or None)

    @classmethod
    def likelihood_only(cls, seconds: float, *, cell_id: int, session_id: int, item_id: str, item_index: int,
                        category: str | None, score: float | None, passed: bool | None,
                        score_details: Mapping[str, Any]) -> SampleRow:
        """A document the target alone scored by likelihoods: no tokens, no rounds; ``seconds`` (the likelihood
        forwards) is both its prefill and its total time."""
        nothing = GenerationResult([], [], "", LIKELIHOOD_STOP_REASON, RoundLog(), seconds, seconds)
        return cls.from_generation(nothing, cell_id=cell_id, session_id=session_id, item_id=item_id,
                                   item_index=item_index, turn=0, repeat=0, category=category, score=score,
                                   passed=passed, score_details=score_details)

    @classmethod
    def from_columns(cls, row: Mapping[str, Any]) -> SampleRow:
        """A row as SQLite returns it (``sqlite3.Row`` or a mapping of column names)."""
        values = {}
        for f in fields(cls):
            value = row[f.name]
            if value is None:
                pass
            elif f.name == _ROUNDS_COLUMN:
                value = Rounds.from_json(value)
            elif f.name in _LIST_COLUMNS:
                value = tuple(json.loads(value))
            elif f.name in _OBJECT_COLUMNS:
                value = json.loads(value)
            elif f.name in _FLAG_COLUMNS:
                value = bool(value)
            values[f.name] = value
        return cls(**values)

    def to_columns(self) -> dict[str, Any]:
        """Column name → SQLite value (``sample_id`` only once the store assigned one)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                if f.name == "sample_id":
                    continue
            elif f.name == _ROUNDS_COLUMN:
                value = value.to_json()
            elif f.name in _LIST_COLUMNS:
                value = json.dumps(list(value))
            elif f.name in _OBJECT_COLUMNS:
                value = dumps(value)
            elif f.name in _FLAG_COLUMNS:
                value = int(value)
            out[f.name] = value
        return out

    @property
    def key(self) -> SampleKey:
        return (self.item_id, self.turn, self.repeat)

    @property
    def counters(self) -> Counters:
        """This sample's counters: the stored totals (emitted: the output's tokens less any forced by a thinking
        budget), and per-position counts from its rounds."""
        accepted_at, drafted_at = per_position(self.rounds.drafted or (), self.rounds.accepted or ())
        return Counters(self.n_output_tokens - (self.forced_tokens or 0), self.n_rounds, self.n_drafted,
                        self.n_accepted, self.n_relaxed, accepted_at, drafted_at)


class Store(SQLiteFile):
    """A results store. ``Store(path)`` opens it for writing and creates the schema when the file is new;
    ``Store(path, read_only=True)`` (summary, report, rescore's reading) writes nothing, ever."""

    what = "relaxbench results store"

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        super().__init__(path, read_only)
        version = self._schema_version()
        if version is None and read_only:
            self.close()
            raise DataError(f"{self.path}: not a relaxbench results store (no schema in it; a run killed before "
                            "its first commit leaves none); it is left as it is")
        if version == 1:
            self.close()
            raise DataError(upgrade_hint(self.path))
        if version is not None and version != SCHEMA_VERSION:
            self.close()
            raise DataError(f"{self.path}: store schema version {version}, this relaxbench reads {SCHEMA_VERSION}")
        if version is None:
            if self.has_table_any():
                self.close()
                raise DataError(f"{self.path}: not a relaxbench results store (it holds other tables); choose "
                                "another --out")
            create_schema(self.conn)

    @classmethod
    def check_writable(cls, path: str | Path) -> None:
        """``SQLiteFile.check_writable``, and a store of an earlier schema version refused (before expensive work)."""
        super().check_writable(path)
        path = Path(path)
        if path.is_file() and path.stat().st_size:
            probe = SQLiteFile(path, read_only=True)
            try:
                version = schema_version(probe)
            finally:
                probe.close()
            if version == 1:
                raise DataError(upgrade_hint(path))

    def _schema_version(self) -> int | None:
        return schema_version(self)

    def __enter__(self) -> Store:
        return self

    # ------------------------------------------------------------------------------------------ runs, sessions

    def open_run(self, run_key: str, target: str, draft: str | None, suite: Mapping[str, Any]) -> int:
        """The run with this key (created when new); its suite record is updated to the latest invocation."""
        with self.transaction() as conn:
            row = conn.execute("SELECT run_id FROM runs WHERE run_key=?", (run_key,)).fetchone()
            if row:
                conn.execute("UPDATE runs SET updated_at=?, suite_json=? WHERE run_id=?",
                             (now(), dumps(suite), row["run_id"]))
                return int(row["run_id"])
            cur = conn.execute("INSERT INTO runs (run_key, created_at, updated_at, target, draft, suite_json) "
                               "VALUES (?, ?, ?, ?, ?, ?)", (run_key, now(), now(), target, draft, dumps(suite)))
            return int(cur.lastrowid)

    def start_session(self, run_id: int, env: Mapping[str, Any]) -> int:
        columns = ("git_revision", "device", "target_dtype", "draft_dtype", "threads", "cpu_model", "python",
                   "torch", "transformers", "relaxbench")
        with self.transaction() as conn:
            cur = conn.execute(
                f"INSERT INTO environment (run_id, started_at, status, command, {', '.join(columns)}, "
                f"environment_json) VALUES (?, ?, 'running', ?, {', '.join('?' * len(columns))}, ?)",
                (run_id, now(), str(env.get("command", "")), *(env.get(c) for c in columns), dumps(env)))
            return int(cur.lastrowid)

    def finish_session(self, session_id: int, status: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE environment SET finished_at=?, status=? WHERE session_id=?",
                         (now(), status, session_id))

    def mark_started(self, session_id: int) -> None:
        """Count a generation as started, committed before it runs (so a kill shows what was in flight)."""
        with self.transaction() as conn:
            conn.execute("UPDATE environment SET n_started = n_started + 1 WHERE session_id=?", (session_id,))

    # ------------------------------------------------------------------------------------------ cells

    def ensure_cell(self, run_id: int, cell: CellDefinition) -> int:
        """The cell's id, created when new. An existing cell defined differently (changed data, method or task
        file) is an error: mixing its old samples with new ones would be wrong."""
        values = {
            "position": cell.position, "is_baseline": int(cell.is_baseline), "method": cell.method,
            "policy": cell.policy, "lossless": int(cell.lossless), "knobs_json": dumps(cell.knobs),
            "method_json": dumps(cell.method_spec),
            "drafter_json": None if cell.drafter is None else dumps(cell.drafter), "k": cell.k,
            "decode_json": dumps(cell.decode), "task_json": dumps(cell.task_spec), "scorer": cell.scorer,
            "data_fingerprint": cell.data_fingerprint,
        }
        with self.transaction() as conn:
            row = conn.execute("SELECT * FROM cells WHERE run_id=? AND task=? AND arm=?",
                               (run_id, cell.task, cell.arm)).fetchone()
            if row is None:
                cur = conn.execute(
                    f"INSERT INTO cells (run_id, task, arm, {', '.join(values)}) "
                    f"VALUES (?, ?, ?, {', '.join('?' * len(values))})", (run_id, cell.task, cell.arm, *values.values()))
                return int(cur.lastrowid)
            changed = [key for key in ("data_fingerprint", "method_json", "decode_json", "task_json", "drafter_json")
                       if row[key] != values[key]]
            if changed:
                what = "data" if changed[0] == "data_fingerprint" else changed[0].removesuffix("_json")
                raise DataError(f"{self.path}: cell {cell.task}/{cell.arm} was run with a different {what}; "
                                "use another --out folder for the changed setup")
            return int(row["cell_id"])

    def done_keys(self, cell_id: int) -> set[SampleKey]:
        rows = self.conn.execute("SELECT item_id, turn, repeat FROM samples WHERE cell_id=?", (cell_id,))
        return {(r["item_id"], int(r["turn"]), int(r["repeat"])) for r in rows}

    def sample(self, cell_id: int, key: SampleKey) -> SampleRow | None:
        row = self.conn.execute("SELECT * FROM samples WHERE cell_id=? AND item_id=? AND turn=? AND repeat=?",
                                (cell_id, *key)).fetchone()
        return None if row is None else SampleRow.from_columns(row)

    def samples(self, cell_id: int) -> list[SampleRow]:
        """A cell's samples in data order (item, turn, repeat)."""
        return [SampleRow.from_columns(row) for row in self.conn.execute(
            "SELECT * FROM samples WHERE cell_id=? ORDER BY item_index, turn, repeat", (cell_id,))]

    def samples_of_items(self, cell_ids: Iterable[int], item_ids: Iterable[str]) -> list[SampleRow]:
        """The samples of these cells for these items (what a shard of them starts from)."""
        cells, items = list(cell_ids), list(item_ids)
        if not cells or not items:
            return []
        return [SampleRow.from_columns(row) for row in self.conn.execute(
            f"SELECT * FROM samples WHERE cell_id IN ({', '.join('?' * len(cells))}) "
            f"AND item_id IN ({', '.join('?' * len(items))})", (*cells, *items))]

    def add_sample(self, row: SampleRow) -> None:
        """Insert one finished sample and commit it."""
        columns = row.to_columns()
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO samples ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                         tuple(columns.values()))

    def add_machine_profile(self, session_id: int, profile: Mapping[str, Any]) -> None:
        """The cost profile of this machine measured in ``session_id`` (a profile file's mapping), stored with the
        session's run."""
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO machine_profiles (session_id, run_id, created_at, profile_json) "
                         "SELECT session_id, run_id, ?, ? FROM environment WHERE session_id=?",
                         (now(), dumps(profile), session_id))

    def machine_profile(self, run_id: int) -> dict[str, Any] | None:
        """The latest session's machine profile of the run (None when no session measured one)."""
        row = self.conn.execute("SELECT profile_json FROM machine_profiles WHERE run_id=? "
                                "ORDER BY session_id DESC LIMIT 1", (run_id,)).fetchone()
        return None if row is None else json.loads(row["profile_json"])

    # ------------------------------------------------------------------------------------------ grading

    def ensure_grader(self, grader_hash: str, identity: Mapping[str, Any], description: Mapping[str, Any]) -> None:
        """Record a grader (its description is updated to the latest wording)."""
        with self.transaction() as conn:
            conn.execute("INSERT INTO graders (grader_hash, identity_json, description_json, created_at) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (grader_hash) DO UPDATE SET description_json="
                         "excluded.description_json", (grader_hash, dumps(identity), dumps(description), now()))

    def cached_verdict(self, key: VerdictKey) -> sqlite3.Row | None:
        """The cached verdict for (grader, prompt, answer, draw), if any."""
        return self.conn.execute("SELECT * FROM verdicts WHERE grader_hash=? AND prompt_hash=? AND answer_hash=? "
                                 "AND draw=?", key).fetchone()

    def graded_sample_ids(self, grader_hash: str, draw: int) -> set[int]:
        """Samples that already have a verdict of this grader for this draw."""
        return {int(r["sample_id"]) for r in self.conn.execute(
            "SELECT sample_id FROM sample_verdicts WHERE grader_hash=? AND draw=?", (grader_hash, draw))}

    def add_verdict(self, key: VerdictKey, prompt_name: str, messages: Any, verdict: str, rating: float,
                    score: float | None, seconds: float, attempts: int, sample_ids: Iterable[int]) -> None:
        """Cache one verdict and link it to the samples it grades, in one transaction."""
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO verdicts (grader_hash, prompt_hash, answer_hash, draw, prompt_name, "
                         "messages_json, verdict, rating, score, seconds, attempts, created_at) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (*key, prompt_name, json.dumps(messages), verdict, rating, score, seconds, attempts, now()))
            self._link(conn, key, sample_ids)

    def link_verdict(self, key: VerdictKey, sample_ids: Iterable[int]) -> None:
        """Link a cached verdict to more samples (a cache hit)."""
        with self.transaction() as conn:
            self._link(conn, key, sample_ids)

    @staticmethod
    def _link(conn: sqlite3.Connection, key: VerdictKey, sample_ids: Iterable[int]) -> None:
        grader, prompt, answer, draw = key
        conn.executemany("INSERT OR REPLACE INTO sample_verdicts (sample_id, grader_hash, draw, prompt_hash, "
                         "answer_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                         [(sample_id, grader, draw, prompt, answer, now()) for sample_id in sample_ids])

    # ------------------------------------------------------------------------------------------ reading

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return list(self.conn.execute(sql, params))


def schema_version(file: SQLiteFile) -> int | None:
    """The schema version an open store records (None: no schema in it)."""
    if not file.has_table("meta"):
        return None
    row = file.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row else None


def create_schema(conn: sqlite3.Connection) -> None:
    """Write the whole schema and its version into an empty database, in one transaction (a kill leaves none of it)."""
    conn.execute("BEGIN")
    try:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def open_store(out_dir: str | Path) -> Store:
    return Store(Path(out_dir) / STORE_NAME)
