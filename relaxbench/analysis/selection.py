"""Which arms a report singles out per task: the fastest within a capability-loss budget (the summary's pick; only
where capability was measured), the fastest overall and the fastest lossless arm (for contrast). Rules over the summaries, kept apart from how the
report words them, so the pick can be tested and reused without rendering anything."""

from __future__ import annotations

from relaxbench.analysis.metrics import POINTS, CellSummary, TaskSummary

DEFAULT_BUDGET = 1.0  # capability-loss budget of the summary, in score points


def _fastest(cells: list[CellSummary]) -> CellSummary | None:
    return max(cells, key=lambda c: c.speedup_total.value, default=None)


def _timed(summary: TaskSummary) -> list[CellSummary]:
    return [c for c in summary.cells if not c.is_baseline and c.speedup_total.value is not None]


def ranks_by_capability(summary: TaskSummary) -> bool:
    """Whether the task's score is capability. A task scored only for fidelity to AR (agreement, no judge) has no
    capability loss to budget, so no rule is picked or ranked by it."""
    return summary.measure == "capability"


def best_within_budget(summary: TaskSummary, budget: float) -> CellSummary | None:
    """The fastest arm (measured speed-up, total) whose mean capability loss vs AR is at most ``budget`` points;
    None when no arm within the budget is faster than AR, or when the task's capability was not measured."""
    if not ranks_by_capability(summary):
        return None
    best = _fastest([c for c in _timed(summary)
                     if c.score_delta.value is not None and c.score_delta.value * POINTS >= -budget])
    return best if best is not None and best.speedup_total.value > 1.0 else None


def loss_beyond_budget(cell: CellSummary, budget: float) -> bool:
    """Whether the arm's Δ-vs-AR interval reaches below the budget (within it on average only)."""
    return cell.score_delta.low is not None and cell.score_delta.low * POINTS < -budget


def fastest(summary: TaskSummary) -> CellSummary | None:
    return _fastest(_timed(summary))


def lossless_reference(summary: TaskSummary) -> CellSummary | None:
    """The fastest lossless arm: what speed costs no capability."""
    return _fastest([c for c in _timed(summary) if c.lossless])
