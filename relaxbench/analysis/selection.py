"""Which arms a report singles out per task: the fastest within a capability-loss budget (the summary's pick; only
where capability was measured), the fastest overall and the fastest lossless arm (for contrast). Rules over the
summaries, kept apart from how the report words them, so the pick can be tested and reused without rendering
anything.

"Fastest" is by one speed-up, the ``Ranking``: the measured one (this machine's wall clock), or the proxy speed-up
of a declared deployment profile (what the arms would gain on that device).
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxbench.analysis.metrics import POINTS, CellSummary, Estimate, TaskSummary

DEFAULT_BUDGET = 1.0  # capability-loss budget of the summary, in score points


@dataclass(frozen=True)
class Ranking:
    """The speed-up arms are ranked by: measured (``profile`` None) or a profile's proxy speed-up (total)."""

    profile: str | None = None

    def speed(self, cell: CellSummary) -> Estimate:
        if self.profile is None:
            return cell.speedup_total
        proxy = cell.proxy.get(self.profile)
        return Estimate(None) if proxy is None else proxy.total

    @property
    def label(self) -> str:
        return "measured speed-up" if self.profile is None else f"{self.profile} proxy speed-up"


MEASURED = Ranking()


def ranks_by_capability(summary: TaskSummary) -> bool:
    """Whether the task's score is capability. A task scored only for fidelity to AR (agreement, no grader) has no
    capability loss to budget, so no rule is picked or ranked by it."""
    return summary.measure == "capability"


def _fastest(cells: list[CellSummary], ranking: Ranking) -> CellSummary | None:
    return max(cells, key=lambda c: ranking.speed(c).value, default=None)


def _timed(summary: TaskSummary, ranking: Ranking) -> list[CellSummary]:
    return [c for c in summary.cells if not c.is_baseline and ranking.speed(c).value is not None]


def best_within_budget(summary: TaskSummary, budget: float, ranking: Ranking = MEASURED) -> CellSummary | None:
    """The fastest arm (by ``ranking``, total) whose mean capability loss vs AR is at most ``budget`` points; None
    when no arm within the budget is faster than AR, or when the task's capability was not measured."""
    if not ranks_by_capability(summary):
        return None
    best = _fastest([c for c in _timed(summary, ranking)
                     if c.score_delta.value is not None and c.score_delta.value * POINTS >= -budget], ranking)
    return best if best is not None and ranking.speed(best).value > 1.0 else None


def loss_beyond_budget(cell: CellSummary, budget: float) -> bool:
    """Whether the arm's Δ-vs-AR interval reaches below the budget (within it on average only)."""
    return cell.score_delta.low is not None and cell.score_delta.low * POINTS < -budget


def fastest(summary: TaskSummary, ranking: Ranking = MEASURED) -> CellSummary | None:
    return _fastest(_timed(summary, ranking), ranking)


def lossless_reference(summary: TaskSummary, ranking: Ranking = MEASURED) -> CellSummary | None:
    """The fastest lossless arm: what speed costs no capability."""
    return _fastest([c for c in _timed(summary, ranking) if c.lossless], ranking)
