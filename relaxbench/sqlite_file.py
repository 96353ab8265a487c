"""One SQLite file as relaxbench opens its stores (the results store, the judge-mining store).

Writable: WAL (a reader never blocks the writer; a killed process loses at most its open transaction),
``synchronous=NORMAL``, foreign keys on, rows by column name. Read-only (``summary``, ``report``, the reading part of
``rescore``): opened with SQLite's ``mode=ro``, so nothing — no schema, no checkpoint — is ever written into the
file or its WAL, whatever state a kill left them in. Either way the file is checked at open (``PRAGMA
quick_check``): a damaged store is reported as damaged and left untouched, and every file-system failure (a
folder that cannot be created, a read-only file or folder, a file that is not SQLite) is one line naming the path
and what to do.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relaxbench.errors import DataError
from relaxbench.paths import check_can_write

SQLITE_HEADER = b"SQLite format 3\x00"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _header(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER))
    except OSError:
        return None


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


_WAL_HEADER, _FRAME_HEADER = 32, 24
_noted: set[str] = set()


def _note_once(message: str) -> None:
    """A notice a reader prints once per process (a command may open one store several times)."""
    if message not in _noted:
        _noted.add(message)
        print(f"relaxbench: note: {message}", file=sys.stderr)


def _wal_checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_damage(wal: bytes) -> str | None:
    """What is wrong with a WAL, in words (None when nothing is): its header cut or damaged, its end cut inside a
    frame, or a frame of the current generation whose checksum fails. SQLite reads the frames before such a
    point and drops the rest silently; frames of an earlier generation (other salts) and a transaction left
    open are how a WAL normally looks, not damage."""
    if not wal:
        return None
    if len(wal) < _WAL_HEADER:
        return f"its header is cut ({len(wal)} of {_WAL_HEADER} bytes), so none of it is read"
    magic, _, page_size, _, salt1, salt2, c0, c1 = struct.unpack(">8I", wal[:_WAL_HEADER])
    big = bool(magic & 1)
    if magic not in (0x377F0682, 0x377F0683) or page_size < 512 or page_size & (page_size - 1) \
            or _wal_checksum(wal[:24], 0, 0, big) != (c0, c1):
        return "its header is damaged, so none of it is read"
    frame, offset, s0, s1, index = _FRAME_HEADER + page_size, _WAL_HEADER, c0, c1, 0
    while offset + frame <= len(wal):
        header = wal[offset:offset + _FRAME_HEADER]
        _, _, f_salt1, f_salt2, f0, f1 = struct.unpack(">6I", header)
        if (f_salt1, f_salt2) != (salt1, salt2):
            return None  # an earlier generation's frames: SQLite stops here by design
        s0, s1 = _wal_checksum(header[:8], s0, s1, big)
        s0, s1 = _wal_checksum(wal[offset + _FRAME_HEADER:offset + frame], s0, s1, big)
        index += 1
        if (s0, s1) != (f0, f1):
            return f"frame {index} is damaged, so only the transactions committed before it are read"
        offset += frame
    if offset < len(wal):
        return (f"it ends inside frame {index + 1} ({len(wal):,} bytes, not whole frames), so only the transactions "
                "committed before the cut are read")
    return None


class SQLiteFile:
    """A SQLite store file. Subclasses add their schema and queries; ``what`` names the kind of store in errors."""

    what = "SQLite store"
    flag = "--out"  # the option that names the store, for the messages

    def __init__(self, path: str | Path, read_only: bool = False, flag: str | None = None) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.flag = flag or type(self).flag
        if read_only:
            self._wal_damage: str | None = None
            self.conn = self._open_read_only()
            self._check_intact()
            if self._wal_damage is not None:
                _note_once(f"{self.path}: its WAL was cut or damaged (a killed run or a partial copy leaves it so): "
                           f"{self._wal_damage}")
        else:
            self.check_writable(self.path)  # an existing file is checked read-only first: nothing is written to
            self._prepare_folder()          # a damaged store, not even the checkpoint a writer's close runs
            self.conn = self._open_writable()
        self.conn.row_factory = sqlite3.Row

    # -- opening ---------------------------------------------------------------------------------------------
    def _prepare_folder(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(f"{self.path.parent}: cannot create the folder ({exc.strerror}); choose another "
                            f"{self.flag}") from None

    def _open_writable(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30)
            conn.execute("SELECT 1 FROM sqlite_master").fetchone()  # a file that is not SQLite fails here
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # durable across a killed process, fast
            conn.execute("PRAGMA foreign_keys=ON")
            return conn
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def _open_read_only(self) -> sqlite3.Connection:
        """Open without writing anything beside the store. With no WAL beside it, the file alone is the store: it
        is opened ``immutable`` (no lock, no ``-shm``, no ``-wal`` created, a read-only file system is fine). With
        a WAL (a run writing now, or one a kill stopped), the file and its WAL are copied — the WAL first, so what
        a concurrent checkpoint moves into the file is in one copy or the other — into a private folder and that
        copy is read; a WAL cut short is said in one line on stderr, with what could be read."""
        if self.path.is_dir():
            raise DataError(f"{self.path}: is a folder, not a {self.what} file")
        if not self.path.is_file():
            raise DataError(f"{self.path}: no {self.what} here")
        wal = _wal(self.path)
        if self.path.stat().st_size == 0 and not (wal.exists() and wal.stat().st_size):  # nothing is in it
            raise DataError(f"{self.path}: an empty file (0 bytes), not a {self.what}; it is left as it is")
        try:
            if wal.exists():
                source = self._snapshot(wal)
                uri = f"{source.as_uri()}?mode=ro"
            else:
                uri = f"{self.path.resolve().as_uri()}?mode=ro&immutable=1"
            conn = sqlite3.connect(uri, uri=True, timeout=30)
            conn.execute("SELECT 1 FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def _snapshot(self, wal: Path) -> Path:
        """The store and its WAL copied into a private temporary folder (removed at ``close``); the copy's path."""
        import shutil
        import tempfile

        self._copy = tempfile.TemporaryDirectory(prefix="relaxbench-read-")
        copy = Path(self._copy.name) / self.path.name
        try:
            shutil.copyfile(wal, _wal(copy))
            shutil.copyfile(self.path, copy)
        except OSError as exc:
            raise DataError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        self._wal_damage = wal_damage(_wal(copy).read_bytes())  # said once the store has opened
        return copy

    @classmethod
    def check_writable(cls, path: str | Path) -> None:
        """Before expensive work: the store at ``path`` can be written (its folder, the file) and, if present, is
        intact. Nothing is created or written."""
        path = Path(path)
        check_can_write(path.parent, cls.flag, folder=True)
        check_can_write(path, cls.flag)
        if path.exists() and (path.stat().st_size or _wal(path).exists()):
            probe = SQLiteFile(path, read_only=True, flag=cls.flag)
            probe.close()

    def _check_intact(self) -> None:
        """``PRAGMA quick_check``: a store with damaged pages is refused at open, before anything reads or writes."""
        try:
            result = [row[0] for row in self.conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as exc:
            self.close()
            raise self._error(exc) from None
        if result != ["ok"]:
            self.close()
            raise DataError(f"{self.path}: damaged ({result[0]}); it is left as it is: restore it from a copy, or "
                            f"start a new {self.flag}")
        wal = _wal(self.path)
        if not self.has_table_any() and wal.exists() and wal.stat().st_size > 0:
            self.close()  # SQLite reads nothing from the WAL: opening it for writing would reset it
            raise DataError(f"{self.path}: damaged (its WAL, {wal.stat().st_size} bytes, holds nothing SQLite can "
                            "read); both are left as they are: restore them from a copy, or start a new "
                            f"{self.flag}")

    def _error(self, exc: sqlite3.DatabaseError) -> DataError:
        """The one line for a SQLite failure at open: read-only, damaged, or not SQLite at all."""
        message = str(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        if "readonly" in message or code == sqlite3.SQLITE_READONLY or not os.access(self.path, os.W_OK) \
                and self.path.exists() and not self.read_only:
            return DataError(f"{self.path}: read-only ({message}); make it writable or choose another {self.flag}")
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in message:
            needs = "readable" if self.read_only else "readable and writable"
            return DataError(f"{self.path}: cannot open ({message}); check that it and its folder are {needs}")
        header = _header(self.path)
        if header is not None and header == SQLITE_HEADER:
            return DataError(f"{self.path}: damaged ({message}); it is left as it is: restore it from a copy, or "
                             f"start a new {self.flag}")
        return DataError(f"{self.path}: not a {self.what} ({message})")

    # -- use ---------------------------------------------------------------------------------------------------
    def has_table_any(self) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None

    def has_table(self, name: str) -> bool:
        row = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
        return row is not None

    def close(self) -> None:
        self.conn.close()
        copy = getattr(self, "_copy", None)
        if copy is not None:
            copy.cleanup()
            self._copy = None

    def __enter__(self) -> SQLiteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.conn:
            yield self.conn


class WriterLock:
    """One writer per store: an exclusive ``flock`` on ``<store>.lock`` beside it, held while a command writes.

    The operating system releases the lock when its process ends, however it ends (a SIGKILL included), so a
    killed run never leaves a store locked; the file itself stays beside a store. It holds who has the lock — pid,
    host, start time, command — so a second writer is refused at once with a line that names the running one. A
    command that fails before it writes a store (an unreachable cluster, a model that does not load) leaves nothing:
    the folder the lock created and the lock file go. A lock taken on a file that was removed meanwhile is retaken on
    the new one, so two writers never hold two files of one name."""

    def __init__(self, store_path: str | Path, command: str) -> None:
        self.store = Path(store_path)
        self.path = self.store.with_name(self.store.name + ".lock")
        self.command = command
        self.fd: int | None = None
        self.created: Path | None = None  # the topmost folder this lock created, if any

    def acquire(self) -> WriterLock:
        import socket

        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(f"{self.path}: cannot create the store's lock file ({exc.strerror}); choose a writable "
                            "--out") from None
        self.created = missing[-1] if missing else None
        fd = self._lock_current_file()
        os.ftruncate(fd, 0)
        os.write(fd, dumps({"pid": os.getpid(), "host": socket.gethostname(), "started_at": now(),
                            "command": self.command}).encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def _lock_current_file(self) -> int:
        """The lock file's descriptor, flocked, and still the file of that name (a release may remove it)."""
        import fcntl

        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise DataError(f"{self.path}: cannot create the store's lock file ({exc.strerror}); choose a "
                                "writable --out") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _holder(fd)
                os.close(fd)
                raise DataError(f"{self.path.with_suffix('')}: already being written by {holder}; wait for it to "
                                "end or give another --out") from None
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)  # removed (or replaced) between the open and the lock: take the current one

    def release(self) -> None:
        if self.fd is None:
            return
        if not self.store.exists():  # nothing was written: leave nothing behind (removed while still locked)
            self.path.unlink(missing_ok=True)
            if self.created is not None:
                for folder in (self.path.parent, *self.path.parent.parents):
                    try:
                        folder.rmdir()  # only while empty
                    except OSError:
                        break
                    if folder == self.created:
                        break
        os.close(self.fd)  # closing the descriptor releases the flock
        self.fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote into the lock file."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 65536).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process (starting: it has not written its details yet)"
    return (f"pid {info.get('pid')} on {info.get('host')} since {info.get('started_at')} "
            f"({str(info.get('command', ''))[:120]})")
