"""Shared fixtures: tiny random models (built offline in a second) and the packaged SmolLM2 (fetched once)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

# Before torch is imported, and inherited by the CLI subprocesses: the test models are tiny and gain nothing from
# intra-op threads, while on a shared CPU spinning threads made every forward ~20x slower (measured: 2.1 s vs
# 0.11 s for a 32-token generation with 2 vs 1 threads under load).
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vLLM's CPU engine binds one spinning OpenMP thread to every core it is given ("auto": all of them), so the engines
# of two workers fought over both cores (the vLLM module's setup took 1.8x its time alone); each worker's engines
# get one core of their own
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and hasattr(os, "sched_getaffinity"):
    _CORES = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(_CORES[int(_WORKER[2:]) % len(_CORES)]))
# vLLM runs its engine core in a process of its own by default: every engine start there spawns it and imports vLLM
# once more, and every stop waits out its shutdown. The tests' engines run it inside relaxbench's vLLM worker
# process instead (vLLM's own switch; measured on the reference CPU: test_vllm_runs.py's SIGKILLed compare, three
# engine starts, 112 s → 65 s). The engines of test_vllm_engine.py's module run vLLM's default layout, so the adapter
# is proven to be installed and to count in an engine-core process of its own too.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
torch.set_num_threads(min(2, torch.get_num_threads()))

# The files that take longest, longest first (seconds of one worker on the reference CPU from an empty cache,
# `--durations=0`, docs/testing.md). `--dist loadfile` hands files out in collection order (`--no-loadscope-reorder`
# in pyproject.toml), so the long ones start first and the many short ones fill in around them: the two workers end
# together instead of one of them running a long file alone at the end (longest processing time first). A file
# missing here only starts later; the order changes no result.
LONGEST_FIRST = ("test_vllm_runs.py",  # 390 s
                 "test_batched_rules.py",  # 350 s
                 "test_vllm_engine.py",  # 220 s
                 "test_draft_heads.py",  # 195 s
                 "test_models.py",  # 120 s
                 "test_conformance.py",  # 110 s
                 "test_ray.py",  # 95 s
                 "test_edges.py",  # 95 s
                 "test_static_cache.py",  # 90 s
                 "test_losslessness.py",  # 80 s
                 "test_engine_args.py",  # 75 s
                 "test_drafters_suite.py")  # 65 s


def pytest_collection_modifyitems(config, items) -> None:
    """Order the files for the workers: ``LONGEST_FIRST``, then the rest by their number of tests (as xdist's own
    reordering does), each file's tests in their own order."""
    tests_in: dict[str, int] = {}
    for item in items:
        tests_in[item.path.name] = tests_in.get(item.path.name, 0) + 1

    def rank(item) -> tuple[int, int, str]:
        name = item.path.name
        if name in LONGEST_FIRST:
            return (LONGEST_FIRST.index(name), 0, "")
        return (len(LONGEST_FIRST), -tests_in[name], str(item.path))

    items.sort(key=rank)  # stable: a file's tests keep their order


@pytest.fixture(scope="session", autouse=True)
def _quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


@pytest.fixture(scope="session")
def tiny_target():
    from relaxbench.models import load_model

    # float64: random models have flat-ish distributions, and the losslessness tests must not hinge on rounding
    return load_model("tiny-random-target", dtype="float64", quiet=True)


@pytest.fixture(scope="session")
def tiny_draft():
    from relaxbench.models import load_model

    return load_model("tiny-random-draft", dtype="float64", quiet=True)


@pytest.fixture(scope="session")
def smollm():
    from relaxbench.models import load_model

    return load_model("smollm2-135m-instruct", dtype="float32", quiet=True)


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> CliResult:
    """Run ``python -m relaxbench ARGS`` in a subprocess, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "relaxbench", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


def assert_one_line_error(result: CliResult, *fragments: str) -> None:
    """Exit 2, exactly one non-empty line on stderr, no traceback, and the line mentions every fragment."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
