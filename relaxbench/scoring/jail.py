"""The sandbox launcher: run as its own script (``python -I -S jail.py CONFIG_JSON``), never imported by the harness.

It is the only code that runs between the harness and untrusted code, so it is stdlib-only and short. Steps:

1. read the program from stdin;
2. enter new namespaces where the OS allows: mount + network + pid (+ user when not root). The new network
   namespace has no interfaces up, so nothing (loopback included) can be reached;
3. fork an init: pid 1 of the new pid namespace, so when it exits the kernel kills every process left inside;
4. in the init: private tmpfs on /tmp, /var/tmp, /dev/shm, /run/lock; every other mount read-only and nosuid
   (a setuid binary gains nothing); a fresh /proc; a fresh work directory holding ``program.py``;
5. fork the program's process (pid 2, with ordinary signal semantics) and there set resource limits (CPU s, address space, file size, processes, open files, no core dumps);
6. as root, drop to an unprivileged uid/gid with no supplementary groups (root ignores RLIMIT_NPROC);
7. set ``no_new_privs`` (no exec can raise privileges again: setuid bits and file capabilities are ignored) and
   install a seccomp filter that refuses ``socket(AF_UNIX, ...)`` and ``io_uring_setup``: the network namespace
   does not cover filesystem sockets, so without it a program could connect to any Unix-domain socket it can
   reach on the read-only root (a daemon's ``/run/...sock``); socket pairs (``socketpair``) stay allowed;
8. exec the interpreter on the program with a scrubbed environment.

What was achieved is written as one JSON line to the status file descriptor before the exec (the harness records
it); the init waits for the program, and the launcher for the init; both exit with the program's status (128 + signal
number when it was killed). The launcher also reports the init's host pid, so the harness can kill it (and so the
whole namespace) even if the program left the process group.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import platform
import resource
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
AF_UNIX = 1
# per architecture: the seccomp audit arch, socket's and io_uring_setup's syscall numbers
SYSCALLS = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
# classic BPF: load a word of seccomp_data, jump if equal / greater or equal, return
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
RET_KILL, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EACCES, EPERM = 13, 1
X32_SYSCALL_BIT = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _unshare(flags: int) -> bool:
    return _libc.unshare(ctypes.c_int(flags)) == 0


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                     data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces(facts: dict) -> None:
    """Unshare as much as the OS allows, recording what worked."""
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    wanted = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (0 if root else CLONE_NEWUSER)
    for flags in (wanted, CLONE_NEWNET | (0 if root else CLONE_NEWUSER)):
        if _unshare(flags):
            if not root:  # map ourselves to root inside the user namespace, so we may mount
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {uid} 1")
                _write("/proc/self/gid_map", f"0 {gid} 1")
            facts.update(mount_ns=bool(flags & CLONE_NEWNS), network_ns=True, pid_ns=bool(flags & CLONE_NEWPID),
                         user_ns=bool(flags & CLONE_NEWUSER))
            return
    facts.update(mount_ns=False, network_ns=False, pid_ns=False, user_ns=False)


def private_filesystem(config: dict, facts: dict) -> str:
    """In the new mount namespace: read-only root, private tmpfs scratch areas, fresh /proc; return the work dir."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    try:
        _mount("none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        facts["root_read_only"] = True
    except OSError:
        facts["root_read_only"] = False
    facts["nosuid_mounts"] = nosuid_everywhere()
    size = f"size={config['tmpfs_mb']}m,mode=1777"
    for target in PRIVATE_TMP:
        if os.path.isdir(target):
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, size)
    if facts.get("pid_ns"):
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)
            facts["private_proc"] = True
        except OSError:
            facts["private_proc"] = False
    workdir = "/tmp/sandbox"
    os.mkdir(workdir, 0o700)
    return workdir


MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": 8, "noatime": 1024,
               "nodiratime": 2048, "relatime": 1 << 21}


def nosuid_everywhere() -> bool:
    """Remount every mount point read-only and nosuid, keeping its other flags (a mount's locked flags must be
    kept, or the kernel refuses the remount); True when every remount took."""
    ok = True
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        target = fields[4].encode().decode("unicode_escape")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        for option in fields[5].split(","):
            flags |= MOUNT_FLAGS.get(option, 0)
        try:
            _mount("none", target, None, flags)
        except OSError:
            ok = False
    return ok


def seccomp_filter() -> bytes | None:
    """The BPF program (``struct sock_filter`` array) refusing ``socket(AF_UNIX, ...)`` with EACCES and
    ``io_uring_setup`` with EPERM (io_uring can open sockets without the socket syscall); a foreign architecture's
    or x32 syscall kills the process. None on an architecture this table lacks."""
    arch = SYSCALLS.get(platform.machine())
    if arch is None:
        return None
    audit_arch, socket_nr, io_uring_nr = arch
    program = [
        (LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ, 1, 0, audit_arch),
        (RET, 0, 0, RET_KILL),
        (LD_ABS, 0, 0, 0),  # seccomp_data.nr
        (JGE, 5, 0, X32_SYSCALL_BIT),  # -> kill
        (JEQ, 5, 0, io_uring_nr),  # -> EPERM
        (JEQ, 1, 0, socket_nr),  # -> check the domain
        (RET, 0, 0, RET_ALLOW),
        (LD_ABS, 0, 0, 16),  # seccomp_data.args[0], its low 32 bits (little-endian): the domain
        (JEQ, 3, 2, AF_UNIX),  # -> EACCES, else allow
        (RET, 0, 0, RET_KILL),
        (RET, 0, 0, RET_ERRNO | EPERM),
        (RET, 0, 0, RET_ALLOW),
        (RET, 0, 0, RET_ERRNO | EACCES),
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def lock_down(facts: dict) -> None:
    """``no_new_privs``, then the seccomp filter (which needs it, unprivileged); what took goes into ``facts``."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    facts["no_new_privs"] = True
    program = seccomp_filter()
    if program is None:
        facts["seccomp"] = False
        return
    filters = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(filters))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    facts["seccomp"] = True


def set_limits(config: dict) -> None:
    cpu = int(config["cpu_seconds"])
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (config["memory_mb"] << 20,) * 2,
        resource.RLIMIT_FSIZE: (config["file_size_mb"] << 20,) * 2,
        resource.RLIMIT_NPROC: (config["max_processes"],) * 2,
        resource.RLIMIT_NOFILE: (config["max_open_files"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, value in limits.items():
        resource.setrlimit(which, value)


def exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def report(status_fd: int, facts: dict) -> None:
    os.write(status_fd, (json.dumps(facts) + "\n").encode())


def init(config: dict, program: bytes, status_fd: int, facts: dict) -> None:
    """pid 1 of the new pid namespace (or a plain child): prepare, start the program, wait. Never returns."""
    try:
        workdir = private_filesystem(config, facts) if facts["mount_ns"] else config["fallback_workdir"]
        path = os.path.join(workdir, "program.py")
        with open(path, "wb") as f:
            f.write(program)
        drop = os.geteuid() == 0 and not facts["user_ns"]
        if drop:
            os.chown(workdir, config["uid"], config["gid"])
            os.chown(path, config["uid"], config["gid"])
        pid = os.fork()
        if pid == 0:
            run_program(config, workdir, drop, status_fd, facts)
        os.close(status_fd)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(125)
        os._exit(exit_code(status))
    except BaseException as exc:  # report, then die: the harness scores this as a failure
        try:
            report(status_fd, {**facts, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(125)


def run_program(config: dict, workdir: str, drop: bool, status_fd: int, facts: dict) -> None:
    """The program's process: limits, privilege drop, exec. Never returns."""
    try:
        os.chdir(workdir)
        set_limits(config)
        if drop:
            os.setgroups([])
            os.setresgid(config["gid"], config["gid"], config["gid"])
            os.setresuid(config["uid"], config["uid"], config["uid"])
            if 0 in os.getresuid() or 0 in os.getresgid():
                raise RuntimeError("could not drop root")
        facts.update(uid=os.getuid(), gid=os.getgid(), dropped_privileges=drop, workdir=workdir)
        lock_down(facts)
        report(status_fd, facts)
        os.set_inheritable(status_fd, False)  # closed by a successful exec; an exec failure is still reported
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        interpreter = config["interpreter"]
        os.execve(interpreter, [interpreter, "-I", "program.py"], env)
    except BaseException as exc:
        try:
            report(status_fd, {**facts, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(125)


def main() -> int:
    config = json.loads(sys.argv[1])
    status_fd = int(config["status_fd"])
    program = sys.stdin.buffer.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    facts: dict = {}
    enter_namespaces(facts)
    pid = os.fork()
    if pid == 0:
        init(config, program, status_fd, facts)
    report(status_fd, {"init_pid": pid})
    os.close(status_fd)
    _, status = os.waitpid(pid, 0)
    return exit_code(status)


if __name__ == "__main__":
    sys.exit(main())
