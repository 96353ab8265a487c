"""The ``lm_eval:NAME`` task source's loader, registered with the harness through the entry-point group
``relaxbench.task_sources`` (pyproject.toml). Kept light: lm-eval itself is imported only when tasks are loaded,
so reading a stored run that holds lm-eval tasks does not pay for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relaxbench.tasks.source import LoadRequest, TaskFacts, TaskSource


class LmEvalLoader:
    """Loads lm-evaluation-harness tasks (their own documents, prompts, filters and metrics); ``--data-file`` does
    not apply (lm-eval reads its own data). Reads the suite options ``num_fewshot``, ``include_paths`` and
    ``apply_chat_template``."""

    reads_data_files = False

    def load(self, names: Sequence[str], request: LoadRequest) -> dict[str, list[TaskSource]]:
        from relaxbench.integrations.lm_eval_source import ChatTemplate, load_lm_eval_tasks

        options = request.options
        chat = None
        if options.get("apply_chat_template"):  # prompts rendered with the target's chat template need its tokenizer
            from relaxbench.models import load_tokenizer

            chat = ChatTemplate(load_tokenizer(request.target), request.target.replace("/", "__"),
                                dict(options.get("chat_template_args") or {}))
        by_limit: dict[int | None, list[str]] = {}  # one load per distinct item limit (--task-limit)
        for name in names:
            by_limit.setdefault(request.limit_for(name), []).append(name)
        loaded: dict[str, list[TaskSource]] = {}
        for limit, group in by_limit.items():
            loaded.update(load_lm_eval_tasks(group, include_paths=options.get("include_paths") or (), limit=limit,
                                             num_fewshot=options.get("num_fewshot"), chat=chat))
        return {name: loaded[name] for name in names}

    def facts(self, record: Mapping[str, Any], scorer: str) -> TaskFacts:
        """lm-eval's own record says whether the target alone scored it and which ``METRIC,FILTER`` keys exist."""
        own = record.get("lm_eval") or {}
        return TaskFacts(bool(own.get("target_alone")), tuple(own.get("metric_keys", ())))


LOADER = LmEvalLoader()
