"""Metrics from stored raw records: pure functions from a ``RunRecord`` to frozen summaries. Nothing is formatted
here: ``relaxbench.report.tables`` turns the summaries into the tables the terminal, the HTML and the PDF show.
The ratios over the speculative counters are ``Counters``' (decoding/records.py), summed over a cell's samples.

Pairing: the unit is one (item, turn); an arm's time for a unit is the mean over its repeats, and so is its score
(avg@n: under sampling the n repeats are independent samples, so the score is the mean over units of each unit's
mean over its n samples, with CIs from resampling units, i.e. items). Only units that every arm of the task has
finished are used, so every figure of a task's table is over the same samples.

Definitions: the metric schema (``relaxbench.analysis.schema``), one record per figure; ``METRIC_DEFINITIONS`` below
is generated from it (printed in every report; the benchmarks' own quantities, named apart from the speed-up, are
there too; docs/metrics.md is generated from it).
CIs: 95% percentile bootstrap (``scipy.stats.bootstrap``, paired resampling of units, 9999 resamples, fixed seed).

Target-alone tasks (likelihood-only sources, e.g. lm-eval's multiple choice and loglikelihood tasks) are stored in
the AR cell only, since no verification rule changes a likelihood. Their summaries give every method AR's score
with Δ = 0 by definition (``by_definition``), and no speed or counter figures for any arm (nothing was generated).

Two measures: a task's score is *capability* (its own scorer's, or an LLM grader's when one graded the task) or
*fidelity* to the AR output (agreement: exact match, ROUGE-L, log-likelihood), named in ``TaskSummary.measure``.
When a grader graded a task, the score is the grader's (draw 0, unparseable verdicts left out as FastChat does) and
the task's own agreement metrics stay in the details; ``TaskSummary.grader`` says how good the grader was. Where the
grader classifies what the task's own scorer classifies (``Scorer.scores_verdicts``: refusal), its verdict stands in
for the scorer's classifier instead: every sample is scored again by the scorer from the verdict, details included,
and a sample without a usable verdict has no score. A task's grading protocol may grade some of its categories only
(Spec-Bench's MT-Bench questions, ``llm-grader``'s ``categories``): the samples of a category the grader gave no
verdict in are outside the protocol, skipped — no score, not counted as failed calls — and ``GraderSummary``
counts them apart from the graded ones.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats

from relaxbench.analysis.proxy import sample_proxy
from relaxbench.analysis.records import CellRecord, RunRecord
from relaxbench.analysis.schema import BOOTSTRAP_RESAMPLES, computed_metrics, definitions, metrics
from relaxbench.decoding.records import Counters
from relaxbench.harness.store import LIKELIHOOD_STOP_REASON, SampleRow
from relaxbench.profiles import Profile, Unpriced
from relaxbench.grading.llm_grader import RATING_POINTS as GRADER_RATING_POINTS
from relaxbench.scoring.repetition import ends_in_loop
from relaxbench.tasks import stored_task_facts

POINTS = 100.0  # scores are stored as fractions; a capability-loss budget, the tables and the figures use points
BOOTSTRAP_SEED = 20240917
CONFIDENCE = 0.95

Unit = tuple[str, int]

# every figure's definition, generated from the metric schema (``relaxbench.analysis.schema``)
METRIC_DEFINITIONS: tuple[tuple[str, str], ...] = definitions()
# the entries that describe benchmark figures, not the report's: the report's definitions leave them out
BENCHMARK_METRICS = frozenset(m.name for m in metrics() if m.benchmark and m.definition)


def metric_definition(name: str) -> str:
    """The definition of ``name`` in the metric schema (a benchmark prints the one it reports)."""
    for key, text in definitions():
        if key == name:
            return text
    raise KeyError(f"no metric named {name!r} in METRIC_DEFINITIONS")


def report_definitions() -> tuple[tuple[str, str], ...]:
    """The definitions a run's report prints (the benchmarks' own quantities left out)."""
    return definitions(with_benchmarks=False)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% bootstrap interval (None bounds when there are fewer than 2 units)."""

    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class ProxySpeedup:
    """An arm's speed-up over AR with every sample priced on one profile's device (``relaxbench.profiles.proxy``):
    the same two estimates as the measured speed-up, over the same units, with the same bootstrap."""

    total: Estimate
    geomean: Estimate
    outside_grid: int = 0  # forwards (of this arm and AR) priced beyond the profile's grid
    approximate: bool = False  # some per-round work was not recorded (an older store): estimated
    unpriced: str | None = None  # why the profile cannot price this arm (then both estimates are None)


@dataclass(frozen=True)
class Divergences:
    """How often an arm reproduced AR exactly, and how its differences were diagnosed (lossless arms)."""

    compared: int
    reproduced: int
    near_tie: int
    not_near_tie: int
    inherited: int


@dataclass(frozen=True)
class GroupScore:
    """Score figures of a subset of units (one MT-Bench category, say)."""

    n_units: int
    score: float | None
    score_delta: Estimate
    details: Mapping[str, float]


@dataclass(frozen=True)
class FailureRate:
    """How often an arm's samples fail one way (no answer, cut at the budget, ending in a loop): the count over
    the paired samples, the rate (mean over units of each unit's share of its repeats, as avg@n) and the paired
    difference of those shares to AR, with its 95% CI (a fraction; the tables show percentage points)."""

    count: int
    samples: int
    rate: float | None
    delta: Estimate


@dataclass(frozen=True)
class Failures:
    """The failure measures of one arm, each paired against AR: no answer (the task's scorer found none; None
    where the scorer has no notion of an answer), cut at the token budget, ending in a repetition loop
    (``scoring.repetition``), the output-length ratio with its CI, and samples whose thinking was cut at a thinking
    budget and closed by the forced text (``decoding.budget``)."""

    no_answer: FailureRate | None
    cut: FailureRate
    loop: FailureRate
    length_ratio: Estimate
    forced: int = 0


@dataclass(frozen=True)
class Speed:
    """How fast an arm was against AR over the paired units, and where its time went."""

    speedup_total: Estimate = Estimate(None)
    speedup_geomean: Estimate = Estimate(None)
    latency_mean: float | None = None
    latency_median: float | None = None
    tokens_per_second: float | None = None
    policy_time_per_round: float | None = None  # seconds
    policy_share: float | None = None  # of the generation time
    output_length_ratio: float | None = None


@dataclass(frozen=True)
class CategoryAcceptance:
    """The speculative counters of one item category's paired units (the AR-paired relaxed fraction: relaxed
    acceptances / emitted tokens over the same units as every other arm's)."""

    n_units: int
    n_samples: int
    mean_acceptance_length: float | None
    acceptance_rate: float | None
    acceptance_by_position: tuple[float, ...]
    relaxed_fraction: float | None


@dataclass(frozen=True)
class Acceptance:
    """Why an arm is fast: its speculative counters summed over the paired samples, overall and per category."""

    mean_acceptance_length: float | None = None
    acceptance_rate: float | None = None
    acceptance_by_position: tuple[float, ...] = ()
    relaxed_fraction: float | None = None
    categories: Mapping[str, CategoryAcceptance] = field(default_factory=dict)


@dataclass(frozen=True)
class Capability:
    """What an arm's outputs are worth against AR's: the score (avg@n), its paired difference and test, and the
    lossless check."""

    score: float | None = None
    score_delta: Estimate = Estimate(None)
    mcnemar_p: float | None = None
    discordant: tuple[int, int] | None = None  # (AR pass & method fail, AR fail & method pass)
    accuracy_retained: float | None = None
    divergences: Divergences | None = None
    details: Mapping[str, float] = field(default_factory=dict)
    by_category: Mapping[str, GroupScore] = field(default_factory=dict)
    by_definition: bool = False  # a method on a target-alone task: AR's score, not measured
    score_interval: Estimate = Estimate(None)  # the score (avg@n) with its 95% CI over units


@dataclass(frozen=True)
class Span:
    """A span-gated rule (relax_in): relaxed acceptances / emitted tokens inside the thinking span and outside it
    (None for an ungated rule)."""

    relaxed_in_span: float | None = None
    relaxed_outside_span: float | None = None


PARTS = ("speed", "acceptance", "capability", "span")  # the parts whose fields read as the summary's own


@dataclass(frozen=True)
class CellSummary:
    """Every figure of one arm on one task, in parts (speed, acceptance, capability, failures, span, proxy). A part's
    field reads as the summary's own too (``cell.acceptance_rate`` is ``cell.acceptance.acceptance_rate``), so a
    table or a test names a figure by one word; the metric schema names it by its path."""

    task: str
    arm: str
    method: str
    policy: str
    knobs: Mapping[str, Any]
    drafter: str | None
    k: int
    is_baseline: bool
    lossless: bool
    n_units: int
    n_samples: int
    speed: Speed = Speed()
    acceptance: Acceptance = Acceptance()
    capability: Capability = Capability()
    failures: Failures | None = None  # None for a target-alone task (nothing generated)
    span: Span = Span()
    proxy: Mapping[str, ProxySpeedup] = field(default_factory=dict)  # per profile name, in the summary's order
    stop_reasons: Mapping[str, int] = field(default_factory=dict)  # over the paired samples ("length" = truncated)
    drafter_knobs: Mapping[str, Any] = field(default_factory=dict)
    repeats: int = 1  # n of avg@n: the most samples a unit of this arm has
    computed: Mapping[str, float | None] = field(default_factory=dict)  # schema metrics with a ``compute``, by key

    def __getattr__(self, name: str) -> Any:
        """A part's field by its own name (only called when the summary has no attribute of that name)."""
        if not name.startswith("_"):
            for part in PARTS:
                value = object.__getattribute__(self, part)
                if name in type(value).__dataclass_fields__:
                    return getattr(value, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def truncated(self) -> int:
        """Samples cut at the token budget (stop reason 'length')."""
        return int(self.stop_reasons.get("length", 0))

    def value(self, path: str) -> Any:
        """The figure at a metric schema path (``speed.speedup_total``, ``failures.cut``; a computed metric by its
        key)."""
        if path in self.computed:
            return self.computed[path]
        value: Any = self
        for name in path.split("."):
            if value is None:
                return None
            value = getattr(value, name)
        return value


@dataclass(frozen=True)
class GraderSummary:
    """The grader behind a task's capability scores, and how far to trust it: verdicts without a rating, samples
    left without a verdict, and its agreement with itself on the AR arm (graded twice when it can disagree)."""

    grader_hash: str
    label: str
    identity: Mapping[str, Any]
    verdicts: int  # verdicts on this task's samples, both passes
    unparseable: int  # of them, without a rating (FastChat's -1: left out of every average)
    not_graded: int  # samples the protocol grades with no first-pass verdict (a failed call; a rescore asks again)
    self_check: bool  # whether the AR arm was graded twice
    self_check_how: str  # how the second pass differs, or why there is none
    agreement_pairs: int = 0  # AR samples with a rating in both passes
    agreement_exact: float | None = None  # share of them with the same rating
    agreement_mean_abs: float | None = None  # mean |rating difference|, in points (rating × 10)
    graded: int = 0  # samples with a first-pass verdict (with or without a rating)
    skipped: int = 0  # samples outside the task's grading protocol (a category the grader gave no verdict in)
    graded_categories: tuple[str, ...] = ()  # the item categories the grader gave verdicts in, when some were skipped

    @property
    def unparseable_share(self) -> float | None:
        return self.unparseable / self.verdicts if self.verdicts else None


@dataclass(frozen=True)
class TaskSummary:
    task: str
    scorer: str
    binary: bool  # every score is pass/fail (McNemar applies)
    n_units: int
    cells: tuple[CellSummary, ...]  # the AR baseline first
    target_alone: bool = False  # scored by the target's likelihoods: no generation, methods equal AR by definition
    measure: str = "capability"  # what the score is: "capability", or "fidelity" to the AR output
    grader: GraderSummary | None = None  # the LLM grader whose verdicts are the capability scores
    profiles: tuple[str, ...] = ()  # the cost profiles every cell's ``proxy`` is priced with, in order
    # the grader's verdicts classify for the task's own scorer (refusal) rather than being the score (a rating)
    grader_classifies: bool = False
    classifier: str | None = None  # what classified the samples, as the scorer's details name it (refusal's)

    @property
    def rated_by_grader(self) -> bool:
        """Whether the scores are a grader's ratings (MT-Bench), not the task's own scorer's."""
        return self.grader is not None and not self.grader_classifies

    @property
    def baseline(self) -> CellSummary:
        return self.cells[0]


# ------------------------------------------------------------------------------------------------ statistics


def bootstrap_interval(data: Sequence[np.ndarray], statistic: Callable[..., np.ndarray],
                       seed: int = BOOTSTRAP_SEED) -> tuple[float | None, float | None]:
    """95% percentile bootstrap CI of ``statistic`` over paired samples (the arrays are resampled together)."""
    if len(data[0]) < 2:
        return None, None
    result = stats.bootstrap(tuple(data), statistic, paired=True, vectorized=True, axis=-1,
                             n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=CONFIDENCE, method="percentile",
                             rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def ratio_of_totals(numerator: np.ndarray, denominator: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(numerator, axis=axis) / np.sum(denominator, axis=axis)


def geometric_mean_ratio(numerator: np.ndarray, denominator: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(np.mean(np.log(numerator / denominator), axis=axis))


def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def speedups(ar_times: np.ndarray, method_times: np.ndarray) -> tuple[Estimate, Estimate]:
    """Ratio of total times and geometric mean of per-unit ratios, each with a paired bootstrap CI."""
    if len(ar_times) == 0:
        return Estimate(None), Estimate(None)
    total = Estimate(float(ratio_of_totals(ar_times, method_times)),
                     *bootstrap_interval((ar_times, method_times), ratio_of_totals))
    geo = Estimate(float(geometric_mean_ratio(ar_times, method_times)),
                   *bootstrap_interval((ar_times, method_times), geometric_mean_ratio))
    return total, geo


def score_interval(unit_scores: np.ndarray) -> Estimate:
    """The mean of per-unit scores (avg@n) with its bootstrap CI over units."""
    if len(unit_scores) == 0:
        return Estimate(None)
    return Estimate(float(unit_scores.mean()), *bootstrap_interval((unit_scores,), mean))


def mean_difference(method: np.ndarray, baseline: np.ndarray) -> Estimate:
    """Mean paired difference (method − baseline) with a bootstrap CI."""
    if len(method) == 0:
        return Estimate(None)
    diff = method - baseline
    return Estimate(float(diff.mean()), *bootstrap_interval((diff,), mean))


def mcnemar_exact(baseline_passed: Sequence[bool], method_passed: Sequence[bool]) -> tuple[float, tuple[int, int]]:
    """Exact McNemar test: two-sided binomial test of the discordant pairs against p = 1/2."""
    lost = sum(1 for b, m in zip(baseline_passed, method_passed) if b and not m)
    gained = sum(1 for b, m in zip(baseline_passed, method_passed) if m and not b)
    if lost + gained == 0:
        return 1.0, (0, 0)
    return float(stats.binomtest(lost, lost + gained, 0.5).pvalue), (lost, gained)


def proxy_speedups(cell: CellRecord, baseline: CellRecord, units: list[Unit], profile: Profile) -> ProxySpeedup:
    """The arm's speed-ups with every sample's time replaced by its proxy time on ``profile`` (a unit's proxy time
    is the mean over its repeats, as a measured one): ``speedups`` of the proxy times, so both speed-ups have one
    definition."""
    groups, base_groups = by_unit(cell.samples), by_unit(baseline.samples)
    try:
        arm = [[sample_proxy(profile, cell, s) for s in groups[u]] for u in units]
        base = [[sample_proxy(profile, baseline, s) for s in base_groups[u]] for u in units]
    except Unpriced as exc:
        return ProxySpeedup(Estimate(None), Estimate(None), unpriced=str(exc))
    own = [p for group in arm for p in group]
    outside, approximate = sum(p.outside_grid for p in own), any(p.approximate for p in own)
    if cell.is_baseline:
        return ProxySpeedup(Estimate(1.0), Estimate(1.0), outside, approximate)
    ar_times = np.array([statistics.fmean(p.total for p in group) for group in base])
    times = np.array([statistics.fmean(p.total for p in group) for group in arm])
    total, geo = speedups(ar_times, times)
    return ProxySpeedup(total, geo, outside, approximate)


def total_counters(samples: Sequence[SampleRow]) -> Counters:
    return sum((s.counters for s in samples), Counters())


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


# ------------------------------------------------------------------------------------------------ summaries


def unit_of(sample: SampleRow) -> Unit:
    """What pairs samples across arms: the item and the turn (repeats are averaged)."""
    return (sample.item_id, sample.turn)


def by_unit(samples: Sequence[SampleRow]) -> dict[Unit, list[SampleRow]]:
    out: dict[Unit, list[SampleRow]] = {}
    for s in samples:
        out.setdefault(unit_of(s), []).append(s)
    return out


def _unit_time(group: list[SampleRow]) -> float:
    return statistics.fmean(s.time_total for s in group)


ScoreOf = Callable[[SampleRow], float | None]


def stored_score(sample: SampleRow) -> float | None:
    """A sample's own scorer's score."""
    return sample.score


def avg_at_n(group: Sequence[SampleRow], score_of: ScoreOf = stored_score) -> float | None:
    """A unit's score: the mean over its n repeats (avg@n); None when none is scored."""
    values = [v for s in group if (v := score_of(s)) is not None]
    return statistics.fmean(values) if values else None


def unit_passed(group: Sequence[SampleRow]) -> bool | None:
    """A unit's pass/fail when all its repeats agree (one sample, or greedy decoding); None otherwise."""
    flags = {s.passed for s in group}
    return next(iter(flags)) if len(flags) == 1 else None


def _first(group: list[SampleRow]) -> SampleRow:
    return min(group, key=lambda s: s.repeat)


def is_greedy(cell: CellRecord) -> bool:
    """Whether the cell decoded greedily (temperature 0, every item category too): its repeats are one output,
    re-timed."""
    samplings = [cell.decode.get("sampling") or {}, *(cell.decode.get("sampling_by_category") or {}).values()]
    return all(float(s.get("temperature", 0.0)) == 0.0 for s in samplings)


def detail_metrics(cell: CellRecord) -> tuple[str, ...]:
    """The score-detail keys that are metrics (averaged in the summaries), as the task's source reads its record."""
    return stored_task_facts(cell.task, cell.task_spec, cell.scorer).detail_metrics


def is_target_alone(cell: CellRecord) -> bool:
    """A task scored by the target's likelihoods alone (see the module docstring)."""
    return stored_task_facts(cell.task, cell.task_spec, cell.scorer).likelihood_only


def _details_means(groups: Sequence[list[SampleRow]], keys: tuple[str, ...]) -> dict[str, float]:
    """Each detail metric as the score is averaged: over a unit's repeats, then over units."""
    out = {}
    for key in keys:
        per_unit = []
        for group in groups:
            values = [float(v) for s in group if isinstance(v := s.score_details.get(key), (int, float))]
            if values:
                per_unit.append(statistics.fmean(values))
        if per_unit:
            out[key] = statistics.fmean(per_unit)
    return out


def _divergences(groups: Sequence[list[SampleRow]]) -> Divergences | None:
    firsts = [_first(g) for g in groups if _first(g).matches_baseline is not None]
    if not firsts:
        return None
    diagnosed = [s.divergence for s in firsts if s.divergence]
    return Divergences(
        compared=len(firsts), reproduced=sum(bool(s.matches_baseline) for s in firsts),
        near_tie=sum(1 for d in diagnosed if d.get("near_tie") is True),
        not_near_tie=sum(1 for d in diagnosed if d.get("near_tie") is False),
        inherited=sum(1 for d in diagnosed if d.get("inherited")))


def _scores(units: list[Unit], groups: Mapping[Unit, list[SampleRow]], score_of: ScoreOf) -> np.ndarray:
    return np.array([np.nan if (value := avg_at_n(groups[u], score_of)) is None else value for u in units],
                    dtype=float)


def summarize_cell(cell: CellRecord, baseline: CellRecord, units: list[Unit],
                   score_of: ScoreOf = stored_score, profiles: Sequence[Profile] = ()) -> CellSummary:
    """Every figure of one arm on one task, paired with the AR baseline over ``units``; ``score_of`` gives a
    sample's score (its own scorer's, or a grader's verdict); proxy speed-ups on each of ``profiles``."""
    groups, base_groups = by_unit(cell.samples), by_unit(baseline.samples)
    samples = [s for u in units for s in groups[u]]
    ar_times = np.array([_unit_time(base_groups[u]) for u in units])
    times = np.array([_unit_time(groups[u]) for u in units])
    total, geo = speedups(ar_times, times) if not cell.is_baseline else (Estimate(1.0), Estimate(1.0))
    scores, base_scores = _scores(units, groups, score_of), _scores(units, base_groups, score_of)
    scored = ~np.isnan(scores) & ~np.isnan(base_scores)
    score = float(scores[scored].mean()) if scored.any() else None
    base_score = float(base_scores[scored].mean()) if scored.any() else None
    delta = mean_difference(scores[scored], base_scores[scored]) if scored.any() else Estimate(None)
    passed = [unit_passed(groups[u]) for u in units]
    base_passed = [unit_passed(base_groups[u]) for u in units]
    repeats = max((len(groups[u]) for u in units), default=1)
    # McNemar pairs one pass/fail per unit: one sample per unit, or greedy repeats (one output, re-timed)
    one_outcome = repeats == 1 or is_greedy(cell)
    binary = bool(units) and one_outcome and all(p is not None for p in passed + base_passed)
    p_value, discordant = mcnemar_exact(base_passed, passed) if binary else (None, None)
    keys = detail_metrics(cell)
    counters = total_counters(samples)
    time_sum = sum(s.time_total for s in samples)
    policy_sum = sum(s.time_policy for s in samples)
    base_tokens = sum(statistics.fmean(s.n_output_tokens for s in base_groups[u]) for u in units)
    tokens = sum(statistics.fmean(s.n_output_tokens for s in groups[u]) for u in units)
    categories: dict[str, list[Unit]] = {}
    for u in units:
        category = _first(groups[u]).category
        if category is not None:
            categories.setdefault(category, []).append(u)
    by_category = {}
    for name, members in sorted(categories.items()):
        cs, bs = _scores(members, groups, score_of), _scores(members, base_groups, score_of)
        ok = ~np.isnan(cs) & ~np.isnan(bs)
        by_category[name] = GroupScore(len(members), float(cs[ok].mean()) if ok.any() else None,
                                       mean_difference(cs[ok], bs[ok]) if ok.any() else Estimate(None),
                                       _details_means([groups[u] for u in members], keys))
    drafter = None if cell.drafter is None else str(cell.drafter.get("kind"))
    in_span, outside_span = span_fractions(samples)
    return CellSummary(
        task=cell.task, arm=cell.arm, method=cell.method, policy=cell.policy, knobs=dict(cell.knobs),
        drafter=drafter, k=cell.k, is_baseline=cell.is_baseline, lossless=cell.lossless, n_units=len(units),
        n_samples=len(samples),
        speed=Speed(
            speedup_total=total, speedup_geomean=geo,
            latency_mean=float(times.mean()) if units else None,
            latency_median=float(np.median(times)) if units else None,
            tokens_per_second=_ratio(counters.emitted, time_sum),
            policy_time_per_round=_ratio(policy_sum, counters.rounds), policy_share=_ratio(policy_sum, time_sum),
            output_length_ratio=_ratio(tokens, base_tokens)),
        acceptance=Acceptance(
            mean_acceptance_length=counters.mean_acceptance_length, acceptance_rate=counters.acceptance_rate,
            acceptance_by_position=counters.acceptance_by_position, relaxed_fraction=counters.relaxed_fraction,
            categories=category_acceptance(categories, groups)),
        capability=Capability(
            score=score, score_delta=delta if not cell.is_baseline else Estimate(0.0, 0.0, 0.0),
            mcnemar_p=p_value if not cell.is_baseline else None,
            discordant=discordant if not cell.is_baseline else None,
            accuracy_retained=_ratio(score, base_score) if score is not None and base_score is not None else None,
            divergences=_divergences([groups[u] for u in units]) if is_greedy(cell) else None,
            details=_details_means([groups[u] for u in units], keys), by_category=by_category,
            score_interval=score_interval(scores[scored]) if scored.any() else Estimate(None)),
        failures=summarize_failures(cell, groups, base_groups, units),
        span=Span(in_span, outside_span),
        proxy={p.name: proxy_speedups(cell, baseline, units, p) for p in profiles} if units else {},
        stop_reasons=dict(sorted(Counter(s.stop_reason for s in samples).items())),
        drafter_knobs=dict((cell.drafter or {}).get("knobs") or {}),
        repeats=repeats,
        computed={m.key: m.compute(samples) for m in computed_metrics()})


def category_acceptance(categories: Mapping[str, list[Unit]],
                        groups: Mapping[Unit, list[SampleRow]]) -> dict[str, CategoryAcceptance]:
    """Each item category's speculative counters over its paired units (every repeat counted, as overall)."""
    out = {}
    for name, members in sorted(categories.items()):
        samples = [s for u in members for s in groups[u]]
        counters = total_counters(samples)
        out[name] = CategoryAcceptance(len(members), len(samples), counters.mean_acceptance_length,
                                       counters.acceptance_rate, counters.acceptance_by_position,
                                       counters.relaxed_fraction)
    return out


def sample_ends_in_loop(sample: SampleRow) -> bool:
    """Whether the sample's output ends in a repetition loop (a closing EOS token is not part of the output's
    text, so it is left out of the check)."""
    ids = sample.output_ids[:-1] if sample.stop_reason == "eos" else sample.output_ids
    return ends_in_loop(ids)


def failure_rate(units: list[Unit], groups: Mapping[Unit, list[SampleRow]], base_groups: Mapping[Unit, list[SampleRow]],
                 failed: Callable[[SampleRow], bool | None]) -> FailureRate | None:
    """One failure measure of an arm paired against AR over ``units`` (None when ``failed`` is None throughout:
    the measure does not apply to the task)."""
    def shares(group: list[SampleRow]) -> float | None:
        flags = [f for s in group if (f := failed(s)) is not None]
        return statistics.fmean(flags) if flags else None

    pairs = [(a, b) for u in units if (a := shares(groups[u])) is not None and (b := shares(base_groups[u])) is not None]
    if not pairs and units:
        return None
    arm, base = np.array([a for a, _ in pairs], dtype=float), np.array([b for _, b in pairs], dtype=float)
    flagged = [f for u in units for s in groups[u] if (f := failed(s)) is not None]
    return FailureRate(int(sum(flagged)), len(flagged), float(arm.mean()) if len(arm) else None,
                       mean_difference(arm, base))


def summarize_failures(cell: CellRecord, groups: Mapping[Unit, list[SampleRow]],
                       base_groups: Mapping[Unit, list[SampleRow]], units: list[Unit]) -> Failures:
    answered = stored_task_facts(cell.task, cell.task_spec, cell.scorer).answered

    def no_answer(sample: SampleRow) -> bool | None:
        if answered is None:
            return None
        found = answered(sample.score_details)
        return None if found is None else not found

    loops = {id(s): sample_ends_in_loop(s) for u in units for group in (groups[u], base_groups[u]) for s in group}
    tokens = np.array([statistics.fmean(s.n_output_tokens for s in groups[u]) for u in units], dtype=float)
    base_tokens = np.array([statistics.fmean(s.n_output_tokens for s in base_groups[u]) for u in units], dtype=float)
    if units and base_tokens.sum() > 0:
        low, high = (None, None) if cell.is_baseline else bootstrap_interval((tokens, base_tokens), ratio_of_totals)
        length = Estimate(float(tokens.sum() / base_tokens.sum()), low, high)
    else:
        length = Estimate(None)
    cut = failure_rate(units, groups, base_groups, lambda s: s.stop_reason == "length")
    loop = failure_rate(units, groups, base_groups, lambda s: loops[id(s)])
    empty = FailureRate(0, 0, None, Estimate(None))
    return Failures(no_answer=failure_rate(units, groups, base_groups, no_answer), cut=cut or empty,
                    loop=loop or empty, length_ratio=length,
                    forced=sum(1 for u in units for s in groups[u] if s.forced_tokens))


def span_fractions(samples: Sequence[SampleRow]) -> tuple[float | None, float | None]:
    """(relaxed / emitted inside the thinking span, the same outside it) over the rounds a span-gated rule
    recorded; (None, None) for an ungated rule."""
    inside_emitted = inside_relaxed = outside_emitted = outside_relaxed = 0
    for s in samples:
        r = s.rounds
        if r.emitted_in_span is None or r.relaxed_in_span is None:
            continue
        for emitted, relaxed, e_in, r_in in zip(r.emitted, r.relaxed, r.emitted_in_span, r.relaxed_in_span):
            if e_in is None or r_in is None:
                continue
            inside_emitted, inside_relaxed = inside_emitted + e_in, inside_relaxed + r_in
            outside_emitted, outside_relaxed = outside_emitted + emitted - e_in, outside_relaxed + relaxed - r_in
    return _ratio(inside_relaxed, inside_emitted), _ratio(outside_relaxed, outside_emitted)


def complete_units(cells: Sequence[CellRecord]) -> list[Unit]:
    """Units every cell has, in data order."""
    present = [set(by_unit(c.samples)) for c in cells]
    common = set.intersection(*present) if present else set()
    order = {unit_of(s): (s.item_index, s.turn) for c in cells for s in c.samples}
    return sorted(common, key=lambda u: order[u])


def summarize_task(run: RunRecord, task: str, profiles: Sequence[Profile] = ()) -> TaskSummary:
    cells = run.cells_of(task)
    baseline = next((c for c in cells if c.is_baseline), None)
    if baseline is None:
        raise ValueError(f"task {task!r} has no AR baseline cell")
    cells = [baseline] + [c for c in cells if not c.is_baseline]
    if is_target_alone(baseline):
        return summarize_target_alone(task, baseline, cells[1:])
    units = complete_units(cells)
    grader = summarize_grader(run, cells)
    facts = stored_task_facts(baseline.task, baseline.task_spec, baseline.scorer)
    classifies = grader is not None and facts.score_verdict is not None
    if classifies:
        cells = [scored_by_verdicts(c, grader, facts.score_verdict) for c in cells]
        baseline = cells[0]
    if grader is None or classifies:
        score_of, measure = stored_score, facts.measure
    else:
        score_of, measure = grader_scores(cells, grader.grader_hash), "capability"
    summaries = tuple(summarize_cell(c, baseline, units, score_of, profiles) for c in cells)
    binary = (grader is None or classifies) and bool(units) and all(s.passed is not None for c in cells
                                                                    for s in c.samples)
    labels = sorted({str(label) for c in cells for s in c.samples if (label := s.score_details.get("classifier"))})
    return TaskSummary(task, baseline.scorer, binary, len(units), summaries, measure=measure, grader=grader,
                       profiles=tuple(p.name for p in profiles), grader_classifies=classifies,
                       classifier=", ".join(labels) or None)


def scored_by_verdicts(cell: CellRecord, grader: GraderSummary,
                       score_verdict: Callable[[float | None, str, Mapping[str, Any]], Any]) -> CellRecord:
    """``cell`` with each sample scored by the task's scorer from the grader's first-pass verdict (the grader
    classified what the scorer classifies); a sample with no usable verdict (unparseable, or not graded) keeps no
    score and none of its own classifier's details."""
    ratings = {v.sample_id: v.rating for v in cell.verdicts
               if v.grader_hash == grader.grader_hash and v.draw == 0 and v.score is not None}
    name = str(grader.identity.get("model") or grader.label)
    samples = []
    for sample in cell.samples:
        rating = ratings.get(sample.sample_id)
        score = score_verdict(rating, name, sample.score_details)
        samples.append(replace(sample, score=None if rating is None else score.value,
                               passed=None if rating is None else score.passed, score_details=dict(score.details)))
    return replace(cell, samples=tuple(samples))


def grader_scores(cells: Sequence[CellRecord], grader_hash: str) -> ScoreOf:
    """A sample's capability score by the grader's first-pass verdict (None: unparseable, or not graded)."""
    verdicts = {v.sample_id: v.score for c in cells for v in c.verdicts if v.grader_hash == grader_hash and v.draw == 0}
    return lambda sample: verdicts.get(sample.sample_id)


def summarize_grader(run: RunRecord, cells: Sequence[CellRecord]) -> GraderSummary | None:
    """The grader whose verdicts are a task's capability scores: of those that graded its samples, the one that
    did so last (None when no grader graded the task)."""
    verdicts = [v for c in cells for v in c.verdicts]
    if not verdicts:
        return None
    chosen = max(verdicts, key=lambda v: v.linked_at).grader_hash
    mine = [v for v in verdicts if v.grader_hash == chosen]
    record = run.graders.get(chosen)
    description = record.description if record is not None else {}
    first = {v.sample_id: v for v in mine if v.draw == 0}
    second = {v.sample_id: v for v in mine if v.draw == 1}
    pairs = [(first[i].rating, second[i].rating) for i in second if i in first
             and first[i].score is not None and second[i].score is not None]
    samples = [s for c in cells for s in c.samples if s.stop_reason != LIKELIHOOD_STOP_REASON]
    # a protocol grades whole categories (llm-grader's categories): one the grader gave no verdict in is outside it
    ids = {v.sample_id for v in mine}
    covered = {s.category for s in samples if s.sample_id in ids}
    inside = [s for s in samples if s.category in covered]
    skipped = len(samples) - len(inside)
    return GraderSummary(
        grader_hash=chosen, label=record.label if record is not None else chosen[:12],
        identity=dict(record.identity) if record is not None else {}, verdicts=len(mine),
        unparseable=sum(v.score is None for v in mine),
        not_graded=sum(1 for s in inside if s.sample_id not in first),
        graded=sum(1 for s in inside if s.sample_id in first), skipped=skipped,
        graded_categories=tuple(sorted(str(c) for c in covered)) if skipped else (),
        self_check=bool(description.get("self_check")), self_check_how=str(description.get("self_check_how") or ""),
        agreement_pairs=len(pairs),
        agreement_exact=statistics.fmean(a == b for a, b in pairs) if pairs else None,
        agreement_mean_abs=statistics.fmean(abs(a - b) * GRADER_RATING_POINTS for a, b in pairs) if pairs else None)


def summarize_target_alone(task: str, baseline: CellRecord, methods: Sequence[CellRecord]) -> TaskSummary:
    """A task the target alone scores: AR's score from its samples; each method the same by definition. No arm
    generated anything, so speed and counter figures are None (not 1.0x, not 0 tokens/s)."""
    units = complete_units([baseline])
    measured = summarize_cell(baseline, baseline, units)
    base = replace(measured, speed=Speed(), acceptance=Acceptance())
    same = [replace(base, arm=c.arm, method=c.method, policy=c.policy, knobs=dict(c.knobs),
                    drafter=None if c.drafter is None else str(c.drafter.get("kind")), k=c.k, is_baseline=False,
                    lossless=c.lossless, n_samples=0,
                    capability=replace(base.capability, score_delta=Estimate(0.0, 0.0, 0.0),
                                       accuracy_retained=1.0 if base.score else None, by_definition=True))
            for c in methods]
    binary = bool(units) and all(s.passed is not None for s in baseline.samples)
    return TaskSummary(task, baseline.scorer, binary, len(units), (base, *same), target_alone=True)


def summarize_run(run: RunRecord, profiles: Sequence[Profile] = ()) -> tuple[TaskSummary, ...]:
    """Every task's summary; each cell's proxy speed-ups priced on ``profiles`` (``analysis.proxy.run_profiles``)."""
    return tuple(summarize_task(run, task, profiles) for task in run.tasks())
