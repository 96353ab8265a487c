"""The LLM-judge options shared by ``compare`` and ``rescore``: parsed into a judge and checked before anything
expensive runs, and the judging pass announced with what it cost."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from relaxbench.errors import ConfigError

# option (without --judge-) -> JudgeSettings field, for the options that tune a judge
TUNING = {"model": "model", "api-key-env": "api_key_env", "temperature": "temperature", "max-tokens": "max_tokens",
          "timeout": "timeout", "retries": "retries", "concurrency": "concurrency", "dtype": "dtype",
          "seed": "seed"}


def add_judge_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM judge (the capability of tasks with a judge protocol: MT-Bench, FastChat grading)")
    g.add_argument("--judge", metavar="MODEL", default=None,
                   help="a local judge: any model name the loader resolves (packaged alias, local dir, .gguf, hub "
                        "id), run on --device after generation, greedy")
    g.add_argument("--judge-endpoint", metavar="URL", default=None,
                   help="an OpenAI-compatible chat-completions server as the judge (its base URL, e.g. "
                        "http://127.0.0.1:8000/v1)")
    g.add_argument("--judge-model", metavar="NAME", default=None, help="the model the endpoint serves")
    g.add_argument("--judge-api-key-env", metavar="VAR", default=None,
                   help="the environment variable holding the endpoint's API key (default: no key sent)")
    g.add_argument("--judge-temperature", type=float, default=None, help="0 = greedy (default, as FastChat)")
    g.add_argument("--judge-max-tokens", type=int, default=None, help="verdict length limit (default 2048, as "
                                                                      "FastChat)")
    g.add_argument("--judge-seed", type=int, default=None, help="seed of a sampling judge (default 0)")
    g.add_argument("--judge-timeout", type=float, default=None, help="endpoint: seconds per request (default 120)")
    g.add_argument("--judge-retries", type=int, default=None,
                   help="endpoint: retries of a failed request, with exponential backoff (default 5)")
    g.add_argument("--judge-concurrency", type=int, default=None, help="endpoint: requests in flight (default 4)")
    g.add_argument("--judge-dtype", default=None, help="local judge: dtype (default: per device)")


def judge_from_args(args: argparse.Namespace) -> Any:
    """The judge the options describe (a ``relaxbench.scoring.judges.Judge``), or None when none is given. Only the
    options are validated here; ``judge.check(device)`` then checks the model, the endpoint and the API key."""
    from relaxbench.scoring.judges import JudgeSettings, make_judge
    from relaxbench.validation import validate

    local, url = args.judge, args.judge_endpoint
    given = {option: getattr(args, "judge_" + option.replace("-", "_")) for option in TUNING}
    given = {option: value for option, value in given.items() if value is not None}
    if local and url:
        raise ConfigError("give --judge MODEL (a local judge) or --judge-endpoint URL --judge-model NAME, not both")
    if url and "model" not in given:
        raise ConfigError("--judge-endpoint needs --judge-model NAME (the model the server serves)")
    if not local and not url:
        if given:
            raise ConfigError(f"--judge-{next(iter(given))} needs a judge: --judge MODEL or --judge-endpoint URL "
                              "--judge-model NAME")
        return None
    if local and "model" in given:
        raise ConfigError("--judge-model names an endpoint's model; a local judge is --judge MODEL alone")
    fields: dict[str, Any] = {TUNING[option]: value for option, value in given.items()}
    fields.update({"kind": "local", "model": local} if local else {"kind": "endpoint", "url": url})
    return make_judge(validate(JudgeSettings, fields, "command line", "judge option"))


def check_judging(judge: Any, tasks: Sequence[Any], device: str) -> None:
    """Before any generation: every judge prompt and reference answer the tasks need exists (fetched now), and the
    judge can work (its model resolves; its endpoint answers and the API key variable is set)."""
    for task in tasks:
        task.check()
    judge.check(device)


def judge_and_announce(store: Any, run_id: int, tasks: Sequence[Any], judge: Any, device: str, progress: Any) -> Any:
    """Run the judging pass and say on stderr what it did and how long it took; its tally."""
    from relaxbench.harness.judging import judge_tasks
    from relaxbench.ui import console

    start = time.perf_counter()
    with progress:
        tally = judge_tasks(store, run_id, tasks, judge, device, progress)
    wall = time.perf_counter() - start
    err = console(stderr=True)
    text = (f"judge {judge.label()}: {tally.asked} verdicts asked, {tally.cached} found in the store, "
            f"{tally.unparseable} without a rating, {tally.failed} failed; {wall:.1f} s "
            f"(judge calls {tally.seconds:.1f} s)")
    if tally.failed:
        text += f"; failures: {'; '.join(tally.errors)} (relaxbench rescore asks again)"
    err.print(text, markup=False, highlight=False)
    return tally
