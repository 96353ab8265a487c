"""The driver's side of the vLLM engine: finds the vLLM environment, starts the worker in it and talks to it.

vLLM 0.32 pins transformers below relaxbench's range, so it has an environment of its own (``.venv-vllm``, built by
``make install-vllm``) and relaxbench drives ``relaxbench.integrations.vllm_worker`` there as a subprocess, over
JSON lines (one request, one answer). Nothing in this module imports vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaxbench.errors import ConfigError, RelaxbenchError
from relaxbench.integrations.vllm_arg_table import ArgTableCache, NotSettled, check_one, installed_identity, verdict_key
from relaxbench.integrations.vllm_arg_table import Refused as ArgRefused
from relaxbench.models.zoo import cache_root

ENGINE = "vllm"  # --engine vllm: the name of its executor, and the device its records give

PYTHON_VARIABLE = "RELAXBENCH_VLLM_PYTHON"  # the vLLM environment's interpreter, if not the checkout's .venv-vllm
INSTALL_HINT = "run `make install-vllm` (it builds .venv-vllm)"


class EngineError(RelaxbenchError):
    """The vLLM worker failed or refused a request (one line)."""


def vllm_python() -> Path:
    """The vLLM environment's interpreter, or one line naming the make target that builds it."""
    given = os.environ.get(PYTHON_VARIABLE)
    path = Path(given) if given else Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    if not path.is_file():
        where = f"{PYTHON_VARIABLE}={given}" if given else str(path.parent.parent)
        raise ConfigError(f"the vllm engine is not installed (no environment at {where}): {INSTALL_HINT}")
    return path


@dataclass(frozen=True)
class EngineConfig:
    """One vLLM engine: the target, the drafter's speculative config (None: AR), the concurrency."""

    target: str
    dtype: str
    speculative_config: Mapping[str, Any] | None
    max_num_seqs: int
    max_model_len: int | None = None
    seed: int = 0
    kv_cache_gib: float = 1.0  # the KV cache's memory (on CPU vLLM otherwise reserves most of the machine's)
    engine_args: Mapping[str, Any] = field(default_factory=dict)  # the user's, checked (check_engine_args); they win

    def message(self) -> dict[str, Any]:
        return {"target": self.target, "dtype": self.dtype, "max_num_seqs": self.max_num_seqs, "seed": self.seed,
                "max_model_len": self.max_model_len,
                "kv_cache_gib": self.kv_cache_gib,
                "speculative_config": None if self.speculative_config is None else dict(self.speculative_config),
                "engine_args": dict(self.engine_args)}


def worker_env() -> dict[str, str]:
    """The environment of a process in the vLLM environment: this checkout first on the path, vLLM's logging at
    warnings unless the user sets it."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                         os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "VLLM_CONFIGURE_LOGGING": os.environ.get("VLLM_CONFIGURE_LOGGING", "1"),
            # vLLM's INFO lines (a throughput line every 10 s, every load step) would bury relaxbench's progress:
            # warnings and errors only, unless the user sets the level
            "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}


def check_engine_args(engine_args: Mapping[str, Any], python: Path | None = None) -> dict[str, Any]:
    """``engine_args`` checked against the installed vLLM's own ``EngineArgs`` names and command-line types
    (``integrations/vllm_args.py``, run in the vLLM environment), each value in vLLM's type; an unknown name or a
    value vLLM refuses is one line. What the installed vLLM's argument table settles, and every verdict its parser
    gave before, is answered from the cache without starting that interpreter (``vllm_arg_table``)."""
    python = python or vllm_python()
    given = dict(engine_args)
    identity = installed_identity(python)
    cache = None if identity is None else ArgTableCache(cache_root() / "vllm", identity)
    known: dict[str, dict[str, Any]] = {}
    pending: dict[str, Any] = {}
    for key, value in given.items():
        verdict = _known_verdict(cache, key, value)
        if verdict is None:
            pending[key] = value
        elif not verdict["ok"] and not pending:  # the first refusal in order, with nothing before it unsettled
            raise ConfigError(verdict["error"])
        else:
            known[key] = verdict
    if pending:
        reply = _ask_vllm(python, pending)
        answered = reply.get("verdicts") or {}
        if not answered and not reply.get("ok"):
            raise ConfigError(str(reply.get("error")))
        known.update(answered)
        if cache is not None:
            cache.store(reply.get("table"), {verdict_key(k, v): answered[k] for k, v in pending.items()
                                             if k in answered})
    typed: dict[str, Any] = {}
    for key in given:
        verdict = known[key]
        if not verdict["ok"]:
            raise ConfigError(verdict["error"])
        typed[key] = verdict["value"]
    return typed


def _known_verdict(cache: ArgTableCache | None, key: str, value: Any) -> dict[str, Any] | None:
    """A verdict the cache holds for (key, value), or one its table settles; None when vLLM's parser must say."""
    if cache is None or cache.table is None:
        return None
    stored = cache.verdict(key, value)
    if stored is not None:
        return stored
    try:
        return {"ok": True, "value": check_one(key, value, cache.table)}
    except ArgRefused as exc:
        return {"ok": False, "error": str(exc)}
    except NotSettled:
        return None


def _ask_vllm(python: Path, engine_args: dict[str, Any]) -> dict[str, Any]:
    """The vLLM environment's own verdicts (``python -m relaxbench.integrations.vllm_args``)."""
    try:
        done = subprocess.run([str(python), "-m", "relaxbench.integrations.vllm_args"], capture_output=True, text=True,
                              input=json.dumps({"engine_args": engine_args}), env=worker_env(), timeout=600)
    except subprocess.TimeoutExpired:
        raise EngineError("checking --engine-arg against vLLM took over 600 s") from None
    lines = done.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineError(f"could not check --engine-arg against vLLM (exit {done.returncode}: {tail})")
    return reply


class VllmClient:
    """A running worker; ``start`` an engine, ``generate`` batches on it, ``close`` when done."""

    def __init__(self, python: Path | None = None, stderr: Any = None) -> None:
        python = python or vllm_python()
        self.process = subprocess.Popen([str(python), "-m", "relaxbench.integrations.vllm_worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=sys.stderr if stderr is None else stderr, text=True, env=worker_env())
        self.config: EngineConfig | None = None
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise EngineError(f"the vllm worker exited (code {code}) before answering; its log is above")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise EngineError(f"vllm engine: {reply.get('error')}")
        return reply

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return self._read()

    def start(self, config: EngineConfig) -> dict[str, Any]:
        """Build the engine (reusing the running one when it is the same)."""
        if config == self.config:
            return {}
        self.config = None
        reply = self._ask({"op": "start", "engine": config.message()})
        self.config = config
        return reply

    def generate(self, requests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Submit every request at once; the answer holds one result per request, in order, and the wall time."""
        return self._ask({"op": "generate", "requests": [dict(r) for r in requests]})

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._ask({"op": "close"})
            except (EngineError, OSError, ValueError):
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def __enter__(self) -> VllmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
