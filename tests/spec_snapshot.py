"""The resolved form of every shipped spec: each method, task and suite as the loaders resolve it (``extends:``
applied, defaults filled), the run key of each shipped suite and the runnable entries ``relaxbench list`` shows.

``tests/data/resolved_specs.json`` is this snapshot, last taken when the reflective rule's former name ``judge``
left the shipped suites; ``test_specs.py`` compares it with the current resolution, so a change of any resolved
field or run key fails until it is declared by retaking the snapshot. The module uses only long-standing
interfaces, so it takes the snapshot from any checkout:

    PYTHONPATH=CHECKOUT python tests/spec_snapshot.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _relative(value: Any, root: str) -> Any:
    """``value`` with the checkout's root removed from every path string (the snapshot holds no machine paths)."""
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_relative(v, root) for v in value]
    if isinstance(value, str) and value.startswith(root):
        return value[len(root):].lstrip("/")
    return value


def _suite_run_key(name: str) -> tuple[dict[str, Any], str]:
    """The suite as ``compare --suite NAME`` resolves it, and its run key. The tasks' records are what
    ``YamlTaskLoader.load`` stores (the suite's chat-template arguments over the task's own); no data is read, as
    a task's rows do not enter the key."""
    from relaxbench.cli import build_parser
    from relaxbench.commands.compare import suite_from_args
    from relaxbench.harness.plan import build_arms, run_key
    from relaxbench.tasks import load_task
    from relaxbench.tasks.yaml_tasks import YamlTask

    suite = suite_from_args(build_parser().parse_args(["compare", "--suite", name]))
    if suite.engine == "vllm":  # as compare does: the vLLM engine's own arm (native) is registered with it
        from relaxbench.integrations.vllm_native import register_native

        register_native()
    sources = []
    for given in suite.tasks:
        spec = load_task(given)
        if suite.chat_template_args:
            spec = spec.model_copy(update={"chat_template_args": {**spec.chat_template_args,
                                                                   **suite.chat_template_args}})
        sources.append(YamlTask(spec, (), ""))
    return suite.model_dump(), run_key(suite, build_arms(suite), sources)


def snapshot() -> dict[str, Any]:
    from relaxbench.commands.listing import rows
    from relaxbench.harness.suite import shipped_suites
    from relaxbench.methods import load_method, method_files
    from relaxbench.tasks import load_task, task_files
    from relaxbench.validation import PROJECT_ROOT

    import os
    import tempfile

    suites = {}
    kept = os.environ.get("RELAXBENCH_CACHE")
    with tempfile.TemporaryDirectory() as empty:  # no trained draft heads: a key that holds on every machine
        os.environ["RELAXBENCH_CACHE"] = empty
        try:
            for name in shipped_suites():
                spec, key = _suite_run_key(name)
                suites[name] = {"spec": spec, "run_key": key}
        finally:
            if kept is None:
                os.environ.pop("RELAXBENCH_CACHE")
            else:
                os.environ["RELAXBENCH_CACHE"] = kept
    data = {
        "methods": {name: load_method(name).model_dump() for name in method_files()},
        "tasks": {name: {"spec": load_task(name).model_dump(), "record": load_task(name).to_record()}
                  for name in task_files()},
        "suites": suites,
        "list": {kind: [list(row) for row in rows(kind)] for kind in ("methods", "tasks", "suites")},
    }
    return _relative(json.loads(json.dumps(data, default=str)), str(PROJECT_ROOT))


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(snapshot(), indent=1, sort_keys=True, ensure_ascii=False) + "\n")
