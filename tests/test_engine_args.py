"""``--engine-arg KEY=VALUE`` (and a suite's ``engine_args``): vLLM's engine arguments, checked against the installed
vLLM before anything starts, passed to its engine over relaxbench's own settings, recorded in the session's
environment and, unless they only size memory, in the run key; refused with the transformers engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaxbench.cli import build_parser, main
from relaxbench.commands.compare import suite_from_args
from relaxbench.errors import ConfigError
from relaxbench.harness.suite import MEMORY_ENGINE_ARGS, OWNED_ENGINE_ARGS, SuiteSpec, suite_file_fields
from relaxbench.integrations.vllm_worker import engine_kwargs
from relaxbench.validation import validate
from tests.conftest import CliResult, assert_one_line_error

BASE = {"target": "tiny-random-target", "draft": "tiny-random-draft", "methods": ["exact"], "tasks": ["jsonl"],
        "engine": "vllm"}
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods", "exact", "--tasks", "jsonl"]


def _suite(**engine_args) -> SuiteSpec:
    return validate(SuiteSpec, {**BASE, "engine_args": engine_args}, "suite")


def test_engine_args_that_can_change_outputs_enter_the_run_key_and_memory_ones_do_not():
    plain = _suite().key_fields()
    assert "engine_args" not in plain  # a run without engine arguments keeps the key it always had
    memory = _suite(gpu_memory_utilization=0.9, kv_cache_memory_bytes=2 ** 31, swap_space=4).key_fields()
    assert memory == plain
    for key, value in {"quantization": "fp8", "max_model_len": 4096, "tensor_parallel_size": 2,
                       "enforce_eager": False, "kv_cache_dtype": "fp8"}.items():
        keyed = _suite(**{key: value}, gpu_memory_utilization=0.9).key_fields()
        assert keyed["engine_args"] == {key: value}, key
    # every engine argument the suite was given is in its record (stored with the run), keyed or not
    assert _suite(gpu_memory_utilization=0.9).record()["engine_args"] == {"gpu_memory_utilization": 0.9}
    assert {"gpu_memory_utilization", "kv_cache_memory_bytes"} <= MEMORY_ENGINE_ARGS


@pytest.mark.parametrize("key", sorted(OWNED_ENGINE_ARGS))
def test_the_arguments_relaxbench_sets_are_refused_naming_the_flag(key):
    with pytest.raises(ConfigError, match=rf"'{key}' is set by relaxbench \({OWNED_ENGINE_ARGS[key]}\)"):
        _suite(**{key: 1})


def test_engine_arg_flags_merge_over_a_suite_file(tmp_path: Path):
    suite = tmp_path / "s.yaml"
    suite.write_text("target: tiny-random-target\nmethods: [exact]\ntasks: [jsonl]\nengine: vllm\n"
                     "engine_args: {tensor_parallel_size: 2, max_model_len: 2048}\n")
    args = build_parser().parse_args(["compare", "--suite", str(suite), "--engine-arg", "max_model_len=4k",
                                      "--engine-arg", "enforce_eager=false", "--engine-arg",
                                      'compilation_config={"mode": 0}'])
    assert suite_from_args(args).engine_args == {"tensor_parallel_size": 2, "max_model_len": "4k",
                                                 "enforce_eager": False, "compilation_config": {"mode": 0}}
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {suite}\nengine_args: {{max_model_len: null, quantization: fp8}}\n")
    assert suite_file_fields({"extends": str(suite), "engine_args": {"max_model_len": None, "quantization": "fp8"}},
                             str(child))["engine_args"] == {"tensor_parallel_size": 2, "quantization": "fp8"}


def _main(capsys, *args: str) -> CliResult:
    code = main(list(args))
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def test_the_transformers_engine_refuses_engine_args_in_one_line(capsys, tmp_path: Path):
    out = str(tmp_path / "never")
    assert_one_line_error(_main(capsys, "compare", *TINY, "--engine-arg", "tensor_parallel_size=2", "--out", out),
                          "--engine-arg tensor_parallel_size=... applies to --engine vllm")
    assert_one_line_error(_main(capsys, "compare", *TINY, "--engine", "vllm", "--engine-arg", "seed=3", "--out", out),
                          "'seed' is set by relaxbench (--seed)")
    assert_one_line_error(_main(capsys, "compare", *TINY, "--engine-arg", "no-equals-sign", "--out", out),
                          "is not of the form key=value")
    assert not Path(out).exists()


def test_the_users_engine_args_win_over_relaxbenchs_settings():
    engine = {"target": "/m", "dtype": "auto", "max_num_seqs": 4, "seed": 0, "max_model_len": 1280,
              "kv_cache_gib": 1.0, "speculative_config": None}
    assert engine_kwargs(engine)["enforce_eager"] is True and engine_kwargs(engine)["max_model_len"] == 1280
    assert engine_kwargs(engine)["kv_cache_memory_bytes"] == 2 ** 30
    mine = engine_kwargs({**engine, "engine_args": {"enforce_eager": False, "max_model_len": 4096,
                                                    "tensor_parallel_size": 2}})
    assert mine["enforce_eager"] is False and mine["max_model_len"] == 4096 and mine["tensor_parallel_size"] == 2
    assert mine["max_num_seqs"] == 4 and mine["model"] == "/m"
    # a share of the device's memory replaces relaxbench's fixed KV cache size (vLLM would otherwise ignore it)
    shared = engine_kwargs({**engine, "engine_args": {"gpu_memory_utilization": 0.85}})
    assert shared["gpu_memory_utilization"] == 0.85 and "kv_cache_memory_bytes" not in shared


# -- against the installed vLLM (skipped where .venv-vllm is not built) ------------------------------------------------

def _vllm_python():
    from relaxbench.integrations.vllm_client import vllm_python

    try:
        return vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))


def test_values_are_typed_by_the_installed_vllms_own_parser():
    from relaxbench.integrations.vllm_client import check_engine_args

    python = _vllm_python()
    typed = check_engine_args({"tensor_parallel_size": 2, "max_model_len": "4k", "enforce_eager": False,
                               "quantization": "fp8", "gpu_memory_utilization": "0.5",
                               "hf_overrides": {"max_window_layers": 2}}, python)
    assert typed == {"tensor_parallel_size": 2, "max_model_len": 4000, "enforce_eager": False,
                     "quantization": "fp8", "gpu_memory_utilization": 0.5, "hf_overrides": {"max_window_layers": 2}}
    assert isinstance(typed["gpu_memory_utilization"], float)


@pytest.mark.parametrize("given, message", [
    ({"tensor_paralel_size": 2}, "not an engine argument of vLLM 0.32.0; did you mean 'tensor_parallel_size'"),
    ({"gpu_memory_utilization": "most"}, "invalid float value: 'most'"),
    ({"quantization": "fp9"}, "not a quantization method of vLLM 0.32.0; did you mean 'fp8'"),
    ({"enforce_eager": "yes please"}, "a flag of vLLM's, give true or false"),
])
def test_an_unknown_key_or_a_bad_value_is_one_line(given, message):
    from relaxbench.integrations.vllm_client import check_engine_args

    python = _vllm_python()
    with pytest.raises(ConfigError, match=message) as caught:
        check_engine_args(given, python)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("--engine-arg ")


def test_compare_refuses_a_bad_engine_arg_before_anything_starts(tmp_path: Path, capsys):
    _vllm_python()
    out = tmp_path / "run"
    result = _main(capsys, "compare", *TINY, "--engine", "vllm", "--engine-arg", "max_model_len=lots",
                   "--out", str(out))
    assert_one_line_error(result, "--engine-arg max_model_len=lots: argument --max-model-len")
    assert not out.exists()  # nothing started, nothing written


# each kind of value the table settles, each on a key of its own so that one start of vLLM's interpreter answers them
# all: an integer as text, as a number and misspelt; a float as text and misspelt; a flag on, off and misspelt; a
# misspelt key and one this vLLM does not have
TABLE_CASES = [("tensor_parallel_size", "3"), ("pipeline_parallel_size", "two"), ("data_parallel_size", 2),
               ("gpu_memory_utilization", "0.7"), ("cpu_offload_gb", "most"), ("enforce_eager", True),
               ("enable_prefix_caching", False), ("trust_remote_code", "maybe"), ("tensor_paralel_size", 2),
               ("max_num_seqs", "8"), ("swap_space", "1.5")]


@pytest.mark.slow
def test_the_argument_table_answers_exactly_as_vllms_parser(tmp_path: Path, monkeypatch):
    """Every value the installed vLLM's argument table settles gets the verdict vLLM's own parser gives (the same
    typed value, or the same one-line refusal), and what it cannot settle (vLLM's own value types, choices) it
    leaves to the parser."""
    from relaxbench.integrations import vllm_client
    from relaxbench.integrations.vllm_arg_table import NotSettled, Refused, check_one

    python = _vllm_python()
    assert len({key for key, _ in TABLE_CASES}) == len(TABLE_CASES)  # one round: each key once
    reply = vllm_client._ask_vllm(python, dict(TABLE_CASES))
    table = reply["table"]
    assert table["vllm"] == reply["vllm"] and "tensor_parallel_size" in table["fields"]
    settled = 0
    for key, value in TABLE_CASES:
        parser = reply["verdicts"][key]
        try:
            ours = {"ok": True, "value": check_one(key, value, table)}
        except Refused as exc:
            ours = {"ok": False, "error": str(exc)}
        except NotSettled:
            continue
        settled += 1
        assert ours == parser, (key, value)
    assert settled == len(TABLE_CASES)  # every case above is one the table settles
    for key, value in (("max_model_len", "4k"), ("quantization", "fp9"), ("kv_cache_dtype", "fp8")):
        with pytest.raises(NotSettled):
            check_one(key, value, table)


@pytest.mark.slow
def test_a_second_check_answers_from_the_cache_without_starting_vllm(tmp_path: Path, monkeypatch):
    """The first check starts the vLLM environment's interpreter and keeps its table and verdicts under the cache;
    the same arguments again, and values the table settles, then answer without it (the 20 s of importing vLLM
    on a slow CPU), with the same typed values and the same refusals."""
    from relaxbench.integrations import vllm_client

    python = _vllm_python()
    monkeypatch.setenv("RELAXBENCH_CACHE", str(tmp_path / "cache"))
    given = {"max_model_len": "4k", "enforce_eager": False, "tensor_parallel_size": 2}
    first = vllm_client.check_engine_args(given, python)
    with pytest.raises(ConfigError) as refused:
        vllm_client.check_engine_args({"max_model_len": "lots"}, python)

    def no_vllm(*args, **kwargs):
        raise AssertionError("the vLLM environment was started")

    monkeypatch.setattr(vllm_client, "_ask_vllm", no_vllm)
    assert vllm_client.check_engine_args(given, python) == first == {"max_model_len": 4000, "enforce_eager": False,
                                                                      "tensor_parallel_size": 2}
    with pytest.raises(ConfigError) as again:
        vllm_client.check_engine_args({"max_model_len": "lots"}, python)
    assert str(again.value) == str(refused.value)
    with pytest.raises(ConfigError, match="invalid int value: 'two'"):
        vllm_client.check_engine_args({"tensor_parallel_size": "two"}, python)
    with pytest.raises(ConfigError, match="did you mean 'tensor_parallel_size'"):
        vllm_client.check_engine_args({"enforce_eager": True, "tensor_paralel_size": 2}, python)
