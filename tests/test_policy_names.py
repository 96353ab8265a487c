"""The reflective-verification rule is named ``reflective``; its former name ``judge`` (policy and method) still
resolves, and runs that name it keep their compare run keys, so stored runs resume."""

from __future__ import annotations

import pytest

from relaxbench.cli import build_parser
from relaxbench.commands.compare import suite_from_args
from relaxbench.commands.listing import rows
from relaxbench.harness import plan as plan_module
from relaxbench.methods import load_method
from relaxbench.policies import POLICIES, make_policy, policy_key_name
from relaxbench.policies.reflective import ReflectiveVerification

# Run keys of compare runs that name `judge`, as computed by the code before the rename, at commit a102c83 (main):
# `build_plan(suite_from_args(build_parser().parse_args(["compare", *PAIR, "--methods", M, *TASK]))).key`. (The
# shipped default and full suites got new keys later for another reason: MT-Bench now generates as FastChat does,
# see tests/test_specs.py INTENDED; these runs leave MT-Bench out.)
PAIR = ("--target", "qwen2.5-coder-1.5b-instruct", "--draft", "qwen2.5-coder-0.5b-instruct")
TASK = ("--tasks", "humaneval-completion", "--max-new-tokens", "64")
KEYS_BEFORE_THE_RENAME = {"exact,judge,judge-sweep": "48e51035e28c335c03d0",
                          "exact,fly,judge,margin-greedy,typical-greedy": "7480ea263b985177c0f7"}


@pytest.mark.parametrize("methods", sorted(KEYS_BEFORE_THE_RENAME))
def test_runs_naming_judge_keep_their_run_keys(methods):
    for spelling in (methods, methods.replace("judge", "reflective")):
        args = build_parser().parse_args(["compare", *PAIR, "--methods", spelling, *TASK])
        plan = plan_module.build_plan(suite_from_args(args))
        assert any(arm.method.policy == "reflective" for arm in plan.arms)  # the run does run the renamed rule
        if spelling == methods:
            assert plan.key == KEYS_BEFORE_THE_RENAME[methods]


def test_judge_is_an_alias_of_reflective():
    assert POLICIES.get("judge") is POLICIES.get("reflective") is ReflectiveVerification
    assert isinstance(make_policy("judge", {"alpha": 0.5}), ReflectiveVerification)
    assert "judge" in POLICIES and "judge" not in POLICIES.names()
    listed = dict(rows("policies"))
    assert "judge" not in listed and listed["reflective"].endswith("; also named judge")
    assert policy_key_name("judge") == policy_key_name("reflective") == "judge"
    assert policy_key_name("cactus") == "cactus"  # every other rule keys under its own name


def test_former_method_names_resolve_under_their_own_names():
    for old, new in (("judge", "reflective"), ("judge-sweep", "reflective-sweep")):
        before, after = load_method(old), load_method(new)
        assert (before.name, after.name) == (old, new)
        assert before.policy == after.policy == "reflective"
        assert before.model_dump(exclude={"name"}) == after.model_dump(exclude={"name"})


def test_the_run_key_does_not_depend_on_how_the_rule_is_spelled():
    method = load_method("reflective")
    arms = [plan_module.Arm("reflective", method.model_copy(update={"policy": spelling}), "reflective",
                            method.drafter, 5) for spelling in ("judge", "reflective")]
    old, new = (plan_module._arm_identity(arm) for arm in arms)
    assert old == new and old["method"]["policy"] == "judge"


def test_a_user_method_extending_judge_still_inherits_the_method_file(tmp_path):
    mine = tmp_path / "my-judge.yaml"
    mine.write_text("extends: judge\nknobs:\n  alpha: 0.5\n")
    spec = load_method(str(mine))
    assert (spec.policy, dict(spec.knobs), spec.drafter.kind) == ("reflective", {"alpha": 0.5}, "model")
