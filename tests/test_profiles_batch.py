"""The batch dimension of cost profiles: forward tables per batch size (files without one are batch-1 profiles and
price exactly as the hand formulas say), the roofline of a step of B requests, a stored sample priced at the
concurrency it was decoded at (the compute-bound effect: a large batch shrinks an H100's proxy speed-up), a profile
without the run's batch size refusing to price it, and ``relaxbench profile --batch``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from relaxbench.cli import main
from relaxbench.decoding.records import Rounds
from relaxbench.errors import ConfigError
from relaxbench.harness.store import CellDefinition, SampleRow, Store, now
from relaxbench.models.shape import ModelShape
from relaxbench.profiles import Profile, Unpriced, Work, load_profile, proxy_time
from tests.conftest import CliResult, assert_one_line_error
from tests.test_profiles import (
    SHAPE,
    draft_cost,
    lookup_cost,
    prefill_cost,
    synthetic_profile,
    target_cost,
)

# a step of 8 requests in the synthetic profile: every cost linear in its sizes, as the batch-1 ones
T8_0, T8_N, T8_L = 0.150, 0.080, 0.0008  # target step of 8 requests: T8_0 + T8_N·n + T8_L·L
D8_0, D8_N, D8_L = 0.030, 0.040, 0.00016


def target_cost_8(n: int, ctx: int) -> float:
    return T8_0 + T8_N * n + T8_L * ctx


def draft_cost_8(n: int, ctx: int) -> float:
    return D8_0 + D8_N * n + D8_L * ctx


def with_batch_8(data: dict) -> dict:
    """``data`` (a synthetic profile mapping) with a batch-8 table for its target and draft."""
    data = copy.deepcopy(data)
    n, ctx = data["target"]["forward"]["new_tokens"], data["target"]["forward"]["context"]
    data["target"]["forward_batches"] = [{"batch": 8, "new_tokens": n, "context": ctx,
                                          "seconds": [[target_cost_8(a, c) for a in n] for c in ctx]}]
    if "draft" in data:
        data["draft"]["forward_batches"] = [{"batch": 8, "new_tokens": n, "context": ctx,
                                             "seconds": [[draft_cost_8(a, c) for a in n] for c in ctx]}]
    return data


# ------------------------------------------------------------------------------------------------ the table model


def test_a_profile_without_batch_sizes_is_a_batch_1_profile_and_round_trips(tmp_path):
    data = synthetic_profile()  # no 'batch', no 'forward_batches'
    assert "batch" not in data["target"]["forward"]
    profile = Profile.model_validate(data)
    assert profile.batch_sizes == (1,) and profile.target.forward.batch == 1
    assert profile.target.forward_at(1) is profile.target.forward and profile.target.forward_at(8) is None
    batched = Profile.model_validate(with_batch_8(data))
    assert batched.batch_sizes == (1, 8) and batched.draft.batch_sizes == (1, 8)
    path = tmp_path / "p.yaml"
    path.write_text(batched.to_yaml())
    assert load_profile(path) == batched


@pytest.mark.parametrize("break_it, message", [
    (lambda d: d["target"]["forward_batches"][0].__setitem__("batch", 1), "increasing batch sizes"),
    (lambda d: d["target"]["forward_batches"][0].__setitem__("batch", 0), "a number of requests"),
    (lambda d: d["target"]["forward"].__setitem__("batch", "eight"), "a number of requests"),
    (lambda d: d["draft"].pop("forward_batches"), "the draft's forward tables must be at the target's batch sizes"),
])
def test_broken_batch_tables_are_a_one_line_error(tmp_path, break_it, message):
    data = with_batch_8(synthetic_profile())
    break_it(data)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as error:
        load_profile(path)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text


# ------------------------------------------------------------------------------------------------ pricing


def test_batch_1_prices_as_the_hand_formulas_whatever_larger_batches_a_profile_holds():
    """The same records as tests/test_profiles.py's exact-pricing test, on a profile that also holds a batch-8
    table: batch 1 (the default) is priced with the batch-1 costs alone."""
    plain, batched = synthetic_profile(), with_batch_8(synthetic_profile())
    for profile in (Profile.model_validate(plain), Profile.model_validate(batched)):
        model = Work(11, drafted=(4, 4), emitted=(5, 2), extra=(0, 0), draft_forwards=((1, 1, 1, 1), (2, 1, 1, 1)),
                     lookups=(0, 0))
        for priced in (proxy_time(profile, model, "model"), proxy_time(profile, model, "model", batch=1)):
            assert priced.prefill == pytest.approx(prefill_cost(10) + prefill_cost(10) / 2)
            assert priced.verify == pytest.approx(target_cost(5, 10) + target_cost(5, 15))
            assert priced.draft == pytest.approx(4 * draft_cost(1, 10) + draft_cost(2, 15) + 3 * draft_cost(1, 15))
        ngram = proxy_time(profile, Work(11, (3, 0), (2, 1), (0, 0), ((), ()), (1, 1)), "ngram")
        assert ngram.verify == pytest.approx(target_cost(4, 10) + target_cost(1, 12))
        assert ngram.draft == pytest.approx(lookup_cost(11) + lookup_cost(13))


def test_batch_8_prices_every_round_as_a_step_of_8_requests():
    profile = Profile.model_validate(with_batch_8(synthetic_profile()))
    model = proxy_time(profile, Work(11, (4, 4), (5, 2), (0, 0), ((1, 1, 1, 1), (2, 1, 1, 1)), (0, 0)), "model", 8)
    assert model.prefill == pytest.approx(prefill_cost(10) + prefill_cost(10) / 2)  # one request's prompt
    assert model.verify == pytest.approx(target_cost_8(5, 10) + target_cost_8(5, 15))
    assert model.draft == pytest.approx(4 * draft_cost_8(1, 10) + draft_cost_8(2, 15) + 3 * draft_cost_8(1, 15))
    ngram = proxy_time(profile, Work(11, (3, 0), (2, 1), (0, 0), ((), ()), (1, 1)), "ngram", 8)
    assert ngram.verify == pytest.approx(target_cost_8(4, 10) + target_cost_8(1, 12))
    assert ngram.draft == pytest.approx(lookup_cost(11) + lookup_cost(13))  # the step's 8 lookups run side by side


def test_a_batch_the_profile_lacks_is_refused_not_approximated():
    profile = Profile.model_validate(with_batch_8(synthetic_profile()))
    work = Work(11, (0,), (1,), (0,), ((),), (0,))
    for batch in (2, 4, 16):  # neither neighbour (1 or 8) stands in for it
        with pytest.raises(Unpriced, match=rf"no costs at batch {batch} \(it has batch sizes 1, 8; make one with "
                                           rf"`relaxbench profile --batch {batch}`\)"):
            proxy_time(profile, work, None, batch)


# ------------------------------------------------------------------------------------------------ the roofline


def test_the_roofline_of_a_step_of_b_requests_is_the_stated_formula():
    from relaxbench.profiles.analytic import roofline
    from relaxbench.profiles.devices import device_catalog

    catalog = device_catalog()
    h100 = catalog.get("h100-sxm")
    stack = catalog.stack_of(h100)
    bandwidth = h100.memory_bandwidth_tb_s * 1e12 * stack.achieved_bandwidth
    flops = h100.bf16_dense_tflops * 1e12 * stack.achieved_flops
    line = roofline("h100-sxm", SHAPE, "bfloat16", 1, catalog)
    read = 900_000_000 * 2  # SHAPE is untied: every weight but the input embedding, 2 bytes each
    kv_per_token = 2 * 10 * 2 * 128 * 2  # keys and values × layers × KV heads × head size × 2 bytes

    def by_hand(n: int, ctx: int, batch: int) -> float:
        memory = (read + batch * kv_per_token * (ctx + n)) / bandwidth  # weights once, every request's KV
        compute = batch * (2 * 900_000_000 * n + 4 * 10 * 8 * 128 * n * (ctx + (n + 1) / 2)) / flops
        return max(memory, compute) + stack.overhead_per_forward_s

    for n, ctx, batch in ((1, 500, 1), (6, 500, 1), (1, 500, 64), (6, 500, 64), (6, 2000, 256)):
        assert line.seconds(n, ctx, batch) == pytest.approx(by_hand(n, ctx, batch))
    assert line.seconds(6, 500) == line.seconds(6, 500, 1)
    # verifying 6 tokens is about free for one request (memory-bound); for 64 the step is compute-bound and costs
    # their FLOPs
    assert line.memory_bound(6, 500, 1) and not line.memory_bound(6, 500, 64)
    assert line.seconds(6, 500, 1) / line.seconds(1, 500, 1) < 1.01
    assert line.seconds(6, 500, 64) / line.seconds(1, 500, 64) > 1.5


def test_an_analytic_profile_at_several_batch_sizes_keeps_its_batch_1_table_and_says_so():
    from relaxbench.profiles.analytic import analytic_profile

    plain = analytic_profile("h100-sxm", "t", SHAPE, "d", SHAPE)
    batched = analytic_profile("h100-sxm", "t", SHAPE, "d", SHAPE, batch_sizes=(1, 8, 32))
    assert plain.batch_sizes == (1,) and batched.batch_sizes == (1, 8, 32) and batched.draft.batch_sizes == (1, 8, 32)
    assert batched.target.forward == plain.target.forward and batched.draft.forward == plain.draft.forward
    assert batched.target.prefill == plain.target.prefill
    assert "batch size 1" in plain.assumptions and "batch sizes 1, 8, 32" in batched.assumptions
    assert any("same context and the same number of new tokens" in a for a in batched.assumptions)
    steps = [batched.target.forward_at(b).at(6, 1024) for b in (1, 8, 32)]
    assert steps[0] < steps[1] < steps[2]
    only_large = analytic_profile("h100-sxm", "t", SHAPE, batch_sizes=(16,))
    assert only_large.batch_sizes == (16,) and only_large.target.forward.batch == 16
    for bad in ((), (8, 1), (0,), (1, 1)):
        with pytest.raises(ConfigError, match="batch sizes must be distinct, increasing integers >= 1"):
            analytic_profile("h100-sxm", "t", SHAPE, batch_sizes=bad)


# ------------------------------------------------------------------------------------------------ stored runs


# the report fixture's proxy speed-ups (total, geomean), fixed: its samples record no concurrency (relaxbench's own
# loop), so they are priced at batch 1; a change in how batch 1 prices a stored run changes these
FIXTURE_BATCH_1 = {
    ("tiny-code", "exact"): {"this-machine": (0.8304421357815905, 0.8825588831091341),
                             "h100-sxm": (0.6838186235358699, 0.7273458056917105),
                             "l40s": (0.7617258814551495, 0.8097235259230868)},
    ("chat", "fly-sweep[theta=0.3]"): {"this-machine": (0.9829935901137612, 0.989969895667609),
                                       "h100-sxm": (0.8014839535434608, 0.8074907584602661),
                                       "l40s": (0.8970932582012352, 0.9035537623876807)},
}


def test_stored_runs_of_relaxbenchs_own_loop_price_at_batch_1_to_fixed_figures(tmp_path):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.proxy import choose_profiles, run_batch_sizes
    from tests.report_fixture import build_fixture_run

    run = load_run(build_fixture_run(tmp_path / "fixture"))
    assert run_batch_sizes(run) == (1,)
    cells = {(s.task, c.arm): c for s in summarize_run(run, choose_profiles(run, ("h100-sxm", "l40s")).profiles)
             for c in s.cells}
    for key, figures in FIXTURE_BATCH_1.items():
        for profile, (total, geomean) in figures.items():
            proxy = cells[key].proxy[profile]
            assert (proxy.total.value, proxy.geomean.value) == pytest.approx((total, geomean), rel=1e-12), \
                (key, profile)


# the fixture's 1.5B-like target (tests/report_fixture.py), recorded with the run so the roofline needs no checkpoint
TARGET_SHAPE = {"parameters": 1_777_088_000, "embedding_parameters": 233_373_696, "tied_embeddings": False,
                "layers": 28, "hidden_size": 1536, "attention_heads": 12, "kv_heads": 2, "head_dim": 128}
PROMPT = 129  # the first round's context is 128, an analytic grid point
TOKENS = 48
ACCEPTED = 3  # exact's rounds: 5 drafted by prompt lookup, 3 accepted, 4 emitted


def _cell(arm: str, position: int) -> CellDefinition:
    baseline = arm == "ar"
    return CellDefinition(
        task="code", arm=arm, position=position, is_baseline=baseline, method=arm, policy="none" if baseline else arm,
        lossless=True, knobs={}, method_spec={"name": arm},
        drafter=None if baseline else {"kind": "ngram", "knobs": {}},
        k=0 if baseline else 5, decode={"k": 0 if baseline else 5, "max_new_tokens": TOKENS,
                                        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0}},
        task_spec={"name": "code", "scorer": "code-exec"}, scorer="code-exec", data_fingerprint="batch-test")


def write_run(out: Path, concurrency: int | None, target: str = "fixture-target", items: int = 4) -> Path:
    """A stored run of AR and exact with prompt lookup, every unit the same rounds, decoded at ``concurrency``
    (None: relaxbench's own loop, which records none)."""
    out.mkdir(parents=True)
    engine = "transformers" if concurrency is None else "vllm"
    with Store(out / "results.sqlite") as store:
        run_id = store.open_run(f"batch-{concurrency}", target, "ngram",
                                {"target": target, "draft": "ngram", "engine": engine,
                                 "concurrency": [concurrency or 1]})
        session = store.start_session(run_id, {"device": "cpu", "target": {"name": target, "shape": TARGET_SHAPE}})
        rounds = {"ar": ((0,) * TOKENS, (0,) * TOKENS, (1,) * TOKENS),
                  "exact": ((5,) * (TOKENS // 4), (ACCEPTED,) * (TOKENS // 4), (ACCEPTED + 1,) * (TOKENS // 4))}
        for position, arm in enumerate(("ar", "exact")):
            cell = store.ensure_cell(run_id, _cell(arm, position))
            drafted, accepted, emitted = rounds[arm]
            n = len(emitted)
            for index in range(items):
                store.add_sample(SampleRow(
                    cell_id=cell, session_id=session, item_id=f"code/{index}", item_index=index, turn=0, repeat=0,
                    category=None, created_at=now(), prompt_ids=tuple(range(PROMPT)), output_ids=tuple(range(TOKENS)),
                    output_text="out", stop_reason="length", n_prompt_tokens=PROMPT, n_output_tokens=TOKENS,
                    n_rounds=n, n_drafted=sum(drafted), n_accepted=sum(accepted), n_relaxed=0, time_total=1.0,
                    time_prefill=0.1, time_draft=0.0, time_verify=0.9, time_policy=0.0,
                    rounds=Rounds.of(drafted=drafted, accepted=accepted, relaxed=(0,) * n, emitted=emitted,
                    t_draft=(0.0,) * n, t_verify=(0.9 / n,) * n, t_policy=(0.0,) * n, extra=(0,) * n,
                    draft_forwards=((),) * n, lookups=(0 if arm == "ar" else 1,) * n), score=1.0,
                    passed=True, score_details={}, matches_baseline=arm != "ar" or None, divergence=None,
                    concurrency=concurrency))
        store.finish_session(session, "finished")
    return out


def exact_proxy(run_dir: Path, ref: str):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.proxy import choose_profiles

    run = load_run(run_dir)
    summary = summarize_run(run, choose_profiles(run, (ref,)).profiles)[0]
    return next(c for c in summary.cells if c.arm == "exact").proxy[ref if "/" not in ref else Path(ref).stem]


def by_hand_speedup(batch: int) -> float:
    """AR time over exact time of one unit, every round a step of ``batch`` requests on the H100 roofline (its
    forwards at contexts 128..176, where each regime is linear in the context, so the table's interpolation is
    exact), plus one request's n-gram lookups and prefill."""
    from relaxbench.profiles.analytic import roofline
    from relaxbench.profiles.devices import device_catalog

    line = roofline("h100-sxm", ModelShape(**TARGET_SHAPE))
    lookup = device_catalog().host.ngram_lookup
    prefill = line.seconds(PROMPT - 1, 0)
    ar = prefill + sum(line.seconds(1, PROMPT - 1 + r, batch) for r in range(TOKENS))
    contexts = [PROMPT - 1 + (ACCEPTED + 1) * r for r in range(TOKENS // (ACCEPTED + 1))]
    exact = prefill + sum(line.seconds(6, c, batch) + lookup.at(c + 1) for c in contexts)
    return ar / exact


def test_a_large_batch_shrinks_an_h100_proxy_speedup_of_the_same_rounds(tmp_path):
    """The same stored rounds at concurrency 1 and 64: at 64 a step of 6-token verifies is compute-bound, so the
    speed-up that is ~4× for one request (verifying 6 tokens costs about 1) shrinks. Were the batch ignored, both
    would be the batch-1 figure."""
    own_loop = exact_proxy(write_run(tmp_path / "own", None), "h100-sxm").total.value
    one = exact_proxy(write_run(tmp_path / "c1", 1), "h100-sxm").total.value
    many = exact_proxy(write_run(tmp_path / "c64", 64), "h100-sxm").total.value
    assert own_loop == one == pytest.approx(by_hand_speedup(1), rel=1e-9)
    assert many == pytest.approx(by_hand_speedup(64), rel=1e-9)
    assert one > 3.5 and many < 0.7 * one


def test_a_profile_file_without_the_runs_batch_size_cannot_price_it_and_the_report_says_why(tmp_path):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.notices import ProfileUnpriced, profile_notices
    from relaxbench.analysis.proxy import choose_profiles
    from relaxbench.profiles.analytic import analytic_profile
    from relaxbench.profiles.spec import write_profile
    from relaxbench.report.content import load_report

    run_dir = write_run(tmp_path / "c64", 64)
    shape = ModelShape(**TARGET_SHAPE)
    at_1_and_8 = write_profile(analytic_profile("h100-sxm", "fixture-target", shape, batch_sizes=(1, 8),
                                                name="h100-small"), tmp_path / "h100-small.yaml")
    at_64 = write_profile(analytic_profile("h100-sxm", "fixture-target", shape, batch_sizes=(1, 64),
                                           name="h100-64"), tmp_path / "h100-64.yaml")
    assert exact_proxy(run_dir, str(at_64)).total.value == pytest.approx(by_hand_speedup(64), rel=1e-9)
    run = load_run(run_dir)
    summary = summarize_run(run, choose_profiles(run, (str(at_1_and_8),)).profiles)[0]
    assert {c.arm: c.proxy["h100-small"].total.value for c in summary.cells} == {"ar": None, "exact": None}
    found = [f for f in profile_notices(summary) if isinstance(f, ProfileUnpriced)]
    assert [f.profile for f in found] == ["h100-small"] and {arm for arm, _ in found[0].arms} == {"ar", "exact"}
    assert all("no costs at batch 64" in why and "--batch 64" in why for _, why in found[0].arms)
    report = load_report(run_dir, profiles=(str(at_1_and_8),))
    assert any("Profile h100-small cannot price" in n.text and "batch 64" in n.text for n in report.tasks[0].notices)
    assert main(["summary", str(run_dir), "--profile", str(at_1_and_8)]) == 0  # figures without it, no error


# ------------------------------------------------------------------------------------------------ measuring


def test_a_batch_of_rows_computes_what_the_engine_computes_for_one(tiny_target):
    """The measured batch-B forward runs the model the engine runs: every row's logits are batch 1's."""
    import torch

    from relaxbench.decoding.cache import CachedLM
    from relaxbench.profiles.measure import RowsLM, token_ids

    ids = token_ids(tiny_target.logit_dim, 12, device=tiny_target.device)
    one, rows = CachedLM(tiny_target.model), RowsLM(tiny_target.model, 3)
    one.run(ids[:8], n_logits=0)
    rows.run(ids[:8], n_logits=0)
    expected = one.run(ids[8:12], n_logits=4).logits
    got = rows.run(ids[8:12], n_logits=4)
    assert got.shape == (3, 4, expected.shape[-1])
    for row in got:
        assert torch.allclose(row, expected, atol=1e-9)
    rows.truncate(8)
    assert int(rows.cache.get_seq_length()) == 8


def test_measure_profile_at_several_batch_sizes_on_the_tiny_models(tiny_target, tiny_draft):
    from relaxbench.profiles.measure import Grid, measure_profile

    grid = Grid(new_tokens=(1, 3), context=(4, 12), prefill=(2,), draft_new_tokens=(1, 2), batch=(1, 3))
    steps = []
    profile = measure_profile(tiny_target, tiny_draft, grid, repeats=1, warmup=0, name="tiny", advance=steps.append)
    assert len(steps) == grid.steps(with_draft=True) == 2 * 2 * 2 + 1 + 2 * 2 * 2 + 1
    assert profile.batch_sizes == (1, 3) and profile.draft.batch_sizes == (1, 3)
    for table in (*profile.target.forward_tables, *profile.draft.forward_tables):
        assert table.context == (4, 12) and all(v > 0 for row in table.seconds for v in row)
    assert profile.settings["batch_sizes"] == [1, 3] and "batch sizes 1, 3" in profile.assumptions[0]
    with pytest.raises(ConfigError, match="batch sizes must be distinct"):
        Grid(new_tokens=(1,), context=(4,), prefill=(2,), batch=(4, 2))


# ------------------------------------------------------------------------------------------------ the command


def one_line_error(err: str, *fragments: str) -> None:
    assert_one_line_error(CliResult(2, "", err), *fragments)


def test_profile_batch_writes_a_table_per_batch_size_and_shows_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "h100.yaml"
    assert main(["profile", "--analytic", "h100-sxm", "--batch", "1,8,32", "--target", "tiny-random-target",
                 "--draft", "tiny-random-draft", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    profile = load_profile(out)
    assert profile.batch_sizes == (1, 8, 32) and profile.draft.batch_sizes == (1, 8, 32)
    assert "batch sizes 1, 8, 32" in printed and "step of B requests" in printed
    rows = [line.split("│")[1].strip() for line in printed.splitlines() if line.startswith("│")]
    assert rows == ["1", "8", "32"]
    measured = tmp_path / "tiny.yaml"
    assert main(["profile", "--target", "tiny-random-target", "--dtype", "float64", "--new-tokens", "1,2",
                 "--context", "4", "--prefill", "4", "--repeats", "1", "--warmup", "0", "--batch", "1,2",
                 "--out", str(measured)]) == 0
    assert load_profile(measured).batch_sizes == (1, 2)
    capsys.readouterr()  # the measurement's progress lines
    for batch, message in (("0", ">= 1"), ("8,1", "increasing"), ("1,1", "distinct"), ("eight", "comma-separated"),
                           (",", ">= 1")):
        assert main(["profile", "--analytic", "h100-sxm", "--target", "tiny-random-target", "--batch", batch,
                     "--out", str(out)]) == 2, batch
        one_line_error(capsys.readouterr().err, "--batch", message)


def test_profile_run_takes_the_runs_batch_sizes(tmp_path):
    run_dir = write_run(tmp_path / "c4", 4, target="tiny-random-target")
    out = tmp_path / "for-run.yaml"
    assert main(["profile", "--analytic", "h100-sxm", "--run", str(run_dir), "--out", str(out)]) == 0
    assert load_profile(out).batch_sizes == (4,)
    assert main(["profile", "--analytic", "h100-sxm", "--run", str(run_dir), "--batch", "1,4", "--out",
                 str(out)]) == 0
    assert load_profile(out).batch_sizes == (1, 4)
