"""The catalog (built on first use into the cache, ``relaxbench/catalog.py``) answers as the registries do: the same
listings, the same knob refusals in the same words, and the registries themselves wherever it cannot know (stale, a
plug-in, a rule registered in this process). It is built once per source version, in a child interpreter, so the
process that asks stays free of torch. tests/test_docs_tables.py holds what it builds equal to the registries."""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from relaxbench import catalog
from relaxbench.catalog import policy_facts
from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.errors import ConfigError
from relaxbench.policies import POLICIES
from relaxbench.validation import Integer, validate

ROOT = Path(__file__).resolve().parents[1]
DATA = catalog._catalog()  # built into this run's cache on first use


def test_the_catalog_describes_this_code():
    assert DATA is not None and DATA["fingerprint"] == catalog.fingerprint()
    assert catalog.catalog_path().is_file()


def test_every_listed_rule_reads_back_as_its_class_declares():
    entries = DATA["policies"]["entries"]
    live = {name: cls for name, cls in catalog.listed(POLICIES) if cls.__module__.startswith("relaxbench.policies.")}
    assert set(entries) == set(live)
    for name, cls in live.items():
        assert catalog._facts(entries[name]) == policy_facts(cls), name


def test_every_drafter_reads_back_as_its_class_declares():
    entries = DATA["drafters"]["entries"]
    live = {name: cls for name, cls in DRAFTERS.items() if cls.__module__.startswith("relaxbench.decoding.drafters.")}
    assert set(entries) == set(live)
    for name, cls in live.items():
        assert (entries[name]["summary"], entries[name]["needs_draft_model"]) == (cls.summary, cls.needs_draft_model)


def _probes(spec) -> list[dict]:
    """Knob sets around every field's type and bounds, an unknown knob, and two faults at once."""
    values = ["x", True, None, [1], 0, 1, -1, 2, 0.5, 1.5, -0.1, 1e9, math.inf, -math.inf, math.nan, "inf"]
    one = [{}, {"no_such_knob": 1}]
    for name, field in spec.model_fields.items():
        bounds = [getattr(m, a) for m in field.metadata for a in ("ge", "gt", "le", "lt") if hasattr(m, a)]
        near = [b + d for b in bounds for d in (-1e-9, 0, 1e-9)]
        choices = [c for c in getattr(field.annotation, "__args__", ()) if isinstance(c, str)]
        one += [{name: v} for v in [*values, *near, *choices]]
    two = [{**a, **b} for a, b in itertools.combinations(one[1:], 2) if set(a).isdisjoint(b)]
    return one + two[::7]


def _outcome(spec, knobs) -> str | None:
    try:
        validate(spec, dict(knobs), "policy 'p'", "knob")
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("kind,registry", [("policies", POLICIES), ("drafters", DRAFTERS)])
def test_a_rebuilt_knob_spec_refuses_as_the_rule_in_its_words(kind, registry):
    """Where the catalog refuses, the class refuses in the same words; where the class accepts, so does the catalog.
    The catalog may accept what only a model validator of the class refuses (checked when the run is assembled)."""
    checked = 0
    for name, entry in DATA[kind]["entries"].items():
        live = registry.get(name).Knobs
        if not entry["knobs_complete"]:
            continue
        rebuilt = catalog._knob_model(kind, name)
        after_only = bool(live.__pydantic_decorators__.model_validators)
        for knobs in _probes(live):
            theirs, ours = _outcome(live, knobs), _outcome(rebuilt, knobs)
            if ours is not None or not after_only:
                assert ours == theirs, (name, knobs)
            checked += 1
    assert checked > 300


def test_a_spec_the_catalog_cannot_rebuild_is_marked_so():
    """The oracle's ``accept`` (a tuple with its own validator) is no type of relaxbench.validation."""
    oracle = DATA["drafters"]["entries"]["oracle"]
    assert not oracle["knobs_complete"]
    assert {"name": "accept", "type": catalog.OPAQUE, "default": {"tuple": [5]}} in oracle["knobs"]


def test_a_change_to_a_rule_module_makes_the_catalog_stale(tmp_path):
    copy = tmp_path / "relaxbench"
    for folder in catalog.SOURCES:
        shutil.copytree(catalog.PACKAGE / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    cached = catalog.catalog_path()
    assert catalog.read_catalog(cached, copy) is not None and catalog.catalog_path(copy) == cached
    fly = copy / "policies" / "fly.py"
    fly.write_text(fly.read_text().replace("Field(0.3, ge=0)", "Field(0.4, ge=0)"))
    assert catalog.read_catalog(cached, copy) is None  # never read for the edited source
    assert catalog.catalog_path(copy) != cached  # whose catalog is built anew, under another name


def test_the_registry_answers_what_the_catalog_cannot_know(tmp_path):
    """In a fresh interpreter: a rule a plug-in provides (an entry point of relaxbench.policies) is listed and has its
    knobs checked by the registry, a built-in rule still by the catalog, and a name nobody provides is refused."""
    (tmp_path / "fake_rule.py").write_text(textwrap.dedent('''
        """A plug-in rule."""
        from relaxbench.policies import Fidelity, Modes, Origin, VerificationPolicy, register_policy
        from relaxbench.policies.greedy import greedy_judgement
        from relaxbench.validation import Integer


        @register_policy
        class PluginRule(VerificationPolicy):
            name = "plugin-rule"
            origin = Origin(Fidelity.BASELINE, "a test", "a plug-in's rule")
            modes = Modes(lossless=True)

            class Knobs(VerificationPolicy.Knobs):
                depth: Integer = 1

            def judge(self, batch):
                return greedy_judgement(batch)
    '''))
    dist = tmp_path / "fake_rule-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-rule\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[relaxbench.policies]\nplugin-rule = fake_rule:PluginRule\n")
    probe = textwrap.dedent('''
        import json, sys
        from relaxbench import catalog
        from relaxbench.errors import ConfigError
        out = {"fly_from_catalog": None}
        def refusal(kind, name, knobs):
            try:
                catalog.check_knobs(kind, name, knobs, f"policy {name!r}")
            except ConfigError as exc:
                return str(exc)
        out["fly"] = refusal("policies", "fly", {"window": 0})
        out["fly_from_catalog"] = "relaxbench.policies" not in sys.modules
        out["plugin"] = refusal("policies", "plugin-rule", {"depth": "deep"})
        out["names"] = catalog.names("policies")
        out["unknown"] = refusal("policies", "no-such-rule", {})
        print(json.dumps(out))
    ''')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fly"] == "policy 'fly': knob 'window' must be >= 1, got 0" and out["fly_from_catalog"]
    assert out["plugin"] == "policy 'plugin-rule': knob 'depth' must be an integer, got 'deep'"
    assert "plugin-rule" in out["names"] and "fly" in out["names"]
    assert out["unknown"].startswith("unknown rule 'no-such-rule'")


def test_a_rule_registered_in_this_process_is_the_registrys(capsys, monkeypatch):
    """With the registry imported, a rule registered here (no catalog entry) is listed and its knobs checked."""
    from relaxbench.cli import main
    from relaxbench.methods import MethodSpec, check_method_spec
    from relaxbench.policies import Fidelity, Modes, Origin, VerificationPolicy, register_policy
    from relaxbench.policies.greedy import greedy_judgement

    monkeypatch.setattr(POLICIES, "_items", dict(POLICIES._items))  # unregistered afterwards

    @register_policy
    class ThrowawayRule(VerificationPolicy):
        name = "throwaway-rule"
        origin = Origin(Fidelity.BASELINE, "a test", "registered by a test")
        modes = Modes(lossless=True)

        class Knobs(VerificationPolicy.Knobs):
            depth: Integer = 1

        def judge(self, batch):
            return greedy_judgement(batch)

    assert "throwaway-rule" not in DATA["policies"]["entries"]
    with pytest.raises(ConfigError, match="knob 'depth' must be an integer"):
        check_method_spec("m", MethodSpec(name="m", policy="throwaway-rule", knobs={"depth": 1.5}), "tiny-random-draft")
    assert main(["list", "rules"]) == 0
    assert "throwaway-rule" in capsys.readouterr().out


def test_a_fresh_cache_builds_the_catalog_once_and_the_asker_imports_no_torch(tmp_path):
    """In a fresh interpreter with an empty cache: the first knob check builds the catalog (in a child interpreter)
    and answers from it without importing torch; the second run reads the cached file and builds nothing."""
    probe = textwrap.dedent('''
        import json, sys, time
        from relaxbench import catalog
        from relaxbench.errors import ConfigError
        start = time.perf_counter()
        try:
            catalog.check_knobs("policies", "fly", {"window": 0}, "policy 'fly'")
        except ConfigError as exc:
            refusal = str(exc)
        print(json.dumps({"refusal": refusal, "torch": "torch" in sys.modules, "path": str(catalog.catalog_path()),
                          "mtime": catalog.catalog_path().stat().st_mtime_ns}))
    ''')
    env = {**os.environ, "RELAXBENCH_CACHE": str(tmp_path / "cache")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                      env=env, timeout=300).stdout) for _ in range(2)]
    for run in runs:
        assert run["refusal"] == "policy 'fly': knob 'window' must be >= 1, got 0" and run["torch"] is False
        assert run["path"].startswith(str(tmp_path / "cache" / "catalog"))
    assert runs[0]["mtime"] == runs[1]["mtime"]  # built once
