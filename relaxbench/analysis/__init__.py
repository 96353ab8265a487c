"""Analysis: typed records read from the store (records.py), the metric schema (schema.py), pure metric functions
(metrics.py), acceptance by item category (categories.py), the arms a report singles out (selection.py) and the
findings a reader must know, each with its words (notices.py). No table is built here: the report and the terminal
(``relaxbench.report``) present these results."""

from relaxbench.analysis.metrics import CellSummary, Estimate, TaskSummary, summarize_run, summarize_task
from relaxbench.analysis.records import RunRecord, load_run, read_run

__all__ = ["CellSummary", "Estimate", "RunRecord", "TaskSummary", "load_run", "read_run", "summarize_run",
           "summarize_task"]
