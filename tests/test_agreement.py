"""The agreement of two arms (relaxbench/analysis/agreement.py): figures worked out by hand on built samples; a
real compare of fly and fly-vllm on the tiny models, whose ``summary --agree`` table equals the figures recomputed
here from the stored samples; fly-native paired with its counterpart fly-vllm without being asked, in the terminal,
the HTML and the PDF; and the refusals of a bad ``--agree``."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from relaxbench.analysis.agreement import agreement, declared_pairs, parse_pair
from relaxbench.analysis.records import CellRecord
from relaxbench.cli import main
from relaxbench.decoding.records import Rounds
from relaxbench.errors import ConfigError
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now
from tests.conftest import CliResult, assert_one_line_error
from tests.store_query import sample_rows

DATA = Path(__file__).parent / "data" / "tiny_tasks.jsonl"
TINY = ["--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
        "--draft-dtype", "float64"]
MODEL_DRAFTER = {"kind": "model", "knobs": {}}


def definition(arm: str, policy: str, k: int = 4, knobs: dict | None = None, drafter: dict | None = None,
               temperature: float = 0.0, task: str = "t", position: int = 0) -> CellDefinition:
    return CellDefinition(
        task=task, arm=arm, position=position, is_baseline=arm == "ar", method=arm, policy=policy,
        lossless=policy in ("none", "exact"), knobs=knobs or {}, method_spec={"name": arm, "policy": policy},
        drafter=None if arm == "ar" else (drafter or MODEL_DRAFTER), k=0 if arm == "ar" else k,
        decode={"k": k, "max_new_tokens": 16, "seed": 0, "sampling": {"temperature": temperature}},
        task_spec={"name": task}, scorer="exact-match", data_fingerprint="fixture")


def sample(item: int, output: tuple[int, ...], rounds: tuple[tuple[int, int], ...], repeat: int = 0,
           cell_id: int = 0) -> SampleRow:
    """One stored sample: ``rounds`` as (drafted, accepted); the emitted tokens are spread over the rounds so they
    add up to the output (MAL = output tokens / rounds, as the store counts it)."""
    emitted = [0] * len(rounds)
    for i in range(len(output)):
        emitted[i % len(rounds)] += 1
    drafted = tuple(d for d, _ in rounds)
    accepted = tuple(a for _, a in rounds)
    return SampleRow(
        cell_id=cell_id, session_id=1, item_id=f"i{item}", item_index=item, turn=0, repeat=repeat, category=None,
        created_at=now(), prompt_ids=(1, 2), output_ids=output, output_text="", stop_reason="eos",
        n_prompt_tokens=2, n_output_tokens=len(output), n_rounds=len(rounds), n_drafted=sum(drafted),
        n_accepted=sum(accepted), n_relaxed=0, time_total=1.0, time_prefill=0.1, time_draft=0.0, time_verify=0.0,
        time_policy=0.0,
        rounds=Rounds.of(drafted=drafted, accepted=accepted, relaxed=(0,) * len(rounds), emitted=tuple(emitted),
                         t_draft=(0.0,) * len(rounds), t_verify=(0.0,) * len(rounds), t_policy=(0.0,) * len(rounds)),
        score=1.0, passed=True, score_details={}, matches_baseline=None, divergence=None)


def cell(arm: str, samples: list[SampleRow], **kw) -> CellRecord:
    d = definition(arm, kw.pop("policy", arm), **kw)
    return CellRecord(**{f: getattr(d, f) for f in CellDefinition.__dataclass_fields__}, cell_id=0,
                      samples=tuple(samples))


# ------------------------------------------------------------------------------------------------ by hand


def test_figures_worked_out_by_hand():
    a = cell("a", [
        sample(1, (1, 2, 3, 4), ((2, 2), (2, 0))),  # identical to B's, rounds alike: 2 of 2
        sample(2, (5, 6, 7, 8, 9), ((3, 3), (3, 0))),  # differs at token 2 (2 of 5 shared); first round differs
        sample(3, (1, 2, 3), ((3, 2),)),  # B goes on past it: 3 of 6 shared; its one round alike
        sample(4, (7, 7), ((1, 1),)),  # B never finished item 4: left out
        sample(5, (), ()),  # both empty: identical, full agreement, no rounds
    ])
    b = cell("b", [
        sample(1, (1, 2, 3, 4), ((2, 2), (2, 0))),
        sample(2, (5, 6, 0, 8, 9), ((3, 1), (3, 2), (3, 0))),
        sample(3, (1, 2, 3, 4, 5, 6), ((3, 2), (3, 1))),
        sample(5, (), ()),
    ])
    result = agreement(a, b)
    assert result.n == 4  # items 1, 2, 3, 5
    assert result.identical == 2 and result.identical_share == 0.5  # items 1 and 5
    assert result.token_agreement == pytest.approx((1 + 2 / 5 + 3 / 6 + 1) / 4)  # 0.725
    assert result.median_first_divergence == 2.5  # median of 2 (item 2) and 3 (item 3)
    assert result.rounds_alike == pytest.approx((2 + 0 + 1 + 0) / (2 + 2 + 1 + 0))  # 3 / 5
    assert result.mal_a == pytest.approx((4 + 5 + 3 + 0) / (2 + 2 + 1 + 0))  # item 4 left out: 12 / 5
    assert result.mal_b == pytest.approx((4 + 5 + 6 + 0) / (2 + 3 + 2 + 0))  # 15 / 7
    assert result.same_drafts and (result.arm_a, result.arm_b, result.task) == ("a", "b", "t")


def test_identical_outputs_and_repeats_paired_one_to_one():
    a = cell("a", [sample(1, (4, 5, 6), ((2, 2),), repeat=0), sample(1, (4, 5, 6), ((2, 2),), repeat=1)])
    b = cell("b", [sample(1, (4, 5, 6), ((2, 2),), repeat=0)])  # repeat 1 not finished: A's repeat 1 left out
    result = agreement(a, b)
    assert (result.n, result.identical, result.token_agreement, result.median_first_divergence) == (1, 1, 1.0, None)
    assert result.rounds_alike == 1.0 and result.mal_a == result.mal_b == 3.0


def test_an_empty_output_against_a_long_one_diverges_at_zero():
    result = agreement(cell("a", [sample(1, (), ())]), cell("b", [sample(1, (9, 9), ((1, 1),))]))
    assert (result.n, result.identical, result.token_agreement, result.median_first_divergence) == (1, 0, 0.0, 0.0)
    assert result.rounds_alike is None and result.mal_a is None  # A has no rounds at all
    assert result.mal_b == 2.0


def test_no_unit_in_common():
    result = agreement(cell("a", [sample(1, (1,), ((0, 0),))]), cell("b", [sample(2, (1,), ((0, 0),))]))
    assert result.n == 0 and result.identical_share is None and result.token_agreement is None
    assert result.median_first_divergence is None and result.rounds_alike is None and result.mal_a is None


def test_declared_pairs_need_the_same_drafter_k_mode_and_knobs():
    counterparts = {"twin": "orig"}.get
    knobs = lambda policy, given: {"theta": 0.3, **given}  # noqa: E731  (the rule's default filled in)
    orig = cell("orig", [], policy="orig", knobs={"theta": 0.3})
    same = cell("twin", [], policy="twin")  # theta by default: the same knobs
    other_k = cell("twin-k8", [], policy="twin", k=8)
    other_drafter = cell("twin-ngram", [], policy="twin", drafter={"kind": "ngram", "knobs": {}})
    sampled = cell("twin-sampled", [], policy="twin", temperature=0.7)
    other_knobs = cell("twin-loose", [], policy="twin", knobs={"theta": 0.9})
    pairs = declared_pairs([orig, same, other_k, other_drafter, sampled, other_knobs], counterparts, knobs)
    assert pairs == [("twin", "orig")]


@pytest.fixture
def engine_arms_left_as_found():
    """The vLLM engine's arms registered after the test as before it (a first import of vllm_native registers
    them; they are no rules of the transformers engine, so the rest of the suite must not see them)."""
    from relaxbench.policies import POLICIES

    before = {name: name in POLICIES for name in ("native", "fly-native")}
    yield
    for name, registered in before.items():
        if not registered:
            POLICIES.remove(name)


def test_fly_native_declares_fly_vllm_as_its_counterpart(engine_arms_left_as_found):
    from relaxbench.analysis.agreement import policy_counterpart, policy_knobs
    from relaxbench.commands.report import engine_arms_known
    from relaxbench.integrations.vllm_native import FlyNativePolicy
    from relaxbench.policies import POLICIES
    from relaxbench.policies.base import VerificationPolicy
    from relaxbench.policies.fly_vllm import FLyVLLM

    assert FlyNativePolicy.counterpart == FLyVLLM.name == "fly-vllm"
    assert VerificationPolicy.counterpart is None and FLyVLLM.counterpart is None
    POLICIES.remove("native")
    POLICIES.remove("fly-native")
    registered = "fly-native" in POLICIES
    with engine_arms_known():
        assert policy_counterpart("fly-native") == "fly-vllm" and policy_counterpart("fly-vllm") is None
        assert policy_counterpart("no-such-rule") is None
        # a method that sets vLLM's defaults and a bare policy name have the same knobs
        assert policy_knobs("fly-native", {}) == policy_knobs("fly-vllm", {"fly_entropy_threshold": 0.3,
                                                                            "fly_entropy_top_k": 3})
    assert ("fly-native" in POLICIES) == registered  # the engine's arms are not left to the rest of the process


@pytest.mark.parametrize("value, words", [
    ("fly", "give two arms as A:B"), ("fly:", "give two arms as A:B"), ("fly:flyy", "unknown arm 'flyy'"),
    ("fly:fly", "the same arm twice")])
def test_parse_pair_refusals_name_the_runs_arms(value, words):
    with pytest.raises(ConfigError) as raised:
        parse_pair(value, ["ar", "fly", "fly-vllm"])
    assert words in str(raised.value) and "this run's arms: ar, fly, fly-vllm" in str(raised.value)


def test_parse_pair_finds_an_arm_with_a_colon_in_its_name():
    arms = ["ar", "autojudge[head=c:/h.pt]", "exact"]
    assert parse_pair("autojudge[head=c:/h.pt]:exact", arms) == ("autojudge[head=c:/h.pt]", "exact")
    assert parse_pair(" exact : ar ", arms) == ("exact", "ar")


# ------------------------------------------------------------------------------------------------ a real compare


def expected_figures(samples: dict, task: str, arm_a: str, arm_b: str) -> dict:
    """The agreement of two arms recomputed from the stored samples, with no code of relaxbench's analysis."""
    keys = sorted(k[2:] for k in samples if k[:2] == (task, arm_a) and (task, arm_b, *k[2:]) in samples)
    pairs = [(samples[(task, arm_a, *k)], samples[(task, arm_b, *k)]) for k in keys]
    prefixes = [len(os.path.commonprefix([list(x.output_ids), list(y.output_ids)])) for x, y in pairs]
    longest = [max(len(x.output_ids), len(y.output_ids)) for x, y in pairs]
    differ = [p for p, (x, y) in zip(prefixes, pairs) if x.output_ids != y.output_ids]
    alike = sum(len(list(itertools.takewhile(lambda r: r[0] == r[1], zip(
        zip(x.rounds.drafted, x.rounds.accepted), zip(y.rounds.drafted, y.rounds.accepted))))) for x, y in pairs)
    return {
        "n": len(pairs), "identical": len(pairs) - len(differ),
        "token": statistics.fmean(p / n if n else 1.0 for p, n in zip(prefixes, longest)),
        "median": statistics.median(differ) if differ else None,
        "rounds": alike / sum(x.n_rounds for x, _ in pairs),
        "mal_a": sum(x.n_output_tokens for x, _ in pairs) / sum(x.n_rounds for x, _ in pairs),
        "mal_b": sum(y.n_output_tokens for _, y in pairs) / sum(y.n_rounds for _, y in pairs),
    }


def table_row(text: str, title: str, arm_a: str) -> list[str]:
    """The cells of ``arm_a``'s row in the terminal table titled ``title``."""
    block = text.split(title)[1]
    line = next(line for line in block.splitlines() if line.startswith(f"│ {arm_a} "))
    return [c.strip() for c in line.strip("│").split("│")]


@pytest.fixture(scope="module")
def fly_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agree") / "run"
    assert main(["compare", *TINY, "--methods", "fly,fly-vllm", "--tasks", "jsonl", "--data-file", f"jsonl={DATA}",
                 "--limit", "3", "--max-new-tokens", "12", "--warmup", "0", "--out", str(out),
                 "--report-format", "none"]) == 0
    return out


def test_summary_agree_shows_the_figures_of_the_stored_samples(fly_run, capsys):
    capsys.readouterr()
    assert main(["summary", str(fly_run)]) == 0
    assert "agreement between arms" not in capsys.readouterr().out  # fly and fly-vllm declare no counterpart
    assert main(["summary", str(fly_run), "--agree", "fly:fly-vllm"]) == 0
    printed = capsys.readouterr().out
    want = expected_figures(sample_rows(fly_run / "results.sqlite"), "jsonl", "fly", "fly-vllm")
    assert want["n"] == 3
    median = want["median"]
    assert table_row(printed, "jsonl: agreement between arms", "fly") == [
        "fly", "fly-vllm", "3", f"{want['identical']}/3 ({want['identical'] / 3:.0%})", f"{want['token']:.1%}",
        "-" if median is None else (f"{median:.0f}" if float(median).is_integer() else f"{median:.1f}"),
        f"{want['rounds']:.1%}", f"{want['mal_a']:.2f}", f"{want['mal_b']:.2f}"]
    # fly drafts with the n-gram + LM drafter at k = 15, fly-vllm with the draft model at k = 8: the note says so
    assert "Different drafter or k" in " ".join(printed.split())


# ------------------------------------------------------------------------------------------------ fly-native


NATIVE_ARMS = (  # arm, policy, knobs, k
    ("ar", "none", {}, 0),
    ("fly-vllm", "fly-vllm", {"fly_entropy_threshold": 0.3, "fly_entropy_top_k": 3}, 4),
    ("fly-native", "fly-native", {}, 4),
    ("fly-vllm-k2", "fly-vllm", {}, 2),  # another k: not fly-native's counterpart arm
)
OUTPUTS = {  # arm → per item (output, rounds as (drafted, accepted))
    "ar": [((1, 2, 3, 4), ((0, 0),) * 4), ((5, 6, 7), ((0, 0),) * 3), ((8, 9), ((0, 0),) * 2)],
    "fly-vllm": [((1, 2, 3, 4), ((4, 3),)), ((5, 6, 7), ((4, 2),)), ((8, 9), ((4, 1),))],
    "fly-native": [((1, 2, 3, 4), ((4, 3),)), ((5, 6, 0), ((4, 1), (4, 0))), ((8, 9), ((4, 1),))],
    "fly-vllm-k2": [((1, 2, 3, 4), ((2, 2), (2, 0))), ((5, 6, 7), ((2, 2),)), ((8, 9), ((2, 1),))],
}


@pytest.fixture(scope="module")
def native_run(tmp_path_factory) -> Path:
    """A stored vLLM run with a fly-native arm, written through the Store API (fly-native needs vLLM on a GPU)."""
    out = tmp_path_factory.mktemp("native") / "run"
    out.mkdir()
    with Store(out / "results.sqlite") as store:
        run_id = store.open_run("native-run", "tiny-target", "tiny-draft", {"engine": "vllm"})
        session = store.start_session(run_id, {"device": "cpu"})
        for position, (arm, policy, knobs, k) in enumerate(NATIVE_ARMS):
            cell_id = store.ensure_cell(run_id, definition(arm, policy, k, knobs, position=position))
            for item, (output, rounds) in enumerate(OUTPUTS[arm]):
                store.add_sample(replace(sample(item, output, rounds), cell_id=cell_id, session_id=session))
        store.finish_session(session, "finished")
    return out


def test_fly_native_gets_its_agreement_with_fly_vllm_unasked(native_run, tmp_path, capsys,
                                                            engine_arms_left_as_found):
    from relaxbench.commands.report import engine_arms_known
    from relaxbench.policies import POLICIES
    from relaxbench.report.content import load_report
    from relaxbench.report.pdf import ReportDoc, story

    capsys.readouterr()
    registered = "fly-native" in POLICIES
    assert main(["summary", str(native_run)]) == 0
    assert ("fly-native" in POLICIES) == registered  # known while summary ran, then forgotten
    printed = capsys.readouterr().out
    # by hand: items 0 and 2 identical; item 1 shares 2 of 3 tokens, its first round differs
    row = ["fly-native", "fly-vllm", "3", "2/3 (67%)", f"{(1 + 2 / 3 + 1) / 3:.1%}", "2",
           f"{(1 + 0 + 1) / (1 + 2 + 1):.1%}", f"{9 / 4:.2f}", f"{9 / 3:.2f}"]
    assert table_row(printed, "t: agreement between arms", "fly-native") == row
    assert "fly-vllm-k2" not in printed.split("t: agreement between arms")[1]
    assert "counterpart" in " ".join(printed.split("t: agreement between arms")[1].split())

    # the same table in the report: the HTML's cells and the PDF's
    with engine_arms_known():
        report = load_report(native_run)
    table = next(t for t in report.tasks[0].tables if t.key == "t-agreement")
    assert [c.text for c in table.rows[0].cells] == row and len(table.rows) == 1
    assert main(["report", str(native_run), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    shown = re.search(r'data-metric="agreement.token_agreement" data-value="([^"]+)"[^>]*>([^<]+)<', page)
    assert float(shown.group(1)) == pytest.approx((1 + 2 / 3 + 1) / 3) and shown.group(2) == row[4]
    assert (tmp_path / "report.pdf").stat().st_size > 0
    flow = story(report, ReportDoc(tmp_path / "story.pdf", report))
    cells = [[p.getPlainText() for p in r] for f in flow if type(f).__name__ == "Table" for r in f._cellvalues
             if all(hasattr(p, "getPlainText") for p in r)]
    assert row in cells


def test_agree_with_a_declared_pair_shows_it_once(native_run, capsys):
    capsys.readouterr()
    assert main(["summary", str(native_run), "--agree", "fly-vllm:fly-native", "--agree", "ar:fly-native"]) == 0
    block = capsys.readouterr().out.split("t: agreement between arms")[1]
    lines = [line for line in block.splitlines() if line.startswith("│ ")]
    assert [line.split("│")[1].strip() for line in lines] == ["fly-vllm", "ar"]  # the user's order; no repeat


@pytest.mark.parametrize("command", ["summary", "report"])
@pytest.mark.parametrize("value, words", [
    ("fly-nativ:fly-vllm", "unknown arm 'fly-nativ'"), ("fly-vllm:fly-vllm", "the same arm twice"),
    ("fly-vllm", "give two arms as A:B")])
def test_a_bad_agree_is_one_line(native_run, tmp_path, capsys, command, value, words):
    code = main([command, str(native_run), "--agree", value, *(["--out", str(tmp_path)] if command == "report"
                                                                else [])])
    captured = capsys.readouterr()
    assert_one_line_error(CliResult(code, captured.out, captured.err), words,
                          "this run's arms: ar, fly-vllm, fly-native, fly-vllm-k2")
    assert not list(tmp_path.iterdir())  # refused before any report was written
    assert captured.out == ""
