"""Proxy benchmark: does a cost profile measured on this machine predict what a ``compare`` run measured here?

The run's AR arm is checked on absolute time (Σ proxy seconds / Σ measured seconds over the paired units: the
profile prices a 1-token step right), every other arm on its speed-up (proxy speed-up / measured speed-up, both
Σ AR time / Σ arm time over the same units). Within ``TOLERANCE`` of 1 the proxy carries over: the same counters
priced with another device's profile are what that device would measure, up to the profile's own error. Both ratios
come from one run and one profile measured minutes apart; a machine whose speed drifts between them moves the AR
ratio, while the speed-up ratios, where drift cancels, are the figures that matter.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from relaxbench.analysis import RunRecord, summarize_run
from relaxbench.analysis.metrics import by_unit, complete_units
from relaxbench.analysis.proxy import sample_proxy
from relaxbench.profiles import Profile

TOLERANCE = 0.15


@dataclass(frozen=True)
class ProxyRow:
    task: str
    arm: str
    measured: float  # AR: seconds (Σ over units); other arms: speed-up over AR
    proxy: float
    checked: bool

    @property
    def ratio(self) -> float:
        return self.proxy / self.measured

    @property
    def holds(self) -> bool | None:
        return abs(self.ratio - 1.0) <= TOLERANCE if self.checked else None


def ar_seconds(run: RunRecord, task: str, profile: Profile) -> tuple[float, float]:
    """(measured, proxy) seconds of the AR arm over the task's paired units (a unit's time: mean over repeats)."""
    cells = run.cells_of(task)
    baseline = next(c for c in cells if c.is_baseline)
    groups = by_unit(baseline.samples)
    units = complete_units(cells)
    measured = sum(statistics.fmean(s.time_total for s in groups[u]) for u in units)
    proxy = sum(statistics.fmean(sample_proxy(profile, baseline, s).total for s in groups[u]) for u in units)
    return measured, proxy


def proxy_rows(run: RunRecord, profile: Profile, checked: frozenset[str]) -> list[ProxyRow]:
    """Per task: AR's measured vs proxy seconds, then each arm's measured vs proxy speed-up (``checked``: the arms
    held to the tolerance, by method name; AR always is)."""
    rows = []
    for summary in summarize_run(run, (profile,)):
        if summary.target_alone or not summary.n_units:
            continue
        measured, proxy = ar_seconds(run, summary.task, profile)
        rows.append(ProxyRow(summary.task, summary.baseline.arm, measured, proxy, True))
        for cell in summary.cells[1:]:
            estimate = cell.proxy[profile.name].total.value
            if cell.speedup_total.value is None or estimate is None:
                continue
            rows.append(ProxyRow(summary.task, cell.arm, cell.speedup_total.value, estimate, cell.method in checked))
    return rows
