"""Cost profiles: the file format and its errors, interpolation, the proxy time of hand-built records against a
profile whose every cost is known, the per-round work the engine records, the analytic roofline and the shipped
device specs, the published-figure sanity check, and measuring a profile on the tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from relaxbench.cli import main
from relaxbench.errors import ConfigError
from relaxbench.models.shape import ModelShape
from relaxbench.profiles import Profile, Unpriced, Work, load_profile, proxy_time
from relaxbench.profiles.spec import interpolate
from tests.conftest import CliResult, assert_one_line_error


def one_line_error(err: str, *fragments: str) -> None:
    """What ``main`` wrote to stderr for an exit-2 error: one line naming every fragment."""
    assert_one_line_error(CliResult(2, "", err), *fragments)

# every cost is linear in its sizes, so interpolation on the grid reproduces it exactly and the expected proxy
# times below are computed from these formulas by hand, not by the code under test
T0, TN, TL = 0.100, 0.010, 0.0001  # target forward: T0 + TN·n + TL·L
D0, DN, DL = 0.020, 0.005, 0.00002  # draft forward
P0, PN = 0.050, 0.002  # prefill: P0 + PN·tokens (target); draft: half of that
LK0, LKL = 0.0003, 0.000001  # n-gram lookup over L tokens


def target_cost(n: int, ctx: int) -> float:
    return T0 + TN * n + TL * ctx


def draft_cost(n: int, ctx: int) -> float:
    return D0 + DN * n + DL * ctx


def prefill_cost(tokens: int) -> float:
    return P0 + PN * tokens


def lookup_cost(length: int) -> float:
    return LK0 + LKL * length


def synthetic_profile(name: str = "synthetic", draft: bool = True, lookup: bool = True) -> dict:
    n, ctx, sizes = [1, 64], [0, 4096], [1, 4096]
    data = {
        "name": name, "kind": "measured", "device": "a device whose every cost is known",
        "target": {"model": "t", "dtype": "bfloat16",
                   "forward": {"new_tokens": n, "context": ctx,
                               "seconds": [[target_cost(a, c) for a in n] for c in ctx]},
                   "prefill": {"tokens": sizes, "seconds": [prefill_cost(s) for s in sizes]}},
    }
    if draft:
        data["draft"] = {"model": "d", "dtype": "bfloat16",
                         "forward": {"new_tokens": n, "context": ctx,
                                     "seconds": [[draft_cost(a, c) for a in n] for c in ctx]},
                         "prefill": {"tokens": sizes, "seconds": [prefill_cost(s) / 2 for s in sizes]}}
    if lookup:
        data["ngram_lookup"] = {"tokens": sizes, "seconds": [lookup_cost(s) for s in sizes]}
    return data


@pytest.fixture
def profile() -> Profile:
    return Profile.model_validate(synthetic_profile())


# ------------------------------------------------------------------------------------------------ proxy time


def test_proxy_time_of_hand_built_records_is_exact(profile):
    prompt = 11  # the target's cache holds 10 tokens before the first round
    ar = proxy_time(profile, Work(prompt, drafted=(0, 0, 0), emitted=(1, 1, 1), extra=(0, 0, 0),
                                  draft_forwards=((), (), ()), lookups=(0, 0, 0)), None)
    assert ar.prefill == pytest.approx(prefill_cost(10))
    assert ar.verify == pytest.approx(target_cost(1, 10) + target_cost(1, 11) + target_cost(1, 12))
    assert ar.draft == 0 and not ar.approximate and ar.outside_grid == 0

    # a draft model: round 1 drafts 4 (forwards of 1 token each) and emits 5; round 2 drafts 4 (the first forward
    # feeds the 2 tokens the drafter had not seen) and emits 2
    model = proxy_time(profile, Work(prompt, drafted=(4, 4), emitted=(5, 2), extra=(0, 0),
                                     draft_forwards=((1, 1, 1, 1), (2, 1, 1, 1)), lookups=(0, 0)), "model")
    assert model.prefill == pytest.approx(prefill_cost(10) + prefill_cost(10) / 2)
    assert model.verify == pytest.approx(target_cost(5, 10) + target_cost(5, 15))
    assert model.draft == pytest.approx(4 * draft_cost(1, 10) + draft_cost(2, 15) + 3 * draft_cost(1, 15))
    assert model.total == pytest.approx(model.prefill + model.verify + model.draft)

    # prompt lookup: one lookup per round over the sequence so far, no model
    ngram = proxy_time(profile, Work(prompt, drafted=(3, 0), emitted=(2, 1), extra=(0, 0),
                                     draft_forwards=((), ()), lookups=(1, 1)), "ngram")
    assert ngram.prefill == pytest.approx(prefill_cost(10))
    assert ngram.verify == pytest.approx(target_cost(4, 10) + target_cost(1, 12))
    assert ngram.draft == pytest.approx(lookup_cost(11) + lookup_cost(13))

    # FLy's n-gram + LM drafter: its recorded lookups and its draft forwards of the sizes it fed
    fly = proxy_time(profile, Work(prompt, drafted=(6,), emitted=(7,), extra=(0,), draft_forwards=((7, 3),),
                                   lookups=(2,)), "ngram+lm")
    assert fly.draft == pytest.approx(2 * lookup_cost(11) + draft_cost(7, 10) + draft_cost(3, 10))
    assert fly.verify == pytest.approx(target_cost(7, 10))

    # the judge appends extra tokens to the verify forward
    judge = proxy_time(profile, Work(prompt, drafted=(2,), emitted=(3,), extra=(20,), draft_forwards=((1, 1),),
                                     lookups=(0,)), "model")
    assert judge.verify == pytest.approx(target_cost(2 + 1 + 20, 10))


def test_output_length_is_priced_in(profile):
    """A longer answer costs more rounds at longer contexts: the same acceptance, twice the output, more time."""
    short = proxy_time(profile, Work(20, (4,) * 5, (5,) * 5, (0,) * 5, ((1,) * 4,) * 5, (0,) * 5), "model")
    long = proxy_time(profile, Work(20, (4,) * 10, (5,) * 10, (0,) * 10, ((1,) * 4,) * 10, (0,) * 10), "model")
    assert long.decode > 2 * short.decode - 1e-12  # later rounds run at longer contexts


@pytest.mark.parametrize("drafter", ["model", "ngram+lm", "ngram"])
def test_proxy_time_is_monotone_in_drafted_tokens(profile, drafter):
    base = [3, 0, 5, 2]
    emitted = [2, 1, 3, 1]
    for r in range(len(base)):
        previous = None
        for d in range(12):
            drafted = list(base)
            drafted[r] = d
            forwards = [(1,) * x if drafter != "ngram" else () for x in drafted]
            lookups = [1 if drafter != "model" else 0 for _ in drafted]
            work = Work(30, tuple(drafted), tuple(emitted), (0,) * 4, tuple(forwards), tuple(lookups))
            time = proxy_time(profile, work, drafter).total
            assert previous is None or time > previous
            previous = time


def test_older_stores_are_priced_approximately_and_unknown_costs_are_refused(profile):
    old = proxy_time(profile, Work(11, drafted=(4,), emitted=(5,)), "model")  # no per-round work recorded
    assert old.approximate and old.draft == pytest.approx(4 * draft_cost(1, 10))
    assert not proxy_time(profile, Work(11, drafted=(0,), emitted=(1,)), None).approximate
    no_draft = Profile.model_validate(synthetic_profile(draft=False, lookup=False))
    with pytest.raises(Unpriced, match="no draft-model costs"):
        proxy_time(no_draft, Work(11, (4,), (5,), (0,), ((1, 1, 1, 1),), (0,)), "model")
    with pytest.raises(Unpriced, match="no n-gram lookup cost"):
        proxy_time(no_draft, Work(11, (4,), (5,), (0,), ((),), (1,)), "ngram")
    with pytest.raises(Unpriced, match="layerskip"):
        proxy_time(profile, Work(11, (4,), (5,), (0,), ((1, 1, 1, 1),), (0,)), "layerskip")


def test_forwards_beyond_the_grid_are_extended_and_counted():
    data = synthetic_profile()
    data["target"]["forward"] = {"new_tokens": [1, 8], "context": [0, 100],
                                 "seconds": [[target_cost(1, 0), target_cost(8, 0)],
                                             [target_cost(1, 100), target_cost(8, 100)]]}
    profile = Profile.model_validate(data)
    priced = proxy_time(profile, Work(151, (15,), (16,), (0,), ((1,) * 15,), (0,)), "model")
    assert priced.outside_grid == 1  # n = 16 at L = 150: both beyond the grid, one forward
    assert priced.verify == pytest.approx(target_cost(16, 150))  # a linear cost extends exactly


def test_interpolation_is_exact_at_points_linear_between_and_never_falls_beyond():
    xs, ys = (1, 2, 4), (1.0, 3.0, 2.0)
    assert [interpolate(xs, ys, x) for x in xs] == list(ys)
    assert interpolate(xs, ys, 3) == pytest.approx(2.5)
    assert interpolate(xs, ys, 0) == 1.0  # below the first point: the first value
    assert interpolate(xs, ys, 8) == 2.0  # the last segment falls: never below the last value
    assert interpolate((1, 2), (1.0, 3.0), 4) == pytest.approx(7.0)  # a rising last segment extends
    assert interpolate((5,), (2.0,), 100) == 2.0


# ------------------------------------------------------------------------------------------------ the file format


def write(tmp_path: Path, data: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_profile_round_trips_through_its_file(tmp_path, profile):
    path = tmp_path / "p.yaml"
    path.write_text(profile.to_yaml())
    assert load_profile(path) == profile


@pytest.mark.parametrize("break_it, message", [
    (lambda d: d["target"].pop("prefill"), "missing field 'target.prefill'"),
    (lambda d: d.pop("name"), "missing field 'name'"),
    (lambda d: d["target"]["forward"]["seconds"][0].__setitem__(1, -0.5), "must be a finite number of seconds >= 0"),
    (lambda d: d["draft"]["prefill"]["seconds"].__setitem__(0, -1), "must be a finite number of seconds >= 0"),
    (lambda d: d["target"]["forward"].__setitem__("new_tokens", [4, 2]), "must increase strictly"),
    (lambda d: d["target"]["forward"]["seconds"].pop(), "one row per context"),
    (lambda d: d.__setitem__("kind", "guessed"), "unknown kind 'guessed'"),
    (lambda d: d.__setitem__("colour", "red"), "unknown field 'colour'"),
])
def test_a_broken_profile_file_is_a_one_line_error(tmp_path, break_it, message):
    data = synthetic_profile()
    break_it(data)
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as error:
        load_profile(path)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text


def test_the_cli_refuses_a_broken_profile_with_one_line_and_exit_2(tmp_path, capsys):
    from tests.report_fixture import build_fixture_run

    run = build_fixture_run(tmp_path / "run")
    data = synthetic_profile()
    data["target"]["forward"]["seconds"][0][0] = -0.1
    bad = write(tmp_path, data, "bad.yaml")
    for argv in (["summary", str(run), "--profile", str(bad)], ["report", str(run), "--profile", str(bad)],
                 ["summary", str(run), "--profile", "h100"], ["report", str(run), "--x-axis", "nosuch"]):
        assert main(argv) == 2
        one_line_error(capsys.readouterr().err)
    assert main(["summary", str(run), "--profile", "h100"]) == 2
    one_line_error(capsys.readouterr().err, "'h100-sxm'", "did you mean")


def test_a_profile_of_other_models_does_not_price_a_run(tmp_path, capsys):
    from tests.report_fixture import build_fixture_run

    run = build_fixture_run(tmp_path / "run")
    other = write(tmp_path, synthetic_profile())  # models "t" and "d", the fixture's are fixture-target/-draft
    assert main(["summary", str(run), "--profile", str(other)]) == 2
    one_line_error(capsys.readouterr().err, "is for target 't'")


# ------------------------------------------------------------------------------------------------ devices, roofline


SHAPE = ModelShape(parameters=1_000_000_000, embedding_parameters=100_000_000, tied_embeddings=False, layers=10,
                   hidden_size=1024, attention_heads=8, kv_heads=2, head_dim=128)


def test_every_required_device_is_shipped_with_a_source_for_every_number():
    from relaxbench.profiles.devices import device_catalog

    catalog = device_catalog()
    assert {"h100-sxm", "h200", "b200", "a100-80gb", "mi300x", "l40s"} <= set(catalog.devices)
    for device in catalog.devices.values():
        for number in ("memory_bandwidth_tb_s", "bf16_dense_tflops", "memory_gb"):
            assert device.sources[number].strip()
    for number in ("achieved_bandwidth", "achieved_flops", "overhead_per_forward_s"):
        assert catalog.defaults.sources[number].strip()
    assert catalog.host.sources["ngram_lookup"].strip()


def test_a_device_spec_without_a_source_is_refused(tmp_path):
    from relaxbench.profiles.devices import device_catalog, devices_path

    data = yaml.safe_load(devices_path().read_text())
    del data["devices"]["l40s"]["sources"]["memory_gb"]
    path = write(tmp_path, data, "devices.yaml")
    with pytest.raises(ConfigError, match="no source given for memory_gb"):
        device_catalog(path)


def test_the_roofline_is_the_stated_formula():
    from relaxbench.profiles.analytic import roofline
    from relaxbench.profiles.devices import device_catalog

    catalog = device_catalog()
    h100 = catalog.get("h100-sxm")
    stack = catalog.stack_of(h100)
    line = roofline("h100-sxm", SHAPE, "bfloat16", 1, catalog)
    read = 900_000_000 * 2  # untied: every weight but the input embedding, 2 bytes each
    kv = 2 * 10 * 2 * 128 * (500 + 1) * 2
    memory = (read + kv) / (h100.memory_bandwidth_tb_s * 1e12 * stack.achieved_bandwidth)
    assert line.seconds(1, 500) == pytest.approx(memory + stack.overhead_per_forward_s)
    # a long block turns compute-bound: 2 FLOPs per weight per token plus attention
    n = 4096
    flops = 2 * 900_000_000 * n + 4 * 10 * 8 * 128 * n * (0 + (n + 1) / 2)
    compute = flops / (h100.bf16_dense_tflops * 1e12 * stack.achieved_flops)
    assert line.seconds(n, 0) == pytest.approx(compute + stack.overhead_per_forward_s)
    assert compute > (read + 2 * 10 * 2 * 128 * n * 2) / (h100.memory_bandwidth_tb_s * 1e12 * stack.achieved_bandwidth)
    # tensor parallelism splits bytes and FLOPs; 1-byte weights halve the memory time
    assert roofline("h100-sxm", SHAPE, "bfloat16", 2, catalog).seconds(1, 500) == pytest.approx(
        memory / 2 + stack.overhead_per_forward_s)
    assert roofline("h100-sxm", SHAPE, "fp8", 1, catalog).seconds(1, 500) == pytest.approx(
        memory / 2 + stack.overhead_per_forward_s)


def test_an_analytic_profile_states_its_assumptions_and_refuses_what_does_not_fit():
    from relaxbench.profiles.analytic import analytic_profile

    profile = analytic_profile("a100-80gb", "t", SHAPE, "d", SHAPE)
    assert profile.kind == "analytic" and profile.draft is not None and profile.ngram_lookup is not None
    assert any("batch size 1" in a for a in profile.assumptions)
    assert any("memory-bound" in a for a in profile.assumptions)
    assert any("tensor-parallel degree 1" in a for a in profile.assumptions)
    assert all(v > 0 for row in profile.target.forward.seconds for v in row)
    assert any(key.startswith("device.") for key in profile.sources)
    huge = ModelShape(**{**SHAPE.__dict__, "parameters": 70_000_000_000})
    with pytest.raises(ConfigError, match="do not fit"):
        analytic_profile("l40s", "t", huge)
    assert analytic_profile("l40s", "t", huge, tp=4, dtype="fp8").device.endswith("analytic roofline")


def test_the_roofline_is_within_the_stated_factor_of_published_figures():
    """The analytic 1-token latency against published bs=1 decode figures (profiles/published.yaml, sources in the
    file): every checked entry within the file's factor."""
    from relaxbench.profiles.published import compare_published

    comparisons = compare_published()
    checked = [c for c in comparisons if c.holds is not None]
    assert len(checked) >= 5 and {c.entry.device for c in checked} >= {"a100-80gb", "h100-sxm"}
    for c in checked:
        assert c.holds, (c.entry.name, c.ratio)
    assert all(c.entry.why_unchecked for c in comparisons if c.holds is None)


# ------------------------------------------------------------------------------------------------ recording, measuring


def test_the_engine_records_each_rounds_drafter_work_and_extra_tokens(tiny_target, tiny_draft):
    from relaxbench.decoders import build_decoder
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.methods import load_method

    prompt = list(tiny_target.tokenizer.encode("def add(a, b):\n    return a + b\n\ndef add(a, b):"))
    fly = build_decoder(load_method("fly"), tiny_target, tiny_draft, DecodeConfig(k=6, max_new_tokens=20))
    r = fly.generate(prompt).rounds
    assert len(r.draft_forwards) == len(r.lookups) == len(r.extra) == len(r)
    for forwards, lookups, drafted in zip(r.draft_forwards, r.lookups, r.drafted):
        assert lookups == len(forwards)  # one n-gram lookup per draft-LM forward
        assert drafted == 0 or all(n >= 1 for n in forwards)
    judge = build_decoder(load_method("reflective"), tiny_target, tiny_draft, DecodeConfig(k=3, max_new_tokens=12))
    reflection = len(judge.policy.reflection)
    r = judge.generate(prompt).rounds
    assert all(e == (reflection + d if d else 0) for e, d in zip(r.extra, r.drafted))
    assert all(len(f) == d for f, d in zip(r.draft_forwards, r.drafted))  # one draft-model forward per token
    assert set(r.lookups) == {0}


def test_measure_profile_on_the_tiny_models(tiny_target, tiny_draft):
    from relaxbench.profiles.measure import Grid, measure_profile

    grid = Grid(new_tokens=(1, 3), context=(4, 12), prefill=(2, 8), draft_new_tokens=(1, 2), lookup_context=(16,))
    steps = []
    profile = measure_profile(tiny_target, tiny_draft, grid, repeats=2, warmup=1, name="tiny", advance=steps.append)
    assert len(steps) == grid.steps(with_draft=True)
    assert profile.kind == "measured" and profile.target.model == "tiny-random-target"
    assert profile.target.forward.new_tokens == (1, 3) and profile.target.forward.context == (4, 12)
    assert profile.draft.forward.new_tokens == (1, 2) and profile.ngram_lookup.tokens == (16,)
    assert all(v > 0 for row in profile.target.forward.seconds for v in row)
    assert profile.settings["repeats"] == 2 and profile.target.dtype == "float64"
    with pytest.raises(ConfigError, match="increasing"):
        Grid(new_tokens=(2, 1), context=(4,), prefill=(2,))


def test_profile_command_measures_writes_and_lists(tmp_path, capsys):
    out = tmp_path / "tiny.yaml"
    assert main(["profile", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--dtype", "float64",
                 "--draft-dtype", "float64", "--new-tokens", "1,2", "--context", "4,8", "--prefill", "4",
                 "--draft-new-tokens", "1", "--repeats", "1", "--out", str(out)]) == 0
    measured = load_profile(out)
    assert measured.name == "tiny" and measured.draft.model == "tiny-random-draft"
    analytic = tmp_path / "h100.yaml"
    assert main(["profile", "--analytic", "h100-sxm", "--target", "tiny-random-target", "--draft",
                 "tiny-random-draft", "--out", str(analytic)]) == 0
    assert load_profile(analytic).kind == "analytic"
    assert main(["profile", "--list"]) == 0
    listing = capsys.readouterr().out
    for name in ("h100-sxm", "h200", "b200", "a100-80gb", "mi300x", "l40s"):
        assert name in listing
    for argv, message in ((["profile", "--analytic", "h1000", "--target", "x", "--out", str(analytic)],
                           "did you mean 'h200' or 'h100-sxm'"),
                          (["profile", "--target", "tiny-random-target"], "needs --out"),
                          (["profile", "--target", "t", "--out", str(tmp_path / "p.txt")], "ends in .yaml"),
                          (["profile", "--target", "t", "--new-tokens", "4,2", "--out", str(out)], "increasing")):
        assert main(argv) == 2, argv
        one_line_error(capsys.readouterr().err, message)


# ------------------------------------------------------------------------------------------------ where it is shown


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> Path:
    from tests.report_fixture import build_fixture_run

    return build_fixture_run(tmp_path_factory.mktemp("profiled") / "fixture")


def test_summary_prints_a_proxy_column_per_profile(fixture_run, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no header is cut
    assert main(["summary", str(fixture_run)]) == 0  # this-machine, stored with the run, by default
    out = capsys.readouterr().out
    assert "this-machine" in out and "h100-sxm" not in out
    assert main(["summary", str(fixture_run), "--profile", "h100-sxm", "--profile", "l40s"]) == 0
    out = capsys.readouterr().out
    for name in ("this-machine", "h100-sxm", "l40s"):
        assert name in out


def test_the_report_ranks_by_the_declared_deployment_and_says_so(fixture_run, tmp_path):
    from relaxbench.analysis.selection import Ranking, best_within_budget, ranks_by_capability
    from relaxbench.report.content import load_report

    report = load_report(fixture_run, profiles=("h100-sxm",))
    assert report.ranking == Ranking("h100-sxm")
    assert report.summary_lines[0].startswith("Arms are ranked by their proxy speed-up on h100-sxm")
    columns = report.summary_table.columns
    assert columns.index("speed-up [95% CI]") + 2 == columns.index("proxy h100-sxm [95% CI]")  # side by side
    assert "proxy this-machine [95% CI]" in columns
    for section in report.tasks:
        assert "on h100-sxm (measured here" in section.headline
    summaries = {s.task: s for s in _summaries(fixture_run, ("h100-sxm",))}
    for row in report.summary_table.rows:
        summary = summaries[row.key]
        best = best_within_budget(summary, 1.0, Ranking("h100-sxm"))
        if not ranks_by_capability(summary):  # fidelity only (agreement, no judge): no rule is picked
            assert best is None and row.cells[4].text == "not ranked (capability not measured)"
        else:
            assert row.cells[4].text == (best.arm if best else "ar (none faster within budget)")
    assert any(ranks_by_capability(s) for s in summaries.values())
    measured = load_report(fixture_run)
    assert measured.ranking.profile is None
    assert measured.summary_lines[0].startswith("Arms are ranked by the speed-up measured on this machine")
    assert measured.profiles_table is not None and [r.key for r in measured.profiles_table.rows] == ["this-machine"]
    assert [r.key for r in report.profiles_table.rows] == ["this-machine", "h100-sxm"]


def _summaries(run_dir: Path, refs: tuple[str, ...]):
    from relaxbench.analysis import load_run, summarize_run
    from relaxbench.analysis.proxy import choose_profiles

    run = load_run(run_dir)
    return summarize_run(run, choose_profiles(run, refs).profiles)


def test_the_tradeoff_plot_takes_a_profiles_proxy_as_its_x_axis(fixture_run, tmp_path):
    from relaxbench.report.content import load_report

    report = load_report(fixture_run, x_axis="b200")
    summaries = {s.task: s for s in _summaries(fixture_run, ("b200",))}
    for section in report.tasks:
        figure = next(f for f in section.figures if f.kind == "tradeoff")
        ax = figure.figure.axes[0]
        assert "proxy speed-up over AR on b200" in ax.get_xlabel() and "b200" in figure.method
        lines = {line.get_label(): line for line in ax.get_lines()}
        fly = [c for c in summaries[section.task].cells if c.method == "fly-sweep"]
        assert list(lines["fly-sweep (relaxed)"].get_xdata()) == [c.proxy["b200"].total.value for c in fly]
        hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
        assert sorted(x for line in hollow for x in line.get_xdata()) == sorted(
            c.speedup_total.value for c in summaries[section.task].cells[1:])  # the measured ones, still shown
    assert report.ranking.profile == "b200"  # the x-axis profile is the declared deployment
    out = tmp_path / "r.html"
    assert main(["report", str(fixture_run), "--format", "html", "--out", str(out), "--x-axis", "b200"]) == 0
    assert "proxy speed-up over AR on b200" in out.read_text()


def test_profiles_are_recorded_with_a_run_but_not_part_of_its_key():
    from relaxbench.harness.suite import SuiteSpec, shipped_suites, suite_file_fields
    from relaxbench.validation import load_yaml, validate

    base = {"target": "t", "methods": ["exact"], "tasks": ["jsonl"]}
    plain = validate(SuiteSpec, base, "test")
    priced = validate(SuiteSpec, {**base, "profiles": ["h100-sxm", "p.yaml"]}, "test")
    assert priced.profiles == ("h100-sxm", "p.yaml") and tuple(priced.record()["profiles"]) == priced.profiles
    assert plain.key_fields() == priced.key_fields()
    default = suite_file_fields(load_yaml(shipped_suites()["default"]), "default")
    assert "h100-sxm" in default["profiles"]  # make bench shows a GPU's proxy next to the measured speed-up


def test_compare_refuses_an_unknown_profile_before_loading_anything(tmp_path, capsys):
    argv = ["compare", "--target", "tiny-random-target", "--draft", "tiny-random-draft", "--methods", "exact",
            "--tasks", "jsonl", "--data-file", f"jsonl={Path(__file__).parent / 'data' / 'tiny_tasks.jsonl'}",
            "--out", str(tmp_path / "run"), "--profile", "h900"]
    assert main(argv) == 2
    one_line_error(capsys.readouterr().err, "unknown profile 'h900'")
    assert not (tmp_path / "run").exists()


def test_cpu_flags_override_makes_the_dtype_defaults_those_of_an_avx2_cpu(monkeypatch):
    import torch

    from relaxbench.machine import has_bf16_units
    from relaxbench.models.dtypes import default_dtype

    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", "avx2,fma")
    assert not has_bf16_units()
    assert default_dtype("cpu", "target", 1_500_000_000) == torch.float32
    assert default_dtype("cpu", "draft", 500_000_000) == torch.bfloat16
    monkeypatch.setenv("RELAXBENCH_CPU_FLAGS", "avx2 avx512_bf16")
    assert has_bf16_units() and default_dtype("cpu", "target", 1_500_000_000) == torch.bfloat16
