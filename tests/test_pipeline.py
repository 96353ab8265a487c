"""A compare run is one pipeline over one registry of executors:

* every executor is declared by a card (its engine, the options it supports, its engine's early checks), and every
  "not supported" refusal comes from those declarations: an option a card lacks is one line naming the flag, an
  option it has passes;
* the cards are light: reading them (the built-in one and the vLLM engine's) imports no torch;
* an executor added as a card in a test — no other edit — is what ``compare --executor NAME`` runs, through every
  step of the pipeline: the store gets its samples and the tables are printed; and an engine's card added in a test
  is what ``generate --engine NAME`` runs, its one completion (``ExecutorCard.generate``) given the request;
* a suite field declared once (``validation.Option``) in a test is a flag with its help, a suite-file key, a
  validation that names its flag, and part of the run key as declared — with no other edit; and every flag of
  ``compare`` that sets a suite field comes from such a declaration.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest

from relaxbench.cli import build_parser, main
from relaxbench.commands.options import add_spec_flags, given_values
from relaxbench.errors import ConfigError
from relaxbench.harness.executor import (DEFAULT_EXECUTOR, EXECUTORS, SUPPORTS, ExecutorCard, InProcessExecutor,
                                         RunOptions, executor_card)
from relaxbench.harness.suite import SuiteSpec, suite_file_fields
from relaxbench.validation import Integer, Option, Text, load_yaml, spec_options, validate
from tests.store_query import rows

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"

# a suite and options that ask for each option of SUPPORTS, and the flag its refusal names
ASKS = {"concurrency": ({"concurrency": (1, 4)}, RunOptions(), "--concurrency"),
        "engine_args": ({"engine_args": {"max_model_len": 4096}}, RunOptions(), "--engine-arg max_model_len=..."),
        "device_map": ({"device_map": "auto"}, RunOptions(), "--device-map"),
        "kv_cache": ({}, RunOptions(kv_cache="static"), "--kv-cache static"),
        "graphs": ({}, RunOptions(graphs="on"), "--graphs on")}


def suite_for(card: ExecutorCard, **fields) -> SuiteSpec:
    executor = card.name if card.engine == "transformers" else DEFAULT_EXECUTOR
    return SuiteSpec(target="t", methods=("exact",), tasks=("jsonl",), engine=card.engine, executor=executor,
                     **fields)


def test_every_option_of_supports_is_asked_for_by_this_test():
    assert set(ASKS) == set(SUPPORTS)


@pytest.mark.parametrize("name", ["in-process", "ray", "vllm"])
def test_a_card_refuses_exactly_the_options_it_does_not_declare(name):
    card = EXECUTORS.get(name)
    assert executor_card(suite_for(card), RunOptions()) is card
    for option, (fields, options, flag) in ASKS.items():
        suite = suite_for(card, **fields)
        if option in card.supports:
            assert executor_card(suite, options) is card
        else:
            with pytest.raises(ConfigError) as refused:
                executor_card(suite, options)
            assert str(refused.value).startswith(f"{flag} applies to "), str(refused.value)
            assert "\n" not in str(refused.value)


def test_the_declarations_are_the_engines_own():
    assert EXECUTORS.get("vllm").supports == {"concurrency", "engine_args"}
    assert EXECUTORS.get("in-process").supports == EXECUTORS.get("ray").supports == {"device_map", "kv_cache", "graphs"}
    assert EXECUTORS.get("in-process").loads_in_driver and not EXECUTORS.get("vllm").loads_in_driver


def test_an_engine_without_an_executor_of_that_name_and_a_mismatched_executor_are_one_line():
    with pytest.raises(ConfigError, match="--executor ray runs the transformers engine, not --engine vllm"):
        executor_card(SuiteSpec(target="t", methods=("exact",), tasks=("jsonl",), engine="vllm", executor="ray"),
                      RunOptions())
    with pytest.raises(ConfigError, match="--executor vllm runs the vllm engine, not --engine transformers"):
        executor_card(SuiteSpec(target="t", methods=("exact",), tasks=("jsonl",), executor="vllm"), RunOptions())
    # the default executor with --engine vllm is the engine's own
    vllm = SuiteSpec(target="t", methods=("exact",), tasks=("jsonl",), engine="vllm")
    assert executor_card(vllm, RunOptions()).name == "vllm"


def test_reading_the_cards_imports_no_torch():
    code = ("import sys\nfrom relaxbench.harness.executor import EXECUTORS\n"
            "cards = [EXECUTORS.get('in-process'), EXECUTORS.get('vllm')]\n"
            "print(sorted(c.engine for c in cards), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["['transformers',", "'vllm']", "False"]


class RecordingExecutor(InProcessExecutor):
    """The in-process executor, recording that the pipeline called it."""

    name = "recording"
    calls: list[str] = []

    def start(self, setup, plan) -> None:
        RecordingExecutor.calls.append("start")
        super().start(setup, plan)

    def run(self, context, progress) -> None:
        RecordingExecutor.calls.append("run")
        super().run(context, progress)


@pytest.fixture
def recording_card():
    card = ExecutorCard("recording", "transformers", lambda: RecordingExecutor, frozenset({"graphs"}))
    EXECUTORS.add(card.name, card)
    RecordingExecutor.calls = []
    yield card
    EXECUTORS.remove(card.name)


def test_an_executor_added_as_a_card_runs_a_compare_through_the_pipeline(recording_card, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
                 "--draft-dtype", "float64", "--methods", "exact", "--tasks", "jsonl", "--data-file",
                 f"jsonl={DATA}", "--limit", "2", "--max-new-tokens", "6", "--out", str(out), "--report-format", "none",
                 "--executor", "recording"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert RecordingExecutor.calls == ["start", "run"]
    assert "(recording)" in captured.err  # the execute step names the executor the card loaded
    sessions = rows(out / "results.sqlite", "SELECT environment_json FROM environment")
    assert len(sessions) == 1 and '"executor": "recording"' in sessions[0]["environment_json"]
    assert len(rows(out / "results.sqlite", "SELECT 1 FROM samples")) == 4  # 2 items × (AR, exact)
    assert "jsonl" in captured.out  # the summarise step printed the task's table
    # an option the card does not declare is refused before anything loads
    code = main(["compare", "--target", "tiny-random-target", "--methods", "exact", "--tasks", "jsonl",
                 "--data-file", f"jsonl={DATA}", "--executor", "recording", "--device-map", "auto",
                 "--out", str(tmp_path / "refused")])
    assert code == 2 and "--device-map applies to the transformers engine" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_an_engine_only_a_plug_in_card_runs_is_a_compare_engine(tmp_path, capsys):
    """``compare --engine NAME`` takes any engine a card runs under its name (no fixed list of engines): the card's
    executor runs the run; a name no card runs is one line naming the engines there are."""
    card = ExecutorCard("plug-in-engine", "plug-in-engine", lambda: RecordingExecutor, frozenset())
    EXECUTORS.add(card.name, card)
    RecordingExecutor.calls = []
    out = tmp_path / "run"
    try:
        code = main(["compare", "--engine", "plug-in-engine", "--target", "tiny-random-target", "--draft",
                     "tiny-random-draft", "--methods", "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}",
                     "--limit", "1", "--max-new-tokens", "4", "--out", str(out), "--report-format", "none"])
    finally:
        EXECUTORS.remove(card.name)
    err = capsys.readouterr().err
    assert code == 0, err
    assert RecordingExecutor.calls == ["start", "run"]
    [run] = rows(out / "results.sqlite", "SELECT suite_json FROM runs")
    assert '"engine": "plug-in-engine"' in run["suite_json"]
    code = main(["compare", "--engine", "plug-in-engin", "--target", "tiny-random-target", "--methods", "exact",
                 "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--out", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown engine 'plug-in-engin'" in err and "transformers, vllm" in err
    assert "\n" not in err.strip() and not (tmp_path / "refused").exists()


@pytest.mark.parametrize("flags, refusal", [
    (["--kv-cache", "static"], "--kv-cache static applies to the transformers engine (vLLM manages its own"),
    (["--graphs", "off"], "--graphs off applies to the transformers engine (vLLM captures its own"),
])
def test_the_decode_path_flags_are_the_vllm_cards_refusals_in_compare_and_generate(flags, refusal, tmp_path,
                                                                                    capsys):
    """``--kv-cache`` and ``--graphs`` set the transformers engine's decode path: the vLLM card does not declare
    them, so both commands refuse them in one line from that declaration, before vLLM's environment is asked."""
    out = tmp_path / "run"
    code = main(["compare", "--engine", "vllm", "--target", "tiny-random-target", "--draft", "ngram", "--methods",
                 "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", *flags, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and refusal in err and "\n" not in err.strip() and not out.exists()
    code = main(["generate", "--engine", "vllm", "--target", "tiny-random-target", "--rule", "none", "--prompt",
                 "hi", *flags])
    err = capsys.readouterr().err
    assert code == 2 and refusal in err and "\n" not in err.strip()


def test_a_cards_plan_check_refuses_in_one_line_before_the_store_exists(tmp_path, capsys):
    """What an engine cannot run is its card's ``check_plan``, called by the plan step on the built plan: refused in
    one line, before the store is created or any executor starts."""
    seen = []

    def refuse_fly(plan) -> None:
        seen.append([arm.name for arm in plan.arms])
        if any(arm.method.policy == "fly" for arm in plan.arms):
            raise ConfigError("the recording engine cannot run 'fly'")

    card = ExecutorCard("plan-checked", "transformers", lambda: RecordingExecutor, frozenset({"graphs"}),
                        check_plan=refuse_fly)
    EXECUTORS.add(card.name, card)
    RecordingExecutor.calls = []
    try:
        code = main(["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods",
                     "exact,fly", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--limit", "1",
                     "--executor", "plan-checked", "--out", str(tmp_path / "refused")])
    finally:
        EXECUTORS.remove(card.name)
    err = capsys.readouterr().err
    assert code == 2 and "the recording engine cannot run 'fly'" in err and "Traceback" not in err
    assert seen == [["ar", "exact", "fly"]] and RecordingExecutor.calls == []
    assert not (tmp_path / "refused").exists()
    assert EXECUTORS.get("vllm").check_plan.__name__ == "check_vllm_plan"  # the vLLM engine's refusals are its card's



def test_an_engine_added_as_a_card_is_what_generate_runs(capsys):
    """``generate --engine NAME`` runs the card registered under the engine's name: its ``check_completion`` and its
    ``generate`` get the request the command built, and the command prints the completion the engine returned —
    with no other edit (the transformers engine's and vLLM's are cards the same way)."""
    from relaxbench.decoders import Completion
    from relaxbench.decoding.records import GenerationResult, RoundLog

    requests, checked = [], []
    rounds = RoundLog({"drafted": [3, 3], "accepted": [2, 3], "relaxed": [1, 0], "emitted": [3, 4]})
    fixed = Completion(GenerationResult([1, 2], list(range(10, 17)), "a fixed completion", "length", rounds, 0.1, 2.0),
                       "exact-ish", 3, "a decode path of the recording engine")

    def generate(request):
        requests.append(request)
        return fixed

    def check(request):
        checked.append(request)
        return request

    card = ExecutorCard("recording-engine", "recording-engine", lambda: RecordingExecutor, generate=lambda: generate,
                        check_completion=check)
    EXECUTORS.add(card.name, card)
    try:
        code = main(["generate", "--engine", "recording-engine", "--target", "tiny-random-target", "--draft",
                     "tiny-random-draft", "--rule", "speculative-sampling", "-k", "3", "--max-new-tokens", "7",
                     "--temperature", "0.5", "--seed", "11", "--stop", "END", "--system", "be brief", "--no-chat",
                     "--dtype", "float64", "--device", "cpu", "--prompt", "Hello there"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        [request] = requests
        assert checked == [request]
        assert (request.target, request.draft, request.method.policy) == ("tiny-random-target", "tiny-random-draft",
                                                                          "speculative-sampling")
        decode = request.decode
        assert (decode.k, decode.max_new_tokens, decode.sampling.temperature, decode.seed, decode.stop_strings) == \
            (3, 7, 0.5, 11, ("END",))
        assert (request.prompt, request.system, request.chat, request.dtype) == ("Hello there", "be brief", False,
                                                                                "float64")
        assert request.device == "cpu" and dict(request.engine_args) == {}
        assert captured.out.strip() == "a fixed completion"
        # the method's name, then the rule and the k the engine returned
        assert "speculative-sampling (exact-ish, k=3, recording-engine)" in captured.err
        assert "a decode path of the recording engine" in captured.err
        assert "3.50" in captured.err and "83.33%" in captured.err  # the counters: 7 tokens in 2 rounds, 5 of 6
        # --engine-arg is refused in one line for an engine whose card does not support engine arguments
        code = main(["generate", "--engine", "recording-engine", "--target", "tiny-random-target", "--rule", "none",
                     "--prompt", "hi", "--engine-arg", "max_model_len=64"])
        err = capsys.readouterr().err
        assert code == 2 and "--engine-arg max_model_len=... applies to --engine vllm" in err
        assert "the recording-engine engine takes --device and --dtype" in err and len(requests) == 1
    finally:
        EXECUTORS.remove(card.name)
    # an engine no card runs is one line, naming the engines there are
    assert main(["generate", "--engine", "recording-engin", "--target", "t", "--rule", "none", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert "unknown engine 'recording-engin'" in err and "transformers, vllm" in err and "\n" not in err.strip()
    assert EXECUTORS.get("in-process").generate().__name__ == "generate_completion"
    assert EXECUTORS.get("vllm").generate().__name__ == "generate_once"


class ExtendedSuite(SuiteSpec):
    """A suite with two fields a test declares, once each."""

    window_size: Annotated[Integer, Option("a window a test declares", metavar="W")] = 4
    note: Annotated[Text | None, Option("a note that changes no sample", key="no")] = None


def test_a_field_declared_once_is_a_flag_a_suite_key_a_check_and_part_of_the_run_key(tmp_path):
    parser = argparse.ArgumentParser()
    add_spec_flags(parser, ExtendedSuite)
    assert "a window a test declares" in parser.format_help() and "--window-size W" in parser.format_help()
    args = parser.parse_args(["--target", "t", "--methods", "exact", "--tasks", "jsonl", "--window-size", "9",
                              "--note", "hello"])
    given = given_values(args, ExtendedSuite)
    assert given == {"target": "t", "methods": "exact", "tasks": "jsonl", "window_size": 9, "note": "hello"}
    suite = validate(ExtendedSuite, given, "command line")
    assert suite.window_size == 9 and suite.key_fields()["window_size"] == 9
    assert "note" not in suite.key_fields()  # key="no": raising it extends a run
    other = suite.model_copy(update={"window_size": 5, "note": "other"})
    assert other.key_fields() != suite.key_fields()  # the declared field is part of the run's identity
    assert suite.model_copy(update={"note": "other"}).key_fields() == suite.key_fields()
    # the suite-file key, read as a suite file's fields are
    path = tmp_path / "suite.yaml"
    path.write_text("target: t\nmethods: [exact]\ntasks: [jsonl]\nwindow_size: 7\n")
    assert validate(ExtendedSuite, load_yaml(path), str(path)).window_size == 7
    # a refused value names the flag as declared
    with pytest.raises(ConfigError, match=r"^compare: --window-size must be an integer, got 'x'$"):
        validate(ExtendedSuite, {"target": "t", "methods": ["exact"], "tasks": ["jsonl"], "window_size": "x"},
                 "compare", "flag")


def test_every_suite_flag_of_compare_comes_from_a_declaration():
    compare = next(action for action in build_parser()._subparsers._group_actions[0].choices.items()
                   if action[0] == "compare")[1]
    dests = {action.dest: action for action in compare._actions}
    for name, option in spec_options(SuiteSpec).items():
        if option.flag is None:
            assert name not in dests
            continue
        action = dests[name]
        assert option.flag_name(name) in action.option_strings and action.help == (option.help or None), name
        assert action.default is None  # typed or not: the suite file's value stands when not typed
    # a suite file sets the same fields by the same names
    assert set(suite_file_fields({"target": "t", "methods": ["exact"], "tasks": ["jsonl"], "limit": 2},
                                 "test")) == {"target", "methods", "tasks", "limit"}
