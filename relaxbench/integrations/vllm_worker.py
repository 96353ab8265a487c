"""The vLLM worker: runs in the vLLM environment (``.venv-vllm``), driven by relaxbench over JSON lines.

``python -m relaxbench.integrations.vllm_worker`` reads one request per line on stdin and answers one line on
its own stdout (the process's fd 1 as it started; everything vLLM prints goes to stderr). Requests:

* ``{"op": "start", "engine": {...}}``: build an ``LLM`` (closing the one before): target path, dtype,
  ``speculative_config`` (None for AR), ``max_num_seqs`` (the concurrency), ``max_model_len``, seed, and the
  user's ``engine_args`` (``--engine-arg``, checked by the driver), which win over relaxbench's own settings.
* ``{"op": "generate", "requests": [...]}``: submit every request at once (vLLM batches them up to
  ``max_num_seqs``); each has prompt ids, max tokens, sampling, seed, stop strings and a ``RuleRequest`` (or none).
  The answer has per request the output ids, the finish reason, the per-step records (drafted, accepted, relaxed,
  emitted, policy time), the latency (arrival to finish, time to first token, time per output token) and vLLM's
  own per-request spec-decode metrics, and the batch's wall time.
* ``{"op": "close"}``.

Failures answer ``{"ok": false, "error": "one line"}``: a refused value (a ``ValueError``, vLLM's validation of
its configuration among them) with its reason and nothing else; any other failure also prints its traceback on
stderr. The engine core is a spawned process, hence the ``__main__`` guard. The import footprint is vLLM plus
relaxbench's torch-level core (policies, ops, records).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from relaxbench.integrations.vllm_plugin import ENABLE_VARIABLE
from relaxbench.integrations.vllm_rules import EXTRA_KEY, RuleRequest

FLUSH_EXTENSION = "relaxbench.integrations.vllm_adapter.FlushExtension"

PROTOCOL = 1


class Worker:
    def __init__(self) -> None:
        self.llm: Any = None
        self.spec: dict[str, Any] | None = None
        self.logs = Path(tempfile.mkdtemp(prefix="relaxbench-vllm-"))
        self.counter = 0

    def start(self, engine: dict[str, Any]) -> dict[str, Any]:
        self.close()
        from vllm import LLM

        self.spec = engine.get("speculative_config")
        self.llm = LLM(**engine_kwargs(engine))
        import vllm

        return {"vllm": vllm.__version__}

    def generate(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        from vllm import SamplingParams, TokensPrompt

        if self.llm is None:
            raise RuntimeError("no engine started")
        params, prompts, tags = [], [], []
        self.counter += 1
        log = self.logs / f"g{self.counter}.jsonl"  # one log per call: the adapter appends every request's steps
        for i, req in enumerate(requests):
            tag = f"g{self.counter}r{i}"
            rule = req.get("rule")
            extra = None
            if self.spec is not None:
                extra = {EXTRA_KEY: RuleRequest(tag=tag, log=str(log), **(rule or {})).model_dump()}
            temperature = float(req.get("temperature", 0.0))
            params.append(SamplingParams(
                max_tokens=int(req["max_tokens"]), temperature=temperature, top_k=int(req.get("top_k") or 0) or -1,
                top_p=float(req.get("top_p", 1.0)), seed=req.get("seed") if temperature > 0 else None,
                stop=list(req.get("stop") or []) or None, include_stop_str_in_output=True,
                ignore_eos=bool(req.get("ignore_eos", False)), extra_args=extra))
            prompts.append(TokensPrompt(prompt_token_ids=list(req["prompt_ids"])))
            tags.append(tag)
        t0 = time.perf_counter()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        steps: dict[str, list[dict[str, Any]]] = {tag: [] for tag in tags}
        if self.spec is not None:
            self.llm.collective_rpc("relaxbench_flush")
            if log.exists():
                for line in log.read_text(encoding="utf-8").splitlines():
                    if line:
                        step = json.loads(line)
                        steps.setdefault(step["tag"], []).append(step)
                log.unlink()
        return {"wall": wall, "results": [self._result(o, steps[tag]) for o, tag in zip(outputs, tags)]}

    def _result(self, output: Any, steps: list[dict[str, Any]]) -> dict[str, Any]:
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        rounds = trim_rounds(ids, steps, speculative=self.spec is not None)
        metrics = getattr(output, "metrics", None)
        spec = getattr(completion, "spec_decode_metrics", None)
        return {"output_ids": ids, "finish_reason": completion.finish_reason, "rounds": rounds,
                "verify_steps": verify_steps(steps),
                "latency": latency(metrics, len(ids)),
                "spec_metrics": None if spec is None else {
                    "num_draft_tokens": spec.num_draft_tokens, "histogram": list(spec.histogram),
                    "per_step_accepted": list(spec.per_step_accepted),
                    "per_step_drafted": list(spec.per_step_drafted)}}

    def close(self) -> None:
        if self.llm is not None:
            import gc

            engine = getattr(self.llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.llm = None
            gc.collect()


def engine_kwargs(engine: dict[str, Any]) -> dict[str, Any]:
    """``vllm.LLM``'s arguments for a start request: relaxbench's settings, then the user's ``engine_args``
    (``--engine-arg``, checked by the driver against this vLLM), which win; with ``gpu_memory_utilization`` the KV
    cache takes that share of the device instead of relaxbench's fixed size."""
    spec = engine.get("speculative_config")
    kwargs: dict[str, Any] = dict(
        model=engine["target"], dtype=engine.get("dtype", "auto"), enforce_eager=True,
        max_num_seqs=int(engine.get("max_num_seqs", 1)), seed=int(engine.get("seed", 0)),
        disable_log_stats=False, speculative_config=spec,
        kv_cache_memory_bytes=int(float(engine.get("kv_cache_gib") or 1) * 2 ** 30))
    if engine.get("max_model_len"):
        kwargs["max_model_len"] = int(engine["max_model_len"])
    if spec is not None:
        kwargs["per_request_spec_decode_metrics"] = "detailed"
        kwargs["worker_extension_cls"] = FLUSH_EXTENSION  # lets generate() ask the adapter for its records
    user = dict(engine.get("engine_args") or {})
    if "gpu_memory_utilization" in user:
        kwargs.pop("kv_cache_memory_bytes")
    return {**kwargs, **user}


def trim_rounds(output_ids: list[int], steps: list[dict[str, Any]], speculative: bool) -> dict[str, list[Any]]:
    """The request's rounds: its first token from the prefill step (a round that drafted nothing), then one per
    verification step from the adapter's log, the last cut where the output ends (vLLM stops a request inside a
    step at EOS, a stop string or max tokens; a step computed after the request finished is dropped). A step in
    which no request of the batch had drafts runs vLLM's plain sampler, not the rejection sampler, so it leaves
    no log line: each such token is a round that drafted nothing, appended at the end. Without speculation every
    token is a round of its own. Every field a step reports is kept (a column per name, None where a round has no
    value: a plain round), so a per-round fact the adapter adds reaches the store without a change here."""
    n = len(output_ids)
    plain = {"drafted": 0, "accepted": 0, "relaxed": 0, "emitted": 1, "t_policy": 0.0}
    records = [dict(plain)] + (steps if speculative else []) if n else []
    kept, total = [], 0
    for step in records:
        if total >= n:
            break
        emitted = min(int(step["emitted"]), n - total)
        accepted = min(int(step["accepted"]), emitted)  # the cut falls among the accepted drafts or at the bonus
        relaxed = min(int(step["relaxed"]), accepted)
        kept.append({**step, "emitted": emitted, "accepted": accepted, "relaxed": relaxed})
        total += emitted
    kept += [dict(plain) for _ in range(n - total)]
    names = list(dict.fromkeys([*plain, *(key for step in kept for key in step)]))
    return {key: [step.get(key) for step in kept] for key in names}


def verify_steps(steps: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The adapter's own counts of the steps that verified drafts, as it decided them (before the cut at the end
    of the output): what vLLM's per-request spec-decode metrics count."""
    drafted = [s for s in steps if s["drafted"]]
    return {"drafted": [int(s["drafted"]) for s in drafted], "accepted": [int(s["accepted"]) for s in drafted]}


def latency(metrics: Any, n_tokens: int) -> dict[str, float | None]:
    """Arrival to finish, time to first token, time per output token after the first (seconds), from vLLM's
    per-request stats (engine-core timestamps)."""
    if metrics is None or not getattr(metrics, "first_token_ts", 0):
        return {"e2e": None, "ttft": None, "tpot": None}
    ttft = float(metrics.first_token_latency)
    decode = float(metrics.last_token_ts - metrics.first_token_ts)
    return {"e2e": ttft + decode, "ttft": ttft, "tpot": decode / (n_tokens - 1) if n_tokens > 1 else None}


def error_line(exc: BaseException) -> str:
    """One line that says why: vLLM refuses a bad engine argument with a pydantic ``ValidationError`` whose first
    line only names the config ("1 validation error for ModelConfig"), the reason is in its error list."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and getattr(exc, "title", None):
        try:
            reasons = [str(e.get("msg", "")).removeprefix("Value error, ") for e in errors()]
        except Exception:  # not pydantic's after all: fall back to the message's first line
            reasons = []
        if reasons and reasons[0]:
            return f"{exc.title}: {reasons[0].splitlines()[0]}"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def serve(inp: TextIO, out: TextIO) -> None:
    worker = Worker()
    try:
        for line in inp:
            if not line.strip():
                continue
            message = json.loads(line)
            op = message.get("op")
            try:
                if op == "start":
                    reply = {"ok": True, **worker.start(message["engine"])}
                elif op == "generate":
                    reply = {"ok": True, **worker.generate(message["requests"])}
                elif op == "close":
                    worker.close()
                    out.write(json.dumps({"ok": True}) + "\n")
                    out.flush()
                    return
                else:
                    reply = {"ok": False, "error": f"unknown op {op!r}"}
            except Exception as exc:  # reported to the driver as one line
                if not isinstance(exc, ValueError):  # a refused value says all in its line; anything else is a bug
                    traceback.print_exc(file=sys.stderr)
                reply = {"ok": False, "error": error_line(exc)}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        worker.close()


def main() -> None:
    os.environ[ENABLE_VARIABLE] = "1"  # the plugin acts in this worker's engine processes only
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # vLLM's own output (and its engine core's) goes to stderr
    sys.stdout = sys.stderr
    replies.write(json.dumps({"ok": True, "protocol": PROTOCOL}) + "\n")
    replies.flush()
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
