"""The sandbox against adversarial programs: each is scored as a failure, the harness stays alive and correct, and
nothing outside is touched. Every program is written to stop by itself (bounded loops, forks, allocations) so
that a containment failure cannot take the machine down."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

from relaxbench.scoring.sandbox import Limits, processes_of, run_python, sandbox_uid

LIMITS = Limits(wall_seconds=6, cpu_seconds=2, memory_mb=512, max_processes=16, max_output_bytes=1 << 20)
ROOT = os.geteuid() == 0


def run(source: str, limits: Limits = LIMITS):
    result = run_python(textwrap.dedent(source), limits)
    # the harness is alive (we are here), and nothing of the program survives it
    if ROOT:
        assert processes_of(sandbox_uid()) == [], "a sandboxed process outlived its run"
    return result


def test_correct_code_passes_and_wrong_code_fails():
    assert run("assert sum([1, 2, 3]) == 6\nprint('fine')").passed
    result = run("assert sum([1, 2, 3]) == 7")
    assert not result.passed and result.status == "error" and "AssertionError" in result.stderr


@pytest.mark.skipif(not ROOT, reason="the privilege drop applies when running as root")
def test_runs_unprivileged_in_fresh_namespaces():
    result = run("import os; print(os.getuid(), os.getgid(), os.getgroups(), os.getcwd())")
    assert result.passed, result
    uid, gid, groups, cwd = result.stdout.split(maxsplit=3)
    facts = result.containment
    assert int(uid) == facts["uid"] != 0 and int(gid) == facts["gid"] != 0 and groups == "[]"
    assert facts["dropped_privileges"] and facts["network_ns"] and facts["pid_ns"] and facts["mount_ns"]
    assert cwd.strip() == facts["workdir"]


def test_infinite_loop_is_stopped():
    started = time.perf_counter()
    result = run("""
        import time
        end = time.time() + 60  # stops by itself after a minute if the limits fail
        while time.time() < end:
            pass
        """)
    assert not result.passed and result.status in ("cpu-limit", "timeout")
    assert time.perf_counter() - started < LIMITS.wall_seconds + 5


def test_sleeping_forever_hits_the_wall_clock():
    result = run("import time; time.sleep(30)", Limits(wall_seconds=1.5))
    assert result.status == "timeout" and not result.passed and result.wall_seconds < 5


def test_fork_bomb_is_capped_by_the_process_limit():
    # a tree of forks, 3 per process and 5 levels deep: 364 processes alive at once if nothing stops it (each
    # parent waits for its children, leaves sleep 3 s), all gone within seconds by themselves. A failed fork
    # anywhere in the tree reaches the root through the exit codes, so the outcome does not depend on whether the
    # root's own first forks happen before its descendants reach the limit.
    result = run("""
        import os, sys, time
        def bomb(depth):
            children, ok = [], True
            for _ in range(3):
                try:
                    pid = os.fork()
                except OSError:
                    ok = False
                    break
                if pid == 0:
                    child_ok = bomb(depth - 1) if depth > 1 else (time.sleep(3) or True)
                    os._exit(0 if child_ok else 1)
                children.append(pid)
            for pid in children:
                ok = os.waitpid(pid, 0)[1] == 0 and ok
            return ok
        ok = bomb(5)
        print("whole tree forked" if ok else "a fork failed", flush=True)
        sys.exit(0 if ok else 1)
        """)
    assert not result.passed
    if ROOT:
        assert result.containment["dropped_privileges"]


@pytest.mark.skipif(not ROOT, reason="checks RLIMIT_NPROC as enforced after the privilege drop")
def test_process_limit_really_holds():
    result = run("""
        import os, time
        children = []
        for _ in range(40):  # bounded
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(2)
                os._exit(0)
            children.append(pid)
        print(len(children))
        """)
    assert result.passed, result
    assert int(result.stdout) < LIMITS.max_processes  # the program itself counts as one


def test_memory_hog_fails():
    result = run("""
        chunks = []
        for _ in range(32):  # at most 2 GiB, then it stops by itself
            chunks.append(b"x" * (64 << 20))
        print("allocated", len(chunks) * 64, "MiB")
        """, Limits(wall_seconds=10, cpu_seconds=5, memory_mb=256))
    assert not result.passed and "MemoryError" in result.stderr


def test_writing_outside_the_work_dir_fails(tmp_path: Path):
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    outside = [open_dir / "escaped.txt", Path.cwd() / "escaped-from-sandbox.txt",
               Path.home() / "escaped-from-sandbox.txt"]
    # the sandbox's /tmp and /var/tmp are private scratch space: writing there must not reach the host's
    scratch = [Path("/tmp") / f"relaxbench-escape-{os.getpid()}", Path("/var/tmp") / f"relaxbench-escape-{os.getpid()}"]
    result = run(f"""
        import sys
        def write(path):
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                return True
            except OSError as exc:
                print(path, exc)
                return False
        for path in {[str(t) for t in scratch]!r}:
            write(path)
        escaped = [path for path in {[str(t) for t in outside]!r} if write(path)]
        sys.exit(0 if escaped else 1)
        """)
    assert not result.passed
    for target in outside + scratch:
        assert not target.exists(), target


def test_deleting_files_fails(tmp_path: Path):
    victim_dir = tmp_path / "victims"
    victim_dir.mkdir()
    victim_dir.chmod(0o777)
    victim = victim_dir / "precious.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)
    result = run(f"""
        import os, shutil, sys
        deleted = False
        for action in (lambda: os.remove({str(victim)!r}), lambda: shutil.rmtree({str(victim_dir)!r})):
            try:
                action()
                deleted = True
            except OSError as exc:
                print(exc)
        sys.exit(0 if deleted else 1)
        """)
    assert not result.passed
    assert victim.read_text() == "keep me"


def test_network_is_unreachable():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:  # loopback only
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        result = run(f"""
            import socket, sys
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            except OSError as exc:
                print(exc)
                sys.exit(1)
            sys.exit(0)
            """)
        listener.settimeout(0.2)
        with pytest.raises(socket.timeout):
            listener.accept()
    assert not result.passed


def test_killing_the_parent_fails():
    harness = os.getpid()
    result = run(f"""
        import os, signal, sys
        hit = []
        # SIGTERM for the harness: if containment failed, the test run ends visibly; nothing else is touched
        for pid, sig in ((os.getppid(), signal.SIGKILL), ({harness}, signal.SIGTERM)):
            if pid <= 1:
                continue
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except OSError as exc:
                print(pid, exc)
        sys.exit(0 if hit else 1)
        """)
    assert not result.passed
    assert run("print('still serving')").passed  # the harness is alive and still correct


def test_harness_environment_is_invisible(monkeypatch):
    secret = f"s3cret-{os.getpid()}-{time.time_ns()}"
    monkeypatch.setenv("RELAXBENCH_TEST_SECRET", secret)
    harness = os.getpid()
    result = run(f"""
        import os, sys
        seen = " ".join(os.environ.values())
        for pid in (os.getppid(), 1, {harness}):
            try:
                with open(f"/proc/{{pid}}/environ", "rb") as f:
                    seen += f.read().decode(errors="replace")
            except OSError as exc:
                print(exc)
        sys.exit(0 if {secret!r} in seen else 1)
        """)
    assert not result.passed
    assert secret not in result.stdout + result.stderr


def test_printing_megabytes_fails():
    result = run("""
        import sys
        for _ in range(20):  # 20 MiB, then it stops by itself
            sys.stdout.write("x" * (1 << 20))
        """)
    assert result.status == "output-limit" and not result.passed
    assert len(result.stdout) <= LIMITS.keep_output_bytes


def socket_folder() -> Path:
    """A folder outside every private tmpfs of the sandbox (/run for root: where daemons keep their sockets)."""
    import tempfile

    base = "/run" if ROOT else str(Path.home())
    folder = Path(tempfile.mkdtemp(prefix="relaxbench-sock-", dir=base))
    folder.chmod(0o755)
    return folder


def test_a_listening_unix_socket_outside_is_unreachable():
    """The network namespace does not cover filesystem sockets: a world-writable Unix socket on the (read-only)
    root would accept a connect. The seccomp filter refuses the socket itself; the listener sees nothing."""
    import shutil

    folder = socket_folder()
    path = folder / "daemon.sock"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            path.chmod(0o777)
            listener.listen(1)
            result = run(f"""
                import socket, sys
                try:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(2)
                    s.connect({str(path)!r})
                except OSError as exc:
                    print("refused:", exc)
                    sys.exit(1)
                print("connected")
                sys.exit(0)
                """)
            listener.settimeout(0.5)
            with pytest.raises(socket.timeout):
                listener.accept()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert not result.passed and "refused: [Errno 13]" in result.stdout, result
    assert result.containment["seccomp"] and result.containment["no_new_privs"]


def test_no_new_privs_and_the_filter_are_in_force():
    result = run("""
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print(status["NoNewPrivs"].strip(), status["Seccomp"].strip())
        import socket
        a, b = socket.socketpair()  # unnamed pairs reach nothing: allowed (multiprocessing uses them)
        a.sendall(b"x"); assert b.recv(1) == b"x"
        """)
    assert result.passed, result
    assert result.stdout.split() == ["1", "2"]  # no_new_privs on; seccomp mode 2 (filter)


@pytest.mark.skipif(not ROOT, reason="making a setuid-root binary needs root")
def test_a_setuid_binary_gains_nothing():
    """A setuid-root copy of the interpreter, on the root filesystem outside the private tmpfs: run from inside,
    it stays the sandbox's uid (nosuid mounts, and no_new_privs besides)."""
    import shutil

    from relaxbench.scoring.sandbox import sandbox_interpreter

    folder = socket_folder()
    binary = folder / "suid-python"
    try:
        shutil.copy2(os.path.realpath(sandbox_interpreter()), binary)
        os.chown(binary, 0, 0)
        binary.chmod(0o4755)
        result = run(f"""
            import subprocess
            out = subprocess.run([{str(binary)!r}, "-I", "-S", "-c", "import os; print(os.geteuid())"],
                                 capture_output=True, text=True, timeout=4)
            print(out.stdout.strip() or out.stderr.strip())
            """)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.passed, result
    assert result.stdout.strip() == str(result.containment["uid"]) != "0"
    assert result.containment["nosuid_mounts"]
