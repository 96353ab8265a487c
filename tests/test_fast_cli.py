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


def _run_probe(*argv: str, allowed: tuple[str, ...] = ()) -> tuple[int, list[str], str, str]:
    """(exit code, heavy modules imported, stdout, stderr less the probe's own line) of ``relaxbench ARGV``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _PROBE % json.dumps([m for m in HEAVY if m not in allowed]), *argv],
                          capture_output=True, text=True, env=env, timeout=120)
    *messages, last = proc.stderr.strip().splitlines()
    result = json.loads(last)
    return result["code"], result["heavy"], proc.stdout, "\n".join(messages)


def _probe(*argv: str, allowed: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    code, heavy, _, _ = _run_probe(*argv, allowed=allowed)
    return code, heavy


@pytest.mark.parametrize("argv", [
    ("--help",),
    ("compare", "--help"),
    ("bench", "--help"),
    ("compare", "--no-such-flag"),
    ("generate", "--target", "x", "--prompt", "hi", "--threads", "0"),
    ("bench", "engine", "--no-such-flag"),
    ("drafter", "train", "--help"),
    ("drafter", "train", "eagle3", "--target", "x", "--out", "y", "--steps", "0"),
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


@pytest.fixture
def registries(monkeypatch):
    """The live registries in this process, so ``main`` here answers from them and not from the catalog; without
    the vLLM engine's own arms, which an earlier test in this process may have registered and a fresh interpreter
    does not know (restored afterwards)."""
    import relaxbench.decoding.drafters  # noqa: F401
    from relaxbench.policies import POLICIES

    monkeypatch.setattr(POLICIES, "_items", {name: cls for name, cls in POLICIES._items.items()
                                              if cls.__module__ != "relaxbench.integrations.vllm_native"})


@pytest.mark.parametrize("kind", ["rules", "drafters", "metrics", "graders", "judges", "modules"])
@pytest.mark.parametrize("markdown", [False, True])
def test_listings_of_registries_and_the_schema_import_no_heavy_library(kind, markdown, capsys, registries):
    """The rules and drafters are listed from the catalog, the metrics from the schema alone; the listing is the one
    the registries give (this process has imported them all)."""
    from relaxbench.cli import main

    argv = ("list", kind, *(("--markdown",) if markdown else ()))
    # a listing of graders loads the grader plug-ins, the endpoint grader's HTTP client with them (a light import)
    code, heavy, out, _ = _run_probe(*argv, allowed=("httpx2",) if kind in ("graders", "judges") else ())
    assert code == 0
    assert heavy == [], f"relaxbench {' '.join(argv)} imported {heavy}"
    assert main(list(argv)) == 0
    assert out == capsys.readouterr().out


def test_the_earlier_policy_spellings_parse_as_the_rule_ones_and_help_shows_only_rule(capsys):
    """The command line says rule (``generate --rule``, ``list rules``, ``bench rules``, ``bench verify --rule``);
    the earlier ``--policy``, ``list policies`` and ``bench policies`` still parse to the same thing, unshown."""
    from relaxbench.cli import build_parser, main

    parser = build_parser()

    def parsed(*argv: str) -> dict:
        return vars(parser.parse_args(argv))

    generate = ("generate", "--target", "t", "--prompt", "hi")
    assert parsed(*generate, "--policy", "fly") == parsed(*generate, "--rule", "fly")
    assert parsed(*generate, "--rule", "fly")["rule"] == "fly"
    old, new = parsed("bench", "policies", "--policy", "exact"), parsed("bench", "rules", "--rule", "exact")
    assert old.pop("bench_command") == "policies" and new.pop("bench_command") == "rules"
    assert old == new and new["rule"] == ["exact"]
    assert parsed("bench", "verify", "--policy", "exact") == parsed("bench", "verify", "--rule", "exact")
    assert main(["list", "rules", "--markdown"]) == 0
    listed = capsys.readouterr().out
    assert main(["list", "policies", "--markdown"]) == 0
    assert capsys.readouterr().out == listed and listed.startswith("| rule | formula |")
    for argv, shown in ((("generate", "--help"), "--rule"), (("list", "--help"), "{rules,"),
                        (("bench", "--help"), "rules")):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(argv)
        out = capsys.readouterr().out.replace("docs/policies.md", "")  # the rules' page keeps its file name
        assert exited.value.code == 0 and shown in out and "polic" not in out, argv


TARGET = ("--target", "tiny-random-target", "--draft", "tiny-random-draft")
METHODS = {  # method files a refusal names (written to a temporary folder as NAME.yaml)
    "misspelt_policy": "policy: flyy\n",
    "unknown_knob": "extends: fly\nknobs: {thetaa: 0.5}\n",
    "knob_out_of_range": "policy: topk\nsweep: {top: [2, 0]}\n",
    "alias_knob": "policy: sglang-threshold\nknobs: {threshold_acc: 2}\n",
}
REFUSALS = {
    "a misspelt policy in compare": ("compare", *TARGET, "--methods", "exact,flyy", "--tasks", "gsm8k"),
    "a misspelt policy in a method": ("compare", *TARGET, "--methods", "{misspelt_policy}", "--tasks", "gsm8k"),
    "an unknown knob in a method": ("compare", *TARGET, "--methods", "{unknown_knob}", "--tasks", "gsm8k"),
    "an out-of-range knob in a sweep": ("compare", *TARGET, "--methods", "{knob_out_of_range}", "--tasks", "gsm8k"),
    "a knob above its bound": ("compare", *TARGET, "--methods", "{alias_knob}", "--tasks", "gsm8k"),
    "a misspelt policy in generate": ("generate", *TARGET, "--rule", "flyy", "--prompt", "hi"),
    "an unknown knob in generate": ("generate", *TARGET, "--rule", "fly", "--knob", "thetaa=1", "--prompt", "hi"),
    "an out-of-range knob in generate": ("generate", *TARGET, "--rule", "fly", "--knob", "window=0", "--prompt",
                                         "hi"),
    "a knob of the wrong type": ("generate", *TARGET, "--rule", "fuzzy", "--knob", "divergence=tv", "--prompt", "hi"),
    "a misspelt drafter": ("generate", *TARGET, "--rule", "fly", "--drafter", "ngramm", "--prompt", "hi"),
    "an unknown drafter knob": ("generate", *TARGET, "--rule", "fly", "--drafter", "ngram", "--drafter-knob",
                                "max_ngramm=3", "--prompt", "hi"),
    "a drafter without its draft model": ("generate", "--target", "tiny-random-target", "--draft", "ngram", "--rule",
                                          "fly", "--drafter", "ngram+lm", "--prompt", "hi"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_bad_rule_drafter_or_knob_is_refused_before_torch_in_the_registries_words(case, capsys, tmp_path,
                                                                                     registries):
    """Refused in a fresh interpreter from the catalog, with the message this process (registries loaded) gives."""
    from relaxbench.cli import main

    for name, text in METHODS.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    argv = [arg.format(**{name: str(tmp_path / f"{name}.yaml") for name in METHODS}) for arg in REFUSALS[case]]
    argv += ["--out", str(tmp_path / "run")] if argv[0] == "compare" else []
    code, heavy, _, message = _run_probe(*argv)
    assert code == 2
    assert heavy == [], f"{case}: imported {heavy}"
    assert main(argv) == 2
    expected = capsys.readouterr().err.strip()
    assert expected.startswith("relaxbench: error: ") and "\n" not in expected
    assert message == expected


def test_the_probe_sees_a_heavy_import():
    """The probe itself can fail: a command that loads torch is caught (a valid method passes the early check and
    the run's own check imports the registries)."""
    code, heavy = _probe("generate", *TARGET, "--rule", "fly", "--prompt", "hi", "--device", "no-such-device")
    assert code == 2
    assert "torch" in heavy


def _cut_gguf(path: Path) -> Path:
    """A file with GGUF's magic and version, cut short inside its header."""
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2).to_bytes(8, "little"))
    return path


_RUN = ["compare", "--target", "tiny-random-target", "--draft", "ngram", "--methods", "exact", "--tasks", "jsonl",
        "--out", "{tmp}/run", "--data-file"]
FILE_REFUSALS = {  # argv ({tmp}: the test's folder, {cut}: a cut GGUF file, {pipe}: a named pipe), the message's part
    "a cut GGUF target in generate": (["generate", "--target", "{cut}", "--rule", "none", "--prompt", "hi"],
                                      "a GGUF file cut short"),
    "a cut GGUF draft in generate": (["generate", "--target", "tiny-random-target", "--draft", "{cut}", "--rule",
                                      "exact", "--prompt", "hi"], "a GGUF file cut short"),
    "a cut GGUF target in compare": (["compare", "--target", "{cut}", *_RUN[3:], "jsonl={pipe}"],
                                     "a GGUF file cut short"),
    "a named pipe as a data file": ([*_RUN, "jsonl={pipe}"], "is a named pipe, not a data file"),
    "a device as a data file": ([*_RUN, "jsonl=/dev/zero"], "is a device, not a data file"),
    "a folder as a data file": ([*_RUN, "jsonl={tmp}"], "is a folder, not a data file"),
    "a missing data file of a task of the run": ([*_RUN, "jsonl={tmp}/none.jsonl"], "no such data file"),
}


@pytest.mark.parametrize("case", sorted(FILE_REFUSALS))
def test_a_bad_model_or_data_file_is_refused_before_torch(case, tmp_path: Path):
    os.mkfifo(tmp_path / "rows.jsonl")
    cut = _cut_gguf(tmp_path / "cut.gguf")
    argv, fragment = FILE_REFUSALS[case]
    argv = [a.format(tmp=tmp_path, cut=cut, pipe=tmp_path / "rows.jsonl") for a in argv]
    code, heavy, _, message = _run_probe(*argv)
    assert code == 2
    assert heavy == [], f"{case}: imported {heavy}"
    assert message.startswith("relaxbench: error: ") and "\n" not in message and fragment in message, message


def test_the_data_file_of_a_task_not_in_the_run_is_named_by_the_plan(tmp_path: Path):
    """A missing file for a task the run does not have: the plan's message (which task), not the file's."""
    code, _, _, message = _run_probe("compare", "--target", "tiny-random-target", "--draft", "ngram", "--methods",
                                     "exact", "--tasks", "jsonl", "--data-file", f"jsnl={tmp_path / 'x.jsonl'}",
                                     "--out", str(tmp_path / "run"))
    assert code == 2
    assert "--data-file names task 'jsnl', which is not in --tasks (jsonl); did you mean 'jsonl'?" in message


CONTEXT_REFUSALS = {  # what the target's files on disk settle: a budget or a prompt over the context it states
    "a prompt over the context": (["generate", "--rule", "exact", "--prompt", "word " * 10_000],
                                  "--prompt: the prompt (at least "),
    "a generate budget over the context": (["generate", "--rule", "exact", "--prompt", "hi", "--max-new-tokens",
                                            "1000000000"], "max_new_tokens (1000000000)"),
    "a compare budget over the context": (["compare", "--methods", "exact", "--tasks", "jsonl", "--data-file",
                                           f"jsonl={ROOT / 'tests' / 'data' / 'tiny_tasks.jsonl'}",
                                           "--max-new-tokens", "1000000000", "--out", "{tmp}/run"],
                                          "--max-new-tokens: the prompt (at least 1 tokens) + max_new_tokens"),
}


@pytest.mark.parametrize("case", sorted(CONTEXT_REFUSALS))
def test_context_refusals_are_settled_from_the_files_before_torch(case, tmp_path: Path, tiny_target):
    """The tiny target is built (its config and tokenizer on disk): the refusal reads them with the tokenizers
    library, no transformers or torch, and writes nothing."""
    argv, fragment = CONTEXT_REFUSALS[case]
    argv = [argv[0], "--target", "tiny-random-target", "--draft", "tiny-random-draft",
            *(a.format(tmp=tmp_path) for a in argv[1:])]
    code, heavy, _, message = _run_probe(*argv)
    assert code == 2
    assert heavy == [], f"{case}: imported {heavy}"
    assert message.startswith("relaxbench: error: ") and "\n" not in message, message
    assert fragment in message and "over the target's context of 4096" in message, message
    assert not (tmp_path / "run").exists()
