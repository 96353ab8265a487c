"""Relaxation by drafter: what each relaxed rule gains over exact verification with the same drafter.

Xia et al. (arXiv 2607.08690) find that relaxed rules gain much less with a lightweight dedicated drafter (an MTP
head) than with a draft LM, and FLy (arXiv 2511.22972) compares itself with EAGLE-3: both are claims about the
drafter, not the rule. So for every drafter of a task that has an ``exact`` arm, each other arm with the same
drafter and draft length is paired with that exact arm unit by unit: the gain in mean acceptance length (MAL, the
ratio of the two arms' MAL) and in wall-clock speed (exact's time over the rule's), each with a paired bootstrap CI
over units, beside the rule's speed-up and capability change against AR and its relaxed fraction. On the
deployment's cost profile (the first device or file profile the summary prices with) the speed gain is also given
from proxy times (``proxy_gain``): on a CPU a head arm's wall clock says little of what it does on a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np

from relaxbench.analysis.metrics import (
    CellSummary,
    Estimate,
    Unit,
    bootstrap_interval,
    by_unit,
    complete_units,
    proxy_speedups,
    speedups,
    total_counters,
)
from relaxbench.analysis.records import CellRecord
from relaxbench.profiles import Profile
from relaxbench.profiles.measure import MACHINE_PROFILE

EXACT = "exact"


@dataclass(frozen=True)
class DrafterGain:
    """One relaxed arm against exact verification with the same drafter and k, on one task's paired units."""

    drafter: str  # the drafter's label: its kind, and the model or head it drafts with
    arm: str
    policy: str
    exact_arm: str
    k: int
    n_units: int
    mal: float | None
    exact_mal: float | None
    mal_gain: Estimate  # MAL of the rule over exact's, with its paired bootstrap CI over units
    speed_gain: Estimate  # exact's total time over the rule's (ratio of totals), with its CI
    speedup: Estimate  # the rule's speed-up over AR (the task's main table)
    score_delta: Estimate  # the rule's capability change against AR
    relaxed_fraction: float | None
    proxy_gain: Estimate = Estimate(None)  # exact's proxy time / the rule's on ``proxy_profile``, with its CI
    proxy_profile: str | None = None


def drafter_label(drafter: Mapping[str, Any] | None, draft_model: str | None = None) -> str:
    """``model (qwen2.5-coder-0.5b-instruct)``, ``eagle3 (my-head)``, ``ngram``: what the drafter drafts with (a
    model drafter drafts with the run's ``--draft``, a head with its ``head`` knob)."""
    if not drafter:
        return "-"
    kind = str(drafter.get("kind"))
    knobs = dict(drafter.get("knobs") or {})
    source = knobs.get("head") or (draft_model if kind in ("model", "ngram+lm") else None)
    return f"{kind} ({PurePath(str(source)).name})" if source else kind


def _identity(cell: CellRecord) -> tuple[str, str, int]:
    drafter = dict(cell.drafter or {})
    return str(drafter.get("kind")), json.dumps(drafter, sort_keys=True, default=str), cell.k


def _mal_of_totals(emitted: np.ndarray, rounds: np.ndarray, exact_emitted: np.ndarray,
                   exact_rounds: np.ndarray, axis: int = -1) -> np.ndarray:
    return (np.sum(emitted, axis=axis) / np.sum(rounds, axis=axis)) / (
        np.sum(exact_emitted, axis=axis) / np.sum(exact_rounds, axis=axis))


def _per_unit(cell: CellRecord, units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per unit: the mean time of its samples, and its emitted tokens and rounds summed over them."""
    groups = by_unit(cell.samples)
    times = np.array([float(np.mean([s.time_total for s in groups[u]])) for u in units])
    counters = [total_counters(groups[u]) for u in units]
    return times, np.array([c.emitted for c in counters], float), np.array([c.rounds for c in counters], float)


def deployment_profile(profiles: Sequence[Profile]) -> Profile | None:
    """The profile a proxy gain is priced on: the first that is not this machine's own measurement."""
    return next((p for p in profiles if p.name != MACHINE_PROFILE), None)


def drafter_gains(cells: Sequence[CellRecord], summaries: Sequence[CellSummary], units: Sequence[Unit],
                  draft_model: str | None = None, profile: Profile | None = None) -> tuple[DrafterGain, ...]:
    """Every non-exact arm paired with the exact arm of its drafter and k, when the task has such arms for at least
    two drafters (with one drafter the main table already says it all); empty otherwise. With ``profile``, each
    pair's speed gain is also priced on it (``proxy_gain``)."""
    by_arm = {s.arm: s for s in summaries}
    speculative = [c for c in cells if not c.is_baseline and c.drafter]
    exact = {_identity(c): c for c in speculative if c.policy == EXACT}
    if len({identity[1] for identity in exact}) < 2 or not units:
        return ()
    gains = []
    per_unit = {c.arm: _per_unit(c, units) for c in speculative if _identity(c) in exact}  # each arm read once
    for cell in speculative:
        reference = exact.get(_identity(cell))
        if cell.policy == EXACT or reference is None:
            continue
        times, emitted, rounds = per_unit[cell.arm]
        exact_times, exact_emitted, exact_rounds = per_unit[reference.arm]
        counted = rounds.sum() > 0 and exact_rounds.sum() > 0
        mal_gain = Estimate(float(_mal_of_totals(emitted, rounds, exact_emitted, exact_rounds)),
                            *bootstrap_interval((emitted, rounds, exact_emitted, exact_rounds),
                                                _mal_of_totals)) if counted else Estimate(None)
        speed_gain, _ = speedups(exact_times, times)
        # exact's proxy time over the rule's: the proxy speed-up with exact as the baseline
        proxy_gain = Estimate(None) if profile is None else proxy_speedups(cell, reference, list(units), profile).total
        summary, exact_summary = by_arm[cell.arm], by_arm[reference.arm]
        gains.append(DrafterGain(
            drafter=drafter_label(cell.drafter, draft_model), arm=cell.arm, policy=cell.policy,
            exact_arm=reference.arm, k=cell.k, n_units=len(units), mal=summary.mean_acceptance_length,
            exact_mal=exact_summary.mean_acceptance_length, mal_gain=mal_gain, speed_gain=speed_gain,
            speedup=summary.speedup_total, score_delta=summary.score_delta,
            relaxed_fraction=summary.relaxed_fraction, proxy_gain=proxy_gain,
            proxy_profile=profile.name if profile is not None else None))
    return tuple(sorted(gains, key=lambda g: (g.drafter, g.arm)))


def run_drafter_gains(run: Any, summaries: Sequence[Any],
                      profiles: Sequence[Profile] = ()) -> dict[str, tuple[DrafterGain, ...]]:
    """Every task's drafter gains (``drafter_gains``), by task, over the units its summary pairs, proxy gains on
    the deployment's profile among ``profiles`` (``deployment_profile``)."""
    profile = deployment_profile(profiles)
    out = {}
    for summary in summaries:
        if summary.target_alone:
            continue
        cells = run.cells_of(summary.task)
        gains = drafter_gains(cells, summary.cells, complete_units(cells), run.draft, profile)
        if gains:
            out[summary.task] = gains
    return out
