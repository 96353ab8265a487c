"""An LLM grader behind any OpenAI-compatible chat-completions server (vLLM, TGI, SGLang, hosted APIs):
``--grader-endpoint URL --grader-model NAME``. An integration: the core finds it through the ``relaxbench.graders``
entry-point group (kind ``endpoint``) and never imports it.

A request is what FastChat's ``chat_completion_openai`` sends: ``POST {URL}/chat/completions`` with the model, the
[system, user] messages, ``n=1``, the temperature (0) and ``max_tokens`` (2048), plus a seed when the grader samples;
the verdict is ``choices[0].message.content``. The HTTP client is httpx2. Each request has a timeout; timeouts,
connection errors, a malformed body, 408/409/429 and 5xx are retried with exponential backoff and jitter (honouring
``Retry-After``), FastChat's fixed 10 s sleep replaced; at most ``concurrency`` requests are in flight. A 401, 403 or
404 stops the pass with a one-line error (a wrong key, model or URL fails every request alike); another 4xx fails
that request alone, which then has no verdict and is asked again by the next pass.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import httpx2

from relaxbench.errors import ConfigError, UnknownNameError
from relaxbench.registry import did_you_mean
from relaxbench.grading.graders import GRADERS, Grader, GraderSettings, Messages, Verdict

FATAL_STATUS = frozenset({401, 403, 404})
RETRY_STATUS = frozenset({408, 409, 429})
PROBE_TIMEOUT = 10.0  # seconds: the reachability check before any generation


class EndpointGrader(Grader):
    """A chat-completions server as the grader (see the module docstring)."""

    kind = "endpoint"
    summary = ("--grader-endpoint URL --grader-model NAME: an OpenAI-compatible chat-completions server (vLLM, TGI, "
               "SGLang, hosted APIs), with timeouts, retries and bounded concurrency")
    backoff_first = 0.5  # seconds before the first retry; doubles per retry, with jitter
    backoff_cap = 30.0

    def __init__(self, settings: GraderSettings) -> None:
        super().__init__(settings)
        self.url = (settings.url or "").rstrip("/")
        self.client: httpx2.Client | None = None

    def identity(self) -> dict[str, Any]:
        out = {"kind": self.kind, "url": self.url, "model": self.settings.model,
               "temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens}
        if self.samples:
            out["seed"] = self.settings.seed
        return out

    def label(self) -> str:
        return f"{self.settings.model} at {self.url} (T={self.settings.temperature:g})"

    def self_check(self) -> tuple[bool, str]:
        how = "another seed and another order" if self.samples else "another order"
        return True, (f"the AR arm graded twice, the second time in {how}: a server's batching can change even a "
                      "temperature-0 verdict")

    def _headers(self) -> dict[str, str]:
        name = self.settings.api_key_env
        return {"Authorization": f"Bearer {os.environ[name]}"} if name else {}

    def check(self, device: str) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"--grader-endpoint must be an http(s) URL (the server's base, e.g. "
                              f"http://127.0.0.1:8000/v1), got {self.settings.url!r}")
        name = self.settings.api_key_env
        if name is not None and not os.environ.get(name):
            raise ConfigError(f"--grader-api-key-env {name}: the environment variable {name} is not set")
        try:
            response = httpx2.get(f"{self.url}/models", headers=self._headers(),
                                  timeout=min(self.settings.timeout, PROBE_TIMEOUT))
        except httpx2.HTTPError as exc:
            raise ConfigError(f"grader endpoint {self.url} is unreachable ({type(exc).__name__}: "
                              f"{_first_line(exc)})") from None
        if response.status_code in (401, 403):
            raise ConfigError(f"grader endpoint {self.url} refused the request (HTTP {response.status_code}: "
                              f"{_error_message(response)}); check --grader-api-key-env")
        served = _model_ids(response) if response.status_code == 200 else []
        if served and self.settings.model not in served:
            raise UnknownNameError(f"grader endpoint {self.url} serves no model {self.settings.model!r}"
                                   f"{did_you_mean(self.settings.model, served)} (it serves: {', '.join(served)})")

    def open(self, device: str) -> None:
        if self.client is None:
            self.client = httpx2.Client(headers=self._headers(), timeout=self.settings.timeout,
                                        limits=httpx2.Limits(max_connections=self.settings.concurrency))

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def grade(self, requests: Sequence[Messages], draw: int) -> Iterator[tuple[int, Verdict]]:
        if self.client is None:
            raise RuntimeError("EndpointGrader.grade before open()")
        pool = ThreadPoolExecutor(max_workers=self.settings.concurrency, thread_name_prefix="grader")
        try:
            futures = {pool.submit(self._ask, messages, draw): index for index, messages in enumerate(requests)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # normally all done; on an error or ^C, queued requests are dropped and close() ends those in flight
            pool.shutdown(wait=False, cancel_futures=True)

    def body(self, messages: Messages, draw: int) -> dict[str, Any]:
        """The request body: FastChat's fields, plus a seed when the grader samples."""
        body: dict[str, Any] = {"model": self.settings.model, "messages": [dict(m) for m in messages], "n": 1,
                                "temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens}
        if self.samples:
            body["seed"] = self.settings.seed + draw
        return body

    def _ask(self, messages: Messages, draw: int) -> Verdict:
        assert self.client is not None
        body = self.body(messages, draw)
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                response = self.client.post(f"{self.url}/chat/completions", json=body)
            except httpx2.TimeoutException:
                error = f"timed out after {self.settings.timeout:g} s"
            except httpx2.TransportError as exc:
                error = f"{type(exc).__name__}: {_first_line(exc)}"
            else:
                status = response.status_code
                if status == 200:
                    text = _content(response)
                    if text is not None:
                        return Verdict(text, time.monotonic() - start, attempt)
                    error = "a malformed response body (no choices[0].message)"
                elif status in FATAL_STATUS:
                    raise ConfigError(f"grader endpoint {self.url} answered HTTP {status} "
                                      f"({_error_message(response)}): check --grader-endpoint, --grader-model and "
                                      "--grader-api-key-env")
                elif status in RETRY_STATUS or status >= 500:
                    error = f"HTTP {status}: {_error_message(response)}"
                    wait = _retry_after(response)
                else:
                    return Verdict(None, time.monotonic() - start, attempt,
                                   f"HTTP {status}: {_error_message(response)}")
            if attempt > self.settings.retries:
                return Verdict(None, time.monotonic() - start, attempt, f"{error} (after {attempt} attempts)")
            time.sleep(self._backoff(attempt, wait))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_cap, self.backoff_first * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        return max(delay, min(retry_after, self.backoff_cap)) if retry_after is not None else delay


GRADERS.add(EndpointGrader.kind, EndpointGrader)


def _content(response: httpx2.Response) -> str | None:
    """``choices[0].message.content`` (a null content is an empty verdict); None for a malformed body."""
    try:
        message = response.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _model_ids(response: httpx2.Response) -> list[str]:
    try:
        return [str(m["id"]) for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        return []


def _error_message(response: httpx2.Response) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``), else the start of the body."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message).splitlines()[0][:200]
    except (ValueError, AttributeError):
        pass
    return response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason_phrase


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
