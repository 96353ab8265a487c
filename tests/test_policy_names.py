"""The reflective-verification rule is named ``reflective`` everywhere: its method files, the shipped suites and
the run keys (stored runs keyed under its former name ``judge`` read unchanged; they are not resumed)."""

from __future__ import annotations

from relaxbench.harness import plan as plan_module
from relaxbench.harness.suite import shipped_suites
from relaxbench.methods import load_method, method_files
from relaxbench.validation import load_yaml


def test_the_rule_keys_under_its_own_name():
    method = load_method("reflective")
    arm = plan_module.Arm("reflective", method, "reflective", method.drafter, 5)
    assert method.policy == "reflective" and plan_module._arm_identity(arm)["method"]["policy"] == "reflective"


def test_no_shipped_spec_uses_the_former_name():
    assert not any(name.startswith("judge") and name != "judge-decoding" and not name.startswith("judge-decoding-")
                   for name in method_files())
    for name, path in shipped_suites().items():
        assert not {"judge", "judge-sweep"} & set(load_yaml(path).get("methods") or ()), name


def test_the_former_name_no_longer_resolves():
    import pytest

    from relaxbench.errors import ConfigError
    from relaxbench.policies import make_policy

    with pytest.raises(ConfigError, match="judge"):
        make_policy("judge")
