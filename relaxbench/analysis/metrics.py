"""Metrics from stored raw records: pure functions from a ``RunRecord`` to frozen summaries. Nothing is formatted
here: ``relaxbench.report.tables`` turns the summaries into the tables the terminal, the HTML and the PDF show.
The ratios over the speculative counters are ``Counters``' (decoding/records.py), summed over a cell's samples.

Pairing: the unit is one (item, turn); an arm's time for a unit is the mean over its repeats. Only units that
every arm of the task has finished are used, so every figure of a task's table is over the same samples.

Definitions: ``METRIC_DEFINITIONS`` below (also in the README, and printed in every report).
CIs: 95% percentile bootstrap (``scipy.stats.bootstrap``, paired resampling of units, 9999 resamples, fixed seed).

Target-alone tasks (likelihood-only sources, e.g. lm-eval's multiple choice and loglikelihood tasks) are stored in
the AR cell only, since no verification rule changes a likelihood. Their summaries give every method AR's score
with Δ = 0 by definition (``by_definition``), and no speed or counter figures for any arm (nothing was generated).
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
from relaxbench.decoding.records import Counters
from relaxbench.harness.store import SampleRow
from relaxbench.profiles import Profile, Unpriced
from relaxbench.tasks import stored_task_facts

POINTS = 100.0  # scores are stored as fractions; a capability-loss budget, the tables and the figures use points
BOOTSTRAP_SEED = 20240917
BOOTSTRAP_RESAMPLES = 9999
CONFIDENCE = 0.95

Unit = tuple[str, int]

METRIC_DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("MAL", "emitted tokens / verification rounds (bonus included; AR = 1.0)"),
    ("acceptance rate", "accepted draft tokens / drafted tokens"),
    ("acceptance at position i", "rounds that accepted draft position i / rounds that drafted position i"),
    ("relaxed fraction", "relaxed acceptances / emitted tokens (accepted tokens strict verification would reject)"),
    ("output-length ratio", "method output tokens / AR output tokens, summed over units"),
    ("speed-up (total)", "sum of AR times / sum of method times over units"),
    ("speed-up (geomean)", "exp(mean(log(AR time / method time))) over units"),
    ("latency", "end-to-end seconds per unit (mean, median); tokens/s = total tokens / total time"),
    ("policy time", ("the verification rule's decision time: Σ policy time / Σ verification rounds (per round), "
                     "and its share of the arm's generation time, Σ policy time / Σ time_total")),
    ("score", "mean over units (pass rate for pass/fail scorers)"),
    ("Δ vs AR", "mean over units of (method score − AR score)"),
    ("McNemar p", "exact two-sided binomial test on the discordant pairs (pass/fail scores only)"),
    ("accuracy retained", "method mean score / AR mean score"),
    ("proxy speed-up (profile)", ("the speed-up (total and geomean, same units, same paired bootstrap) with each "
                                  "sample's time replaced by its proxy time on the profile's device: prefill + Σ "
                                  "rounds [target forward of (drafted + 1 + extra) tokens at the round's context + "
                                  "the drafter's recorded forwards and n-gram lookups], priced from the profile's "
                                  "cost table; this-machine = the table the run measured at its session's start")),
    ("95% CI", f"percentile bootstrap over units (paired resampling, {BOOTSTRAP_RESAMPLES} resamples, fixed seed)"),
    ("unit", "one (item, turn); an arm's time for a unit is the mean over its repeats; only units every arm of "
             "the task finished are used"),
)


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
class CellSummary:
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
    mean_acceptance_length: float | None
    acceptance_rate: float | None
    acceptance_by_position: tuple[float, ...]
    relaxed_fraction: float | None
    output_length_ratio: float | None
    speedup_total: Estimate
    speedup_geomean: Estimate
    latency_mean: float | None
    latency_median: float | None
    tokens_per_second: float | None
    policy_time_per_round: float | None  # seconds
    policy_share: float | None  # of the generation time
    score: float | None
    score_delta: Estimate
    mcnemar_p: float | None
    discordant: tuple[int, int] | None  # (AR pass & method fail, AR fail & method pass)
    accuracy_retained: float | None
    divergences: Divergences | None
    details: Mapping[str, float] = field(default_factory=dict)
    by_category: Mapping[str, GroupScore] = field(default_factory=dict)
    stop_reasons: Mapping[str, int] = field(default_factory=dict)  # over the paired samples ("length" = truncated)
    by_definition: bool = False  # a method on a target-alone task: AR's score, not measured
    proxy: Mapping[str, ProxySpeedup] = field(default_factory=dict)  # per profile name, in the summary's order


@dataclass(frozen=True)
class TaskSummary:
    task: str
    scorer: str
    binary: bool  # every score is pass/fail (McNemar applies)
    n_units: int
    cells: tuple[CellSummary, ...]  # the AR baseline first
    target_alone: bool = False  # scored by the target's likelihoods: no generation, methods equal AR by definition
    profiles: tuple[str, ...] = ()  # the cost profiles every cell's ``proxy`` is priced with, in order

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


def _unit_score(group: list[SampleRow]) -> float | None:
    values = [s.score for s in group if s.score is not None]
    return statistics.fmean(values) if values else None


def _first(group: list[SampleRow]) -> SampleRow:
    return min(group, key=lambda s: s.repeat)


def detail_metrics(cell: CellRecord) -> tuple[str, ...]:
    """The score-detail keys that are metrics (averaged in the summaries), as the task's source reads its record."""
    return stored_task_facts(cell.task, cell.task_spec, cell.scorer).detail_metrics


def is_target_alone(cell: CellRecord) -> bool:
    """A task scored by the target's likelihoods alone (see the module docstring)."""
    return stored_task_facts(cell.task, cell.task_spec, cell.scorer).likelihood_only


def _details_means(groups: Sequence[list[SampleRow]], keys: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for key in keys:
        values = [float(v) for g in groups if isinstance(v := _first(g).score_details.get(key), (int, float))]
        if values:
            out[key] = statistics.fmean(values)
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


def _scores(units: list[Unit], groups: Mapping[Unit, list[SampleRow]]) -> np.ndarray:
    return np.array([_unit_score(groups[u]) if _unit_score(groups[u]) is not None else np.nan for u in units])


def summarize_cell(cell: CellRecord, baseline: CellRecord, units: list[Unit],
                   profiles: Sequence[Profile] = ()) -> CellSummary:
    """Every figure of one arm on one task, paired with the AR baseline over ``units``; proxy speed-ups on each of
    ``profiles``."""
    groups, base_groups = by_unit(cell.samples), by_unit(baseline.samples)
    samples = [s for u in units for s in groups[u]]
    ar_times = np.array([_unit_time(base_groups[u]) for u in units])
    times = np.array([_unit_time(groups[u]) for u in units])
    total, geo = speedups(ar_times, times) if not cell.is_baseline else (Estimate(1.0), Estimate(1.0))
    scores, base_scores = _scores(units, groups), _scores(units, base_groups)
    scored = ~np.isnan(scores) & ~np.isnan(base_scores)
    score = float(scores[scored].mean()) if scored.any() else None
    base_score = float(base_scores[scored].mean()) if scored.any() else None
    delta = mean_difference(scores[scored], base_scores[scored]) if scored.any() else Estimate(None)
    passed = [_first(groups[u]).passed for u in units]
    base_passed = [_first(base_groups[u]).passed for u in units]
    binary = bool(units) and all(p is not None for p in passed + base_passed)
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
        cs, bs = _scores(members, groups), _scores(members, base_groups)
        ok = ~np.isnan(cs) & ~np.isnan(bs)
        by_category[name] = GroupScore(len(members), float(cs[ok].mean()) if ok.any() else None,
                                       mean_difference(cs[ok], bs[ok]) if ok.any() else Estimate(None),
                                       _details_means([groups[u] for u in members], keys))
    drafter = None if cell.drafter is None else str(cell.drafter.get("kind"))
    return CellSummary(
        task=cell.task, arm=cell.arm, method=cell.method, policy=cell.policy, knobs=dict(cell.knobs),
        drafter=drafter, k=cell.k, is_baseline=cell.is_baseline, lossless=cell.lossless, n_units=len(units),
        n_samples=len(samples),
        mean_acceptance_length=counters.mean_acceptance_length, acceptance_rate=counters.acceptance_rate,
        acceptance_by_position=counters.acceptance_by_position, relaxed_fraction=counters.relaxed_fraction,
        output_length_ratio=_ratio(tokens, base_tokens),
        speedup_total=total, speedup_geomean=geo,
        latency_mean=float(times.mean()) if units else None,
        latency_median=float(np.median(times)) if units else None,
        tokens_per_second=_ratio(counters.emitted, time_sum),
        policy_time_per_round=_ratio(policy_sum, counters.rounds), policy_share=_ratio(policy_sum, time_sum),
        score=score, score_delta=delta if not cell.is_baseline else Estimate(0.0, 0.0, 0.0),
        mcnemar_p=p_value if not cell.is_baseline else None,
        discordant=discordant if not cell.is_baseline else None,
        accuracy_retained=_ratio(score, base_score) if score is not None and base_score is not None else None,
        divergences=_divergences([groups[u] for u in units]),
        details=_details_means([groups[u] for u in units], keys), by_category=by_category,
        stop_reasons=dict(sorted(Counter(s.stop_reason for s in samples).items())),
        proxy={p.name: proxy_speedups(cell, baseline, units, p) for p in profiles} if units else {})


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
    summaries = tuple(summarize_cell(c, baseline, units, profiles) for c in cells)
    binary = bool(units) and all(s.passed is not None for c in cells for s in c.samples)
    return TaskSummary(task, baseline.scorer, binary, len(units), summaries, profiles=tuple(p.name for p in profiles))


def summarize_target_alone(task: str, baseline: CellRecord, methods: Sequence[CellRecord]) -> TaskSummary:
    """A task the target alone scores: AR's score from its samples; each method the same by definition. No arm
    generated anything, so speed and counter figures are None (not 1.0x, not 0 tokens/s)."""
    units = complete_units([baseline])
    measured = summarize_cell(baseline, baseline, units)
    base = replace(measured, mean_acceptance_length=None, acceptance_rate=None, acceptance_by_position=(),
                   relaxed_fraction=None, output_length_ratio=None, speedup_total=Estimate(None),
                   speedup_geomean=Estimate(None), latency_mean=None, latency_median=None,
                   tokens_per_second=None, policy_time_per_round=None, policy_share=None)
    same = [replace(base, arm=c.arm, method=c.method, policy=c.policy, knobs=dict(c.knobs),
                    drafter=None if c.drafter is None else str(c.drafter.get("kind")), k=c.k, is_baseline=False,
                    lossless=c.lossless, n_samples=0, score_delta=Estimate(0.0, 0.0, 0.0),
                    accuracy_retained=1.0 if base.score else None, by_definition=True) for c in methods]
    binary = bool(units) and all(s.passed is not None for s in baseline.samples)
    return TaskSummary(task, baseline.scorer, binary, len(units), (base, *same), target_alone=True)


def summarize_run(run: RunRecord, profiles: Sequence[Profile] = ()) -> tuple[TaskSummary, ...]:
    """Every task's summary; each cell's proxy speed-ups priced on ``profiles`` (``analysis.proxy.run_profiles``)."""
    return tuple(summarize_task(run, task, profiles) for task in run.tasks())
