"""The GPU validation kit: its CPU dry run exercises every step (so the kit cannot rot before a GPU is lent), with
the packages the lent image lacks made unimportable; --plan; one-line errors; the oracle drafter it times rounds
with; the shipped model configs; and the launcher and bundle the device runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from relaxbench.decoders import build_decoder
from relaxbench.benchmarks.gpu.check import FILES
from relaxbench.benchmarks.gpu.plan import STEPS
from relaxbench.decoding.drafters import write_replay
from relaxbench.decoding.loop import DecodeConfig
from relaxbench.errors import ConfigError
from relaxbench.methods import DrafterSpec, MethodSpec
from relaxbench.profiles.analytic import roofline
from relaxbench.profiles.proxy import Work, proxy_time
from relaxbench.cli import main
from tests.conftest import CliResult, assert_one_line_error

ROOT = Path(__file__).resolve().parent.parent
# what the lent GPU image does not have (or the kit must not need): importing any of them fails in the dry run
# (httpx2 is left alone: newer huggingface_hub releases import it; the core never does, by the import contract)
NOT_ON_THE_IMAGE = ("datasets", "lm_eval", "gguf", "ray", "reportlab", "rouge_score", "sklearn", "evalplus")
AR = MethodSpec(name="ar", policy="none")


def oracle(replay: Path, accept: list[int]) -> MethodSpec:
    return MethodSpec(name="exact-oracle", policy="exact",
                      drafter=DrafterSpec(kind="oracle", knobs={"replay": str(replay), "accept": accept}))


@pytest.mark.slow
def test_the_cpu_dry_run_runs_every_step_without_the_packages_the_image_lacks(tmp_path):
    out = tmp_path / "kit"
    blocker = (f"import sys\nfor name in {NOT_ON_THE_IMAGE!r}:\n    sys.modules[name] = None\n"
               "from relaxbench.cli import main\n"
               f"sys.exit(main(['bench', 'gpu', '--device', 'cpu', '--out', {str(out)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["steps"]) == set(STEPS)
    assert all(step["error"] is None for step in summary["steps"].values()), summary["steps"]
    verdicts = {c["verdict"] for c in summary["checks"]}
    assert "MISS" not in verdicts and "PASS" in verdicts
    assert {c["step"] for c in summary["checks"]} == set(STEPS)  # every step reported something
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted({*FILES.values(), "summary.json"}) and len(files) + 1 <= 8  # + the launcher's log
    assert all(p.stat().st_size < 1_000_000 for p in out.iterdir())
    profile = json.loads((out / "profile.json").read_text())["profile"]["data"]["models"]
    assert len(profile) == 5 and all(m["cells"] for m in profile.values())
    arms = json.loads((out / "oracle.json").read_text())["oracle"]["data"]["arms"]
    assert all(a["measured_speedup"] > 0 and a["proxy_measured_speedup"] > 0 for a in arms.values())
    loop = json.loads((out / "oracle.json").read_text())["loop"]
    names = {c["name"] for c in loop["checks"]}
    for label in ("qwen2.5-coder-0.5b-instruct (shrunk): AR", "llama-3.1-8b (shrunk): AR", "eagle3 head", "mtp head"):
        assert any(n.startswith(label) for n in names), label
    assert all(c["verdict"] == "PASS" for c in loop["checks"] if "==" in c["name"] or " vs " in c["name"])
    for shape in loop["data"]["shapes"].values():  # the graphs path captured, before timing, and replayed
        assert shape["graphs"]["graphs"]["target"]["graphs"] >= 1 and shape["analytic_step_s"] > 0
        assert shape["eager"]["graphs"] == {"kv_cache": "dynamic", "graphs": False}
    assert set(loop["data"]["heads"]) == {"eagle3", "mtp"}
    decisions = loop["data"]["decisions"]["rules"]
    assert len(decisions) >= 30 and all(d["identical"] and d["graphs"] == 1 for d in decisions.values())
    verify = json.loads((out / "verify.json").read_text())["verify"]["data"]
    assert len(verify["rules"]) >= 20 and verify["batches"] == [1, 4] and not verify["misses"]
    for rule, by_batch in verify["rules"].items():  # every rule counted and timed at every B, no sync, same ops
        assert set(by_batch) == {"1", "4"}, rule
        assert all(c["syncs"] == [] and c["error"] is None and c["ms"] > 0 for c in by_batch.values()), rule
        assert by_batch["1"]["ops"] == by_batch["4"]["ops"] > 0, rule
    profiled = {(p["rule"], p["mode"]) for p in verify["profile"]}  # where each rule's step goes, at the largest B
    assert {f"{rule} ({mode})" for rule, mode in profiled if rule != "bare exact-match"} == set(verify["rules"])
    assert all(p["batch"] == 4 and p["us"] >= 0 and p["host_us"] >= 0 and p["calls"] > 0 for p in verify["profile"])
    tail = done.stdout.strip().splitlines()
    assert "PASS" in done.stdout and tail[-1].startswith(tuple("0123456789"))  # the table, then the count, last


def test_plan_names_every_step_with_its_time(capsys):
    for device in ("cuda", "cpu"):
        assert main(["bench", "gpu", "--plan", "--device", device]) == 0
        printed = capsys.readouterr().out
        for step in STEPS:
            assert any(line.strip().startswith(step) and " s " in line for line in printed.splitlines()), step
        assert "total" in printed


def test_the_loop_step_fits_the_budget_and_holds_the_8b_step(capsys):
    from relaxbench.benchmarks.gpu.plan import STARTUP_SECONDS, estimate, kit_config

    config = kit_config("cuda")
    assert "loop" in config.steps and config.loop_models[-1] == "llama-3.1-8b"
    assert STARTUP_SECONDS + sum(estimate(config, s) for s in config.steps) <= config.budget_s
    assert main(["bench", "gpu", "--plan", "--steps", "loop"]) == 0
    out = capsys.readouterr().out
    assert "≤ 1.5× for Llama-3.1-8B" in out and "EAGLE-3 and MTP" in out


@pytest.mark.parametrize("args, fragment", [
    (["--steps", "lossles"], "unknown step"),
    (["--models", "qwen9"], "unknown shape"),
    (["--device", "mps", "--out", "x"], "--device"),
    ([], "--out"),
    (["--device", "cuda", "--out", "x"], "CUDA"),
])
def test_bad_input_is_one_line(args, fragment, tmp_path, capsys):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["bench", "gpu", *[a if a != "x" else str(tmp_path / "o") for a in args]]) == 2
    assert_one_line_error(CliResult(2, "", capsys.readouterr().err), fragment)
    assert not (tmp_path / "o").exists()


def test_the_oracle_accepts_as_planned_and_reproduces_ar(tiny_target, tmp_path):
    prompt = list(range(40, 60))
    reference = build_decoder(AR, tiny_target, None, DecodeConfig(k=0, max_new_tokens=30)).generate(prompt)
    replay = write_replay(tmp_path / "replay.json", [prompt + reference.output_ids])
    for accept, expected in (([2], 2), ([0], 0), ([5], 5)):
        decoder = build_decoder(oracle(replay, accept), tiny_target, None, DecodeConfig(k=5, max_new_tokens=30))
        out = decoder.generate(prompt)
        assert out.output_ids == reference.output_ids
        full = [a for a, d in zip(out.rounds.accepted, out.rounds.drafted) if d == 5]
        assert full and all(a == expected for a in full)
        half = out.rounds.drafted[: len(out.rounds.drafted) // 2]
        assert all(d == 5 for d in half)  # a round drafts k (until the length cuts it): verify forwards of real size
    alternating = build_decoder(oracle(replay, [3, 1]), tiny_target, None,
                                DecodeConfig(k=5, max_new_tokens=30)).generate(prompt)
    assert list(alternating.rounds.accepted[:4]) == [3, 1, 3, 1]
    # the proxy prices the oracle's drafting at zero: only the verify forwards and prefill remain
    from relaxbench.profiles import Profile
    from tests.test_profiles import synthetic_profile

    priced = proxy_time(Profile.model_validate(synthetic_profile(draft=False, lookup=False)),
                        Work.of_generation(alternating), "oracle")
    assert priced.draft == 0 and priced.verify > 0


def test_the_oracle_refuses_a_missing_file_or_an_unknown_prompt(tiny_target, tmp_path):
    with pytest.raises(ConfigError, match="cannot read replay file"):
        build_decoder(oracle(tmp_path / "none.json", [1]), tiny_target, None, DecodeConfig(k=2))
    replay = write_replay(tmp_path / "r.json", [[1, 2, 3, 4]])
    decoder = build_decoder(oracle(replay, [1]), tiny_target, None, DecodeConfig(k=2, max_new_tokens=4))
    with pytest.raises(ConfigError, match="no sequence"):
        decoder.generate([9, 9, 9])
    with pytest.raises(ConfigError, match="accept"):
        build_decoder(oracle(replay, [-1]), tiny_target, None, DecodeConfig(k=2))


# parameter counts of the published checkpoints (Llama-3.1-8B's exact count is profiles/published.yaml's)
PUBLISHED_PARAMETERS = {"qwen2.5-coder-0.5b-instruct": 0.494e9, "qwen2.5-coder-1.5b-instruct": 1.54e9,
                        "qwen2.5-7b": 7.61e9, "llama-3.1-8b": 8_030_261_248, "qwen3-32b": 32.8e9}


def test_the_shipped_configs_have_the_published_sizes():
    from relaxbench.models.random_shapes import random_model, shape_names

    assert set(shape_names()) == set(PUBLISHED_PARAMETERS)
    for name, published in PUBLISHED_PARAMETERS.items():
        shape = random_model(name, torch.bfloat16, "meta").shape
        assert abs(shape.parameters / published - 1) < 0.005, (name, shape.parameters)
        small = random_model(name, torch.float32, "cpu", shrink=True)
        assert small.shape.tied_embeddings == shape.tied_embeddings and small.shape.layers == 2
        assert small.eos_token_ids == frozenset()  # generation runs to its length
    assert random_model("llama-3.1-8b", torch.bfloat16, "meta").shape.parameters == 8_030_261_248


def test_the_verify_step_sets_a_rule_beside_the_analytic_8b_step_at_the_same_tokens(capsys):
    from relaxbench.benchmarks.gpu.verify_check import SHARE_CONTEXT, analytic_step_s
    from relaxbench.models.random_shapes import random_model

    line = roofline("h200", random_model("llama-3.1-8b", torch.bfloat16, "meta").shape)
    assert analytic_step_s(256, 4) == pytest.approx(line.seconds(5, SHARE_CONTEXT, 256))
    assert analytic_step_s(1, 4) < analytic_step_s(64, 4) < analytic_step_s(256, 4)  # B × (k + 1) tokens
    assert main(["bench", "gpu", "--plan", "--steps", "verify"]) == 0
    assert "B = 1, 8, 64, 256, k = 4, V = 151,936, bf16 logits" in capsys.readouterr().out


def test_memory_bound_cells_follow_the_roofline():
    from relaxbench.models.random_shapes import random_model

    line = roofline("h200", random_model("llama-3.1-8b", torch.bfloat16, "meta").shape)
    assert line.memory_bound(1, 512) and not line.memory_bound(4096, 512)
    assert line.seconds(1, 512) == pytest.approx(line.memory_seconds(1, 512) + line.overhead)


def test_the_launcher_refuses_a_missing_bundle_in_one_line(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "gpu" / "run-kit.sh"), str(tmp_path / "out")], capture_output=True,
                          text=True, env={**os.environ, "GPU_KIT_WHEELS": str(tmp_path / "none")}, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "gpu-kit-bundle" in done.stderr
