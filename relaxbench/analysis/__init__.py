"""Analysis: typed records read from the store (records.py), pure metric functions (metrics.py), and terminal
tables (present.py), kept apart so reports reuse the same numbers."""

from relaxbench.analysis.metrics import CellSummary, Estimate, TaskSummary, summarize_run, summarize_task
from relaxbench.analysis.records import RunRecord, load_run, read_run

__all__ = ["CellSummary", "Estimate", "RunRecord", "TaskSummary", "load_run", "read_run", "summarize_run",
           "summarize_task"]
