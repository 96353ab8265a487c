"""The metric schema: one ``Metric`` record per figure, the one place a metric is declared.

A record says what a figure is (its definition, the unit it is read in, which direction is better), where the
summary keeps it (``field``, a path into ``CellSummary``; ``key``, the name a table cell and the HTML carry) and
where it is shown (``table``, its column label, its place in the table, whether the 120-column terminal keeps it).
Everything that lists metrics is generated from ``METRICS``: ``METRIC_DEFINITIONS`` (the report's definitions
section, ``relaxbench list metrics`` and docs/metrics.md) and the columns and cells of every per-arm table
(``relaxbench.report.tables``). Adding a metric is one record here plus the function that computes it: a record with
``compute`` is filled by ``summarize_cell`` from the arm's paired samples (``CellSummary.computed``), so it needs no
field of its own.

Nothing here formats a number: ``format`` names a formatter of ``relaxbench.report.tables`` (a test checks every
name resolves), and ``spec`` is its format specification.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relaxbench.harness.store import SampleRow

BOOTSTRAP_RESAMPLES = 9999

# the per-arm tables, in the order a task shows them (a metric with table "" has a definition and no column)
TABLES = ("main", "failures", "diagnostics")
TABLE_TITLES = {"main": "speed and capability", "failures": "failure modes", "diagnostics": "diagnostics"}
BETTER = ("higher", "lower", "closer to 1", "")


@dataclass(frozen=True)
class Metric:
    """One figure: what it means, where the summary keeps it and where a table shows it.

    Several records may share a ``name``: the first carries the definition, the others are further columns of the
    same quantity (latency's mean and median). A record with no ``name`` is a column that is no metric (the arm,
    its knobs)."""

    name: str
    definition: str = ""  # "" when an earlier record of the same name defines it
    key: str = ""  # the cell's metric name (data-metric in the HTML); "" for a definition without a column
    column: str = ""  # the column label
    table: str = ""  # one of TABLES, or "" for no column
    order: int = 0  # the column's place in its table (ascending)
    format: str = "number"  # a formatter of relaxbench.report.tables (FORMATTERS)
    spec: str = ""  # the formatter's format specification (".2f", ".1%")
    unit: str = ""  # what the figure is counted in, in words
    better: str = ""  # "higher", "lower", "closer to 1" or "" (neither: a description, a count)
    narrow: bool = False  # shown at 120 columns (the terminal's default), not only with --wide
    benchmark: bool = False  # a `relaxbench bench` quantity: not in a run's report
    field: str = ""  # the CellSummary path the formatter reads; "" = ``key``
    compute: Callable[[Sequence[SampleRow]], float | None] | None = None  # from the arm's paired samples

    @property
    def path(self) -> str:
        return self.field or self.key


METRICS: tuple[Metric, ...] = (
    Metric("MAL", "emitted tokens / verification rounds (bonus included; AR = 1.0)",
           "mean_acceptance_length", "MAL", "main", 30, spec=".2f", unit="tokens per round", better="higher",
           narrow=True, field="acceptance.mean_acceptance_length"),
    Metric("acceptance rate", "accepted draft tokens / drafted tokens",
           "acceptance_rate", "acc. rate", "main", 40, spec=".1%", unit="share", better="higher",
           field="acceptance.acceptance_rate"),
    Metric("acceptance at position i", ("rounds that accepted draft position i / rounds with a draft (vLLM's "
                                        "num_accepted_tokens_per_pos / num_drafts)"), unit="share", better="higher"),
    Metric("relaxed fraction", "relaxed acceptances / emitted tokens (accepted tokens strict verification would "
                               "reject)", "relaxed_fraction", "relaxed frac.", "main", 120, spec=".1%", unit="share",
           field="acceptance.relaxed_fraction"),
    Metric("output-length ratio", "method output tokens / AR output tokens, summed over units",
           "output_length_ratio", "length ratio", "main", 130, spec=".3f", unit="ratio", better="closer to 1",
           field="speed.output_length_ratio"),
    Metric("speed-up (total)", "sum of AR times / sum of method times over units",
           "speedup_total", "speed-up [95% CI]", "main", 50, format="speed", unit="×", better="higher", narrow=True,
           field="speed.speedup_total"),
    Metric("speed-up (geomean)", "exp(mean(log(AR time / method time))) over units",
           "speedup_geomean", "geomean speed-up [95% CI]", "diagnostics", 50, format="speed", unit="×",
           better="higher", narrow=True, field="speed.speedup_geomean"),
    Metric("latency", "end-to-end seconds per unit (mean, median); tokens/s = total tokens / total time",
           "latency_mean", "latency s", "main", 70, spec=".2f", unit="s", better="lower", field="speed.latency_mean"),
    Metric("rule time", ("the verification rule's decision time: Σ rule time / Σ verification rounds (per "
                         "round), and its share of the arm's generation time, Σ rule time / Σ time_total"),
           "policy_time_per_round", "rule ms/round", "diagnostics", 90, format="ms", unit="ms per round",
           better="lower", field="speed.policy_time_per_round"),
    Metric("score", ("avg@n: mean over units of the unit's mean score over its n repeats (pass rate for pass/fail "
                     "scorers; under greedy decoding the repeats are the same output, so n does not matter); "
                     "capability (the task's own scorer, or an LLM grader's rating × 10 where one graded the task) "
                     "or, for a task scored by agreement with AR alone, fidelity"),
           "score", "score", "main", 80, format="score", unit="points", better="higher", narrow=True,
           field="capability.score"),
    Metric("fidelity to AR", ("agreement of an arm's output with AR's output of the same unit: exact match, "
                              "ROUGE-L F, and the target's mean log-likelihood of the output (not capability: other "
                              "wording loses points)"), unit="share", better="higher"),
    Metric("grader self-agreement", ("AR samples graded twice (another seed, another order): share with the same "
                                     "rating, and the mean absolute rating difference × 10 (points)"),
           unit="share", better="higher"),
    Metric("Δ vs AR", "mean over units of (method score − AR score)",
           "score_delta", "Δ vs AR, pts [95% CI]", "main", 90, format="pts_delta", unit="points", better="higher",
           narrow=True, field="capability.score_delta"),
    Metric("McNemar p", ("exact two-sided binomial test on the discordant pairs (pass/fail scores with one outcome "
                         "per unit: one sample per unit, or greedy decoding; under sampled repeats the Δ interval is "
                         "the test)"), "mcnemar_p", "p", "main", 100, format="p", unit="p-value",
           field="capability.mcnemar_p"),
    Metric("accuracy retained", "method mean score / AR mean score",
           "accuracy_retained", "acc. retained", "main", 110, spec=".1%", unit="share", better="higher",
           field="capability.accuracy_retained"),
    Metric("proxy speed-up (profile)", ("the speed-up (total and geomean, same units, same paired bootstrap) with "
                                        "each sample's time replaced by its proxy time on the profile's device: "
                                        "prefill + Σ rounds [target forward of (drafted + 1 + extra) tokens at the "
                                        "round's context + the drafter's recorded forwards and n-gram lookups], "
                                        "priced from the profile's cost table; this-machine = the table the run "
                                        "measured at its session's start"),
           "proxy", "proxy NAME [95% CI]", "main", 60, format="proxy_total", unit="×", better="higher", narrow=True),
    Metric("95% CI", (f"percentile bootstrap over units (paired resampling, {BOOTSTRAP_RESAMPLES} resamples, fixed "
                      "seed); a unit's value is already averaged over its repeats, so the interval is over items")),
    Metric("unit", ("one (item, turn); an arm's time and score for a unit are the means over its repeats; only units "
                    "every arm of the task finished are used")),
    Metric("truncated", "samples whose generation stopped at max_new_tokens (cut at the budget) / samples",
           "truncated", "cut at budget", "main", 140, format="truncated", unit="samples", better="lower"),
    Metric("no answer", ("samples in which the task's scorer found no answer (nothing extracted, or the output ended "
                         "inside its thinking) / samples; '-' where the scorer has no notion of an answer "
                         "(agreement, a grader)"),
           "failures.no_answer", "no answer", "failures", 20, format="failure_count", unit="samples",
           better="lower", narrow=True),
    Metric("ends in a loop", ("samples whose output ends in at least 3 back-to-back copies of one unit of up to 256 "
                              "tokens, spanning at least 15 tokens (a closing EOS left out) / samples"),
           "failures.loop", "ends in a loop", "failures", 60, format="failure_count", unit="samples", better="lower",
           narrow=True),
    Metric("failure Δ vs AR", ("mean over units of (the arm's share of failing repeats − AR's), in percentage "
                               "points, with its paired-bootstrap 95% CI; the output-length ratio's CI resamples "
                               "units likewise"),
           "failures.no_answer.delta", "Δ no answer, pp [95% CI]", "failures", 30, format="failure_delta",
           unit="percentage points", better="lower", narrow=True, field="failures.no_answer"),
    Metric("relaxed in / outside the span", ("a rule gated by relax_in: relaxed acceptances / emitted tokens inside "
                                             "the thinking span (<think> .. </think>) and outside it"),
           "relaxed_in_span", "relaxed frac. in / out of thinking", "failures", 100, format="span", unit="share",
           narrow=True, field="span"),
    Metric("forced", ("samples whose thinking reached the thinking budget unclosed, so the forced closing text and "
                      "</think> were appended and the answer generated after it"),
           "failures.forced", "forced", "failures", 90, format="count", unit="samples", narrow=True),
    # the agreement table's figures: two arms of a run on the same samples (relaxbench.analysis.agreement)
    Metric("identical outputs", ("samples whose output token ids equal the other arm's for the same (item, turn, "
                                 "repeat) / the samples both arms finished (the agreement table)"), unit="share"),
    Metric("token agreement", ("mean over the samples both arms finished of (tokens the two outputs share before "
                               "they first differ) / (tokens of the longer output); 1 for two empty outputs"),
           unit="share"),
    Metric("first divergence", ("the number of tokens two outputs of the same sample share before they first "
                                "differ; the agreement table gives its median over the samples that differ"),
           unit="tokens"),
    Metric("rounds alike", ("Σ rounds of arm A whose (drafted, accepted) equal arm B's, from the first round until "
                            "the first that does not / Σ arm A's rounds; decisions compared only when both arms have "
                            "the same drafter and k"), unit="share"),
    # the benchmarks' own quantities (relaxbench bench ...): named apart, since none of them is the speed-up above
    Metric("decode-rate ratio", ("relaxbench bench efficiency: an arm's decode tokens/s / that of the AR run just "
                                 "before it on the same prompt, decode time = total time − prefill; median over "
                                 "(prompt, repeat). Not the speed-up: prefill is left out, and there is no bootstrap"),
           unit="ratio", better="higher", benchmark=True),
    Metric("modelled decode-rate ratio", ("the decode-rate ratio with every generation's decode time replaced by its "
                                          "proxy time on a profile of this machine measured right after the arm "
                                          "ran"), unit="ratio", better="higher", benchmark=True),
    Metric("loop efficiency", ("decode-rate ratio / modelled decode-rate ratio per (prompt, repeat), median: near 1 "
                               "the loop (drafting bookkeeping, policy, cache rollback, Python) adds almost nothing "
                               "to the forward passes"), unit="ratio", better="closer to 1", benchmark=True),
    Metric("engine ratio", ("relaxbench bench engine: our arm's tokens/s / transformers' tokens/s on the same "
                            "models, prompts and decoding (per repeat Σ tokens / Σ seconds over the prompts, the two "
                            "sides interleaved); median over repeats. Compares two engines running the same "
                            "decoding, not a method with AR"), unit="ratio", better="higher", benchmark=True),
    # further columns of the quantities defined above
    Metric("speed-up (geomean)", key="proxy", column="proxy NAME geomean [95% CI]", table="diagnostics", order=60,
           format="proxy_geomean", unit="×", better="higher"),
    Metric("latency", key="latency_median", column="median latency s", table="diagnostics", order=70, spec=".2f",
           unit="s", better="lower", field="speed.latency_median"),
    Metric("latency", key="tokens_per_second", column="tokens/s", table="diagnostics", order=80, spec=".2f",
           unit="tokens/s", better="higher", narrow=True, field="speed.tokens_per_second"),
    Metric("rule time", key="policy_share", column="rule share", table="diagnostics", order=100, spec=".1%",
           unit="share", better="lower", field="speed.policy_share"),
    Metric("McNemar p", key="discordant", column="discordant lost / gained", table="diagnostics", order=110,
           format="discordant", unit="units", field="capability.discordant"),
    Metric("truncated", key="failures.cut", column="cut at budget", table="failures", order=40,
           format="failure_count", unit="samples", better="lower", narrow=True),
    Metric("failure Δ vs AR", key="failures.cut.delta", column="Δ cut, pp [95% CI]", table="failures", order=50,
           format="failure_delta", unit="percentage points", better="lower", narrow=True, field="failures.cut"),
    Metric("failure Δ vs AR", key="failures.loop.delta", column="Δ loop, pp [95% CI]", table="failures", order=70,
           format="failure_delta", unit="percentage points", better="lower", narrow=True, field="failures.loop"),
    Metric("output-length ratio", key="failures.length_ratio", column="length ratio [95% CI]", table="failures",
           order=80, format="estimate", spec=".3f", unit="ratio", better="closer to 1", narrow=True),
    # columns that are no metric: which arm, its rule and knobs, how many units, what it reproduced, how it stopped
    Metric("", key="arm", column="method", table="main", order=10, format="arm", narrow=True),
    Metric("", key="knobs", column="knobs", table="main", order=20, format="knobs"),
    Metric("", key="arm", column="method", table="failures", order=10, format="arm", narrow=True),
    Metric("", key="arm", column="method", table="diagnostics", order=10, format="arm", narrow=True),
    Metric("", key="policy", column="rule", table="diagnostics", order=20, format="policy", narrow=True),
    Metric("", key="n_units", column="n units", table="diagnostics", order=30, format="count"),
    Metric("", key="n_samples", column="n samples", table="diagnostics", order=40, format="count"),
    Metric("", key="divergences", column="reproduced AR", table="diagnostics", order=120, format="reproduced",
           narrow=True, field="capability.divergences"),
    Metric("", key="stop_reasons", column="stop reasons", table="diagnostics", order=130, format="stop_reasons"),
)


def metrics() -> tuple[Metric, ...]:
    """Every record, read when asked (so a metric added at run time, or in a test, is seen everywhere)."""
    return METRICS


def definitions(with_benchmarks: bool = True) -> tuple[tuple[str, str], ...]:
    """(name, definition) of every defined metric, in declaration order; without the benchmarks' own quantities
    when ``with_benchmarks`` is false (a run's report)."""
    return tuple((m.name, m.definition) for m in metrics()
                 if m.definition and (with_benchmarks or not m.benchmark))


def table_metrics(table: str) -> tuple[Metric, ...]:
    """The columns of one per-arm table, in their order."""
    if table not in TABLES:
        raise KeyError(f"no table {table!r} (tables: {', '.join(TABLES)})")
    return tuple(sorted((m for m in metrics() if m.table == table), key=lambda m: m.order))


def computed_metrics() -> tuple[Metric, ...]:
    """The records whose value ``summarize_cell`` computes from the samples (``compute``)."""
    return tuple(m for m in metrics() if m.compute is not None)


def columns_of(name: str) -> tuple[Metric, ...]:
    """Every column that shows the quantity ``name``, in declaration order."""
    return tuple(m for m in metrics() if m.name == name and m.column)
