"""What a careful reader must know before trusting a run's figures: too few units, wide intervals, the measured
speed-up far from this machine's proxy, profiles that did not cover or could not price a run, truncated outputs, lossless arms that did not reproduce AR, a busy machine, sessions
that differ. Deciding which findings apply (and how serious each is) is analysis; the report words them
(``relaxbench.report.content``).

Each finding is a small frozen record of the facts behind it; ``level`` is "warning" (a figure may mislead) or
"info".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from relaxbench.analysis.metrics import POINTS, Divergences, GraderSummary, TaskSummary, by_unit
from relaxbench.analysis.records import CellRecord, RunRecord
from relaxbench.profiles.measure import MACHINE_PROFILE

FEW_UNITS = 30  # below this many paired units, intervals are wide and McNemar has little power
WIDE_SPEEDUP = 0.25  # CI width / value above which a speed-up interval is called wide
WIDE_DELTA = 10.0  # points: a Δ-vs-AR interval wider than this is called wide
MODEL_GAP = 2.0  # measured / this-machine proxy speed-up beyond this factor (either way) is flagged
TRUNCATED_AR = 0.25  # share of AR's samples cut at max_new_tokens above which truncation is a warning
BUSY_LOAD = 0.5  # CPUs kept busy by other processes, per CPU, at a session's start above which timings are noisy
UNPARSEABLE_SHARE = 0.1  # a grader whose verdicts lack a rating more often than this is flagged
SESSION_KEYS = ("device", "target_dtype", "draft_dtype", "threads", "cpu_model", "gpu", "gpus", "gpu_driver", "cuda",
                "torch", "transformers", "git_revision", "hostname")  # sessions that differ here pooled setups


class Finding:
    """A fact about a run that a reader must weigh; subclasses carry its numbers, the report words it."""

    level: ClassVar[str] = "warning"


# ------------------------------------------------------------------------------------------------ per task


@dataclass(frozen=True)
class TargetAlone(Finding):
    """Scored by the target's likelihoods: methods equal AR by definition, no speed figures."""

    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class FidelityOnly(Finding):
    """The task's score is fidelity to AR (agreement), not capability: no grader graded it, so no rule is ranked by
    it."""

    scorer: str


@dataclass(frozen=True)
class GraderQuality(Finding):
    """Which grader gave the capability scores, and how far to trust it."""

    grader: GraderSummary

    @property
    def level(self) -> str:  # type: ignore[override]
        share = self.grader.unparseable_share
        return "warning" if self.grader.not_graded or (share is not None and share > UNPARSEABLE_SHARE) else "info"


@dataclass(frozen=True)
class NoUnits(Finding):
    """No unit finished by every arm: no figures."""


@dataclass(frozen=True)
class FewUnits(Finding):
    n_units: int
    paired: bool  # False for a target-alone task (AR's units only)


@dataclass(frozen=True)
class UnitsLeftOut(Finding):
    left_out: int
    stored: int
    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class WideSpeedups(Finding):
    arms: tuple[str, ...]


@dataclass(frozen=True)
class WideDeltas(Finding):
    arms: tuple[str, ...]


@dataclass(frozen=True)
class LosslessCheck(Finding):
    """How a lossless arm compared with AR token by token (None: not compared, as under sampling)."""

    arm: str
    divergences: Divergences | None

    @property
    def level(self) -> str:  # type: ignore[override]
        return "warning" if self.divergences is not None and self.divergences.not_near_tie else "info"


@dataclass(frozen=True)
class Truncated(Finding):
    """Outputs cut at the token budget. A warning when AR itself is often cut, or when an arm is cut more often
    than AR: relaxation can lengthen a reasoning model's thinking, and an answer cut inside it is lost."""

    counts: tuple[tuple[str, int, int], ...]  # (arm, samples cut at max_new_tokens, samples)
    limits: tuple[int, ...]  # the task's max_new_tokens values
    ar_share: float  # of AR's samples
    more_than_ar: tuple[tuple[str, float, float | None], ...] = ()  # (arm, its share, its output-length ratio)

    @property
    def level(self) -> str:  # type: ignore[override]
        return "warning" if self.ar_share > TRUNCATED_AR or self.more_than_ar else "info"


@dataclass(frozen=True)
class ModelGaps(Finding):
    """Measured speed-ups far from what this machine's own profile predicts from the counters."""

    arms: tuple[tuple[str, float, float], ...]  # (arm, measured, this-machine proxy)


@dataclass(frozen=True)
class NoMachineProfile(Finding):
    """The run stored no profile of its machine (made before relaxbench measured one): no this-machine proxy."""

    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class ProfileUnpriced(Finding):
    """A profile cannot price some arms (a cost they need is not in it)."""

    profile: str
    arms: tuple[tuple[str, str], ...]  # (arm, why)
    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class ProfileExtended(Finding):
    """Some forwards were priced beyond a profile's grid (its last segment extended)."""

    profile: str
    forwards: int
    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class ProfileApproximate(Finding):
    """Samples stored before per-round drafter work was recorded: their proxy times are estimates."""

    profile: str
    level: ClassVar[str] = "info"


def task_findings(summary: TaskSummary, cells: Sequence[CellRecord]) -> list[Finding]:
    """The findings of one task, in the order a reader should see them."""
    found: list[Finding] = []
    baseline = next(c for c in cells if c.is_baseline)
    stored_units = len(by_unit(baseline.samples))
    if summary.target_alone:
        found.append(TargetAlone())
    if summary.measure == "fidelity":
        found.append(FidelityOnly(summary.scorer))
    if summary.grader is not None:
        found.append(GraderQuality(summary.grader))
    if summary.n_units == 0:
        return found + [NoUnits()]
    if summary.target_alone:
        return found + ([FewUnits(summary.n_units, paired=False)] if summary.n_units < FEW_UNITS else [])
    if stored_units > summary.n_units:
        found.append(UnitsLeftOut(stored_units - summary.n_units, stored_units))
    if summary.n_units < FEW_UNITS:
        found.append(FewUnits(summary.n_units, paired=True))
    arms = [c for c in summary.cells if not c.is_baseline]
    wide_speed = tuple(c.arm for c in arms if c.speedup_total.value and c.speedup_total.low is not None
                       and (c.speedup_total.high - c.speedup_total.low) / c.speedup_total.value > WIDE_SPEEDUP)
    if wide_speed:
        found.append(WideSpeedups(wide_speed))
    wide_delta = tuple(c.arm for c in arms if c.score_delta.low is not None
                       and (c.score_delta.high - c.score_delta.low) * POINTS > WIDE_DELTA)
    if wide_delta:
        found.append(WideDeltas(wide_delta))
    found += [LosslessCheck(c.arm, c.divergences) for c in arms if c.lossless]
    truncated = tuple((c.arm, c.stop_reasons["length"], c.n_samples) for c in summary.cells
                      if c.stop_reasons.get("length"))
    if truncated:
        limits = tuple(sorted({c.decode.get("max_new_tokens") for c in cells} - {None}))
        ar_cut = {arm: n for arm, n, _ in truncated}.get(summary.baseline.arm, 0)
        ar_share = ar_cut / max(1, summary.baseline.n_samples)
        more = tuple((c.arm, c.truncated / c.n_samples, c.output_length_ratio) for c in arms
                     if c.n_samples and c.truncated / c.n_samples > ar_share)
        found.append(Truncated(truncated, limits, ar_share, more))
    machine = {c.arm: c.proxy[MACHINE_PROFILE].total.value for c in arms if MACHINE_PROFILE in c.proxy}
    apart = tuple((c.arm, c.speedup_total.value, machine[c.arm]) for c in arms
                  if machine.get(c.arm) and c.speedup_total.value
                  and not 1 / MODEL_GAP <= c.speedup_total.value / machine[c.arm] <= MODEL_GAP)
    if apart:
        found.append(ModelGaps(apart))
    if MACHINE_PROFILE not in summary.profiles:
        found.append(NoMachineProfile())
    return found + profile_findings(summary)


def profile_findings(summary: TaskSummary) -> list[Finding]:
    """Per profile: arms it cannot price, forwards it priced beyond its grid, estimates from older stores."""
    found: list[Finding] = []
    for name in summary.profiles:
        priced = [(c.arm, c.proxy[name]) for c in summary.cells if name in c.proxy]
        unpriced = tuple((arm, p.unpriced) for arm, p in priced if p.unpriced)
        if unpriced:
            found.append(ProfileUnpriced(name, unpriced))
        outside = sum(p.outside_grid for _, p in priced)
        if outside:
            found.append(ProfileExtended(name, outside))
        if any(p.approximate for _, p in priced):
            found.append(ProfileApproximate(name))
    return found


# ------------------------------------------------------------------------------------------------ per run


@dataclass(frozen=True)
class NoEnvironment(Finding):
    """No session recorded its environment."""


@dataclass(frozen=True)
class UnfinishedSession(Finding):
    session_id: int | None
    started_at: str | None
    status: str | None
    level: ClassVar[str] = "info"


@dataclass(frozen=True)
class BusyMachine(Finding):
    """Other processes kept the CPUs busy as the session started. Sessions recorded before that was measured have
    only the 1-min load average, which counts relaxbench's own preparation too (``others`` False)."""

    session_id: int | None
    load: float  # CPUs other processes kept busy over the window (or the 1-min load average)
    cpus: int
    others: bool = True
    window_s: float | None = None


def busy_machine(env: Mapping[str, Any]) -> BusyMachine | None:
    """The busy-machine finding of one session, judged on other processes' CPU use when it was recorded (the
    session's own process tree left out), else on the load average."""
    cpus = env.get("cpu_count")
    if not cpus:
        return None
    others = env.get("others_busy_cpus")
    if others is not None:
        busy = others / cpus > BUSY_LOAD
        return BusyMachine(env.get("session_id"), others, cpus, True, env.get("others_window_s")) if busy else None
    if "others_busy_cpus" in env:  # measured, but psutil could not read the counters: no evidence either way
        return None
    load = env.get("load_average")
    if load and load[0] / cpus > BUSY_LOAD:
        return BusyMachine(env.get("session_id"), load[0], cpus, False)
    return None


@dataclass(frozen=True)
class SessionsDiffer(Finding):
    key: str
    values: tuple[str, ...]  # JSON of each distinct value, sorted
    sessions: tuple[tuple[int, ...], ...] = ()  # the sessions with each value (a Ray run: one per worker)


def run_findings(run: RunRecord) -> list[Finding]:
    sessions: Sequence[Mapping[str, Any]] = run.environment
    if not sessions:
        return [NoEnvironment()]
    found: list[Finding] = []
    for env in sessions:
        if env.get("status") != "finished":
            found.append(UnfinishedSession(env.get("session_id"), env.get("started_at"), env.get("status")))
        busy = busy_machine(env)
        if busy is not None:
            found.append(busy)
    for key in SESSION_KEYS:
        holders: dict[str, list[int]] = {}
        for env in sessions:
            holders.setdefault(json.dumps(env.get(key), default=str), []).append(env.get("session_id"))
        if len(holders) > 1:
            values = tuple(sorted(holders))
            found.append(SessionsDiffer(key, values, tuple(tuple(holders[v]) for v in values)))
    return found
