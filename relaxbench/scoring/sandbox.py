"""Run untrusted (generated) Python code: the only way the harness executes it.

Containment, from the outside in:

* a separate process tree started in a new session; the launcher (``jail.py``) is its own script, so nothing of
  the harness (imports, environment, open files) leaks into it;
* new mount, network and pid namespaces where the OS allows (``unshare``; a user namespace too when not root):
  no network interface is up, every mount is read-only and nosuid except private tmpfs scratch areas, and when
  the program's pid-1 init exits the kernel kills everything it left behind;
* as root, the program runs as an unprivileged uid/gid with no supplementary groups (root ignores RLIMIT_NPROC
  and file permissions); the uid is dedicated to this harness process, so the process limit counts only sandbox
  processes and the clean-up sweep cannot hit anyone else's;
* ``no_new_privs`` (no exec regains privileges: setuid bits and file capabilities are ignored) and a seccomp filter
  refusing ``socket(AF_UNIX, ...)`` and ``io_uring_setup``, since the network namespace does not cover
  filesystem sockets (a daemon's socket on the read-only root would accept a connect);
* resource limits: CPU seconds, address space, file size, number of processes, open files, no core dumps;
* a wall-clock timeout, after which the launcher's process group and the namespace's init are SIGKILLed, and an
  output cap (the program is killed once it has printed more than ``max_output_bytes``);
* a scrubbed environment (PATH, HOME, TMPDIR, LANG only) and ``python -I``.

Where the OS allows no namespaces the program still runs with the limits, the privilege drop and the timeout; the
``containment`` facts of every result say what was in force.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relaxbench.errors import RelaxbenchError

JAIL = Path(__file__).with_name("jail.py")
# A uid/gid that no account uses, dedicated to this harness process (see the module docstring).
SANDBOX_ID_BASE = 200_000


def sandbox_uid() -> int:
    return SANDBOX_ID_BASE + os.getpid() % 100_000


def _others_can_run(path: str) -> bool:
    """Whether a user with no rights of its own can execute ``path`` (o+x on the file and every folder above)."""
    real = Path(os.path.realpath(path))
    try:
        if not real.is_file() or not real.stat().st_mode & 0o001:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False


@functools.cache
def sandbox_interpreter() -> str:
    """The Python that runs generated code: the harness's own when the unprivileged sandbox user may execute it,
    else the system's (a virtual environment under a private home folder is out of its reach). Generated code
    needs only the standard library."""
    if os.geteuid() != 0:
        return sys.executable
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3", path="/usr/bin:/bin"),
                  shutil.which("python3", path="/usr/local/bin")]
    for candidate in candidates:
        if candidate and _others_can_run(candidate):
            return candidate
    raise SandboxError("no Python interpreter that an unprivileged user can execute (checked "
                       f"{', '.join(c for c in candidates if c)}); install python3 system-wide")


class SandboxError(RelaxbenchError):
    """The sandbox cannot be set up on this machine."""


@dataclass(frozen=True)
class Limits:
    """Per-program limits. The defaults fit unit-test style programs (HumanEval, MBPP)."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_processes: int = 32
    max_open_files: int = 256
    tmpfs_mb: int = 64
    max_output_bytes: int = 1 << 20  # beyond this the program is killed and fails
    keep_output_bytes: int = 16 << 10  # how much of stdout/stderr is kept in the result


@dataclass(frozen=True)
class ExecutionResult:
    """What one sandboxed program did. ``passed`` means: exited 0, within every limit."""

    # "ok", "error" (non-zero exit), "timeout", "cpu-limit", "file-size-limit", "killed", "output-limit",
    # "sandbox-error" (the launcher could not set the sandbox up)
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_seconds: float
    containment: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


# the launcher exits with 128 + signal when the program was killed by one
_SIGNAL_STATUS = {128 + signal.SIGXCPU: "cpu-limit", 128 + signal.SIGKILL: "killed", 128 + signal.SIGXFSZ: "file-size-limit"}


def run_python(source: str, limits: Limits = Limits(), interpreter: str | None = None) -> ExecutionResult:
    """Run ``source`` as a Python program in the sandbox and wait for it (at most ``limits.wall_seconds``)."""
    root = os.geteuid() == 0
    uid = sandbox_uid() if root else os.getuid()
    gid = uid if root else os.getgid()
    fallback_workdir = tempfile.mkdtemp(prefix="relaxbench-sandbox-")
    status_r, status_w = os.pipe()
    config = {
        "status_fd": status_w, "uid": uid, "gid": gid, "fallback_workdir": fallback_workdir,
        "interpreter": interpreter or sandbox_interpreter(), "cpu_seconds": limits.cpu_seconds,
        "memory_mb": limits.memory_mb, "file_size_mb": limits.file_size_mb, "max_processes": limits.max_processes,
        "max_open_files": limits.max_open_files, "tmpfs_mb": limits.tmpfs_mb,
    }
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(JAIL), json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(status_w,),
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/", start_new_session=True,
        )
    except BaseException:
        os.close(status_r)
        os.close(status_w)
        shutil.rmtree(fallback_workdir, ignore_errors=True)
        raise
    os.close(status_w)
    facts_raw = bytearray()
    try:
        status, stdout, stderr = _supervise(proc, source.encode(), status_r, facts_raw, limits, started)
    finally:
        _kill_everything(proc, status_r, facts_raw, uid if root else None)
        os.close(status_r)
        shutil.rmtree(fallback_workdir, ignore_errors=True)
    wall = time.perf_counter() - started
    facts = _parse_facts(facts_raw)
    facts.pop("init_pid", None)
    facts["interpreter"] = config["interpreter"]
    if "error" in facts and status == "error":
        status = "sandbox-error"
    elif status == "error" and proc.returncode in _SIGNAL_STATUS:
        status = _SIGNAL_STATUS[proc.returncode]
    return ExecutionResult(status, proc.returncode, stdout, stderr, wall, facts)


def _supervise(proc: subprocess.Popen, program: bytes, status_r: int, facts_raw: bytearray, limits: Limits,
               started: float) -> tuple[str, str, str]:
    """Feed the program, collect capped output and the launcher's facts, enforce the wall clock and output cap."""
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write(program)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    total = 0
    status = None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
    selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
    selector.register(status_r, selectors.EVENT_READ, "status")
    open_streams = 3
    deadline = started + limits.wall_seconds
    while open_streams:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            status = "timeout"
            break
        for key, _ in selector.select(timeout=min(remaining, 0.5)):
            fd = key.fd if key.data == "status" else key.fileobj.fileno()
            chunk = os.read(fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            if key.data == "status":
                facts_raw += chunk
                continue
            total += len(chunk)
            buffer = kept[key.data]
            buffer += chunk[: max(0, limits.keep_output_bytes - len(buffer))]
        if total > limits.max_output_bytes:
            status = "output-limit"
            break
    selector.close()
    if status is None:
        try:
            proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
            status = "ok" if proc.returncode == 0 else "error"
        except subprocess.TimeoutExpired:
            status = "timeout"
    return status, kept["stdout"].decode(errors="replace"), kept["stderr"].decode(errors="replace")


def _drain_status(status_r: int, into: bytearray) -> None:
    os.set_blocking(status_r, False)
    try:
        while chunk := os.read(status_r, 65536):
            into += chunk
    except BlockingIOError:
        pass


def _parse_facts(raw: bytes) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for line in raw.decode(errors="replace").splitlines():
        try:
            facts.update(json.loads(line))
        except json.JSONDecodeError:
            continue
    return facts


def _kill_everything(proc: subprocess.Popen, status_r: int, facts_raw: bytearray, uid: int | None) -> None:
    """SIGKILL the launcher's process group and the namespace's init (which takes the whole pid namespace with
    it); as root, also every process still running under the sandbox uid (escapees when there is no pid
    namespace)."""
    _drain_status(status_r, facts_raw)
    init_pid = _parse_facts(facts_raw).get("init_pid")
    for target in (lambda: os.killpg(proc.pid, signal.SIGKILL),
                   lambda: os.kill(int(init_pid), signal.SIGKILL) if init_pid else None):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    if uid is not None:
        for _ in range(3):
            if not kill_uid(uid):
                break
            time.sleep(0.05)


def processes_of(uid: int) -> list[int]:
    """Pids of live processes whose real uid is ``uid`` (read from /proc)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry.name))
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def kill_uid(uid: int) -> int:
    """SIGKILL every process of ``uid``; return how many were signalled."""
    killed = 0
    for pid in processes_of(uid):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed
