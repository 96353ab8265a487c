"""The benchmark scripts: their figures come from real runs, and a missed target is a non-zero exit.

Speed itself is never asserted here (the machine is noisy); these tests check that the benches compare identical
outputs, compute their ratios from what they timed, and fail when a target is missed.
"""

from __future__ import annotations

import math
import re
import statistics
import sys

import pytest

from relaxbench.benchmarks.efficiency import ArmTotals, EfficiencyRow, Unit, bench_efficiency
from relaxbench.benchmarks.engine import Comparison, bench_draft_model, bench_prompt_lookup
from relaxbench.benchmarks.memory import MEMORY_TARGET_GIB, MemoryRun, peak_rss_of
from relaxbench.methods import load_method


def test_engine_comparisons_assert_identical_outputs_and_time_both_sides(tiny_target, tiny_draft):
    rows = bench_draft_model(tiny_target, tiny_draft, k=3, max_new_tokens=12, repeats=2, n_prompts=1)
    rows += bench_prompt_lookup(tiny_target, num_tokens=4, max_ngram=2, max_new_tokens=12, repeats=1, n_prompts=1)
    assert [r.target_ratio for r in rows] == [0.95, 1.0, 1.0]
    for row in rows:
        assert row.identical, row.label  # our arms reproduce transformers' greedy output token for token
        assert len(row.ours_tps) == len(row.ref_tps) >= 1
        assert all(v > 0 and math.isfinite(v) for v in row.ours_tps + row.ref_tps)


def test_the_engine_breakdown_counts_each_sides_forwards_where_they_happen(tiny_target, tiny_draft):
    """``--breakdown``: the hooks see every forward of both sides. AR is pinned by construction: our loop prefills
    all but the prompt's last token and then runs one 1-token forward per output token; transformers prefills the
    whole prompt (its first token) and runs one 1-token forward for each further token."""
    from relaxbench.benchmarks.engine import PREFILL

    greedy, assisted = bench_draft_model(tiny_target, tiny_draft, k=3, max_new_tokens=10, repeats=2, n_prompts=2,
                                         breakdown=True)
    generations = 2 * 2
    for row in (greedy, assisted):
        for side in (row.ours_time, row.ref_time):
            assert side.generations == generations
            assert side.forwards[("target", PREFILL)].count == generations
            assert 0 <= side.outside_s < side.total_s
        *forwards, outside, total = row.time_rows()
        assert outside[0] == "outside model forwards" and total[0] == "total"
        assert total[1].seconds == row.ours_time.total_s and total[2].seconds == row.ref_time.total_s
        assert all(what.startswith("target") for what, *_ in forwards[:2])  # the target's rows come first
    assert set(greedy.ours_time.forwards) == set(greedy.ref_time.forwards) == {("target", PREFILL), ("target", "1")}
    ours_steps = greedy.ours_time.forwards[("target", "1")].count  # one per output token
    ref_steps = greedy.ref_time.forwards[("target", "1")].count  # one per output token but the first
    assert ours_steps - ref_steps == generations  # (the outputs are identical: asserted by the comparison)
    assert greedy.identical and assisted.identical
    drafted = {feed for model, feed in assisted.ours_time.forwards if model == "draft"}
    assert PREFILL in drafted and "1" in drafted  # the draft model's forwards are counted on our side
    assert ("target", "4") in assisted.ours_time.forwards and ("target", "4") in assisted.ref_time.forwards  # k+1
    plain = bench_draft_model(tiny_target, tiny_draft, k=3, max_new_tokens=4, repeats=1, n_prompts=1)[0]
    assert plain.ours_time is None and plain.time_rows() == []  # no hooks unless asked


def test_a_comparison_holds_only_when_identical_and_at_target():
    fast = Comparison("x", 1.0, ours_tps=[2.0, 2.2], ref_tps=[2.0, 2.0])
    slow = Comparison("x", 1.0, ours_tps=[1.8, 1.9], ref_tps=[2.0, 2.0])
    wrong = Comparison("x", 1.0, ours_tps=[3.0], ref_tps=[2.0], identical=False)
    assert fast.holds and math.isclose(fast.median_ratio, 1.05)
    assert not slow.holds and not wrong.holds


def test_efficiency_is_measured_over_modelled_from_real_counters(tiny_target, tiny_draft):
    exact = load_method("exact")
    ar, rows = bench_efficiency(tiny_target, tiny_draft, [exact], k=3, max_new_tokens=10, repeats=2, n_prompts=1,
                                checked=frozenset({"exact"}), calibration_repetitions=2)
    (row,) = rows
    arm, base = row.arm.counters, ar.counters
    assert arm.emitted == base.emitted > 0  # a lossless arm emits what the AR arm emits
    assert arm.rounds < arm.emitted and arm.drafted > 0
    assert len(row.units) == 2 and len(ar.decode_s) == len(row.arm.decode_s) == 2
    profile = row.arm.profile
    assert profile is not None and profile.kind == "measured" and profile.draft is not None
    # the last unit's model, recomputed by hand from the last generations' rounds and the last profile (one
    # context, so a forward's cost depends on its size alone)
    target, draft = profile.target.forward, profile.draft.forward
    assert len(target.context) == 1 and all(v > 0 for row_ in target.seconds for v in row_)
    last, ar_last = row.arm.last, ar.last
    arm_decode = sum(target.seconds[0][target.new_tokens.index(d + 1)] for d in last.rounds.drafted)
    arm_decode += sum(draft.seconds[0][draft.new_tokens.index(n)] for forwards in last.rounds.draft_forwards
                      for n in forwards)
    ar_decode = ar_last.n_emitted * target.seconds[0][0]  # one 1-token step per AR token
    assert math.isclose(row.units[-1].modelled, (last.n_emitted / arm_decode) / (ar_last.n_emitted / ar_decode))
    emitted = base.emitted // 2
    measured = (emitted / row.arm.decode_s[-1]) / (emitted / ar.decode_s[-1])
    assert math.isclose(row.units[-1].measured, measured)
    assert math.isclose(row.efficiency, statistics.median(u.measured / u.modelled for u in row.units))
    assert row.holds == (row.efficiency >= 0.9)


def test_an_efficiency_row_below_target_does_not_hold():
    arm = ArmTotals("exact", 3)
    assert EfficiencyRow(arm, (Unit(0.8, 1.0), Unit(0.85, 1.0), Unit(2.0, 1.0)), 0.9).holds is False  # median
    assert EfficiencyRow(arm, (Unit(0.95, 1.0),), 0.9).holds is True
    assert EfficiencyRow(arm, (Unit(0.5, 1.0),), None).holds is None  # unchecked arms are reported, not judged


def test_peak_rss_is_read_from_the_child_process():
    # the child touches ~300 MiB; its peak RSS must show it (and a parent-side measurement would not)
    code = "import sys; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); sys.exit(0)"
    run = peak_rss_of((sys.executable, "-c", code))
    assert run.exit_code == 0 and 0.29 < run.peak_rss_gib < 1.0
    failed = peak_rss_of((sys.executable, "-c", "raise SystemExit(3)"))
    assert failed.exit_code == 3 and not failed.holds
    assert not MemoryRun(("x",), 0, MEMORY_TARGET_GIB + 0.1, 1.0).holds


@pytest.mark.slow
def test_bench_memory_cli_measures_a_compare_run(tmp_path, capsys):
    from relaxbench.cli import main

    code = main(["bench", "memory", "--target", "tiny-random-target", "--draft", "tiny-random-draft",
                 "--methods", "exact", "--tasks", "humaneval-completion", "--limit", "1", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "peak RSS" in out and "holds" in out
    assert (tmp_path / "run" / "results.sqlite").is_file()  # the compare run really happened


def test_a_differing_output_fails_the_comparison_and_says_where(tiny_target):
    from relaxbench.benchmarks.engine import CODE_PROMPTS, compare_pairwise, hf_generate
    from relaxbench.decoding.prompts import encode_prompt
    from relaxbench.timing import Clock

    prompt = encode_prompt(tiny_target.tokenizer, CODE_PROMPTS[0])
    reference = hf_generate(tiny_target, prompt, 8)
    assert len(reference) >= 4

    def ours(p: list[int]) -> list[int]:  # transformers' output with its 4th token changed
        out = hf_generate(tiny_target, p, 8)
        return out[:3] + [(out[3] + 1) % tiny_target.logit_dim] + out[4:]

    row = Comparison("x", 1.0)
    compare_pairwise(row, tiny_target, [prompt], 1, Clock(tiny_target.device), ours,
                     lambda p: hf_generate(tiny_target, p, 8))
    assert not row.identical and not row.holds
    assert row.notes.startswith("first difference at output token 3: top-2 logit gap")


def test_bench_tables_go_through_the_one_table_model(capsys):
    """``bench proxy --published-only`` (no model): its table is the report's Table, rendered with every column;
    a missed target is an alert cell, red in a terminal; the exit code follows the verdicts."""
    import io

    from rich.console import Console

    from relaxbench.cli import main
    from relaxbench.commands.bench.output import verdict
    from relaxbench.profiles.published import compare_published
    from relaxbench.report.tables import Row, Table
    from relaxbench.report.terminal import rich_table

    code = main(["bench", "proxy", "--published-only"])
    out = capsys.readouterr().out
    published = compare_published()
    assert code == (0 if all(c.holds is not False for c in published) else 1)
    for column in ("model, hardware", "published ms", "analytic ms", "analytic / published", "within", "holds"):
        assert column in out
    for c in published:
        assert c.entry.name in out and f"{c.analytic_ms:.2f}" in out
    assert "not checked" in out and (verdict(None, "not checked").text, verdict(True).text) == ("not checked", "yes")
    missed = verdict(False)
    assert missed.text == "NO" and missed.alert and not verdict(True).alert
    buffer = io.StringIO()
    table = Table("t", "t", ("holds",), (Row("x", (missed,)),))
    Console(file=buffer, force_terminal=True, color_system="standard", width=40).print(rich_table(table))
    assert re.search(r"\x1b\[31m *NO\x1b\[0m", buffer.getvalue())  # red


def test_bench_subcommands_share_the_runtime_flags():
    """--device/--dtype/--draft-dtype/--threads are declared once (commands/args.py); each benchmark takes the
    ones it uses, with the same defaults."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.bench import BENCHMARK_MODULES

    parser = build_parser()
    takes = {"engine": {"device", "dtype", "draft_dtype", "threads"}, "engines": {"device", "dtype", "threads"},
             "forward": {"device", "threads"},
             "efficiency": {"device", "dtype", "draft_dtype", "threads"}, "memory": {"dtype", "draft_dtype", "threads"},
             "cluster": {"threads"}, "proxy": {"dtype", "draft_dtype", "threads"},
             "policies": {"device", "dtype", "threads"}, "verify": {"device", "threads"}, "gpu": {"device", "threads"}}
    device_default = {"policies": "cpu", "verify": "cpu", "gpu": "cuda"}
    threads_default = {"verify": 1}  # a decision's host overhead, one thread
    command = {"policies": "rules"}  # a module's subcommand, where its name differs
    assert [m.__name__.rsplit(".", 1)[1] for m in BENCHMARK_MODULES] == list(takes)
    for name, flags in takes.items():
        args = parser.parse_args(["bench", command.get(name, name), *(["MODEL"] if name == "forward" else [])])
        runtime = {key for key in ("device", "dtype", "draft_dtype", "threads") if hasattr(args, key)}
        assert runtime == flags, name
        dtype = "float32" if name == "engines" else "auto"  # both engines at one dtype vLLM's CPU build runs
        assert args.threads == threads_default.get(name) and all(getattr(args, k) == dtype for k in flags - {"threads", "device"})
        assert getattr(args, "device", "auto") == device_default.get(name, "auto")
        assert callable(args.handler)


@pytest.mark.slow
def test_bench_forward_and_policies_print_their_tables(capsys):
    from relaxbench.cli import main

    assert main(["bench", "forward", "tiny-random-target", "--dtypes", "float32", "--chunks", "1,2", "--context",
                 "8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "forward cost, ms (context 8 tokens, median of 1)" in out and "1 tok" in out and "2 tok" in out
    assert "tiny-random-target" in out and "float32" in out
    code = main(["bench", "rules", "--target", "tiny-random-target", "--vocab", "64", "-k", "3", "--rounds", "2",
                 "--sampling-rounds", "2", "--repeats", "1", "--context", "8", "--rule", "exact", "--mode",
                 "greedy"])
    out = capsys.readouterr().out
    assert "rule decision time per round: V=64, k=3" in out and "exact" in out and "greedy" in out
    row = next(line for line in out.splitlines() if "exact" in line and "greedy" in line)
    assert code == (0 if row.rstrip(" │").endswith("yes") else 1)


def test_the_engine_comparison_on_the_static_cache_runs_transformers_on_its_own(tiny_target, tiny_draft):
    """``bench engine --kv-cache static``: our AR arm on the static cache against transformers' generate on its
    static cache (eager: no graphs on a CPU), same outputs; the assisted row keeps transformers' dynamic cache."""
    from relaxbench.benchmarks.engine import hf_static_kwargs
    from relaxbench.decoding.cache import KVSettings, configure_kv, kv_settings

    before = kv_settings()
    configure_kv(KVSettings("static", False))
    try:
        assert hf_static_kwargs() == {"cache_implementation": "static", "disable_compile": True}
        greedy, assisted = bench_draft_model(tiny_target, tiny_draft, k=3, max_new_tokens=10, repeats=1, n_prompts=2)
    finally:
        configure_kv(before)
    assert "static cache" in greedy.label and "compiled" not in greedy.label
    assert greedy.identical and assisted.identical
    assert hf_static_kwargs() == {}
