"""``relaxbench generate --engine vllm --engine-arg KEY=VALUE``: read as ``compare`` reads it (KEY=VALUE, none that
relaxbench sets itself, the vLLM engine only), checked against the installed vLLM before the engine starts, and
passed to the engine."""

from __future__ import annotations

import sys

import pytest

from relaxbench.errors import ConfigError
from relaxbench.harness.suite import OWNED_ENGINE_ARGS
from tests.conftest import assert_one_line_error, run_cli

GENERATE = ["generate", "--target", "tiny-random-target", "--rule", "none", "--prompt", "Hello there",
            "--max-new-tokens", "4"]
FAKE_VLLM = {"RELAXBENCH_VLLM_PYTHON": sys.executable}  # an environment "exists": refusals come before it is used


def test_the_transformers_engine_refuses_engine_args_in_one_line():
    assert_one_line_error(run_cli(*GENERATE, "--engine-arg", "max_model_len=2048"),
                          "--engine-arg max_model_len=... applies to --engine vllm")


@pytest.mark.parametrize("key", ["seed", "dtype", "model"])
def test_the_arguments_relaxbench_sets_are_refused_as_compare_refuses_them(key):
    result = run_cli(*GENERATE, "--engine", "vllm", "--engine-arg", f"{key}=1", env=FAKE_VLLM)
    assert_one_line_error(result, f"'{key}' is set by relaxbench ({OWNED_ENGINE_ARGS[key]})")


def test_a_malformed_engine_arg_is_one_line():
    result = run_cli(*GENERATE, "--engine", "vllm", "--engine-arg", "no-equals-sign", env=FAKE_VLLM)
    assert_one_line_error(result, "--engine-arg 'no-equals-sign' is not of the form key=value")


# -- against the installed vLLM (skipped where .venv-vllm is not built) ------------------------------------------------

def _vllm_python() -> None:
    from relaxbench.integrations.vllm_client import vllm_python

    try:
        vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))


def test_an_unknown_engine_arg_is_refused_by_the_installed_vllm_before_it_starts():
    _vllm_python()
    result = run_cli(*GENERATE, "--engine", "vllm", "--engine-arg", "tensor_paralel_size=1")
    assert_one_line_error(result, "--engine-arg tensor_paralel_size=1: not an engine argument of vLLM",
                          "did you mean 'tensor_parallel_size'")


@pytest.mark.slow
def test_the_engine_args_reach_vllms_engine():
    """A context longer than the model's, set with --engine-arg max_model_len, is refused by vLLM's own validation
    of its configuration as the engine is built: the value reached the engine, and the refusal is one line with
    vLLM's reason, no traceback. (A successful generate on the vLLM engine is tests/test_vllm.py's; a successful run
    with engine arguments is compare's, tests/test_vllm_runs.py: a refusal before the weights load keeps this quick.)"""
    _vllm_python()
    refused = run_cli("generate", "--engine", "vllm", "--target", "smollm2-135m-instruct", "--rule", "none",
                      "--max-new-tokens", "4", "--prompt", "Tell me about the sea.", "--engine-arg",
                      "enforce_eager=true", "--engine-arg", "max_model_len=100000", timeout=900)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr, refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("relaxbench: error: vllm engine: ModelConfig: User-specified max_model_len (100000)"), last
