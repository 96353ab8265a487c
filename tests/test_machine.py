"""How busy other processes keep the machine, with relaxbench's own process tree left out: CPU time burned by this
process or by its children is ours, CPU time burned by a process outside the tree is someone else's. Each burner
reports the CPU seconds it used itself, so the checks hold on a machine that others keep busy too."""

from __future__ import annotations

import subprocess
import sys
import time

from relaxbench.machine import CpuSample, cpu_sample, others_between, others_busy_cpus

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\nprint(time.process_time())"
TICK = 0.05  # /proc/stat and /proc/PID/stat count in clock ticks (10 ms); a little slack for several reads


def burn_here(seconds: float) -> float:
    """Spin in this process; the CPU seconds it took."""
    start, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return time.process_time() - start


def test_the_arithmetic_leaves_our_tree_out():
    before, after = CpuSample(100.0, 10.0, 0.0), CpuSample(103.0, 11.5, 2.0)
    assert others_between(before, after) == 0.75  # 3 CPU s on the machine, 1.5 of them ours, over 2 s
    assert others_between(before, CpuSample(101.0, 12.0, 2.0)) == 0.0  # never negative
    assert others_between(before, CpuSample(101.0, 10.0, 0.0)) == 0.0  # no window


def test_our_own_work_and_our_childrens_count_as_ours():
    before = cpu_sample()
    ours = burn_here(0.3)
    child = subprocess.run([sys.executable, "-c", BURN.format(seconds=0.5)], capture_output=True, text=True,
                           check=True)  # a conversion in a child process, waited for
    ours += float(child.stdout)
    running = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=0.8)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.6)  # still running at the second sample: a living descendant
    after = cpu_sample()
    running.communicate()
    assert after.own - before.own >= ours - TICK
    assert after.machine - before.machine >= after.own - before.own - TICK


def test_a_process_outside_our_tree_counts_as_another():
    """A burner started through a shell that exits at once is re-parented away from us: not our descendant."""
    script = f"{sys.executable} -c '{BURN.format(seconds=1.0)}' > {{out}} &"
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "cpu"
        before = cpu_sample()
        subprocess.run(["sh", "-c", script.format(out=out)], check=True)
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        after = cpu_sample()
        theirs = float(out.read_text())
    assert theirs > 0.05  # it did run
    assert after.own - before.own < theirs  # not counted as ours
    window = after.at - before.at
    assert others_between(before, after) * window >= theirs - TICK


def test_others_busy_cpus_watches_a_window():
    start = time.monotonic()
    busy = others_busy_cpus(0.2)
    assert time.monotonic() - start >= 0.2
    assert busy is not None and busy >= 0.0
