"""What a careful reader must know before trusting a run's figures: too few units, wide intervals, the measured
speed-up far from this machine's proxy, profiles that did not cover or could not price a run, truncated outputs,
lossless arms that did not reproduce AR, a busy machine, sessions that differ.

Each notice is one record: a small frozen class (``Notice``) of the facts behind it, its severity (``level``:
"warning", a figure may mislead, or "info") and its words (``words()``, what the report and the terminal say); the
condition under which it applies is in ``task_notices`` / ``run_notices`` next to the thresholds it names. A new
notice is one class here and one condition there; the report only lists ``words()``.
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


class Notice:
    """A fact about a run that a reader must weigh: its numbers, its severity and its words."""

    level: ClassVar[str] = "warning"

    def words(self) -> str:
        """What a reader is told (one paragraph)."""
        raise NotImplementedError(f"{type(self).__name__} has no words")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"


def self_agreement_words(grader: GraderSummary) -> str:
    """The grader's agreement with itself in a few words (the grader table's cell and its notice)."""
    if not grader.self_check:
        return "not measured (see the note)"
    if grader.agreement_exact is None:
        return "AR graded twice, no pair with two ratings"
    return f"{grader.agreement_exact:.0%} same rating ({grader.agreement_pairs} AR samples)"


def lossless_words(arm: str, d: Divergences | None) -> str:
    """How a lossless arm compared with AR, in words."""
    if d is None:
        return (f"{arm} (lossless) was not compared token by token with AR (sampled decoding reproduces AR's "
                "distribution, not its tokens).")
    if d.reproduced == d.compared:
        return f"{arm} (lossless) reproduced AR's output exactly on all {d.compared} units."
    text = (f"{arm} (lossless) reproduced AR's output exactly on {d.reproduced} of {d.compared} units; "
            f"of the {d.compared - d.reproduced} that differ, {d.near_tie} diverged at a numerical near-tie "
            "(the top-2 target logits within the dtype's tolerance, so rounding in a k-token verify pass can "
            "flip the argmax)")
    if d.inherited:
        text += f", {d.inherited} inherited an earlier turn's difference"
    if d.not_near_tie:
        text += f", and {d.not_near_tie} diverged where no near-tie explains it — investigate before trusting"
    return text + "."


def _sessions_text(ids: Sequence[int]) -> str:
    return f"session{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


# ------------------------------------------------------------------------------------------------ per task


@dataclass(frozen=True)
class TargetAlone(Notice):
    """Scored by the target's likelihoods: methods equal AR by definition, no speed figures."""

    level: ClassVar[str] = "info"

    def words(self) -> str:
        return ("Scored by the target's likelihoods alone (no generation): no verification rule changes a "
                "likelihood, so every method has AR's score by definition and there are no speed or acceptance "
                "figures for this task.")


@dataclass(frozen=True)
class FidelityOnly(Notice):
    """The task's score is fidelity to AR (agreement), not capability: no grader graded it, so no rule is ranked by
    it."""

    scorer: str

    def words(self) -> str:
        return (f"Capability was not measured for this task: its score ({self.scorer}) is fidelity to AR's output "
                "(exact match, ROUGE-L, the target's log-likelihood), which any rewording of a good answer lowers, "
                "so the summary does not rank rules by it. A task with a grading protocol (MT-Bench) is graded for "
                "capability with --grader MODEL or --grader-endpoint URL --grader-model NAME, or afterwards with "
                "relaxbench rescore RUN --grader ....")


@dataclass(frozen=True)
class GraderQuality(Notice):
    """Which grader gave the capability scores, and how far to trust it."""

    grader: GraderSummary

    @property
    def level(self) -> str:  # type: ignore[override]
        share = self.grader.unparseable_share
        return "warning" if self.grader.not_graded or (share is not None and share > UNPARSEABLE_SHARE) else "info"

    def words(self) -> str:
        j = self.grader
        text = (f"Capability scores are the verdicts of {j.label}: {j.verdicts} verdicts, {j.unparseable} "
                f"without a rating ({_fmt(j.unparseable_share, '.1%')}; left out of the averages, as FastChat "
                "does)")
        if j.skipped:
            text += (f"; graded: {j.graded} samples of {', '.join(j.graded_categories)}, {j.skipped} samples of the "
                     "other categories are outside the task's grading protocol (not graded, left out of the "
                     "capability figures)")
        if j.not_graded:
            text += (f"; {j.not_graded} samples have no verdict (the grader call failed; relaxbench rescore asks "
                     "again)")
        if j.self_check:
            text += (f". Agreement with itself ({j.self_check_how}): {self_agreement_words(j)}, mean rating "
                     f"difference {_fmt(j.agreement_mean_abs, '.1f')} points.")
        else:
            text += f". Agreement with itself: {j.self_check_how}."
        return text


@dataclass(frozen=True)
class NoUnits(Notice):
    """No unit finished by every arm: no figures."""

    def words(self) -> str:
        return "No unit was finished by every arm: this task has no figures yet."


@dataclass(frozen=True)
class FewUnits(Notice):
    n_units: int
    paired: bool  # False for a target-alone task (AR's units only)

    def words(self) -> str:
        if not self.paired:
            return f"Only {self.n_units} units: AR's score has a wide interval."
        return (f"Only {self.n_units} paired units: intervals are wide and the McNemar test has little power; read "
                "differences as indicative.")


@dataclass(frozen=True)
class UnitsLeftOut(Notice):
    left_out: int
    stored: int
    level: ClassVar[str] = "info"

    def words(self) -> str:
        return (f"{self.left_out} of the {self.stored} AR units are left out because not every arm finished them "
                "(figures use only paired units).")


@dataclass(frozen=True)
class WideSpeedups(Notice):
    arms: tuple[str, ...]

    def words(self) -> str:
        return (f"Wide speed-up intervals (width > {WIDE_SPEEDUP:.0%} of the estimate): {', '.join(self.arms)}. "
                "Timings vary a lot between units or the machine was noisy.")


@dataclass(frozen=True)
class WideDeltas(Notice):
    arms: tuple[str, ...]

    def words(self) -> str:
        return f"Wide Δ-vs-AR intervals (wider than {WIDE_DELTA:g} points): {', '.join(self.arms)}."


@dataclass(frozen=True)
class LosslessCheck(Notice):
    """How a lossless arm compared with AR token by token (None: not compared, as under sampling)."""

    arm: str
    divergences: Divergences | None

    @property
    def level(self) -> str:  # type: ignore[override]
        return "warning" if self.divergences is not None and self.divergences.not_near_tie else "info"

    def words(self) -> str:
        return lossless_words(self.arm, self.divergences)


@dataclass(frozen=True)
class Truncated(Notice):
    """Outputs cut at the token budget. A warning when AR itself is often cut, or when an arm is cut more often
    than AR: relaxation can lengthen a reasoning model's thinking, and an answer cut inside it is lost."""

    counts: tuple[tuple[str, int, int], ...]  # (arm, samples cut at max_new_tokens, samples)
    limits: tuple[int, ...]  # the task's max_new_tokens values
    ar_share: float  # of AR's samples
    more_than_ar: tuple[tuple[str, float, float | None], ...] = ()  # (arm, its share, its output-length ratio)

    @property
    def level(self) -> str:  # type: ignore[override]
        return "warning" if self.ar_share > TRUNCATED_AR or self.more_than_ar else "info"

    def words(self) -> str:
        limit = f" ({', '.join(map(str, self.limits))} tokens)" if self.limits else ""
        parts = ", ".join(f"{arm} {n}/{of}" for arm, n, of in self.counts)
        text = (f"Outputs cut at max_new_tokens{limit}: {parts}. A truncated answer can fail where a complete "
                "one would pass, and truncation caps any length change.")
        if self.more_than_ar:
            longer = ", ".join(f"{arm} ({share:.0%} cut" + (f", length ratio {ratio:.2f}" if ratio else "") + ")"
                               for arm, share, ratio in self.more_than_ar)
            text += (f" Cut more often than AR: {longer}; relaxation can lengthen reasoning, so part of such an "
                     "arm's score loss is budget, not wrong answers.")
        return text


@dataclass(frozen=True)
class ModelGaps(Notice):
    """Measured speed-ups far from what this machine's own profile predicts from the counters."""

    arms: tuple[tuple[str, float, float], ...]  # (arm, measured, this-machine proxy)

    def words(self) -> str:
        apart = "; ".join(f"{arm} ({measured:.2f}× measured, {proxy:.2f}× {MACHINE_PROFILE} proxy)"
                          for arm, measured, proxy in self.arms)
        return (f"Measured speed-ups and this machine's proxy differ by more than {MODEL_GAP:g}×: {apart}. "
                "Overheads the proxy leaves out rarely explain that much; timing noise (load spikes during some "
                "samples) usually does. The geomean speed-up and the proxy are less sensitive to it.")


@dataclass(frozen=True)
class NoMachineProfile(Notice):
    """The run stored no profile of its machine (made before relaxbench measured one): no this-machine proxy."""

    level: ClassVar[str] = "info"

    def words(self) -> str:
        return (f"No {MACHINE_PROFILE} proxy: the run stored no cost profile of its machine (it was made before "
                "relaxbench measured one).")


@dataclass(frozen=True)
class ProfileUnpriced(Notice):
    """A profile cannot price some arms (a cost they need is not in it)."""

    profile: str
    arms: tuple[tuple[str, str], ...]  # (arm, why)
    level: ClassVar[str] = "info"

    def words(self) -> str:
        return f"Profile {self.profile} cannot price: " + "; ".join(f"{arm} ({why})" for arm, why in self.arms) + "."


@dataclass(frozen=True)
class ProfileExtended(Notice):
    """Some forwards were priced beyond a profile's grid (its last segment extended)."""

    profile: str
    forwards: int
    level: ClassVar[str] = "info"

    def words(self) -> str:
        return (f"Profile {self.profile} priced {self.forwards} forward(s) beyond its grid (its last segment "
                "extended): the run's contexts or block sizes exceed what it covers; measure a wider grid for exact "
                "figures.")


@dataclass(frozen=True)
class ProfileApproximate(Notice):
    """Samples stored before per-round drafter work was recorded: their proxy times are estimates."""

    profile: str
    level: ClassVar[str] = "info"

    def words(self) -> str:
        return (f"Proxy speed-ups on {self.profile} are estimates for samples stored before per-round drafter work "
                "was recorded (one 1-token draft forward per drafted token, no extra verify tokens).")


def task_notices(summary: TaskSummary, cells: Sequence[CellRecord]) -> list[Notice]:
    """The notices of one task, in the order a reader should see them."""
    found: list[Notice] = []
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
    return found + profile_notices(summary)


def profile_notices(summary: TaskSummary) -> list[Notice]:
    """Per profile: arms it cannot price, forwards it priced beyond its grid, estimates from older stores."""
    found: list[Notice] = []
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
class NoEnvironment(Notice):
    """No session recorded its environment."""

    def words(self) -> str:
        return "No environment was recorded with this run."


@dataclass(frozen=True)
class UnfinishedSession(Notice):
    session_id: int | None
    started_at: str | None
    status: str | None
    level: ClassVar[str] = "info"

    def words(self) -> str:
        return (f"Session {self.session_id} (started {self.started_at}) ended '{self.status}'; its finished samples "
                "are kept and used.")


@dataclass(frozen=True)
class BusyMachine(Notice):
    """Other processes kept the CPUs busy as the session started. Sessions recorded before that was measured have
    only the 1-min load average, which counts relaxbench's own preparation too (``others`` False)."""

    session_id: int | None
    load: float  # CPUs other processes kept busy over the window (or the 1-min load average)
    cpus: int
    others: bool = True
    window_s: float | None = None

    def words(self) -> str:
        if self.others:
            over = f"the {self.window_s:g} s" if self.window_s else "the moment"
            return (f"Session {self.session_id} started on a busy machine (other processes kept {self.load:g} of "
                    f"{self.cpus} CPUs busy in {over} before it started; relaxbench's own processes left out): "
                    "wall-clock speed-ups are noisy; proxy speed-ups are steadier.")
        return (f"Session {self.session_id} started on a busy machine (1-min load average {self.load:g} on "
                f"{self.cpus} CPUs, which counts relaxbench's own preparation too: this session predates the measure "
                "of other processes' use): wall-clock speed-ups are noisy; proxy speed-ups are steadier.")


def busy_machine(env: Mapping[str, Any]) -> BusyMachine | None:
    """The busy-machine notice of one session, judged on other processes' CPU use when it was recorded (the
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
class SessionsDiffer(Notice):
    key: str
    values: tuple[str, ...]  # JSON of each distinct value, sorted
    sessions: tuple[tuple[int, ...], ...] = ()  # the sessions with each value (a Ray run: one per worker)

    def words(self) -> str:
        listed = ([f"{value}: {_sessions_text(ids)}" for value, ids in zip(self.values, self.sessions)]
                  if self.sessions else self.values)
        return (f"Sessions of this run differ in {self.key} ({'; '.join(listed)}): samples timed in different "
                "setups are pooled.")


def run_notices(run: RunRecord) -> list[Notice]:
    sessions: Sequence[Mapping[str, Any]] = run.environment
    if not sessions:
        return [NoEnvironment()]
    found: list[Notice] = []
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
