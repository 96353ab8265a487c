"""The CLI: a happy path, and every bad input ends as one line on stderr with exit status 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.slow
def test_generate_prints_text_and_counters(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--rule", "exact",
                 "--prompt", "hello", "-k", "4", "--max-new-tokens", "16", "--dtype", "float64",
                 "--draft-dtype", "float64")
    assert result.returncode == 0, result.stderr
    assert "mean acc." in result.stderr and "acceptance" in result.stderr and "tokens/s" in result.stderr


@pytest.mark.slow
def test_generate_ar_baseline(cli):
    result = cli("generate", "--target", "tiny-random-target", "--rule", "none", "--prompt", "hi",
                 "--max-new-tokens", "8")
    assert result.returncode == 0, result.stderr
    assert "1.00" in result.stderr  # AR: one token per round


def test_unknown_model(cli):
    result = cli("generate", "--target", "smollm2-135m", "--rule", "none", "--prompt", "x")
    assert_one_line_error(result, "smollm2-135m", "did you mean 'smollm2-135m-instruct'")


def test_missing_local_model_dir(cli):
    assert_one_line_error(cli("generate", "--target", "./no/such/model", "--rule", "none", "--prompt", "x"),
                          "no such model directory")


def test_unknown_policy_with_suggestion(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "ngram", "--rule", "exactt",
                 "--prompt", "x")
    assert_one_line_error(result, "unknown rule 'exactt'", "did you mean 'exact'")


@pytest.mark.slow
def test_mismatched_vocabularies(cli):
    result = cli("generate", "--target", "smollm2-135m-instruct", "--draft", "tiny-random-draft", "--rule", "exact",
                 "--prompt", "x")
    assert_one_line_error(result, "do not share a tokenizer vocabulary", "tiny-random-draft", "smollm2-135m-instruct",
                          "49152 tokens")


def test_needs_violation_is_a_configuration_error(cli):
    result = cli("generate", "--target", "tiny-random-target", "--draft", "ngram", "--rule",
                 "speculative-sampling", "--temperature", "1", "--prompt", "x")
    assert_one_line_error(result, "needs draft-model probabilities", "'ngram'")


def test_bad_flag_value(cli):
    assert_one_line_error(cli("generate", "--target", "t", "--rule", "none", "--prompt", "x", "-k", "two"),
                          "must be an integer, got 'two'")
    assert_one_line_error(cli("generate", "--target", "tiny-random-target", "--rule", "none", "--prompt", "x",
                              "--temperature", "-1"), "temperature must be >= 0")


@pytest.mark.parametrize("content", ["short", "zeros"])
def test_sha256_or_size_mismatch_removes_the_file(cli, tmp_path: Path, content):
    """A corrupt GGUF in the cache is checked before conversion: one line, exit 2, the bad file removed."""
    from relaxbench.models.zoo import MODELS

    spec = MODELS.get("smollm2-135m-instruct")
    gguf = tmp_path / "gguf" / spec.gguf_name
    gguf.parent.mkdir(parents=True)
    with open(gguf, "wb") as f:
        if content == "short":
            f.write(b"GGUF not really")
        else:
            f.truncate(spec.size)  # the right size, the wrong bytes
    result = cli("models", "fetch", "smollm2-135m-instruct", env={"RELAXBENCH_CACHE": str(tmp_path)})
    assert_one_line_error(result, "smollm2-135m-instruct", "size" if content == "short" else "sha256",
                          "removed")
    assert not gguf.exists()


def test_models_list_and_list_rules(cli):
    result = cli("models", "list")
    assert result.returncode == 0 and "qwen2.5-coder-1.5b-instruct" in result.stdout
    result = cli("list", "rules")
    assert result.returncode == 0 and "speculative-sampling" in result.stdout and "exact" in result.stdout


def test_progress_in_a_log_is_a_line_per_step_with_elapsed_and_eta():
    """Without a terminal the commands' progress (profile, judge mine) prints a line per advanced step; setting a
    bar's position directly prints nothing; the ETA's speed counts only the steps of this session."""
    import io
    import time

    from rich.console import Console

    from relaxbench.ui import Eta, LineProgress, progress_bars

    assert isinstance(progress_bars(), LineProgress)  # pytest captures stderr: not a terminal
    buffer = io.StringIO()
    with LineProgress(Console(file=buffer, width=200)) as progress:
        items = progress.add_task("[bold]items", total=4, completed=1)
        inner = progress.add_task("positions", total=10)
        progress.update(inner, completed=5)
        progress.advance(items)
        progress.update(items, advance=1, description="items (second)")
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"items: 2/4, elapsed \d+:\d\d:\d\d, eta \d+:\d\d:\d\d", lines[0])
    assert lines[1].startswith("items (second): 3/4, elapsed ")
    eta = Eta(started=time.monotonic() - 10)
    eta.add(10, 5)  # resumed: 5 of 10 done before this session
    assert eta.text() == "elapsed 0:00:10, eta -"
    eta.step()
    assert eta.text() == "elapsed 0:00:10, eta 0:00:40"  # 1 step in 10 s, 4 left
