"""The two studies' tasks: each loads its offline fixture (tests/data/papers, invented rows in the real schemas),
renders its prompt as the study did, and scores real-looking outputs (reasoning models' <think> blocks included)
with what it extracted and why it passed or failed stored."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from relaxbench.data.gpqa import shuffled_choices
from relaxbench.data.livecodebench import decode_tests
from relaxbench.data.niah import NiahMultiValue
from relaxbench.decoding.prompts import encode_prompt
from relaxbench.errors import ConfigError, DataError
from relaxbench.scoring import ScoringContext
from relaxbench.scoring.boxed import boxed_contents, extract_integer, normalize_integer
from relaxbench.scoring.choices import extract_choice
from relaxbench.scoring.effects import read_lists
from relaxbench.scoring.livecodebench import extract_last_block
from relaxbench.scoring.patterns import extract
from relaxbench.scoring.thinking import split_thinking
from relaxbench.tasks import load_task
from relaxbench.tasks.yaml_tasks import YamlTask, fewshot_messages, load_items, render_turn, scored_text

PAPERS = Path(__file__).parent / "data" / "papers"
CONTEXT = ScoringContext(0)


def source(task: str, fixture: str) -> YamlTask:
    spec = load_task(task)
    items, digest = load_items(spec, PAPERS / f"{fixture}.jsonl")
    return YamlTask(spec, items, digest)


def score(task: YamlTask, text: str, index: int = 0):
    return task.scorer().score(task.items[index], text, CONTEXT)


# ------------------------------------------------------------------------------------------------ thinking


def test_thinking_is_removed_before_any_answer_is_read():
    assert split_thinking("<think>\nlet me see: 12?\n</think>\n\nThe answer is 13.") == \
        type(split_thinking(""))("The answer is 13.", "closed")
    cut = split_thinking("<think>\nwe need 12... still thinking")
    assert cut.answer == "" and cut.thinking == "unclosed"
    assert split_thinking("reasoning whose opening tag was in the prompt</think>\nFinal: 7").answer == "Final: 7"
    assert split_thinking("no tags, answer 5").thinking == "none"
    assert split_thinking("<think>a</think>x<think>b</think>y").answer == "xy"


# ------------------------------------------------------------------------------------------------ FLy's tasks


def test_gsm8k_cot_llama_renders_eight_exemplars_as_turns_and_scores_the_final_answer_phrase():
    task = source("gsm8k-cot-llama", "gsm8k")
    shots = fewshot_messages(task.spec)
    assert len(shots) == 16 and [m["role"] for m in shots[:2]] == ["user", "assistant"]
    assert shots[0]["content"].startswith("Given the following problem, reason and give a final answer")
    assert "Problem: There are 15 trees in the grove." in shots[0]["content"]
    assert shots[-1]["content"].endswith("The final answer is 8")
    assert render_turn(task.spec, task.items[0], 0).endswith("where [answer] is the response to the problem.\n")
    good = score(task, "48 - 19 = 29 melons remain.\nThe final answer is 29")
    assert good.passed and good.details["strict_answer"] == "29"
    # lm-eval's strict-match takes the LAST "The final answer is" match
    last = score(task, "The final answer is 30. Wait, 48 - 19 = 29. The final answer is 29")
    assert last.passed
    dollars = score(task, "She has $38 left.\nThe final answer is $38.", 1)
    assert dollars.passed and dollars.details["strict_answer"] == "$38."
    comma = score(task, "1250 + 340 = 1590. The final answer is 1,590", 2)
    assert comma.passed and comma.details["normalized_reference"] == "1590"
    flexible_only = score(task, "So the melons left are 29.")
    assert not flexible_only.passed and flexible_only.details["flexible_match"] is True
    assert flexible_only.details["strict_answer"] == "[invalid]" and "found nothing" in flexible_only.details["why"]
    # FLy cuts the text at lm-eval's `until` strings after generating: a hallucinated next question is not read
    assert score(task, "The final answer is 29\n\nQ: Another question. The final answer is 5").passed
    assert scored_text(task.spec, task.items[0], "x Q: y") == "x "


def test_lm_eval_regex_semantics():
    import re

    pattern = re.compile(r"The final answer is ((-?[$0-9.,]{2,})|(-?[0-9]+))")
    assert extract(pattern, "The final answer is 7 and The final answer is 12", "last") == "12"
    assert extract(pattern, "The final answer is 7 and The final answer is 12", "first") == "7"
    assert extract(pattern, "nothing", "first") == "[invalid]"


def test_mgsm_native_cot_extracts_each_language_phrase():
    de = source("mgsm-native-cot-de", "mgsm_de")
    assert render_turn(de.spec, de.items[0], 0).startswith("Löse dieses Mathematikproblem.")
    assert render_turn(de.spec, de.items[0], 0).endswith("\n\nLena hat 23 Murmeln. Sie verliert 7 und findet dann "
                                                          "12 neue. Wie viele Murmeln hat sie jetzt?")
    assert score(de, "23 - 7 = 16, 16 + 12 = 28.\nDie Antwort lautet 28").passed
    first = score(de, "Die Antwort lautet 27\nKorrektur: Die Antwort lautet 28")  # strict takes the first
    assert not first.passed and first.details["strict_answer"] == "27" and first.details["flexible_match"]
    fr = source("mgsm-native-cot-fr", "mgsm_fr")
    assert score(fr, "9 × 11 = 99, puis 99 − 20 = 79.\nLa réponse est 79").passed
    th = source("mgsm-native-cot-th", "mgsm_th")
    thai = score(th, "1,000 - 250 = 750\nคำตอบคือ 750")
    assert thai.passed and thai.details["strict_answer"] == "750"
    assert score(th, "คำตอบคือ 750.").passed  # ignore_punctuation drops the period


def test_mbpp_plus_runs_evalplus_tests_and_flys_first_assert(tmp_path: Path):
    plus = source("mbpp-plus", "mbpp_plus")
    prompt = render_turn(plus.spec, plus.items[0], 0)
    assert prompt == ("Write a function to count the consonants in a string. Your code should satisfy the following "
                      "assertion:\nassert count_consonants('hello') == 3")
    right = "def count_consonants(s):\n    return sum(c.isalpha() and c not in 'aeiou' for c in s.lower())\n```\nDone."
    result = score(plus, right)
    assert result.passed and result.details["evalplus_pass"] == 1.0 and result.details["first_assert_pass"] == 1.0
    # passes the assert shown in the prompt, fails EvalPlus's other inputs
    overfit = score(plus, "def count_consonants(s):\n    return 3\n```")
    assert not overfit.passed and overfit.details["first_assert_pass"] == 1.0
    assert overfit.details["status"] == "error" and "AssertionError" in overfit.details["error"]
    fly = source("mbpp-plus-fly", "mbpp_plus")
    assert score(fly, "def count_consonants(s):\n    return 3\n```").passed  # FLy's setting: first assert only
    # float outputs use EvalPlus's allclose (numpy, or the stand-in where the sandbox has none)
    sphere = "import math\ndef sphere_volume(r):\n    return 4 / 3 * math.pi * r ** 3\n```"
    assert score(plus, sphere, 1).passed
    assert not score(plus, "def sphere_volume(r):\n    return 4.2 * r ** 3\n```", 1).passed
    # FLy's first assert uses math without test_imports: code that does not import it fails there
    no_import = score(fly, "def sphere_volume(r):\n    return 4 / 3 * 3.141592653589793 * r ** 3\n```", 1)
    assert not no_import.passed and "NameError" in no_import.details["error"]
    assert no_import.details["evalplus_pass"] == 1.0  # EvalPlus's script imports math itself (test_imports)


def test_niah_rows_from_a_file_and_recall_with_partial_credit():
    task = source("niah-multivalue", "niah")
    item = task.items[0]
    assert scored_text(task.spec, item, " 3917402 and 8820145.").startswith(
        "The special magic numbers for amber-kettle mentioned in the provided text are 3917402")
    full = score(task, " 3917402, 8820145 and 5061239.")
    assert full.value == 1.0 and full.details["all_found"] == 1.0
    partial = score(task, " 3917402 and 8820145.")
    assert partial.value == pytest.approx(2 / 3) and partial.passed is None
    assert partial.details["missing"] == ["5061239"] and partial.details["all_found"] == 0.0


def test_niah_generator_fits_the_context_and_is_seeded(tiny_target):
    tokenizer = tiny_target.tokenizer
    generator = NiahMultiValue({"num_items": 5, "num_values": 6, "context_tokens": 1024, "max_new_tokens": 64,
                                "seed": 3})
    rows = generator.rows(3, tokenizer)
    assert [r["index"] for r in rows] == [0, 1, 2]
    for row in rows:
        n_tokens = len(tokenizer(row["input"], add_special_tokens=False)["input_ids"])
        assert 1024 - 120 < n_tokens + 64 <= 1024  # filled to the budget, within one sentence (byte tokens)
        assert row["length"] == n_tokens + 64 and len(row["outputs"]) == 6 == len(set(row["outputs"]))
        key = row["gen_prefix"].split(" for ")[1].split(" mentioned")[0]
        for value in row["outputs"]:
            assert f"One of the special magic numbers for {key} is: {value}." in row["input"]
        digits = sum(c.isdigit() for c in row["input"])
        assert digits == 6 * 7  # the values are the only digits: the filler never looks like a value
    assert generator.rows(1, tokenizer) == rows[:1]  # row i does not depend on the limit
    assert NiahMultiValue({"seed": 4, "num_items": 1, "context_tokens": 1024}).rows(1, tokenizer) != rows[:1]
    assert generator.fingerprint("a") != generator.fingerprint("b")


def test_acp_progression_reads_two_atom_lists_as_sets():
    task = source("acp-prog-gen", "acp_prog_gen")
    shots = fewshot_messages(task.spec)
    assert len(shots) == 4 and shots[1]["content"] == "[(holding key0-0)] [(arm-empty), (at key0-0 f0-1f)]"
    assert render_turn(task.spec, task.items[0], 0).startswith("**Question**: A crane moves crates")
    assert render_turn(task.spec, task.items[0], 0).endswith("Provide only the two lists with the ground "
                                                              "propositions. **Final Answer**:")
    assert score(task, " [(lifting c3)] [(on c3 d1), (crane-empty)]").passed  # any order
    assert score(task, "**Positive Effects**: (lifting c3)\n**Negative Effects**: (crane-empty), (on c3 d1)").passed
    assert score(task, "[(Lifting  C3)] [(crane-empty), (on c3 d1)]").passed  # case and spacing
    wrong = score(task, "[(lifting c3)] [(crane-empty)]")
    assert not wrong.passed and wrong.details["why"] == "negative effects differ"
    one_list = score(task, "[(courier-at t1)]", 1)  # a single list = an empty second list, which is wrong here
    assert not one_list.passed and one_list.details["lists_found"] == 1
    assert not score(task, "The robot lifts the crate.").passed
    assert read_lists("[(a b)] [(c)") == [["(a b)"], ["(c)"]]  # an unclosed last list is closed


# ------------------------------------------------------------------------------------------------ Xia et al.'s tasks


def test_aime_boxed_integer_after_thinking():
    task = source("aime-2024", "aime_2024")
    assert task.spec.chat_template_args == {"enable_thinking": True}
    assert render_turn(task.spec, task.items[0], 0).startswith("Solve the following math problem efficiently and "
                                                                "clearly. The last line of your response should be "
                                                                "of the following format: 'Therefore, the final "
                                                                "answer is: $\\boxed{ANSWER}$.")
    ok = score(task, "<think>\n720 = 2^4 · 3^2 · 5, so (4+1)(2+1)(1+1) = 30. Maybe \\boxed{31}? No.\n</think>\n\n"
                     "Therefore, the final answer is: $\\boxed{30}$. I hope it is correct")
    assert ok.passed and ok.details["answer"] == "30" and ok.details["source"] == "boxed"
    assert ok.details["thinking"] == "closed"
    padded = score(task, "<think>2^10 = 1024</think>The answer is $\\boxed{024}$.", 1)
    assert padded.passed and padded.details["reference"] == "24"
    cut = score(task, "<think>\nFirst, 720 = 2^4 · 3^2 · 5 so the count is 30, let me double check")
    assert not cut.passed and cut.details["answer"] is None and "inside its thinking" in cut.details["why"]
    nested = "<think>ok</think>Therefore, the final answer is: $\\boxed{\\text{400}}$."
    assert score(task, nested, 2).passed and score(task, nested, 2).details["source"] == "boxed"
    assert extract_integer("so $\\boxed{\\text{400}}$ and then 7", braces="flat") == ("7", "last integer")
    assert score(task, "<think>x</think>Final answer: 30 (thirty).").details["source"] == "marker"
    assert not score(task, "<think>x</think>\\boxed{1030}").passed  # AIME answers have at most three digits


def test_boxed_and_integer_helpers():
    assert boxed_contents(r"\boxed{\frac{1}{2}} and \boxed{ {25} }") == [r"\frac{1}{2}", " {25} "]
    assert boxed_contents(r"\boxed{unclosed") == []
    assert boxed_contents(r"\boxed{\frac{1}{2}} and \boxed{7}", "flat") == ["7"]
    assert [normalize_integer(v) for v in ("025", "-0", "1,000", "x", None, 999)] == ["25", "0", None, None, None,
                                                                                       "999"]


def test_gpqa_shuffles_options_as_xia_et_al_and_reads_the_letter():
    task = source("gpqa-diamond", "gpqa_diamond")
    import random

    rng = random.Random(0)  # Xia et al.'s prepare_data.py: one Random(0) over the split in order
    rows = [json.loads(line) for line in (PAPERS / "gpqa_diamond.jsonl").read_text().splitlines()]
    for index, (row, item) in enumerate(zip(rows, task.items)):
        options = [(row["Incorrect Answer 1"], False), (row["Incorrect Answer 2"], False),
                   (row["Incorrect Answer 3"], False), (row["Correct Answer"], True)]
        rng.shuffle(options)
        assert item.fields["choices"] == [text for text, _ in options]
        assert item.reference == "ABCD"[[correct for _, correct in options].index(True)]
        assert shuffled_choices(row, index) == (item.fields["choices"], item.reference)
    gold = task.items[0].reference
    wrong = next(letter for letter in "ABCD" if letter != gold)
    prompt = render_turn(task.spec, task.items[0], 0)
    assert prompt.startswith("Question: An invented particle") and f"\n({gold}) 1/8\n" in prompt
    assert prompt.endswith("After reasoning, end with exactly:\nThe answer is (X).")
    assert score(task, f"<think>Maybe ({wrong})? Three half-lives.</think>\nThe answer is ({gold}).").passed
    assert score(task, f"<think>...</think>Answer: {gold.lower()}").passed
    assert score(task, f"<think>...</think>\\boxed{{{gold}}}").details["rule"] == "boxed"
    fallback = score(task, f"<think>...</think>Options ({wrong}) and ({gold}) remain; ({wrong}) is ruled out")
    assert not fallback.passed and fallback.details["rule"] == "last parenthesised letter"
    assert not score(task, f"<think>The answer is ({gold}).").passed  # only inside the unclosed thinking
    assert extract_choice(r"\boxed{\text{(C)}}") == ("C", "boxed")


def test_gated_hub_data_set_says_how_to_get_access(monkeypatch):
    from relaxbench.tasks.yaml_tasks import read_rows

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("relaxbench.models.resolve.hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(DataError, match="gated: accept its terms at https://huggingface.co/datasets/Idavidrein/gpqa"):
        read_rows(load_task("gpqa-diamond"), None)


@pytest.mark.slow
def test_livecodebench_decodes_private_tests_and_judges_stdin_and_functional_problems():
    task = source("livecodebench-v6", "livecodebench_v6")
    stdin_item, functional = task.items
    assert stdin_item.fields["inputs"] == ["21\n", "0\n", "-7\n"] and stdin_item.fields["fn_name"] is None
    assert functional.fields["fn_name"] == "minPlusK" and len(functional.fields["inputs"]) == 2
    prompt = render_turn(task.spec, functional, 0)
    assert "### Format: You will use the following starter code" in prompt and "def minPlusK" in prompt
    assert "# YOUR CODE HERE" in render_turn(task.spec, stdin_item, 0)
    good = score(task, "<think>\nread n, print 2n\n</think>\nHere:\n```python\nn = int(input())\nprint(n * 2)\n```")
    assert good.passed and good.details["passed_tests"] == 3
    wrong = score(task, "```python\nprint(42)\n```")
    assert not wrong.passed and wrong.details["failure"]["test"] == 1 and wrong.details["passed_tests"] == 1
    assert "wrong answer" in wrong.details["failure"]["kind"]
    slow = score(task, "```python\nimport time\ntime.sleep(60)\n```")
    assert not slow.passed and slow.details["failure"]["kind"] == "time limit exceeded"
    crash = score(task, "```python\nraise ValueError('boom')\n```")
    assert not crash.passed and "ValueError: boom" in crash.details["failure"]["error"]
    two_blocks = ("First try:\n```python\nprint(0)\n```\nBetter:\n```python\nimport sys\n"
                  "print(2 * int(sys.stdin.read()))\n```")
    assert score(task, two_blocks).passed  # the last block counts
    method = ("<think>min plus k</think>```python\nclass Solution:\n    def minPlusK(self, nums, k):\n"
              "        return min(nums) + k\n```")
    assert score(task, method, 1).passed
    assert not score(task, "```python\nclass Solution:\n    def minPlusK(self, nums, k):\n        return max(nums) + k\n"
                           "```", 1).passed
    no_code = score(task, "<think>I would write a loop\n```")
    assert not no_code.passed and "thinking" in no_code.details["why"]
    assert extract_last_block("```\n") == ""


def test_compressed_test_cases_never_unpickle_objects():
    import base64
    import pickle
    import zlib

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    payload = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(DataError, match="refused global"):
        decode_tests(payload)
    plain = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1", "output": "2"}])))).decode()
    assert decode_tests(plain) == [{"input": "1", "output": "2"}]


# ------------------------------------------------------------------------------------------------ prompts


def test_chat_template_args_and_gen_prefix_reach_the_prompt(tiny_target):
    tokenizer = copy.deepcopy(tiny_target.tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and "
                               "not enable_thinking %}NOTHINK{% endif %}{% endif %}")
    ids = encode_prompt(tokenizer, "hi", chat_template_args={"enable_thinking": False}, prefill="Sure:")
    assert tokenizer.decode(ids) == "<user>hi<assistant>NOTHINKSure:"
    assert tokenizer.decode(encode_prompt(tokenizer, "hi")) == "<user>hi<assistant>"


def test_suite_chat_template_args_are_merged_over_the_tasks_and_stored(tmp_path: Path):
    from relaxbench.tasks import LoadRequest, load_sources

    request = LoadRequest(target="tiny-random-target", data_files={"aime-2024": str(PAPERS / "aime_2024.jsonl")},
                          options={"chat_template_args": {"enable_thinking": False, "extra": 1}})
    [task] = load_sources(["aime-2024"], request)["aime-2024"]
    assert task.record()["chat_template_args"] == {"enable_thinking": False, "extra": 1}


def test_task_yaml_errors_for_the_new_fields(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: gsm8k\nscorer: answer-match\nscorer_args: {strict: '(unclosed'}\n")
    with pytest.raises(ConfigError, match="'strict' is not a regular expression"):
        load_task(str(bad))
    shots = tmp_path / "shots.yaml"
    shots.write_text("format: gsm8k\nscorer: gsm8k\nfewshot: [{question: q}]\n")
    with pytest.raises(ConfigError, match="needs 'target'"):
        load_task(str(shots))
    generated = tmp_path / "gen.yaml"
    generated.write_text("format: niah\nscorer: recall-all\nsource: {kind: generated, generator: niah-multivalu}\n")
    with pytest.raises(ConfigError, match="did you mean 'niah-multivalue'"):
        load_task(str(generated))
    options = tmp_path / "opts.yaml"
    options.write_text("format: niah\nscorer: recall-all\nsource: {kind: generated, generator: niah-multivalue, "
                       "options: {num_value: 3}}\n")
    with pytest.raises(ConfigError, match="did you mean 'num_values'"):
        load_task(str(options))
