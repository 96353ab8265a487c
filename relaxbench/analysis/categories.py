"""Acceptance by item category: where a relaxed rule's relaxation gains most and least.

Acceptance is what varies most between categories (Spec-Bench, SPEED-Bench read MAL per category) and is what a
relaxed rule changes. Each arm's per-category counters are ``Acceptance.categories`` (metrics.py, over the task's
paired units); this module compares them: a relaxed arm's gain in a category is its MAL there minus that of the
strict reference (the lossless drafted arm with the same drafter and k, else the fastest-accepting lossless drafted
arm), or, where the run has no lossless drafted arm, its relaxed fraction there (the share of its emitted tokens that
strict verification would have rejected).
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxbench.analysis.metrics import CellSummary, TaskSummary


@dataclass(frozen=True)
class RelaxationGain:
    """One relaxed arm's gain per category against ``reference`` (None: the gain is the relaxed fraction), and the
    categories where it is largest and smallest."""

    arm: str
    reference: str | None
    gains: tuple[tuple[str, float], ...]  # (category, gain), largest first

    @property
    def measure(self) -> str:
        return "relaxed fraction" if self.reference is None else f"MAL − {self.reference}'s MAL"

    @property
    def most(self) -> tuple[str, float]:
        return self.gains[0]

    @property
    def least(self) -> tuple[str, float]:
        return self.gains[-1]


def categories_of(summary: TaskSummary) -> tuple[str, ...]:
    """The item categories of a task's paired units, sorted ('' when its items have none)."""
    return tuple(sorted({name for c in summary.cells for name in c.acceptance.categories}))


def strict_reference(summary: TaskSummary, cell: CellSummary) -> CellSummary | None:
    """The lossless drafted arm a relaxed arm's acceptance is compared with: the same drafter and k when the run has
    one, else the lossless drafted arm with the highest MAL; None when the run has none."""
    strict = [c for c in summary.cells if c.lossless and not c.is_baseline and c.mean_acceptance_length is not None]
    same = [c for c in strict if c.drafter == cell.drafter and c.k == cell.k]
    pool = same or strict
    return max(pool, key=lambda c: c.mean_acceptance_length, default=None)


def relaxation_gains(summary: TaskSummary) -> tuple[RelaxationGain, ...]:
    """Per relaxed arm (not lossless, with drafted rounds), its gain in every category it has counters for; only
    for a task with at least two categories."""
    if len(categories_of(summary)) < 2:
        return ()
    out = []
    for cell in summary.cells:
        if cell.is_baseline or cell.lossless or not cell.acceptance.categories:
            continue
        reference = strict_reference(summary, cell)
        gains = []
        for name, own in cell.acceptance.categories.items():
            if reference is None:
                value = own.relaxed_fraction
            else:
                base = reference.acceptance.categories.get(name)
                value = (None if base is None or own.mean_acceptance_length is None
                         or base.mean_acceptance_length is None
                         else own.mean_acceptance_length - base.mean_acceptance_length)
            if value is not None:
                gains.append((name, value))
        if len(gains) >= 2:
            gains.sort(key=lambda pair: (-pair[1], pair[0]))
            out.append(RelaxationGain(cell.arm, None if reference is None else reference.arm, tuple(gains)))
    return tuple(out)
