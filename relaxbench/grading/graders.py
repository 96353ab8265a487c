"""LLM graders: the models that grade open-ended answers when a task's capability is graded (``llm_grader.py``).

A grader turns chat messages into verdict texts. Two kinds: ``local`` (here: a model our loader resolves, run
in-process through our own generation loop) and ``endpoint`` (any OpenAI-compatible chat-completions server; an
integration, ``relaxbench.integrations.endpoint_grader``, found through the ``relaxbench.graders`` entry-point group
like any third-party grader). What decides a grader's verdicts is its ``identity()``: hashed, it keys the cache of
verdicts in the results store, so the same (grader, prompt, answer) is never paid for twice.
"""

from __future__ import annotations

import gc
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import model_validator

from relaxbench.errors import ConfigError
from relaxbench.registry import Registry
from relaxbench.validation import Integer, Number, PositiveInteger, Spec, Text

Messages = Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class Verdict:
    """A grader's reply to one request: its text, or None when the call failed after every retry (then nothing is
    cached, and the next grading pass asks again)."""

    text: str | None
    seconds: float
    attempts: int = 1
    error: str | None = None


class GraderSettings(Spec):
    """A grader as the command line gives it. The defaults are FastChat's for MT-Bench single-answer grading:
    temperature 0, at most 2048 new tokens."""

    kind: Text = "local"
    model: Text
    url: Text | None = None  # endpoint: the server's base URL (…/v1)
    api_key_env: Text | None = None  # endpoint: the environment variable that holds the API key
    temperature: Number = 0.0
    max_tokens: PositiveInteger = 2048
    timeout: Number = 120.0  # endpoint: seconds per request
    retries: Integer = 5  # endpoint: retries after a failed attempt (timeouts, 408/409/429, 5xx)
    concurrency: PositiveInteger = 4  # endpoint: requests in flight at once
    seed: Integer = 0  # when the grader samples: the first pass uses seed, the self-agreement pass seed + 1
    dtype: Text = "auto"  # local: the grader model's dtype

    @model_validator(mode="after")
    def _bounds(self) -> GraderSettings:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        return self


class Grader(ABC):
    """One grader. ``check`` fails fast on a bad configuration (before any generation); ``open`` loads or connects,
    ``close`` frees; ``grade`` answers requests, yielding (index, verdict) as each finishes so every verdict can be
    stored at once."""

    kind: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __init__(self, settings: GraderSettings) -> None:
        self.settings = settings

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What decides the verdicts (model, decoding settings; never a secret): hashed into the cache key."""

    def label(self) -> str:
        """The grader as a report names it."""
        return f"{self.settings.model} ({self.kind}, T={self.settings.temperature:g})"

    @property
    def samples(self) -> bool:
        return self.settings.temperature > 0

    def self_check(self) -> tuple[bool, str]:
        """Whether grading the AR arm a second time can give other verdicts (then it is done, and the report prints
        the grader's agreement with itself), and how the second pass differs or why it is not made."""
        if self.samples:
            return True, f"the AR arm graded twice, with seeds {self.settings.seed} and {self.settings.seed + 1}"
        return False, "not measured"

    def describe(self) -> dict[str, Any]:
        """What the store keeps about the grader for the report (its identity, label and self-check policy)."""
        repeat, how = self.self_check()
        return {"identity": self.identity(), "label": self.label(), "self_check": repeat, "self_check_how": how}

    def hash(self) -> str:
        return grader_hash(self.identity())

    def check(self, device: str) -> None:
        """Raise a one-line ``RelaxbenchError`` when the grader cannot work (before any generation)."""

    def open(self, device: str) -> None:
        """Load the model or connect (once, before the first request)."""

    def close(self) -> None:
        """Free what ``open`` took."""

    @abstractmethod
    def grade(self, requests: Sequence[Messages], draw: int) -> Iterator[tuple[int, Verdict]]:
        """The verdict of each request (any order), ``draw`` 0 for the first pass and 1 for the self-check."""


# plug-ins register under relaxbench.graders (relaxbench.judges, the group's earlier name, is read too)
GRADERS: Registry[type[Grader]] = Registry("grader", ("relaxbench.graders", "relaxbench.judges"))


def grader_hash(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def make_grader(settings: GraderSettings) -> Grader:
    return GRADERS.get(settings.kind)(settings)


@GRADERS.register("local")
class LocalGrader(Grader):
    """A causal LM our model loader resolves (packaged alias, local directory, .gguf or hub id), on the run's
    device, generating through relaxbench's own loop with no drafter (the AR baseline's decoder): greedy by default,
    one request at a time, with the model's chat template over FastChat's [system, user] messages."""

    kind = "local"
    summary = ("--grader MODEL: a model the loader resolves (alias, directory, .gguf, hub id), in-process on the run's "
               "device through relaxbench's own loop, greedy by default")

    def __init__(self, settings: GraderSettings) -> None:
        super().__init__(settings)
        self.model: Any = None
        self.device_type: str | None = None  # set by check(): numerics differ across device types

    def identity(self) -> dict[str, Any]:
        out = {"kind": self.kind, "model": self.settings.model, "dtype": self.settings.dtype,
               "device": self.device_type, "temperature": self.settings.temperature,
               "max_tokens": self.settings.max_tokens}
        if self.samples:
            out["seed"] = self.settings.seed
        return out

    def self_check(self) -> tuple[bool, str]:
        if self.samples:
            return super().self_check()
        return False, ("not measured: a greedy grader run in-process, one prompt at a time, repeats every verdict "
                       "token for token, so a second pass would agree by construction (--grader-temperature > 0 "
                       "measures it across seeds)")

    def check(self, device: str) -> None:
        from relaxbench.models.dtypes import parse_dtype
        from relaxbench.models.resolve import resolve_model

        for name in ("url", "api_key_env"):
            if getattr(self.settings, name) is not None:
                raise ConfigError(f"--grader-{name.replace('_', '-')} applies to an endpoint grader "
                                  "(--grader-endpoint URL --grader-model NAME), not to a local --grader")
        parse_dtype(self.settings.dtype, device)
        self.device_type = device.split(":")[0]
        location = resolve_model(self.settings.model)
        if location.kind == "hub":
            _check_hub_model(self.settings.model)

    def open(self, device: str) -> None:
        from relaxbench.models import load_model

        if self.model is None:
            self.model = load_model(self.settings.model, dtype=self.settings.dtype, device=device, quiet=True)

    def close(self) -> None:
        if self.model is None:
            return
        device = self.model.device
        self.model = None
        gc.collect()
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    def grade(self, requests: Sequence[Messages], draw: int) -> Iterator[tuple[int, Verdict]]:
        from relaxbench.decoders import build_decoder
        from relaxbench.decoding.loop import DecodeConfig
        from relaxbench.decoding.prompts import encode_prompt
        from relaxbench.methods import MethodSpec
        from relaxbench.ops.sampling import SamplingParams

        if self.model is None:
            raise RuntimeError("LocalGrader.grade before open()")
        config = DecodeConfig(k=0, max_new_tokens=self.settings.max_tokens,
                              sampling=SamplingParams(self.settings.temperature), seed=self.settings.seed + draw)
        decoder = build_decoder(MethodSpec(name="grader", policy="none", source="grader"), self.model, None, config)
        for index, messages in enumerate(requests):
            result = decoder.generate(encode_prompt(self.model.tokenizer, [dict(m) for m in messages]))
            yield index, Verdict(result.text, result.time_total)


def _check_hub_model(name: str) -> None:
    """A hub id must be reachable on the hub or already in the local Hugging Face cache (else the grader would fail
    only after the whole generation)."""
    from relaxbench.errors import ModelError
    from relaxbench.models.resolve import hub_reachable
    from relaxbench.models.zoo import MODELS
    from relaxbench.registry import did_you_mean

    if hub_reachable(timeout=3.0):
        from huggingface_hub import repo_exists

        try:
            found = repo_exists(name)
        except Exception:  # noqa: BLE001 - the hub client raises many types; an unanswered question is no error
            return
        if not found:
            raise ModelError(f"unknown grader model {name!r}: not a packaged alias, local path or hub model"
                             f"{did_you_mean(name, MODELS.names())}")
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise ModelError(f"unknown grader model {name!r}: not a packaged alias or local path, and the hub is "
                         f"unreachable with no cached copy{did_you_mean(name, MODELS.names())} "
                         "(relaxbench models list)")
