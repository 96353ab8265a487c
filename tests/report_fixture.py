"""A realistic stored run, written through the Store API (no model is loaded): two tasks (a pass/fail code task
and an open-ended agreement task with categories), the AR baseline, a lossless arm with one near-tie divergence,
a relaxed method swept over three knob values, a single-point relaxed method and a two-point sweep; a cost
profile of the machine (this-machine); two sessions. Counters,
timings and scores are drawn from a seeded generator so every figure has data."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from relaxbench.decoding.records import Rounds
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now


@dataclass(frozen=True)
class FixtureArm:
    arm: str
    method: str
    policy: str
    lossless: bool
    knobs: dict
    k: int
    accept: float  # per-position acceptance probability of the drafted tokens
    relax: float  # share of accepted tokens counted as relaxed
    fail: float  # chance that a pass of AR becomes a fail


ARMS = (
    FixtureArm("ar", "ar", "none", True, {}, 0, 0.0, 0.0, 0.0),
    FixtureArm("exact", "exact", "exact", True, {}, 5, 0.55, 0.0, 0.0),
    FixtureArm("fly-sweep[theta=0.1]", "fly-sweep", "fly", False, {"theta": 0.1, "window": 6}, 6, 0.8, 0.3, 0.35),
    FixtureArm("fly-sweep[theta=0.3]", "fly-sweep", "fly", False, {"theta": 0.3, "window": 6}, 6, 0.72, 0.2, 0.15),
    FixtureArm("fly-sweep[theta=0.6]", "fly-sweep", "fly", False, {"theta": 0.6, "window": 6}, 6, 0.64, 0.1, 0.05),
    FixtureArm("margin", "margin", "margin", False, {"theta": 0.9}, 5, 0.66, 0.15, 0.0),
    FixtureArm("typical-sweep[epsilon=0.3]", "typical-sweep", "typical", False, {"delta": 0.3, "epsilon": 0.3}, 5,
               0.6, 0.08, 0.0),
    FixtureArm("typical-sweep[epsilon=0.09]", "typical-sweep", "typical", False, {"delta": 0.3, "epsilon": 0.09}, 5,
               0.7, 0.18, 0.2),
)

TASKS = {
    # name: (scorer, items, turns, categories, max_new_tokens)
    "tiny-code": ("code-exec", 12, 1, (None,), 48),
    "chat": ("agreement", 5, 2, ("writing", "coding"), 32),
}

ENVIRONMENT = {
    "command": "relaxbench compare --suite fixture.yaml", "device": "cpu", "target_dtype": "bfloat16",
    "draft_dtype": "bfloat16", "threads": 2, "cpu_model": "Fixture CPU @ 2.0GHz", "cpu_count": 2,
    # the load average counts relaxbench's own model conversion just before; other processes were quiet
    "load_average": [1.5, 1.2, 1.0], "others_busy_cpus": 0.2, "others_window_s": 1.0, "gpu": None,
    "python": "3.11.2", "platform": "Linux-fixture",
    "hostname": "fixture-host", "git_revision": "0123456789abcdef0123456789abcdef01234567", "torch": "2.13.0",
    "transformers": "5.23.0", "relaxbench": "0.1.0", "datasets": "5.2.0", "scipy": "1.17.0", "numpy": "2.4.0",
    "date": "2026-11-30T10:00:00+00:00",
    # shapes as a compare session records them (a 1.5B-like target and a 0.5B-like draft), so analytic profiles of
    # the fixture's models resolve without a checkpoint
    "target": {"name": "fixture-target", "shape": {
        "parameters": 1_777_088_000, "embedding_parameters": 233_373_696, "tied_embeddings": False, "layers": 28,
        "hidden_size": 1536, "attention_heads": 12, "kv_heads": 2, "head_dim": 128}},
    "draft": {"name": "fixture-draft", "shape": {
        "parameters": 630_167_424, "embedding_parameters": 136_134_656, "tied_embeddings": False, "layers": 24,
        "hidden_size": 896, "attention_heads": 14, "kv_heads": 2, "head_dim": 64}},
}

# this machine's cost profile, as a compare session stores it: a verify of 7 tokens costs 1.3 target steps, a draft
# forward a quarter of one
MACHINE = {
    "name": "this-machine", "kind": "measured", "device": "Fixture CPU @ 2.0GHz, 2 torch threads (CPU)",
    "target": {"model": "fixture-target", "dtype": "bfloat16",
               "forward": {"new_tokens": [1, 7], "context": [0, 64], "seconds": [[0.20, 0.26], [0.20, 0.26]]},
               "prefill": {"tokens": [1, 64], "seconds": [0.2, 0.4]}},
    "draft": {"model": "fixture-draft", "dtype": "float32",
              "forward": {"new_tokens": [1, 2], "context": [0, 64], "seconds": [[0.05, 0.05], [0.05, 0.05]]},
              "prefill": {"tokens": [1, 64], "seconds": [0.05, 0.1]}},
}


def _cell(task: str, arm: FixtureArm, position: int, scorer: str, max_new: int) -> CellDefinition:
    drafter = None if arm.arm == "ar" else {"kind": "model", "knobs": {}}
    spec = {"name": arm.arm, "policy": arm.policy, "knobs": arm.knobs, "k": arm.k or None,
            "description": f"fixture method {arm.method}", "source": f"methods/{arm.method}.yaml"}
    return CellDefinition(task=task, arm=arm.arm, position=position, is_baseline=arm.arm == "ar", method=arm.method,
                          policy=arm.policy, lossless=arm.lossless, knobs=arm.knobs, method_spec=spec,
                          drafter=drafter, k=arm.k,
                          decode={"k": arm.k, "max_new_tokens": max_new, "seed": 0,
                                  "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0}, "stop_strings": []},
                          task_spec={"name": task, "scorer": scorer, "max_new_tokens": max_new,
                                     "description": f"fixture task {task}"},
                          scorer=scorer, data_fingerprint="fixture")


def _rounds(rng: random.Random, arm: FixtureArm, n_tokens: int) -> tuple[list[int], list[int], list[int], list[int]]:
    drafted, accepted, relaxed, emitted = [], [], [], []
    left = n_tokens
    while left > 0:
        if arm.k == 0:
            d = a = 0
        else:
            d = arm.k
            a = 0
            while a < d and rng.random() < arm.accept:
                a += 1
        e = min(a + 1, left)
        a = min(a, e)
        drafted.append(d)
        accepted.append(a)
        relaxed.append(sum(rng.random() < arm.relax for _ in range(a)))
        emitted.append(e)
        left -= e
    return drafted, accepted, relaxed, emitted


def build_fixture_run(out_dir: Path, seed: int = 7) -> Path:
    """Write the fixture run into ``out_dir/results.sqlite``; return the folder."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    with Store(out_dir / "results.sqlite") as store:
        run_id = store.open_run("fixture-run", "fixture-target", "fixture-draft",
                                {"target": "fixture-target", "draft": "fixture-draft", "repeats": 1})
        first = store.start_session(run_id, {**ENVIRONMENT, "date": "2026-11-30T09:00:00+00:00"})
        store.finish_session(first, "interrupted")
        session = store.start_session(run_id, ENVIRONMENT)
        store.add_machine_profile(session, MACHINE)
        for task, (scorer, n_items, n_turns, categories, max_new) in TASKS.items():
            cells = {arm.arm: store.ensure_cell(run_id, _cell(task, arm, i, scorer, max_new))
                     for i, arm in enumerate(ARMS)}
            for index in range(n_items):
                item = f"{task}/{index}"
                category = categories[index % len(categories)]
                for turn in range(n_turns):
                    base_tokens = rng.randint(12, max_new)
                    ar_pass = rng.random() < 0.7
                    for arm in ARMS:
                        tokens = base_tokens if arm.lossless else max(4, min(max_new, base_tokens +
                                                                              rng.randint(-4, 8)))
                        drafted, accepted, relaxed, emitted = _rounds(rng, arm, tokens)
                        t_verify = [0.26 * rng.uniform(0.9, 1.2) if arm.k else 0.2 * rng.uniform(0.9, 1.2)
                                    for _ in emitted]
                        t_draft = [0.05 * d * rng.uniform(0.9, 1.1) for d in drafted]
                        prefill = 0.4 * rng.uniform(0.9, 1.1)
                        total = prefill + sum(t_verify) + sum(t_draft) + 0.001 * len(emitted)
                        diverged = arm.arm == "exact" and task == "tiny-code" and index == 3
                        matches = None if arm.arm == "ar" else int(arm.lossless and not diverged)
                        divergence = ({"identical": False, "near_tie": True, "position": 9, "gap": 0.01,
                                       "tolerance": 0.05} if diverged else None)
                        if scorer == "code-exec":
                            passed = ar_pass and rng.random() >= arm.fail
                            score, details = float(passed), {"status": "ok" if passed else "failed"}
                        else:
                            passed = None
                            score = 1.0 if arm.lossless else max(0.0, 1.0 - arm.fail - rng.uniform(0, 0.3))
                            details = {"exact_match": score == 1.0, "rouge_l": score,
                                       "mean_logprob": -0.5 - rng.uniform(0, 0.5)}
                        store.add_sample(SampleRow(
                            cell_id=cells[arm.arm], session_id=session, item_id=item, item_index=index, turn=turn,
                            repeat=0, category=category, created_at=now(), prompt_ids=(1, 2, 3),
                            output_ids=tuple(range(sum(emitted))), output_text="fixture output",
                            stop_reason="length" if sum(emitted) >= max_new else "eos", n_prompt_tokens=3,
                            n_output_tokens=sum(emitted), n_rounds=len(emitted), n_drafted=sum(drafted),
                            n_accepted=sum(accepted), n_relaxed=sum(relaxed), time_total=total, time_prefill=prefill,
                            time_draft=sum(t_draft), time_verify=sum(t_verify), time_policy=0.001 * len(emitted),
                            rounds=Rounds.of(drafted=tuple(drafted), accepted=tuple(accepted), relaxed=tuple(relaxed),
                            emitted=tuple(emitted), t_draft=tuple(t_draft), t_verify=tuple(t_verify),
                            t_policy=(0.001,) * len(emitted), extra=(0,) * len(emitted),
                            draft_forwards=tuple((1,) * d for d in drafted), lookups=(0,) * len(emitted)),
                            score=score, passed=passed,
                            score_details=details, matches_baseline=None if matches is None else bool(matches),
                            divergence=divergence))
        store.finish_session(session, "finished")
    return out_dir
