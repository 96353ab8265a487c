"""Trained judges: AutoJudge's mining search, the mining store, head training and the two policies.

* Hand-checked cases on scripted models (``scripted_lm.py``): the search finds exactly the mismatches written down
  below, and the labels follow the scorer's outcome (GSM8K's extracted answer, code's pass/fail in the sandbox).
* The cached, incremental search equals a literal transcription of AutoJudge's loop (full forwards, no cache) on
  the tiny random models.
* Training on separable synthetic features is perfect held out; the head file reproduces scikit-learn's
  probabilities; ``tau = 0`` is exactly ``exact`` in the engine; the features are read at the draft token's own
  position; heads for another pair or hidden size are one-line errors; ``compare`` refuses training items and
  its report names the head and its data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from relaxbench.cli import main as cli_main
from relaxbench.data.items import TaskItem
from relaxbench.decoders import build_decoder
from relaxbench.decoding.drafters import DrafterInputs, DraftModelDrafter
from relaxbench.decoding.loop import DecodeConfig, SpeculativeDecoder
from relaxbench.errors import ConfigError, DataError
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.policies import make_policy
from relaxbench.policies.base import PolicyEnv
from relaxbench.policies.judge_head import JudgeHead, load_head
from relaxbench.policies.trained_judge import AutoJudge
from relaxbench.scoring import Score, Scorer, make_scorer
from relaxbench.scoring.code import code_settled
from relaxbench.tasks.spec import TaskSpec
from relaxbench.tasks.yaml_tasks import YamlTask
from relaxbench.trained_judges.mine import SilentProgress, mine, mining_config
from relaxbench.trained_judges.search import MiningOptions, MismatchSearch, SearchState
from relaxbench.trained_judges.select import select_items
from relaxbench.trained_judges.store import MinedData, MiningStore
from relaxbench.trained_judges.train import fit_head, head_of, problem_folds, train_heads
from tests.conftest import CliResult, assert_one_line_error
from tests.scripted_lm import ScriptedLM, ScriptedModel, plans
from tests.test_losslessness import random_prompts

EOS = "<eos>"


@pytest.fixture
def cli(capsys):
    """The real command, in process (argument parsing to exit status), as the CLI tests of the engine do."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = cli_main(list(args))
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


def table(mapping: dict[str, str | None], prompt: str = "Q:"):
    """A rule from a table: response text so far -> next character (absent or None: end of text)."""
    return lambda text: mapping.get(text[len(prompt):])


def scripted_pair(target_rule, draft_rule) -> tuple[ScriptedModel, ScriptedModel]:
    return (ScriptedModel("scripted-target", ScriptedLM(target_rule, code=1.0)),
            ScriptedModel("scripted-draft", ScriptedLM(draft_rule, code=2.0)))


def task(name: str, fmt: str, scorer: str, items: list[TaskItem], **spec) -> YamlTask:
    return YamlTask(TaskSpec(name=name, format=fmt, chat=False, scorer=scorer, **spec), items, f"fp-{name}")


def decoded(model: ScriptedModel, token: int) -> str:
    return EOS if token == model.model.eos else model.tokenizer.decode([token])


def mined(target: ScriptedModel, found) -> list[tuple[int, str, str, bool]]:
    return [(m.position, decoded(target, m.draft_token), decoded(target, m.target_token), m.important)
            for m in found]


def search(source: YamlTask, target, draft, options: MiningOptions | None = None):
    """Run the whole search on the source's first item: (reference, mismatches, final state)."""
    item = source.items[0]
    options = options or MiningOptions(max_new_tokens=32)
    prompt = source.encode(target, item, 0, [], options.max_new_tokens)
    s = MismatchSearch(target, draft, source.scorer(), item, prompt, options)
    reference = s.reference()
    found = []
    state = s.run(SearchState(list(reference.ids)), reference, lambda m, st: found.append(m))
    return prompt, reference, found, state


# -- the hand-checked cases --------------------------------------------------------------------------------------
# GSM8K-style: the outcome is the extracted answer (the last number). Reference "ab12" (answer 12).
#  1. the draft proposes X for b at 1; the target continues "aX12" (12): unimportant, and "aX12" becomes the
#     response;
#  2. the draft proposes 7 for 2 at 3; the target ends "aX17" (17): important, the response stays "aX12";
#  3. the draft proposes ! for the EOS at 4; the target ends "aX12!" (12): unimportant, the response is "aX12!";
#  then the draft agrees everywhere (it ends "aX12!" too).
GSM_TARGET = plans("ab12", "aX12", "aX17", "aX12!")
GSM_DRAFT = table({"": "a", "a": "X", "ab": "1", "ab1": "2", "aX": "1", "aX1": "7", "aX12": "!"})


def gsm_source(n_items: int = 1) -> YamlTask:
    items = [TaskItem(f"q{i}", ("Q:",), reference="12") for i in range(n_items)]
    return task("synthetic-gsm", "gsm8k", "gsm8k", items)


def test_the_c_grid_is_autojudges_as_the_docstring_states():
    """(√10)^-14 … (√10)^-1, then 1, 3, 10, 50, 100: AutoJudge's grid, 19 values, increasing."""
    from relaxbench.trained_judges.train import C_GRID

    assert len(C_GRID) == 19 and list(C_GRID) == sorted(C_GRID)
    assert C_GRID[:14] == pytest.approx([10 ** (e / 2) for e in range(-14, 0)])
    assert C_GRID[14:] == (1.0, 3.0, 10.0, 50.0, 100.0)


def test_search_finds_exactly_the_hand_checked_mismatches():
    target, draft = scripted_pair(GSM_TARGET, GSM_DRAFT)
    prompt, reference, found, state = search(gsm_source(), target, draft)
    assert target.tokenizer.decode(reference.ids, skip_special_tokens=True) == "ab12"
    assert reference.outcome == "12" and reference.ended == "eos"
    assert mined(target, found) == [(1, "X", "b", False), (3, "7", "2", True), (4, "!", EOS, False)]
    assert [m.outcome for m in found] == ["12", "17", "12"]
    assert target.tokenizer.decode(state.response, skip_special_tokens=True) == "aX12!"
    assert state.finished and state.left == 5 and state.handled == 3
    # features: each model's hidden state at the mismatch's own position, on the sequence holding the draft token
    for m in found:
        at = len(prompt) + m.position
        assert m.target_hidden.tolist() == [float(m.draft_token), float(at), 1.0]
        assert m.draft_hidden.tolist() == [float(m.draft_token), float(at), 2.0]
        expected = math.exp(0) / (math.exp(10) + math.exp(5) + (target.logit_dim - 2))
        assert m.target_prob_draft == pytest.approx(expected, rel=1e-6)  # scripted logits: 10, 5 and 0
        assert m.target_prob_target == pytest.approx(math.exp(10) * expected, rel=1e-6)


def test_labels_follow_the_code_scorer_not_the_text():
    """Code: pass/fail decides. "return 7-6" differs from "return 1" but passes (unimportant); "7+6" fails."""
    prefix = "def f():\n    return "
    target, draft = scripted_pair(plans("1", "7-6", "7+6", prompt=prefix),
                                  table({"": "7", "7": "+", "7-": "6"}, prompt=prefix))
    item = TaskItem("HumanEval/x", (prefix,), test="def check(c):\n    assert c() == 1\n", entry_point="f",
                    code_prefix=prefix)
    source = task("synthetic-code", "humaneval", "code-exec", [item], scorer_args={"timeout": 10})
    _, reference, found, state = search(source, target, draft)
    assert reference.outcome is True
    assert mined(target, found) == [(0, "7", "1", False), (1, "+", "-", True)]
    assert [m.outcome for m in found] == [True, False]
    assert target.tokenizer.decode(state.response, skip_special_tokens=True) == "7-6"


def test_a_draft_eos_ends_the_search_after_it_is_labelled():
    """AutoJudge stops when the swapped-in token is an EOS (find_important_tokens_lcb.py l.185-189), whatever its
    label: here the early EOS changes the answer (important) and the later mismatch is never visited."""
    target, draft = scripted_pair(plans("ab12"), table({"": "a", "a": None, "ab": "9"}))
    _, _, found, state = search(gsm_source(), target, draft)
    assert mined(target, found) == [(1, EOS, "b", True)]
    assert state.finished and target.tokenizer.decode(state.response, skip_special_tokens=True) == "ab12"


def test_label_changing_options_are_named_and_off_by_default():
    target, draft = scripted_pair(GSM_TARGET, GSM_DRAFT)
    assert MiningOptions(max_new_tokens=8).label_changing() == {}
    # AutoJudge's EAGLE shortcut: the scripted target gives every other token ~4.5e-5 < 0.01
    _, _, found, _ = search(gsm_source(), target, draft, MiningOptions(max_new_tokens=32, min_target_prob=0.01))
    assert [(m.important, m.shortcut, m.generated) for m in found] == [(True, "low-target-prob", 0)]
    # the first mismatch is important without a continuation, so the response keeps "b" and the draft agrees after
    _, _, found, _ = search(gsm_source(), target, draft, MiningOptions(max_new_tokens=32, max_mismatches=2))
    assert len(found) == 2
    options = MiningOptions(max_new_tokens=32, rollout_cap=1.0)
    _, _, found, _ = search(gsm_source(), target, draft, options)
    assert found[2].continuation_end == "cap"  # "aX12!" reaches the reference's length (5 tokens with its EOS)
    assert options.label_changing() == {"rollout_cap": 1.0}


def test_stop_strings_end_continuations_as_the_engine_does():
    """A continuation that completes a stop string ends there, and its text is cut before it (the engine's rule)."""
    target, draft = scripted_pair(plans("ab1;2", "aX1;2"), table({"": "a", "a": "X", "aX": "1", "aX1": ";"}))
    options = MiningOptions(max_new_tokens=32, stop=(";",))
    _, reference, found, _ = search(gsm_source(), target, draft, options)
    assert reference.ended == "stop" and reference.text == "ab1"
    assert [(m.position, m.continuation_end, m.continuation_text, m.important) for m in found] == [
        (1, "stop", "aX1", False)]


def test_code_settled_reads_the_block_the_scorer_extracts():
    assert not code_settled("return 1")  # plain completion: the whole text is the code
    assert not code_settled("```python\ndef f():\n    return 1\n")  # still open
    assert code_settled("```python\ndef f():\n    return 1\n```\nand more")
    assert not code_settled("```bash\nls\n```\n")  # a later Python block would be the one extracted
    assert code_settled("```bash\nls\n```\n```python\nx = 1\n```")
    assert not code_settled("```python\nx = 1\n```\n", "f")  # f may still be defined in a later block
    assert code_settled("```python\nx = 1\n```\n```python\ndef f():\n    pass\n```", "f")
    scorer = make_scorer("code-exec")
    item = TaskItem("t", ("p",), test="assert f() == 1", entry_point="f")
    assert scorer.settled(item, "```python\ndef f():\n    return 1\n```\nExplanation")
    assert scorer.outcome(item, Score(1.0, True)) is True
    gsm = make_scorer("gsm8k")
    assert gsm.outcome(TaskItem("g", ("q",), reference="3"), gsm.score(TaskItem("g", ("q",), reference="3"),
                                                                         "so 4 and then 7", None)) == "7"
    assert not make_scorer("agreement").has_outcome(item)
    assert make_scorer("auto").has_outcome(TaskItem("j", ("p",), reference="x"))
    assert not make_scorer("auto").has_outcome(TaskItem("j", ("p",)))


# -- the incremental search against a literal AutoJudge loop ------------------------------------------------------
class LetterParity(Scorer):
    """A synthetic outcome that random text changes often: the parity of its count of lower-case letters."""

    name = "letter-parity"

    def score(self, item, text, context):
        n = sum(c.islower() for c in text)
        return Score(float(n % 2), bool(n % 2))


def literal_autojudge(target, draft, prompt: list[int], budget: int, scorer: Scorer, item: TaskItem):
    """find_important_tokens_lcb.py transcribed: full forwards, no cache; EOS ends a generation; like relaxbench
    (and unlike AutoJudge's ``max(1, ...)``) no token is generated past the budget."""
    eos = set(target.eos_token_ids)

    @torch.inference_mode()
    def argmaxes(model, ids):
        return model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()

    def greedy(ids, n_prompt):
        while len(ids) - n_prompt < budget and not (len(ids) > n_prompt and ids[-1] in eos):
            ids = ids + [argmaxes(target.model, ids)[-1]]
        return ids

    def outcome(ids):
        text = target.tokenizer.decode(ids[len(prompt):], skip_special_tokens=True)
        return scorer.outcome(item, scorer.score(item, text, None))

    current = greedy(list(prompt), len(prompt))
    reference = outcome(current)
    left, found = len(prompt), []
    while True:
        proposals = [None] + argmaxes(draft.model, current)[:-1]
        mismatches = [i for i in range(left, len(current)) if proposals[i] != current[i]]
        if not mismatches:
            break
        p = mismatches[0]
        alternative = greedy(current[:p] + [proposals[p]], len(prompt))
        important = outcome(alternative) != reference
        found.append((p - len(prompt), proposals[p], current[p], important))
        if not important:
            current = alternative
        left = p + 1
        if proposals[p] in eos:
            break
    return found, current[len(prompt):]


def test_the_cached_search_equals_a_literal_autojudge_loop(tiny_target, tiny_draft):
    scorer = LetterParity()
    labels = set()
    for n, prompt in enumerate(random_prompts(3, 200, seed=5)):
        item = TaskItem(str(n), ("x",))
        options = MiningOptions(max_new_tokens=20)
        s = MismatchSearch(tiny_target, tiny_draft, scorer, item, prompt, options)
        reference = s.reference()
        found: list = []
        state = s.run(SearchState(list(reference.ids)), reference, lambda m, st, into=found: into.append(m))
        expected, final = literal_autojudge(tiny_target, tiny_draft, prompt, 20, scorer, item)
        assert [(m.position, m.draft_token, m.target_token, m.important) for m in found] == expected
        assert state.response == final
        labels |= {m.important for m in found}
    assert labels == {True, False}, "the prompts must exercise both labels"


# -- the store, resume and item selection ---------------------------------------------------------------------------
def mine_into(path: Path, source: YamlTask, target, draft, progress=None, items=None):
    options = MiningOptions(max_new_tokens=32)
    store = MiningStore(path)
    key, config = mining_config(source, target, draft, options, "cpu")
    store.bind(key, config)
    session = store.start_session({"test": True})
    try:
        return mine(source, items or source.items, target, draft, store, options, session, progress)
    finally:
        store.close()


def stored_rows(path: Path) -> list[tuple]:
    with MiningStore(path) as store:
        return [(r["item_id"], r["seq"], r["position"], r["draft_token"], r["important"], r["continuation_ids"])
                for r in store.mismatch_rows()]


class InterruptAfter(SilentProgress):
    def __init__(self, n: int) -> None:
        self.n = n

    def update(self, left, length, handled, important):
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def test_an_interrupted_item_resumes_where_it_stopped(tmp_path):
    target, draft = scripted_pair(GSM_TARGET, GSM_DRAFT)
    source = gsm_source(2)
    mine_into(tmp_path / "whole.sqlite", source, target, draft)
    with pytest.raises(KeyboardInterrupt):
        mine_into(tmp_path / "cut.sqlite", source, target, draft, InterruptAfter(2))
    with MiningStore(tmp_path / "cut.sqlite") as store:
        assert store.item("q0").status == "running" and store.item("q0").state.handled == 2
    reports = mine_into(tmp_path / "cut.sqlite", source, target, draft)
    assert [(r.item_id, r.resumed) for r in reports] == [("q0", True), ("q1", False)]
    assert stored_rows(tmp_path / "cut.sqlite") == stored_rows(tmp_path / "whole.sqlite")
    assert len(stored_rows(tmp_path / "whole.sqlite")) == 6
    assert mine_into(tmp_path / "cut.sqlite", source, target, draft) == []  # all done: nothing to redo
    with MiningStore(tmp_path / "cut.sqlite") as store:
        data = store.data()
    assert data.items == ["q0", "q1"] and data.important.tolist() == [False, True, False] * 2
    assert data.target_hidden.shape == (6, 3) and data.draft_hidden[0].tolist() == [
        float(target.model.token_id("X")), 3.0, 2.0]


def test_a_store_of_another_setup_is_refused(tmp_path):
    target, draft = scripted_pair(GSM_TARGET, GSM_DRAFT)
    mine_into(tmp_path / "m.sqlite", gsm_source(), target, draft)
    other = task("other", "gsm8k", "gsm8k", [TaskItem("q0", ("Q:",), reference="1")])
    with pytest.raises(DataError, match="different task"):
        mine_into(tmp_path / "m.sqlite", other, target, draft)


def test_item_selection():
    items = [TaskItem(f"T/{i}", ("p",)) for i in range(10)]
    ids = lambda spec, limit=None: [i.item_id for i in select_items(items, spec, limit)]  # noqa: E731
    assert ids("2:4") == ["T/2", "T/3"]
    assert ids("8:") == ["T/8", "T/9"]
    assert ids(":2,T/5,T/0") == ["T/0", "T/1", "T/5"]
    assert ids("3:", limit=2) == ["T/3", "T/4"]
    assert len(ids(None)) == 10
    with pytest.raises(ConfigError, match="no item 'T/55'"):
        select_items(items, "T/55")
    with pytest.raises(ConfigError, match="empty range"):
        select_items(items, "12:14")


# -- training -------------------------------------------------------------------------------------------------------
def separable_data(n_problems: int = 12, per_problem: int = 10, seed: int = 0) -> MinedData:
    rng = np.random.default_rng(seed)
    n = n_problems * per_problem
    important = rng.random(n) < 0.3
    important[0], important[1] = True, False
    draft = rng.normal(size=(n, 6)).astype(np.float32)
    target = rng.normal(size=(n, 4)).astype(np.float32)
    target[:, 0] = np.where(important, 1.0, -1.0) + 0.2 * rng.normal(size=n)  # separable by one coordinate
    config = {"dims": {"draft": 6, "target": 4}, "task": {"name": "synthetic", "scorer": "gsm8k",
                                                           "data_fingerprint": "fp"},
              "target": {"name": "t", "hidden_size": 4}, "draft": {"name": "d", "hidden_size": 6},
              "options": {"max_new_tokens": 8}, "device": "cpu"}
    items = [f"p{i}" for i in range(n_problems)]
    return MinedData([items[i // per_problem] for i in range(n)], np.arange(n), important, draft, target, items,
                     config, "key")


def test_training_on_separable_features_is_perfect_held_out(tmp_path):
    data = separable_data()
    fits = train_heads(data, ("autojudge", "judge-decoding"), folds=4)
    for fit in fits:
        assert fit.roc_auc == 1.0
        half = next(row for row in fit.by_tau if row.tau == 0.5)
        assert half.accuracy == 1.0 and half.precision == 1.0 and half.recall == 1.0
        assert ((fit.out_of_fold >= 0.5) == data.important).all()
    # held out by problem: every fold is a set of whole problems, and the folds cover them once
    folds = problem_folds(data.items, 4)
    assert sorted(sum(folds, [])) == sorted(data.items) and len(folds) == 4


def test_the_head_file_reproduces_scikit_learn(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(3)
    data = separable_data(seed=3)
    data.target_hidden[:, 1] += rng.normal(size=len(data.important)).astype(np.float32)  # not separable by 1 dim
    fit = fit_head(np.concatenate([data.draft_hidden, data.target_hidden], 1).astype(np.float64), data.important,
                   data.item_ids, 3, "autojudge")
    path = head_of(fit, data, "store.sqlite", 3, 52).save(tmp_path / "autojudge.json")
    head = load_head(path, "test")
    x = np.concatenate([data.draft_hidden, data.target_hidden], 1).astype(np.float64)
    scaler = StandardScaler().fit(x)
    reference = LogisticRegression(C=fit.C, max_iter=100).fit(scaler.transform(x), data.important)
    ours = head.p_important({"draft": torch.from_numpy(data.draft_hidden), "target": torch.from_numpy(
        data.target_hidden)})
    np.testing.assert_allclose(ours.numpy(), reference.predict_proba(scaler.transform(x))[:, 1], rtol=1e-9)
    record = json.loads(path.read_text())
    assert record["features"]["inputs"] == ["draft", "target"] and record["features"]["dims"] == {"draft": 6,
                                                                                                  "target": 4}
    assert record["pair"]["target"]["name"] == "t" and record["data"]["item_ids"] == data.items
    assert record["training"]["library"].startswith("scikit-learn")


def test_judge_train_cli_writes_both_heads(tmp_path, cli):
    target, draft = scripted_pair(GSM_TARGET, GSM_DRAFT)
    mine_into(tmp_path / "m.sqlite", gsm_source(4), target, draft)
    result = cli("judge", "train", "--store", str(tmp_path / "m.sqlite"), "--out", str(tmp_path / "heads"),
                 "--folds", "2")
    assert result.returncode == 0, result.stderr
    assert "12 mismatches from 4 problems" in result.stdout and "4 important (33.3%)" in result.stdout
    for kind, inputs in (("autojudge", ["draft", "target"]), ("judge-decoding", ["target"])):
        head = load_head(tmp_path / "heads" / f"{kind}.json", "test")
        assert head.kind == kind and list(head.inputs) == inputs
        assert head.pair["target"]["name"] == "scripted-target" and head.data["n_mismatches"] == 12
    assert_one_line_error(cli("judge", "train", "--store", str(tmp_path / "none.sqlite")), "no such mining store")


# -- the policies ------------------------------------------------------------------------------------------------
def tiny_head(tmp_path: Path, kind: str = "autojudge", seed: int = 0, dims=(64, 64), bias: float = 0.0,
              pair=("tiny-random-target", "tiny-random-draft"), trained_on: list[str] | None = None,
              fingerprint: str = "fp") -> Path:
    inputs = ("draft", "target") if kind == "autojudge" else ("target",)
    sizes = dict(zip(("draft", "target"), dims, strict=True))
    width = sum(sizes[name] for name in inputs)
    g = torch.Generator().manual_seed(seed)
    head = JudgeHead(kind, inputs, {name: sizes[name] for name in inputs}, torch.zeros(width, dtype=torch.float64),
                     torch.ones(width, dtype=torch.float64), torch.randn(width, generator=g, dtype=torch.float64),
                     bias, {"target": {"name": pair[0]}, "draft": {"name": pair[1]}},
                     data={"task": "jsonl", "data_fingerprint": fingerprint, "item_ids": trained_on or [],
                           "n_mismatches": 10, "n_important": 3})
    return head.save(tmp_path / f"{kind}-{seed}-{bias}.json")


def generate(method: MethodSpec, target, draft, prompt, k: int = 6):
    return build_decoder(method, target, draft, DecodeConfig(k=k, max_new_tokens=40)).generate(prompt)


@pytest.mark.parametrize("kind", ["autojudge", "judge-decoding"])
def test_tau_zero_is_exactly_exact(tiny_target, tiny_draft, tmp_path, kind):
    head = str(tiny_head(tmp_path, kind))
    exact = MethodSpec(name="exact", policy="exact")
    relaxed = 0
    for prompt in random_prompts(4, 200, seed=11):
        reference = generate(exact, tiny_target, tiny_draft, prompt)
        strict = generate(MethodSpec(name=kind, policy=kind, knobs={"head": head, "tau": 0.0}), tiny_target,
                          tiny_draft, prompt)
        assert strict.output_ids == reference.output_ids
        assert strict.rounds.accepted == reference.rounds.accepted and sum(strict.rounds.relaxed) == 0
        loose = generate(MethodSpec(name=kind, policy=kind, knobs={"head": head, "tau": 0.9}), tiny_target,
                         tiny_draft, prompt)
        relaxed += sum(loose.rounds.relaxed)
    assert relaxed > 0, "the loose head never accepted a mismatch: the comparison tests nothing"


class RecordingAutoJudge(AutoJudge):
    """Keeps every block it decides (not registered)."""

    def __init__(self, knobs=None) -> None:
        super().__init__(knobs)
        self.blocks = []

    def decide(self, batch):
        self.blocks.append(batch)
        return super().decide(batch)


@torch.inference_mode()
def test_features_are_the_hidden_states_at_each_draft_tokens_own_position(tiny_target, tiny_draft, tmp_path):
    policy = RecordingAutoJudge(AutoJudge.Knobs(head=str(tiny_head(tmp_path)), tau=0.5))
    drafter = DraftModelDrafter(DraftModelDrafter.Knobs(), DrafterInputs(tiny_target, tiny_draft))
    decoder = SpeculativeDecoder(tiny_target, drafter, policy, DecodeConfig(k=4, max_new_tokens=16))
    prompt = random_prompts(1, 200, seed=2)[0]
    result = decoder.generate(prompt)
    assert len(policy.blocks) >= 2
    # replay: the context before each round is the prompt plus what earlier rounds emitted
    context = list(prompt)
    emitted = list(result.output_ids)
    for batch, n_emitted in zip(policy.blocks, result.rounds.emitted, strict=False):
        assert batch.size == 1
        drafts = batch.drafts[0, : int(batch.num_drafts[0])].tolist()
        hidden, draft_hidden = batch.extras["hidden_states"], batch.extras["draft_hidden_states"]
        for i in range(len(drafts)):
            ids = torch.tensor([context + drafts[: i + 1]])
            want_t = tiny_target.model.model(input_ids=ids).last_hidden_state[0, -1]
            want_d = tiny_draft.model.model(input_ids=ids).last_hidden_state[0, -1]
            torch.testing.assert_close(hidden.source[hidden.index[0, i + 1]], want_t)
            torch.testing.assert_close(draft_hidden.source[draft_hidden.index[0, i]], want_d)
        context += emitted[:n_emitted]
        emitted = emitted[n_emitted:]


def test_a_head_for_another_pair_or_size_is_a_one_line_error(tiny_target, tiny_draft, tmp_path, cli):
    other = str(tiny_head(tmp_path, pair=("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")))
    method = MethodSpec(name="aj", policy="autojudge", knobs={"head": other})
    with pytest.raises(ConfigError, match="trained for target 'qwen2.5-coder-1.5b-instruct'"):
        generate(method, tiny_target, tiny_draft, [1, 2, 3])
    narrow = str(tiny_head(tmp_path, dims=(64, 32), seed=1))
    with pytest.raises(ConfigError, match="expects target hidden states of size 32"):
        generate(MethodSpec(name="aj", policy="autojudge", knobs={"head": narrow, "tau": 0.5}), tiny_target,
                 tiny_draft, random_prompts(1, 200, seed=3)[0])
    with pytest.raises(ConfigError, match="is a 'autojudge' head; use it with rule 'autojudge'"):
        make_policy("judge-decoding", {"head": narrow})
    with pytest.raises(ConfigError, match="missing knob 'head'"):
        make_policy("autojudge", {})
    base = ["generate", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--prompt", "x",
            "--max-new-tokens", "8", "--no-chat"]
    assert_one_line_error(cli(*base, "--rule", "autojudge", "--knob", f"head={other}"),
                          "the head was trained for target 'qwen2.5-coder-1.5b-instruct'")
    assert_one_line_error(cli(*base, "--rule", "autojudge", "--knob", f"head={tmp_path / 'nope.json'}"),
                          "no head file")


def test_autojudge_needs_a_draft_model_drafter(tiny_target, tiny_draft, tmp_path):
    method = MethodSpec(name="aj", policy="autojudge", knobs={"head": str(tiny_head(tmp_path))},
                        drafter=DrafterSpec(kind="ngram"))
    with pytest.raises(ConfigError, match="needs the draft model's last hidden states at its draft tokens, but "
                                          "drafter 'ngram' has none"):
        generate(method, tiny_target, tiny_draft, [1, 2, 3])
    policy = make_policy("autojudge", {"head": str(tiny_head(tmp_path))})
    with pytest.raises(ConfigError, match="trained for target"):
        policy.bind(PolicyEnv(tiny_target.tokenizer, 264, torch.device("cpu"), "tiny-random-target", None))


# -- compare: held-out items and the report -------------------------------------------------------------------------
def test_compare_refuses_training_items_and_reports_the_head(tmp_path, cli):
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": p, "reference": "x"}) + "\n"
                            for i, p in (("a", "the cat sat on"), ("b", "hello world, hello"))))
    from relaxbench.data import fingerprint, read_records

    fp = fingerprint(read_records(data))
    head = tiny_head(tmp_path, trained_on=["b"], fingerprint=fp)
    method = tmp_path / "aj.yaml"
    method.write_text(f"policy: autojudge\nknobs: {{head: {head}, tau: 0.5}}\ndrafter: model\n"
                      "description: test head\n")
    base = ["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods",
            f"exact,{method}", "--tasks", "jsonl", "--data-file", f"jsonl={data}", "--max-new-tokens", "8",
            "--dtype", "float32", "--draft-dtype", "float32", "--warmup", "0", "--report-format", "html",
            "--report-out", str(tmp_path / "report"), "--out", str(tmp_path / "run")]
    assert_one_line_error(cli(*base), "arm 'aj' was trained on 1 of the items of task 'jsonl'", "(b)")
    result = cli(*base, "--limit", "1")
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert f"head {head}" in html and "mined from jsonl item b" in html


def random_judge_block(seed: int, k: int = 6, vocab: int = 32, hidden: int = 8):
    from relaxbench.ops.sampling import SamplingParams
    from relaxbench.policies.base import Block

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, vocab, generator=g)
    drafts = torch.where(torch.rand(k, generator=g) < 0.5, logits[:k].argmax(-1),
                         torch.randint(0, vocab, (k,), generator=g))
    extras = {"hidden_states": torch.randn(k + 1, hidden, generator=g),
              "draft_hidden_states": torch.randn(k, hidden, generator=g)}
    return Block(drafts, logits, None, SamplingParams(), None, extras)


@pytest.mark.parametrize("kind", ["autojudge", "judge-decoding"])
def test_a_larger_tau_only_adds_acceptances(tmp_path, kind):
    head = str(tiny_head(tmp_path, kind, dims=(8, 8)))
    ladder = [make_policy(kind, {"head": head, "tau": tau}) for tau in (0.0, 0.05, 0.2, 0.5, 0.9, 1.0)]
    exact = make_policy("exact")
    moved = 0
    for seed in range(40):
        block = random_judge_block(seed)
        verdicts = [policy.verify(block) for policy in ladder]
        assert verdicts[0] == exact.verify(block)
        lengths = [v.n_accepted for v in verdicts]
        assert lengths == sorted(lengths)
        moved += lengths[-1] > lengths[0]
    assert moved > 0


def test_the_policy_bench_times_the_trained_judges():
    from relaxbench.benchmarks.policies import run_policy_bench

    timings = run_policy_bench(vocab=64, k=4, rounds=3, sampling_rounds=1, names=["autojudge", "judge-decoding"],
                               modes=("greedy", "sampling"))
    assert [(t.policy, t.mode, len(t.times_ms)) for t in timings] == [("autojudge", "greedy", 3),
                                                                      ("judge-decoding", "greedy", 3)]


def test_judge_mine_refuses_tasks_without_an_outcome_before_loading_models(tmp_path, cli):
    data = tmp_path / "open.jsonl"
    data.write_text(json.dumps({"id": "o1", "prompt": "tell me a story"}) + "\n")
    base = ["judge", "mine", "--target", "no-such-model", "--draft", "no-such-draft", "--store",
            str(tmp_path / "m.sqlite")]
    assert_one_line_error(cli(*base, "--task", "jsonl", "--data-file", str(data)),
                          "item 'o1': scorer 'auto' gives it no automatic outcome")
    assert_one_line_error(cli(*base, "--task", "jsonl", "--data-file", str(data), "--items", "o2"), "no item 'o2'")
    assert_one_line_error(cli(*base, "--task", "mt-bench", "--limit", "1"), "mining reads single-turn items")
    assert_one_line_error(cli(*base, "--task", "jsonl", "--data-file", str(data), "--draft", "ngram"),
                          "mining needs a draft model")
    assert not (tmp_path / "m.sqlite").exists()
