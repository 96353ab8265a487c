"""Analysis: typed records read from the store (records.py), the metric schema (schema.py), pure metric functions
(metrics.py), acceptance by item category (categories.py), the agreement of two arms on the same samples
(agreement.py), the arms a report singles out (selection.py) and the notices a reader must know, each with its words
(notices.py). No table is built here: the report and the terminal (``relaxbench.report``) present these results.

The package's names load on first use: the schema alone (``relaxbench list metrics``) needs neither the metric
functions' numerical libraries nor the store."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relaxbench.analysis.metrics import CellSummary, Estimate, TaskSummary, summarize_run, summarize_task
    from relaxbench.analysis.records import RunRecord, load_run, read_run

_HOMES = {"CellSummary": "metrics", "Estimate": "metrics", "TaskSummary": "metrics", "summarize_run": "metrics",
          "summarize_task": "metrics", "RunRecord": "records", "load_run": "records", "read_run": "records"}

__all__ = ["CellSummary", "Estimate", "RunRecord", "TaskSummary", "load_run", "read_run", "summarize_run",
           "summarize_task"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
