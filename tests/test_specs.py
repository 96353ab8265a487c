"""Spec files that inherit (``extends:``, ``validation.resolve_extends``) for methods, tasks and suites: the shipped
specs resolve exactly as the snapshot (``tests/data/resolved_specs.json``) records them, and the rules of
docs/specs.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaxbench.cli import main
from relaxbench.errors import ConfigError
from relaxbench.harness.suite import shipped_suites, suite_file_fields, suite_path
from relaxbench.methods import load_method, method_files
from relaxbench.tasks import load_task, task_files
from relaxbench.validation import load_yaml, merge_patch
from tests.spec_snapshot import snapshot

SNAPSHOT = Path(__file__).parent / "data" / "resolved_specs.json"


@pytest.fixture(scope="module")
def now() -> dict:
    return snapshot()


@pytest.fixture(scope="module")
def before() -> dict:
    return json.loads(SNAPSHOT.read_text())


@pytest.mark.parametrize("kind", ["methods", "tasks", "suites"])
def test_every_shipped_spec_resolves_as_the_snapshot(kind, now, before):
    """Each method, task and suite (and each suite's run key) equals the snapshot: a rewrite of the YAML files or
    of their loading changed no resolved field, no stored record and no run key. A deliberate change retakes the
    snapshot (``make baselines``) and says in CHANGELOG.md what changed, run keys included."""
    assert set(now[kind]) == set(before[kind])
    for name in before[kind]:
        assert now[kind][name] == before[kind][name], (f"{kind} {name!r} resolves differently from the snapshot; if "
                                                       "deliberate, retake it with `make baselines`")


def test_list_shows_the_same_runnable_entries(now, before):
    assert now["list"] == before["list"]
    assert not any(name.startswith("_") for rows in now["list"].values() for name, _ in rows)


def test_the_shipped_specs_inherit():
    """The copies are gone: the paper grids restate no knob, the MGSM tasks share a parent, the k grid is written
    once."""
    assert load_yaml(method_files()["cactus-paper-grid"]) == {
        "extends": ["cactus-sweep", "_xia-draft-lengths"],
        "description": "cactus paper grid: delta x k in {3, 5, 10, 20} (Xia et al.)"}
    assert load_method("cactus-paper-grid").sweep == {"delta": (0.1, 0.25, 1.0, 10.0), "k": (3, 5, 10, 20)}
    root = Path(method_files()["fly"]).parent.parent
    grids = [p for kind in ("methods", "tasks", "suites") for p in (root / kind).glob("*.yaml")
             if "k: [3, 5, 10, 20]" in p.read_text()]
    assert [p.name for p in grids] == ["_xia-draft-lengths.yaml"]
    for lang in ("de", "en", "fr", "th"):
        raw = load_yaml(task_files()[f"mgsm-native-cot-{lang}"])
        assert raw["extends"] == "_mgsm-native-cot" and raw["source"] == {"name": lang}
        assert set(raw["scorer_args"]) == {"strict"}
        assert load_task(f"mgsm-native-cot-{lang}").scorer_args["primary"] == "strict"  # the parent's, merged
    assert load_yaml(shipped_suites()["xia-paper-8b"]) == {"extends": "xia-paper", "draft": "Qwen/Qwen3-8B"}


def test_parent_only_files_are_not_runnable():
    assert "_xia-draft-lengths" not in method_files() and "_mgsm-native-cot" not in task_files()
    with pytest.raises(ConfigError, match="unknown method '_xia-draft-lengths'"):
        load_method("_xia-draft-lengths")
    parent = Path(method_files()["fly"]).parent / "_xia-draft-lengths.yaml"
    with pytest.raises(ConfigError, match="parent method for 'extends:'"):
        load_method(str(parent))
    with pytest.raises(ConfigError, match="parent task for 'extends:'"):
        load_task(str(Path(task_files()["gsm8k"]).parent / "_mgsm-native-cot.yaml"))


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_task_extends_merges_mappings_and_replaces_the_rest(tmp_path):
    _write(tmp_path, "_base.yaml", "format: mgsm\nsource: {kind: hub, path: juletxara/mgsm, split: test, "
                                   "fields: [question]}\nscorer: answer-match\n"
                                   "scorer_args: {strict_select: first, ignore_case: true}\nstop: ['a', 'b']\n"
                                   "chat_template_args: {enable_thinking: true, x: 1}\n")
    child = _write(tmp_path, "child.yaml", "extends: _base.yaml\nsource: {name: de, fields: [answer_number]}\n"
                                           "scorer_args: {ignore_case: false, strict: 'N ([0-9]+)'}\nstop: ['c']\n"
                                           "chat_template_args: {x: null}\n")
    spec = load_task(str(child))
    assert spec.name == "child" and spec.origin == str(child)
    assert spec.source.path == "juletxara/mgsm" and spec.source.name == "de"
    assert spec.source.fields == ("answer_number",)  # a list replaces
    assert spec.scorer_args == {"strict_select": "first", "ignore_case": False, "strict": "N ([0-9]+)"}
    assert spec.stop == ("c",)
    assert spec.chat_template_args == {"enable_thinking": True}  # null removes the parent's key


def test_method_extends_several_parents_in_order(tmp_path):
    _write(tmp_path, "_grid.yaml", "sweep: {k: [2, 4]}\nk: 7\n")
    child = _write(tmp_path, "m.yaml", "extends: [fly-sweep, _grid.yaml]\nknobs: {theta: 0.2}\n")
    method = load_method(str(child))
    assert method.name == "m" and method.policy == "fly" and method.k == 7  # the later parent wins
    assert method.sweep == {"theta": (0.1, 0.3, 0.6, 1.0), "k": (2, 4)}  # the sweeps merge
    assert method.knobs == {**load_method("fly").knobs, "theta": 0.2}
    assert method.drafter == load_method("fly").drafter
    reset = _write(tmp_path, "r.yaml", "extends: fly-sweep\nsweep: null\nk: null\n")
    assert load_method(str(reset)).sweep == {} and load_method(str(reset)).k is None  # null: the default
    bare = _write(tmp_path, "b.yaml", "extends: margin\nsweep: {theta: [0.5]}\n")  # a policy name is a parent too
    assert load_method(str(bare)).policy == "margin"


def test_a_method_names_its_rule_with_rule_and_the_earlier_key_still_reads(tmp_path):
    """``rule:`` is the key the shipped methods use; ``policy:``, the earlier key, reads into the same field, so the
    arm's identity (its run key) is the same either way; both at once, or neither, is one line."""
    new = load_method(str(_write(tmp_path, "new.yaml", "rule: fly\nknobs: {theta: 0.2}\n")))
    old = load_method(str(_write(tmp_path, "old.yaml", "policy: fly\nknobs: {theta: 0.2}\n")))
    assert new.policy == old.policy == "fly" and new.identity() | {"name": ""} == old.identity() | {"name": ""}
    mixed = _write(tmp_path, "mixed.yaml", "extends: old.yaml\nrule: exact\n")  # a new file over an old parent
    assert load_method(str(mixed)).policy == "exact"
    with pytest.raises(ConfigError, match=r"both\.yaml: 'rule' and 'policy' are one field; give one$"):
        load_method(str(_write(tmp_path, "both.yaml", "rule: fly\npolicy: exact\n")))
    with pytest.raises(ConfigError, match=r"none\.yaml: missing field 'rule'"):
        load_method(str(_write(tmp_path, "none.yaml", "knobs: {theta: 0.2}\n")))
    assert all("policy" not in load_yaml(path) for path in method_files().values())  # the shipped files say rule


def test_suite_extends(tmp_path):
    base = _write(tmp_path, "base.yaml", "target: t\ndraft: d\nmethods: [exact, fly]\ntasks: [gsm8k, mbpp]\n"
                                         "limits: {gsm8k: 3, mbpp: 4}\nprofiles: [h100-sxm]\n")
    child = _write(tmp_path, "child.yaml", f"extends: {base}\ntasks: [gsm8k]\nlimits: {{gsm8k: 5, mbpp: null}}\n")
    fields = suite_file_fields(load_yaml(child), str(child))
    assert fields == {"target": "t", "draft": "d", "methods": ["exact", "fly"], "tasks": ["gsm8k"],
                      "limits": {"gsm8k": 5}, "profiles": ["h100-sxm"]}
    relative = _write(tmp_path, "rel.yaml", "extends: base.yaml\ndraft: e\n")  # next to the extending file
    assert suite_file_fields(load_yaml(relative), str(relative))["draft"] == "e"
    shipped = _write(tmp_path, "x.yaml", "extends: xia-paper\nseed: 8\n")
    assert suite_file_fields(load_yaml(shipped), str(shipped))["task_repeats"]["aime-2024"] == 48
    with pytest.raises(ConfigError, match="parent suite"):
        suite_path(str(_write(tmp_path, "_p.yaml", "seed: 1\n")))


def test_extends_errors_are_one_line(tmp_path):
    unknown = _write(tmp_path, "u.yaml", "extends: fly-swep\n")
    with pytest.raises(ConfigError, match=r"u\.yaml: 'extends' names an unknown method 'fly-swep'; did you mean "
                                          r"'fly-sweep'") as raised:
        load_method(str(unknown))
    assert "\n" not in str(raised.value)
    unknown_task = _write(tmp_path, "t.yaml", "extends: gsm8kk\n")
    with pytest.raises(ConfigError, match="unknown task 'gsm8kk'.*did you mean 'gsm8k'"):
        load_task(str(unknown_task))
    _write(tmp_path, "a.yaml", "extends: b.yaml\npolicy: fly\n")
    _write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"'extends' loops \(a -> b.yaml -> a.yaml\)"):
        load_method(str(tmp_path / "a.yaml"))
    own = _write(tmp_path, "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ConfigError, match="'extends' loops"):
        load_task(str(own))
    bad = _write(tmp_path, "bad.yaml", "extends: {fly: 1}\n")
    with pytest.raises(ConfigError, match="'extends' must name a method or list methods"):
        load_method(str(bad))


def test_extends_error_on_the_command_line(tmp_path, capsys):
    suite = _write(tmp_path, "s.yaml", "extends: xia-papr\n")
    assert main(["compare", "--suite", str(suite)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown suite 'xia-papr'" in err and "did you mean 'xia-paper'" in err


def test_merge_patch():
    assert merge_patch({"a": {"b": 1, "c": [1]}, "d": 2}, {"a": {"c": [2], "e": None}, "d": None, "f": 3}) == {
        "a": {"b": 1, "c": [2]}, "f": 3}
