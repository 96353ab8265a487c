"""The CLI answers ``--help``, a listing and a refused flag without importing the heavy stack: torch,
transformers, vLLM and the report's libraries load only when a command needs them (every such answer stays well
under a second on a slow CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "vllm", "matplotlib", "jinja2", "reportlab", "scipy", "datasets", "lm_eval",
         "httpx2", "accelerate")

# run in a fresh interpreter: the test process itself has imported torch long before
_PROBE = """
import json, sys
from relaxbench.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(json.loads(%r)))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def _probe(*argv: str, allowed: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _PROBE % json.dumps([m for m in HEAVY if m not in allowed]), *argv],
                          capture_output=True, text=True, env=env, timeout=120)
    result = json.loads(proc.stderr.strip().splitlines()[-1])
    return result["code"], result["heavy"]


@pytest.mark.parametrize("argv", [
    ("--help",),
    ("compare", "--help"),
    ("bench", "--help"),
    ("compare", "--no-such-flag"),
    ("generate", "--target", "x", "--prompt", "hi", "--threads", "0"),
    ("bench", "engine", "--no-such-flag"),
    ("list",),
])
def test_help_and_a_refused_flag_import_no_heavy_library(argv):
    code, heavy = _probe(*argv)
    assert code in (0, 2)
    assert heavy == [], f"relaxbench {' '.join(argv)} imported {heavy}"


@pytest.mark.parametrize("kind", ["methods", "models", "scorers", "suites"])
def test_listings_that_read_specs_import_no_heavy_library(kind):
    code, heavy = _probe("list", kind)
    assert code == 0
    assert heavy == [], f"relaxbench list {kind} imported {heavy}"


def test_listing_tasks_imports_only_the_prompt_template_engine():
    """A task's prompt template is checked with jinja2 when it is read; nothing else heavy loads."""
    code, heavy = _probe("list", "tasks", allowed=("jinja2",))
    assert code == 0
    assert heavy == []


def test_the_probe_sees_a_heavy_import():
    """The probe itself can fail: a command that loads torch is caught."""
    code, heavy = _probe("list", "policies", allowed=())
    assert code == 0
    assert "torch" in heavy
