"""Analysis: typed records read from the store (records.py), pure metric functions (metrics.py), the arms a
report singles out (selection.py) and the findings a reader must know (notices.py). Nothing here formats: the
report and the terminal (``relaxbench.report``) present these results."""

from relaxbench.analysis.metrics import CellSummary, Estimate, TaskSummary, summarize_run, summarize_task
from relaxbench.analysis.records import RunRecord, load_run, read_run

__all__ = ["CellSummary", "Estimate", "RunRecord", "TaskSummary", "load_run", "read_run", "summarize_run",
           "summarize_task"]
