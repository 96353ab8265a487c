"""The LLM-grader options shared by ``compare`` and ``rescore``: parsed into a grader and checked before anything
expensive runs, the grading pass announced with what it cost, and which tasks of a stored run have a grading protocol
(``rescore``). The grading itself is ``relaxbench.grading``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relaxbench.errors import ConfigError, DataError

# option (without --grader-) -> GraderSettings field, for the options that tune a grader
TUNING = {"model": "model", "api-key-env": "api_key_env", "temperature": "temperature", "max-tokens": "max_tokens",
          "timeout": "timeout", "retries": "retries", "concurrency": "concurrency", "dtype": "dtype",
          "seed": "seed"}


OLD_PREFIX = "--judge"  # the options' earlier names (--judge, --judge-endpoint, ...): still accepted, not shown


def add_grader_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM grader (tasks with a grading protocol: MT-Bench's capability by FastChat's "
                             "grading, the jbb tasks' refusal classifier; every --grader* option is also accepted "
                             "as --judge*)")

    def option(suffix: str, **kwargs: Any) -> None:
        g.add_argument(f"--grader{suffix}", default=None, **kwargs)
        hidden = {k: v for k, v in kwargs.items() if k in ("type", "metavar")}
        g.add_argument(f"{OLD_PREFIX}{suffix}", dest=f"grader{suffix}".replace("-", "_"), default=None,
                       help=argparse.SUPPRESS, **hidden)

    option("", metavar="MODEL",
           help="a local grader: any model name the loader resolves (packaged alias, local dir, .gguf, hub id), run "
                "on --device after generation, greedy")
    option("-endpoint", metavar="URL",
           help="an OpenAI-compatible chat-completions server as the grader (its base URL, e.g. "
                "http://127.0.0.1:8000/v1)")
    option("-model", metavar="NAME", help="the model the endpoint serves")
    option("-api-key-env", metavar="VAR",
           help="the environment variable holding the endpoint's API key (default: no key sent)")
    option("-temperature", type=float, help="0 = greedy (default, as FastChat)")
    option("-max-tokens", type=int, help="verdict length limit (default 2048, as FastChat)")
    option("-seed", type=int, help="seed of a sampling grader (default 0)")
    option("-timeout", type=float, help="endpoint: seconds per request (default 120)")
    option("-retries", type=int, help="endpoint: retries of a failed request, with exponential backoff (default 5)")
    option("-concurrency", type=int, help="endpoint: requests in flight (default 4)")
    option("-dtype", help="local grader: dtype (default: per device)")


def grader_from_args(args: argparse.Namespace) -> Any:
    """The grader the options describe (a ``relaxbench.grading.graders.Grader``), or None when none is given. Only the
    options are validated here; ``grader.check(device)`` then checks the model, the endpoint and the API key."""
    from relaxbench.grading.graders import GraderSettings, make_grader
    from relaxbench.validation import validate

    local, url = args.grader, args.grader_endpoint
    given = {option: getattr(args, "grader_" + option.replace("-", "_")) for option in TUNING}
    given = {option: value for option, value in given.items() if value is not None}
    if local and url:
        raise ConfigError("give --grader MODEL (a local grader) or --grader-endpoint URL --grader-model NAME, not both")
    if url and "model" not in given:
        raise ConfigError("--grader-endpoint needs --grader-model NAME (the model the server serves)")
    if not local and not url:
        if given:
            raise ConfigError(f"--grader-{next(iter(given))} needs a grader: --grader MODEL or --grader-endpoint URL "
                              "--grader-model NAME")
        return None
    if local and "model" in given:
        raise ConfigError("--grader-model names an endpoint's model; a local grader is --grader MODEL alone")
    fields: dict[str, Any] = {TUNING[option]: value for option, value in given.items()}
    fields.update({"kind": "local", "model": local} if local else {"kind": "endpoint", "url": url})
    return make_grader(validate(GraderSettings, fields, "command line", "grader option"))


IDENTITY_FREE = ("origin", "description")  # task record fields that do not decide what was generated


def _graded_spec(name: str, record: Mapping[str, Any]) -> Any:
    """The task spec that says how to grade a stored task: its own file (``origin``) or the task of that name,
    whichever defines the task exactly as it was run (the record, less where it came from) and has a grader. The
    grader is not part of the record, so a run made before its task had a grading protocol can still be graded."""
    from relaxbench.harness.store import dumps
    from relaxbench.tasks import load_task, task_files

    def identity(value: Mapping[str, Any]) -> dict[str, Any]:  # as stored: JSON (tuples read back as lists)
        return {key: v for key, v in json.loads(dumps(value)).items() if key not in IDENTITY_FREE}

    origin = str(record.get("origin") or "")
    candidates = ([origin] if origin and Path(origin).is_file() else []) + ([name] if name in task_files() else [])
    for candidate in candidates:
        try:
            spec = load_task(candidate)
        except ConfigError:  # a task file gone bad since the run: it cannot be graded from there
            continue
        if spec.grader is not None and identity(spec.to_record()) == identity(record):
            return spec
    return None


def stored_graded_tasks(store: Any, run_id: int) -> list[Any]:
    """The tasks of a stored run that have a grading protocol, with their items read again from the same data (the
    data fingerprint must match the one stored: the answers were written to those questions)."""
    from relaxbench.grading.step import GradedTask
    from relaxbench.scoring import make_scorer
    from relaxbench.tasks import source_prefix
    from relaxbench.tasks.yaml_tasks import load_items

    run = store.rows("SELECT suite_json FROM runs WHERE run_id=?", (run_id,))
    data_files = (json.loads(run[0]["suite_json"]).get("data_files") or {}) if run else {}
    out = []
    for cell in store.rows("SELECT task, task_json, data_fingerprint FROM cells WHERE run_id=? AND is_baseline=1 "
                           "ORDER BY task", (run_id,)):
        name = cell["task"]
        if source_prefix(name) is not None:
            continue  # a plug-in's task (lm_eval:NAME): no grading protocol
        spec = _graded_spec(name, json.loads(cell["task_json"]))
        if spec is None:
            continue
        items, digest = load_items(spec, data_files.get(name))
        if digest != cell["data_fingerprint"]:
            raise DataError(f"task {name!r}: its data changed since the run (fingerprint {digest}, stored "
                            f"{cell['data_fingerprint']}), so its stored answers cannot be graded against it")
        out.append(GradedTask(name, {item.item_id: item for item in items},
                              make_scorer(spec.grader, spec.grader_args)))
    return out
