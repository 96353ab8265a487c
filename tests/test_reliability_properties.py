"""Property-style: generated invalid values for every bounded or numeric field a user can set — compare's flags
(the suite's fields), every policy's knobs and every drafter's knobs — each end as one line on stderr, exit 2, no
traceback, naming the field, before any model loads (the CLI in-process, so each example costs milliseconds)."""

from __future__ import annotations

import math
from pathlib import Path

import annotated_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaxbench.cli import main
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.harness.suite import SuiteSpec
from relaxbench.policies import POLICIES
from tests.conftest import CliResult, assert_one_line_error

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
EXAMPLES = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run_main(capsys, *argv: str) -> CliResult:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # an argparse usage error
        code = exc.code
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def bounds(field) -> dict[str, float]:
    found = {}
    for item in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                found[name] = getattr(item, name)
    return found


def base_type(field) -> type:
    text = str(field.annotation)
    return int if "int" in text and "float" not in text else float


def invalid_values(field) -> st.SearchStrategy:
    """Values the field must refuse: out of its bounds, NaN for a number, a fraction or a bool for an integer."""
    kind, limits = base_type(field), bounds(field)
    options = []
    if kind is float:
        options.append(st.just(math.nan))
    else:
        options += [st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not float(x).is_integer()),
                    st.booleans()]
    number = st.integers if kind is int else (lambda **kw: st.floats(allow_nan=False, **kw))
    if "ge" in limits:
        options.append(number(max_value=limits["ge"] - 1) if kind is int else
                       st.floats(max_value=limits["ge"], exclude_max=True, allow_nan=False))
    if "gt" in limits:
        options.append(number(max_value=limits["gt"]) if kind is int else
                       st.floats(max_value=limits["gt"], allow_nan=False))
    if "le" in limits:
        options.append(number(min_value=limits["le"] + 1) if kind is int else
                       st.floats(min_value=limits["le"], exclude_min=True, allow_nan=False))
    if "lt" in limits:
        options.append(number(min_value=limits["lt"]) if kind is int else
                       st.floats(min_value=limits["lt"], allow_nan=False))
    return st.one_of(options)


def as_yaml(value) -> str:
    """How a user writes ``value`` on a command line read as YAML (``--knob k=V``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)


def as_flag(value) -> str:
    """How a user writes ``value`` as a flag's argument (argparse's int/float)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


NUMERIC = (int, float)
SUITE_FIELDS = [name for name, field in SuiteSpec.model_fields.items() if bounds(field)]
KNOBS = [(name, knob) for name in POLICIES.names() for knob, field in POLICIES.get(name).Knobs.model_fields.items()
         if base_type(field) in NUMERIC and ("float" in str(field.annotation) or "int" in str(field.annotation))]
DRAFTER_KNOBS = [(name, knob) for name in DRAFTERS.names()
                 for knob, field in DRAFTERS.get(name).Knobs.model_fields.items()
                 if ("float" in str(field.annotation) or "int" in str(field.annotation)) and
                 (bounds(field) or base_type(field) is float)]


def test_the_properties_cover_what_they_claim():
    assert {"limit", "repeats", "max_new_tokens", "k", "temperature", "top_k", "top_p", "warmup", "seed"} <= set(
        SUITE_FIELDS)
    assert ("fly", "theta") in KNOBS and ("mentored", "alpha") in KNOBS and ("topk", "top") in KNOBS
    assert ("ngram", "num_tokens") in DRAFTER_KNOBS and ("ngram+lm", "num_tokens") in DRAFTER_KNOBS


@pytest.mark.parametrize("name", SUITE_FIELDS)
def test_compare_flags_refuse_invalid_values(capsys, tmp_path: Path, name):
    flag = "-k" if name == "k" else f"--{name.replace('_', '-')}"

    @EXAMPLES
    @given(invalid_values(SuiteSpec.model_fields[name]))
    def check(value):
        result = run_main(capsys, "compare", "--target", "tiny-random-target", "--draft", "ngram", "--methods",
                          "exact", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}", "--report-format", "none",
                          "--out", str(tmp_path / "run"), flag, as_flag(value))
        assert_one_line_error(result, flag)
        assert not (tmp_path / "run").exists()

    check()


@pytest.mark.parametrize(("policy", "knob"), KNOBS)
def test_policy_knobs_refuse_invalid_values(capsys, policy, knob):
    field = POLICIES.get(policy).Knobs.model_fields[knob]
    required = [f"{name}=x" for name, f in POLICIES.get(policy).Knobs.model_fields.items()
                if f.is_required() and name != knob]

    @EXAMPLES
    @given(invalid_values(field))
    def check(value):
        knobs = [arg for item in [*required, f"{knob}={as_yaml(value)}"] for arg in ("--knob", item)]
        result = run_main(capsys, "generate", "--target", "no-model-is-loaded", "--draft", "tiny-random-draft",
                          "--rule", policy, *knobs, "--prompt", "x")
        assert_one_line_error(result, f"rule {policy!r}", f"knob {knob!r}")

    check()


@pytest.mark.parametrize(("drafter", "knob"), DRAFTER_KNOBS)
def test_drafter_knobs_refuse_invalid_values(capsys, drafter, knob):
    field = DRAFTERS.get(drafter).Knobs.model_fields[knob]

    @EXAMPLES
    @given(invalid_values(field))
    def check(value):
        result = run_main(capsys, "generate", "--target", "no-model-is-loaded", "--draft", "tiny-random-draft",
                          "--rule", "exact", "--drafter", drafter, "--drafter-knob", f"{knob}={as_yaml(value)}",
                          "--prompt", "x")
        assert_one_line_error(result, f"drafter {drafter!r}", f"knob {knob!r}")

    check()
