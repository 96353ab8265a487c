"""Task sources: where a compare task's items, prompts, generation settings and scores come from.

``source.TaskSource`` is the one interface the harness sees; relaxbench's YAML tasks (``yaml_tasks``) implement it,
and plug-ins (lm-eval's tasks, registered through the ``relaxbench.task_sources`` entry-point group) implement it
too, so the plan, the runner and the metrics know nothing of where a task came from.
"""

import relaxbench.grading  # noqa: F401  (registers the grading protocols a task's grader: names)
from relaxbench.tasks.loading import load_sources, loader_for, source_prefix, stored_task_facts
from relaxbench.tasks.source import TASK_SOURCES, Generation, LoadRequest, TaskFacts, TaskSource
from relaxbench.tasks.spec import SourceSpec, TaskSpec, load_task, task_files

__all__ = ["TASK_SOURCES", "Generation", "LoadRequest", "SourceSpec", "TaskFacts", "TaskSource", "TaskSpec",
           "load_sources", "load_task", "loader_for", "source_prefix", "stored_task_facts", "task_files"]
